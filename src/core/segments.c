/*
 * segments.c: the segment index: every segment of an allocator in a red-black
 * tree by address, for pointer diagnostics, the validator and teardown.
 * O(log n) per operation. Owns ordering only: no policy. (The free-block index is pool.h.)
 */
#include <stddef.h>

#include "core/segments.h"
#include "core/pool.h"

#define SEGMENT_OF(n) ((hbm__segment *)((char *)(n)-offsetof(hbm__segment, node)))

static bool segment_less(const hbm__rb *x, const hbm__rb *y) { return SEGMENT_OF(x)->addr < SEGMENT_OF(y)->addr; }

void hbm__segments_insert(hbm_allocator *a, hbm__segment *s)
{
    hbm__rb_insert(&a->segments, &s->node, segment_less);
    a->nsegments++;
}

void hbm__segments_remove(hbm_allocator *a, hbm__segment *s)
{
    hbm__rb_remove(&a->segments, &s->node);
    a->nsegments--;
}

hbm__segment *hbm__segment_find(hbm_allocator *a, uintptr_t addr)
{
    hbm__segment k;
    k.addr = addr + 1;
    hbm__rb *n = hbm__rb_before(a->segments, &k.node, segment_less);
    if (!n)
        return NULL;
    hbm__segment *s = SEGMENT_OF(n);
    return addr - s->addr < s->size ? s : NULL;
}

hbm__segment *hbm__segments_first(hbm_allocator *a)
{
    hbm__rb *n = hbm__rb_first(a->segments);
    return n ? SEGMENT_OF(n) : NULL;
}

hbm__segment *hbm__segments_last(hbm_allocator *a)
{
    hbm__rb *n = hbm__rb_last(a->segments);
    return n ? SEGMENT_OF(n) : NULL;
}

hbm__segment *hbm__segments_next(const hbm__segment *s)
{
    hbm__rb *n = hbm__rb_next(&s->node);
    return n ? SEGMENT_OF(n) : NULL;
}

size_t hbm__pool_largest(hbm__pool *p)
{
    /* The tree orders by (stream, size, address): the largest of each stream is found from the top, one descent
     * per stream. */
    size_t best = 0;
    for (hbm__block *b = hbm__pool_node(hbm__rb_last(p->free_tree)); b; b = hbm__pool_before(p, b->stream, 0)) {
        if (b->size > best)
            best = b->size;
        if (!b->stream)
            break;
    }
    return best;
}

size_t hbm__largest_free(hbm_allocator *a)
{
    size_t best = 0, x;
    hbm__pool *pools[] = {&a->small, &a->large, &a->region};
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++)
        if ((x = hbm__pool_largest(pools[i])) > best)
            best = x;
    return best;
}
