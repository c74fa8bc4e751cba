/*
 * u64map.h: a map from 64-bit keys read from files (ids, addresses) to 64-bit
 * values. Open addressing with linear probing and backward-shift deletion, a
 * used flag per cell (every 64-bit key is valid, 0 and UINT64_MAX included: no
 * sentinel a file can name) and splitmix64's finalizer as the hash, so keys
 * that differ only in high bits (addresses, multiples of 2^47) spread like any
 * others: O(1) expected per operation whatever keys a hostile file chooses.
 */
#ifndef HBM_TOOLS_U64MAP_H
#define HBM_TOOLS_U64MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct u64map {
    uint64_t *keys, *vals;
    uint8_t *used;
    size_t mask, n;
    size_t probes; /* cells looked at, for resource tests */
} u64map;

int u64map_init(u64map *m); /* 0, or -1 when host memory ran out */
void u64map_free(u64map *m);
/* The cell of key, or the free cell where it would go: m->used[i] says which. */
size_t u64map_find(u64map *m, uint64_t key);
/* Sets key's value (the cell from u64map_find, which must be free). 0, or -1 when growth ran out of memory. */
int u64map_put_at(u64map *m, size_t i, uint64_t key, uint64_t val);
void u64map_del_at(u64map *m, size_t i);

#endif
