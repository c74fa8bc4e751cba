/*
 * blocks.h: block objects (blocks.c): where they come from (slabs, the spare list), their blank state, the split of
 * one into two and the splice of two into one. Knows blocks and segments' heads, not pools, trees or statistics:
 * those are the caller's. Inline where the malloc path uses them.
 */
#ifndef HBM_CORE_BLOCKS_H
#define HBM_CORE_BLOCKS_H

#include "core/types.h"

/* More block objects on the spare list: a slab of them (blocks.c). */
hbm_status hbm__add_slab(hbm_allocator *a);
/* A block object off the spare list, its fields as they were (NULL when host memory ran out). */
static inline hbm__block *hbm__block_take(hbm_allocator *a)
{
    if (__builtin_expect(!a->spare_blocks, 0) && hbm__add_slab(a) != HBM_OK)
        return NULL;
    hbm__block *b = a->spare_blocks;
    a->spare_blocks = b->next;
    a->nspare_blocks--;
    return b;
}
/* The state of a block object that holds nothing yet, but for what hbm__block_blank's caller sets itself. */
static inline void hbm__block_blank(hbm__block *b)
{
    b->gc_base = 0; /* free, in no tree: its node is set when it enters one */
    b->allocated = b->in_tree = false;
    b->mapped = true;
    b->event_count = 0;
    b->loose = false;
}
/* A block object off the spare list, blank (NULL when host memory ran out). Inline: every split takes one. */
static inline hbm__block *hbm__block_new(hbm_allocator *a)
{
    hbm__block *b = hbm__block_take(a);
    if (!b)
        return NULL;
    hbm__block_blank(b);
    b->prev = b->next = NULL;
    b->seg = NULL;
    b->stream = 0;
    b->addr = 0;
    b->size = 0;
    return b;
}
/* A block object back on the spare list (it holds nothing: it was free, or never used). */
static inline void hbm__block_recycle(hbm_allocator *a, hbm__block *b)
{
    b->next = a->spare_blocks;
    a->spare_blocks = b;
    a->nspare_blocks++;
}
/* Cuts the first `size` bytes of b into a new block, linked in before it; b keeps the rest. Trees and statistics
 * are the caller's; a spare block object must be in hand (hbm__ensure_spares). */
static inline hbm__block *hbm__split_front(hbm_allocator *a, hbm__block *b, size_t size)
{
    hbm__block *f = hbm__block_take(a); /* each field set once: the split is on the fast path */
    hbm__block_blank(f);
    f->seg = b->seg;
    f->stream = b->stream;
    f->addr = b->addr;
    f->size = size;
    f->prev = b->prev;
    if (f->prev)
        f->prev->next = f;
    else
        b->seg->head = f;
    f->next = b;
    b->prev = f;
    b->addr += size;
    b->size -= size;
    return f;
}
/* Cuts b at `at` bytes from its start: b keeps the front, a new block (returned, linked in after it) the rest.
 * Trees and statistics are the caller's; a spare block object must be in hand (hbm__ensure_spares). */
static inline hbm__block *hbm__split_back(hbm_allocator *a, hbm__block *b, size_t at)
{
    hbm__block *back = hbm__block_take(a);
    hbm__block_blank(back);
    back->seg = b->seg;
    back->stream = b->stream;
    back->addr = b->addr + at;
    back->size = b->size - at;
    back->prev = b;
    back->next = b->next;
    if (back->next)
        back->next->prev = back;
    b->next = back;
    b->size = at;
    return back;
}
/* Slabs added until n block objects are in hand (blocks.c): HBM_OK, or HBM_ERR_NOMEM with the error set. */
hbm_status hbm__add_spares(hbm_allocator *a, int n);
/* Keep n block objects in hand so a split cannot fail half-way. Inline: every miss asks. */
static inline hbm_status hbm__ensure_spares(hbm_allocator *a, int n)
{
    return __builtin_expect(a->nspare_blocks >= (size_t)n, 1) ? HBM_OK : hbm__add_spares(a, n);
}
/* Splices src, a free neighbour of dst outside every tree, into dst; src's object goes back to the spare list.
 * Returns the bytes absorbed. */
static inline size_t hbm__absorb(hbm_allocator *a, hbm__block *dst, hbm__block *src)
{
    if (dst->prev == src) {
        dst->addr = src->addr;
        dst->prev = src->prev;
        if (dst->prev)
            dst->prev->next = dst;
        else
            dst->seg->head = dst;
    } else {
        dst->next = src->next;
        if (dst->next)
            dst->next->prev = dst;
    }
    size_t absorbed = src->size;
    dst->size += absorbed;
    hbm__block_recycle(a, src);
    return absorbed;
}
/* Every slab freed (hbm_destroy, after the segments): the block objects with them. */
void hbm__blocks_teardown(hbm_allocator *a);

#endif
