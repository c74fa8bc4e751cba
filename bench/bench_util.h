/* bench_util.h: what both benchmarks need: a clock, the median of runs, the replay loop. */
#ifndef HBM_BENCH_UTIL_H
#define HBM_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

#include "hbmalloc.h"
#include "trace/trace.h"

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_dcmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of v[0..n) (sorts v). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_dcmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A trace's events on allocator a, slot[] holding the live pointers. empty_cache events are replayed when
 * with_empty_cache is set (glibc has none to compare with). Only the loop: no clock, no setup. */
static inline void bench_replay(hbm_allocator *a, const trace *t, void **slot, int with_empty_cache)
{
    for (size_t i = 0; i < t->n; i++) {
        const trace_event *e = &t->ev[i];
        if (e->kind == EV_ALLOC)
            hbm_malloc(a, (size_t)e->size, e->stream, &slot[e->slot]);
        else if (e->kind == EV_FREE)
            hbm_free(a, slot[e->slot]);
        else if (e->kind == EV_STEP)
            hbm_step(a);
        else if (with_empty_cache)
            hbm_empty_cache(a);
    }
}

#endif
