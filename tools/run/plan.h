/*
 * plan.h: offline memory planning. Given every allocation's size and lifetime
 * (a trace read whole), place each at an offset in one region so that no two
 * buffers live at the same time overlap, as low as possible: the region's
 * height is the device memory a job needs with no virtual memory and no
 * caching policy (STAlloc's and MindSpore SOMAS's problem; exact solvers such
 * as MiniMalloc give the optimum on small instances).
 *
 * The search is the library's (hbm_plan_lifetimes, src/policy/lifetime_planner.c), which the
 * step plan uses inside a running job.
 */
#ifndef HBM_TOOLS_PLAN_H
#define HBM_TOOLS_PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "hbmalloc.h"
#include "trace/trace.h"

#define PLAN_ALIGN 512 /* every offset and size is a multiple of this (PyTorch's rounding) */

typedef struct plan_buf {
    uint64_t size;       /* rounded to PLAN_ALIGN */
    uint64_t requested;  /* as the trace asked */
    uint64_t offset;     /* in the region */
    uint32_t alloc;      /* the trace's allocation number (0 = its first alloc) */
    uint32_t start, end; /* live over events [start, end) of the trace */
} plan_buf;

typedef struct plan_opts {
    uint64_t budget; /* evaluations of the greedy (0: automatic, from the number of buffers; plan_budget_max) */
    uint64_t seed;   /* of the random orders */
} plan_opts;

typedef struct plan {
    plan_buf *b;
    size_t n;
    uint64_t height;            /* the region: max offset + size */
    uint64_t peak_live;         /* the most requested bytes live at once: no plan is lower */
    uint64_t peak_live_rounded; /* the same with sizes rounded to PLAN_ALIGN */
    uint64_t greedy_height;     /* the best of the eight greedy orders, before improvement */
    char greedy_order[24];      /* which order that was */
    uint64_t evaluations;       /* greedy runs made */
} plan;

/* Plans every allocation of t. 0, or -1 with a message (out of host memory). */
/* The largest budget plan_build takes for n allocations (100 times the default's work, at most 100,000). */
uint64_t plan_budget_max(size_t n);
int plan_build(const trace *t, const plan_opts *o, plan *out, char *err, size_t errlen);
void plan_free(plan *p);
/* No two buffers that live at the same time overlap, and height covers them: 0, or -1 naming the first pair. */
int plan_check(const plan *p, char *err, size_t errlen);
/* The plan as text (docs/TRACE_FORMAT.md, "Plan files"). 0, or -1 when the write failed. */
int plan_write(const plan *p, const char *source, FILE *f);
/* After `plan -o`: "wrote PATH" and how to use it, as lines to paste in a shell: the HBMALLOC_CONF setting that
 * serves it in a job (the file's absolute path, so that the job may start elsewhere) and the replay of trace_path
 * that shows it served; or, when the settings cannot name the path, why and what to do. */
void plan_print_use(FILE *out, const char *plan_path, const char *trace_path);

#endif
