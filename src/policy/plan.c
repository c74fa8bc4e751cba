/*
 * plan.c: a plan served from the region (plan.h): the offsets of a plan file's or a step's allocations, the
 * neighbours and the address index that find a position's block in O(1), and the take of a planned range
 * (hbm__plan_take, plan.h; the cut itself is the region's: core/region.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/plan.h"

typedef struct plan_end {
    uint64_t end; /* offset + size */
    uint32_t start, k;
} plan_end;

static int by_end(const void *x, const void *y)
{
    const plan_end *a = x, *b = y;
    return a->end != b->end ? (a->end < b->end ? -1 : 1) : (a->start > b->start) - (a->start < b->start);
}

/* For each allocation, the one planned right below it (its range ends where k's begins) that is live when k is
 * allocated, the latest such: when that one is live at serving time, k's range lies in the block after it, found
 * in O(1) through the live map instead of a walk. At most 64 candidates are looked at per allocation. */
int hbm__plan_neighbours(hbm__plan *pl, const uint32_t *start, const uint32_t *end)
{
    size_t n = pl->n;
    plan_end *e = malloc((n ? n : 1) * sizeof *e);
    pl->below = malloc((n ? n : 1) * sizeof *pl->below);
    if (!e || !pl->below) {
        free(e);
        return -1;
    }
    for (size_t k = 0; k < n; k++)
        e[k] = (plan_end){pl->off[k] + pl->size[k], start[k], (uint32_t)k};
    qsort(e, n, sizeof *e, by_end);
    for (size_t k = 0; k < n; k++) {
        pl->below[k] = UINT32_MAX;
        size_t lo = 0, hi = n; /* first entry ending at or above off[k] */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (e[mid].end < pl->off[k])
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t i = lo, seen = 0; i < n && e[i].end == pl->off[k] && seen < 64; i++, seen++)
            if (e[i].start <= start[k] && start[k] < end[e[i].k])
                pl->below[k] = e[i].k; /* sorted by start: the last one found is the latest */
    }
    free(e);
    return 0;
}

void hbm__plan_clear(hbm__plan *pl)
{
    free(pl->off);
    free(pl->size);
    free(pl->below);
    pl->below = NULL;
    pl->off = pl->size = NULL;
    pl->n = 0;
    pl->height = 0;
}

/* The region's address index: one hint per chunk of the region, about one chunk per planned allocation. A hint is
 * a block object of the region seen in that chunk; block objects are recycled when blocks merge, so a hint is used
 * only while it still describes a block of this region (allocated, or free in the tree): a stale hint costs a
 * walk, never a wrong answer. Remade (cleared) whenever the region is another range (by address and size: a new
 * region's segment object may have an old one's address). */
static void hints_for(hbm__plan *pl, const hbm__segment *seg)
{
    size_t want = 1;
    while (want < pl->n && want < ((size_t)1 << 20))
        want <<= 1;
    unsigned shift = 9; /* chunks of 512 bytes at least: the smallest block */
    while (((size_t)1 << shift) * want < seg->size)
        shift++;
    size_t n = (seg->size >> shift) + 1;
    if (n > pl->hint_n) {
        hbm__block **h = realloc(pl->hint, n * sizeof *h);
        if (!h) { /* no index: the walks alone */
            free(pl->hint);
            pl->hint = NULL;
            pl->hint_n = 0;
            pl->hint_addr = seg->addr;
            pl->hint_size = seg->size;
            return;
        }
        pl->hint = h;
    }
    pl->hint_n = n;
    pl->hint_shift = shift;
    memset(pl->hint, 0, n * sizeof *pl->hint);
    pl->hint_addr = seg->addr;
    pl->hint_size = seg->size;
}

static void hints_free(hbm__plan *pl)
{
    free(pl->hint);
    pl->hint = NULL;
    pl->hint_n = 0;
    pl->hint_size = 0;
}

/* The block of the region that holds address `at`. */
static hbm__block *region_block(hbm_allocator *a, hbm__plan *pl, uintptr_t at)
{
    const hbm__segment *seg = a->region_seg;
    if (at - seg->addr >= seg->size) /* a plan taller than the region in force (a new one not yet reserved) */
        return NULL;
    if (pl->hint_addr != seg->addr || pl->hint_size != seg->size)
        hints_for(pl, seg);
    hbm__block **hint = pl->hint ? &pl->hint[(at - seg->addr) >> pl->hint_shift] : NULL;
    hbm__block *b = hint ? *hint : NULL;
    if (!b || b->seg != seg || !(b->allocated || b->in_tree || b->loose)) {
        b = pl->cursor ? hbm__ptrmap_get(&a->live, pl->cursor) : NULL;
        if (!b || b->seg != seg)
            b = seg->head;
    }
    while (b && b->addr > at)
        b = b->prev;
    while (b && b->addr + b->size <= at)
        b = b->next;
    if (hint)
        *hint = b;
    return b;
}

hbm__block *hbm__region_find(hbm_allocator *a, hbm__plan *pl, size_t k, uintptr_t at)
{
    uint32_t j = pl->below[k];
    hbm__block *b = j != UINT32_MAX ? hbm__ptrmap_get(&a->live, a->region_seg->addr + pl->off[j]) : NULL;
    b = b && b->seg == a->region_seg ? b->next : !pl->off[k] ? a->region_seg->head : NULL;
    if (!b || b->addr > at || b->addr + b->size <= at)
        b = region_block(a, pl, at);
    return b;
}

hbm__block *hbm__plan_block(hbm_allocator *a, hbm__plan *pl, size_t size)
{
    size_t k = pl->next++;
    if (k >= pl->n || size > pl->size[k]) {
        a->stats.plan_misses++;
        return NULL;
    }
    return hbm__plan_take(a, pl, k, size);
}

void hbm__plan_indexes_free(hbm__plan *pl)
{
    hints_free(pl);
    free(pl->last);
    pl->last = NULL;
    pl->last_cap = 0;
}

void hbm__plan_lazy(hbm_allocator *a, hbm__plan *pl)
{
    hbm__region_set_lazy(a, pl->n > 0);
    if (pl->n > pl->last_cap) { /* without the room, plan_last hints nothing past its end */
        hbm__block **h = realloc(pl->last, pl->n * sizeof *h);
        if (h) {
            pl->last = h;
            pl->last_cap = pl->n;
        }
    }
    if (pl->last)
        memset(pl->last, 0, pl->last_cap * sizeof *pl->last);
}

void hbm__plan_check(hbm_allocator *a, const hbm__plan *pl, void (*fail)(void *ck, const char *what), void *ck)
{
    if ((a->region.lazy != 0) != (pl->n > 0)) {
        char what[160];
        snprintf(what, sizeof what, "the region's pool is %s while %s plan is in force",
                 a->region.lazy ? "lazy" : "not lazy", pl->n ? "a" : "no");
        fail(ck, what);
    }
}
