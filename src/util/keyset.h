/*
 * keyset.h: a hash table of pointers to objects that carry their own key, instantiated per object type: open
 * addressing, linear probing, backward-shift deletion, a capacity that is a power of two, a load of at most 1/2.
 * One pointer a cell (hashmap.h keeps a key and a value: twice the memory), the key read from the object: a probe
 * that meets another object reads that object's key (a second cache line), which at a load of at most 1/2 is rare,
 * and a hit reads the object, which its caller reads next anyway. Keys are unique and never 0 (NULL marks an empty
 * cell). Issue #38 item 3: the live-block map at 10^6 blocks went from 33.5 to 16.8 bytes a block.
 *
 *   HBM__KEYSET(name, T, FIELD, HASH, MIN)
 *
 * defines the type `name` (cells, mask, n) over objects of type T whose key is the uintptr_t member FIELD, and
 * name_init (MIN cells, a power of two), name_free, name_get (the object of a key, or NULL), name_fits and
 * name_reserve (room for more objects), name_insert (an object whose key is not in the set, room reserved),
 * name_put (the same, room made first) and name_del (an object out by its key). HASH(key) gives the key's 64-bit
 * hash. Instance: core/types.h (live blocks by address). Owns its array only; allocates with calloc.
 */
#ifndef HBM_UTIL_KEYSET_H
#define HBM_UTIL_KEYSET_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define HBM__KEYSET(name, T, FIELD, HASH, MIN)                                                                        \
    typedef struct name {                                                                                             \
        T **cells;                                                                                                    \
        size_t mask; /* capacity - 1 */                                                                               \
        size_t n;                                                                                                     \
        size_t limit; /* the most objects at a load of 1/2: capacity / 2 */                                           \
    } name;                                                                                                           \
                                                                                                                      \
    static inline size_t name##_home(const name *m, uintptr_t key) { return (size_t)(HASH(key)) & m->mask; }          \
                                                                                                                      \
    static inline int name##_init(name *m)                                                                            \
    {                                                                                                                 \
        *m = (name){0};                                                                                               \
        m->cells = calloc(MIN, sizeof *m->cells);                                                                     \
        m->mask = (size_t)(MIN)-1;                                                                                    \
        m->limit = (size_t)(MIN) / 2;                                                                                 \
        return m->cells ? 0 : -1;                                                                                     \
    }                                                                                                                 \
                                                                                                                      \
    static inline void name##_free(name *m)                                                                           \
    {                                                                                                                 \
        free(m->cells);                                                                                               \
        m->cells = NULL;                                                                                              \
    }                                                                                                                 \
                                                                                                                      \
    /* The object of key, or NULL. */                                                                                 \
    static inline T *name##_get(const name *m, uintptr_t key)                                                         \
    {                                                                                                                 \
        for (size_t i = name##_home(m, key);; i = (i + 1) & m->mask) {                                                \
            T *o = m->cells[i];                                                                                       \
            if (!o || o->FIELD == key)                                                                                \
                return o;                                                                                             \
        }                                                                                                             \
    }                                                                                                                 \
                                                                                                                      \
    /* o in the first empty cell of its probe run (its key known absent: no key is compared). */                      \
    static inline void name##_place(name *m, T *o)                                                                    \
    {                                                                                                                 \
        size_t i = name##_home(m, o->FIELD);                                                                          \
        while (m->cells[i])                                                                                           \
            i = (i + 1) & m->mask;                                                                                    \
        m->cells[i] = o;                                                                                              \
    }                                                                                                                 \
                                                                                                                      \
    /* Whether `extra` more objects fit without growing. */                                                           \
    static inline int name##_fits(const name *m, size_t extra) { return m->n + extra <= m->limit; }                   \
                                                                                                                      \
    /* Room for n + extra objects: the capacity doubled until there is. 0, or -1 when host memory ran out (m        \
     * unchanged). */ \
    static __attribute__((noinline, cold, unused)) int name##_grow(name *m, size_t extra)                             \
    {                                                                                                                 \
        size_t ncap = m->mask + 1;                                                                                    \
        while ((m->n + extra) * 2 > ncap)                                                                             \
            ncap *= 2;                                                                                                \
        T **cells = calloc(ncap, sizeof *cells);                                                                      \
        if (!cells)                                                                                                   \
            return -1;                                                                                                \
        name old = *m;                                                                                                \
        m->cells = cells;                                                                                             \
        m->mask = ncap - 1;                                                                                           \
        m->limit = ncap / 2;                                                                                          \
        for (size_t i = 0; i <= old.mask; i++)                                                                        \
            if (old.cells[i])                                                                                         \
                name##_place(m, old.cells[i]);                                                                        \
        free(old.cells);                                                                                              \
        return 0;                                                                                                     \
    }                                                                                                                 \
                                                                                                                      \
    /* Room for `extra` more objects ahead of time, so that a later insert cannot fail. 0, or -1. */                  \
    static inline int name##_reserve(name *m, size_t extra)                                                           \
    {                                                                                                                 \
        return name##_fits(m, extra) ? 0 : name##_grow(m, extra);                                                     \
    }                                                                                                                 \
                                                                                                                      \
    /* o in, where name_reserve made room; its key must not be in the set. */                                         \
    static inline void name##_insert(name *m, T *o)                                                                   \
    {                                                                                                                 \
        name##_place(m, o);                                                                                           \
        m->n++;                                                                                                       \
    }                                                                                                                 \
                                                                                                                      \
    /* o in, room made first: 0, or -1 (the set unchanged). Its key must not be in the set. */                        \
    static inline int name##_put(name *m, T *o)                                                                       \
    {                                                                                                                 \
        if (name##_reserve(m, 1))                                                                                     \
            return -1;                                                                                                \
        name##_insert(m, o);                                                                                          \
        return 0;                                                                                                     \
    }                                                                                                                 \
                                                                                                                      \
    /* The object of key taken out, or NULL when it was not there. Later objects of its probe run move into the     \
     * hole (no tombstones). */ \
    static inline T *name##_del(name *m, uintptr_t key)                                                               \
    {                                                                                                                 \
        size_t i = name##_home(m, key);                                                                               \
        T *o;                                                                                                         \
        while ((o = m->cells[i]) && o->FIELD != key)                                                                  \
            i = (i + 1) & m->mask;                                                                                    \
        if (!o)                                                                                                       \
            return NULL;                                                                                              \
        size_t hole = i;                                                                                              \
        for (size_t j = (i + 1) & m->mask; m->cells[j]; j = (j + 1) & m->mask) {                                      \
            size_t home = name##_home(m, m->cells[j]->FIELD);                                                         \
            /* Move j into the hole if its home does not lie cyclically in (hole, j]. */                              \
            int in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);                       \
            if (!in_range) {                                                                                          \
                m->cells[hole] = m->cells[j];                                                                         \
                hole = j;                                                                                             \
            }                                                                                                         \
        }                                                                                                             \
        m->cells[hole] = NULL;                                                                                        \
        m->n--;                                                                                                       \
        return o;                                                                                                     \
    }

#endif
