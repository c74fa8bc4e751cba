/* engine.h: the caching engine (engine.c): coalescing into the free trees, segments, release, rounding, teardown. */
#ifndef HBM_CORE_ENGINE_H
#define HBM_CORE_ENGINE_H

#include "core/blocks.h"
#include "core/errors.h"


/* A new whole segment of `size` bytes on the device: one free block, in no tree. */
hbm_status hbm__segment_new(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out);

/* Whole free segments of the default pools back to the device, no device sync (engine.c): the step plan's region
 * takes their place. */
void hbm__release_cached(hbm_allocator *a);
/* Return a whole-segment free block (in its pool's tree) to the device; on a device error it stays cached. */
hbm_status hbm__release_block(hbm_allocator *a, hbm__block *b);

/* A free block outside every tree, counted as free (a loose one, unlinked), coalesced into its pool's tree
 * (engine.c): the block that holds its range. */
hbm__block *hbm__settle_free(hbm_allocator *a, hbm__block *b);
/* Release a pool's cached segments (engine.c). */
hbm_status hbm__release_pool(hbm_allocator *a, hbm__pool *p);
/* Free a block whose free was requested and whose events completed (engine.c). */
void hbm__free_block(hbm_allocator *a, hbm__block *b);

/* Round a request as PyTorch's round_size does. */
size_t hbm__round_size(const hbm__conf *c, size_t size);
/* Size of a new segment for a rounded request (get_allocation_size). */
size_t hbm__allocation_size(const hbm__conf *c, size_t size);
/* Apply a memory fraction (0..1) with the lock held. */
hbm_status hbm__set_fraction_locked(hbm_allocator *a, double fraction);
/* Return every segment to the device and free all bookkeeping (hbm_destroy). */
void hbm__engine_teardown(hbm_allocator *a);
/* release_cached_blocks: pending frees waited for, the whole free segments and pages of the default pools and of
 * released private pools back to the device (empty_cache; the OOM retry; a wake that found the device full). */
hbm_status hbm__release_cached_blocks(hbm_allocator *a);

#endif
