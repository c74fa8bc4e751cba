/*
 * bench_pair.c: the locked cache-hit malloc+free pair, counted by callgrind: an allocator shared by threads (its lock
 * taken on every call), a 512-byte block allocated and freed once to warm the cache, then PAIRS more pairs with
 * instrumentation on. The public API only, so that any version of the library links it (bench/instr_against.sh
 * builds it against an older one's).
 *
 * usage: valgrind --tool=callgrind --instr-atstart=no bench_pair [SIZE]   (instructions / pairs: one pair's cost)
 */
#include <stdio.h>
#include <stdlib.h>
#include <valgrind/callgrind.h>

#include "hbmalloc.h"

#define PAIRS 100000

int main(int argc, char **argv)
{
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 10) : 512;
    hbm_allocator *a;
    char err[512];
    void *p;
    if (hbm_open(&a, "sim:capacity=1GiB", 0, "", err, sizeof err) != HBM_OK) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (hbm_malloc(a, size, 0, &p) != HBM_OK || hbm_free(a, p) != HBM_OK) /* the segment cached */
        return 2;
    CALLGRIND_START_INSTRUMENTATION;
    for (int i = 0; i < PAIRS; i++) {
        hbm_malloc(a, size, 0, &p);
        hbm_free(a, p);
    }
    CALLGRIND_STOP_INSTRUMENTATION;
    printf("pairs %d\n", PAIRS);
    hbm_destroy(a);
    return 0;
}
