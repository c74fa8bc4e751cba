/*
 * view_ranks.h: several ranks' replays drawn side by side in one static picture (view_ranks.c): a column per rank,
 * one byte scale for all, so that the rank above the others shows as the taller column. view.c replays; this draws.
 */
#ifndef HBM_TOOLS_VIEW_RANKS_H
#define HBM_TOOLS_VIEW_RANKS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One rank's replay: its file, and allocated and reserved bytes after each event (n points). */
typedef struct view_column {
    const char *name;
    const int64_t *alloc, *resv;
    size_t n;
    int64_t peak_alloc, peak_resv;
    int oom;         /* the replay ran out of memory: its curves end there */
    int64_t outside; /* an hbmalloc snapshot's memory outside hbmalloc when it was taken (-1: unknown) */
} view_column;

/* The SVG of columns c[0..n) (n >= 2), each labelled by its rank (its file's name, trace/ranks.h) and its peak, the
 * outliers by ranks.h's rule marked; device: the replays' device, for the subtitle. */
void view_ranks_svg(FILE *f, const view_column *c, size_t n, const char *device);

#endif
