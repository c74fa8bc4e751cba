/*
 * ptrmap.h: address -> block map for live blocks: the one hash map (util/hashmap.h) keyed by address. Key 0 marks
 * an empty cell, so address 0 is never stored (no backend hands it out) and the malloc path reads no used array.
 * Must not know what a block is.
 */
#ifndef HBM_PTRMAP_H
#define HBM_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

#include "util/hashmap.h"

/* Block addresses are multiples of 512: drop those bits, then mix (Fibonacci hashing). */
#define HBM__PTRMAP_HASH(m, key) (((uint64_t)((key) >> 9) * 0x9E3779B97F4A7C15ull) >> 20)
/* 64 KiB, room for 2048 live blocks before the first growth. */
HBM__HASHMAP(hbm__ptrmap, uintptr_t, void *, HBM__PTRMAP_HASH, 0, 0, 4096)

#endif
