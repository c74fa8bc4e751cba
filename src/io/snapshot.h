/* snapshot.h: a snapshot's pickle in memory (snapshot.c), for writers that must know its size before they write
 * (io/oom_dump.c reserves it in a shared folder first). */
#ifndef HBM_IO_SNAPSHOT_H
#define HBM_IO_SNAPSHOT_H

#include <stddef.h>

#include "hbmalloc.h"

/* s as hbm_snapshot_save's pickle, into *data (malloc'd; the caller frees it) of *len bytes. 0, or -1: no host
 * memory. */
int hbm__snapshot_pickle(const hbm_snapshot *s, unsigned char **data, size_t *len);

#endif
