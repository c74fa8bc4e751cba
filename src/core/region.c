/*
 * region.c: the region a policy serves from (region.h): reserved, given back or demoted when a larger one is
 * needed, searched best fit; and kept loose while a plan is served from it (hbm_step_plan, hbm_plan_file): lazy
 * coalescing.
 *
 * A plan puts every allocation of a step at a known offset, and the next
 * step's allocations at the same offsets again. Kept as the caching policy
 * keeps a segment (every free coalesced with its free neighbours into the
 * free tree, every planned allocation split out of it again), the region
 * pays two tree updates per allocation that the caching policy does not,
 * since it reuses a cached block whole. So while a plan is in force the
 * region's pool is lazy: a freed block is left where it is, free, outside
 * the tree and not coalesced: loose. A planned allocation takes the block
 * at its offset when it is exactly its range (the same tensor a step
 * later, or another planned at the same place), else joins the free blocks
 * over its range into one and cuts off what lies before and after it,
 * which is left loose: list work, no tree work. The loose blocks are
 * coalesced into the tree (hbm__lazy_flush) when the region's best fit
 * finds nothing (before a segment is made or an OOM is said: no memory is
 * lost to laziness), when the region is retired and when no plan is in
 * force any more.
 *
 * Statistics count a loose block as the free block it is (inactive_split,
 * a free block of a split segment), snapshots show it free, and the
 * validator knows the state (validator.c: loose blocks are exactly those on the
 * pool's list; a loose block's free neighbour is not a missed coalesce).
 * The largest free block (OOM messages, hbmalloc top) is the tree's: while
 * a plan is served, the free space between its blocks is loose.
 *
 * Beside expandable segments the region is address space made of pages
 * (expandable.c): a planned range over unmapped pages has them mapped first
 * (touch, hbm__lazy_take_pages), and the region's free blocks are not
 * counted in inactive_split (HBM__LAZY_PAGES), as PyTorch leaves
 * expandable segments out.
 */
#include <stdlib.h>
#include <string.h>

#include "core/expandable.h"
#include "core/region.h"

static bool is_split(const hbm__block *b) { return b->prev || b->next; }

static void push(hbm__pool *p, hbm__block *b)
{
    b->loose = true;
    b->node.l = NULL;
    b->node.r = p->loose ? &p->loose->node : NULL;
    if (p->loose)
        p->loose->node.l = &b->node;
    p->loose = b;
    p->nloose++;
}

void hbm__loose_add(hbm_allocator *a, hbm__pool *p, hbm__block *b)
{
    push(p, b);
    if (is_split(b)) { /* a free block of a split segment */
        hbm__stat_arr_inc(a->stats.inactive_split, p, 1);
        hbm__stat_arr_inc(a->stats.inactive_split_bytes, p, (int64_t)b->size);
    }
}

void hbm__loose_put(hbm__pool *p, hbm__block *b) { push(p, b); }

/* The lazy state a plan in force gives the region's pool: HBM__LAZY_PAGES while its region is made of pages. */
static uint8_t lazy_state(const hbm_allocator *a)
{
    return a->region_seg && a->region_seg->expandable ? HBM__LAZY_PAGES : HBM__LAZY;
}

void hbm__region_set_lazy(hbm_allocator *a, bool lazy)
{
    if (!lazy && a->region.lazy)
        hbm__lazy_flush(a);
    a->region.lazy = lazy ? lazy_state(a) : 0;
}

void hbm__lazy_region(hbm_allocator *a)
{
    if (a->region.lazy)
        a->region.lazy = lazy_state(a);
}

/* Two free blocks, both counted (unless the region is made of pages: !counted), joined into dst: one counted, or
 * none when dst is now its whole segment. */
static void join(hbm_allocator *a, hbm__pool *p, hbm__block *dst, hbm__block *src, bool counted)
{
    hbm__absorb(a, dst, src);
    if (!counted) {
    } else if (is_split(dst)) {
        hbm__stat_arr_dec(a->stats.inactive_split, p, 1);
    } else {
        hbm__stat_arr_dec(a->stats.inactive_split, p, 2);
        hbm__stat_arr_dec(a->stats.inactive_split_bytes, p, (int64_t)dst->size);
    }
}

/* Free block b (counted, outside every tree and list) cut in two at len bytes: b keeps the front (a block object
 * keeps the address it begins at, so that plan_last's hints stay good), a new object the rest, returned; both are
 * counted as free. */
static inline __attribute__((always_inline)) hbm__block *cut(hbm_allocator *a, hbm__pool *p, hbm__block *b, size_t len,
                                                             bool counted)
{
    bool was_split = is_split(b);
    hbm__block *n = hbm__split_back(a, b, len); /* hbm__plan_take made sure of the spares */
    if (!counted)
        return n;
    hbm__stat_arr_inc(a->stats.inactive_split, p, was_split ? 1 : 2);
    if (!was_split)
        hbm__stat_arr_inc(a->stats.inactive_split_bytes, p, (int64_t)(n->size + b->size));
    return n;
}

/* Free block b out of the tree or the loose list: still counted as free. */
static void take(hbm__pool *p, hbm__block *b)
{
    if (b->in_tree)
        hbm__pool_remove(p, b);
    else
        hbm__loose_unlink(p, b);
}

/* The region beside expandable segments is mapped as it is touched: the unmapped pages under [at, end) (if any)
 * mapped and left loose. Returns the block that now holds at, or NULL (the device or the memory fraction gave no
 * pages: a miss, the pages mapped so far kept). */
static hbm__block *touch(hbm_allocator *a, hbm__block *b, uintptr_t at, uintptr_t end)
{
    hbm__block *before = b->prev; /* untouched: the walk back to at starts here */
    for (hbm__block *c = b, *next; c && c->addr < end; c = next) {
        next = c->next;
        if (c->mapped)
            continue;
        hbm__block *m;
        char saved[sizeof a->err];
        memcpy(saved, a->err, sizeof saved);
        hbm_status rc = hbm__expand_touch(a, c, at, end, &m);
        memcpy(a->err, saved, sizeof saved); /* a miss, not this call's error */
        if (rc != HBM_OK || hbm__ensure_spares(a, 2) != HBM_OK)
            return NULL;
        push(&a->region, m);
        next = m->next;
    }
    hbm__block *h = before ? before : a->region_seg->head;
    while (h->addr + h->size <= at)
        h = h->next;
    return h;
}

/* Whether [at, at + size) from b holds a block in use, or runs past the region's end. */
static bool busy(const hbm__block *b, uintptr_t end)
{
    const hbm__block *c = b;
    for (; c && c->addr < end; c = c->next)
        if (c->allocated || c->event_count)
            return true; /* in use: a late free, another stream's work, another plan's block */
    return !c && b->seg->addr + b->seg->size < end;
}

/* hbm__lazy_take's work, once the range is known free (and mapped); counted: the region's free blocks count in
 * inactive_split (a constant at each call: two copies, the common one free of the test). */
static inline __attribute__((always_inline)) hbm__block *take_range(hbm_allocator *a, hbm__block *b, uintptr_t at,
                                                                    size_t size, bool counted)
{
    hbm__pool *p = &a->region;
    uintptr_t end = at + size;
    take(p, b);
    while (b->addr + b->size < end) { /* the free blocks after it, to the range's end */
        hbm__block *n = b->next;
        take(p, n);
        join(a, p, b, n, counted);
    }
    if (b->addr < at) { /* what lies before the range stays loose, */
        hbm__block *front = b;
        b = cut(a, p, front, at - front->addr, counted);
        push(p, front);
    }
    if (b->size > size) /* and what lies after it */
        push(p, cut(a, p, b, size, counted));
    return b;
}

hbm__block *hbm__lazy_take(hbm_allocator *a, hbm__block *b, uintptr_t at, size_t size)
{
    return busy(b, at + size) ? NULL : take_range(a, b, at, size, true);
}

hbm__block *hbm__lazy_take_pages(hbm_allocator *a, hbm__block *b, uintptr_t at, size_t size)
{
    if (busy(b, at + size) || !(b = touch(a, b, at, at + size)))
        return NULL;
    return take_range(a, b, at, size, false);
}

void hbm__lazy_flush(hbm_allocator *a)
{
    hbm__pool *p = &a->region;
    bool counted = p->lazy != HBM__LAZY_PAGES;
    for (hbm__block *b; (b = p->loose);) {
        hbm__loose_unlink(p, b);
        while (b->next && b->next->loose) {
            hbm__block *n = b->next;
            hbm__loose_unlink(p, n);
            join(a, p, b, n, counted);
        }
        while (b->prev && b->prev->loose) {
            hbm__block *n = b->prev;
            hbm__loose_unlink(p, n);
            join(a, p, b, n, counted);
        }
        (void)hbm__settle_free(a, b); /* with the tree's free neighbours, into the tree */
    }
}

hbm__block *hbm__region_flushed_fit(hbm_allocator *a, hbm_stream stream, size_t size)
{
    hbm__lazy_flush(a); /* the loose blocks, coalesced, join in */
    return hbm__pool_lower_bound_by(&a->region, stream, size, hbm__region_less);
}

hbm_status hbm__region_reserve(hbm_allocator *a, hbm_stream stream, size_t size, bool pages)
{
    hbm__block *b;
    hbm_status rc = pages ? hbm__expand_region(a, &a->region, stream, size, &b)
                          : hbm__segment_new(a, &a->region, stream, size, &b);
    if (rc != HBM_OK)
        return rc;
    if (!b->in_tree)
        hbm__pool_insert(&a->region, b);
    a->region_seg = b->seg;
    hbm__lazy_region(a);
    a->region_stream = stream;
    hbm__published(a); /* the region is reserved (the allocation after it is a cache hit in it) */
    return HBM_OK;
}

void hbm__region_retire(hbm_allocator *a)
{
    hbm__segment *seg = a->region_seg;
    if (!seg)
        return;
    hbm__lazy_flush(a); /* its free blocks in the tree, coalesced */
    a->region_seg = NULL;
    hbm__lazy_region(a);
    hbm__block *b = seg->head;
    if (!b->next && !b->allocated && b->in_tree && !b->event_count &&
        (seg->expandable ? hbm__expand_release_free(a, b) : hbm__release_block(a, b)) == HBM_OK)
        return;
    /* In use: an ordinary large-pool segment from now on (the region's blocks count in the large pool already),
     * released like any other once its blocks are free. */
    for (hbm__block *x = seg->head; x; x = x->next)
        if (x->in_tree && x->mapped) {
            hbm__pool_remove(&a->region, x);
            hbm__pool_insert(&a->large, x);
        } else if (x->in_tree) { /* pages a failed release above left unmapped */
            hbm__unmapped_remove(&a->region, x);
            hbm__unmapped_insert(&a->large, x);
        }
    seg->pool = &a->large;
}
