/*
 * lifetime_sweep.h: offsets for one step's known lifetimes in O(n log n) (lifetime_sweep.c), the planner the step
 * plan can always afford (step_plan.c, plan_offsets). hbm_plan_lifetimes (lifetime_planner.c) searches harder and
 * costs O(n^2) per evaluation: right for `hbmalloc plan` offline, bounded in the step plan, where the plan is made
 * in the training thread under the allocator's lock (issue #38 item 6).
 */
#ifndef HBM_POLICY_LIFETIME_SWEEP_H
#define HBM_POLICY_LIFETIME_SWEEP_H

#include "hbmalloc.h"

/* Places the m buffers of one cyclic step of `period` allocations (b[i].start < b[i].end <= period; a wrapped one,
 * wrap > 0, also lives over [0, wrap), wrap <= start) so that no two live at the same time overlap: b[i].offset.
 * *height: the region they need. HBM_ERR_INVALID: a lifetime out of those bounds, or sizes summing past 2^62;
 * HBM_ERR_NOMEM: out of host memory. After an error the offsets mean nothing. */
hbm_status hbm__plan_sweep(hbm_lifetime *b, size_t m, uint32_t period, uint64_t *height);

/* The search's greedy placement in size order, largest first (lifetime_planner.c; the best of its eight orders on
 * 14 of the 18 shared traces, within 0.7% of it on the others), first fit and then best fit, each evaluation only if the
 * pair tests so far stay within `pairs` (one evaluation tests at most n^2 / 2): b[i].offset and *height for the
 * lower. None within the budget (or n < 2): *height UINT64_MAX and b untouched. HBM_ERR_NOMEM: out of host memory.
 * The lifetimes must be valid (hbm__plan_sweep's bounds). */
hbm_status hbm__plan_by_size(hbm_lifetime *b, size_t n, uint64_t pairs, uint64_t *height);

#endif
