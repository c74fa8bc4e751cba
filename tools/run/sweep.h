/* sweep.h: replay a trace under a grid of settings and recommend one. */
#ifndef HBM_TOOLS_SWEEP_H
#define HBM_TOOLS_SWEEP_H

#include <stdio.h>

#include "replay.h"
#include "trace/trace.h"

typedef struct sweep_outcome sweep_outcome;

typedef struct sweep_opts {
    const char *name;         /* the trace, for the report */
    const char *backend_spec; /* target device (its dialect and capabilities decide what is tried) */
    const char *grid;         /* NULL: the default grid */
    int no_expandable;        /* leave expandable segments out (old firmware) */
    int jobs;                 /* threads; 0: all cores */
    int json;
    int progress;          /* draw a progress bar on stderr */
    const char *baseline;  /* the user's setting, a row of its own; NULL: the dialect's PYTORCH_* variable */
    const char *version;   /* the user's PyTorch / torch_npu release; NULL: unknown */
    const char *framework; /* whose settings, and why (dialect.c's dialect_line), for the report; NULL: not said */
    /* Called with the ranking after it is printed (sweep --html draws it); its nonzero return is sweep_run's. */
    int (*after)(const sweep_outcome *so, void *ctx);
    void *after_ctx;
} sweep_opts;

typedef struct sweep_row {
    char conf[256]; /* what was replayed (strict) */
    replay_result r;
    int rc;
    int baseline; /* the user's setting */
    int hbm;      /* an hbmalloc policy (HBMALLOC_CONF, the plug-ins only): not a framework setting */
    int same_as;  /* index of an earlier row with identical results, or -1 */
    int rank;     /* of its result among the distinct results: 1, 2, 3, ... (rows of one result share it) */
} sweep_row;

struct sweep_outcome {
    sweep_row *rows; /* ranked: clean runs first, then lower peak reserved, less device time, shorter string */
    int n;
    int results;     /* distinct results (the highest rank) */
    int rejected;    /* left out: the release refuses them */
    int unsupported; /* left out: expandable segments on a device without virtual memory */
    int inactive;    /* left out: garbage collection without a memory fraction (it never runs) */
    hbm_dialect dialect;
    int vmm;                  /* the device's virtual memory, as the sweep used it */
    char why[256];            /* why not, when vmm is 0 */
    char baseline_note[1200]; /* the user's setting: what it is, what the release makes of it, or why no row */
    char release[128];        /* the release the strings are checked against */
    int jobs, wanted_jobs;    /* replays run at a time, and what the cores (or --jobs) asked */
    uint64_t job_bytes;       /* host memory a replay was reckoned to hold (sweep.c, jobs_in_memory) */
};

/* Replay the grid (and the baseline); 0, or 2 with err set. */
int sweep_compute(const trace *t, const sweep_opts *o, sweep_outcome *out, char *err, size_t errlen);
void sweep_outcome_free(sweep_outcome *out);
/* The row to recommend: the best clean run of the framework's settings, or the user's own when it is as good;
 * NULL if every such row hit OOM. */
const sweep_row *sweep_best(const sweep_outcome *out);
/* On a device without virtual memory the sweep also runs hbmalloc's arena policy (HBMALLOC_CONF, the plug-ins),
 * the smallest arena that runs the trace: that row when it runs clean, else NULL. */
const sweep_row *sweep_best_hbm(const sweep_outcome *out);
/* What an hbmalloc-policy row is, for people: "arena policy" or "step plan", and what goes with it ("the rest of
 * the device left free", or the reminder to mark the steps). */
const char *sweep_hbm_name(const sweep_row *row);
const char *sweep_hbm_note(const sweep_row *row);
/* The advice for a row, safe to paste: "export VAR='...'" (or "unset VAR"), and, where the string needs a memory
 * fraction the release cannot read from the variable, the call to make in code. */
void sweep_advice(const sweep_outcome *out, const sweep_row *row, const char *version, char *exp, size_t explen,
                  char *code, size_t codelen);

/* 0: the best setting runs clean; 1: every setting hits OOM; 2: bad input. */
int sweep_run(const trace *t, const sweep_opts *o, FILE *out);

#endif
