/*
 * arena.h: the region's sizing and making for every policy that has one (arena.c), the arena policy (hbm_arena_mb),
 * and what the plan file and the step plan share with it (their state begins with an hbm__region_policy).
 */
#ifndef HBM_POLICY_ARENA_H
#define HBM_POLICY_ARENA_H

#include "policy/plan.h"

/* Reserves the region for `stream` at the first allocation that wants it (at least the plan's height); when it
 * cannot, says why in hbm_warning and gives up (the allocations use segments). */
void hbm__region_make(hbm_allocator *a, hbm_stream stream);
/* The arena's serve: the region made when wanted, then its best fit for its stream's requests. */
hbm__block *hbm__arena_serve(hbm_allocator *a, hbm_stream stream, size_t size, uint64_t *note);
/* A policy with a region, of `size` bytes (its own struct, beginning with an hbm__region_policy), made and set as
 * a->pol; NULL out of host memory. */
hbm__region_policy *hbm__region_policy_new(hbm_allocator *a, const hbm__policy_ops *ops, size_t size);
/* The interface's stats, validate and teardown of a policy with a region and a plan. */
void hbm__region_policy_stats(hbm_allocator *a, hbm_stats *st, size_t *positions);
void hbm__region_policy_validate(hbm_allocator *a, void (*fail)(void *ck, const char *what), void *ck);
void hbm__region_policy_teardown(hbm_allocator *a);
/* The policies' rows (registry.c): made at create; HBM_OK, or the error with its message in err. */
hbm_status hbm__arena_policy_create(hbm_allocator *a, char *err, size_t errlen);
hbm_status hbm__plan_file_policy_create(hbm_allocator *a, char *err, size_t errlen);
hbm_status hbm__step_plan_policy_create(hbm_allocator *a, char *err, size_t errlen);

#endif
