/*
 * pool.c: the segment index: every segment of an allocator in an AVL tree by
 * address, for pointer diagnostics, the validator and teardown. O(log n) per
 * operation. Owns ordering only: no policy. (The free-block index is pool.h.)
 */
#include <stddef.h>

#include "internal.h"

#define SEGMENT_OF(n) ((hbm__segment *)((char *)(n) - offsetof(hbm__segment, node)))

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

hbm__segment *hbm__segments_last(hbm_allocator *a)
{
    hbm__avl *n = hbm__avl_last(a->segments);
    return n ? SEGMENT_OF(n) : NULL;
}

hbm__segment *hbm__segments_next(hbm_allocator *a, const hbm__segment *s)
{
    hbm__avl *n = hbm__avl_upper_bound(a->segments, &s->node, segment_cmp);
    return n ? SEGMENT_OF(n) : NULL;
}
