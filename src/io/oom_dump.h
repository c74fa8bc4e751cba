/* oom_dump.h: snapshots at an OOM (oom_dump.c), as hbm_create and hbm_destroy reach them. */
#ifndef HBM_IO_OOM_DUMP_H
#define HBM_IO_OOM_DUMP_H

#include "core/types.h"

/* hbm_oom_dump(a, $HBMALLOC_OOM_DUMP_DIR, -1, -1) when the variable is set and not empty; HBM_OK when it is not.
 * A refusal's reason, in hbm_last_error, names the variable. */
hbm_status hbm__oom_dump_from_env(hbm_allocator *a);
/* At destroy: no more dumps, the state freed. */
void hbm__oom_dump_free(hbm_allocator *a);
/* The folder bound's arithmetic (tests reach it: no file system here takes files of 2^63 bytes in every CI): a sum
 * of file sizes that saturates, and whether have + len passes max, neither wrapping. */
uint64_t hbm__oom_dump_add(uint64_t sum, uint64_t size);
bool hbm__oom_dump_over(uint64_t have, uint64_t len, uint64_t max);

#endif
