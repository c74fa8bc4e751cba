/*
 * region.h: the region a policy serves from (region.c): one segment of its own pool (a->region, a->region_seg), on one
 * stream, split down to 512 bytes and coalesced across the whole region, best fit; kept loose (lazy coalescing)
 * while a plan is served from it. The mechanics only: which requests go there, and where, is the policies'.
 */
#ifndef HBM_CORE_REGION_H
#define HBM_CORE_REGION_H

#include "core/engine.h"
#include "core/pool.h"
#include "core/stats.h"

#define HBM__LAZY 1       /* pool.lazy: a plan is served from the region */
#define HBM__LAZY_PAGES 2 /* the same, the region made of pages: its free blocks not counted in inactive_split */
/* hbm__free_block in a lazy pool: b, free and outside every tree, left loose where it is (counted as free). */
void hbm__loose_add(hbm_allocator *a, hbm__pool *p, hbm__block *b);
/* The same in a region made of pages: not counted in inactive_split. */
void hbm__loose_put(hbm__pool *p, hbm__block *b);
/* The region just made or retired (a->region_seg): the pool's lazy state follows (made of pages or not). */
void hbm__lazy_region(hbm_allocator *a);
/* The free block for planned range [at, at + size) of the region, made of b (free, holding at) and the free blocks
 * after it: counted as free, outside the tree and the loose list, exactly the range (what is cut off before and
 * after it is left loose). NULL when a block of the range is in use or the region ends first; nothing changed. */
hbm__block *hbm__lazy_take(hbm_allocator *a, hbm__block *b, uintptr_t at, size_t size);
/* The same in a region made of pages (HBM__LAZY_PAGES): the unmapped pages under the range mapped first (a miss,
 * NULL, when the device gives none). */
hbm__block *hbm__lazy_take_pages(hbm_allocator *a, hbm__block *b, uintptr_t at, size_t size);
/* Every loose block of the region's pool coalesced into its tree (the region's best fit, a retired region). */
void hbm__lazy_flush(hbm_allocator *a);
/* A plan is served from the region from now on (lazy), or no longer (its loose blocks coalesced first). */
void hbm__region_set_lazy(hbm_allocator *a, bool lazy);

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
    return b && b->seg == a->region_seg && (b->allocated || b->in_tree || b->loose || b->event_count) &&
           b->addr <= at && at - b->addr < b->size;
}

/* The region's best fit for a rounded request on its stream: any free block large enough (none of the caching
 * policy's oversize rules: the region is one allocation split down to 512 bytes); the loose blocks coalesced into
 * the tree first when the tree alone has none. NULL: none. Still in the tree: the engine takes it out. */
hbm__block *hbm__region_flushed_fit(hbm_allocator *a, hbm_stream stream, size_t size);
static inline hbm__block *hbm__region_best_fit(hbm_allocator *a, hbm_stream stream, size_t size)
{
    hbm__block *b = hbm__pool_lower_bound_by(&a->region, stream, size, hbm__region_less); /* on the region's stream */
    if (b)
        return b;
    return a->region.nloose ? hbm__region_flushed_fit(a, stream, size) : NULL;
}
/* The region reserved for `stream`: a device allocation of size bytes, or (pages) address space of it mapped as
 * planned allocations touch it (expandable.c); HBM_OK with a->region_seg set, or the device's error. */
hbm_status hbm__region_reserve(hbm_allocator *a, hbm_stream stream, size_t size, bool pages);
/* A plan needs a larger region: the region is given back when no block of it is in use, else it becomes an ordinary
 * large-pool segment, released once free; either way a->region_seg is NULL after. */
void hbm__region_retire(hbm_allocator *a);

#endif
