/*
 * hashmap.h: the hash map of hbmalloc, instantiated per key type: open addressing, linear probing,
 * backward-shift deletion, a capacity that is a power of two, a load of at most 1/2.
 *
 *   HBM__HASHMAP(name, K, V, HASH, USED, COUNT, MIN)
 *
 * defines the type `name` (keys, vals, used, mask, n, probes) and name_init(m) (MIN cells, a power of two), name_free, name_find (the
 * cell of a key, or the empty cell where it would go), name_probe (the same for a key known by its hash and a
 * match function: a table of ids found by their text), name_get, name_put_at, name_put, name_fits, name_reserve,
 * name_del_at and name_del. HASH(m, key) gives the key's 64-bit hash. USED 0: key 0 marks an empty cell and is never
 * stored (label ids); USED 1: every key is valid (keys
 * read from files) and a byte per cell says which cells are used. COUNT 1: cells looked at are counted in `probes`
 * (the readers' resource tests). Instances: tools/trace/u64map.h (64-bit keys of files), core/labels.c (label ids
 * by their text). Objects that carry their own key are kept in a keyset (util/keyset.h: one pointer a cell), as the
 * live blocks are. Owns its arrays only; allocates with calloc.
 */
#ifndef HBM_UTIL_HASHMAP_H
#define HBM_UTIL_HASHMAP_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define HBM__HASHMAP(name, K, V, HASH, USED, COUNT, MIN)                                                            \
    typedef struct name {                                                                                           \
        K *keys;                                                                                                    \
        V *vals;                                                                                                    \
        uint8_t *used; /* USED 1 only */                                                                            \
        size_t mask;   /* capacity - 1 */                                                                           \
        size_t n;                                                                                                   \
        size_t probes; /* COUNT 1 only: cells looked at */                                                          \
    } name;                                                                                                         \
                                                                                                                    \
    static inline int name##_occupied(const name *m, size_t i) { return USED ? m->used[i] != 0 : m->keys[i] != 0; } \
                                                                                                                    \
    static inline size_t name##_home(const name *m, K key) { return (size_t)(HASH(m, key)) & m->mask; }             \
                                                                                                                    \
    /* Arrays of cap cells (a power of two), empty. 0, or -1 when host memory ran out (m unchanged). */             \
    static inline int name##_alloc(name *m, size_t cap)                                                             \
    {                                                                                                               \
        K *k = calloc(cap, sizeof *k);                                                                              \
        V *v = calloc(cap, sizeof *v);                                                                              \
        uint8_t *u = USED ? calloc(cap, 1) : NULL;                                                                  \
        if (!k || !v || (USED && !u)) {                                                                             \
            free(k);                                                                                                \
            free(v);                                                                                                \
            free(u);                                                                                                \
            return -1;                                                                                              \
        }                                                                                                           \
        m->keys = k;                                                                                                \
        m->vals = v;                                                                                                \
        m->used = u;                                                                                                \
        m->mask = cap - 1;                                                                                          \
        return 0;                                                                                                   \
    }                                                                                                               \
                                                                                                                    \
    static inline int name##_init(name *m)                                                                          \
    {                                                                                                               \
        *m = (name){0};                                                                                             \
        return name##_alloc(m, MIN);                                                                                \
    }                                                                                                               \
                                                                                                                    \
    static inline void name##_free(name *m)                                                                         \
    {                                                                                                               \
        free(m->keys);                                                                                              \
        free(m->vals);                                                                                              \
        free(m->used);                                                                                              \
        m->keys = NULL;                                                                                             \
        m->vals = NULL;                                                                                             \
        m->used = NULL;                                                                                             \
    }                                                                                                               \
                                                                                                                    \
    /* The cell of key, or the empty cell where it would go (name_occupied says which). */                          \
    static inline size_t name##_find(name *m, K key)                                                                \
    {                                                                                                               \
        size_t i = name##_home(m, key);                                                                             \
        if (COUNT)                                                                                                  \
            m->probes++;                                                                                            \
        while (name##_occupied(m, i) && m->keys[i] != key) {                                                        \
            i = (i + 1) & m->mask;                                                                                  \
            if (COUNT)                                                                                              \
                m->probes++;                                                                                        \
        }                                                                                                           \
        return i;                                                                                                   \
    }                                                                                                               \
                                                                                                                    \
    /* The same for a key known by its hash h: the first used cell whose key match() accepts, or the empty one. */  \
    static inline size_t name##_probe(const name *m, uint64_t h, int (*match)(const void *, K), const void *ctx)    \
    {                                                                                                               \
        size_t i = (size_t)h & m->mask;                                                                             \
        while (name##_occupied(m, i) && !match(ctx, m->keys[i]))                                                    \
            i = (i + 1) & m->mask;                                                                                  \
        return i;                                                                                                   \
    }                                                                                                               \
                                                                                                                    \
    /* key's value, or 0 (NULL) when it is not there. */                                                            \
    static inline V name##_get(const name *m, K key)                                                                \
    {                                                                                                               \
        for (size_t i = name##_home(m, key);; i = (i + 1) & m->mask) {                                              \
            if (m->keys[i] == key && (!USED || m->used[i]))                                                         \
                return m->vals[i];                                                                                  \
            if (!name##_occupied(m, i))                                                                             \
                return (V)0;                                                                                        \
        }                                                                                                           \
    }                                                                                                               \
                                                                                                                    \
    static inline void name##_set(name *m, size_t i, K key, V val)                                                  \
    {                                                                                                               \
        if (!name##_occupied(m, i))                                                                                 \
            m->n++;                                                                                                 \
        m->keys[i] = key;                                                                                           \
        m->vals[i] = val;                                                                                           \
        if (USED)                                                                                                   \
            m->used[i] = 1;                                                                                         \
    }                                                                                                               \
                                                                                                                    \
    /* Room for n + extra entries at a load of at most 1/2: the capacity doubled until there is. 0, or -1 when  \
     * host memory ran out (m unchanged). */   \
    static __attribute__((noinline, cold, unused)) int name##_grow(name *m, size_t extra)                           \
    {                                                                                                               \
        size_t ncap = m->mask + 1;                                                                                  \
        while ((m->n + extra) * 2 > ncap)                                                                           \
            ncap *= 2;                                                                                              \
        name old = *m;                                                                                              \
        if (name##_alloc(m, ncap)) {                                                                                \
            *m = old;                                                                                               \
            return -1;                                                                                              \
        }                                                                                                           \
        m->n = 0;                                                                                                   \
        for (size_t i = 0; i <= old.mask; i++)                                                                      \
            if (name##_occupied(&old, i)) {                                                                         \
                size_t j = name##_home(m, old.keys[i]);                                                             \
                while (name##_occupied(m, j))                                                                       \
                    j = (j + 1) & m->mask;                                                                          \
                name##_set(m, j, old.keys[i], old.vals[i]);                                                         \
            }                                                                                                       \
        name##_free(&old);                                                                                          \
        return 0;                                                                                                   \
    }                                                                                                               \
                                                                                                                    \
    /* Whether `extra` more entries fit without growing (name_reserve's test). */                                   \
    static inline int name##_fits(const name *m, size_t extra) { return (m->n + extra) * 2 <= m->mask + 1; }        \
                                                                                                                    \
    /* Room for `extra` more entries ahead of time, so that a later put cannot fail. 0, or -1. */                   \
    static inline int name##_reserve(name *m, size_t extra)                                                         \
    {                                                                                                               \
        return name##_fits(m, extra) ? 0 : name##_grow(m, extra);                                                   \
    }                                                                                                               \
                                                                                                                    \
    /* key's value set in cell i (from name_find); the table grows after when over half full: 0, or -1 when   \
     * that growth ran out of host memory (the entry is in). */     \
    static inline int name##_put_at(name *m, size_t i, K key, V val)                                                \
    {                                                                                                               \
        name##_set(m, i, key, val);                                                                                 \
        return name##_reserve(m, 0);                                                                                \
    }                                                                                                               \
                                                                                                                    \
    /* key's value set where name_reserve made room for it. */                                                      \
    static inline void name##_insert(name *m, K key, V val)                                                         \
    {                                                                                                               \
        size_t i = name##_home(m, key);                                                                             \
        while (name##_occupied(m, i) && m->keys[i] != key)                                                          \
            i = (i + 1) & m->mask;                                                                                  \
        name##_set(m, i, key, val);                                                                                 \
    }                                                                                                               \
                                                                                                                    \
    /* key's value set, room made first: 0, or -1 (the map unchanged). */                                           \
    static inline int name##_put(name *m, K key, V val)                                                             \
    {                                                                                                               \
        if (name##_reserve(m, 1))                                                                                   \
            return -1;                                                                                              \
        name##_insert(m, key, val);                                                                                 \
        return 0;                                                                                                   \
    }                                                                                                               \
                                                                                                                    \
    /* Cell i emptied: later entries of its probe run move into the hole (no tombstones). */                        \
    static inline void name##_del_at(name *m, size_t i)                                                             \
    {                                                                                                               \
        size_t hole = i;                                                                                            \
        for (size_t j = (i + 1) & m->mask; name##_occupied(m, j); j = (j + 1) & m->mask) {                          \
            size_t home = name##_home(m, m->keys[j]);                                                               \
            /* Move j into the hole if its home does not lie cyclically in (hole, j]. */                            \
            int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);                     \
            if (!in_range) {                                                                                        \
                m->keys[hole] = m->keys[j];                                                                         \
                m->vals[hole] = m->vals[j];                                                                         \
                hole = j;                                                                                           \
            }                                                                                                       \
        }                                                                                                           \
        m->keys[hole] = (K)0;                                                                                       \
        m->vals[hole] = (V)0;                                                                                       \
        if (USED)                                                                                                   \
            m->used[hole] = 0;                                                                                      \
        m->n--;                                                                                                     \
    }                                                                                                               \
                                                                                                                    \
    /* key removed: its value, or 0 (NULL) when it was not there. */                                                \
    static inline V name##_del(name *m, K key)                                                                      \
    {                                                                                                               \
        size_t i = name##_home(m, key);                                                                             \
        while (!(m->keys[i] == key && (!USED || m->used[i]))) {                                                     \
            if (!name##_occupied(m, i))                                                                             \
                return (V)0;                                                                                        \
            i = (i + 1) & m->mask;                                                                                  \
        }                                                                                                           \
        V val = m->vals[i];                                                                                         \
        name##_del_at(m, i);                                                                                        \
        return val;                                                                                                 \
    }

#endif
