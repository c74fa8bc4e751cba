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
 * default, which it honours: the handler puts the default back itself (the application's handler is still the
 * installed one, and raising into it again would call it again, for ever, or with SA_NODEFER recurse until the
 * stack overflows), so the process dies of the signal once, when the application's handler returns (the signal is
 * blocked while it runs) or at once (SA_NODEFER, or a caller outside any handler). A thread that takes the signal
 * with sigwait and calls the handler gets the raised signal back instead: the second call unblocks it, and the
 * process dies then. SIGKILL cannot be caught: those records stay, and readers report them stale.
 *
 * SIGINT in a process with Python: not handled. CPython installs its SIGINT handler (KeyboardInterrupt) only where
 * SIGINT is at its default when the interpreter starts (Modules/signalmodule.c, signal_get_set_handlers: "if
 * (sigint_func == state->default_handler)", reached from Py_Initialize through _PySignal_Init and
 * signal_install_handlers). A host that embeds Python and publishes before Py_Initialize would lose Ctrl-C's
 * KeyboardInterrupt to this handler; a stale record costs less (`hbmalloc top` reports it stale, --clean removes
 * it). So SIGINT is left at its default wherever the process has the CPython API (Py_IsInitialized found by dlsym:
 * a host linked with libpython, the python3 program), whether or not the interpreter has started yet. A libpython
 * loaded later, or with RTLD_LOCAL, is not seen: such a host can put SIGINT back to SIG_DFL before Py_Initialize.
 *
 * A library unloaded (dlclose) must not leave a handler that points into code no longer mapped (the next SIGTERM
 * would be a SIGSEGV): at unload the previous disposition is put back for each signal whose handler is still this
 * one. A handler the application installed over it is left; one that chains to this one after the unload cannot be
 * helped.
 *
 * The handler may run in any thread at any time, so it takes no lock and calls only unlink, getpid, sigaction,
 * pthread_sigmask and raise (async-signal-safe: signal-safety(7); pthread_sigmask since POSIX.1-2008 TC1). The
 * paths live in a fixed table of slots, each written before it is marked live, in a buffer of PATH_MAX bytes
 * allocated once and never freed, so the handler reads only live, whole paths or, racing a record being removed
 * and another made in the same slot, a path being rewritten: at worst an unlink of a name that does not exist. A
 * slot names its owner: a forked child, which inherits the handler, never removes its parent's records. More than
 * SLOTS records at once: the extra ones are not removed by a signal (they are at exit). Must not touch the records
 * themselves or the allocator.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_DEFAULT */
#endif
#include "io/publish_signals.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
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

#define NSIGS 3
static const int signals[NSIGS] = {SIGTERM, SIGINT, SIGHUP};
static struct sigaction previous[NSIGS]; /* each as it was before this handler (always the default), for unload */
static _Atomic int raised[NSIGS];        /* the handler has raised it once: a second call means it came back */

static void on_signal(int sig)
{
    int saved = errno;
    pid_t me = getpid();
    for (int i = 0; i < SLOTS; i++)
        if (atomic_load_explicit(&slots[i].state, memory_order_acquire) == LIVE && slots[i].owner == me)
            unlink(slots[i].path);
    /* The default back, then the signal again. Called by the kernel, SA_RESETHAND has done the first already;
     * called by an application's handler that chains to this one, that handler is still installed, and raising
     * into it would loop. The signal, blocked while a handler (without SA_NODEFER) runs, is delivered when it
     * returns; unblocked, at once. */
    struct sigaction dfl;
    memset(&dfl, 0, sizeof dfl);
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    for (int i = 0; i < NSIGS; i++)
        if (signals[i] == sig && atomic_exchange(&raised[i], 1)) {
            /* Here again: the signal raised last time was taken by a thread that waits for it (sigwait) and calls
             * this handler, not delivered. Unblocked in this thread, the next one ends the process. */
            sigset_t one;
            sigemptyset(&one);
            sigaddset(&one, sig);
            pthread_sigmask(SIG_UNBLOCK, &one, NULL);
        }
    raise(sig);
    errno = saved;
}

/* The CPython API in the process (see the header comment): then SIGINT is Python's to take. */
static bool python_in_process(void) { return dlsym(RTLD_DEFAULT, "Py_IsInitialized") != NULL; }

void hbm__pubsig_install(void)
{
    bool python = python_in_process();
    for (int i = 0; i < NSIGS; i++) {
        struct sigaction old, sa;
        if (signals[i] == SIGINT && python)
            continue; /* Py_Initialize, now or later, must find it at its default */
        if (sigaction(signals[i], NULL, &old) || (old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL)
            continue; /* the application's: left alone */
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESETHAND | SA_RESTART;
        sigfillset(&sa.sa_mask); /* nothing else interrupts the removal */
        previous[i] = old;
        sigaction(signals[i], &sa, NULL);
    }
}

/* At unload (dlclose; also at exit, after atexit has removed the records): no handler left pointing here. */
__attribute__((destructor)) static void uninstall(void)
{
    for (int i = 0; i < NSIGS; i++) {
        struct sigaction cur;
        if (!sigaction(signals[i], NULL, &cur) && !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == on_signal)
            sigaction(signals[i], &previous[i], NULL);
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
