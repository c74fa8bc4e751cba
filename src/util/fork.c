/*
 * fork.c: fork() safety. The child of fork() has only the thread that forked;
 * a lock another thread held at that moment stays held in the child for ever,
 * and the child's first call into that allocator would hang. So, as glibc's
 * malloc does for its arenas, pthread_atfork handlers take every hbmalloc lock
 * before the fork and release them after it, in the parent and in the child:
 * the child starts with every structure consistent and every lock free.
 *
 * This registry is the library's one process-wide state, because fork is
 * process-wide. It owns the list of locks and the order they are taken in
 * (the order in which every code path nests them: a device set's lock alone,
 * then an allocator's, then its backend's); it knows nothing of what they guard.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "util/fork.h"
#include "util/util.h"

typedef struct tracked {
    void *m;
    int rank;
    bool own; /* an hbm__mutex (lock.h), else a pthread mutex */
} tracked;

static pthread_mutex_t registry = PTHREAD_MUTEX_INITIALIZER;
static tracked *locks;
static size_t nlocks, cap_locks;
static pthread_once_t installed = PTHREAD_ONCE_INIT;

static void prepare(void)
{
    pthread_mutex_lock(&registry);
    for (int rank = HBM__FORK_SET; rank <= HBM__FORK_BACKEND; rank++)
        for (size_t i = 0; i < nlocks; i++)
            if (locks[i].rank == rank && locks[i].own)
                hbm__mutex_take(locks[i].m);
            else if (locks[i].rank == rank)
                pthread_mutex_lock(locks[i].m);
}

/* After the fork, in both processes: the forking thread holds every lock and gives each back. */
static void release(void)
{
    for (int rank = HBM__FORK_BACKEND; rank >= HBM__FORK_SET; rank--)
        for (size_t i = nlocks; i-- > 0;)
            if (locks[i].rank == rank && locks[i].own)
                hbm__mutex_give(locks[i].m);
            else if (locks[i].rank == rank)
                pthread_mutex_unlock(locks[i].m);
    pthread_mutex_unlock(&registry);
}

static void install(void) { pthread_atfork(prepare, release, release); }

static int track(void *m, int rank, bool own)
{
    pthread_once(&installed, install);
    pthread_mutex_lock(&registry);
    int rc = hbm__grow((void **)&locks, &cap_locks, nlocks + 1, sizeof *locks);
    if (!rc)
        locks[nlocks++] = (tracked){m, rank, own};
    pthread_mutex_unlock(&registry);
    return rc;
}

int hbm__fork_track(pthread_mutex_t *m, int rank) { return track(m, rank, false); }

int hbm__fork_track_mutex(hbm__mutex *m, int rank) { return track(m, rank, true); }

void hbm__fork_untrack(const void *m)
{
    pthread_mutex_lock(&registry);
    for (size_t i = 0; i < nlocks; i++)
        if (locks[i].m == m) {
            locks[i] = locks[--nlocks];
            break;
        }
    if (!nlocks) { /* the last one gone: give the memory back (leak checkers see none) */
        free(locks);
        locks = NULL;
        cap_locks = 0;
    }
    pthread_mutex_unlock(&registry);
}
