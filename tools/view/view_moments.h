/* view_moments.h: the view page of a run too large to send whole (view_moments.c), and the records it is made
 * from (view_html.c gathers them). */
#ifndef HBM_TOOLS_VIEW_MOMENTS_H
#define HBM_TOOLS_VIEW_MOMENTS_H

#include <stdint.h>
#include <stdio.h>

#include "hbmalloc.h"

#define OPEN UINT32_MAX /* an end not reached */

typedef struct v_alloc { /* an allocation: live at positions start <= p < end */
    uint32_t start, end;
    uint64_t addr, size, requested;
    hbm_stream stream;
    uint32_t stack; /* its stack in the trace's texts (trace_meta), 0: none */
    uint32_t freed; /* a pending free: from here to end the block is freed, waiting on another stream; 0: none */
} v_alloc;

typedef struct v_range { /* an expandable segment's whole address range */
    uint64_t addr, size;
} v_range;

typedef struct v_run { /* a reserved range: a segment, or mapped pages of an expandable segment; or pages of a
                          sleeping pool, given back (view_html.c's asleep ranges: range is then the sleep's v_nap) */
    uint32_t start, end;
    uint64_t addr, size;
    hbm_stream stream;
    int mapped;    /* pages of an expandable segment */
    int32_t range; /* mapped pages: which expandable segment's address range holds them (view_html.c numbers the
                      ranges seen), -1: not known; runs of one range are one segment, and what lies between them is
                      unmapped */
} v_run;

typedef struct v_nap {        /* a sleep or wake event of a tagged pool (EV_SLEEP, EV_WAKE) */
    uint32_t p;               /* the position after it */
    uint32_t tag;             /* its tag in the trace's texts (trace_tag), 0: not said */
    int wake, backup, placed; /* placed: replayed (a pool the trace names), else drawn only */
    uint64_t bytes;           /* the recording's: pages given back or mapped again (0: not said) */
    int64_t resv0, resv1;     /* the replay's reserved bytes before and after it */
} v_nap;

/* The segment map of the page, as the page draws it: MAP_ROWS rows of MAP_W pixels. */
#define MAP_ROWS 16
#define MAP_W 1080

/* Writes `"moments":[...]` for positions x0 .. last (nmust more positions besides evenly spaced ones): at each, the
 * figures (reserved, allocated, cached free, largest free block, free blocks, segments, live allocations; with pages
 * of sleeping pools (asleep: those ranges, nasleep of them), their bytes and the allocated blocks they hold, apart;
 * and the allocator's statistics there, from alloc/resv, point j at position x0 + j) and the map drawn to pixels
 * (run-length codes: 0 free, 1 allocated, 2 mixed, 3 pending free; block boundaries, segment starts and unmapped gaps
 * between mapped runs of one expandable segment as pixel indices). The records are in the order made (starts never
 * decrease). 0, or -1 when host memory ran out. */
int view_moments_write(FILE *f, const v_alloc *al, size_t nal, const v_run *run, size_t nrun, const v_run *asleep,
                       size_t nasleep, uint32_t x0, uint32_t last, const int64_t *alloc, const int64_t *resv,
                       const uint32_t *must, size_t nmust);

#endif
