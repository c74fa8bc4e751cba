/* view.h: draw what memory looked like during a replay, as SVG or HTML. */
#ifndef HBM_TOOLS_VIEW_H
#define HBM_TOOLS_VIEW_H

#include "replay.h"
#include "trace.h"

/* Replay t and write the picture to path (".html" gives a page, else SVG).
 * 0 ok; 1 the replay ran out of memory (the picture is written, ending at the failed request, marked; err
 * says where); 2 error. */
int view_write(const trace *t, const replay_opts *o, const char *name, const char *path, char *err, size_t errlen);

#endif
