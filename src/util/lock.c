/*
 * lock.c: the slow paths of the allocator's lock (lock.h): a short spin, for a holder that is about to give it
 * (an allocator's critical sections are a few hundred instructions), then sleeps on the futex with the state at 2,
 * so that the give knows to wake one sleeper.
 */
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/lock.h"

enum { SPINS = 100 };

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void hbm__mutex_wait(hbm__mutex *m)
{
    for (int i = 0; i < SPINS; i++) {
        int s = __atomic_load_n(&m->state, __ATOMIC_RELAXED);
        if (s == 2)
            break; /* others sleep already: join them */
        int expect = 0;
        if (s == 0 && __atomic_compare_exchange_n(&m->state, &expect, 1, false, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return;
        relax();
    }
    /* Held with sleepers from now: whoever gives it wakes one. Taken when the exchange finds it free. */
    while (__atomic_exchange_n(&m->state, 2, __ATOMIC_ACQUIRE) != 0)
        syscall(SYS_futex, &m->state, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
}

void hbm__mutex_wake(hbm__mutex *m) { syscall(SYS_futex, &m->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0); }
