/*
 * publish_signals.c: the records of a process that a signal ends are removed on its way out.
 *
 * A record is removed at a normal exit (atexit, publish.c). A job stopped by its scheduler or launcher gets
 * SIGTERM (torchrun, Slurm, Kubernetes, `kill`), whose default action ends the process without atexit: its records
 * stayed in the folder, reported stale by every `hbmalloc top` until --clean. Here, for SIGTERM, SIGINT and SIGHUP
 * whose disposition is still the default when the first record is made, a handler removes this process's records
 * and then lets the signal do what it would have done: it restores the default disposition and raises the signal
 * again, so the process still dies of it (its exit status says SIGTERM, a core or a parent's wait sees the same).
 *
 * The application's signal handling is never taken: a signal it handles (Python's KeyboardInterrupt on SIGINT, a
 * trainer's checkpoint-on-SIGTERM) or ignores (nohup's SIGHUP) is left alone — its handler, or its normal exit,
 * runs as before, and atexit removes the records when it exits. An application that installs its own handler later
 * replaces this one; one that chains to the handler it replaced reaches this one, whose previous disposition was the
 * default, which it honours. SIGKILL cannot be caught: those records stay, and readers report them stale.
 *
 * The handler may run in any thread at any time, so it takes no lock and calls only unlink, getpid, sigaction and
 * raise (async-signal-safe). The paths live in a fixed table of slots, each written before it is marked live, in a
 * buffer of PATH_MAX bytes allocated once and never freed, so the handler reads only live, whole paths or, racing a
 * record being removed and another made in the same slot, a path being rewritten: at worst an unlink of a name
 * that does not exist. A slot names its owner: a forked child, which
 * inherits the handler, never removes its parent's records. More than SLOTS records at once: the extra ones are
 * not removed by a signal (they are at exit). Must not touch the records themselves or the allocator.
 */
#include "io/publish_signals.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOTS 64 /* records of one process at once: allocators x devices */

enum { FREE, WRITING, LIVE };

static struct slot {
    _Atomic int state;
    pid_t owner;
    char *path; /* PATH_MAX bytes */
} slots[SLOTS];

static const int signals[] = {SIGTERM, SIGINT, SIGHUP};

static void on_signal(int sig)
{
    int saved = errno;
    pid_t me = getpid();
    for (int i = 0; i < SLOTS; i++)
        if (atomic_load_explicit(&slots[i].state, memory_order_acquire) == LIVE && slots[i].owner == me)
            unlink(slots[i].path);
    /* SA_RESETHAND put the default back; the signal, blocked while this runs, is delivered when it returns. */
    raise(sig);
    errno = saved;
}

void hbm__pubsig_install(void)
{
    for (size_t i = 0; i < sizeof signals / sizeof signals[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(signals[i], NULL, &old) || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
            continue; /* the application's: left alone */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESETHAND | SA_RESTART;
        sigfillset(&sa.sa_mask); /* nothing else interrupts the removal */
        sigaction(signals[i], &sa, NULL);
    }
}

int hbm__pubsig_add(const char *path)
{
    size_t need = strlen(path) + 1;
    for (int i = 0; i < SLOTS; i++) {
        int expect = FREE;
        if (!atomic_compare_exchange_strong(&slots[i].state, &expect, WRITING))
            continue;
        if (!slots[i].path && !(slots[i].path = malloc(PATH_MAX))) { /* once, never freed: a handler may read it */
            atomic_store(&slots[i].state, FREE);
            return -1;
        }
        if (need > PATH_MAX) { /* publish.c refuses such a path before it gets here */
            atomic_store(&slots[i].state, FREE);
            return -1;
        }
        memcpy(slots[i].path, path, need);
        slots[i].owner = getpid();
        atomic_store_explicit(&slots[i].state, LIVE, memory_order_release);
        return i;
    }
    return -1;
}

void hbm__pubsig_remove(int slot)
{
    if (slot < 0 || slot >= SLOTS)
        return;
    if (atomic_load(&slots[slot].state) == LIVE && slots[slot].owner == getpid())
        atomic_store(&slots[slot].state, FREE);
}
