/*
 * dialect.c: whose allocator settings a command reads, checks and advises -- PyTorch's (PYTORCH_CUDA_ALLOC_CONF) or
 * torch_npu's (PYTORCH_NPU_ALLOC_CONF) -- by one rule, in one order, for every command (docs/TOOL.md, "The
 * framework"). A variable the user's framework never reads is advice that does nothing: torch_npu reads
 * PYTORCH_NPU_ALLOC_CONF alone (Ascend/pytorch v6.0.rc2-pytorch2.1.0, torch_npu/csrc/core/npu/NPUCachingAllocator.cpp
 * :600; v7.3.1-pytorch2.9.0, NPUAllocatorConfig.h:61), PyTorch on a GPU never reads it.
 * Owns the order of the evidence and what contradicts what; it reads the environment only for the evidence, and
 * neither opens a device nor parses settings (that is src/conf/).
 */
#include "dialect.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *dialect_var(hbm_dialect d)
{
    return d == HBM_DIALECT_NPU ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF";
}

const char *dialect_framework(hbm_dialect d) { return d == HBM_DIALECT_NPU ? "torch_npu" : "PyTorch"; }

int dialect_of_backend(const char *spec)
{
    size_t name = strcspn(spec, ":");
    if ((name == 3 && !strncmp(spec, "acl", 3)) || (name == 3 && !strncmp(spec, "npu", 3)))
        return 1;
    if (name == 4 && !strncmp(spec, "cuda", 4))
        return 0;
    int d = -1;
    for (const char *p = spec[name] ? spec + name + 1 : ""; *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0)) {
        if (!strncmp(p, "dialect=npu", 11) && (!p[11] || p[11] == ','))
            d = 1; /* the last one given, as the sim reads its options */
        else if (!strncmp(p, "dialect=cuda", 12) && (!p[12] || p[12] == ','))
            d = 0;
    }
    return d;
}

/* A snapshot's recorded stacks (with C++ frames, _record_memory_history's default) name the allocator that made
 * it: torch_npu's NPUCachingAllocator.cpp and torch_npu/ files, or PyTorch's CUDACachingAllocator.cpp. */
static int trace_says(const trace *t, char *why, size_t len)
{
    static const char *const npu[] = {"NPUCachingAllocator", "torch_npu/", "c10_npu::"};
    static const char *const cuda[] = {"CUDACachingAllocator", "RegisterCUDA.cpp", "c10::cuda::"};
    const char *seen[2] = {NULL, NULL};
    for (size_t i = 0; t && i < t->meta.ntexts && !(seen[0] && seen[1]); i++) {
        const char *s = t->meta.texts[i];
        for (size_t k = 0; s && k < 3; k++) {
            if (!seen[1] && strstr(s, npu[k]))
                seen[1] = npu[k];
            if (!seen[0] && strstr(s, cuda[k]))
                seen[0] = cuda[k];
        }
    }
    if (!seen[0] == !seen[1])
        return -1; /* neither, or both */
    snprintf(why, len, "the snapshot: its recorded stacks name %s", seen[1] ? seen[1] : seen[0]);
    return seen[1] != NULL;
}

/* The variable set is the framework's that reads it; with neither set, CANN's set_env.sh (which torch_npu needs
 * to run: "Please run set_env.sh first", torch_npu/_inductor/cpp_builder.py, v7.3.1-pytorch2.9.0) exports
 * ASCEND_HOME_PATH. */
static int env_says(char *why, size_t len)
{
    int cuda = getenv("PYTORCH_CUDA_ALLOC_CONF") != NULL, npu = getenv("PYTORCH_NPU_ALLOC_CONF") != NULL;
    if (cuda != npu) {
        snprintf(why, len, "the environment: %s is set", npu ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF");
        return npu;
    }
    if (!cuda && getenv("ASCEND_HOME_PATH")) {
        snprintf(why, len, "the environment: ASCEND_HOME_PATH is set, by CANN's set_env.sh");
        return 1;
    }
    return -1;
}

int dialect_decide(const dialect_evidence *e, dialect_choice *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    /* 1. The command line: every flag that names a framework must name the same one. */
    struct {
        int d;
        char what[240];
    } flag[4];
    int n = 0;
    if (e->dialect) {
        if (strcmp(e->dialect, "cuda") && strcmp(e->dialect, "npu")) {
            snprintf(err, errlen, "--dialect must be cuda or npu, not '%s'", e->dialect);
            return -1;
        }
        flag[n].d = !strcmp(e->dialect, "npu");
        snprintf(flag[n++].what, sizeof flag[0].what, "--dialect %s", e->dialect);
    }
    if (e->torch) {
        flag[n].d = 0;
        snprintf(flag[n++].what, sizeof flag[0].what, "--torch %s", e->torch);
    }
    if (e->torch_npu) {
        flag[n].d = 1;
        snprintf(flag[n++].what, sizeof flag[0].what, "--torch-npu %s", e->torch_npu);
    }
    if (e->backend && dialect_of_backend(e->backend) >= 0) {
        flag[n].d = dialect_of_backend(e->backend);
        snprintf(flag[n++].what, sizeof flag[0].what, "--backend '%.200s'", e->backend);
    }
    for (int k = 1; k < n; k++)
        if (flag[k].d != flag[0].d) {
            snprintf(err, errlen, "%s contradicts %s: one is %s's (%s), the other %s's (%s)", flag[0].what,
                     flag[k].what, dialect_framework(HBM_DIALECT_NPU), dialect_var(HBM_DIALECT_NPU),
                     dialect_framework(HBM_DIALECT_CUDA), dialect_var(HBM_DIALECT_CUDA));
            return -1;
        }
    /* 2.-5. The snapshot, the logs, the machine, the environment: the first that says decides when the command line
     * does not. */
    struct {
        int d;
        char why[240];
    } said[4];
    said[0].d = trace_says(e->t, said[0].why, sizeof said[0].why);
    said[1].d = e->log;
    snprintf(said[1].why, sizeof said[1].why, "%s", e->log_why ? e->log_why : "the logs");
    said[2].d = e->machine;
    snprintf(said[2].why, sizeof said[2].why, "%s", e->machine_why ? e->machine_why : "this machine");
    said[3].d = e->no_env ? -1 : env_says(said[3].why, sizeof said[3].why);
    int by = -1; /* which of said decided */
    if (n) {
        out->d = flag[0].d ? HBM_DIALECT_NPU : HBM_DIALECT_CUDA;
        out->given = 1;
        snprintf(out->from, sizeof out->from, "%s", flag[0].what);
    } else {
        for (int k = 0; k < 4 && by < 0; k++)
            if (said[k].d >= 0)
                by = k;
        out->d = by >= 0 && said[by].d ? HBM_DIALECT_NPU : HBM_DIALECT_CUDA;
        snprintf(out->from, sizeof out->from, "%s", by >= 0 ? said[by].why : "the default: nothing names torch_npu");
    }
    for (int k = by + 1; k < 4; k++) /* outranked evidence that says otherwise: named */
        if (said[k].d >= 0 && said[k].d != (out->d == HBM_DIALECT_NPU)) {
            size_t used = strlen(out->note);
            snprintf(out->note + used, sizeof out->note - used, "%s%s (%s's)", used ? "; " : "", said[k].why,
                     dialect_framework(said[k].d ? HBM_DIALECT_NPU : HBM_DIALECT_CUDA));
        }
    out->version = e->torch ? e->torch : e->torch_npu;
    if (out->version) {
        char name[200], tag[80];
        if (hbm_release_describe(out->d, out->version, name, sizeof name, tag, sizeof tag) != HBM_OK) {
            snprintf(err, errlen, "%s", name);
            return -1;
        }
    }
    return 0;
}

void dialect_line(const dialect_choice *c, char *out, size_t len)
{
    int n = snprintf(out, len, "%s, which reads %s (from %s)", dialect_framework(c->d), dialect_var(c->d), c->from);
    if (c->note[0] && n >= 0 && (size_t)n < len)
        snprintf(out + n, len - (size_t)n, "; outranked: %s", c->note);
}
