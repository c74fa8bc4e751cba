/* expandable.h: expandable segments (expandable.c). */
#ifndef HBM_CORE_EXPANDABLE_H
#define HBM_CORE_EXPANDABLE_H

#include "core/types.h"

/* Map pages for a request of `size` (rounded) on stream; the block returned is out of the free tree. */
hbm_status hbm__expand_alloc(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out);
/* Unmap every fully free page of the pool's expandable segments; release segments left empty. */
hbm_status hbm__expand_release_pool(hbm_allocator *a, hbm__pool *p);
/* A plan's region beside expandable segments (arena.c): a reservation of `size` bytes rounded up to the device's
 * granularity in pool p, *out its one unmapped block (in p's unmapped tree); its pages are mapped as the plan's
 * allocations touch them (hbm__expand_touch). */
hbm_status hbm__expand_region(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out);
/* c, an unmapped block of such a region: the pages under [lo, hi) inside it mapped; *out the mapped block they
 * make, free and outside every tree and list (the caller puts it on the loose list), its unmapped rest beside it.
 * On failure nothing is changed. */
hbm_status hbm__expand_touch(hbm_allocator *a, hbm__block *c, uintptr_t lo, uintptr_t hi, hbm__block **out);
/* b, a free mapped block of an expandable segment in its pool's free tree: its whole pages unmapped, the
 * reservation released when nothing of it is left mapped or in use. */
hbm_status hbm__expand_release_free(hbm_allocator *a, hbm__block *b);
/* A sleeping pool's pages (sleep.c). Unmap and release the mapped pages of seg, each marked asleep; stops at the
 * first failure (the rest stays mapped). *given: bytes given back. */
hbm_status hbm__expand_sleep(hbm_allocator *a, hbm__segment *seg, size_t *given);
/* Map the asleep pages of seg again, a run of adjacent pages at a time (a run all or nothing); stops at the first
 * failure. *mapped: bytes mapped. */
hbm_status hbm__expand_wake(hbm_allocator *a, hbm__segment *seg, size_t *mapped);
/* Unmap the pages of seg that were asleep (was_asleep, for its first n pages) and are mapped now (a wake that failed
 * part-way: fresh pages, nothing to wait for), each marked asleep again. */
void hbm__expand_unwake(hbm_allocator *a, hbm__segment *seg, const bool *was_asleep, size_t n);
/* Return a segment's pages and reservation at destroy (whatever their state). */
void hbm__expand_teardown(hbm_allocator *a, hbm__segment *seg);
void hbm__expand_teardown_pool(hbm_allocator *a, hbm__pool *p);

#endif
