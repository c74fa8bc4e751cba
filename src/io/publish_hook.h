/* publish_hook.h: the published record follows the allocator (publish.c), called by the engine at segment changes. */
#ifndef HBM_IO_PUBLISH_HOOK_H
#define HBM_IO_PUBLISH_HOOK_H

#include "core/types.h"

void hbm__publish_update(hbm_allocator *a); /* the lock is held */
/* At a segment change or an OOM: the record, if any, follows (a device call was just made: the copy is free). */
static inline void hbm__published(hbm_allocator *a)
{
    if (__builtin_expect(a->pub != NULL, 0))
        hbm__publish_update(a);
}

#endif
