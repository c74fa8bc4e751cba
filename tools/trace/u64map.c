/* u64map.c: see u64map.h. Knows nothing of what keys and values mean. */
#include "u64map.h"

#include <stdlib.h>

#include "util.h"


static size_t hash(uint64_t k, size_t mask) { return (size_t)hbm__mix64(k) & mask; }

static int grow(u64map *m)
{
    size_t cap = m->mask ? (m->mask + 1) * 2 : 1024;
    u64map nm = {calloc(cap, 8), calloc(cap, 8), calloc(cap, 1), cap - 1, 0, m->probes};
    if (!nm.keys || !nm.vals || !nm.used) {
        free(nm.keys);
        free(nm.vals);
        free(nm.used);
        return -1;
    }
    for (size_t i = 0; m->mask && i <= m->mask; i++)
        if (m->used[i]) {
            size_t j = hash(m->keys[i], nm.mask);
            while (nm.used[j])
                j = (j + 1) & nm.mask;
            nm.keys[j] = m->keys[i];
            nm.vals[j] = m->vals[i];
            nm.used[j] = 1;
            nm.n++;
        }
    u64map_free(m);
    *m = nm;
    return 0;
}

int u64map_init(u64map *m)
{
    *m = (u64map){0};
    return grow(m);
}

void u64map_free(u64map *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    m->keys = m->vals = NULL;
    m->used = NULL;
}

size_t u64map_find(u64map *m, uint64_t key)
{
    size_t i = hash(key, m->mask);
    m->probes++;
    while (m->used[i] && m->keys[i] != key) {
        i = (i + 1) & m->mask;
        m->probes++;
    }
    return i;
}

int u64map_put_at(u64map *m, size_t i, uint64_t key, uint64_t val)
{
    m->keys[i] = key;
    m->vals[i] = val;
    m->used[i] = 1;
    return ++m->n * 2 > m->mask + 1 ? grow(m) : 0; /* load factor at most 1/2 */
}

void u64map_del_at(u64map *m, size_t i)
{
    size_t hole = i;
    m->used[hole] = 0;
    m->n--;
    for (size_t j = (i + 1) & m->mask; m->used[j]; j = (j + 1) & m->mask) {
        size_t home = hash(m->keys[j], m->mask);
        int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!in_range) {
            m->keys[hole] = m->keys[j];
            m->vals[hole] = m->vals[j];
            m->used[hole] = 1;
            m->used[j] = 0;
            hole = j;
        }
    }
}
