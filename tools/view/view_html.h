/* view_html.h: the interactive page of `hbmalloc view -o OUT.html` (view_html.c). */
#ifndef HBM_TOOLS_VIEW_HTML_H
#define HBM_TOOLS_VIEW_HTML_H

#include <stdio.h>

#include "run/replay.h"
#include "trace/trace.h"

typedef struct view_rec view_rec;

/* What the page needs from a replay, gathered event by event: every allocation's lifetime, place and size, and
 * every reserved range's (segments; mapped pages of expandable segments, from the allocator's history). */
view_rec *view_rec_new(const trace *t);
void view_rec_free(view_rec *v);
/* After the start state is seeded (slot holds its blocks) and before the first event: 0, or -1 (out of memory). */
int view_rec_begin(view_rec *v, hbm_allocator *a, const trace *t, void **slot, size_t first);
/* Around event i: before it runs, and after it ran with status st. 0, or -1 (out of memory or a history that
 * cannot be read: err says). */
int view_rec_before(view_rec *v, hbm_allocator *a, const trace_event *e, void **slot, char *err, size_t errlen);
int view_rec_after(view_rec *v, hbm_allocator *a, const trace_event *e, size_t i, void **slot, hbm_status st, char *err,
                   size_t errlen);
/* At the end (or at the OOM): the rest of the history read. 0 or -1. */
int view_rec_end(view_rec *v, hbm_allocator *a, char *err, size_t errlen);

typedef struct view_page_info {
    const char *name, *settings, *device;
    const char *conf;            /* the settings string alone ("": the defaults): the run's short name on the page */
    const char *label;           /* how the page names the run (NULL: by its settings or trace) */
    size_t events, first;        /* events of the trace; the first one replayed (after a seeded start) */
    int seeded;                  /* the points begin with the seeded start state, before event `first` */
    const int64_t *alloc, *resv; /* allocated and reserved bytes: (the start state and) after each event run */
    const int64_t *asleep;       /* of the allocated bytes, those of sleeping pools' blocks (NULL: none sleep) */
    size_t n;
    size_t peak_j, peak_alloc_j; /* the first points of peak reserved and of peak allocated */
    size_t detail;               /* allocations sent whole; a run with more gets the map at moments */
    const hbm_stats *stats;
    const hbm_device_counters *dev;
    uint64_t capacity; /* the device's bytes (0: unknown) */
    int oom;
    int unfit; /* the recorded start state did not fit the device (oom_message says so): no event ran */
    size_t oom_event;
    const char *oom_message;
} view_page_info;

/* The page: the template with the data of runs 0 .. n-1 as JSON in it. 0, or -1 (write error). */
int view_html_write(FILE *f, const view_rec *const *v, const view_page_info *p, size_t n);

#endif
