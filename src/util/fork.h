/*
 * fork.h: the locks hbmalloc takes around fork() (fork.c), so that a child
 * never inherits one held by a thread it does not have.
 */
#ifndef HBM_FORK_H
#define HBM_FORK_H

#include <pthread.h>

#include "util/lock.h"

/* The order every path nests them in, and so the order they are taken in before a fork. */
enum { HBM__FORK_SET = 0, HBM__FORK_ALLOCATOR = 1, HBM__FORK_BACKEND = 2 };

/* 0, or -1 when host memory ran out. Untracking a lock that is not tracked does nothing. A pthread mutex (a device
 * set's, a backend's) or an allocator's lock (lock.h). */
int hbm__fork_track(pthread_mutex_t *m, int rank);
int hbm__fork_track_mutex(hbm__mutex *m, int rank);
void hbm__fork_untrack(const void *m);

#endif
