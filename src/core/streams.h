/* streams.h: event-deferred frees and private pools (streams.c). */
#ifndef HBM_CORE_STREAMS_H
#define HBM_CORE_STREAMS_H

#include "core/types.h"

/* The pool a request of `size` (rounded) on `stream` goes to. */
hbm__pool *hbm__route_pool(hbm_allocator *a, size_t size, hbm_stream stream);
/* Record events for a freed block's other streams; the block is freed when all complete. */
hbm_status hbm__insert_events(hbm_allocator *a, hbm__block *b);
/* Free a block whose other streams' uses need events (hbm_free), or defer it during a capture. */
hbm_status hbm__free_with_uses(hbm_allocator *a, hbm__block *b);
/* Record the deferred frees' events, then free the blocks whose events have completed (start of
 * every malloc that is not in a capture). */
void hbm__process_events(hbm_allocator *a);
/* Wait for every pending event and free the blocks (empty_cache, the OOM retry). */
hbm_status hbm__sync_events(hbm_allocator *a);
/* empty_cache for released private pools; deletes those left with no segment. */
hbm_status hbm__release_mempools(hbm_allocator *a);
void hbm__stream_teardown(hbm_allocator *a);
/* The pool with id, or NULL (streams.c). */
hbm__mempool *hbm__mempool_find(hbm_allocator *a, hbm_mempool id);

#endif
