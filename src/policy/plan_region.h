/* plan_region.h: the loose list of a lazy pool (plan_region.c), inline for hbm__plan_block's exact take. */
#ifndef HBM_LAZY_H
#define HBM_LAZY_H

#include "core/engine.h"
#include "core/pool.h"
#include "core/stats.h"
#include "policy/arena.h"

#define HBM__LAZY 1       /* pool.lazy: a plan is served from the region */
#define HBM__LAZY_PAGES 2 /* the same, the region made of pages: its free blocks not counted in inactive_split */
/* hbm__free_block in a lazy pool: b, free and outside every tree, left loose where it is (counted as free). */
void hbm__loose_add(hbm_allocator *a, hbm__pool *p, hbm__block *b);
/* The same in a region made of pages: not counted in inactive_split. */
void hbm__loose_put(hbm__pool *p, hbm__block *b);
/* The region just made or retired (a->arena_seg): the pool's lazy state follows (made of pages or not). */
void hbm__lazy_region(hbm_allocator *a);
/* The free block for planned range [at, at + size) of the region, made of b (free, holding at) and the free blocks
 * after it: counted as free, outside the tree and the loose list, exactly the range (what is cut off before and
 * after it is left loose). NULL when a block of the range is in use or the region ends first; nothing changed. */
hbm__block *hbm__lazy_take(hbm_allocator *a, hbm__block *b, uintptr_t at, size_t size);
/* The same in a region made of pages (HBM__LAZY_PAGES): the unmapped pages under the range mapped first (a miss,
 * NULL, when the device gives none). */
hbm__block *hbm__lazy_take_pages(hbm_allocator *a, hbm__block *b, uintptr_t at, size_t size);
/* Every loose block of the arena's pool coalesced into its tree (the region's best fit, a retired region). */
void hbm__lazy_flush(hbm_allocator *a);
/* After the plan in force changed (a->plan_n positions, 0: none): the pool is lazy while there is one (flushed when
 * it stops), and plan_last has room for it. */
void hbm__lazy_plan(hbm_allocator *a);

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
    return b && b->seg == a->arena_seg && (b->allocated || b->in_tree || b->loose || b->event_count) && b->addr <= at &&
           at - b->addr < b->size;
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
