/* step_plan.h: the hbm_step_plan policy (step_plan.c). */
#ifndef HBM_POLICY_STEP_PLAN_H
#define HBM_POLICY_STEP_PLAN_H

#include "core/types.h"

hbm_status hbm__stepplan_init(hbm_allocator *a);
void hbm__stepplan_free(hbm_allocator *a);
/* engine_malloc, when the step plan is on: records the request (*tag, for hbm__step_allocated; 0 when not
 * recorded) and returns the planned arena block for it, or NULL for the caching policy's path. */
hbm__block *hbm__step_block(hbm_allocator *a, hbm_stream stream, size_t size, uint64_t *tag);
/* After engine_malloc allocated b for a recorded request: marks b so that its free is recorded. */
static inline void hbm__step_allocated(hbm__block *b, uint64_t tag)
{
    b->rec_step = (uint32_t)(tag >> 32);
    b->rec_k = (uint32_t)tag;
}
/* hbm_free of a recorded block (b->rec_step != 0). */
void hbm__step_freed(hbm_allocator *a, hbm__block *b);

#endif
