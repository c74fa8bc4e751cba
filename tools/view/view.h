/* view.h: draw what memory looked like during a replay, as SVG or HTML. */
#ifndef HBM_TOOLS_VIEW_H
#define HBM_TOOLS_VIEW_H

#include "run/replay.h"
#include "trace/trace.h"

/* Replay t and write the picture to path (".html" gives a page, else SVG).
 * 0 ok; 1 the replay ran out of memory (the picture is written, ending at the failed request, marked; err
 * says where); 2 error. */
int view_write(const trace *t, const replay_opts *o, const char *name, const char *path, char *err, size_t errlen);

#define VIEW_RUNS_MAX 8
/* Runs side by side on one page (A/B: one trace under several settings, or several traces): run k replays t[k]
 * under o[k], named names[k], labelled labels[k] on the page (labels NULL, or an entry NULL: by its settings, or
 * its trace when the traces differ). HTML only when n > 1. A run of more than `detail` allocations (0: VIEW_DETAIL)
 * gets the segment map at a few hundred moments instead of every allocation. Returns as view_write (1: some run ran out of memory). */
#define VIEW_DETAIL 1000000 /* allocations a page holds whole, by default (more: the map at moments) */
int view_write_runs(const trace *const *t, const replay_opts *o, const char *const *names, const char *const *labels,
                    size_t n, size_t detail, const char *path, char *err, size_t errlen);

#endif
