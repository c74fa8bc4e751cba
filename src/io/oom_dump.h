/* oom_dump.h: snapshots at an OOM (oom_dump.c), as hbm_create and hbm_destroy reach them. */
#ifndef HBM_IO_OOM_DUMP_H
#define HBM_IO_OOM_DUMP_H

#include "core/types.h"

/* hbm_oom_dump(a, $HBMALLOC_OOM_DUMP_DIR, -1, -1) when the variable is set and not empty; HBM_OK when it is not.
 * A refusal's reason, in hbm_last_error, names the variable. */
hbm_status hbm__oom_dump_from_env(hbm_allocator *a);
/* At destroy: no more dumps, the state freed. */
void hbm__oom_dump_free(hbm_allocator *a);

#endif
