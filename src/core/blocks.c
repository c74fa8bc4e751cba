/*
 * blocks.c: block objects come in slabs of BLOCK_SLAB, threaded onto the spare list and freed together at destroy: a
 * split or a new segment takes one from the list instead of calling malloc.
 */
#include <stdlib.h>

#include "core/blocks.h"
#include "core/errors.h"

#define BLOCK_SLAB 64

typedef struct hbm__slab {
    struct hbm__slab *next;
    hbm__block blocks[BLOCK_SLAB];
} hbm__slab;

hbm_status hbm__add_slab(hbm_allocator *a)
{
    hbm__slab *s = malloc(sizeof *s);
    if (!s) {
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        return HBM_ERR_NOMEM;
    }
    s->next = a->slabs;
    a->slabs = s;
    for (int i = BLOCK_SLAB - 1; i >= 0; i--)
        hbm__block_recycle(a, &s->blocks[i]);
    return HBM_OK;
}

hbm_status hbm__add_spares(hbm_allocator *a, int n)
{
    while (a->nspare_blocks < (size_t)n)
        if (hbm__add_slab(a) != HBM_OK)
            return HBM_ERR_NOMEM;
    return HBM_OK;
}

void hbm__blocks_teardown(hbm_allocator *a)
{
    a->spare_blocks = NULL; /* a spare object owns nothing: it was free when recycled */
    a->nspare_blocks = 0;
    while (a->slabs) {
        hbm__slab *sl = a->slabs;
        a->slabs = sl->next;
        free(sl);
    }
}
