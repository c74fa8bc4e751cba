/* events.h: frees that wait for other streams' events (events.c). */
#ifndef HBM_CORE_EVENTS_H
#define HBM_CORE_EVENTS_H

#include "core/types.h"

/* Record events for a freed block's other streams; the block is freed when all complete. */
hbm_status hbm__insert_events(hbm_allocator *a, hbm__block *b);
/* Free a block whose other streams' uses need events (hbm_free), or defer it during a capture. */
hbm_status hbm__free_with_uses(hbm_allocator *a, hbm__block *b);
/* Record the deferred frees' events, then free the blocks whose events have completed (start of
 * every malloc that is not in a capture). */
void hbm__process_events(hbm_allocator *a);
/* Wait for every pending event and free the blocks (empty_cache, the OOM retry). */
hbm_status hbm__sync_events(hbm_allocator *a);
/* The uses recorded nowhere that were added before unrecorded sequence `seq`: complete (a device-wide wait that began
 * after them has ended). The allocator's device_waited: device.c calls it through that pointer. */
void hbm__settle_unrecorded(hbm_allocator *a, uint64_t seq);
/* Every queue's events destroyed, the queues and lists freed (hbm_destroy). */
void hbm__events_teardown(hbm_allocator *a);

#endif
