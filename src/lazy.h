/* lazy.h: the loose list of a lazy pool (lazy.c), inline for hbm__plan_block's exact take. */
#ifndef HBM_LAZY_H
#define HBM_LAZY_H

#include "internal.h"

/* Loose blocks are linked through their tree nodes, unused while outside the tree: node.r next, node.l previous. */
static inline void hbm__loose_unlink(hbm__pool *p, hbm__block *b)
{
    hbm__block *prev = (hbm__block *)b->node.l, *next = (hbm__block *)b->node.r;
    if (prev)
        prev->node.r = b->node.r;
    else
        p->loose = next;
    if (next)
        next->node.l = b->node.l;
    b->node.l = b->node.r = NULL;
    b->loose = false;
    p->nloose--;
}

/* Whether b is a block object of the region now (allocated, free, or waiting on events) that holds at: block
 * objects are recycled when blocks join, so a kept pointer is a hint until this says so. */
static inline bool hbm__region_holds(const hbm_allocator *a, const hbm__block *b, uintptr_t at)
{
    return b && b->seg == a->arena_seg && (b->allocated || b->in_tree || b->loose || b->event_count) &&
           b->addr <= at && at - b->addr < b->size;
}

/* hbm__plan_block for position k (k < plan_n, size <= plan_size[k], the region reserved): inline, for the step
 * plan's every allocation. */
static inline hbm__block *hbm__plan_take(hbm_allocator *a, size_t k, size_t size)
{
    if (a->nspare_blocks < 2 && hbm__ensure_spares(a, 2) != HBM_OK) {
        a->stats.plan_misses++;
        return NULL;
    }
    uintptr_t at = a->arena_seg->addr + a->plan_off[k];
    /* The block the range begins in: the one this position had last (free again, most often, and the very
     * range), else found from the plan's neighbours or the region's index. */
    hbm__block *b = k < a->plan_last_cap ? a->plan_last[k] : NULL;
    if (!hbm__region_holds(a, b, at))
        b = hbm__region_find(a, k, at);
    if (b && b->loose && b->addr == at && b->size == size) { /* exactly the range, loose: taken whole */
        hbm__loose_unlink(&a->arena, b);
    } else if (!b || b->allocated || b->event_count ||
               !(b = a->arena.lazy == HBM__LAZY ? hbm__lazy_take(a, b, at, size)
                                                : hbm__lazy_take_pages(a, b, at, size))) {
        a->stats.plan_misses++; /* that range is taken: a late free, another stream's use, a changed step */
        return NULL;
    }
    if (k < a->plan_last_cap)
        a->plan_last[k] = b;
    a->stats.plan_hits++;
    a->plan_cursor = at;
    return b;
}

#endif
