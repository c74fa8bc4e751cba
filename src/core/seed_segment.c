/*
 * seed_segment.c: rebuild a recorded allocator state: a whole segment of a given size
 * with blocks allocated at given offsets, the rest cached free. A replay of a
 * snapshot whose recording began mid-run (segments already reserved, blocks
 * already live, cached free space between them) starts from that state, so
 * the recording allocator's own reserved memory is reproduced.
 *
 * The segment is made as any other (the device allocation, the fraction
 * limit, the statistics); the blocks are carved out of its one free block in
 * address order; the free pieces left are in the pool's free tree and counted
 * as inactive splits, as PyTorch counts the pieces of a split segment.
 */
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/stats.h"
#include "core/history.h"
#include "core/pool.h"

hbm_status hbm_seed_segment(hbm_allocator *a, size_t size, hbm_stream stream, int small, size_t n,
                            const size_t *offsets, const size_t *sizes, const size_t *requested, void **ptrs)
{
    if (!a || !size || (n && (!offsets || !sizes || !requested || !ptrs)))
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc = HBM_OK;
    if (size % HBM__MIN_BLOCK) {
        hbm__set_error(a, "hbm_seed_segment: a segment of %zu bytes is not a multiple of %zu", size,
                       (size_t)HBM__MIN_BLOCK);
        rc = HBM_ERR_INVALID;
    }
    for (size_t i = 0; rc == HBM_OK && i < n; i++) {
        size_t end = offsets[i] + sizes[i];
        if (!sizes[i] || sizes[i] % HBM__MIN_BLOCK || offsets[i] % HBM__MIN_BLOCK || end > size || end < offsets[i] ||
            (i && offsets[i] < offsets[i - 1] + sizes[i - 1]) || requested[i] > sizes[i]) {
            hbm__set_error(a,
                           "hbm_seed_segment: block %zu ([%zu, %zu) of a %zu-byte segment, %zu requested) overlaps, "
                           "is out of order or out of the segment, or is not in %zu-byte units",
                           i, offsets[i], end, size, requested[i], (size_t)HBM__MIN_BLOCK);
            rc = HBM_ERR_INVALID;
        }
    }
    if (rc == HBM_OK && a->fraction_set && a->total_reserved + size > a->allowed_max) {
        hbm__set_error(a, "hbm_seed_segment: %zu bytes more would exceed the memory fraction's limit", size);
        rc = HBM_ERR_OOM;
    }
    if (rc == HBM_OK && (hbm__ensure_spares(a, (int)(2 * n + 2)) != HBM_OK || hbm__ptrmap_reserve(&a->live, n))) {
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        rc = HBM_ERR_NOMEM;
    }
    hbm__pool *p = small ? &a->small : &a->large;
    hbm__block *free_part = NULL;
    if (rc == HBM_OK)
        rc = hbm__segment_new(a, p, stream, size, &free_part);
    /* The segment's device malloc may open the lock (release_lock_on_cudamalloc): other threads may have used the
     * spares and the live map's room meanwhile (docs/CONTRACTS.md, "Waiting with the lock open"). */
    if (rc == HBM_OK && (hbm__ensure_spares(a, (int)(2 * n + 2)) != HBM_OK || hbm__ptrmap_reserve(&a->live, n))) {
        hbm__pool_insert(p, free_part); /* kept cached: nothing is lost */
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        rc = HBM_ERR_NOMEM;
    }
    if (rc != HBM_OK) {
        hbm__unlock(a);
        return rc;
    }
    hbm_stats *st = &a->stats;
    hbm__segment *seg = free_part->seg;
    for (size_t i = 0; i < n; i++) {
        /* free_part starts at or before the block and reaches its end. */
        hbm__block *b = free_part;
        size_t off = seg->addr + offsets[i] - b->addr;
        if (off)
            b = hbm__split_back(a, b, off); /* spares were ensured */
        free_part = b->size > sizes[i] ? hbm__split_back(a, b, sizes[i]) : NULL;
        b->allocated = true; /* held: the held side's fields from here */
        b->requested = requested[i];
        b->uses = NULL;
        b->label = a->context;
        b->note = 0;
        hbm__trace(a, HBM_TRACE_ALLOC, b->addr, requested[i], b->stream);
        hbm__ptrmap_put(&a->live, b);
        hbm__stats_on_alloc(a, p, b->size, requested[i]);
        ptrs[i] = (void *)b->addr;
        if (!free_part)
            break;
    }
    /* The free pieces: cached, and counted as inactive splits when the segment is split. */
    bool split_seg = seg->head->next != NULL;
    for (hbm__block *b = seg->head; b; b = b->next) {
        if (b->allocated)
            continue;
        hbm__pool_insert(p, b);
        if (split_seg) {
            hbm__stat_arr_inc(st->inactive_split, p, 1);
            hbm__stat_arr_inc(st->inactive_split_bytes, p, (int64_t)b->size);
        }
    }
    hbm__unlock(a);
    return HBM_OK;
}
