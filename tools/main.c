/*
 * main.c: the command-line tool's dispatch and what each command does with its arguments.
 *   hbmalloc replay | sweep | plan | view | conf | doctor | top | version | help [options]  (hbmalloc CMD --help)
 * The options each command takes, their parsing (--name=value, unknown ones) and the help: commands.c.
 * Exit status: 0 success, 1 OOM during replay, 2 bad input or usage.
 */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"
#include "commands.h"
#include "doctor/doctor.h"
#include "hbmalloc.h"
#include "run/device_spec.h"
#include "run/dialect.h"
#include "run/plan.h"
#include "run/replay.h"
#include "trace/steps.h"
#include "run/sweep.h"
#include "top.h"
#include "view/view.h"
#include "trace/trace.h"

/* An error of the library, printed for a command: the settings string given to it came from --conf. */
static void print_error(const char *cmd, const char *msg)
{
    const char *from = strstr(msg, "(from " HBM_SETTINGS_ARGUMENT ")");
    if (from)
        fprintf(stderr, "hbmalloc %s: %.*s(from --conf)%s\n", cmd, (int)(from - msg), msg,
                from + strlen("(from " HBM_SETTINGS_ARGUMENT ")"));
    else
        fprintf(stderr, "hbmalloc %s: %s\n", cmd, msg);
}

/* A settings string that begins with its variable's name, as an export line has it
 * (`PYTORCH_NPU_ALLOC_CONF=expandable_segments:True`): no key is in capitals, so every release refuses it, as
 * "Unrecognized key 'PYTORCH_NPU_ALLOC_CONF=expandable_segments'", which does not say what to give instead. 1 when
 * s is one (said: the value alone, as opt gives it, NULL for conf's operand, with extra after it), else 0. */
static int named_variable(const char *cmd, const char *opt, const char *s, const char *extra)
{
    size_t skip = strncmp(s, "export ", 7) ? 0 : 7;
    size_t n = strspn(s + skip, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
    if (!n || isdigit((unsigned char)s[skip]) || s[skip + n] != '=')
        return 0;
    const char *v = s + skip + n + 1;
    size_t len = strlen(v);
    if (len >= 2 && (v[0] == '\'' || v[0] == '"') && v[len - 1] == v[0]) { /* the shell's quotes, kept by a paste */
        v++;
        len -= 2;
    }
    char value[1024], quoted[1100];
    snprintf(value, sizeof value, "%.*s", (int)len, v);
    hbm__shell_quote(value, quoted, sizeof quoted);
    fprintf(stderr,
            "hbmalloc %s: %s%s'%s' begins with the variable's name: drop '%.*s=' and give the value alone: %s%s %s%s\n",
            cmd, opt ? opt : "", opt ? " " : "", s, (int)n, s + skip, opt ? "" : "hbmalloc ", opt ? opt : cmd, quoted,
            extra ? extra : "");
    return 1;
}

/* Settings as an allocator on that backend would run them, with any capability fallback. */
static int conf_on_backend(const char *s, const char *spec)
{
    char err[1024], out[4096];
    hbm_allocator *a;
    setenv("HBMALLOC_QUIET", "1", 1); /* the warning is printed below, once */
    hbm_status st = hbm_open(&a, spec, 0, s, err, sizeof err);
    if (st != HBM_OK) {
        fprintf(stderr, "hbmalloc conf: %s\n", err);
        return 2;
    }
    hbm_settings_describe(a, out, sizeof out);
    fputs(out, stdout);
    if (hbm_warning(a)[0])
        printf("warning: %s\n", hbm_warning(a));
    hbm_destroy(a);
    return 0;
}

/* hbmalloc's own keys are valid in HBMALLOC_CONF only: the frameworks stop on them in their variables. */
static void note_hbm_keys(const char *s)
{
    if (s && (strstr(s, "hbm_remap_free_pages") || strstr(s, "hbm_expandable_page_mb")))
        printf("note: hbm_* keys belong in HBMALLOC_CONF only: PyTorch and torch_npu refuse them in "
               "PYTORCH_*_ALLOC_CONF (\"Unrecognized CachingAllocator option\")\n");
}

/* What a release does with a string on a device (vmm 1, 0, or -1 unknown): "runs it as '...'" or "refuses it (...)". */
static void conf_outcome(const char *var, const char *s, hbm_dialect d, const char *version, int vmm, char *out,
                         size_t len)
{
    char eff[2048];
    const char *off = vmm == 0 && strstr(s, "expandable_segments:True") ? " (expandable segments off)" : "";
    if (hbm_settings_effective(var, s, d, version, vmm, eff, sizeof eff) != HBM_OK)
        snprintf(out, len, "refuses it (%s)", eff);
    else if (!eff[0])
        snprintf(out, len, "runs it with the defaults%s", off);
    else
        snprintf(out, len, "runs it as '%s'%s", eff, off);
}

/* `hbmalloc conf STRING`: the verdict, one line before the details. A torch_npu release decides expandable
 * segments by the device's virtual memory: when --vmm is not given and the two devices differ, both outcomes. */
static void conf_verdict(FILE *f, const char *var, const char *s, hbm_dialect d, const char *version, int vmm,
                         int strict)
{
    char who[200], tag[80], yes[2300], no[2300];
    if (strict)
        snprintf(who, sizeof who, "hbmalloc (HBMALLOC_CONF)");
    else
        hbm_release_describe(d, version, who, sizeof who, tag, sizeof tag);
    conf_outcome(var, s, d, version, vmm < 0 ? 1 : vmm, yes, sizeof yes);
    conf_outcome(var, s, d, version, 0, no, sizeof no);
    if (vmm < 0 && !strict && d == HBM_DIALECT_NPU && strcmp(yes, no)) {
        fprintf(f,
                "verdict: depends on the device's virtual memory: %s, on a device with it, %s; on one without, "
                "%s. Say which with --vmm yes|no (hbmalloc doctor tells on the machine)\n",
                who, yes, no);
    } else {
        conf_outcome(var, s, d, version, vmm, yes, sizeof yes);
        fprintf(f, "verdict: %s %s\n", who, yes);
    }
}

/* The describe text's "source:" line names the variable a string is read as; a string from the command line is
 * not in that variable: said so. */
static void print_from_command_line(const char *out, const char *var)
{
    char line[128];
    snprintf(line, sizeof line, "\nsource: %s\n", var);
    const char *at = strstr(out, line);
    if (!at) {
        fputs(out, stdout);
        return;
    }
    printf("%.*s\nsource: the command line, read as %s is%s", (int)(at - out), out, var, at + strlen(line) - 1);
}

/* A settings string as a framework reads it: the verdict, then the effective settings. 0, or 2 refused (printed). */
static int conf_string(const char *var, const char *s, hbm_dialect d, const char *version, int vmm, int strict,
                       int from_command_line)
{
    char out[8192];
    if (hbm_settings_check_release(var, s, d, version, vmm, out, sizeof out) != HBM_OK) {
        char who[200], tag[80];
        if (strict)
            snprintf(who, sizeof who, "hbmalloc (HBMALLOC_CONF)");
        else
            hbm_release_describe(d, version, who, sizeof who, tag, sizeof tag);
        if (strstr(out, who)) /* the message names the release already */
            fprintf(stderr, "hbmalloc conf: refused: %s\n", out);
        else
            fprintf(stderr, "hbmalloc conf: refused by %s: %s\n", who, out);
        return 2;
    }
    conf_verdict(stdout, var, s, d, version, vmm, strict);
    if (from_command_line)
        print_from_command_line(out, var);
    else
        fputs(out, stdout);
    return 0;
}

/* Both frameworks' variables set and nothing on the command line to choose: each is read by one framework only (a
 * GPU's PyTorch never reads PYTORCH_NPU_ALLOC_CONF; torch_npu never reads PYTORCH_CUDA_ALLOC_CONF, dialect.c), so
 * each is shown as its framework reads it. */
static int conf_both(const char *version, int vmm)
{
    printf("PYTORCH_CUDA_ALLOC_CONF and PYTORCH_NPU_ALLOC_CONF are both set: PyTorch on a GPU reads\n"
           "PYTORCH_CUDA_ALLOC_CONF only, torch_npu reads PYTORCH_NPU_ALLOC_CONF only; each below as its framework\n"
           "reads it (--dialect cuda|npu, --torch or --torch-npu: one)\n");
    if (getenv("HBMALLOC_CONF"))
        printf("note: HBMALLOC_CONF is set too: hbmalloc's plug-ins read it before either (hbmalloc conf --strict "
               "checks it)\n");
    int rc = 0;
    for (int npu = 0; npu < 2; npu++) {
        hbm_dialect d = npu ? HBM_DIALECT_NPU : HBM_DIALECT_CUDA;
        printf("\n%s: %s='%s'\n", dialect_framework(d), dialect_var(d), getenv(dialect_var(d)));
        fflush(stdout);
        if (conf_string(dialect_var(d), getenv(dialect_var(d)), d, version, vmm, 0, 0))
            rc = 2;
        fflush(stdout);
    }
    return rc;
}

static int cmd_conf(int argc, char **argv)
{
    const char *s = NULL, *backend = NULL, *var = NULL;
    dialect_evidence ev = {.log = -1, .machine = -1};
    int strict = 0, releases = 0, keys = 0, vmm = -1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--backend") && has_value) {
            backend = ev.backend = argv[++i];
        } else if (!strcmp(a, "--dialect") && has_value) {
            ev.dialect = argv[++i];
        } else if (!strcmp(a, "--torch") && has_value) {
            ev.torch = argv[++i];
        } else if (!strcmp(a, "--torch-npu") && has_value) {
            ev.torch_npu = argv[++i];
        } else if (!strcmp(a, "--vmm") && has_value) {
            const char *v = argv[++i];
            if (strcmp(v, "yes") && strcmp(v, "no")) {
                fprintf(stderr, "hbmalloc conf: --vmm takes yes or no, not '%s'\n", v);
                return 2;
            }
            vmm = !strcmp(v, "yes");
        } else if (!strcmp(a, "--strict")) {
            strict = 1;
        } else if (!strcmp(a, "--releases")) {
            releases = 1;
        } else if (!strcmp(a, "--keys")) {
            keys = 1;
        } else if (a[0] == '-' && a[1] == '-') {
            fprintf(stderr, "hbmalloc conf: unknown option or missing value: '%s' (see hbmalloc conf --help)\n", a);
            return 2;
        } else if (s) {
            fprintf(stderr, "hbmalloc conf: one settings string only (quote it)\n");
            return 2;
        } else {
            s = a;
        }
    }
    if (keys) {
        char *out = malloc(64 * 1024);
        if (!out)
            return 2;
        hbm_settings_keys(out, 64 * 1024);
        fputs(out, stdout);
        free(out);
        return 0;
    }
    dialect_choice dc;
    char err[600];
    if (dialect_decide(&ev, &dc, err, sizeof err)) {
        fprintf(stderr, "hbmalloc conf: %s\n", err);
        return 2;
    }
    hbm_dialect d = dc.d;
    const char *version = dc.version;
    if (s) { /* the variable a name pasted with the value calls for, when the command line chose none */
        const char *name = strncmp(s, "export ", 7) ? s : s + 7;
        const char *extra = strncmp(name, "HBMALLOC_CONF=", 14) || strict ? NULL : " --strict";
        if (!dc.given && !strncmp(name, "PYTORCH_NPU_ALLOC_CONF=", 23) && d != HBM_DIALECT_NPU)
            extra = " --dialect npu";
        else if (!dc.given && !strncmp(name, "PYTORCH_CUDA_ALLOC_CONF=", 24) && d != HBM_DIALECT_CUDA)
            extra = " --dialect cuda";
        if (named_variable("conf", NULL, s, extra))
            return 2;
    }
    if (releases) {
        char *out = malloc(64 * 1024);
        if (!out)
            return 2;
        hbm_release_list(d, out, 64 * 1024);
        fputs(out, stdout);
        free(out);
        return 0;
    }
    if (backend) {
        /* A simulated device takes the dialect decided; a real one has its own (dialect_decide checked they agree). */
        char spec[600];
        if (d == HBM_DIALECT_NPU && !strncmp(backend, "sim", 3) && (backend[3] == 0 || backend[3] == ':') &&
            dialect_of_backend(backend) < 0) {
            snprintf(spec, sizeof spec, "%s%sdialect=npu", backend, backend[3] ? "," : ":");
            backend = spec;
        }
        int rc = conf_on_backend(s, backend);
        if (rc == 0)
            note_hbm_keys(s);
        return rc;
    }
    char line[700];
    dialect_line(&dc, line, sizeof line);
    if (s) {
        var = strict ? "HBMALLOC_CONF" : dialect_var(d);
        int rc = conf_string(var, s, d, version, vmm, strict, 1);
        if (rc == 0 && !strict)
            printf("framework: %s\n", line);
        if (rc == 0 && strict)
            note_hbm_keys(s);
        return rc;
    }
    if (!dc.given && !strict && getenv("PYTORCH_CUDA_ALLOC_CONF") && getenv("PYTORCH_NPU_ALLOC_CONF"))
        return conf_both(version, vmm);
    char out[8192];
    if (hbm_settings_check(NULL, d, out, sizeof out) != HBM_OK) {
        fprintf(stderr, "hbmalloc conf: %s\n", out);
        return 2;
    }
    printf("framework: %s\n", line);
    fputs(out, stdout);
    return 0;
}

/* What replay, sweep and view share: TRACE, --conf, --capacity, --backend, --device, --torch / --torch-npu. */
typedef struct trace_cmd {
    const char *name, *path, *capacity, *backend, *settings, *steps, *torch, *torch_npu;
    char steps_note[300];
    int device, conf_given;
    char spec[1024], base[1024]; /* the device, and the same without its capacity (--min-capacity) */
    dialect_choice dialect;      /* whose settings: dialect.c's rule */
    char framework[700];         /* that, for the report */
    trace t;
} trace_cmd;

/* 1: argv[*i] was one of the shared arguments (consumed); 0: not one; -1: an error was printed. */
static int shared_arg(trace_cmd *c, int argc, char **argv, int *i)
{
    const char *a = argv[*i];
    int has_value = *i + 1 < argc;
    if (!strcmp(a, "--conf") && has_value) {
        c->settings = argv[++*i];
        c->conf_given = 1;
        if (named_variable(c->name, "--conf", c->settings, NULL))
            return -1;
    } else if (!strcmp(a, "--capacity") && has_value) {
        c->capacity = argv[++*i];
    } else if (!strcmp(a, "--backend") && has_value) {
        c->backend = argv[++*i];
    } else if (!strcmp(a, "--steps") && has_value) {
        c->steps = argv[++*i];
    } else if (!strcmp(a, "--torch") && has_value) {
        c->torch = argv[++*i];
    } else if (!strcmp(a, "--torch-npu") && has_value) {
        c->torch_npu = argv[++*i];
    } else if (!strcmp(a, "--device") && has_value) {
        char *end;
        const char *v = argv[++*i];
        long dev = strtol(v, &end, 10);
        if (end == v || *end || dev < 0 || dev > 63) {
            fprintf(stderr, "hbmalloc %s: --device takes a device index 0-63, not '%s'\n", c->name, v);
            return -1;
        }
        c->device = (int)dev;
    } else if (a[0] == '-' && a[1] == '-') {
        fprintf(stderr, "hbmalloc %s: unknown option or missing value: '%s'\n", c->name, a);
        return -1;
    } else if (c->path) {
        fprintf(stderr, "hbmalloc %s: one trace file only\n", c->name);
        return -1;
    } else {
        c->path = a;
    }
    return 1;
}

/* After the arguments: the trace, whose framework it is (dialect.c's rule: the command line, the snapshot, the
 * environment) and the device spec (one capacity, device_spec.c). 0 or 2 (printed). */
static int open_trace(trace_cmd *c)
{
    char err[600];
    if (!c->path) {
        fprintf(stderr, "hbmalloc %s: missing TRACE\n", c->name);
        return 2;
    }
    if (trace_read_any(c->path, c->device, &c->t, err, sizeof err)) {
        fprintf(stderr, "hbmalloc %s: %s\n", c->name, err);
        return 2;
    }
    dialect_evidence ev = {
        .torch = c->torch, .torch_npu = c->torch_npu, .backend = c->backend, .t = &c->t, .log = -1, .machine = -1};
    if (dialect_decide(&ev, &c->dialect, err, sizeof err)) {
        fprintf(stderr, "hbmalloc %s: %s\n", c->name, err);
        trace_free(&c->t);
        return 2;
    }
    dialect_line(&c->dialect, c->framework, sizeof c->framework);
    if (device_spec(c->name, c->backend, c->capacity, c->dialect.d, c->spec, sizeof c->spec, c->base, sizeof c->base)) {
        trace_free(&c->t);
        return 2;
    }
    if (c->steps && trace_mark_steps(&c->t, c->steps, c->steps_note, sizeof c->steps_note)) {
        fprintf(stderr, "hbmalloc %s: %s: %s\n", c->name, c->path, c->steps_note);
        trace_free(&c->t);
        return 2;
    }
    return 0;
}

/* replay and view: the allocator reads the environment's settings as the release given (HBMALLOC_TORCH_VERSION /
 * HBMALLOC_TORCH_NPU_VERSION, docs/CONFIGURATION.md), as the plug-in tells it. */
static void release_to_allocator(const trace_cmd *c)
{
    if (c->dialect.version)
        setenv(c->dialect.d == HBM_DIALECT_NPU ? "HBMALLOC_TORCH_NPU_VERSION" : "HBMALLOC_TORCH_VERSION",
               c->dialect.version, 1);
}

#define TRACE_CMD(n)                                              \
    {                                                             \
        .name = (n), .backend = "sim", .device = TRACE_DEVICE_ANY \
    }

/* The settings variables a snapshot's recorded settings replace in a replay, named for the report. */
static void recorded_overrides(char *out, size_t len)
{
    static const char *const vars[] = {"HBMALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_NPU_ALLOC_CONF",
                                       "PYTORCH_ALLOC_CONF"};
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, len);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v)
            hbm__sb_printf(&sb, "%s%s='%.100s'", sb.len ? ", " : "", vars[i], v);
    }
}

static int cmd_replay(int argc, char **argv)
{
    trace_cmd c = TRACE_CMD("replay");
    int stats = 0, min_capacity = 0, fresh_start = 0;
    replay_opts o = {0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--min-capacity"))
            min_capacity = 1;
        else if (!strcmp(a, "--snapshot") && i + 1 < argc)
            o.snapshot_path = argv[++i];
        else if (!strcmp(a, "--stats"))
            stats = 1;
        else if (!strcmp(a, "--check"))
            o.check_every = 1;
        else if (!strcmp(a, "--fresh-start"))
            fresh_start = 1;
        else if (shared_arg(&c, argc, argv, &i) < 0)
            return 2;
    }
    if (open_trace(&c))
        return 2;
    release_to_allocator(&c);
    o.backend_spec = c.spec;
    o.settings = c.settings;
    o.steps_note = c.steps ? c.steps_note : NULL;
    o.framework = c.framework;
    if (!c.conf_given && c.t.rec.has_settings) {
        o.settings = c.t.rec.settings; /* replay as the recording ran */
        o.settings_from_trace = 1;
        recorded_overrides(o.env_overridden, sizeof o.env_overridden);
    }
    o.seed = !c.conf_given && !fresh_start; /* the recording's own settings: begin where it began */
    int rc;
    if (min_capacity) {
        rc = replay_min_capacity(&c.t, &o, c.base, stdout);
    } else {
        replay_result r;
        rc = replay_run(&c.t, &o, &r);
        if (rc == 2 && r.events_done == 0 && !r.oom && r.message[0] && !r.stats.num_device_alloc) {
            print_error("replay", r.message);
        } else {
            replay_print(stdout, c.path, &c.t, &o, &r);
            if (stats) {
                hbm_stat_entry e[HBM_STAT_ENTRIES];
                int n = hbm_stats_flatten(&r.stats, e, HBM_STAT_ENTRIES);
                for (int i = 0; i < n; i++)
                    printf("%s %lld\n", e[i].name, (long long)e[i].value);
            }
        }
    }
    trace_free(&c.t);
    return rc;
}

/* sweep --html OUT: the ranking's first settings (and the user's own) as view's page, side by side. */
#define SWEEP_PAGE_RUNS 4
typedef struct sweep_page {
    const char *path;
    trace_cmd *c;
} sweep_page;

static int sweep_html(const sweep_outcome *so, void *ctx)
{
    const sweep_page *sp = ctx;
    const trace *t[VIEW_RUNS_MAX];
    replay_opts o[VIEW_RUNS_MAX];
    const char *names[VIEW_RUNS_MAX], *labels[VIEW_RUNS_MAX];
    char text[VIEW_RUNS_MAX][320];
    size_t n = 0;
    int base_in = 0;
    for (int pass = 0; pass < 2; pass++) /* the distinct results in rank order, then the user's setting if not in */
        for (int i = 0; i < so->n && n < SWEEP_PAGE_RUNS + 1; i++) {
            const sweep_row *r = &so->rows[i];
            if (pass == 0 ? r->same_as >= 0 || n == SWEEP_PAGE_RUNS : !r->baseline || base_in)
                continue;
            base_in |= r->baseline;
            snprintf(text[n], sizeof text[n], "rank %d: %s%s", r->rank, r->conf[0] ? r->conf : "(defaults)",
                     r->baseline ? " (yours)"
                     : r->hbm    ? " (hbmalloc plug-in)"
                                 : "");
            t[n] = &sp->c->t;
            o[n] = (replay_opts){.backend_spec = sp->c->spec, .settings = r->conf};
            names[n] = sp->c->path;
            labels[n] = text[n];
            n++;
        }
    char err[2600];
    int rc = view_write_runs(t, o, names, labels, n, 0, sp->path, err, sizeof err);
    if (rc == 2) {
        fprintf(stderr, "hbmalloc sweep: %s\n", err);
        return 2;
    }
    printf("wrote %s (the %zu settings ranked first%s, side by side)\n", sp->path, base_in ? n - 1 : n,
           base_in ? " and yours" : "");
    return 0;
}

static int cmd_sweep(int argc, char **argv)
{
    trace_cmd c = TRACE_CMD("sweep");
    sweep_opts o = {0};
    sweep_page page = {NULL, &c};
    o.progress = isatty(2);
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--grid") && i + 1 < argc) {
            o.grid = argv[++i];
        } else if (!strcmp(a, "--jobs") && i + 1 < argc) {
            o.jobs = atoi(argv[++i]);
        } else if (!strcmp(a, "--no-expandable")) {
            o.no_expandable = 1;
        } else if (!strcmp(a, "--json")) {
            o.json = 1;
        } else if (!strcmp(a, "--no-progress")) {
            o.progress = 0;
        } else if (!strcmp(a, "--baseline") && i + 1 < argc) {
            o.baseline = argv[++i];
            if (named_variable("sweep", "--baseline", o.baseline, NULL))
                return 2;
        } else if (!strcmp(a, "--conf")) {
            fprintf(stderr, "hbmalloc sweep: --conf does not apply: the grid gives the settings, and --baseline "
                            "yours\n");
            return 2;
        } else if (!strcmp(a, "--html") && i + 1 < argc) {
            page.path = argv[++i];
        } else if (shared_arg(&c, argc, argv, &i) < 0) {
            return 2;
        }
    }
    if (open_trace(&c))
        return 2;
    o.name = c.path;
    o.backend_spec = c.spec;
    o.version = c.dialect.version;
    o.framework = c.framework;
    if (page.path) {
        size_t len = strlen(page.path);
        if (len < 6 || strcmp(page.path + len - 5, ".html")) {
            fprintf(stderr, "hbmalloc sweep: --html writes a page: name it .html, not '%s'\n", page.path);
            trace_free(&c.t);
            return 2;
        }
        o.after = sweep_html;
        o.after_ctx = &page;
    }
    int rc = sweep_run(&c.t, &o, stdout);
    trace_free(&c.t);
    return rc;
}

static int cmd_view(int argc, char **argv)
{
    trace_cmd c = TRACE_CMD("view");
    const char *outp = NULL, *confs[VIEW_RUNS_MAX], *paths[VIEW_RUNS_MAX];
    size_t nconf = 0, npath = 0, detail = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") && i + 1 < argc) {
            outp = argv[++i];
        } else if (!strcmp(a, "--detail") && i + 1 < argc) {
            char *end;
            const char *d = argv[++i];
            unsigned long long x = strtoull(d, &end, 10);
            if (end == d || *end || x < 1 || x > 100000000) {
                fprintf(stderr, "hbmalloc view: --detail takes a number of allocations, 1 to 100000000, not '%s'\n", d);
                return 2;
            }
            detail = (size_t)x;
        } else if ((!strcmp(a, "--conf") && i + 1 < argc) || a[0] != '-') { /* several: runs side by side */
            if ((a[0] == '-' ? nconf : npath) == VIEW_RUNS_MAX) {
                fprintf(stderr, "hbmalloc view: at most %d runs side by side\n", VIEW_RUNS_MAX);
                return 2;
            }
            if (a[0] == '-' && named_variable("view", "--conf", argv[i + 1], NULL))
                return 2;
            if (a[0] == '-')
                confs[nconf++] = argv[++i];
            else
                paths[npath++] = a;
        } else if (shared_arg(&c, argc, argv, &i) < 0) {
            return 2;
        }
    }
    if (!outp || (nconf > 1 && npath > 1)) {
        fprintf(stderr, "hbmalloc view: usage: hbmalloc view TRACE -o OUT.svg|OUT.html|OUT.png [--conf S] "
                        "[--capacity SIZE]\n"
                        "       hbmalloc view TRACE --conf A --conf B [...] -o OUT.html   (A/B: one trace, settings)\n"
                        "       hbmalloc view TRACE1 TRACE2 [...] -o OUT.html   (before and after: traces)\n"
                        "       hbmalloc view RANK0 RANK1 [...] -o OUT.png   (ranks side by side: .svg too)\n");
        return 2;
    }
    size_t n = nconf > npath ? nconf : npath ? npath : 1;
    trace_cmd cs[VIEW_RUNS_MAX];
    replay_opts o[VIEW_RUNS_MAX];
    const trace *t[VIEW_RUNS_MAX];
    const char *names[VIEW_RUNS_MAX];
    size_t opened = 0;
    int rc = 0;
    for (size_t k = 0; k < n && rc == 0; k++) {
        cs[k] = c;
        cs[k].path = npath ? paths[npath > 1 ? k : 0] : NULL;
        if (nconf) {
            cs[k].settings = confs[nconf > 1 ? k : 0];
            cs[k].conf_given = 1;
        }
        if (k == 0 || npath > 1) { /* one trace under several settings is read once */
            if (open_trace(&cs[k])) {
                rc = 2;
                break;
            }
            release_to_allocator(&cs[k]);
            opened = k + 1;
        } else {
            snprintf(cs[k].spec, sizeof cs[k].spec, "%s", cs[0].spec);
        }
        t[k] = npath > 1 ? &cs[k].t : &cs[0].t;
        names[k] = cs[k].path;
        o[k] = (replay_opts){.backend_spec = cs[k].spec, .settings = cs[k].settings, .seed = !cs[k].conf_given};
        if (!cs[k].conf_given && t[k]->rec.has_settings) {
            o[k].settings = t[k]->rec.settings;
            o[k].settings_from_trace = 1;
        }
    }
    if (rc == 0) {
        char err[2600];
        rc = view_write_runs(t, o, names, NULL, n, detail, outp, err, sizeof err);
        if (rc != 2)
            printf("wrote %s\n", outp);
        if (rc)
            print_error("view", err);
    }
    for (size_t k = 0; k < opened; k++)
        if (k == 0 || npath > 1)
            trace_free(&cs[k].t);
    return rc;
}

static int cmd_plan(int argc, char **argv)
{
    trace_cmd c = TRACE_CMD("plan");
    const char *outp = NULL;
    int json = 0;
    plan_opts po = {0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") && i + 1 < argc) {
            outp = argv[++i];
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if ((!strcmp(a, "--budget") || !strcmp(a, "--seed")) && i + 1 < argc) {
            uint64_t v;
            if (hbm__parse_u64(argv[++i], &v) || (!v && !strcmp(a, "--seed"))) {
                fprintf(stderr, "hbmalloc plan: %s takes a whole number%s, not '%s'\n", a,
                        strcmp(a, "--seed") ? "" : " above 0", argv[i]);
                return 2;
            }
            *(strcmp(a, "--budget") ? &po.seed : &po.budget) = v;
        } else if (!strcmp(a, "--conf") || !strcmp(a, "--capacity") || !strcmp(a, "--backend") ||
                   !strcmp(a, "--torch") || !strcmp(a, "--torch-npu")) {
            fprintf(stderr, "hbmalloc plan: %s does not apply: a plan depends on the trace alone\n", a);
            return 2;
        } else if (shared_arg(&c, argc, argv, &i) < 0) {
            return 2;
        }
    }
    if (open_trace(&c))
        return 2;
    char err[512];
    plan p;
    int rc = plan_build(&c.t, &po, &p, err, sizeof err);
    if (!rc && p.n <= 50000 && plan_check(&p, err, sizeof err)) /* the search's own result, verified */
        rc = -1;
    if (rc) {
        fprintf(stderr, "hbmalloc plan: %s\n", err);
        trace_free(&c.t);
        return 2;
    }
    double ratio = p.peak_live ? (double)p.height / (double)p.peak_live : 1.0;
    double greedy = p.peak_live ? (double)p.greedy_height / (double)p.peak_live : 1.0;
    char h[32], live[32];
    hbm__format_size(p.height, h, sizeof h);
    hbm__format_size(p.peak_live, live, sizeof live);
    if (json) {
        printf("{\"trace\":");
        hbm__json_str(stdout, c.path);
        printf(",\"allocations\":%zu,\"peak_live\":%llu,\"peak_live_rounded\":%llu,\"height\":%llu,"
               "\"ratio\":%.6f,\"greedy_height\":%llu,\"greedy_order\":\"%s\",\"evaluations\":%llu}\n",
               p.n, (unsigned long long)p.peak_live, (unsigned long long)p.peak_live_rounded,
               (unsigned long long)p.height, ratio, (unsigned long long)p.greedy_height, p.greedy_order,
               (unsigned long long)p.evaluations);
    } else {
        printf("allocations:        %zu over %zu events (%s)\n", p.n, c.t.n, c.t.format);
        printf("peak live:          %s (%llu bytes): no placement is lower\n", live, (unsigned long long)p.peak_live);
        printf("plan height:        %s (%llu bytes): %.4f x peak live\n", h, (unsigned long long)p.height, ratio);
        printf("greedy alone:       %.4f x (%s); %llu evaluations in all\n", greedy, p.greedy_order,
               (unsigned long long)p.evaluations);
    }
    if (outp) {
        FILE *f = fopen(outp, "w");
        int bad = !f || plan_write(&p, c.path, f);
        if (f && fclose(f))
            bad = 1;
        if (bad) {
            fprintf(stderr, "hbmalloc plan: cannot write %s\n", outp);
            rc = 2;
        } else if (!json) {
            plan_print_use(stdout, outp, c.path);
        }
    }
    plan_free(&p);
    trace_free(&c.t);
    return rc;
}

static int cmd_version(int argc, char **argv)
{
    if (argc) {
        fprintf(stderr, "hbmalloc version: takes nothing, not '%s'\n", argv[0]);
        return 2;
    }
    printf("hbmalloc %s\n", HBM_VERSION_STRING);
    return 0;
}

/* What runs each command; commands.c has their options and help. */
static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} runs[] = {
    {"replay", cmd_replay},  {"sweep", cmd_sweep}, {"view", cmd_view},       {"plan", cmd_plan},  {"conf", cmd_conf},
    {"doctor", doctor_main}, {"top", top_main},    {"version", cmd_version}, {"help", help_main},
};

int main(int argc, char **argv)
{
    if (argc < 2) {
        short_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version"))
        cmd = "version";
    else if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h"))
        cmd = "help";
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        const cli_cmd *c = cli_command(runs[i].name);
        if (strcmp(runs[i].name, cmd) || !c)
            continue;
        /* Every command reads its arguments as the table puts them: --name=value split, --help answered. */
        char **args = malloc((2 * (size_t)argc + 1) * sizeof *args);
        int n = 0, rc = args ? cli_args(c, cli_commands, cli_ncommands, argc - 2, argv + 2, args, &n) : 2;
        if (rc == 0)
            rc = runs[i].run(n, args);
        else if (rc == 1) /* the help was asked for, and printed */
            rc = 0;
        free(args);
        return rc;
    }
    unknown_command(cmd);
    return 2;
}
