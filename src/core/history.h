/* history.h: the history ring (history.c), recorded into at PyTorch's points; snapshots read it (io/snapshot.c). */
#ifndef HBM_CORE_HISTORY_H
#define HBM_CORE_HISTORY_H

#include "core/types.h"

void hbm__record(hbm_allocator *a, uint32_t action, uint64_t addr, uint64_t size, hbm_stream stream, hbm_label label);
static inline void hbm__trace(hbm_allocator *a, hbm_trace_action action, uint64_t addr, uint64_t size,
                              hbm_stream stream)
{
    if (a->history)
        hbm__record(a, action, addr, size, stream, a->context);
}
/* An entry about a block carries the label of its allocation. */
static inline void hbm__trace_block(hbm_allocator *a, hbm_trace_action action, const hbm__block *b, uint64_t size)
{
    if (a->history)
        hbm__record(a, action, b->addr, size, b->stream, b->label);
}

#endif
