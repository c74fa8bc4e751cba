/* sleep.h: pools that sleep and wake (sleep.c). */
#ifndef HBM_CORE_SLEEP_H
#define HBM_CORE_SLEEP_H

#include "core/types.h"

/* A block asked of a sleeping pool (engine_malloc): HBM_ERR_ASLEEP, with the pool's tag in the message. */
hbm_status hbm__sleep_refuse(hbm_allocator *a, const hbm__mempool *m);
/* A pool's sleep state freed (its pinned host memory back), when the pool goes (mempools.c). */
void hbm__sleep_free(hbm_allocator *a, hbm__mempool *m);
/* The validator's part: every tagged pool's state, backup and counts agree; each broken rule goes to fail(ck). */
void hbm__sleep_check(hbm_allocator *a, void (*fail)(void *ck, const char *what), void *ck);
/* A reservation of pool m is given back (expandable.c): its backup runs, if any, are dropped (the addresses may be
 * reserved again by another pool before the wake). */
void hbm__sleep_forget(hbm_allocator *a, hbm__mempool *m, uintptr_t addr, size_t size);
/* The published record's: asleep and backup bytes, and per tag "tag size, ..." (publish.c). */
void hbm__sleep_record(hbm_allocator *a, int64_t *asleep, int64_t *backup, char *tags, size_t len);
/* A history entry of m's pages put to sleep or mapped again (action HBM_TRACE_SLEEP or WAKE): with its tag and
 * whether it keeps a backup, which snapshots write beside the run of pages. */
void hbm__sleep_trace(hbm_allocator *a, const hbm__mempool *m, hbm_trace_action action, uint64_t addr, uint64_t size,
                      hbm_stream stream);
/* hbm_get_stats: the asleep figures. */
void hbm__sleep_stats(hbm_allocator *a, hbm_stats *st);

#endif
