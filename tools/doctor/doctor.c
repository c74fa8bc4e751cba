/*
 * doctor.c: `hbmalloc doctor [--log FILE]... [--json] [--no-env] [--root DIR] [--trace SNAPSHOT]
 * [--snapshot FILE...]` (several ranks' snapshots compared: doctor_snapshots.c).
 * Gathers the environment and the logs' findings, orders them (errors first,
 * then warnings, each in the order seen) and prints what is wrong, why and
 * what to do next, for people or as JSON. Exit status: 0 nothing wrong, 1
 * something to act on (a warning or an error), 2 bad usage, an unreadable log or snapshot, or nothing to check (--no-env with
 * no log or snapshot: never a silent "No problems found").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "doctor.h"
#include "doctor_ranks.h"
#include "doctor_snapshots.h"
#include "wrap.h"
#include "trace/trace.h"
#include "hbmalloc.h"

static int by_importance(const void *pa, const void *pb)
{
    const finding *a = pa, *b = pb;
    if (a->cause != b->cause)
        return b->cause - a->cause; /* what explains the rest comes first */
    if (a->severity != b->severity)
        return b->severity - a->severity;
    return a->order < b->order ? -1 : a->order > b->order;
}

/* What a root cause explains: a driver/firmware pair that refuses virtual memory turns expandable segments off
 * (the settings finding, torch_npu's warning), which leaves an NPU's fragmentation uncured; a mismatched pair also
 * fails the device calls HCCL's set-up makes (DOCTOR.md). */
static const struct {
    const char *cause;
    const char *effects[6];
} causal[] = {
    {"ascend-driver-firmware-mismatch",
     {"expandable-unsupported", "expandable-ignored", "npu:oom-fragmentation", "hccl-error", "acl-error", NULL}},
    {"ascend-hdk-too-old", {"expandable-unsupported", "expandable-ignored", "npu:oom-fragmentation", NULL}},
    /* the rank that failed first, when the times show the others' collective errors to follow it (doctor_ranks.c) */
    {"ranks-first-failure", {"hccl-error", "nccl-error", NULL}},
};

static int explained(const finding *cause, const finding *e)
{
    for (size_t i = 0; i < sizeof causal / sizeof causal[0]; i++) {
        if (strcmp(causal[i].cause, cause->id))
            continue;
        for (int k = 0; causal[i].effects[k]; k++) {
            const char *id = causal[i].effects[k];
            int npu_only = !strncmp(id, "npu:", 4);
            if (!strcmp(npu_only ? id + 4 : id, e->id) && (!npu_only || !strncmp(e->title, "NPU ", 4)))
                return 1;
        }
    }
    return 0;
}

/* Causes first, each naming the numbers of what it explains; a cause of an error is an error. */
static void rank_by_cause(doctor *d)
{
    for (size_t i = 0; i < d->n; i++)
        for (size_t j = 0; j < d->n; j++)
            if (i != j && explained(&d->f[i], &d->f[j])) {
                d->f[i].cause = 1;
                if (d->f[j].severity > d->f[i].severity)
                    d->f[i].severity = d->f[j].severity;
            }
    qsort(d->f, d->n, sizeof *d->f, by_importance);
    for (size_t i = 0; i < d->n; i++) {
        if (!d->f[i].cause)
            continue;
        hbm__sbuf sb;
        hbm__sb_init(&sb, d->f[i].explains, sizeof d->f[i].explains);
        size_t total = 0, done = 0;
        for (size_t j = 0; j < d->n; j++)
            total += j != i && explained(&d->f[i], &d->f[j]);
        for (size_t j = 0; j < d->n; j++)
            if (j != i && explained(&d->f[i], &d->f[j])) {
                done++;
                hbm__sb_printf(&sb, "%s%zu", done == 1 ? "" : done == total ? " and " : ", ", j + 1);
            }
    }
}

/* Findings that ask for action (warnings and errors): these make the exit status 1. */
static int actionable(const doctor *d)
{
    for (size_t i = 0; i < d->n; i++)
        if (d->f[i].severity > SEV_INFO)
            return 1;
    return 0;
}

static const char *sev_name(int s) { return s == SEV_ERROR ? "error" : s == SEV_WARNING ? "warning" : "info"; }

/* Every line through doctor_wrap (wrap.c): at most DOCTOR_WIDTH columns, broken at words, each field's further
 * lines hanging under its text. */
static void print_text(const doctor *d, FILE *out, int env, const doctor_snaps *snaps)
{
    char prefix[160];
    fprintf(out, "hbmalloc doctor %s\n", HBM_VERSION_STRING);
    if (env) {
        fprintf(out, "\nEnvironment\n");
        const char *last = "";
        for (size_t i = 0; i < d->nfacts; i++) {
            const fact *x = &d->facts[i];
            if (strcmp(x->section, last))
                fprintf(out, "  %s\n", x->section);
            last = x->section;
            snprintf(prefix, sizeof prefix, "    %-24s ", x->key);
            doctor_wrap(out, DOCTOR_WIDTH, prefix, x->value);
        }
    }
    if (d->nnot_checked) {
        fprintf(out, "\nNot checked\n");
        for (int i = 0; i < d->nnot_checked; i++)
            doctor_wrap(out, DOCTOR_WIDTH, "  - ", d->not_checked[i]);
    }
    if (snaps->npaths)
        doctor_snaps_text(snaps, out);
    if (!d->n) {
        fprintf(out, d->nnot_checked ? "\nNo problems found in what could be checked.\n" : "\nNo problems found.\n");
        return;
    }
    fprintf(out, "\nFindings (%zu), most important first\n", d->n);
    for (size_t i = 0; i < d->n; i++) {
        const finding *f = &d->f[i];
        char head[sizeof f->title + 16];
        snprintf(prefix, sizeof prefix, "%zu. ", i + 1);
        snprintf(head, sizeof head, "[%s] %s", sev_name(f->severity), f->title);
        fputc('\n', out);
        doctor_wrap(out, DOCTOR_WIDTH, prefix, head); /* its further lines under the severity */
        if (f->explains[0])
            doctor_wrap(out, DOCTOR_WIDTH, "   explains ", f->explains);
        if (f->count > 1)
            snprintf(prefix, sizeof prefix, "   seen %d times, first at ", f->count);
        else
            snprintf(prefix, sizeof prefix, "   seen: ");
        doctor_wrap(out, DOCTOR_WIDTH, prefix, f->evidence);
        if (f->other_titles) {
            char more[160];
            snprintf(more, sizeof more,
                     "%ld more line%s of this kind, from other calls (%d calls of a code, %d titles in all, are listed "
                     "apart)",
                     f->other_titles, f->other_titles == 1 ? "" : "s", DOC_MAX_TITLES, DOC_MAX_CODES);
            doctor_wrap(out, DOCTOR_WIDTH, "   and ", more);
        }
        if (f->why[0])
            doctor_wrap(out, DOCTOR_WIDTH, "   why: ", f->why);
        if (f->nnext) {
            fprintf(out, "   next:\n");
            for (int k = 0; k < f->nnext; k++) {
                snprintf(prefix, sizeof prefix, "     %d) ", k + 1);
                doctor_wrap(out, DOCTOR_WIDTH, prefix, f->next[k]);
            }
        }
    }
    if (!actionable(d))
        fprintf(out, "\nNothing to act on.\n");
}

static void print_json(const doctor *d, FILE *out, const doctor_snaps *snaps)
{
    fprintf(out, "{\"tool\":\"hbmalloc doctor\",\"version\":\"%s\",\"environment\":[", HBM_VERSION_STRING);
    for (size_t i = 0; i < d->nfacts; i++) {
        fputs(i ? ",{\"section\":" : "{\"section\":", out);
        hbm__json_str(out, d->facts[i].section);
        fputs(",\"key\":", out);
        hbm__json_str(out, d->facts[i].key);
        fputs(",\"value\":", out);
        hbm__json_str(out, d->facts[i].value);
        fputc('}', out);
    }
    fputs("],\"not_checked\":[", out);
    for (int i = 0; i < d->nnot_checked; i++) {
        if (i)
            fputc(',', out);
        hbm__json_str(out, d->not_checked[i]);
    }
    fputs("],", out);
    if (snaps->npaths) { /* several ranks' snapshots compared */
        fputs("\"snapshots\":", out);
        doctor_snaps_json(snaps, out);
        fputc(',', out);
    }
    fputs("\"findings\":[", out);
    for (size_t i = 0; i < d->n; i++) {
        const finding *f = &d->f[i];
        fprintf(out, "%s{\"severity\":\"%s\",\"id\":", i ? "," : "", sev_name(f->severity));
        hbm__json_str(out, f->id);
        fputs(",\"title\":", out);
        hbm__json_str(out, f->title);
        fputs(",\"evidence\":", out);
        hbm__json_str(out, f->evidence);
        fprintf(out, ",\"count\":%d,\"other_titles\":%ld,\"explains\":", f->count, f->other_titles);
        hbm__json_str(out, f->explains);
        fputs(",\"why\":", out);
        hbm__json_str(out, f->why);
        fputs(",\"next\":[", out);
        for (int k = 0; k < f->nnext; k++) {
            if (k)
                fputc(',', out);
            hbm__json_str(out, f->next[k]);
        }
        fputs("]}", out);
    }
    fputs("]", out);
    doctor_ranks_json(d, out); /* the ranks the logs show (DOCTOR.md, "Several ranks") */
    fputs("}\n", out);
}

static int doctor_run(int argc, char **argv, doctor_snaps *snaps)
{
    const char *logs[64], *root = "/", *trace_path = NULL, *capacity = NULL, *torch = NULL, *torch_npu = NULL;
    int nlogs = 0, json = 0, env = 1, device = TRACE_DEVICE_ANY;
    static const char usage[] = "usage: hbmalloc doctor [--log FILE|DIR]... [--json] [--no-env] [--root DIR]\n"
                                "           [--torch VERSION] [--torch-npu VERSION]\n"
                                "           [--trace SNAPSHOT [--capacity SIZE] [--device N]]\n"
                                "           [--snapshot FILE|FOLDER|'PATTERN'...]\n";
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--log") && has_value) {
            if (nlogs == 64) {
                fprintf(stderr, "hbmalloc doctor: at most 64 --log files\n");
                return 2;
            }
            logs[nlogs++] = argv[++i];
        } else if (!strcmp(a, "--snapshot") && has_value) { /* every word up to the next option */
            if (argv[i + 1][0] == '-') {
                fprintf(stderr, "hbmalloc doctor: --snapshot takes files, folders or patterns, not '%s'\n",
                        argv[i + 1]);
                return 2;
            }
            while (i + 1 < argc && argv[i + 1][0] != '-') {
                char err[700];
                if (doctor_snaps_add(snaps, argv[++i], err, sizeof err)) {
                    doctor_wrap(stderr, DOCTOR_WIDTH, "hbmalloc doctor: --snapshot: ", err);
                    return 2;
                }
            }
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--no-env")) {
            env = 0;
        } else if (!strcmp(a, "--root") && has_value) {
            root = argv[++i];
        } else if (!strcmp(a, "--trace") && has_value) {
            trace_path = argv[++i];
        } else if (!strcmp(a, "--capacity") && has_value) {
            capacity = argv[++i];
        } else if (!strcmp(a, "--device") && has_value) {
            char *end;
            const char *v = argv[++i];
            long dev = strtol(v, &end, 10);
            if (end == v || *end || dev < 0 || dev > 63) {
                fprintf(stderr, "hbmalloc doctor: --device takes a device index 0-63, not '%s'\n", v);
                return 2;
            }
            device = (int)dev;
        } else if (!strcmp(a, "--torch") && has_value) {
            torch = argv[++i];
        } else if (!strcmp(a, "--torch-npu") && has_value) {
            torch_npu = argv[++i];
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(usage, stdout);
            printf("\nWhat is wrong with this machine's device memory or communication setup, or with a training log,\n"
                   "why, and what to do next (docs/DOCTOR.md). --torch / --torch-npu: your framework release (else\n"
                   "read from the logs), against which settings are checked. --trace: a memory snapshot of the job,\n"
                   "replayed under the sweep's grid on this device to prove the advice (--capacity when no\n"
                   "out-of-memory message gives it; --device: which of the snapshot's devices, when it has several).\n"
                   "--log: a log, a folder of logs or a quoted pattern; with several ranks' logs, the rank that\n"
                   "failed first and whether the others' collective errors follow from it.\n"
                   "--snapshot: every rank's memory snapshot (files, folders, patterns): the ranks that stand out\n"
                   "and what they hold that the median rank does not.\n"
                   "exit status: 0 nothing to act on, 1 findings to act on, 2 bad usage, an unreadable log, or\n"
                   "nothing to check (--no-env without --log or --trace)\n");
            return 0;
        } else {
            fprintf(stderr, "hbmalloc doctor: unknown option or missing value: '%s'\n%s", a, usage);
            return 2;
        }
    }
    if (!env && !nlogs && !trace_path && !snaps->npaths) {
        /* Nothing would be examined: "No problems found" would be read as a clean bill of health. */
        doctor_wrap(stderr, DOCTOR_WIDTH, "hbmalloc doctor: ",
                    "nothing was checked: --no-env leaves out this machine's environment, and no --log, --trace or "
                    "--snapshot was given");
        return 2;
    }
    char err[1024];
    if (torch && hbm_settings_check_release("PYTORCH_CUDA_ALLOC_CONF", "", HBM_DIALECT_CUDA, torch, -1, err,
                                            sizeof err) != HBM_OK) {
        doctor_wrap(stderr, DOCTOR_WIDTH, "hbmalloc doctor: --torch: ", err);
        return 2;
    }
    if (torch_npu && hbm_settings_check_release("PYTORCH_NPU_ALLOC_CONF", "", HBM_DIALECT_NPU, torch_npu, -1, err,
                                                sizeof err) != HBM_OK) {
        doctor_wrap(stderr, DOCTOR_WIDTH, "hbmalloc doctor: --torch-npu: ", err);
        return 2;
    }
    doctor d;
    doctor_init(&d);
    if (torch) {
        snprintf(d.torch_version, sizeof d.torch_version, "%s", torch);
        snprintf(d.torch_from, sizeof d.torch_from, "--torch");
    }
    if (torch_npu) {
        snprintf(d.torch_npu_version, sizeof d.torch_npu_version, "%s", torch_npu);
        snprintf(d.torch_npu_from, sizeof d.torch_npu_from, "--torch-npu");
    }
    if (env)
        doctor_env(&d, root);
    for (int i = 0; i < nlogs; i++) {
        if (doctor_log_arg(&d, logs[i], err, sizeof err)) { /* a file, a folder or a quoted pattern */
            doctor_wrap(stderr, DOCTOR_WIDTH, "hbmalloc doctor: ", err);
            doctor_free(&d);
            return 2;
        }
    }
    doctor_ranks_report(&d); /* the ranks' failures in time (DOCTOR.md, "Several ranks") */
    if (env) {
        doctor_python(&d);
        doctor_settings(&d);
        doctor_unchecked(&d);
    }
    if (d.torch_version[0])
        doctor_fact(&d, "framework", "PyTorch", "%s (%.300s)", d.torch_version, d.torch_from);
    if (d.torch_npu_version[0])
        doctor_fact(&d, "framework", "torch_npu", "%s%s (%.300s)", d.torch_npu_version,
                    d.npu_version_inferred ? " or another v6.0.rc2 release, inferred" : "", d.torch_npu_from);
    if (trace_path && doctor_prove(&d, trace_path, capacity, device, err, sizeof err)) {
        if (err[0])
            doctor_wrap(stderr, DOCTOR_WIDTH, "hbmalloc doctor: ", err);
        doctor_free(&d);
        return 2;
    }
    if (snaps->npaths && doctor_snaps_run(snaps, &d, stderr)) {
        doctor_wrap(stderr, DOCTOR_WIDTH, "hbmalloc doctor: ", "--snapshot: out of host memory");
        doctor_free(&d);
        return 2;
    }
    if (d.n)
        rank_by_cause(&d);
    if (json)
        print_json(&d, stdout, snaps);
    else
        print_text(&d, stdout, env, snaps);
    int act = actionable(&d);
    doctor_free(&d);
    return snaps->unreadable ? 2 : act ? 1 : 0; /* a snapshot not read is an unreadable log's 2, the rest said */
}

int doctor_main(int argc, char **argv)
{
    doctor_snaps snaps;
    doctor_snaps_init(&snaps);
    int rc = doctor_run(argc, argv, &snaps);
    doctor_snaps_free(&snaps);
    return rc;
}
