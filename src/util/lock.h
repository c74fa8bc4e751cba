/*
 * lock.h: the allocator's lock, taken on every public call. Uncontended, a take and a give are one atomic
 * instruction each, inline: a pthread mutex's were 106 of the 595 instructions of a locked 512-byte malloc and free,
 * through four calls into libc (issue #38 item 1). Contended, a thread spins a little, then sleeps on a futex: the
 * third mutex of U. Drepper, "Futexes Are Tricky" (2011), section 6. State 0: free; 1: held; 2: held, and a thread
 * may sleep on it (its give wakes one).
 *
 * Not recursive, no owner check, no priority inheritance: hbmalloc never takes its own lock twice, and the
 * pthread_atfork handlers (fork.c) take and give it as they do the others. Memory order: a take is an acquire, a
 * give a release (what ThreadSanitizer checks the allocator by). Linux only (the futex); so is hbmalloc.
 */
#ifndef HBM_LOCK_H
#define HBM_LOCK_H

#include <stdbool.h>

typedef struct hbm__mutex {
    int state;
} hbm__mutex;

/* The slow paths (lock.c): the lock was held when taken; a thread may sleep on it when given. */
void hbm__mutex_wait(hbm__mutex *m);
void hbm__mutex_wake(hbm__mutex *m);

static inline void hbm__mutex_init(hbm__mutex *m) { __atomic_store_n(&m->state, 0, __ATOMIC_RELAXED); }

static inline void hbm__mutex_take(hbm__mutex *m)
{
    int expect = 0;
    if (__builtin_expect(!__atomic_compare_exchange_n(&m->state, &expect, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED),
                         0))
        hbm__mutex_wait(m);
}

static inline void hbm__mutex_give(hbm__mutex *m)
{
    if (__builtin_expect(__atomic_exchange_n(&m->state, 0, __ATOMIC_RELEASE) == 2, 0))
        hbm__mutex_wake(m);
}

#endif
