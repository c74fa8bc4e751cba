/* mempools.h: private pools and the routing of requests to them (mempools.c). */
#ifndef HBM_CORE_MEMPOOLS_H
#define HBM_CORE_MEMPOOLS_H

#include "core/types.h"

/* The pool a request of `size` (rounded) on `stream` goes to. */
hbm__pool *hbm__route_pool(hbm_allocator *a, size_t size, hbm_stream stream);
/* empty_cache for released private pools; deletes those left with no segment. */
hbm_status hbm__release_mempools(hbm_allocator *a);
/* The pool with id, or NULL. */
hbm__mempool *hbm__mempool_find(hbm_allocator *a, hbm_mempool id);
/* Every private pool and route freed (hbm_destroy, after the segments). */
void hbm__mempools_teardown(hbm_allocator *a);

#endif
