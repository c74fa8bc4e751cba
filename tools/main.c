/*
 * main.c: the command-line tool's dispatch and argument handling.
 *   hbmalloc replay | sweep | plan | view | conf | doctor | top | version [options]  (hbmalloc CMD --help)
 * Exit status: 0 success, 1 OOM during replay, 2 bad input or usage.
 */
#include <stdbool.h>
#include <stdio.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"
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

/* One block per command: `hbmalloc CMD --help` prints its own, `hbmalloc help` all of them. */
static const struct {
    const char *name, *text;
} help[] = {
    {"replay",
     "  replay TRACE   replay an allocation trace on the simulated device and summarise it\n"
     "      --conf STRING      allocator settings (HBMALLOC_CONF rules); default: the environment (HBMALLOC_CONF,\n"
     "                         else PYTORCH_CUDA_ALLOC_CONF / PYTORCH_NPU_ALLOC_CONF as the framework reads them)\n"
     "      --capacity SIZE    device capacity, e.g. 80GiB (default 80GiB; one capacity= inside --backend is the\n"
     "                         same: given both ways, they must agree)\n"
     "      --backend SPEC     backend spec (default sim; see docs/SIM.md)\n"
     "      --torch VERSION | --torch-npu VERSION   your release: its settings rules; --torch-npu reads\n"
     "                         PYTORCH_NPU_ALLOC_CONF. Else the framework is the backend's dialect, the snapshot's,\n"
     "                         the environment's (docs/TOOL.md, \"The framework\")\n"
     "      --stats            print every statistic under memory_stats() names\n"
     "      --check            run the validator after every event (slow)\n"
     "      --device N         which device's history of a PyTorch snapshot (default: its only one)\n"
     "      --min-capacity     find the smallest capacity that runs the trace without OOM\n"
     "      --steps auto|N     mark training steps (hbm_step) where the allocations repeat, or every N allocations;\n"
     "                         with --conf hbm_step_plan:True the step plan is learnt and used "
     "(docs/CONFIGURATION.md)\n"
     "      --fresh-start      a snapshot whose recording began mid-run: begin from an empty device (with the\n"
     "                         blocks live at its start allocated first) rather than from its recorded state\n"
     "      --snapshot FILE    write the allocator's memory snapshot with its history at the end\n"
     "                         (or at the OOM): FILE.json as JSON, else a PyTorch snapshot pickle\n"
     "                         that torch.cuda._memory_viz and pytorch.org/memory_viz open\n"
     "    TRACE: hbmalloc text, a PyTorch / torch_npu snapshot pickle, an RMM CSV log or a tensor-lifetime CSV\n"
     "    (id,lower,upper,size), told apart by content; a snapshot's recorded settings are used unless --conf\n"
     "    exit status: 0 ran clean, 1 out of memory, 2 bad input\n"},
    {"sweep", "  sweep TRACE    replay under a grid of settings on all cores, rank them against yours, recommend one\n"
              "      --capacity SIZE, --backend SPEC (the target device: its dialect and capabilities; one\n"
              "      capacity, given either way), --device N (which device's history of a snapshot),\n"
              "      --grid 'key=v1,v2;key2=...' ('-' = unset), --no-expandable (old firmware), --steps auto|N,\n"
              "      --baseline SETTINGS (yours; default the framework's PYTORCH_* variable),\n"
              "      --torch VERSION | --torch-npu VERSION (your release: what it refuses is left out; --torch-npu\n"
              "      advises PYTORCH_NPU_ALLOC_CONF; else docs/TOOL.md, \"The framework\"),\n"
              "      --jobs N, --json, --no-progress,\n"
              "      --html OUT.html (the first settings of the ranking and yours as view's page, side by side)\n"
              "    exit status: 0 the best runs clean, 1 every setting runs out of memory, 2 bad input\n"},
    {"view",
     "  view TRACE -o OUT.svg|OUT.html|OUT.png   draw allocated/reserved over time and the segments at the peak\n"
     "       (OUT.html: an interactive page; TRACE --conf A --conf B, or TRACE1 TRACE2: runs side by side;\n"
     "        --detail N: a run of more than N allocations, default 1000000, gets the map at 400 moments)\n"
     "                 (.png: the SVG rendered by librsvg's rsvg-convert, which must be on PATH)\n"
     "      --conf STRING, --capacity SIZE, --backend SPEC, --device N, --torch V | --torch-npu V\n"
     "    exit status: 0 drawn, 1 drawn up to an out-of-memory (marked), 2 bad input\n"},
    {"conf",
     "  conf [STRING]  the effective settings of STRING as the framework reads it (default: the environment;\n"
     "                 both frameworks' variables set: each as its framework reads it)\n"
     "      --dialect cuda|npu  PYTORCH_CUDA_ALLOC_CONF (PyTorch) or PYTORCH_NPU_ALLOC_CONF (torch_npu); default\n"
     "                          docs/TOOL.md, \"The framework\" (--torch-npu, --backend, the environment)\n"
     "      --torch VERSION | --torch-npu VERSION   that release's parser (default the newest known)\n"
     "      --vmm yes|no        whether the device has virtual memory (torch_npu's expandable rule)\n"
     "      --strict            as HBMALLOC_CONF: hbmalloc's strict rules and its own hbm_* keys\n"
     "      --releases          list the releases known, their parsers and keys\n"
     "      --keys              list every key hbmalloc reads (a Markdown table: docs/CONFIGURATION.md's)\n"
     "      --backend SPEC      as an allocator on that backend runs them (dialect and capability\n"
     "                          fallbacks included), e.g. --backend sim:firmware=22.0.3,dialect=npu\n"
     "    exit status: 0 accepted, 2 refused or bad usage\n"},
    {"doctor",
     "  doctor         what is wrong with device memory or communication here, why, what to do next:\n"
     "                 backends, driver/firmware/CANN versions, npu-smi, nvidia-smi, virtual memory,\n"
     "                 visible devices, the allocator settings in the environment (as your release reads them)\n"
     "      --log FILE         also read a training log (repeatable): out-of-memory messages (numbers\n"
     "                         parsed), expandable-segments warnings, HCCL/NCCL errors, framework versions\n"
     "      --torch VERSION | --torch-npu VERSION   your release (else read from the logs)\n"
     "      --trace SNAPSHOT   replay it under the sweep's grid on this device to prove the advice\n"
     "                         (--capacity SIZE when no out-of-memory message gives it)\n"
     "      --json             for machines; --no-env: the logs only; --root DIR: read /usr/local/Ascend\n"
     "                         under DIR\n"
     "    exit status: 0 nothing to act on, 1 findings to act on, 2 bad usage\n"},
    {"plan",
     "  plan TRACE     place every allocation of a recorded trace at an offset in one region, as low as possible\n"
     "                 (the memory a job needs with a plan and no virtual memory); compares it with peak live\n"
     "      -o FILE            write the plan (docs/TRACE_FORMAT.md, plan files)\n"
     "      --budget N         greedy evaluations of the improvement search (default: from the trace's size)\n"
     "      --seed N           of the search's random moves (default 1: the same plan every run)\n"
     "      --device N, --json\n"
     "    exit status: 0 planned (and checked: no two live allocations overlap), 2 bad input\n"},
    {"top",
     "  top            the allocators of this user's running jobs, live: allocated, reserved of the device's\n"
     "                 capacity, unallocated, fragmentation, largest free block, peaks, a trend, OOMs and retries per\n"
     "                 process and device, and a total per device (docs/MONITOR.md)\n"
     "      --once             print once and exit (default: refresh until q or Ctrl-C)\n"
     "      --interval S       seconds between refreshes (default 1)\n"
     "      --sort KEY         rank (default), reserved, allocated, unallocated or pid; s on the screen turns it\n"
     "      --json             a JSON document per refresh; --csv FILE: append a line per process and device\n"
     "      --textfile DIR     write DIR/hbmalloc.prom for node_exporter's textfile collector\n"
     "      --dir DIR          where the records are (default $HBMALLOC_TOP_DIR, else /dev/shm)\n"
     "      --clean            remove the records of exited processes (they are always ignored)\n"
     "    exit status: 0, 2 bad usage or an unreadable folder\n"},
    {"version", "  version        print the version\n"},
};

/* `hbmalloc --help`: every command with its options. */
static void usage(FILE *f)
{
    fprintf(f, "usage: hbmalloc <command> [options]   (hbmalloc <command> --help: that command's options)\n\n"
               "commands:\n");
    for (size_t i = 0; i < sizeof help / sizeof help[0]; i++)
        fputs(help[i].text, f);
}

/* Plain `hbmalloc`, or a command it does not know: one line per command, on a screen. */
static const struct {
    const char *name, *what;
} commands[] = {
    {"replay", "replay TRACE      replay an allocation trace on a simulated device: peaks, device calls, OOMs"},
    {"sweep", "sweep TRACE       replay it under a grid of settings and recommend one"},
    {"plan", "plan TRACE        place every allocation in one region, as low as possible"},
    {"view", "view TRACE -o F   draw it: an interactive page (.html), or .svg / .png"},
    {"conf", "conf [SETTINGS]   the settings as PyTorch or torch_npu reads them, or why refused"},
    {"doctor", "doctor            what is wrong with device memory here, and what to do"},
    {"top", "top               the allocators of running jobs, live"},
    {"version", "version           the version"},
};

static void short_usage(FILE *f)
{
    fputs("usage: hbmalloc <command> [options]\n", f);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  hbmalloc %s\n", commands[i].what);
    fputs("hbmalloc <command> --help: its options; hbmalloc --help: all of them (docs/TOOL.md)\n", f);
}

static void unknown_command(const char *cmd)
{
    const char *names[sizeof commands / sizeof commands[0]];
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        names[i] = commands[i].name;
    const char *near = hbm__nearest(cmd, names, sizeof names / sizeof names[0]);
    if (near)
        fprintf(stderr, "hbmalloc: unknown command '%s': did you mean 'hbmalloc %s'?\n\n", cmd, near);
    else
        fprintf(stderr, "hbmalloc: unknown command '%s'\n\n", cmd);
    short_usage(stderr);
}

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

/* `hbmalloc CMD --help`: 1 when printed. */
static int command_help(const char *cmd, int argc, char **argv)
{
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            for (size_t k = 0; k < sizeof help / sizeof help[0]; k++)
                if (!strcmp(help[k].name, cmd))
                    printf("usage:\n%s", help[k].text);
            return 1;
        }
    return 0;
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
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            printf("usage: hbmalloc conf [SETTINGS] [--dialect cuda|npu] [--torch VERSION | --torch-npu VERSION]\n"
                   "                     [--vmm yes|no] [--strict] [--backend SPEC] [--releases] [--keys]\n\n"
                   "Checks a settings string as the framework reads it from PYTORCH_CUDA_ALLOC_CONF (PyTorch) or\n"
                   "PYTORCH_NPU_ALLOC_CONF (torch_npu): the release given, else the newest known, with its leniency\n"
                   "(each lenient reading is listed under warnings). Without SETTINGS: the environment, as hbmalloc\n"
                   "reads it (HBMALLOC_CONF, else the framework's variable; both frameworks' set: each as its own\n"
                   "reads it). The framework: --dialect, --torch / --torch-npu, --backend, else the environment\n"
                   "(docs/TOOL.md, \"The framework\"). --strict checks it as HBMALLOC_CONF.\n"
                   "--vmm says whether the device has virtual memory (torch_npu's expandable rule depends on it).\n"
                   "--backend: the settings as an allocator on that device runs them. --releases lists the releases,\n"
                   "--keys the keys (name, dialects, value, default, what hbmalloc does with it).\n"
                   "exit status: 0 accepted, 2 refused or bad usage\n");
            return 0;
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
        if (!strcmp(a, "--grid") && i + 1 < argc)
            o.grid = argv[++i];
        else if (!strcmp(a, "--jobs") && i + 1 < argc)
            o.jobs = atoi(argv[++i]);
        else if (!strcmp(a, "--no-expandable"))
            o.no_expandable = 1;
        else if (!strcmp(a, "--json"))
            o.json = 1;
        else if (!strcmp(a, "--no-progress"))
            o.progress = 0;
        else if (!strcmp(a, "--baseline") && i + 1 < argc)
            o.baseline = argv[++i];
        else if (!strcmp(a, "--html") && i + 1 < argc)
            page.path = argv[++i];
        else if (shared_arg(&c, argc, argv, &i) < 0)
            return 2;
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
                        "       hbmalloc view TRACE1 TRACE2 [...] -o OUT.html   (before and after: traces)\n");
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

int main(int argc, char **argv)
{
    if (argc < 2) {
        short_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "doctor") && strcmp(cmd, "conf") && command_help(cmd, argc - 2, argv + 2))
        return 0;
    if (!strcmp(cmd, "replay"))
        return cmd_replay(argc - 2, argv + 2);
    if (!strcmp(cmd, "conf"))
        return cmd_conf(argc - 2, argv + 2);
    if (!strcmp(cmd, "sweep"))
        return cmd_sweep(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan"))
        return cmd_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "view"))
        return cmd_view(argc - 2, argv + 2);
    if (!strcmp(cmd, "doctor"))
        return doctor_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "top"))
        return top_main(argc - 2, argv + 2);
    if (!strcmp(cmd, "version") || !strcmp(cmd, "--version")) {
        printf("hbmalloc %s\n", HBM_VERSION_STRING);
        return 0;
    }
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    unknown_command(cmd);
    return 2;
}
