/*
 * publish.h: the layout of a record file (publish.c), for the library and its tests only: readers outside use
 * hbm_record_read, so the layout may change with HBM__RECORD_LAYOUT.
 */
#ifndef HBM_PUBLISH_H
#define HBM_PUBLISH_H

#include <stdatomic.h>
#include <stdint.h>

#include "hbmalloc.h"

#define HBM__RECORD_MAGIC 0x317274626d6268ull /* "hbmbtr1" */
#define HBM__RECORD_LAYOUT \
    6 /* 2: pid_ns, the writer's lock; 3: sleeping pools; 4: the job's peaks; 5: resident;
                             * 6: memory outside hbmalloc, refreshed */

typedef struct hbm__shared_record {
    uint64_t magic;
    uint32_t layout, size; /* HBM__RECORD_LAYOUT, sizeof(hbm__shared_record) */
    _Atomic uint64_t seq;  /* odd while being written */
    uint64_t pid_ns;       /* the writer's PID namespace (inode of /proc/self/ns/pid; 0: unknown): r.pid means
                            * something to a reader of the same namespace only */
    hbm_record r;
} hbm__shared_record;

#endif
