/*
 * bench_blocks.c: host memory per live block (issue #38 item 3). COUNT blocks of SIZE bytes are allocated on the
 * simulated device and kept live; the process's resident set grows by what the allocator keeps for them (block
 * objects, the live map, segments, the simulator's own records): that growth divided by COUNT. The pointers'
 * own array is measured apart and left out. The public API only.
 *
 * usage: bench_blocks [SIZE [COUNT]]   (default 512 bytes, 1000000 blocks); prints "bytes_per_block X"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "hbmalloc.h"

/* Resident bytes of this process (/proc/self/statm's second field, in pages). */
static long resident_bytes(void)
{
    long pages = -1, size;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &size, &pages) != 2)
        pages = -1;
    fclose(f);
    return pages < 0 ? -1 : pages * sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv)
{
    size_t size = argc > 1 ? strtoull(argv[1], NULL, 10) : 512;
    size_t count = argc > 2 ? strtoull(argv[2], NULL, 10) : 1000000;
    char spec[64], err[512];
    hbm_allocator *a;
    /* Room for every block, with the slack the caching policy keeps (large segments round up to 20 MiB). */
    snprintf(spec, sizeof spec, "sim:capacity=%zuGiB", (size_t)((double)size * (double)count * 2 / (1 << 30)) + 4);
    void **p = calloc(count, sizeof *p);
    if (!p || hbm_open(&a, spec, 0, "", err, sizeof err) != HBM_OK) {
        fprintf(stderr, "bench_blocks: %s\n", p ? err : "out of memory");
        return 2;
    }
    memset(p, 1, count * sizeof *p); /* the pointers' pages resident before the first reading */
    long before = resident_bytes();
    for (size_t i = 0; i < count; i++)
        if (hbm_malloc(a, size, 0, &p[i]) != HBM_OK) {
            fprintf(stderr, "bench_blocks: allocation %zu of %zu failed: %s\n", i, count, hbm_last_error(a));
            return 2;
        }
    long after = resident_bytes();
    if (before < 0 || after < 0) {
        fprintf(stderr, "bench_blocks: /proc/self/statm unreadable\n");
        return 2;
    }
    printf("size %zu blocks %zu bytes_per_block %.1f\n", size, count, (double)(after - before) / (double)count);
    for (size_t i = 0; i < count; i++)
        hbm_free(a, p[i]);
    hbm_destroy(a);
    free(p);
    return 0;
}
