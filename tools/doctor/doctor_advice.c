/*
 * doctor_advice.c: the doctor's settings advice, checked before it is given.
 *
 * The user's settings variables are read as their framework release reads
 * them (the release from --torch / --torch-npu or a log line; otherwise the
 * newest, and where that matters the finding says which releases differ) on
 * the device the environment and logs describe (virtual memory or not). Every
 * string printed as advice is accepted by that release, single-quoted, and
 * either a subset of the user's own string that runs the same way (what the
 * framework already runs, without what it ignores or refuses) or the result of
 * replaying the user's snapshot under the sweep's grid (--trace).
 */
#define _GNU_SOURCE /* strcasestr */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"
#include "doctor.h"
#include "wrap.h"
#include "hbmalloc.h"
#include "run/device_spec.h"
#include "run/sweep.h"
#include "trace/trace.h"

/* ---- framework versions in logs ---- */

/* A version at p ("2.1.0.post6", "2.6.0+cu124") after an optional " version", '=', ':', quotes or 'v'. */
static int read_version(const char *p, char *out, size_t len)
{
    while (*p == ' ' || *p == '\t')
        p++;
    if (!strncasecmp(p, "version", 7))
        p += 7;
    while (*p && strchr(" \t:=\"'v(", *p))
        p++;
    if (!isdigit((unsigned char)*p))
        return 0;
    size_t n = 0;
    while (p[n] && (isalnum((unsigned char)p[n]) || p[n] == '.' || p[n] == '+') && n + 1 < len)
        n++;
    while (n && p[n - 1] == '.')
        n--;
    if (!memchr(p, '.', n))
        return 0;
    snprintf(out, len, "%.*s", (int)n, p);
    return 1;
}

/* "PATH:LINE: the line", the line quoted up to a word (and " ..." where cut) in 150 bytes. */
static void quote_line(char *out, size_t len, const char *path, long lineno, const char *line)
{
    int cut;
    while (*line == ' ' || *line == '\t')
        line++;
    size_t keep = doctor_quote_len(line, strcspn(line, "\r\n"), 150, &cut);
    snprintf(out, len, "%.120s:%ld: %.*s%s", path, lineno, (int)keep, line, cut ? " ..." : "");
}

static void set_version(char *ver, size_t vlen, char *from, size_t flen, const char *v, const char *path, long lineno,
                        const char *line)
{
    snprintf(ver, vlen, "%s", v);
    quote_line(from, flen, path, lineno, line);
}

void doctor_log_versions(doctor *d, const char *path, long lineno, const char *line)
{
    char v[40];
    /* torch_npu: "torch_npu 2.1.0.post6", "torch-npu==2.1.0.post6", "torch_npu version: ...",
     * "torch_npu.__version__ = '...'" */
    for (const char *p = line; (p = strcasestr(p, "torch")); p += 5) {
        const char *q = p + 5;
        int npu = (*q == '_' || *q == '-') && !strncasecmp(q + 1, "npu", 3);
        if (npu)
            q += 4;
        if (!strncmp(q, ".__version__", 12))
            q += 12;
        if (p > line && (isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '.' || p[-1] == '/')) {
            /* "PyTorch version: 2.1.0" (collect_env) is the one word ending in torch that names it */
            if (!(p - line >= 2 && !strncasecmp(p - 2, "py", 2) && !npu && !strncasecmp(q, " version", 8)))
                continue;
        }
        if (*q && (isalnum((unsigned char)*q) || *q == '_' || *q == '/' || *q == '.' ||
                   (*q == '-' && !isdigit((unsigned char)q[1]))))
            continue; /* torchvision, torch_npu/csrc, torch.npu, torch-npu-ext */
        if (*q == '-')
            q++; /* a wheel name: torch-2.1.0-cp310 */
        if (!read_version(q, v, sizeof v))
            continue;
        if (npu && (!d->torch_npu_version[0] || d->npu_version_inferred) && strcmp(d->torch_npu_from, "--torch-npu")) {
            set_version(d->torch_npu_version, sizeof d->torch_npu_version, d->torch_npu_from, sizeof d->torch_npu_from,
                        v, path, lineno, line);
            d->npu_version_inferred = 0;
        } else if (!npu && !d->torch_version[0]) {
            set_version(d->torch_version, sizeof d->torch_version, d->torch_from, sizeof d->torch_from, v, path, lineno,
                        line);
        }
    }
    int warn_probe = strstr(line, "expandable_segments feature is not supportted") != NULL;
    if (warn_probe || strstr(line, "expandable_segments setting failure")) {
        if (!d->probe_failed)
            quote_line(d->probe_failed_at, sizeof d->probe_failed_at, path, lineno, line);
        d->probe_failed = 1;
    }
    if (warn_probe && !d->torch_npu_version[0]) {
        /* Only v6.0.rc2 and v6.0.rc2.1 print it (src/conf/npu_releases.inc, warn_probe); their parsers agree. */
        set_version(d->torch_npu_version, sizeof d->torch_npu_version, d->torch_npu_from, sizeof d->torch_npu_from,
                    "2.1.0.post6", path, lineno, line);
        d->npu_version_inferred = 1;
    }
}

/* ---- the settings variables ---- */

static const char *release_of(hbm_dialect dl, const char *ver, char *buf, size_t len)
{
    char out[4096];
    snprintf(buf, len, "%s", dl == HBM_DIALECT_NPU ? "torch_npu" : "PyTorch");
    if (hbm_settings_check_release(dl == HBM_DIALECT_NPU ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF", "", dl,
                                   ver, -1, out, sizeof out) == HBM_OK) {
        const char *p = strstr(out, "read as: ");
        if (p)
            snprintf(buf, len, "%.*s", (int)strcspn(p + 9, "\n"), p + 9);
    }
    return buf;
}

/* The entries of a settings string, brackets kept whole. */
static int entries(const char *s, char ent[][200], int max)
{
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        const char *q = p;
        int depth = 0;
        while (*q && (depth || *q != ',')) {
            depth += *q == '[' ? 1 : *q == ']' ? -1 : 0;
            q++;
        }
        while (p < q && *p == ' ')
            p++;
        if (q > p)
            snprintf(ent[n++], sizeof ent[0], "%.*s", (int)(q - p), p);
        p = *q ? q + 1 : q;
    }
    return n;
}

static void join_except(char ent[][200], int n, int skip, const char *skip_key, char *out, size_t len)
{
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, len);
    for (int i = 0; i < n; i++) {
        if (i == skip)
            continue;
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)strcspn(ent[i], ": "), ent[i]);
        if (skip_key && !strcmp(key, skip_key))
            continue;
        hbm__sb_printf(&sb, "%s%s", sb.len ? "," : "", ent[i]);
    }
}

static int asks_expandable(const char *s)
{
    char ent[32][200];
    int n = entries(s, ent, 32);
    int on = 0;
    for (int i = 0; i < n; i++) {
        char compact[200];
        size_t k = 0;
        for (const char *p = ent[i]; *p && k + 1 < sizeof compact; p++)
            if (!isspace((unsigned char)*p))
                compact[k++] = *p;
        compact[k] = 0;
        if (!strncmp(compact, "expandable_segments:", 20))
            on = !strcmp(compact + 20, "True"); /* the last one wins */
    }
    return on;
}

static void export_line(const char *var, const char *s, char *out, size_t len)
{
    char q[700];
    if (!s[0]) {
        snprintf(out, len, "unset %s (the defaults)", var);
        return;
    }
    hbm__shell_quote(s, q, sizeof q);
    snprintf(out, len, "export %s=%s", var, q);
}

static int accepted(const char *var, const char *s, hbm_dialect dl, const char *ver, int vmm)
{
    char out[8192];
    return hbm_settings_check_release(var, s, dl, ver, vmm, out, sizeof out) == HBM_OK;
}

/* The in-code call that sets a memory fraction. */
static const char *fraction_call(hbm_dialect dl)
{
    return dl == HBM_DIALECT_NPU ? "torch.npu.set_per_process_memory_fraction(0.99)"
                                 : "torch.cuda.set_per_process_memory_fraction(0.99)";
}

/* s without a garbage_collection_threshold that would never act there (no memory fraction below 1 in the
 * string): a printed string carries no inactive setting. 1 when one was dropped. */
static int drop_inactive_gc(const char *var, char *s, size_t len, hbm_dialect dl, const char *ver, int vmm)
{
    char out[8192];
    if (hbm_settings_check_release(var, s, dl, ver, vmm, out, sizeof out) != HBM_OK || !strstr(out, "(inactive"))
        return 0;
    char ent[32][200];
    int n = entries(s, ent, 32);
    join_except(ent, n, -1, "garbage_collection_threshold", s, len);
    return 1;
}

static void gc_dropped_note(finding *f, hbm_dialect dl)
{
    doctor_next(f,
                "garbage_collection_threshold is left out of that string: it acts only under a memory fraction "
                "below 1, which it does not set (if your program calls %s, keep it)",
                fraction_call(dl));
}

typedef struct var_check {
    doctor *d;
    const char *var, *s, *ver, *fw, *vmm_why;
    hbm_dialect dl;
    int npu, vmm;
    char release[128];
    char from[320]; /* where the release came from, or "" */
} var_check;

static void release_note(const var_check *c, char *out, size_t len)
{
    if (c->ver)
        snprintf(out, len, "%s%s%s%s", c->release, c->from[0] ? " (from " : "", c->from, c->from[0] ? ")" : "");
    else
        snprintf(out, len, "the newest %s known (%s; no version was given or found in a log: --%s VERSION)", c->fw,
                 c->release, c->npu ? "torch-npu" : "torch");
}

/* A refused string: the refusal, and the user's string without the entry the release refuses, if one does. */
static void refused(var_check *c, const char *why)
{
    doctor *d = c->d;
    char rel[600];
    release_note(c, rel, sizeof rel);
    finding *f = doctor_add(d, SEV_ERROR, "settings-invalid");
    snprintf(f->title, sizeof f->title, "%s is refused by %s: the framework stops at start-up", c->var, c->release);
    snprintf(f->evidence, sizeof f->evidence, "environment: %s=%.400s; release: %.200s", c->var, c->s, rel);
    snprintf(f->why, sizeof f->why, "%.1300s", why);
    char ent[32][200], alt[800], line[900];
    int n = entries(c->s, ent, 32);
    int fixed = 0;
    if (strstr(why, "cannot be enabled with")) {
        /* torch_npu: keep what runs, drop expandable segments (where it refuses them, it would not have them) */
        join_except(ent, n, -1, "expandable_segments", alt, sizeof alt);
        int dropped = drop_inactive_gc(c->var, alt, sizeof alt, c->dl, c->ver, c->vmm);
        if (accepted(c->var, alt, c->dl, c->ver, c->vmm)) {
            export_line(c->var, alt, line, sizeof line);
            doctor_next(f,
                        "use instead (expandable segments cannot be combined with max_split_size_mb or "
                        "garbage_collection_threshold; these run on every release): %s",
                        line);
            if (dropped)
                gc_dropped_note(f, c->dl);
            fixed = 1;
        }
    }
    for (int i = 0; i < n && !fixed; i++) {
        join_except(ent, n, i, NULL, alt, sizeof alt);
        if (!accepted(c->var, alt, c->dl, c->ver, c->vmm))
            continue;
        int dropped = drop_inactive_gc(c->var, alt, sizeof alt, c->dl, c->ver, c->vmm);
        export_line(c->var, alt, line, sizeof line);
        doctor_next(f, "use instead (without '%s', which %s refuses): %s", ent[i], c->release, line);
        if (dropped)
            gc_dropped_note(f, c->dl);
        if (!strncmp(ent[i], "per_process_memory_fraction", 27))
            doctor_next(f, "and set the fraction in code: %s.set_per_process_memory_fraction(%s)",
                        c->npu ? "torch.npu" : "torch.cuda", strchr(ent[i], ':') ? strchr(ent[i], ':') + 1 : "F");
        fixed = 1;
    }
    char q[700];
    hbm__shell_quote(c->s, q, sizeof q);
    if (c->ver) /* a command on a line of its own ("$ "): runnable as printed (wrap.h) */
        doctor_next(f, "check a string against your release:\n$ hbmalloc conf %s --%s %s", q,
                    c->npu ? "torch-npu" : "torch", c->ver);
    else
        doctor_next(f, "check a string against a release: hbmalloc conf %s --%s VERSION", q,
                    c->npu ? "torch-npu" : "torch");
}

/* torch_npu, release unknown, a device without virtual memory: older releases accept the combination. */
static void combination(var_check *c, const char *rest_in)
{
    char rest[800];
    snprintf(rest, sizeof rest, "%s", rest_in);
    int dropped = drop_inactive_gc(c->var, rest, sizeof rest, c->dl, NULL, c->vmm);
    finding *f = doctor_add(c->d, SEV_WARNING, "settings-combination");
    snprintf(f->title, sizeof f->title,
             "%s combines expandable_segments:True with max_split_size_mb or "
             "garbage_collection_threshold: torch_npu 2.13 and later stop at start-up on it",
             c->var);
    snprintf(f->evidence, sizeof f->evidence, "environment: %s=%.400s", c->var, c->s);
    snprintf(f->why, sizeof f->why,
             "torch_npu 2.1.0.post6 (v6.0.rc2) to 2.12 probe virtual memory while reading the "
             "string; where the probe fails, as on this device (%.300s), they turn expandable segments off and "
             "accept it, so the job ran with whole segments and these values. On a device with virtual memory, and "
             "on every device from torch_npu 2.13 on, the string is refused (\"cannot be enabled with "
             "`expandable_segments`\"). No version of torch_npu was given or found in a log.",
             c->vmm_why);
    char line[900];
    export_line(c->var, rest, line, sizeof line);
    doctor_next(f, "use instead, the same on every release: %s", line);
    if (dropped)
        gc_dropped_note(f, c->dl);
    doctor_next(f, "tell the doctor your release to decide it exactly: hbmalloc doctor --torch-npu VERSION "
                   "(python -c 'import torch_npu; print(torch_npu.__version__)')");
}

static void expandable_unsupported(var_check *c, const char *rest_in, int release_accepts)
{
    char rest[800];
    snprintf(rest, sizeof rest, "%s", rest_in);
    int dropped = drop_inactive_gc(c->var, rest, sizeof rest, c->dl, c->ver, 0);
    finding *f = doctor_add(c->d, c->npu ? SEV_ERROR : SEV_WARNING, "expandable-unsupported");
    snprintf(f->title, sizeof f->title,
             "%s asks for expandable_segments:True, which this %s cannot do: it is "
             "ignored",
             c->var, c->npu ? "NPU" : "GPU");
    snprintf(f->evidence, sizeof f->evidence, "environment: %s=%.300s; device: %.300s", c->var, c->s, c->vmm_why);
    char rel[600];
    release_note(c, rel, sizeof rel);
    snprintf(f->why, sizeof f->why,
             "Expandable segments need the device's virtual-memory API. %s Without it the allocator runs with whole "
             "segments (expandable_segments:False) and fragmentation is not cured; torch_npu only prints "
             "'expandable_segments feature is not supportted' or 'expandable_segments setting failure'.%s%.600s%s",
             c->npu ? "On Ascend that is CANN 7.0.0 or later with Ascend HDK 23.0.0 or later, and a firmware inside "
                      "the driver's compatible range."
                    : "On CUDA that is a driver from 10.2 on and a device reporting "
                      "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED.",
             release_accepts ? " Read by " : "", release_accepts ? rel : "",
             release_accepts ? ", the string runs here as what follows without expandable segments." : "");
    char line[900];
    export_line(c->var, rest, line, sizeof line);
    doctor_next(f, "to drop only the part the device ignores, with the same memory use as today: %s", line);
    if (dropped)
        gc_dropped_note(f, c->dl);
    doctor_next(f,
                "to choose max_split_size_mb / garbage_collection_threshold for your job, record a memory "
                "snapshot and replay it: hbmalloc doctor --trace SNAPSHOT.pickle (this machine's device and your "
                "setting as the baseline), or hbmalloc sweep SNAPSHOT.pickle --capacity SIZE --backend "
                "sim:dialect=%s,vmm=off%s%s",
                c->npu ? "npu" : "cuda", c->ver ? (c->npu ? " --torch-npu " : " --torch ") : "", c->ver ? c->ver : "");
    doctor_next(f, "without virtual memory, the hbmalloc plug-in's arena policy (one region sub-allocated best fit, "
                   "docs/POLICY.md) often needs less memory than whole segments: the same replay (--trace SNAPSHOT, or "
                   "sweep) sizes it, proves it and prints its HBMALLOC_CONF line; for a training loop, its step plan "
                   "(hbm_step_plan:True with hbmalloc_torch.hook_optimizer(optimizer)) learns the step and serves "
                   "the later ones from one region: replay it with hbmalloc replay SNAPSHOT --steps auto --conf "
                   "hbm_step_plan:True");
    if (c->npu)
        doctor_next(f, "to get expandable segments: install a matching driver and firmware pair, Ascend HDK "
                       ">= 23.0.0 (npu-smi info -t board -i 0 must say Compatibility : OK)");
}

static void gc_inactive(var_check *c, const char *runs)
{
    char out[8192];
    if (hbm_settings_check_release(c->var, runs, c->dl, c->ver, c->vmm, out, sizeof out) != HBM_OK ||
        !strstr(out, "(inactive"))
        return;
    /* Information: a program may set the fraction in code, which the doctor cannot see. */
    finding *f = doctor_add(c->d, SEV_INFO, "gc-inactive");
    snprintf(f->title, sizeof f->title,
             "garbage_collection_threshold in %s acts only under a memory fraction below "
             "1, and none is set there",
             c->var);
    snprintf(f->evidence, sizeof f->evidence, "environment: %s=%.400s", c->var, c->s);
    snprintf(f->why, sizeof f->why,
             "%s collects cached blocks only when a per-process memory fraction below 1 is in "
             "force (garbage_collect_cached_blocks runs under set_fraction / an allowed maximum). Unless the program "
             "sets one in code, the threshold is read and never used, and reserved memory grows as with the "
             "defaults.",
             c->npu ? "torch_npu" : "PyTorch");
    int reads = accepted(c->var, "per_process_memory_fraction:0.99", c->dl, c->ver, c->vmm) && c->ver;
    if (reads)
        doctor_next(f, "add a fraction: per_process_memory_fraction:0.99 in %s (%s reads it there), or %s in code",
                    c->var, c->release, fraction_call(c->dl));
    else
        doctor_next(f,
                    "if the program sets no fraction: %s in your code before the first allocation (%s cannot read "
                    "per_process_memory_fraction from %s%s)",
                    fraction_call(c->dl),
                    c->ver   ? c->release
                    : c->npu ? "torch_npu before v26.1.0"
                             : "PyTorch before 2.9",
                    c->var,
                    c->ver   ? ""
                    : c->npu ? "; give --torch-npu if yours is newer"
                             : "; give --torch if yours is newer");
    doctor_next(f, "whether collecting helps your job: replay a snapshot with hbmalloc doctor --trace SNAPSHOT.pickle");
}

static void lenient(var_check *c, const char *described, const char *runs)
{
    const char *w = strstr(described, "\nwarnings:\n");
    if (!w)
        return;
    char list[1200] = "";
    hbm__sbuf sb;
    hbm__sb_init(&sb, list, sizeof list);
    for (const char *p = w + 11; *p;) {
        size_t n = strcspn(p, "\n");
        if ((strstr(p, " reads '") && strstr(p, " reads '") < p + n) ||
            (strstr(p, "does not check the separator") && strstr(p, "does not check the separator") < p + n))
            hbm__sb_printf(&sb, "%s%.*s", sb.len ? "; " : "", (int)n, p);
        p += n + (p[n] == '\n');
    }
    if (!list[0])
        return;
    finding *f = doctor_add(c->d, SEV_WARNING, "settings-lenient");
    snprintf(f->title, sizeof f->title, "%s is read as something other than what is written", c->var);
    snprintf(f->evidence, sizeof f->evidence, "environment: %s=%.400s", c->var, c->s);
    snprintf(f->why, sizeof f->why, "%.1300s", list);
    char line[900];
    export_line(c->var, runs, line, sizeof line);
    doctor_next(f, "write what runs: %s", line);
}

static void check_var(doctor *d, const char *var, const char *s, int npu)
{
    var_check c = {d,
                   var,
                   s,
                   NULL,
                   npu ? "torch_npu" : "PyTorch",
                   NULL,
                   npu ? HBM_DIALECT_NPU : HBM_DIALECT_CUDA,
                   npu,
                   npu ? d->npu_vmm : d->cuda_vmm,
                   "",
                   ""};
    const char *ver = npu ? d->torch_npu_version : d->torch_version;
    c.ver = ver[0] ? ver : NULL;
    snprintf(c.from, sizeof c.from, "%s", npu ? d->torch_npu_from : d->torch_from);
    if (npu && d->npu_version_inferred) {
        const char *colon = strstr(d->torch_npu_from, ": ");
        int at = colon ? (int)(colon - d->torch_npu_from) : (int)strlen(d->torch_npu_from);
        snprintf(c.from, sizeof c.from,
                 "inferred: only the v6.0.rc2 releases, torch_npu 2.1.0.post6/post7, "
                 "2.2.0.post2/post3, 2.3.1/post1 and 1.11.0.post14/post15, print the warning at %.*s, and they read "
                 "the string alike",
                 at > 200 ? 200 : at, d->torch_npu_from);
    }
    char why_buf[400];
    c.vmm_why = npu ? d->npu_vmm_why : "no CUDA virtual memory management";
    if (c.vmm < 0 && npu && d->probe_failed) {
        c.vmm = 0;
        snprintf(why_buf, sizeof why_buf, "the log shows torch_npu's virtual-memory probe failing: %.300s",
                 d->probe_failed_at);
        c.vmm_why = why_buf;
    }
    release_of(c.dl, c.ver, c.release, sizeof c.release);
    doctor_fact(d, "settings", var, "%.380s", s);
    int framework = !strncmp(var, "PYTORCH_", 8);
    char *out = malloc(8192), runs[1024] = "";
    if (!out)
        return;
    hbm_status rc = hbm_settings_check_release(var, s, c.dl, c.ver, c.vmm, out, 8192);
    int exp = asks_expandable(s);
    char ent[32][200], rest[800];
    join_except(ent, entries(s, ent, 32), -1, "expandable_segments", rest, sizeof rest);
    if (rc != HBM_OK) {
        if (framework && npu && !c.ver && c.vmm != 1 && strstr(out, "cannot be enabled with") &&
            accepted(var, rest, c.dl, NULL, c.vmm)) {
            combination(&c, rest);
            if (c.vmm == 0)
                expandable_unsupported(&c, rest, 0);
            gc_inactive(&c, rest);
        } else {
            refused(&c, out);
        }
        free(out);
        return;
    }
    if (hbm_settings_effective(var, s, c.dl, c.ver, c.vmm == 0 ? 0 : c.vmm, runs, sizeof runs) != HBM_OK)
        runs[0] = 0;
    if (exp && c.vmm == 0 && accepted(var, rest, c.dl, c.ver, 0))
        expandable_unsupported(&c, rest, framework);
    lenient(&c, out, runs);
    gc_inactive(&c, runs);
    free(out);
}

void doctor_settings(doctor *d)
{
    static const struct {
        const char *var;
        int npu; /* 1 NPU, 0 CUDA, -1 whichever device this machine has */
    } vars[] = {{"HBMALLOC_CONF", -1},
                {"PYTORCH_CUDA_ALLOC_CONF", 0},
                {"PYTORCH_NPU_ALLOC_CONF", 1},
                {"PYTORCH_ALLOC_CONF", -1}};
    int ascend = d->ascend || d->npu_vmm >= 0 || d->oom_npu || d->probe_failed || d->torch_npu_version[0];
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *s = getenv(vars[i].var);
        if (s)
            check_var(d, vars[i].var, s, vars[i].npu < 0 ? ascend : vars[i].npu);
    }
    if (getenv("PYTORCH_NPU_ALLOC_CONF") && getenv("PYTORCH_ALLOC_CONF") && ascend) {
        finding *f = doctor_add(d, SEV_ERROR, "settings-both-set");
        snprintf(f->title, sizeof f->title, "both PYTORCH_NPU_ALLOC_CONF and PYTORCH_ALLOC_CONF are set");
        snprintf(f->evidence, sizeof f->evidence, "environment");
        snprintf(f->why, sizeof f->why,
                 "torch_npu 2.13 and later refuse to start when both are set (\"please set only "
                 "one of them\"); older releases read PYTORCH_NPU_ALLOC_CONF only.");
        doctor_next(f, "unset one of them");
    }
}

/* ---- proof by replay ---- */

const char *doctor_on_npu(const doctor *d)
{
    if (d->torch_npu_version[0])
        return d->torch_npu_from;
    if (d->probe_failed)
        return d->probe_failed_at;
    if (d->oom_npu)
        return "a log shows an NPU out-of-memory message";
    if (d->ascend)
        return "this is an Ascend machine";
    if (getenv("PYTORCH_NPU_ALLOC_CONF"))
        return "PYTORCH_NPU_ALLOC_CONF is set";
    return NULL;
}

int doctor_prove(doctor *d, const char *trace_path, const char *capacity, int snap_device, char *err, size_t errlen)
{
    int npu = doctor_on_npu(d) != NULL;
    int vmm = npu ? d->npu_vmm : d->cuda_vmm;
    if (npu && vmm < 0 && d->probe_failed)
        vmm = 0;
    size_t cap = 0;
    if (capacity && device_capacity("doctor", capacity, &cap)) { /* the same reading as sweep's: 80 is no device */
        err[0] = '\0';                                           /* said on stderr */
        return -1;
    }
    if (d->oom_capacity > 0)
        cap = (size_t)d->oom_capacity;
    else if (!capacity) {
        snprintf(
            err, errlen,
            "--trace needs the device's capacity: no out-of-memory message in a --log gives one a device can have, so "
            "give --capacity SIZE (e.g. 64GiB)");
        return -1;
    }
    trace t;
    char terr[512];
    if (trace_read_any(trace_path, snap_device, &t, terr, sizeof terr)) {
        snprintf(err, errlen, "%s", terr);
        return -1;
    }
    char spec[200];
    snprintf(spec, sizeof spec, "sim:dialect=%s%s,capacity=%zu", npu ? "npu" : "cuda", vmm == 0 ? ",vmm=off" : "", cap);
    const char *ver = npu ? d->torch_npu_version : d->torch_version;
    sweep_opts o = {.name = trace_path, .backend_spec = spec, .version = ver[0] ? ver : NULL};
    sweep_outcome so;
    char serr[768];
    if (sweep_compute(&t, &o, &so, serr, sizeof serr)) {
        snprintf(err, errlen, "replaying %.300s: %.400s", trace_path, serr);
        sweep_outcome_free(&so);
        trace_free(&t);
        return -1;
    }
    const sweep_row *best = sweep_best(&so), *base = NULL;
    for (int i = 0; i < so.n; i++)
        if (so.rows[i].baseline)
            base = &so.rows[i];
    char capb[32], pb[32], pr[32];
    hbm__format_size(cap, capb, sizeof capb);
    char device[200];
    snprintf(device, sizeof device, "a simulated %s of %s%s", npu ? "NPU" : "GPU", capb,
             vmm == 0 ? " without virtual memory" : "");
    char sweep_cmd[1200], dev_opt[24] = "", qpath[700];
    if (t.format && !strcmp(t.format, "pytorch-snapshot") && t.rec.device) /* the snapshot's device read, when not 0 */
        snprintf(dev_opt, sizeof dev_opt, " --device %d", t.rec.device);
    hbm__shell_quote(trace_path, qpath, sizeof qpath);
    snprintf(sweep_cmd, sizeof sweep_cmd, "the whole table:\n$ hbmalloc sweep %s%s --backend '%s'%s%s", qpath, dev_opt,
             spec, ver[0] ? (npu ? " --torch-npu " : " --torch ") : "", ver[0] ? ver : "");
    /* The headline names the file; the evidence line below gives its whole path (a path cut in a headline misleads). */
    const char *name = strrchr(trace_path, '/') ? strrchr(trace_path, '/') + 1 : trace_path;
    finding *f;
    if (!best) {
        f = doctor_add(d, SEV_ERROR, "settings-proven");
        snprintf(f->title, sizeof f->title,
                 "replayed %.120s on %.100s: no setting tried runs it without running out "
                 "of memory",
                 name, device);
        snprintf(f->why, sizeof f->why,
                 "%d settings replayed (%s); the job needs more memory than this device "
                 "offers under any of them.",
                 so.n, so.release);
        doctor_next(f, "the capacity it needs:\n$ hbmalloc replay %s%s --min-capacity --backend sim:dialect=%s%s",
                    qpath, dev_opt, npu ? "npu" : "cuda", vmm == 0 ? ",vmm=off" : "");
    } else {
        hbm__format_size((uint64_t)best->r.stats.reserved_bytes[0].peak, pr, sizeof pr);
        if (best->baseline) {
            f = doctor_add(d, SEV_INFO, "settings-proven");
            snprintf(f->title, sizeof f->title,
                     "replayed %.120s on %.100s: your setting is already the best of %d "
                     "(peak reserved %s)",
                     name, device, so.n, pr);
            snprintf(f->why, sizeof f->why, "%.500s. Settings checked against %.120s.", so.baseline_note, so.release);
        } else {
            f = doctor_add(d, SEV_WARNING, "settings-proven");
            if (base && !base->rc) {
                hbm__format_size((uint64_t)base->r.stats.reserved_bytes[0].peak, pb, sizeof pb);
                snprintf(f->title, sizeof f->title,
                         "replayed %.120s on %.90s: '%.90s' lowers peak reserved to %s "
                         "from %s with yours (%.1f%% less)",
                         name, device, best->conf, pr, pb,
                         100.0 * (double)(base->r.stats.reserved_bytes[0].peak - best->r.stats.reserved_bytes[0].peak) /
                             (double)base->r.stats.reserved_bytes[0].peak);
            } else {
                snprintf(f->title, sizeof f->title,
                         "replayed %.120s on %.90s: '%.90s' runs it with peak reserved "
                         "%s%s",
                         name, device, best->conf, pr, base ? ", where yours runs out of memory" : "");
            }
            snprintf(f->why, sizeof f->why,
                     "%d settings replayed on the model of %s's allocator; %.500s. Strings "
                     "checked against %.120s.",
                     so.n, npu ? "torch_npu" : "PyTorch", so.baseline_note, so.release);
            char exp[800], code[600];
            sweep_advice(&so, best, ver[0] ? ver : NULL, exp, sizeof exp, code, sizeof code);
            doctor_next(f, "%s", exp);
            if (code[0])
                doctor_next(f, "and in your code: %s", code);
        }
    }
    const sweep_row *arena = sweep_best_hbm(&so);
    if (arena) { /* a device without virtual memory: hbmalloc's arena, proven by the same sweep */
        hbm__format_size((uint64_t)arena->r.stats.reserved_bytes[0].peak, pr, sizeof pr);
        doctor_next(f,
                    "with the hbmalloc plug-in (hbmalloc_torch.use()), whose %s needs no virtual memory (peak "
                    "reserved %s; %s): export HBMALLOC_CONF='%s'",
                    sweep_hbm_name(arena), pr, sweep_hbm_note(arena), arena->conf);
    }
    snprintf(f->evidence, sizeof f->evidence, "%.300s, replayed on %.200s", trace_path, spec);
    doctor_next(f, "%s", sweep_cmd);
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->f[i].id, "oom-fragmentation") && &d->f[i] != f)
            doctor_next(&d->f[i], "proven on your snapshot: see 'replayed %.120s' below", name);
    sweep_outcome_free(&so);
    trace_free(&t);
    return 0;
}

/* ---- headroom for a collective library's buffers (issue #40 item 2) ---- */

long doctor_hccl_buffsize_mb(int *set)
{
    const char *hb = getenv("HCCL_BUFFSIZE");
    char *end = NULL;
    long mb = hb ? strtol(hb, &end, 10) : 0;
    *set = hb && end != hb && !*end && mb >= 1 && mb <= 1048576;
    return *set ? mb : 200;
}

/* What to leave free for one communicator of lib ("HCCL" or "NCCL"), MiB, and why that much (basis). HCCL: 2 x
 * HCCL_BUFFSIZE MB (default 200; CANN's environment variable reference, hicann/hccl's HCCL_BUFFSIZE.md: each
 * communicator holds 2 x HCCL_BUFFSIZE, one for sending and one for receiving). NCCL: its buffers depend on the
 * topology (channels x peers x NCCL_BUFFSIZE per protocol), which a log does not show; NVIDIA/nccl#964 measured 544
 * MiB for a communicator of 2 GPUs and 688 MiB for more (4 x A100 over NVLink, the default NCCL_BUFFSIZE of 4 MiB,
 * DEFAULT_BUFFSIZE in NVIDIA/nccl/src/init.cc:813), the "0.5-0.7 GB per communicator": 700 MiB covers both,
 * times NCCL_BUFFSIZE / 4 MiB where it is set larger (the buffers grow with it; the rest does not, so this errs
 * large). */
long doctor_headroom_mb(const char *lib, char *basis, size_t len)
{
    if (!strcmp(lib, "HCCL")) {
        int set;
        long mb = doctor_hccl_buffsize_mb(&set);
        snprintf(basis, len, "2 x HCCL_BUFFSIZE for one communicator");
        return 2 * mb;
    }
    const char *nb = getenv("NCCL_BUFFSIZE");
    char *end = NULL;
    long long bytes = nb ? strtoll(nb, &end, 10) : 0;
    long scale = 1;
    if (nb && end != nb && !*end && bytes > (4LL << 20) && bytes <= (1LL << 40))
        scale = (long)((bytes + (4LL << 20) - 1) / (4LL << 20));
    if (scale > 1)
        snprintf(basis, len,
                 "NCCL used 544-688 MiB per communicator with the default NCCL_BUFFSIZE of 4 MiB (NVIDIA/nccl#964), "
                 "here times %ld for NCCL_BUFFSIZE=%.40s",
                 scale, nb);
    else
        snprintf(basis, len,
                 "NCCL used 544-688 MiB per communicator with the default NCCL_BUFFSIZE of 4 MiB "
                 "(NVIDIA/nccl#964)");
    long mb = 700 * scale;
    return mb > 16777216 ? 16777216 : mb; /* hbm_headroom_mb's largest value */
}

void doctor_headroom_next(finding *f, const char *lib, const char *lead)
{
    char basis[300];
    long mb = doctor_headroom_mb(lib, basis, sizeof basis);
    doctor_next(f,
                "%swith hbmalloc as the allocator (hbmalloc.torch.use()), leave room for %s's buffers: export "
                "HBMALLOC_CONF='hbm_headroom_mb:%ld' (%s; add %ld MiB for each more process group)",
                lead, lib, mb, basis, mb);
}
