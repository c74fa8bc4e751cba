/* segments.h: the segment index (segments.c): every segment of an allocator by address. */
#ifndef HBM_CORE_SEGMENTS_H
#define HBM_CORE_SEGMENTS_H

#include "core/types.h"

void hbm__segments_insert(hbm_allocator *a, hbm__segment *s);
void hbm__segments_remove(hbm_allocator *a, hbm__segment *s);
/* The segment whose range holds addr, or NULL. */
hbm__segment *hbm__segment_find(hbm_allocator *a, uintptr_t addr);
hbm__segment *hbm__segments_first(hbm_allocator *a);
hbm__segment *hbm__segments_last(hbm_allocator *a);
hbm__segment *hbm__segments_next(const hbm__segment *s);
/* The largest block of a pool's free tree, and of the default pools and the region (0: none). */
size_t hbm__pool_largest(hbm__pool *p);
size_t hbm__largest_free(hbm_allocator *a);

#endif
