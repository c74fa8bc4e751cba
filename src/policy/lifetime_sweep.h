/*
 * lifetime_sweep.h: offsets for one step's known lifetimes in O(n log n) (lifetime_sweep.c), the step plan's
 * planner. hbm_plan_lifetimes (lifetime_planner.c) searches harder and costs O(n^2) per evaluation: right for
 * `hbmalloc plan` offline, too slow for a plan made in the training thread under the allocator's lock (issue #38
 * item 6: about 485 million instructions for a step of 1,000 allocations).
 */
#ifndef HBM_POLICY_LIFETIME_SWEEP_H
#define HBM_POLICY_LIFETIME_SWEEP_H

#include "hbmalloc.h"

/* Places the m buffers of one cyclic step of `period` allocations (b[i].start < b[i].end <= period; a wrapped one,
 * wrap > 0, also lives over [0, wrap), wrap <= start) so that no two live at the same time overlap: b[i].offset.
 * *height: the region they need. HBM_ERR_INVALID: a lifetime out of those bounds, or sizes summing past 2^62;
 * HBM_ERR_NOMEM: out of host memory. After an error the offsets mean nothing. */
hbm_status hbm__plan_sweep(hbm_lifetime *b, size_t m, uint32_t period, uint64_t *height);

#endif
