/*
 * plan.h: a plan served from the region (plan.c): allocation k of the region's stream goes to the plan's offset k
 * when it fits in the planned size and that range is free. The plan file's policy (plan_file.c) and the step plan
 * (step_plan.c) serve one; the arena (arena.c) none. Also what every policy here is made of: the interface
 * (core/policy_ops.h), the region asked for, the plan in force.
 */
#ifndef HBM_POLICY_PLAN_H
#define HBM_POLICY_PLAN_H

#include "core/engine.h"
#include "core/policy_ops.h"
#include "core/region.h"

/* The plan in force: offsets and sizes per position, and the indexes that find a position's block fast. */
typedef struct hbm__plan {
    uint64_t *off, *size; /* position k's offset in the region and planned size (0: a position not planned) */
    uint32_t *below;      /* the position planned right below k and live when k comes (UINT32_MAX: none) */
    size_t n, next;       /* positions (0: no plan in force), and the next one expected */
    uint64_t height;      /* the region it needs (the step plan: the highest plan kept) */
    uintptr_t cursor;     /* where the last planned allocation went: the walk to the next starts there if live */
    hbm__block **last;    /* last[k]: the block last served at position k, a hint checked before use */
    size_t last_cap;
    /* The region's address index (plan.c, region_block): hint[c] is a block of the region found in its chunk c of
     * 2^hint_shift bytes, checked before use; made for the range [hint_addr, + hint_size), remade when the region
     * is another range. */
    hbm__block **hint;
    size_t hint_n;
    unsigned hint_shift;
    uintptr_t hint_addr;
    size_t hint_size;
} hbm__plan;

/* The arena, the plan file and the step plan: the interface, the region asked for, the plan in force. */
typedef struct hbm__region_policy {
    hbm__policy base;
    bool wanted; /* the region is asked for: reserved at the next allocation that wants it (arena.c) */
    bool steps;  /* the step plan's: beside expandable segments its region is made of pages before any plan */
    hbm__plan plan;
} hbm__region_policy;

static inline hbm__region_policy *hbm__rp(const hbm_allocator *a) { return (hbm__region_policy *)a->pol; }
static inline hbm__plan *hbm__plan_of(const hbm_allocator *a) { return &hbm__rp(a)->plan; }

/* Plan neighbours (pl->below) for pl->off / pl->size and these lifetimes: 0, or -1 out of host memory. */
int hbm__plan_neighbours(hbm__plan *pl, const uint32_t *start, const uint32_t *end);
/* Frees the plan a plan file loaded and zeroes it. */
void hbm__plan_clear(hbm__plan *pl);
/* The plan's indexes freed (teardown). */
void hbm__plan_indexes_free(hbm__plan *pl);
/* After the plan in force changed (pl->n positions, 0: none): the region's pool is lazy while there is one
 * (flushed when it stops), and pl->last has room for it. */
void hbm__plan_lazy(hbm_allocator *a, hbm__plan *pl);
/* The block of the region that planned position k's range begins at (at): after the allocation planned right below
 * it when that one is live (O(1)), else through the region's address index (a hint, then a short walk). */
hbm__block *hbm__region_find(hbm_allocator *a, hbm__plan *pl, size_t k, uintptr_t at);
/* The free region block for the next position's range, cut to exactly it, for a rounded request of size; NULL (a
 * miss, counted) when the plan cannot serve it. */
hbm__block *hbm__plan_block(hbm_allocator *a, hbm__plan *pl, size_t size);
/* The validator's part: the region's pool is lazy exactly while a plan is in force. */
void hbm__plan_check(hbm_allocator *a, const hbm__plan *pl, void (*fail)(void *ck, const char *what), void *ck);

/* hbm__plan_block for position k (k < pl->n, size <= pl->size[k], the region reserved): inline, for the step
 * plan's every allocation. */
static inline hbm__block *hbm__plan_take(hbm_allocator *a, hbm__plan *pl, size_t k, size_t size)
{
    if (a->nspare_blocks < 2 && hbm__ensure_spares(a, 2) != HBM_OK) {
        a->stats.plan_misses++;
        return NULL;
    }
    uintptr_t at = a->region_seg->addr + pl->off[k];
    /* The block the range begins in: the one this position had last (free again, most often, and the very
     * range), else found from the plan's neighbours or the region's index. */
    hbm__block *b = k < pl->last_cap ? pl->last[k] : NULL;
    if (!hbm__region_holds(a, b, at))
        b = hbm__region_find(a, pl, k, at);
    if (b && b->loose && b->addr == at && b->size == size) { /* exactly the range, loose: taken whole */
        hbm__loose_unlink(&a->region, b);
    } else if (!b || b->allocated || b->event_count ||
               !(b = a->region.lazy == HBM__LAZY ? hbm__lazy_take(a, b, at, size)
                                                 : hbm__lazy_take_pages(a, b, at, size))) {
        a->stats.plan_misses++; /* that range is taken: a late free, another stream's use, a changed step */
        return NULL;
    }
    if (k < pl->last_cap)
        pl->last[k] = b;
    a->stats.plan_hits++;
    pl->cursor = at;
    return b;
}

#endif
