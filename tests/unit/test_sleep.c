/* test_sleep.c: pools that sleep and wake (src/core/sleep.c), on the simulated device. Host-backed with virtual memory
 * (memory=host,vmm=on) a page is a memory file mapped at its address: contents, addresses and the device's free
 * memory are real there, and a touch of an unmapped page faults. */
#include "helpers.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <limits.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define HOST_SIM "sim:capacity=512MiB,memory=host,vmm=on"
#define S1 ((hbm_stream)0x51)

static hbm__sim_counters counters(hbm_allocator *a)
{
    hbm__sim_counters c;
    hbm__sim_get_counters(sim_of(a), &c);
    return c;
}

/* The device's free memory, as torch.cuda.mem_get_info() would ask it (the backend's own call). */
static size_t device_free(hbm_allocator *a)
{
    size_t free_b = 0, total = 0;
    assert_int_equal(a->backend->ops->mem_info(a->backend->ctx, 0, &free_b, &total), 0);
    return free_b;
}

static hbm_mempool tagged(hbm_allocator *a, const char *tag, int backup)
{
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    if (hbm_pool_tag(a, mp, tag, backup) != HBM_OK)
        fail_msg("hbm_pool_tag(%s): %s", tag, hbm_last_error(a));
    return mp;
}

static void *in_pool(hbm_allocator *a, hbm_mempool mp, size_t n, hbm_stream s)
{
    void *p = NULL;
    hbm_status rc = hbm_mempool_malloc(a, mp, n, s, &p);
    if (rc != HBM_OK)
        fail_msg("hbm_mempool_malloc(%zu) = %s: %s", n, hbm_status_name(rc), hbm_last_error(a));
    return p;
}

static void fill(void *p, size_t n, unsigned seed)
{
    unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        c[i] = (unsigned char)(i * 131 + seed * 7 + (i >> 12));
}

static int same(const void *p, size_t n, unsigned seed)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < n; i++)
        if (c[i] != (unsigned char)(i * 131 + seed * 7 + (i >> 12)))
            return 0;
    return 1;
}

static void must(hbm_allocator *a, hbm_status rc, const char *what)
{
    if (rc != HBM_OK)
        fail_msg("%s = %s: %s", what, hbm_status_name(rc), hbm_last_error(a));
}

static hbm_pool_info info(hbm_allocator *a, hbm_mempool mp)
{
    hbm_pool_info i;
    assert_int_equal(hbm_pool_info_get(a, mp, &i), HBM_OK);
    return i;
}

#define NB 5
static const size_t sizes[NB] = {4096, 700 * 1024, 3 * MiB + 512, 30 * MiB, 45 * MiB};

/* The first promise: the blocks of a backup pool come back byte for byte, each at its address, and while it
 * sleeps the device has its pages back. */
static void a_backup_pool_wakes_with_its_contents_at_the_same_addresses(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_mempool mp = tagged(a, "weights", 1);
    void *p[NB];
    for (int i = 0; i < NB; i++) {
        p[i] = in_pool(a, mp, sizes[i], 0);
        fill(p[i], sizes[i], (unsigned)i);
    }
    assert_valid(a);
    hbm_stats before = stats_of(a);
    size_t pages = info(a, mp).reserved_bytes, free_before = device_free(a);
    assert_true(pages > 0);
    must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
    assert_valid(a);
    hbm_pool_info i = info(a, mp);
    assert_int_equal(i.state, HBM_POOL_ASLEEP);
    assert_int_equal(i.reserved_bytes, 0);
    assert_int_equal(i.asleep_bytes, pages);
    assert_int_equal(i.backup_bytes, i.live_bytes);
    assert_true(i.host_bytes >= i.backup_bytes);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current,
                     before.reserved_bytes[HBM_POOL_ALL].current - (int64_t)pages);
    assert_int_equal(s.asleep_bytes, pages);
    assert_int_equal(s.asleep_pools, 1);
    assert_int_equal(device_free(a), free_before + pages); /* mem_get_info: the pages are the device's again */
    assert_int_equal(counters(a).mapped_pages, 0);
    must(a, hbm_pool_wake(a, mp, NULL), "wake");
    assert_valid(a);
    for (int i2 = 0; i2 < NB; i2++)
        if (!same(p[i2], sizes[i2], (unsigned)i2))
            fail_msg("block %d (%zu bytes at %p) lost its contents", i2, sizes[i2], p[i2]);
    i = info(a, mp);
    assert_int_equal(i.state, HBM_POOL_AWAKE);
    assert_int_equal(i.reserved_bytes, pages);
    assert_int_equal(i.asleep_bytes, 0);
    assert_int_equal(i.sleeps, 1);
    assert_int_equal(i.wakes, 1);
    assert_int_equal(device_free(a), free_before);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, before.reserved_bytes[HBM_POOL_ALL].current);
    /* The same pointers free as before: nothing moved. */
    for (int k = 0; k < NB; k++)
        assert_int_equal(hbm_block_size(a, p[k]) >= sizes[k], 1);
    /* Twenty more cycles: the same (the pinned buffers are reused: no new host allocation after the first). */
    uint64_t host_calls = 0;
    for (int cycle = 0; cycle < 20; cycle++) {
        hbm_device_counters d0;
        hbm_get_device_counters(a, &d0);
        must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
        must(a, hbm_pool_wake(a, mp, NULL), "wake");
        hbm_device_counters d1;
        hbm_get_device_counters(a, &d1);
        host_calls += d1.host_calls - d0.host_calls;
    }
    assert_int_equal(host_calls, 0);
    for (int k = 0; k < NB; k++)
        assert_true(same(p[k], sizes[k], (unsigned)k));
    assert_valid(a);
    for (int k = 0; k < NB; k++)
        hbm_free(a, p[k]);
    hbm_backend *b = a->backend;
    (void)b;
    hbm_destroy(a);
}

/* Without backup nothing is copied: the pages come back at the same addresses, their contents undefined (the sim's
 * fresh pages are zeroed). Other pools, tagged or not, keep theirs and their pages throughout. */
static void a_discard_pool_wakes_empty_and_other_pools_are_untouched(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "expandable_segments:True");
    hbm_mempool kv = tagged(a, "kv_cache", 0), w = tagged(a, "weights", 1);
    void *k = in_pool(a, kv, 40 * MiB, 0), *x = in_pool(a, w, 10 * MiB, 0), *d = must_malloc(a, 12 * MiB, 0);
    fill(k, 40 * MiB, 1);
    fill(x, 10 * MiB, 2);
    fill(d, 12 * MiB, 3);
    size_t w_pages = info(a, w).reserved_bytes;
    hbm_device_counters d0, d1;
    hbm_get_device_counters(a, &d0);
    must(a, hbm_pool_sleep(a, kv, NULL), "sleep");
    hbm_get_device_counters(a, &d1);
    assert_int_equal(d1.copy_calls - d0.copy_calls, 0);
    assert_int_equal(d1.host_calls - d0.host_calls, 0);
    assert_true(same(x, 10 * MiB, 2) && same(d, 12 * MiB, 3));
    assert_int_equal(info(a, w).reserved_bytes, w_pages);
    assert_int_equal(info(a, w).state, HBM_POOL_AWAKE);
    void *d2 = must_malloc(a, 8 * MiB, 0); /* the default pools serve on */
    must(a, hbm_pool_wake(a, kv, NULL), "wake");
    assert_valid(a);
    assert_false(same(k, 40 * MiB, 1));
    unsigned char *kc = k;
    assert_int_equal(kc[0], 0);
    fill(k, 40 * MiB, 4); /* usable at its address */
    assert_true(same(k, 40 * MiB, 4) && same(x, 10 * MiB, 2) && same(d, 12 * MiB, 3));
    hbm_free(a, d2);
    hbm_free(a, k);
    hbm_free(a, x);
    hbm_free(a, d);
    hbm_destroy(a);
}

/* A sleeping block is memory the device took back: on the host-backed sim a touch faults, as a kernel touching it
 * on a GPU or NPU faults (docs/SLEEP.md says what each device does). */
static void touching_a_sleeping_block_faults(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_mempool mp = tagged(a, "weights", 1);
    volatile unsigned char *p = in_pool(a, mp, MiB, 0);
    p[0] = 1;
    must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        p[0] = 2; /* must fault */
        _exit(0);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_false(WIFEXITED(status) && WEXITSTATUS(status) == 0); /* killed by SIGSEGV (or ASan's report of it) */
    must(a, hbm_pool_wake(a, mp, NULL), "wake");
    assert_int_equal(p[0], 1);
    hbm_free(a, (void *)p);
    hbm_destroy(a);
}

/* While a pool sleeps, what is asked of it is refused with its tag and the way out; what is given back works, and
 * the wake maps only the pages live blocks still cover. */
static void allocations_into_a_sleeping_pool_are_refused_and_frees_work(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_mempool mp = tagged(a, "kv_cache", 1);
    must(a, hbm_mempool_begin_thread(a, mp), "route");
    void *keep = must_malloc(a, 30 * MiB, 0), *drop = must_malloc(a, 40 * MiB, 0),
         *cached = must_malloc(a, 60 * MiB, 0);
    fill(keep, 30 * MiB, 5);
    hbm_free(a, cached); /* cached free pages: given back by the sleep, not mapped again by the wake */
    size_t before = info(a, mp).reserved_bytes;
    must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
    assert_int_equal(info(a, mp).asleep_bytes, before - 60 * MiB);
    void *p = (void *)1;
    assert_int_equal(hbm_malloc(a, 4096, 0, &p), HBM_ERR_ASLEEP);
    assert_null(p);
    assert_non_null(strstr(hbm_last_error(a), "('kv_cache') is asleep"));
    assert_non_null(strstr(hbm_last_error(a), "wake"));
    assert_int_equal(hbm_mempool_malloc(a, mp, 4096, 0, &p), HBM_ERR_ASLEEP);
    assert_int_equal(hbm_free(a, drop), HBM_OK);
    assert_valid(a);
    size_t asleep = info(a, mp).asleep_bytes;
    must(a, hbm_pool_wake(a, mp, NULL), "wake");
    assert_valid(a);
    assert_true(info(a, mp).reserved_bytes < asleep); /* drop's pages were not mapped again */
    assert_true(info(a, mp).reserved_bytes >= 30 * MiB);
    assert_true(same(keep, 30 * MiB, 5));
    void *again = must_malloc(a, 4096, 0); /* awake: served */
    hbm_free(a, again);
    hbm_free(a, keep);
    must(a, hbm_mempool_end(a, mp), "end");
    hbm_destroy(a);
}

/* A block another stream still uses is waited for before its pages go: the sleep synchronizes the streams that use
 * it (the sim's stand-in for the device synchronize a GPU or NPU gets), and a free waiting on an event completes. */
static void sleep_waits_for_streams_still_using_its_blocks(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=4GiB", "");
    void *ctx = sim_of(a);
    hbm_mempool mp = tagged(a, "weights", 0);
    void *live = in_pool(a, mp, 8 * MiB, S1), *freed = in_pool(a, mp, 8 * MiB, S1);
    assert_int_equal(hbm__sim_stream_hold(ctx, 0, 7, 1), 0);
    assert_int_equal(hbm__sim_stream_hold(ctx, 0, S1, 1), 0);
    must(a, hbm_record_stream(a, live, 7), "record");
    must(a, hbm_record_stream(a, freed, 9), "record");
    assert_int_equal(hbm__sim_stream_hold(ctx, 0, 9, 1), 0);
    hbm_free(a, freed); /* an event on stream 9, which is held: pending */
    assert_int_equal(stats_of(a).active[HBM_POOL_ALL].current, 2);
    assert_true(hbm__sim_stream_pending(ctx, 0, 9) > 0);
    hbm_device_counters d0, d1;
    hbm_get_device_counters(a, &d0);
    must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
    hbm_get_device_counters(a, &d1);
    assert_true(d1.sync_calls - d0.sync_calls >= 2);
    assert_int_equal(hbm__sim_stream_pending(ctx, 0, 9), 0);
    assert_int_equal(stats_of(a).active[HBM_POOL_ALL].current, 1); /* the pending free completed */
    assert_valid(a);
    must(a, hbm_pool_wake(a, mp, NULL), "wake");
    hbm_free(a, live);
    hbm_destroy(a);
}

/* The public hold (hbm_sim_hold_stream, as `hbmalloc replay` uses it) on the pool's own stream and on one a block was
 * recorded on, held through a backup sleep and its wake: neither hangs (the sim's wait completes a held stream: the
 * host waits, so the device gets there), the pending free completes, every byte comes back, and the streams are
 * still held after (issue #37 item 11). alarm: a hang fails the test instead of the run. */
static void a_sleep_and_wake_with_streams_held_complete(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_mempool mp = tagged(a, "weights", 1);
    void *p = in_pool(a, mp, 6 * MiB, S1), *freed = in_pool(a, mp, 2 * MiB, S1);
    fill(p, 6 * MiB, 3);
    must(a, hbm_sim_hold_stream(a, S1, 1), "hold");
    must(a, hbm_sim_hold_stream(a, (hbm_stream)9, 1), "hold");
    must(a, hbm_record_stream(a, freed, (hbm_stream)9), "record");
    hbm_free(a, freed); /* pending on held stream 9 */
    assert_int_equal(stats_of(a).active[HBM_POOL_ALL].current, 2);
    alarm(20);
    must(a, hbm_pool_sleep(a, mp, NULL), "sleep with streams held");
    assert_int_equal(stats_of(a).active[HBM_POOL_ALL].current, 1); /* the pending free completed */
    must(a, hbm_pool_wake(a, mp, NULL), "wake with streams held");
    alarm(0);
    assert_true(same(p, 6 * MiB, 3));
    void *q = in_pool(a, mp, MiB, S1); /* work on S1 after the wake still waits for its release */
    must(a, hbm_record_stream(a, q, (hbm_stream)9), "record");
    hbm_free(a, q);
    assert_int_equal(stats_of(a).active[HBM_POOL_ALL].current, 2);
    must(a, hbm_sim_hold_stream(a, (hbm_stream)9, 0), "release");
    must(a, hbm_sim_hold_stream(a, S1, 0), "release");
    hbm_free(a, p);
    assert_valid(a);
    hbm_destroy(a);
}

static int is_stream(void *ctx, hbm_stream s) { return s == *(hbm_stream *)ctx; }

/* A graph's private pool, tagged before its capture (hbmalloc.torch.pool around the capture), sleeps and wakes
 * like any pool: its blocks keep the addresses the graph recorded; a sleep or wake during a capture is refused. */
static void a_graph_pool_sleeps_and_wakes(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_stream s = S1;
    hbm_mempool g = tagged(a, "cuda_graph", 1);
    must(a, hbm_mempool_begin_capture(a, g, is_stream, &s), "capture");
    assert_int_equal(hbm__sim_stream_capture(sim_of(a), 0, s, 1), 0);
    void *in = must_malloc(a, 6 * MiB, s), *out = must_malloc(a, 2 * MiB, s);
    assert_int_equal(hbm_pool_sleep(a, g, NULL), HBM_ERR_CAPTURE);
    assert_non_null(strstr(hbm_last_error(a), "capture"));
    assert_int_equal(hbm__sim_stream_capture(sim_of(a), 0, s, 0), 0);
    must(a, hbm_mempool_end(a, g), "end");
    fill(in, 6 * MiB, 8);
    fill(out, 2 * MiB, 9);
    assert_int_equal(counters(a).capture_violations, 0);
    must(a, hbm_pool_sleep(a, g, NULL), "sleep");
    must(a, hbm_pool_wake(a, g, NULL), "wake");
    assert_true(same(in, 6 * MiB, 8) && same(out, 2 * MiB, 9)); /* the replay reads its static buffers intact */
    /* Captured into again, awake. */
    must(a, hbm_mempool_begin_capture(a, g, is_stream, &s), "capture");
    assert_int_equal(hbm__sim_stream_capture(sim_of(a), 0, s, 1), 0);
    assert_int_equal(hbm_pool_wake(a, g, NULL), HBM_OK); /* awake: nothing to do, even in a capture */
    void *more = must_malloc(a, MiB, s);
    assert_int_equal(hbm__sim_stream_capture(sim_of(a), 0, s, 0), 0);
    must(a, hbm_mempool_end(a, g), "end");
    assert_int_equal(counters(a).capture_violations, 0);
    assert_valid(a);
    hbm_free(a, more);
    hbm_free(a, in);
    hbm_free(a, out);
    hbm_destroy(a);
}

/* The device is full when the wake comes (the other phase holds it): a clear error with the figures, nothing lost,
 * still asleep; once there is room, the wake works and the contents are there. */
static void a_wake_that_finds_the_device_full_keeps_the_pool_asleep(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=256MiB,memory=host,vmm=on", "");
    hbm_mempool mp = tagged(a, "weights", 1);
    void *p = in_pool(a, mp, 100 * MiB, 0);
    fill(p, 100 * MiB, 3);
    must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
    void *other = must_malloc(a, 200 * MiB, 0); /* the other phase */
    hbm__sim_counters c0 = counters(a);
    hbm_pool_info i0 = info(a, mp);
    assert_int_equal(hbm_pool_wake(a, mp, NULL), HBM_ERR_OOM);
    assert_non_null(strstr(hbm_last_error(a), "stays asleep"));
    assert_non_null(strstr(hbm_last_error(a), "free"));
    assert_valid(a);
    hbm_pool_info i1 = info(a, mp);
    assert_int_equal(i1.state, HBM_POOL_ASLEEP);
    assert_int_equal(i1.asleep_bytes, i0.asleep_bytes);
    assert_int_equal(i1.backup_bytes, i0.backup_bytes);
    hbm__sim_counters c1 = counters(a);
    assert_int_equal(c1.live_handles, c0.live_handles);
    assert_int_equal(c1.mapped_pages, c0.mapped_pages);
    hbm_free(a, other);
    must(a, hbm_pool_wake(a, mp, NULL), "wake"); /* the cached 200 MiB goes back first */
    assert_true(same(p, 100 * MiB, 3));
    assert_valid(a);
    hbm_free(a, p);
    hbm_destroy(a);
}

/* The device refuses a map in the middle of a wake, then a copy back: each time the pool stays asleep with its
 * backup, what the wake had mapped is given back, and a later wake brings everything back. */
static void a_wake_the_device_refuses_can_be_tried_again(void **st)
{
    (void)st;
    /* The one run of three pages: its second create or map, its one access, the second copy (one per block). */
    static const int kinds[] = {HBM__OP_MAP, HBM__OP_CREATE, HBM__OP_ACCESS, HBM__OP_COPY_H2D};
    static const uint64_t nth[] = {2, 2, 1, 2};
    for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++) {
        hbm_allocator *a = open_sim(HOST_SIM, "");
        hbm_mempool mp = tagged(a, "weights", 1);
        void *p = in_pool(a, mp, 30 * MiB, 0), *q = in_pool(a, mp, 30 * MiB, 0);
        fill(p, 30 * MiB, 1);
        fill(q, 30 * MiB, 2);
        must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
        hbm__sim_counters c0 = counters(a);
        hbm__sim_fault f = {
            .kind = kinds[k], .nth = nth[k], .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
        assert_int_equal(hbm__sim_add_fault(sim_of(a), &f), 0);
        hbm_status rc = hbm_pool_wake(a, mp, NULL);
        if (rc != HBM_ERR_BACKEND)
            fail_msg("fault in op %d: wake = %s: %s", kinds[k], hbm_status_name(rc), hbm_last_error(a));
        assert_non_null(strstr(hbm_last_error(a), "stays asleep"));
        assert_non_null(strstr(hbm_last_error(a), "injected"));
        assert_valid(a);
        assert_int_equal(info(a, mp).state, HBM_POOL_ASLEEP);
        hbm__sim_counters c1 = counters(a);
        assert_int_equal(c1.mapped_pages, c0.mapped_pages);
        assert_int_equal(c1.live_handles, c0.live_handles);
        hbm__sim_clear_faults(sim_of(a));
        must(a, hbm_pool_wake(a, mp, NULL), "wake");
        assert_true(same(p, 30 * MiB, 1) && same(q, 30 * MiB, 2));
        assert_valid(a);
        hbm_free(a, p);
        hbm_free(a, q);
        hbm_backend *b = NULL;
        (void)b;
        hbm_destroy(a);
    }
}

/* The device refuses an unmap half-way through a sleep: the pool is asleep with what was given back, the message
 * says what is still held, a second sleep gives it back, and the wake restores everything. A refusal before any
 * page went (the backup's host memory runs out, the first unmap) leaves it awake and whole. */
static void a_sleep_the_device_refuses_loses_nothing(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_mempool mp = tagged(a, "weights", 1);
    void *p = in_pool(a, mp, 30 * MiB, 0), *q = in_pool(a, mp, 100 * MiB, 0);
    fill(p, 30 * MiB, 1);
    fill(q, 100 * MiB, 2);
    /* Host memory for the backup runs out: awake, nothing given back. */
    hbm__sim_fault host = {
        .kind = HBM__OP_HOST_ALLOC, .nth = 2, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_HOST};
    assert_int_equal(hbm__sim_add_fault(sim_of(a), &host), 0);
    hbm_sleep_opts o = {.chunk_bytes = 32 * MiB};
    size_t pages = info(a, mp).reserved_bytes;
    assert_int_equal(hbm_pool_sleep(a, mp, &o), HBM_ERR_BACKEND);
    assert_non_null(strstr(hbm_last_error(a), "stays awake"));
    assert_int_equal(info(a, mp).state, HBM_POOL_AWAKE);
    assert_int_equal(info(a, mp).reserved_bytes, pages);
    assert_true(same(p, 30 * MiB, 1) && same(q, 100 * MiB, 2));
    assert_valid(a);
    hbm__sim_clear_faults(sim_of(a));
    /* The third unmap fails: asleep, part of it still mapped. */
    hbm__sim_fault unmap = {
        .kind = HBM__OP_UNMAP, .nth = 3, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
    assert_int_equal(hbm__sim_add_fault(sim_of(a), &unmap), 0);
    assert_int_equal(hbm_pool_sleep(a, mp, &o), HBM_ERR_BACKEND);
    assert_non_null(strstr(hbm_last_error(a), "still mapped"));
    assert_valid(a);
    hbm_pool_info i = info(a, mp);
    assert_int_equal(i.state, HBM_POOL_ASLEEP);
    assert_true(i.reserved_bytes > 0 && i.asleep_bytes > 0);
    hbm__sim_clear_faults(sim_of(a));
    must(a, hbm_pool_sleep(a, mp, &o), "sleep again");
    assert_int_equal(info(a, mp).reserved_bytes, 0);
    assert_valid(a);
    must(a, hbm_pool_wake(a, mp, &o), "wake");
    assert_true(same(p, 30 * MiB, 1) && same(q, 100 * MiB, 2));
    /* The first unmap fails: nothing given back, awake. */
    hbm__sim_fault first = {
        .kind = HBM__OP_UNMAP, .nth = 1, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
    assert_int_equal(hbm__sim_add_fault(sim_of(a), &first), 0);
    assert_int_equal(hbm_pool_sleep(a, mp, &o), HBM_ERR_BACKEND);
    assert_non_null(strstr(hbm_last_error(a), "stays awake"));
    assert_int_equal(info(a, mp).state, HBM_POOL_AWAKE);
    assert_int_equal(info(a, mp).backup_bytes, 0);
    assert_valid(a);
    hbm__sim_clear_faults(sim_of(a));
    assert_true(same(p, 30 * MiB, 1) && same(q, 100 * MiB, 2));
    hbm_free(a, p);
    hbm_free(a, q);
    hbm_destroy(a);
}

static void count_progress(void *ctx, uint64_t done, uint64_t total)
{
    hbm_allocator *a = ((void **)ctx)[0];
    uint64_t *seen = ((void **)ctx)[1];
    assert_true(done > seen[0] && done <= total);
    seen[0] = done;
    seen[1] = total;
    seen[2]++;
    /* The lock is open: the allocator serves other pools from inside the callback. */
    void *p = must_malloc(a, 4096, 0);
    hbm_free(a, p);
}

/* A big backup is copied a piece at a time, each a pinned buffer, and the caller hears of each piece with the
 * allocator's lock released (a Python callback takes the GIL, which another thread may hold while it allocates). */
static void a_big_backup_reports_progress_with_the_lock_open(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_mempool mp = tagged(a, "weights", 1);
    void *p = in_pool(a, mp, 100 * MiB, 0), *q = in_pool(a, mp, 10 * MiB, 0);
    fill(p, 100 * MiB, 6);
    uint64_t seen[3] = {0, 0, 0};
    void *ctx[2] = {a, seen};
    hbm_sleep_opts o = {.chunk_bytes = 16 * MiB, .progress = count_progress, .ctx = ctx};
    must(a, hbm_pool_sleep(a, mp, &o), "sleep");
    assert_int_equal(seen[0], seen[1]);
    assert_int_equal(seen[1], info(a, mp).backup_bytes);
    assert_int_equal(seen[2], (seen[1] + 16 * MiB - 1) / (16 * MiB));
    hbm_pool_info i = info(a, mp);
    assert_int_equal(i.host_bytes, i.backup_bytes); /* the last buffer is no larger than what is left */
    seen[0] = seen[2] = 0;
    o.release_host = 1;
    must(a, hbm_pool_wake(a, mp, &o), "wake");
    assert_int_equal(seen[0], seen[1]);
    assert_int_equal(info(a, mp).host_bytes, 0);
    assert_int_equal(counters(a).live_host, 0);
    assert_true(same(p, 100 * MiB, 6));
    hbm_free(a, p);
    hbm_free(a, q);
    hbm_destroy(a);
}

/* The state in the statistics, the snapshot and the history: reserved drops by the pages, the asleep figures rise;
 * the snapshot marks the sleeping pool's segments; the history has one sleep and one wake entry per run. */
static void statistics_and_snapshots_mark_a_sleeping_pool(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB", "");
    must(a, hbm_history_enable(a, 1000), "history");
    hbm_mempool mp = tagged(a, "kv_cache", 1);
    void *p = in_pool(a, mp, 50 * MiB, 0);
    void *d = must_malloc(a, 10 * MiB, 0);
    must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
    hbm_stats s = stats_of(a);
    assert_int_equal(s.asleep_pools, 1);
    assert_int_equal(s.asleep_bytes, 60 * MiB); /* three 20 MiB pages */
    assert_int_equal(s.backup_bytes, 50 * MiB);
    hbm_stat_entry e[HBM_STAT_ENTRIES];
    int n = hbm_stats_flatten(&s, e, HBM_STAT_ENTRIES);
    int found = 0;
    for (int i = 0; i < n; i++)
        found += !strcmp(e[i].name, "asleep_bytes") && e[i].value == (int64_t)(60 * MiB);
    assert_int_equal(found, 1);
    hbm_snapshot *snap;
    must(a, hbm_snapshot_take(a, &snap), "snapshot");
    int asleep = 0, awake = 0;
    for (size_t i = 0; i < snap->nsegments; i++) {
        if (snap->segments[i].pool == mp)
            asleep += snap->segments[i].is_asleep;
        else
            awake += !snap->segments[i].is_asleep;
    }
    assert_int_equal(asleep, 1);
    assert_true(awake >= 1);
    int sleeps = 0;
    for (size_t i = 0; i < snap->ntrace; i++)
        sleeps += snap->trace[i].action == HBM_TRACE_SLEEP && snap->trace[i].size == 60 * MiB;
    assert_int_equal(sleeps, 1);
    char path[] = "/tmp/hbm_sleep_snapXXXXXX";
    int fd = mkstemp(path);
    close(fd);
    char err[256];
    must(a, hbm_snapshot_save(snap, path, HBM_SNAPSHOT_JSON, err, sizeof err), "save");
    FILE *f = fopen(path, "r");
    char buf[65536];
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    buf[got] = 0;
    fclose(f);
    unlink(path);
    assert_non_null(strstr(buf, "\"is_asleep\":true"));
    assert_non_null(strstr(buf, "\"action\":\"sleep\""));
    hbm_snapshot_free(snap);
    must(a, hbm_pool_wake(a, mp, NULL), "wake");
    assert_int_equal(stats_of(a).asleep_bytes, 0);
    assert_int_equal(stats_of(a).asleep_pools, 0);
    hbm_free(a, p);
    hbm_free(a, d);
    hbm_destroy(a);
}

/* A pool let go while it sleeps: its blocks freed, empty_cache takes everything back, its pinned buffers too. */
/* One model (issue #37 item 1): a tag and its backup default are fixed at the pool's first allocation; each sleep may
 * choose otherwise (vLLM's levels 1 and 2), and a wake may drop the backup instead of restoring it (an RL job's weight
 * sync). Re-tagging a pool that holds memory switched it silently; now only the same call again is taken. */
static void each_sleep_chooses_backup_or_discard_and_a_wake_may_skip_the_restore(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "expandable_segments:True");
    hbm_mempool kv = tagged(a, "kv_cache", 0), w = tagged(a, "weights", 1);
    void *k = in_pool(a, kv, 4 * MiB, 0), *p = in_pool(a, w, 6 * MiB, 0);
    fill(k, 4 * MiB, 1);
    fill(p, 6 * MiB, 2);
    /* A discard tag backed up this once: its contents come back. */
    hbm_sleep_opts keep = {.backup = HBM_SLEEP_BACKUP}, drop = {.backup = HBM_SLEEP_DISCARD};
    must(a, hbm_pool_sleep(a, kv, &keep), "sleep with backup");
    assert_int_equal(info(a, kv).backup_bytes, 4 * MiB);
    must(a, hbm_pool_wake(a, kv, NULL), "wake");
    assert_true(same(k, 4 * MiB, 1));
    /* A backup tag discarded this once: nothing copied, the pages come back new (zeroed on the host-backed sim). */
    hbm_device_counters d0, d1;
    hbm_get_device_counters(a, &d0);
    must(a, hbm_pool_sleep(a, w, &drop), "sleep with discard");
    hbm_get_device_counters(a, &d1);
    assert_int_equal(d1.copy_calls - d0.copy_calls, 0);
    assert_int_equal(info(a, w).backup_bytes, 0);
    assert_true(info(a, w).backup); /* the tag's default is unchanged */
    must(a, hbm_pool_wake(a, w, NULL), "wake");
    assert_false(same(p, 6 * MiB, 2));
    /* As tagged (backup), then woken without the restore: the backup is dropped, nothing copied back. */
    fill(p, 6 * MiB, 3);
    must(a, hbm_pool_sleep(a, w, NULL), "sleep as tagged");
    assert_int_equal(info(a, w).backup_bytes, 6 * MiB);
    hbm_sleep_opts fresh = {.no_restore = 1};
    hbm_get_device_counters(a, &d0);
    must(a, hbm_pool_wake(a, w, &fresh), "wake without the restore");
    hbm_get_device_counters(a, &d1);
    assert_int_equal(d1.copy_calls - d0.copy_calls, 0);
    assert_int_equal(info(a, w).backup_bytes, 0);
    assert_int_equal(info(a, w).state, HBM_POOL_AWAKE);
    assert_false(same(p, 6 * MiB, 3));
    /* A choice that is none of the three is refused before anything sleeps. */
    hbm_sleep_opts bad = {.backup = (hbm_sleep_backup)7};
    assert_int_equal(hbm_pool_sleep(a, w, &bad), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "backup 7 is none of"));
    assert_int_equal(info(a, w).state, HBM_POOL_AWAKE);
    /* A backup asked of a runtime without pinned host copies: refused with the way out, the pool awake. */
    a->backend->caps.host_copies = 0;
    assert_int_equal(hbm_pool_sleep(a, kv, &keep), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "sleep it with HBM_SLEEP_DISCARD"));
    a->backend->caps.host_copies = 1;
    assert_int_equal(info(a, kv).state, HBM_POOL_AWAKE);
    /* Re-tagging: the same call is taken, another tag or default refused; an untagged pool that holds memory too. */
    must(a, hbm_pool_tag(a, w, "weights", 1), "the same tag again");
    assert_int_equal(hbm_pool_tag(a, w, "weights", 0), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "pool 'weights' (backup on) already holds memory"));
    assert_int_equal(hbm_pool_tag(a, kv, "kv", 0), HBM_ERR_INVALID);
    assert_true(info(a, w).backup);
    assert_string_equal(info(a, kv).tag, "kv_cache");
    hbm_mempool plain;
    must(a, hbm_mempool_create(a, &plain), "create");
    void *q = in_pool(a, plain, 3 * MiB, 0);
    assert_int_equal(hbm_pool_tag(a, plain, "late", 0), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "already holds memory: tag a pool before its first allocation"));
    hbm_free(a, q);
    hbm_free(a, k);
    hbm_free(a, p);
    assert_valid(a);
    hbm_destroy(a);
}

/* An opt-in checksum of the backup (issue #37 item 5): a wake checks each piece before copying anything back; a
 * byte changed in host memory since the sleep leaves the pool asleep, nothing mapped, with an error naming the pool
 * and the piece, and a wake without the restore is the way out. Where host memory cannot be read (the address-only
 * sim), a checksum is refused before anything sleeps. */
static void a_checksummed_backup_that_changed_is_not_restored(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_mempool w = tagged(a, "weights", 1);
    void *p = in_pool(a, w, 6 * MiB, 0);
    fill(p, 6 * MiB, 4);
    hbm_sleep_opts o = {.checksum = 1, .chunk_bytes = 2 * MiB};
    must(a, hbm_pool_sleep(a, w, &o), "sleep with a checksum");
    must(a, hbm_pool_wake(a, w, NULL), "wake of an untouched backup");
    assert_true(same(p, 6 * MiB, 4));
    fill(p, 6 * MiB, 5);
    must(a, hbm_pool_sleep(a, w, &o), "sleep with a checksum");
    assert_int_equal(hbm__sim_host_scribble(sim_of(a), 1, 12345), 0); /* the second piece's buffer */
    assert_int_equal(hbm_pool_wake(a, w, NULL), HBM_ERR_CHECKSUM);
    const char *e = hbm_last_error(a);
    assert_non_null(strstr(e, "pool 'weights' stays asleep: its backup changed in host memory since the sleep"));
    assert_non_null(strstr(e, "piece 2 of 3"));
    assert_non_null(strstr(e, "wake(tag, restore=False)"));
    assert_int_equal(info(a, w).state, HBM_POOL_ASLEEP);
    assert_int_equal(info(a, w).reserved_bytes, 0);
    assert_int_equal(hbm_pool_wake(a, w, NULL), HBM_ERR_CHECKSUM); /* the same again: nothing lost, nothing copied */
    hbm_sleep_opts fresh = {.no_restore = 1};
    must(a, hbm_pool_wake(a, w, &fresh), "wake without the restore");
    assert_int_equal(info(a, w).state, HBM_POOL_AWAKE);
    hbm_free(a, p);
    assert_valid(a);
    hbm_destroy(a);
    a = open_sim("sim:capacity=1GiB", "");
    w = tagged(a, "weights", 1);
    p = in_pool(a, w, 4 * MiB, 0);
    assert_int_equal(hbm_pool_sleep(a, w, &o), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "a checksum of the backup needs host memory the CPU can read"));
    assert_int_equal(info(a, w).state, HBM_POOL_AWAKE);
    hbm_free(a, p);
    hbm_destroy(a);
}

/* The descriptor of the backup file made in dir, or -1: it has no name (unlinked at once), so it is found by what
 * /proc/self/fd says of it: "DIR/hbmalloc-backup-XXXXXX (deleted)". */
static int backup_fd(const char *dir)
{
    DIR *d = opendir("/proc/self/fd");
    int found = -1;
    char want[300], link[PATH_MAX], path[300];
    snprintf(want, sizeof want, "%s/hbmalloc-backup-", dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, link, sizeof link - 1);
        if (n > 0 && (link[n] = 0, !strncmp(link, want, strlen(want))) && strstr(link, "(deleted)"))
            found = atoi(e->d_name);
    }
    if (d)
        closedir(d);
    return found;
}

/* A backup in a file (issue #37 item 4, hbm_sleep_opts.backup_dir): the live bytes go through two pinned buffers of
 * one piece into a file of the folder given, which has no name while the pool sleeps; the wake brings them back
 * byte for byte and closes it. A byte of the file changed since the sleep fails the wake's checksum, which gives back
 * what it mapped and leaves the pool asleep; a folder that cannot take the backup (missing, or a file-size limit as
 * a full disk) refuses the sleep with the pool awake and its contents in place; a folder given to a sleep that keeps
 * no backup is refused. */
static void a_backup_in_a_file_goes_through_two_pinned_pieces(void **st)
{
    (void)st;
    char dir[] = "/tmp/hbm-bfile-XXXXXX";
    assert_non_null(mkdtemp(dir));
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_mempool w = tagged(a, "weights", 1);
    void *p = in_pool(a, w, 20 * MiB, 0), *q = in_pool(a, w, 9 * MiB, 0);
    fill(p, 20 * MiB, 7);
    fill(q, 9 * MiB, 8);
    hbm_sleep_opts o = {.chunk_bytes = 2 * MiB, .backup_dir = dir, .checksum = 1};
    for (int cycle = 0; cycle < 3; cycle++) {
        must(a, hbm_pool_sleep(a, w, &o), "sleep to a file");
        hbm_pool_info i = info(a, w);
        assert_int_equal(i.backup_bytes, 29 * MiB);
        assert_int_equal(i.file_bytes, 29 * MiB);
        assert_int_equal(i.host_bytes, 4 * MiB); /* two pieces, not the backup */
        assert_int_equal(i.reserved_bytes, 0);
        assert_int_equal(dir_entries(dir), 0); /* nameless */
        int fd = backup_fd(dir);
        assert_true(fd >= 0);
        struct stat sb;
        assert_int_equal(fstat(fd, &sb), 0);
        assert_int_equal(sb.st_size, 29 * MiB);
        assert_valid(a);
        must(a, hbm_pool_wake(a, w, NULL), "wake from a file");
        assert_true(same(p, 20 * MiB, 7));
        assert_true(same(q, 9 * MiB, 8));
        assert_int_equal(backup_fd(dir), -1); /* closed: its room is back */
        assert_int_equal(info(a, w).file_bytes, 0);
    }
    fill(q, 9 * MiB, 9);
    must(a, hbm_pool_sleep(a, w, &o), "sleep to a file");
    int fd = backup_fd(dir);
    assert_int_equal(pwrite(fd, "x", 1, 3 * MiB), 1); /* the second piece */
    assert_int_equal(hbm_pool_wake(a, w, NULL), HBM_ERR_CHECKSUM);
    const char *e = hbm_last_error(a);
    assert_non_null(strstr(e, "pool 'weights' stays asleep: its backup changed in its file since the sleep"));
    assert_non_null(strstr(e, "piece 2 of "));
    assert_non_null(strstr(e, dir));
    assert_int_equal(info(a, w).state, HBM_POOL_ASLEEP);
    assert_int_equal(info(a, w).reserved_bytes, 0); /* what the wake mapped is given back */
    assert_valid(a);
    hbm_sleep_opts fresh = {.no_restore = 1};
    must(a, hbm_pool_wake(a, w, &fresh), "wake without the restore");
    assert_int_equal(backup_fd(dir), -1);

    fill(p, 20 * MiB, 10); /* undefined after a wake without the restore */
    fill(q, 9 * MiB, 11);
    hbm_sleep_opts none = {.backup_dir = "/nonexistent/hbmalloc"};
    assert_int_equal(hbm_pool_sleep(a, w, &none), HBM_ERR_BACKEND);
    assert_non_null(strstr(hbm_last_error(a), "pool 'weights': no backup could be made (no backup file could be "
                                              "made in /nonexistent/hbmalloc: No such file or directory)"));
    assert_int_equal(info(a, w).state, HBM_POOL_AWAKE);
    assert_true(same(p, 20 * MiB, 10));

    struct rlimit old, small;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small = (struct rlimit){4 * MiB, old.rlim_max};
    /* SIGXFSZ at its default, as in a real job: a file past the limit would end the process. */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    hbm_status rc = hbm_pool_sleep(a, w, &o);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(rc, HBM_ERR_OOM);
    assert_non_null(
        strstr(hbm_last_error(a), "File too large (the process's file-size limit, ulimit -f, is 4.00 MiB)"));
    assert_non_null(strstr(hbm_last_error(a), "the pool stays awake, nothing was given back"));
    assert_int_equal(info(a, w).state, HBM_POOL_AWAKE);
    assert_int_equal(backup_fd(dir), -1);
    assert_true(same(p, 20 * MiB, 10));
    assert_true(same(q, 9 * MiB, 11));

    hbm_sleep_opts discard = {.backup = HBM_SLEEP_DISCARD, .backup_dir = dir};
    assert_int_equal(hbm_pool_sleep(a, w, &discard), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "a backup folder was given"));
    assert_int_equal(info(a, w).state, HBM_POOL_AWAKE);
    hbm_free(a, p);
    hbm_free(a, q);
    assert_valid(a);
    hbm_destroy(a);

    a = open_sim("sim:capacity=1GiB", ""); /* host memory the CPU cannot read */
    w = tagged(a, "weights", 1);
    p = in_pool(a, w, 4 * MiB, 0);
    hbm_sleep_opts plain = {.backup_dir = dir};
    assert_int_equal(hbm_pool_sleep(a, w, &plain), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "a backup in a file needs host memory the CPU can read"));
    hbm_free(a, p);
    hbm_destroy(a);
    assert_int_equal(rmdir(dir), 0);
}

/* A pool whose memory was handed to a collective library (issue #37 item 3) refuses to sleep, with the caller's
 * reason, until it is unpinned as often as pinned; pinning needs a reason and an awake pool. */
static void a_pinned_pool_refuses_to_sleep_with_the_reason(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    hbm_mempool w = tagged(a, "weights", 0);
    void *p = in_pool(a, w, 4 * MiB, 0);
    assert_int_equal(hbm_pool_pin(a, w, ""), HBM_ERR_INVALID);
    must(a, hbm_pool_pin(a, w, "ncclCommRegister by the trainer"), "pin");
    must(a, hbm_pool_pin(a, w, "a symmetric-memory rendezvous"), "pin again");
    uint64_t reserved = info(a, w).reserved_bytes;
    assert_int_equal(hbm_pool_sleep(a, w, NULL), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "pool 'weights' is pinned (hbm_pool_pin, 2 times): a symmetric-memory "
                                              "rendezvous"));
    assert_int_equal(info(a, w).state, HBM_POOL_AWAKE);
    assert_int_equal(info(a, w).reserved_bytes, reserved); /* nothing given back */
    must(a, hbm_pool_unpin(a, w), "unpin");
    assert_int_equal(hbm_pool_sleep(a, w, NULL), HBM_ERR_INVALID); /* still pinned once */
    must(a, hbm_pool_unpin(a, w), "unpin");
    assert_int_equal(hbm_pool_unpin(a, w), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "is not pinned"));
    must(a, hbm_pool_sleep(a, w, NULL), "sleep once unpinned");
    assert_int_equal(hbm_pool_pin(a, w, "too late"), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "is asleep"));
    must(a, hbm_pool_wake(a, w, NULL), "wake");
    hbm_free(a, p);
    hbm_destroy(a);
}

/* A tag is printed in messages, tables and tab-separated lines: an empty one and one with a control character are
 * refused with the reason (issue #37 item 10: the empty one was refused without a message). */
static void a_tag_with_a_control_character_or_none_is_refused_with_the_reason(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    const char *bad[] = {"", "a\tb", "kv\n", "x\x7f"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(hbm_pool_tag(a, mp, bad[i], 1), HBM_ERR_INVALID);
        assert_non_null(strstr(hbm_last_error(a), i ? "no control characters" : "an empty tag names nothing"));
    }
    assert_int_equal(hbm_pool_tag(a, mp, NULL, 1), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "an empty tag"));
    assert_int_equal(hbm_pool_tag(a, mp, "kv cache \xc3\xa9", 0), HBM_OK); /* spaces and UTF-8 are fine */
    hbm_destroy(a);
}

/* A pool released while it still holds blocks (a graph deleted whose output is still held) is still its tag's: it
 * sleeps and wakes, its contents restored; released while asleep, it still wakes with its backup; once its blocks
 * are freed an empty_cache reaps it (issue #37 item 6: both were refused as "released already" until then, and a
 * pool released asleep could never wake). */
static void a_released_pool_still_sleeps_and_wakes_with_its_tag(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_mempool g = tagged(a, "weights", 1), h = tagged(a, "weights", 1);
    void *out = in_pool(a, g, 3 * MiB, 0), *tmp = in_pool(a, g, MiB, 0), *o2 = in_pool(a, h, 5 * MiB, 0);
    fill(out, 3 * MiB, 5);
    fill(o2, 5 * MiB, 6);
    hbm_free(a, tmp); /* cached in the pool */
    assert_int_equal(hbm_mempool_release(a, g), HBM_ERR_POOL_BUSY);
    must(a, hbm_pool_sleep(a, g, NULL), "sleep of a released pool");
    assert_int_equal(info(a, g).state, HBM_POOL_ASLEEP);
    assert_int_equal(info(a, g).reserved_bytes, 0);
    must(a, hbm_pool_wake(a, g, NULL), "wake of a released pool");
    assert_true(same(out, 3 * MiB, 5));
    must(a, hbm_pool_sleep(a, h, NULL), "sleep");
    assert_int_equal(hbm_mempool_release(a, h), HBM_ERR_POOL_BUSY); /* released asleep */
    must(a, hbm_pool_wake(a, h, NULL), "wake of a pool released asleep");
    assert_true(same(o2, 5 * MiB, 6));
    assert_valid(a);
    hbm_free(a, out);
    hbm_free(a, o2);
    must(a, hbm_empty_cache(a), "empty_cache");
    assert_int_equal(hbm_pool_list(a, NULL, 0), 0);
    assert_int_equal(hbm_pool_sleep(a, g, NULL), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "does not exist (or was released and emptied already)"));
    hbm_destroy(a);
}

static void a_sleeping_pool_let_go_gives_everything_back(void **st)
{
    (void)st;
    hbm_backend *b;
    char err[256];
    assert_int_equal(hbm_backend_open(&b, HOST_SIM, err, sizeof err), HBM_OK);
    hbm_allocator *a;
    assert_int_equal(hbm_create(&a, b, 0, "", err, sizeof err), HBM_OK);
    hbm_mempool mp = tagged(a, "weights", 1);
    void *p = in_pool(a, mp, 30 * MiB, 0);
    must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
    assert_int_equal(hbm_mempool_release(a, mp), HBM_ERR_POOL_BUSY);
    hbm_free(a, p);
    must(a, hbm_empty_cache(a), "empty_cache");
    assert_valid(a);
    assert_int_equal(hbm_pool_list(a, NULL, 0), 0);
    hbm__sim_counters c;
    hbm__sim_get_counters(hbm__sim_ctx(b), &c);
    assert_int_equal(c.live_host, 0);
    assert_int_equal(c.live_reservations, 0);
    hbm_destroy(a);
    assert_sim_empty(b);
    /* Destroyed asleep, backup held: everything back too. */
    assert_int_equal(hbm_create(&a, b, 0, "", err, sizeof err), HBM_OK);
    mp = tagged(a, "weights", 1);
    p = in_pool(a, mp, 30 * MiB, 0);
    must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
    hbm_destroy(a);
    assert_sim_empty(b);
    hbm__sim_get_counters(hbm__sim_ctx(b), &c);
    assert_int_equal(c.live_host, 0);
    hbm_backend_close(b);
}

/* torch's MemPool gives a sleeping pool's segment back (hbm_mempool_trim, from its release_block): the reservation
 * goes, and with it the backup of it, so that the wake never copies into whatever reserves those addresses next. */
static void a_reservation_given_back_while_asleep_takes_its_backup_with_it(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(HOST_SIM, "");
    hbm_mempool w = tagged(a, "weights", 1), other = tagged(a, "other", 0);
    void *p = in_pool(a, w, 30 * MiB, 0);
    fill(p, 30 * MiB, 1);
    must(a, hbm_pool_sleep(a, w, NULL), "sleep");
    assert_int_equal(info(a, w).backup_bytes, 30 * MiB);
    hbm_free(a, p);
    must(a, hbm_mempool_trim(a, w), "trim"); /* torch's raw_delete of its last segment */
    assert_valid(a);
    assert_int_equal(info(a, w).backup_bytes, 0);
    assert_int_equal(stats_of(a).num_expandable_segments, 0);
    void *q = in_pool(a, other, 30 * MiB, 0); /* may take the addresses back */
    fill(q, 30 * MiB, 2);
    must(a, hbm_pool_wake(a, w, NULL), "wake");
    assert_true(same(q, 30 * MiB, 2));
    assert_valid(a);
    hbm_free(a, q);
    hbm_destroy(a);
}

/* A device without virtual memory cannot keep an address while its memory is away: tagging is refused with the
 * reason and the fix (Ascend HDK 23.0.0; the field report's 22.0.3). */
static void a_device_without_virtual_memory_refuses_with_the_fix(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:firmware=22.0.3,dialect=npu", "");
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    assert_int_equal(hbm_pool_tag(a, mp, "weights", 1), HBM_ERR_INVALID);
    const char *e = hbm_last_error(a);
    assert_non_null(strstr(e, "cannot sleep"));
    assert_non_null(strstr(e, "22.0.3"));
    assert_non_null(strstr(e, "23.0.0 or later"));
    assert_int_equal(hbm_pool_sleep(a, mp, NULL), HBM_ERR_INVALID); /* untagged: never sleeps */
    assert_non_null(strstr(hbm_last_error(a), "no tag"));
    hbm_destroy(a);
    /* Tagging after the first allocation of a pool made of whole segments is refused too. */
    a = open_sim("sim", "");
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    void *p = NULL;
    assert_int_equal(hbm_mempool_malloc(a, mp, MiB, 0, &p), HBM_OK);
    assert_int_equal(hbm_pool_tag(a, mp, "late", 0), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "before its first allocation"));
    hbm_free(a, p);
    hbm_destroy(a);
}

/* What a sleep and a wake cost on the model (sim.c's defaults; docs/SLEEP.md has the table and the GPU's figures),
 * and how many device calls: a 1 GiB pool in 20 MiB pages takes 52 unmaps and releases to sleep, 52 creates and maps
 * and one access to wake, plus the copies of its backup. */
static void tally(void *ctx, uint64_t done, uint64_t total)
{
    (void)done, (void)total;
    ++*(int *)ctx;
}

static void the_model_gives_the_cost_per_gib(void **st)
{
    (void)st;
    for (int backup = 0; backup <= 1; backup++) {
        hbm_allocator *a = open_sim("sim:capacity=80GiB", "");
        hbm_mempool mp = tagged(a, backup ? "weights" : "kv_cache", backup);
        void *p = in_pool(a, mp, GiB, 0);
        must(a, hbm_pool_sleep(a, mp, NULL), "sleep"); /* the first: pins its host buffers */
        must(a, hbm_pool_wake(a, mp, NULL), "wake");
        hbm_device_counters d0, d1, d2;
        hbm_get_device_counters(a, &d0);
        must(a, hbm_pool_sleep(a, mp, NULL), "sleep");
        hbm_get_device_counters(a, &d1);
        must(a, hbm_pool_wake(a, mp, NULL), "wake");
        hbm_get_device_counters(a, &d2);
        hbm_pool_info i = info(a, mp);
        assert_int_equal(d1.unmap_calls - d0.unmap_calls, 52);
        assert_int_equal(d2.map_calls - d1.map_calls, 52);
        assert_int_equal(d1.copy_calls - d0.copy_calls, backup ? 16 : 0); /* 64 MiB pieces */
        assert_int_equal(d2.copy_calls - d1.copy_calls, backup ? 16 : 0);
        assert_int_equal(d1.host_calls - d0.host_calls, 0); /* buffers kept from the first cycle */
        /* No wait per piece (issue #37 item 4): the 16 copies queued one after another, one wait at the end. */
        assert_int_equal(d1.sync_calls - d0.sync_calls, backup ? 3 : 2);
        assert_int_equal(d2.sync_calls - d1.sync_calls, backup ? 1 : 0);
        assert_int_equal(i.sleep_calls, backup ? 123 : 106);
        assert_int_equal(i.wake_calls, backup ? 122 : 105);
        /* With a progress callback: one piece in flight while the next is queued, an event after each. */
        int pieces = 0;
        hbm_sleep_opts o = {.progress = tally, .ctx = &pieces};
        hbm_get_device_counters(a, &d0);
        must(a, hbm_pool_sleep(a, mp, &o), "sleep with progress");
        hbm_get_device_counters(a, &d1);
        assert_int_equal(d1.sync_calls - d0.sync_calls, backup ? 2 + 16 : 2);       /* an event waited for per piece */
        assert_int_equal(d1.event_calls - d0.event_calls, backup ? 2 + 16 + 2 : 0); /* made, recorded, destroyed */
        assert_int_equal(pieces, backup ? 16 : 0);
        must(a, hbm_pool_wake(a, mp, NULL), "wake");
        printf("model, 1 GiB %s pool: sleep %.2f ms in %llu device calls, wake %.2f ms in %llu\n",
               backup ? "backup" : "discard", (double)i.sleep_device_ns / 1e6, (unsigned long long)i.sleep_calls,
               (double)i.wake_device_ns / 1e6, (unsigned long long)i.wake_calls);
        hbm_free(a, p);
        hbm_destroy(a);
    }
}

/* What `hbmalloc top` reads: the published record says how much sleeps, per tag (a graph's pool and its pool(tag)'s
 * counted together), and reserved leaves it out; what still held the device at the last sleep or wake, and outside
 * hbmalloc. */
static void the_published_record_says_what_sleeps_per_tag(void **st)
{
    (void)st;
    char dir[] = "/tmp/hbm-sleep-top-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("HBMALLOC_TOP_DIR", dir, 1);
    hbm_allocator *a = open_sim("sim:capacity=8GiB,others=1GiB", "");
    must(a, hbm_publish(a, 1), "publish");
    hbm_mempool w = tagged(a, "weights", 1), w2 = tagged(a, "weights", 1), kv = tagged(a, "kv_cache", 0);
    void *p = in_pool(a, w, 50 * MiB, 0), *q = in_pool(a, w2, 10 * MiB, 0), *k = in_pool(a, kv, 30 * MiB, 0);
    must(a, hbm_pool_sleep(a, w, NULL), "sleep");
    must(a, hbm_pool_sleep(a, w2, NULL), "sleep");
    must(a, hbm_pool_sleep(a, kv, NULL), "sleep");
    char path[512];
    record_path(dir, path, sizeof path);
    hbm_record r;
    char why[256];
    assert_int_equal(hbm_record_read(path, &r, why, sizeof why), HBM_OK);
    assert_int_equal(r.asleep_bytes, (60 + 20 + 40) * MiB);
    assert_int_equal(r.backup_bytes, 60 * MiB);
    assert_string_equal(r.asleep_tags, "weights 80.00 MiB, kv_cache 40.00 MiB");
    assert_int_equal(r.reserved_bytes, 0);
    /* What still held the device at the last sleep (issue #37 item 2): the others' 1 GiB, outside hbmalloc. */
    assert_true(r.resident_ns > 0);
    assert_int_equal(r.resident_used_bytes, GiB);
    assert_int_equal(r.outside_bytes, GiB);
    assert_string_equal(r.resident,
                        "device 0: 1024.00 MiB used of 8.00 GiB, hbmalloc holds 0 bytes; largest first: "
                        "1024.00 MiB outside hbmalloc (other processes, the runtime's context, communicators' "
                        "buffers, other allocators); 3 pools asleep gave back 120.00 MiB");
    must(a, hbm_pool_wake(a, w, NULL), "wake");
    must(a, hbm_pool_wake(a, w2, NULL), "wake");
    must(a, hbm_pool_wake(a, kv, NULL), "wake");
    assert_int_equal(hbm_record_read(path, &r, why, sizeof why), HBM_OK);
    assert_int_equal(r.asleep_bytes, 0);
    assert_string_equal(r.asleep_tags, "");
    assert_non_null(strstr(r.resident, "hbmalloc holds 120.00 MiB; largest first: 1024.00 MiB outside hbmalloc"));
    assert_non_null(strstr(r.resident, "in 3 awake pools (weights 80.00 MiB, kv_cache 40.00 MiB); no pool is asleep"));
    hbm_free(a, p);
    hbm_free(a, q);
    hbm_free(a, k);
    hbm_destroy(a);
    unsetenv("HBMALLOC_TOP_DIR");
    rmdir(dir);
}

/* ---- threads racing a sleep ---- */

typedef struct race {
    hbm_allocator *a;
    hbm_mempool mp;
    int stop;
    long refused, served;
} race;

static void *allocator_thread(void *arg)
{
    race *r = arg;
    void *held[8] = {0};
    for (unsigned i = 0; !__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE); i++) {
        size_t n = (size_t)(i % 7 + 1) * 3 * MiB + (i % 3) * 4096;
        void *p = NULL;
        hbm_status rc = i % 2 ? hbm_mempool_malloc(r->a, r->mp, n, 0, &p) : hbm_malloc(r->a, n, 0, &p);
        if (rc == HBM_ERR_ASLEEP)
            __atomic_add_fetch(&r->refused, 1, __ATOMIC_RELAXED);
        else if (rc == HBM_OK)
            __atomic_add_fetch(&r->served, 1, __ATOMIC_RELAXED);
        else
            fail_msg("racing allocation: %s", hbm_status_name(rc));
        if (held[i % 8])
            hbm_free(r->a, held[i % 8]); /* frees work whatever the state */
        held[i % 8] = p;
    }
    for (int k = 0; k < 8; k++)
        hbm_free(r->a, held[k]);
    return NULL;
}

/* Threads allocate into the pool (and beside it) and free while another sleeps and wakes it: every allocation is
 * served or refused as asleep, nothing else; the validator holds after; ThreadSanitizer finds no race (test.sh). */
static void threads_racing_a_sleep_find_it_whole(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=16GiB", "");
    race r = {.a = a, .mp = tagged(a, "kv_cache", 1)};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(pthread_create(&t[i], NULL, allocator_thread, &r), 0);
    while (__atomic_load_n(&r.served, __ATOMIC_RELAXED) < 10) /* the threads are at work */
        usleep(100);
    int slept = 0;
    for (int i = 0; i < 60; i++) {
        usleep(200);
        uint64_t seen[3] = {0, 0, 0};
        void *ctx[2] = {a, seen};
        hbm_sleep_opts o = {.chunk_bytes = 8 * MiB, .progress = i % 2 ? count_progress : NULL, .ctx = ctx};
        hbm_status rc = hbm_pool_sleep(a, r.mp, &o);
        if (rc != HBM_OK)
            fail_msg("sleep: %s", hbm_last_error(a));
        slept++;
        usleep(300); /* asleep a while: the threads' allocations into it are refused meanwhile */
        seen[0] = 0;
        must(a, hbm_pool_wake(a, r.mp, &o), "wake");
        assert_int_equal(hbm_check(a, NULL, 0), 0);
    }
    __atomic_store_n(&r.stop, 1, __ATOMIC_RELEASE);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    assert_valid(a);
    assert_int_equal(slept, 60);
    assert_true(r.served > 10 && r.refused > 0);
    printf("racing: %ld allocations served, %ld refused as asleep\n", r.served, r.refused);
    assert_int_equal(info(a, r.mp).wakes, 60);
    hbm_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_backup_pool_wakes_with_its_contents_at_the_same_addresses),
        cmocka_unit_test(a_discard_pool_wakes_empty_and_other_pools_are_untouched),
        cmocka_unit_test(touching_a_sleeping_block_faults),
        cmocka_unit_test(allocations_into_a_sleeping_pool_are_refused_and_frees_work),
        cmocka_unit_test(sleep_waits_for_streams_still_using_its_blocks),
        cmocka_unit_test(a_sleep_and_wake_with_streams_held_complete),
        cmocka_unit_test(a_graph_pool_sleeps_and_wakes),
        cmocka_unit_test(a_wake_that_finds_the_device_full_keeps_the_pool_asleep),
        cmocka_unit_test(a_wake_the_device_refuses_can_be_tried_again),
        cmocka_unit_test(a_sleep_the_device_refuses_loses_nothing),
        cmocka_unit_test(a_big_backup_reports_progress_with_the_lock_open),
        cmocka_unit_test(statistics_and_snapshots_mark_a_sleeping_pool),
        cmocka_unit_test(a_sleeping_pool_let_go_gives_everything_back),
        cmocka_unit_test(a_pinned_pool_refuses_to_sleep_with_the_reason),
        cmocka_unit_test(a_checksummed_backup_that_changed_is_not_restored),
        cmocka_unit_test(a_backup_in_a_file_goes_through_two_pinned_pieces),
        cmocka_unit_test(each_sleep_chooses_backup_or_discard_and_a_wake_may_skip_the_restore),
        cmocka_unit_test(a_released_pool_still_sleeps_and_wakes_with_its_tag),
        cmocka_unit_test(a_tag_with_a_control_character_or_none_is_refused_with_the_reason),
        cmocka_unit_test(a_reservation_given_back_while_asleep_takes_its_backup_with_it),
        cmocka_unit_test(a_device_without_virtual_memory_refuses_with_the_fix),
        cmocka_unit_test(the_model_gives_the_cost_per_gib),
        cmocka_unit_test(the_published_record_says_what_sleeps_per_tag),
        cmocka_unit_test(threads_racing_a_sleep_find_it_whole),
    };
    setenv("HBMALLOC_QUIET", "1", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
