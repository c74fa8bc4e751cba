/*
 * ptrmap.h: address -> block map for live blocks (open addressing, linear
 * probing, backward-shift deletion). Owns its arrays only; key 0 marks an
 * empty slot, so address 0 is never stored (no backend hands it out).
 */
#ifndef HBM_PTRMAP_H
#define HBM_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct hbm__ptrmap {
    uintptr_t *keys;
    void **vals;
    size_t mask; /* capacity - 1; capacity is a power of two */
    size_t n;
} hbm__ptrmap;

int hbm__ptrmap_init(hbm__ptrmap *m);
void hbm__ptrmap_free(hbm__ptrmap *m);
/* 0 on success, -1 when host memory for growth ran out (map unchanged). */
int hbm__ptrmap_put(hbm__ptrmap *m, uintptr_t key, void *val);
int hbm__ptrmap_grow(hbm__ptrmap *m, size_t extra);
/* Make room for `extra` more entries ahead of time, so a later put cannot fail. */
static inline int hbm__ptrmap_reserve(hbm__ptrmap *m, size_t extra)
{
    return (m->n + extra) * 2 <= m->mask + 1 ? 0 : hbm__ptrmap_grow(m, extra);
}

static inline size_t hbm__ptrmap_slot(const hbm__ptrmap *m, uintptr_t key)
{
    /* Block addresses are multiples of 512: drop those bits, then mix. */
    return (size_t)(((uint64_t)(key >> 9) * 0x9E3779B97F4A7C15ull) >> 20) & m->mask;
}

static inline void *hbm__ptrmap_get(const hbm__ptrmap *m, uintptr_t key)
{
    for (size_t i = hbm__ptrmap_slot(m, key);; i = (i + 1) & m->mask) {
        if (m->keys[i] == key)
            return m->vals[i];
        if (m->keys[i] == 0)
            return NULL;
    }
}

/* Remove key; returns its value or NULL if absent. */
void *hbm__ptrmap_del(hbm__ptrmap *m, uintptr_t key);

#endif
