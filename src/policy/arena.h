/* arena.h: the hbm_arena policy and the plan file served from it (arena.c). */
#ifndef HBM_POLICY_ARENA_H
#define HBM_POLICY_ARENA_H

#include "core/types.h"

/* Plan neighbours (arena.c) for plan_off/plan_size and these lifetimes: 0, or -1 out of host memory. */
int hbm__plan_neighbours(hbm_allocator *a, const uint32_t *start, const uint32_t *end);

/* Reserves the arena for `stream` at the first allocation; when it cannot, says why in hbm_warning and gives up. */
void hbm__arena_create(hbm_allocator *a, hbm_stream stream);
/* Frees the plan a->plan_* holds (a plan file's) and zeroes them. */
void hbm__plan_clear(hbm_allocator *a);
/* Reads conf.plan_file (a->lock not needed: at create). HBM_OK, or HBM_ERR_CONF with "FILE:LINE: what" in err. */
hbm_status hbm__plan_load(hbm_allocator *a, char *err, size_t errlen);
/* The free arena block that allocation plan_next's range lies in, cut to begin at that range (a block split off in
 * front when needed), for a rounded request of size; NULL (a miss, counted) when the plan cannot serve it. */
void hbm__plan_hints_free(hbm_allocator *a); /* the region's address index (arena.c) */
hbm__block *hbm__plan_block(hbm_allocator *a, size_t size);
/* The block of the region that planned position k's range begins at (at): after the allocation planned right below
 * it when that one is live (O(1)), else through the region's address index (a hint, then a short walk). */
hbm__block *hbm__region_find(hbm_allocator *a, size_t k, uintptr_t at);

#endif
