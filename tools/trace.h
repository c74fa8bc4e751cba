/*
 * trace.h: one in-memory event list for every trace format. Importers fill
 * it; replay feeds it to the public API. Ids are resolved to dense slots at
 * read time so replay needs no hashing.
 */
#ifndef HBM_TOOLS_TRACE_H
#define HBM_TOOLS_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "hbmalloc.h"

typedef enum trace_kind { EV_ALLOC = 0, EV_FREE = 1, EV_EMPTY_CACHE = 2 } trace_kind;

typedef struct trace_event {
    uint64_t size;     /* EV_ALLOC: bytes requested */
    hbm_stream stream; /* EV_ALLOC: stream */
    uint32_t slot;     /* EV_ALLOC / EV_FREE: dense index of the block's id */
    uint8_t kind;
    uint32_t line;     /* source line, for messages */
} trace_event;

typedef struct trace {
    trace_event *ev;
    size_t n, cap;
    size_t nslots;     /* slots needed: the most blocks live at once */
    size_t nstreams;   /* distinct streams seen */
    uint64_t allocs, frees;
} trace;

void trace_init(trace *t);
void trace_free(trace *t);
/* Read hbmalloc's text format (docs/TRACE_FORMAT.md). Returns 0, or -1 with
 * "path:line:column: message" in err. */
int trace_read_text(const char *path, trace *t, char *err, size_t errlen);
int trace_read_text_mem(const char *name, const char *data, size_t len, trace *t, char *err, size_t errlen);

#endif
