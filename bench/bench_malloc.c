/*
 * bench_malloc.c: hbmalloc's host-side cost against glibc malloc/free on the
 * same size sequence, in the same process, runs interleaved; medians of
 * REPS runs and their ratio.
 *   1. the cache-hit pair: malloc + free of one size, over and over;
 *   2. mixed workloads: the alloc/free sequence of real traces.
 * hbmalloc runs on the simulated device in address-only mode, so only the
 * allocator's bookkeeping is timed, as glibc's is (neither touches the memory).
 *
 * usage: bench_malloc [TRACE...]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbmalloc.h"
#include "trace/trace.h"
#include "bench_util.h"

#define REPS 15

static double now_ns(void) { return bench_now_s() * 1e9; }

static volatile uintptr_t sink;

static hbm_allocator *open_with(const char *settings)
{
    hbm_allocator *a;
    char err[256];
    if (hbm_open(&a, "sim:capacity=1TiB", 0, settings, err, sizeof err) != HBM_OK) {
        fprintf(stderr, "bench: %s\n", err);
        exit(1);
    }
    return a;
}

static hbm_allocator *open_or_die(void) { return open_with(""); }

/* ns per malloc+free pair */
static double pair_hbm(hbm_allocator *a, size_t size, long n)
{
    void *p;
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        hbm_malloc(a, size, 0, &p);
        sink += (uintptr_t)p;
        hbm_free(a, p);
    }
    return (now_ns() - t0) / (double)n;
}

static double pair_glibc(size_t size, long n)
{
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        void *p = malloc(size);
        sink += (uintptr_t)p;
        free(p);
    }
    return (now_ns() - t0) / (double)n;
}

/* The floor of a design with one pthread mutex per call (the foundation's, until issue #38 gave the allocator an
 * inline lock of its own, src/util/lock.h, whose uncontended take and give are one atomic instruction each):
 * ns for the two uncontended lock/unlock round trips that one malloc + one free took, and nothing else. */
static double pair_locks(long n)
{
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    double t0 = now_ns();
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&m);
        sink += 1;
        pthread_mutex_unlock(&m);
        pthread_mutex_lock(&m);
        sink += 2;
        pthread_mutex_unlock(&m);
    }
    return (now_ns() - t0) / (double)n;
}

static void bench_pairs(void)
{
    static const size_t sizes[] = {512, 64 << 10, 1 << 20, 16 << 20};
    const long n = 200000;
    hbm_allocator *a = open_or_die();
    /* The same with its statistics published for hbmalloc top (a record, a refresher thread): interleaved, so
     * the ratio to the plain allocator shows what publishing costs a cache hit. */
    hbm_allocator *pub = open_with("hbm_publish:True");
    printf("cache-hit malloc+free pair (ns per pair, median of %d runs of %ld pairs)\n", REPS, n);
    printf("  %-10s %10s %10s %8s %10s %8s\n", "size", "hbmalloc", "glibc", "ratio", "published", "/hbmalloc");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        double h[REPS], g[REPS], q[REPS];
        pair_hbm(a, sizes[k], n / 10); /* warm: the first call reserves the segment */
        pair_hbm(pub, sizes[k], n / 10);
        pair_glibc(sizes[k], n / 10);
        for (int r = 0; r < REPS; r++) {
            h[r] = pair_hbm(a, sizes[k], n);
            g[r] = pair_glibc(sizes[k], n);
            q[r] = pair_hbm(pub, sizes[k], n);
        }
        double mh = bench_median(h, REPS), mg = bench_median(g, REPS), mq = bench_median(q, REPS);
        printf("  %-10zu %10.1f %10.1f %8.2f %10.1f %8.3f\n", sizes[k], mh, mg, mh / mg, mq, mq / mh);
    }
    hbm_destroy(pub);
    hbm_destroy(a);
    /* Interleaved with glibc's 512-byte pair, as above. */
    double l[REPS], g[REPS];
    for (int r = 0; r < REPS; r++) {
        l[r] = pair_locks(n);
        g[r] = pair_glibc(512, n);
    }
    double ml = bench_median(l, REPS), mg = bench_median(g, REPS);
    printf("  %-10s %10.1f %10.1f %8.2f   <- two uncontended pthread mutex lock/unlock pairs alone: the floor of\n"
           "  %-10s %10s %10s %8s      one pthread mutex per call (glibc's 512-byte pair takes no lock: tcache)\n",
           "lock floor", ml, mg, ml / mg, "", "", "", "");
}

/* ns for the whole trace */
static double trace_hbm(const trace *t, void **slot)
{
    hbm_allocator *a = open_or_die();
    double t0 = now_ns();
    bench_replay(a, t, slot, 0);
    double dt = now_ns() - t0;
    hbm_destroy(a); /* teardown is not timed; glibc's leftovers are freed untimed too */
    return dt;
}

static double trace_glibc(const trace *t, void **slot)
{
    memset(slot, 0, t->nslots * sizeof *slot);
    double t0 = now_ns();
    for (size_t i = 0; i < t->n; i++) {
        const trace_event *e = &t->ev[i];
        if (e->kind == EV_ALLOC)
            slot[e->slot] = malloc((size_t)e->size);
        else if (e->kind == EV_FREE)
            free(slot[e->slot]);
    }
    double dt = now_ns() - t0;
    for (size_t i = 0; i < t->n; i++) /* free what the trace leaves live */
        if (t->ev[i].kind == EV_FREE)
            slot[t->ev[i].slot] = NULL;
    for (size_t s = 0; s < t->nslots; s++)
        free(slot[s]);
    return dt;
}

static void bench_trace(const char *path)
{
    trace t;
    char err[512];
    if (trace_read_text(path, &t, err, sizeof err)) {
        fprintf(stderr, "bench: %s\n", err);
        exit(1);
    }
    void **slot = calloc(t.nslots + 1, sizeof *slot);
    double h[REPS], g[REPS];
    for (int r = 0; r < REPS; r++) {
        h[r] = trace_hbm(&t, slot);
        g[r] = trace_glibc(&t, slot);
    }
    double mh = bench_median(h, REPS), mg = bench_median(g, REPS);
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    printf("  %-40s %8zu %10.1f %10.1f %8.2f %8.1f\n", base, t.n, mh / (double)t.n, mg / (double)t.n, mh / mg,
           (double)t.n / mh * 1e3);
    free(slot);
    trace_free(&t);
}

/* ---- threads: throughput of one allocator shared by 1 and 2 threads ---- */

typedef struct tharg {
    hbm_allocator *a;
    long ops;
    unsigned seed;
} tharg;

static void *thread_loop(void *arg)
{
    tharg *t = arg;
    void *live[64] = {0};
    unsigned s = t->seed;
    for (long i = 0; i < t->ops; i++) {
        s = s * 1103515245u + 12345u;
        int k = (int)((s >> 16) % 64);
        if (live[k]) {
            hbm_free(t->a, live[k]);
            live[k] = NULL;
        } else {
            hbm_malloc(t->a, 512 + (size_t)((s >> 8) % 4096) * 512, 0, &live[k]);
        }
    }
    for (int k = 0; k < 64; k++)
        hbm_free(t->a, live[k]);
    return NULL;
}

/* Million operations per second with n threads. */
static double threads_mops(int n, long ops)
{
    hbm_allocator *a = open_or_die();
    pthread_t th[2];
    tharg t[2];
    double t0 = now_ns();
    for (int i = 0; i < n; i++) {
        t[i] = (tharg){a, ops, 17u * (unsigned)(i + 1)};
        pthread_create(&th[i], NULL, thread_loop, &t[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(th[i], NULL);
    double dt = now_ns() - t0;
    hbm_destroy(a);
    return (double)n * (double)ops / dt * 1e3;
}

static void bench_threads(void)
{
    const long ops = 300000;
    double one[REPS], two[REPS];
    for (int r = 0; r < REPS; r++) {
        one[r] = threads_mops(1, ops);
        two[r] = threads_mops(2, ops);
    }
    double m1 = bench_median(one, REPS), m2 = bench_median(two, REPS);
    printf("\nthreads sharing one allocator (malloc/free of 512 B - 2 MiB, M ops/s, median of %d)\n", REPS);
    printf("  1 thread %8.2f   2 threads %8.2f   ratio %.2f\n", m1, m2, m2 / m1);
}

int main(int argc, char **argv)
{
    printf("hbmalloc %s bench (medians of %d interleaved runs; ratio = hbmalloc / glibc)\n\n", HBM_VERSION_STRING,
           REPS);
    bench_pairs();
    bench_threads();
    if (argc > 1) {
        printf("\nmixed workloads from real traces (ns per event)\n");
        printf("  %-40s %8s %10s %10s %8s %8s\n", "trace", "events", "hbmalloc", "glibc", "ratio", "Mev/s");
        for (int i = 1; i < argc; i++)
            bench_trace(argv[i]);
    }
    return 0;
}
