/*
 * ptrmap.h: the live blocks by address: a keyset (util/keyset.h) of blocks keyed by their `addr`, one pointer a
 * cell. Address 0 is never stored (no backend hands it out). Instantiated in core/types.h, after the block.
 */
#ifndef HBM_PTRMAP_H
#define HBM_PTRMAP_H

#include <stdint.h>

#include "util/keyset.h"

/* Block addresses are multiples of 512: drop those bits, then mix (Fibonacci hashing). */
#define HBM__PTRMAP_HASH(key) (((uint64_t)((key) >> 9) * 0x9E3779B97F4A7C15ull) >> 20)
/* 32 KiB, room for 2048 live blocks before the first growth. */
#define HBM__PTRMAP_MIN 4096

#endif
