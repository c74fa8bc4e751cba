/*
 * bench_sleep.c: what the sleeping pools' bookkeeping costs as pools and backup runs grow (issue #37 items 8, 9),
 * on the simulated device, through the public API. Wall time, median of 3.
 *
 *   bench_sleep record POOLS ALLOCS  POOLS tagged pools, each with a block, three in four asleep, publishing on
 *                                    (its record is rewritten at every new segment): ALLOCS allocations that each
 *                                    map new pages, timed
 *   bench_sleep runs RUNS            one tagged pool with backup holding RUNS live blocks apart (RUNS backup runs):
 *                                    its sleep and its wake, timed
 *   bench_sleep checksum MIB         a backup pool of MIB MiB on the host-backed sim: its sleep and wake with and
 *                                    without hbm_sleep_opts.checksum (what the opt-in read of the backup costs)
 *   bench_sleep file MIB [DIR]       the same pool backed up to pinned memory and to a file in DIR (default: the
 *                                    temporary folder, on /tmp): sleep and wake times, pinned host memory held
 *
 * The records go to a temporary folder (HBMALLOC_TOP_DIR), removed at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "hbmalloc.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static hbm_allocator *open_sim(const char *spec)
{
    hbm_allocator *a;
    char err[512];
    if (hbm_open(&a, spec, 0, "expandable_segments:True", err, sizeof err) != HBM_OK) {
        fprintf(stderr, "bench_sleep: %s\n", err);
        exit(2);
    }
    return a;
}

static void check(hbm_allocator *a, hbm_status rc, const char *what)
{
    if (rc != HBM_OK) {
        fprintf(stderr, "bench_sleep: %s: %s\n", what, hbm_last_error(a));
        exit(2);
    }
}

static double record(int pools, int allocs)
{
    hbm_allocator *a = open_sim("sim:capacity=3GiB"); /* each pool reserves address space of the capacity */
    for (int i = 0; i < pools; i++) {
        hbm_mempool id;
        char tag[32];
        void *p;
        snprintf(tag, sizeof tag, "t%d", i % 50);
        check(a, hbm_mempool_create(a, &id), "create");
        check(a, hbm_pool_tag(a, id, tag, 0), "tag");
        check(a, hbm_mempool_malloc(a, id, 512 << 10, 0, &p), "pool malloc");
        if (i % 4)
            check(a, hbm_pool_sleep(a, id, NULL), "sleep");
    }
    check(a, hbm_publish(a, 1), "publish");
    void **p = calloc((size_t)allocs, sizeof *p);
    double t0 = now();
    for (int i = 0; i < allocs; i++) /* each maps new pages: the record is rewritten */
        check(a, hbm_malloc(a, (size_t)2 << 20, 0, &p[i]), "malloc");
    double t = now() - t0;
    free(p);
    hbm_destroy(a);
    return t;
}

static void runs(int n, double *sleep_s, double *wake_s)
{
    hbm_allocator *a = open_sim("sim:capacity=512GiB");
    hbm_mempool id;
    check(a, hbm_mempool_create(a, &id), "create");
    check(a, hbm_pool_tag(a, id, "weights", 1), "tag");
    void **p = calloc(2 * (size_t)n, sizeof *p);
    for (int i = 0; i < 2 * n; i++) /* 2 MiB blocks from one growing segment; every other one freed: n runs */
        check(a, hbm_mempool_malloc(a, id, 2 << 20, 0, &p[i]), "pool malloc");
    for (int i = 1; i < 2 * n; i += 2)
        check(a, hbm_free(a, p[i]), "free");
    double t0 = now();
    check(a, hbm_pool_sleep(a, id, NULL), "sleep");
    double t1 = now();
    check(a, hbm_pool_wake(a, id, NULL), "wake");
    *sleep_s = t1 - t0;
    *wake_s = now() - t1;
    free(p);
    hbm_destroy(a);
}

/* A backup pool of mib MiB on the host-backed sim (the bytes move): sleep + wake with the checksum on or not, to
 * pinned memory or to a file in dir; *pinned: the pinned host memory the pool held while asleep. */
static void cycle(int mib, int on, const char *dir, double *sleep_s, double *wake_s, uint64_t *pinned)
{
    hbm_allocator *a = open_sim("sim:capacity=8GiB,memory=host,vmm=on");
    hbm_mempool id;
    void *p;
    check(a, hbm_mempool_create(a, &id), "create");
    check(a, hbm_pool_tag(a, id, "weights", 1), "tag");
    check(a, hbm_mempool_malloc(a, id, (size_t)mib << 20, 0, &p), "pool malloc");
    memset(p, 7, (size_t)mib << 20);
    hbm_sleep_opts o = {.checksum = on, .backup_dir = dir};
    check(a, hbm_pool_sleep(a, id, &o), "sleep"); /* the pinned buffers made once, as in a job's later cycles */
    check(a, hbm_pool_wake(a, id, NULL), "wake");
    double t0 = now();
    check(a, hbm_pool_sleep(a, id, &o), "sleep");
    double t1 = now();
    hbm_pool_info info;
    check(a, hbm_pool_info_get(a, id, &info), "info");
    *pinned = info.host_bytes;
    check(a, hbm_pool_wake(a, id, NULL), "wake");
    *sleep_s = t1 - t0;
    *wake_s = now() - t1;
    hbm_free(a, p);
    hbm_destroy(a);
}

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/bench_sleep.XXXXXX";
    if (!mkdtemp(dir) || setenv("HBMALLOC_TOP_DIR", dir, 1)) {
        perror("bench_sleep: a temporary folder");
        return 2;
    }
    double t[2][3];
    uint64_t pinned[2];
    int rc = 0;
    if (argc == 4 && !strcmp(argv[1], "record")) {
        for (int r = 0; r < 3; r++)
            t[0][r] = record(atoi(argv[2]), atoi(argv[3]));
        qsort(t[0], 3, sizeof t[0][0], cmp);
        printf("record: %s pools (3 in 4 asleep, 50 tags), %s allocations mapping new pages: %.3f s\n", argv[2],
               argv[3], t[0][1]);
    } else if (argc == 3 && !strcmp(argv[1], "runs")) {
        for (int r = 0; r < 3; r++)
            runs(atoi(argv[2]), &t[0][r], &t[1][r]);
        qsort(t[0], 3, sizeof t[0][0], cmp);
        qsort(t[1], 3, sizeof t[1][0], cmp);
        printf("runs: %s backup runs: sleep %.3f s, wake %.3f s\n", argv[2], t[0][1], t[1][1]);
    } else if (argc == 3 && !strcmp(argv[1], "checksum")) {
        double c[2][3];
        for (int r = 0; r < 3; r++) {
            cycle(atoi(argv[2]), 0, NULL, &t[0][r], &t[1][r], &pinned[0]);
            cycle(atoi(argv[2]), 1, NULL, &c[0][r], &c[1][r], &pinned[1]);
        }
        for (int k = 0; k < 2; k++) {
            qsort(t[k], 3, sizeof t[k][0], cmp);
            qsort(c[k], 3, sizeof c[k][0], cmp);
        }
        printf("checksum: %s MiB backup pool (host-backed sim: memcpy copies): sleep %.3f s -> %.3f s, wake %.3f s -> "
               "%.3f s with the checksum\n",
               argv[2], t[0][1], c[0][1], t[1][1], c[1][1]);
    } else if ((argc == 3 || argc == 4) && !strcmp(argv[1], "file")) {
        double c[2][3];
        for (int r = 0; r < 3; r++) {
            cycle(atoi(argv[2]), 0, NULL, &t[0][r], &t[1][r], &pinned[0]);
            cycle(atoi(argv[2]), 0, argc == 4 ? argv[3] : dir, &c[0][r], &c[1][r], &pinned[1]);
        }
        for (int k = 0; k < 2; k++) {
            qsort(t[k], 3, sizeof t[k][0], cmp);
            qsort(c[k], 3, sizeof c[k][0], cmp);
        }
        printf("file: %s MiB backup pool (host-backed sim), pinned memory -> a file in %s: sleep %.3f s -> %.3f s, "
               "wake %.3f s -> %.3f s, pinned host memory held %.0f MiB -> %.0f MiB\n",
               argv[2], argc == 4 ? argv[3] : dir, t[0][1], c[0][1], t[1][1], c[1][1], pinned[0] / 1048576.0,
               pinned[1] / 1048576.0);
    } else {
        fprintf(stderr, "usage: bench_sleep record POOLS ALLOCS | bench_sleep runs RUNS | bench_sleep checksum MIB | "
                        "bench_sleep file MIB [DIR]\n");
        rc = 2;
    }
    rmdir(dir);
    return rc;
}
