/*
 * fork.h: the locks hbmalloc takes around fork() (fork.c), so that a child
 * never inherits one held by a thread it does not have.
 */
#ifndef HBM_FORK_H
#define HBM_FORK_H

#include <pthread.h>

/* The order every path nests them in, and so the order they are taken in before a fork. */
enum { HBM__FORK_SET = 0, HBM__FORK_ALLOCATOR = 1, HBM__FORK_BACKEND = 2 };

/* 0, or -1 when host memory ran out. Untracking a lock that is not tracked does nothing. */
int hbm__fork_track(pthread_mutex_t *m, int rank);
void hbm__fork_untrack(pthread_mutex_t *m);

#endif
