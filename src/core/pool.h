/*
 * pool.h: the free-block index of a pool (static inline: it is the malloc path).
 *
 * Free blocks sit in a red-black tree ordered by (stream, size, address),
 * the order of PyTorch's BlockComparatorSize: a lower_bound on (stream, size)
 * finds the best fit on that stream, the lowest address among equal sizes.
 * Insertion and search are O(log n); removal and stepping to a neighbour
 * are O(1) amortised (rb.h). Owns ordering only: no policy.
 */
#ifndef HBM_POOL_H
#define HBM_POOL_H

#include <stddef.h>

#include "core/blocks.h"
#include "core/types.h"

#define HBM__BLOCK_OF(n) ((hbm__block *)((char *)(n)-offsetof(hbm__block, node)))

/* (stream, size, address) order. The streams of one pool rarely differ, so
 * that test is a well-predicted branch; size and address compare as one
 * 128-bit number (two instructions), so a descent takes one unpredictable
 * branch per level instead of up to three (rb.h). */
static inline bool hbm__size_addr_less(const hbm__block *a, const hbm__block *b)
{
    return ((unsigned __int128)a->size << 64 | a->addr) < ((unsigned __int128)b->size << 64 | b->addr);
}

static inline bool hbm__block_less(const hbm__rb *x, const hbm__rb *y)
{
    const hbm__block *a = HBM__BLOCK_OF(x), *b = HBM__BLOCK_OF(y);
    if (a->stream != b->stream)
        return a->stream < b->stream;
    return hbm__size_addr_less(a, b);
}

/* The region's order (region.c): every block of the region is on the region's one stream (the validator checks), so
 * (size, address) alone orders them exactly as hbm__block_less does, one test fewer at each level of a descent.
 * Its hot paths (best fit, free) use it; anything else may use hbm__block_less on the same tree. */
static inline bool hbm__region_less(const hbm__rb *x, const hbm__rb *y)
{
    return hbm__size_addr_less(HBM__BLOCK_OF(x), HBM__BLOCK_OF(y));
}

static inline void hbm__pool_insert_by(hbm__pool *p, hbm__block *b, hbm__rb_less less)
{
    b->gc_base = p->search_count; /* PyTorch stamps gc_count_base in insert_into_blocks */
    b->in_tree = true;
    hbm__rb_insert(&p->free_tree, &b->node, less);
    p->nfree++;
}

static inline void hbm__pool_insert(hbm__pool *p, hbm__block *b) { hbm__pool_insert_by(p, b, hbm__block_less); }

static inline void hbm__pool_remove(hbm__pool *p, hbm__block *b)
{
    hbm__rb_remove(&p->free_tree, &b->node);
    b->in_tree = false;
    p->nfree--;
}

static inline hbm__block *hbm__pool_node(hbm__rb *n) { return n ? HBM__BLOCK_OF(n) : NULL; }

/* Smallest free block with (stream, size) >= the key, lowest address among equals, or NULL;
 * the caller checks that its stream matches. */
static inline hbm__block *hbm__pool_lower_bound_by(hbm__pool *p, hbm_stream stream, size_t size, hbm__rb_less less)
{
    hbm__block key;
    key.stream = stream;
    key.size = size;
    key.addr = 0;
    return hbm__pool_node(hbm__rb_lower_bound(p->free_tree, &key.node, less));
}

static inline hbm__block *hbm__pool_lower_bound(hbm__pool *p, hbm_stream stream, size_t size)
{
    return hbm__pool_lower_bound_by(p, stream, size, hbm__block_less);
}

/* Largest block ordered before (stream, size, address 0), or NULL. */
static inline hbm__block *hbm__pool_before(hbm__pool *p, hbm_stream stream, size_t size)
{
    hbm__block key;
    key.stream = stream;
    key.size = size;
    key.addr = 0;
    return hbm__pool_node(hbm__rb_before(p->free_tree, &key.node, hbm__block_less));
}

/* A block's neighbours in order in whichever tree holds it (free or unmapped), or NULL. */
static inline hbm__block *hbm__tree_prev(const hbm__block *b) { return hbm__pool_node(hbm__rb_prev(&b->node)); }

static inline hbm__block *hbm__tree_next(const hbm__block *b) { return hbm__pool_node(hbm__rb_next(&b->node)); }

/* b, in the free tree, has a new key: larger (grew: a coalesced block) or
 * smaller (a split's remainder) than the key it was inserted under. It still
 * sorts on the side it moved away from, so only the neighbour on the side it
 * moved towards needs a look: when b still sorts before it (after it), the
 * node stays where it is, with no descent; otherwise it moves. Either way it
 * counts as a fresh insertion for the GC age. */
static inline __attribute__((always_inline)) void hbm__pool_rekey_by(hbm__pool *p, hbm__block *b, bool grew,
                                                                     hbm__rb_less less)
{
    hbm__block *n = grew ? hbm__tree_next(b) : hbm__tree_prev(b);
    if (n && (grew ? !less(&b->node, &n->node) : !less(&n->node, &b->node))) {
        hbm__pool_remove(p, b);
        hbm__pool_insert_by(p, b, less);
    } else {
        b->gc_base = p->search_count;
    }
}

static inline __attribute__((always_inline)) void hbm__pool_rekey(hbm__pool *p, hbm__block *b, bool grew)
{
    hbm__pool_rekey_by(p, b, grew, hbm__block_less);
}

static inline hbm__block *hbm__pool_first(hbm__pool *p) { return hbm__pool_node(hbm__rb_first(p->free_tree)); }

/* Unmapped ranges, ordered by (stream, address) as PyTorch's BlockComparatorAddress. */
static inline bool hbm__unmapped_less(const hbm__rb *x, const hbm__rb *y)
{
    const hbm__block *a = HBM__BLOCK_OF(x), *b = HBM__BLOCK_OF(y);
    if (a->stream != b->stream)
        return a->stream < b->stream;
    return a->addr < b->addr;
}

static inline void hbm__unmapped_insert(hbm__pool *p, hbm__block *b)
{
    b->in_tree = true;
    hbm__rb_insert(&p->unmapped, &b->node, hbm__unmapped_less);
    p->nunmapped++;
}

static inline void hbm__unmapped_remove(hbm__pool *p, hbm__block *b)
{
    hbm__rb_remove(&p->unmapped, &b->node);
    b->in_tree = false;
    p->nunmapped--;
}

/* Lowest-address unmapped range on stream at or after addr, or NULL (caller checks the stream). */
static inline hbm__block *hbm__unmapped_lower_bound(hbm__pool *p, hbm_stream stream, uintptr_t addr)
{
    hbm__block key;
    key.stream = stream;
    key.addr = addr;
    return hbm__pool_node(hbm__rb_lower_bound(p->unmapped, &key.node, hbm__unmapped_less));
}

/* Whether src, a neighbour of dst, can join it: free, no event pending, in the same mapped state. */
static inline bool hbm__pool_can_merge(const hbm__block *dst, const hbm__block *src)
{
    return src && !src->allocated && src->event_count == 0 && src->mapped == dst->mapped;
}

/* src, which can merge into dst, out of its tree and into dst: the bytes absorbed. */
static inline __attribute__((always_inline)) size_t hbm__pool_merge(hbm_allocator *a, hbm__pool *p, hbm__block *dst,
                                                                    hbm__block *src)
{
    if (src->mapped)
        hbm__pool_remove(p, src);
    else
        hbm__unmapped_remove(p, src);
    return hbm__absorb(a, dst, src);
}

/* The same when src can merge; 0 when it cannot. */
static inline size_t hbm__pool_try_merge(hbm_allocator *a, hbm__pool *p, hbm__block *dst, hbm__block *src)
{
    return hbm__pool_can_merge(dst, src) ? hbm__pool_merge(a, p, dst, src) : 0;
}

#endif
