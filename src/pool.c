/*
 * pool.c: the free-block index of a pool, and the segment index.
 *
 * Free blocks sit in an AVL tree ordered by (stream, size, address), the
 * order of PyTorch's BlockComparatorSize: a lower_bound on (stream, size)
 * finds the best fit on that stream, the lowest address among equal sizes.
 * Every operation is O(log n). Segments sit in a second tree by address, for
 * pointer diagnostics and the validator. Owns ordering only: no policy.
 */
#include <stddef.h>

#include "internal.h"

#define BLOCK_OF(n) ((hbm__block *)((char *)(n) - offsetof(hbm__block, node)))
#define SEGMENT_OF(n) ((hbm__segment *)((char *)(n) - offsetof(hbm__segment, node)))

int hbm__block_cmp(const hbm__avl *x, const hbm__avl *y)
{
    const hbm__block *a = BLOCK_OF(x), *b = BLOCK_OF(y);
    hbm_stream sa = a->seg ? a->seg->stream : 0, sb = b->seg ? b->seg->stream : 0;
    if (sa != sb)
        return sa < sb ? -1 : 1;
    if (a->size != b->size)
        return a->size < b->size ? -1 : 1;
    if (a->addr != b->addr)
        return a->addr < b->addr ? -1 : 1;
    return 0;
}

void hbm__pool_insert(hbm__pool *p, hbm__block *b)
{
    b->gc_base = p->search_count; /* PyTorch stamps gc_count_base in insert_into_blocks */
    b->in_tree = true;
    hbm__avl_insert(&p->free_tree, &b->node, hbm__block_cmp);
    p->nfree++;
}

void hbm__pool_remove(hbm__pool *p, hbm__block *b)
{
    hbm__avl_remove(&p->free_tree, &b->node, hbm__block_cmp);
    b->in_tree = false;
    p->nfree--;
}

/* A key block for searches: seg only supplies the stream. */
typedef struct key {
    hbm__segment seg;
    hbm__block blk;
} key;

static void make_key(key *k, hbm_stream stream, size_t size, uintptr_t addr)
{
    k->seg.stream = stream;
    k->blk.seg = &k->seg;
    k->blk.size = size;
    k->blk.addr = addr;
}

hbm__block *hbm__pool_lower_bound(hbm__pool *p, hbm_stream stream, size_t size)
{
    key k;
    make_key(&k, stream, size, 0);
    hbm__avl *n = hbm__avl_lower_bound(p->free_tree, &k.blk.node, hbm__block_cmp);
    return n ? BLOCK_OF(n) : NULL;
}

hbm__block *hbm__pool_before(hbm__pool *p, hbm_stream stream, size_t size)
{
    key k;
    make_key(&k, stream, size, 0);
    hbm__avl *n = hbm__avl_before(p->free_tree, &k.blk.node, hbm__block_cmp);
    return n ? BLOCK_OF(n) : NULL;
}

hbm__block *hbm__pool_prev(hbm__pool *p, const hbm__block *b)
{
    hbm__avl *n = hbm__avl_before(p->free_tree, &b->node, hbm__block_cmp);
    return n ? BLOCK_OF(n) : NULL;
}

hbm__block *hbm__pool_next(hbm__pool *p, const hbm__block *b)
{
    hbm__avl *n = hbm__avl_upper_bound(p->free_tree, &b->node, hbm__block_cmp);
    return n ? BLOCK_OF(n) : NULL;
}

hbm__block *hbm__pool_first(hbm__pool *p)
{
    hbm__avl *n = hbm__avl_first(p->free_tree);
    return n ? BLOCK_OF(n) : NULL;
}

static int segment_cmp(const hbm__avl *x, const hbm__avl *y)
{
    uintptr_t a = SEGMENT_OF(x)->addr, b = SEGMENT_OF(y)->addr;
    return a < b ? -1 : a > b;
}

void hbm__segments_insert(hbm_allocator *a, hbm__segment *s)
{
    hbm__avl_insert(&a->segments, &s->node, segment_cmp);
    a->nsegments++;
}

void hbm__segments_remove(hbm_allocator *a, hbm__segment *s)
{
    hbm__avl_remove(&a->segments, &s->node, segment_cmp);
    a->nsegments--;
}

hbm__segment *hbm__segment_find(hbm_allocator *a, uintptr_t addr)
{
    hbm__segment k;
    k.addr = addr + 1;
    hbm__avl *n = hbm__avl_before(a->segments, &k.node, segment_cmp);
    if (!n)
        return NULL;
    hbm__segment *s = SEGMENT_OF(n);
    return addr - s->addr < s->size ? s : NULL;
}

hbm__segment *hbm__segments_first(hbm_allocator *a)
{
    hbm__avl *n = hbm__avl_first(a->segments);
    return n ? SEGMENT_OF(n) : NULL;
}

hbm__segment *hbm__segments_next(hbm_allocator *a, const hbm__segment *s)
{
    hbm__avl *n = hbm__avl_upper_bound(a->segments, &s->node, segment_cmp);
    return n ? SEGMENT_OF(n) : NULL;
}
