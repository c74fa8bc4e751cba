/*
 * ptrmap.c: the live-block map. See ptrmap.h. Must not know what a block is.
 */
#include "core/ptrmap.h"

#include <stdlib.h>

#define PTRMAP_MIN 4096 /* 64 KiB, room for 2048 live blocks before the first growth */

static int alloc_arrays(hbm__ptrmap *m, size_t cap)
{
    m->keys = calloc(cap, sizeof *m->keys);
    m->vals = calloc(cap, sizeof *m->vals);
    if (!m->keys || !m->vals) {
        free(m->keys);
        free(m->vals);
        return -1;
    }
    m->mask = cap - 1;
    return 0;
}

int hbm__ptrmap_init(hbm__ptrmap *m)
{
    m->n = 0;
    return alloc_arrays(m, PTRMAP_MIN);
}

void hbm__ptrmap_free(hbm__ptrmap *m)
{
    free(m->keys);
    free(m->vals);
    m->keys = NULL;
    m->vals = NULL;
}

static void insert_raw(hbm__ptrmap *m, uintptr_t key, void *val)
{
    size_t i = hbm__ptrmap_slot(m, key);
    while (m->keys[i] != 0 && m->keys[i] != key)
        i = (i + 1) & m->mask;
    if (m->keys[i] == 0)
        m->n++;
    m->keys[i] = key;
    m->vals[i] = val;
}

int hbm__ptrmap_grow(hbm__ptrmap *m, size_t extra)
{
    size_t cap = m->mask + 1;
    size_t ncap = cap;
    while ((m->n + extra) * 2 > ncap)
        ncap *= 2;
    hbm__ptrmap old = *m;
    if (alloc_arrays(m, ncap)) {
        *m = old;
        return -1;
    }
    m->n = 0;
    for (size_t i = 0; i <= old.mask; i++)
        if (old.keys[i])
            insert_raw(m, old.keys[i], old.vals[i]);
    free(old.keys);
    free(old.vals);
    return 0;
}

int hbm__ptrmap_put(hbm__ptrmap *m, uintptr_t key, void *val)
{
    if (hbm__ptrmap_reserve(m, 1))
        return -1;
    insert_raw(m, key, val);
    return 0;
}

void *hbm__ptrmap_del(hbm__ptrmap *m, uintptr_t key)
{
    size_t i = hbm__ptrmap_slot(m, key);
    while (m->keys[i] != key) {
        if (m->keys[i] == 0)
            return NULL;
        i = (i + 1) & m->mask;
    }
    void *val = m->vals[i];
    /* Backward-shift deletion: pull later entries of the probe run into the hole. */
    size_t hole = i;
    for (size_t j = (i + 1) & m->mask; m->keys[j]; j = (j + 1) & m->mask) {
        size_t home = hbm__ptrmap_slot(m, m->keys[j]);
        /* Move j into the hole if its home does not lie cyclically in (hole, j]. */
        int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!in_range) {
            m->keys[hole] = m->keys[j];
            m->vals[hole] = m->vals[j];
            hole = j;
        }
    }
    m->keys[hole] = 0;
    m->vals[hole] = NULL;
    m->n--;
    return val;
}
