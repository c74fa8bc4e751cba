/*
 * commands.c: every command's options, one table each (tools/run/options.h), which the parsing reads and the help
 * prints, so that what `--help` lists is what the command takes; the screens of plain `hbmalloc` and of a command it
 * does not know; `hbmalloc help [COMMAND|DOC]`, which prints a command's help or one of the documents built into the
 * binary (DOC.md of docs/, CMakeLists.txt: a wheel installs no docs/ folder, and the help names them this way so that
 * the name works wherever hbmalloc is installed, offline). Runs no command.
 */
#include "commands.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "util.h"

/* Built from docs/ by CMakeLists.txt (docs_table.c). */
struct hbm_doc {
    const char *name, *text;
};
extern const struct hbm_doc hbm_docs[];
extern const size_t hbm_ndocs;

/* The options replay, sweep and view share; each line as it reads in all three. */
#define OPT_CAPACITY                                                                            \
    {                                                                                           \
        "--capacity", "SIZE", "the device's capacity, with a unit: 80GiB (the default), 512MiB" \
    }
#define OPT_BACKEND                                                                                        \
    {                                                                                                      \
        "--backend", "SPEC", "the device: sim[:options] (the default; hbmalloc help SIM), or cuda (a GPU)" \
    }
#define OPT_DEVICE                                                          \
    {                                                                       \
        "--device", "N", "which device's history of a snapshot (default 0)" \
    }
#define OPT_TORCH                                                                   \
    {                                                                               \
        "--torch", "VERSION", "your PyTorch release: the settings as it reads them" \
    }
#define OPT_TORCH_NPU                                                                             \
    {                                                                                             \
        "--torch-npu", "VERSION", "your torch_npu release: PYTORCH_NPU_ALLOC_CONF as it reads it" \
    }
#define OPT_STEPS                                                                                    \
    {                                                                                                \
        "--steps", "auto|N", "mark training steps: where the allocations repeat, or every N of them" \
    }
#define FRAMEWORK_NOTE "framework (PyTorch or torch_npu): hbmalloc help TOOL, \"The framework\"\n"

static const cli_opt replay_opts[] = {
    {"--conf", "STRING", "allocator settings (default: the environment's, as the framework reads them)"},
    OPT_CAPACITY,
    OPT_BACKEND,
    OPT_TORCH,
    OPT_TORCH_NPU,
    OPT_DEVICE,
    {"--stats", NULL, "print every statistic under memory_stats() names"},
    {"--check", NULL, "run the validator after every event (slow)"},
    {"--min-capacity", NULL, "find the smallest capacity that runs the trace without OOM"},
    OPT_STEPS,
    {"--fresh-start", NULL, "a snapshot begun mid-run: start from an empty device, not its recorded state"},
    {"--snapshot", "FILE", "write its snapshot at the end or the OOM: FILE.json as JSON, else a pickle"},
    {NULL, NULL, NULL},
};

static const cli_opt sweep_opts[] = {
    OPT_CAPACITY,
    OPT_BACKEND,
    OPT_DEVICE,
    {"--grid", "GRID", "'key=v1,v2;key2=v3' in place of the default 48 settings ('-': unset)"},
    {"--no-expandable", NULL, "leave expandable segments out (old firmware)"},
    OPT_STEPS,
    {"--baseline", "SETTINGS", "yours (default: the framework's PYTORCH_* variable)"},
    {"--torch", "VERSION", "your PyTorch release: what it refuses is left out"},
    {"--torch-npu", "VERSION", "your torch_npu release: likewise, and the advice is PYTORCH_NPU_ALLOC_CONF"},
    {"--jobs", "N", "replays at once (default: one per core)"},
    {"--json", NULL, "the ranking as JSON"},
    {"--no-progress", NULL, "no progress bar (one is drawn on a terminal)"},
    {"--html", "OUT.html", "the first settings of the ranking and yours side by side, as view's page"},
    {"--conf", "STRING", NULL}, /* refused: the grid and --baseline are the settings */
    {NULL, NULL, NULL},
};

static const cli_opt view_opts[] = {
    {"-o", "OUT", "OUT.html (an interactive page), OUT.svg, or OUT.png (rsvg-convert draws it)"},
    {"--conf", "STRING", "allocator settings; given twice or more: one run each, side by side"},
    {"--detail", "N", "a run of more than N allocations: the map at 400 moments (default 1000000)"},
    OPT_CAPACITY,
    OPT_BACKEND,
    OPT_DEVICE,
    OPT_TORCH,
    OPT_TORCH_NPU,
    OPT_STEPS,
    {NULL, NULL, NULL},
};

static const cli_opt plan_opts[] = {
    {"-o", "FILE", "write the plan (hbmalloc help TRACE_FORMAT, \"Plan files\")"},
    {"--budget", "N", "greedy evaluations of the improvement search (default: from the trace's size)"},
    {"--seed", "N", "of the search's random moves (default 1: the same plan every run)"},
    OPT_DEVICE,
    {"--json", NULL, "the figures as JSON"},
    /* read to be refused: a plan depends on the trace alone */
    {"--conf", "STRING", NULL},
    {"--capacity", "SIZE", NULL},
    {"--backend", "SPEC", NULL},
    {"--torch", "VERSION", NULL},
    {"--torch-npu", "VERSION", NULL},
    {"--steps", "auto|N", NULL},
    {NULL, NULL, NULL},
};

static const cli_opt conf_opts[] = {
    {"--dialect", "cuda|npu", "PYTORCH_CUDA_ALLOC_CONF (PyTorch) or PYTORCH_NPU_ALLOC_CONF (torch_npu)"},
    {"--torch", "VERSION", "that PyTorch release's parser (default the newest known)"},
    {"--torch-npu", "VERSION", "that torch_npu release's parser (default the newest known)"},
    {"--vmm", "yes|no", "whether the device has virtual memory (torch_npu's expandable rule)"},
    {"--strict", NULL, "as HBMALLOC_CONF: hbmalloc's strict rules and its own hbm_* keys"},
    {"--backend", "SPEC", "as an allocator on that device runs them (capability fallbacks included)"},
    {"--releases", NULL, "list the releases known, their parsers and keys"},
    {"--keys", NULL, "list every key hbmalloc reads (a Markdown table)"},
    {NULL, NULL, NULL},
};

static const cli_opt doctor_opts[] = {
    {"--log", "FILE", "read logs (files, folders, 'patterns'): failures; which rank failed first"},
    {"--torch", "VERSION", "your PyTorch release (else read from the logs)"},
    {"--torch-npu", "VERSION", "your torch_npu release (else read from the logs)"},
    {"--trace", "SNAPSHOT", "replay it under the sweep's grid on this device to prove the advice"},
    {"--capacity", "SIZE", "the device's capacity for --trace, when no out-of-memory message gives it"},
    {"--device", "N", "which of the snapshot's devices, when it has several"},
    {"--snapshot", "FILE...", "every rank's snapshot (files, folders, 'patterns'): the ranks that stand out"},
    {"--json", NULL, "the findings as JSON"},
    {"--no-env", NULL, "the logs and the trace only, not this machine"},
    {"--root", "DIR", "read /usr/local/Ascend and the like under DIR"},
    {NULL, NULL, NULL},
};

static const cli_opt top_opts[] = {
    {"--once", NULL, "print once and exit (default: refresh until q or Ctrl-C)"},
    {"--interval", "SECONDS", "between refreshes (default 1)"},
    {"--sort", "KEY", "rank (default), reserved, allocated, unallocated or pid (s on the screen)"},
    {"--json", NULL, "a JSON document per refresh"},
    {"--csv", "FILE", "append a line per process and device to FILE"},
    {"--textfile", "DIR", "write DIR/hbmalloc.prom for node_exporter's textfile collector"},
    {"--dir", "DIR", "where the records are (default $HBMALLOC_TOP_DIR, else /dev/shm)"},
    {"--clean", NULL, "remove the records of exited processes (they are always ignored)"},
    {NULL, NULL, NULL},
};

const cli_cmd cli_commands[] = {
    {"replay", "TRACE", "replay an allocation trace on a simulated device: peaks, calls, OOMs", replay_opts,
     "TRACE: hbmalloc text, a PyTorch / torch_npu snapshot pickle, an RMM CSV log or a tensor-lifetime\n"
     "  CSV (id,lower,upper,size), told apart by content; a snapshot's recorded settings unless --conf\n" //
     FRAMEWORK_NOTE "exit status: 0 ran clean, 1 out of memory, 2 bad input\n"
     "more: hbmalloc help TOOL\n"},
    {"sweep", "TRACE", "replay it under a grid of settings, recommend one against yours", sweep_opts,
     "One capacity, given as --capacity or as capacity= in --backend.\n" FRAMEWORK_NOTE
     "exit status: 0 the best runs clean, 1 every setting runs out of memory, 2 bad input\n"
     "more: hbmalloc help TOOL\n"},
    {"view", "TRACE -o OUT", "draw allocated and reserved over time, and the segments at the peak", view_opts,
     "Runs side by side in one OUT.html: TRACE --conf A --conf B (settings), or TRACE1 TRACE2 (traces).\n"
     "exit status: 0 drawn, 1 drawn up to an out-of-memory (marked), 2 bad input\n"
     "more: hbmalloc help TOOL\n"},
    {"plan", "TRACE", "place every allocation in one region, as low as possible", plan_opts,
     "The memory a job needs with a plan and no virtual memory; the plan is checked (no two live\n"
     "allocations overlap) before it is written.\n"
     "exit status: 0 planned, 2 bad input\n"
     "more: hbmalloc help TOOL\n"},
    {"conf", "[SETTINGS]", "the settings as PyTorch or torch_npu reads them, or why refused", conf_opts,
     "Without SETTINGS: the environment (HBMALLOC_CONF, else the framework's variable; both frameworks'\n"
     "variables set: each as its own framework reads it). Each lenient reading is listed under warnings.\n" //
     FRAMEWORK_NOTE "exit status: 0 accepted, 2 refused or bad usage\n"
     "more: hbmalloc help CONFIGURATION (the keys; the releases, after them)\n"},
    {"doctor", "", "what is wrong with device memory here, why, and what to do next", doctor_opts,
     "Reads the backends, driver, firmware and CANN versions, npu-smi, nvidia-smi, virtual memory, the\n"
     "visible devices and the allocator settings in the environment (as your release reads them).\n"
     "exit status: 0 nothing to act on, 1 findings to act on, 2 bad usage, an unreadable log or snapshot,\n"
     "or nothing to check (--no-env without --log, --trace or --snapshot)\n"
     "more: hbmalloc help DOCTOR\n"},
    {"top", "", "the allocators of this user's running jobs, live", top_opts,
     "Per process and device: allocated, reserved of the device's capacity, unallocated, fragmentation,\n"
     "the largest free block, peaks, a trend, OOMs and retries; a total per device.\n"
     "exit status: 0, 2 bad usage or an unreadable folder\n"
     "more: hbmalloc help MONITOR\n"},
    {"version", "", "print the version", NULL, NULL},
    {"help", "[COMMAND|DOC]", "a command's options, or one of hbmalloc's documents (TOOL, SIM, ...)", NULL, NULL},
};

const size_t cli_ncommands = sizeof cli_commands / sizeof cli_commands[0];

const cli_cmd *cli_command(const char *name)
{
    for (size_t i = 0; i < cli_ncommands; i++)
        if (!strcmp(cli_commands[i].name, name))
            return &cli_commands[i];
    return NULL;
}

/* The documents' names, a line of them at most CLI_COLUMNS wide after the prefix. */
static void list_docs(FILE *f, const char *prefix)
{
    size_t col = strlen(prefix);
    fputs(prefix, f);
    for (size_t i = 0; i < hbm_ndocs; i++) {
        size_t len = strlen(hbm_docs[i].name);
        if (col + 1 + len > CLI_COLUMNS) {
            fputs("\n ", f);
            col = 1;
        }
        fprintf(f, " %s", hbm_docs[i].name);
        col += 1 + len;
    }
    fputc('\n', f);
}

void usage_all(FILE *f)
{
    fputs("usage: hbmalloc <command> [options]\n"
          "An option's value follows it or joins it with '=': --capacity 40GiB, --capacity=40GiB.\n"
          "hbmalloc <command> --help: that command alone; hbmalloc help DOC: a document (below)\n",
          f);
    for (size_t i = 0; i < cli_ncommands; i++) {
        fputc('\n', f);
        cli_help(f, &cli_commands[i]);
    }
    fputc('\n', f);
    list_docs(f, "documents (hbmalloc help DOC):");
}

void short_usage(FILE *f)
{
    fputs("usage: hbmalloc <command> [options]\n", f);
    for (size_t i = 0; i < cli_ncommands; i++) {
        char head[64];
        snprintf(head, sizeof head, "%s %s", cli_commands[i].name, cli_commands[i].args);
        fprintf(f, "  hbmalloc %-19s %s\n", head, cli_commands[i].what);
    }
    fputs("hbmalloc <command> --help: its options; hbmalloc --help: all of them (hbmalloc help TOOL)\n", f);
}

void unknown_command(const char *cmd)
{
    const char *names[32];
    size_t n = 0;
    for (size_t i = 0; i < cli_ncommands && n < 32; i++)
        names[n++] = cli_commands[i].name;
    const char *near = hbm__nearest(cmd, names, n);
    if (near)
        fprintf(stderr, "hbmalloc: unknown command '%s': did you mean 'hbmalloc %s'?\n\n", cmd, near);
    else
        fprintf(stderr, "hbmalloc: unknown command '%s'\n\n", cmd);
    short_usage(stderr);
}

/* A document by name as the help gives it (TOOL), or as a file (TOOL.md, docs/TOOL.md); any case. */
static const struct hbm_doc *find_doc(const char *name)
{
    char want[64];
    const char *base = strncmp(name, "docs/", 5) ? name : name + 5;
    size_t len = strlen(base);
    if (len > 3 && !strcasecmp(base + len - 3, ".md"))
        len -= 3;
    if (len >= sizeof want)
        return NULL;
    snprintf(want, sizeof want, "%.*s", (int)len, base);
    for (size_t i = 0; i < hbm_ndocs; i++)
        if (!strcasecmp(hbm_docs[i].name, want))
            return &hbm_docs[i];
    return NULL;
}

int help_main(int argc, char **argv)
{
    if (argc == 0) {
        usage_all(stdout);
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "hbmalloc help: one command or document at a time\n");
        return 2;
    }
    const cli_cmd *c = cli_command(argv[0]);
    if (c) {
        cli_help(stdout, c);
        return 0;
    }
    const struct hbm_doc *d = find_doc(argv[0]);
    if (d) {
        fputs(d->text, stdout);
        return 0;
    }
    const char *names[64];
    char upper[64];
    size_t n = 0;
    for (size_t i = 0; i < cli_ncommands && n < 64; i++)
        names[n++] = cli_commands[i].name;
    for (size_t i = 0; i < hbm_ndocs && n < 64; i++)
        names[n++] = hbm_docs[i].name;
    snprintf(upper, sizeof upper, "%s", argv[0]);
    const char *near = hbm__nearest(argv[0], names, n);
    if (!near) { /* documents are named in capitals: `help tol` is TOL's neighbour, TOOL */
        for (char *p = upper; *p; p++)
            *p = (char)toupper((unsigned char)*p);
        near = hbm__nearest(upper, names, n);
    }
    if (near)
        fprintf(stderr, "hbmalloc help: no command or document '%s': did you mean 'hbmalloc help %s'?\n", argv[0],
                near);
    else
        fprintf(stderr, "hbmalloc help: no command or document '%s'\n", argv[0]);
    list_docs(stderr, "documents:");
    return 2;
}
