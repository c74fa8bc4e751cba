/*
 * u64map.h: a map from 64-bit keys read from files (ids, addresses) to 64-bit values: the one hash map
 * (util/hashmap.h) with a used byte per cell (every 64-bit key is valid, 0 and UINT64_MAX included: no sentinel a
 * file can name) and splitmix64's finalizer as the hash, so keys that differ only in high bits (addresses,
 * multiples of 2^47) spread like any others: O(1) expected per operation whatever keys a hostile file chooses.
 * Cells looked at are counted (probes), for resource tests.
 */
#ifndef HBM_TOOLS_U64MAP_H
#define HBM_TOOLS_U64MAP_H

#include "util.h"

#define U64MAP_HASH(m, key) hbm__mix64(key)
HBM__HASHMAP(u64map, uint64_t, uint64_t, U64MAP_HASH, 1, 1, 1024)

#endif
