/* sweep.h: replay a trace under a grid of settings and recommend one. */
#ifndef HBM_TOOLS_SWEEP_H
#define HBM_TOOLS_SWEEP_H

#include <stdio.h>

#include "trace.h"

typedef struct sweep_opts {
    const char *name;         /* the trace, for the report */
    const char *backend_spec; /* target device (its dialect and capabilities decide what is tried) */
    const char *grid;         /* NULL: the default grid */
    int no_expandable;        /* leave expandable segments out (old firmware) */
    int jobs;                 /* threads; 0: all cores */
    int json;
    int progress;             /* draw a progress bar on stderr */
} sweep_opts;

/* 0: the best setting runs clean; 1: every setting hits OOM; 2: bad input. */
int sweep_run(const trace *t, const sweep_opts *o, FILE *out);

#endif
