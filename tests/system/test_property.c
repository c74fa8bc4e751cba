/*
 * test_property.c: random operation sequences over several seeds and
 * settings, with the validator after every operation (every 64th under a
 * sanitizer). In host-backed mode every live block is filled with a pattern
 * that is checked when it is freed, so overlapping blocks or a block handed
 * out twice are caught.
 */
#include "helpers.h"

#define OPS 100000
#define MAX_LIVE 400
/* The validator after every operation; under a sanitizer after every 64th (issue #38 item 8): the sequences are the
 * normal build's (the same seeds), so the validator's verdicts are too, while every operation still runs under the
 * sanitizer. It was three quarters of the sanitizer build's longest test (192 s). */
#define VALIDATE_EVERY (HBM_TEST_SANITIZED ? 64 : 1)

typedef struct live {
    unsigned char *p;
    size_t n;
    unsigned char pat;
} live;


static size_t random_size(void)
{
    uint64_t r = rnd() % 100;
    if (r < 60)
        return 1 + rnd() % (1024 * 1024); /* small pool */
    if (r < 85)
        return 1024 * 1024 + 1 + rnd() % (9 * MiB); /* 20 MiB segments */
    if (r < 98)
        return 10 * MiB + rnd() % (40 * MiB); /* own segments */
    return 1 + rnd() % 8;                     /* tiny */
}

/* faults: every few hundred operations a random device call kind fails once
 * (out of memory or a device error); every failure must come back as a status. */
/* streams: blocks are also used by other streams (record_stream) whose work the
 * test holds and releases at random, and some allocations go to a private pool. */
static void run_ex2(const char *spec, const char *settings, uint64_t seed, int fill, double fraction, int faults,
                    int streams)
{
    hbm_backend *be;
    hbm_allocator *a;
    char err[512];
    if (hbm_backend_open(&be, spec, err, sizeof err) != HBM_OK || hbm_create(&a, be, 0, settings, err, sizeof err))
        fail_msg("%s / %s: %s", spec, settings, err);
    size_t injected_failures = 0;
    hbm_mempool mp = 0;
    int routed = 0;
    if (streams)
        assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    if (fraction < 1.0)
        assert_int_equal(hbm_set_memory_fraction(a, fraction), HBM_OK);
    rng_state = seed * 0x9E3779B97F4A7C15ull + 1;
    live L[MAX_LIVE];
    int nl = 0;
    int64_t requested = 0;
    size_t ooms = 0;
    for (int op = 0; op < OPS; op++) {
        uint64_t r = rnd() % 1000;
        if (faults && op % 300 == 0) {
            hbm__sim_clear_faults(sim_of(a));
            hbm__sim_fault f = {.kind = (int)(rnd() % HBM__OP_KINDS),
                                .nth = 1 + rnd() % 4,
                                .min_size = 0,
                                .max_size = SIZE_MAX,
                                .code = rnd() % 2 ? HBM__BE_OOM : HBM__SIM_ERR_INJECTED};
            if (f.kind == HBM__OP_INFO)
                f.kind = HBM__OP_MAP;
            hbm__sim_add_fault(sim_of(a), &f);
        }
        if (streams && r >= 990) {
            uint64_t k = rnd() % 10;
            if (k < 6)
                hbm__sim_stream_hold(sim_of(a), 0, (hbm_stream)(3 + rnd() % 2), (int)(rnd() % 2));
            else if (k < 8 && routed == 0) {
                assert_int_equal(hbm_mempool_begin_stream(a, mp, rnd() % 3), HBM_OK);
                routed = 1;
            } else if (routed) {
                assert_int_equal(hbm_mempool_end(a, mp), HBM_OK);
                routed = 0;
            }
            if (op % VALIDATE_EVERY == 0)
                assert_valid(a);
            continue;
        }
        if (streams && r >= 560 && r < 640 && nl > 0) {
            assert_int_equal(hbm_record_stream(a, L[rnd() % (uint64_t)nl].p, (hbm_stream)(3 + rnd() % 2)), HBM_OK);
            if (op % VALIDATE_EVERY == 0)
                assert_valid(a);
            continue;
        }
        if ((r < 560 && nl < MAX_LIVE) || nl == 0) {
            size_t n = random_size();
            if (fill && n > 2 * MiB)
                n = 1 + n % (2 * MiB); /* keep host-backed runs light */
            void *p;
            hbm_status rc = hbm_malloc(a, n, rnd() % 3, &p);
            if (rc == HBM_ERR_OOM) {
                ooms++;
                assert_null(p);
            } else if (faults && rc == HBM_ERR_BACKEND) {
                injected_failures++;
                assert_null(p);
            } else {
                assert_int_equal(rc, HBM_OK);
                assert_non_null(p);
                assert_true(((uintptr_t)p & 511) == 0);
                assert_true(hbm_block_size(a, p) >= n);
                L[nl] = (live){p, n, (unsigned char)(rnd() | 1)};
                if (fill)
                    memset(p, L[nl].pat, n);
                nl++;
                requested += (int64_t)n;
            }
        } else if (r < 990) {
            int i = (int)(rnd() % (uint64_t)nl);
            if (fill) {
                static unsigned char expect[2 * 1024 * 1024];
                memset(expect, L[i].pat, L[i].n);
                if (memcmp(L[i].p, expect, L[i].n) != 0)
                    fail_msg("seed %llu op %d: block %p of %zu bytes was overwritten", (unsigned long long)seed, op,
                             (void *)L[i].p, L[i].n);
            }
            assert_int_equal(hbm_free(a, L[i].p), HBM_OK);
            requested -= (int64_t)L[i].n;
            L[i] = L[--nl];
        } else {
            hbm_status rc = hbm_empty_cache(a);
            if (rc != HBM_OK && !(faults && rc == HBM_ERR_BACKEND))
                fail_msg("empty_cache: %s", hbm_last_error(a));
        }
        /* Frees waiting on events still count as requested until they complete. */
        int64_t req = stats_of(a).requested_bytes[HBM_POOL_ALL].current;
        if (streams ? req < requested : req != requested)
            fail_msg("seed %llu op %d: requested_bytes %lld, live blocks requested %lld", (unsigned long long)seed, op,
                     (long long)req, (long long)requested);
        if (op % VALIDATE_EVERY == 0)
            assert_valid(a);
    }
    hbm__sim_clear_faults(sim_of(a));
    if (routed)
        hbm_mempool_end(a, mp);
    if (mp)
        hbm_mempool_release(a, mp);
    while (nl > 0) {
        assert_int_equal(hbm_free(a, L[--nl].p), HBM_OK);
        assert_valid(a);
    }
    assert_int_equal(hbm_empty_cache(a), HBM_OK); /* waits for whatever is still pending */
    hbm_stats s = stats_of(a);
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].current, 0);
    assert_int_equal(s.active[HBM_POOL_ALL].current, 0);
    assert_int_equal(s.num_ooms, (int64_t)ooms);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    s = stats_of(a);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, s.arena_bytes); /* an arena is kept, nothing else */
    if (strstr(settings, "hbm_arena") && !faults)
        assert_true(s.arena_bytes > 0);
    print_message("  %s / \"%s\" seed %llu: %d ops, %zu OOMs, %zu injected failures, peak reserved %lld MiB\n", spec,
                  settings, (unsigned long long)seed, OPS, ooms, injected_failures,
                  (long long)(s.reserved_bytes[0].peak >> 20));
    hbm_destroy(a);
    assert_sim_empty(be);
    hbm_backend_close(be);
}

static void run_ex(const char *spec, const char *settings, uint64_t seed, int fill, double fraction, int faults)
{
    run_ex2(spec, settings, seed, fill, fraction, faults, 0);
}

static void run(const char *spec, const char *settings, uint64_t seed, int fill, double fraction)
{
    run_ex(spec, settings, seed, fill, fraction, 0);
}

static void default_settings_two_seeds(void **st)
{
    (void)st;
    run("sim:capacity=2GiB", "", 1, 0, 1.0);
    run("sim:capacity=2GiB", "", 2, 0, 1.0);
}

static void max_split_size_with_memory_pressure(void **st)
{
    (void)st;
    run("sim:capacity=1GiB", "max_split_size_mb:24", 3, 0, 1.0);
}

static void roundup_divisions(void **st)
{
    (void)st;
    run("sim:capacity=2GiB", "roundup_power2_divisions:[1:2,16:4,>:8]", 4, 0, 1.0);
}

static void gc_under_a_memory_fraction(void **st)
{
    (void)st;
    run("sim:capacity=2GiB", "garbage_collection_threshold:0.6,max_split_size_mb:32", 5, 0, 0.7);
}

static void npu_padding_and_large_segments(void **st)
{
    (void)st;
    run("sim:capacity=2GiB,dialect=npu", "large_segment_size_mb:64", 6, 0, 1.0);
}

static void host_backed_blocks_never_overlap(void **st)
{
    (void)st;
    run("sim:capacity=512MiB,memory=host", "", 7, 1, 1.0);
}

static void expandable_segments(void **st)
{
    (void)st;
    run("sim:capacity=2GiB", "expandable_segments:True", 8, 0, 1.0);
    run("sim:capacity=1GiB", "expandable_segments:True,roundup_power2_divisions:4,large_segment_size_mb:32", 9, 0, 1.0);
    /* hbmalloc's page policies: free pages moved to where requests grow, 2 MiB large-pool pages. */
    run("sim:capacity=1GiB", "expandable_segments:True,hbm_remap_free_pages:True,hbm_expandable_page_mb:2", 16, 0, 1.0);
}

static void injected_faults_are_returned_and_leak_nothing(void **st)
{
    (void)st;
    run_ex("sim:capacity=1GiB", "expandable_segments:True", 10, 0, 1.0, 1);
    run_ex("sim:capacity=1GiB", "max_split_size_mb:32", 11, 0, 1.0, 1);
}

static void streams_events_and_private_pools(void **st)
{
    (void)st;
    run_ex2("sim:capacity=2GiB", "", 12, 0, 1.0, 0, 1);
    run_ex2("sim:capacity=1GiB", "expandable_segments:True", 13, 0, 1.0, 0, 1);
    run_ex2("sim:capacity=1GiB", "max_split_size_mb:40", 14, 0, 1.0, 1, 1);
    run_ex2("sim:capacity=256MiB,memory=host", "", 15, 1, 1.0, 0, 1);
}

/* hbm_arena (arena.c): one region first, segments beyond it, under pressure, faults, streams, pools, GC. */
static void the_arena_policy(void **st)
{
    (void)st;
    run("sim:capacity=1GiB", "hbm_arena_mb:256", 17, 0, 1.0);               /* segments beyond the arena */
    run("sim:capacity=512MiB,memory=host", "hbm_arena_mb:128", 18, 1, 1.0); /* blocks never overlap */
    run("sim:capacity=2GiB", "garbage_collection_threshold:0.6,hbm_arena_mb:256", 19, 0, 0.7);
    run_ex("sim:capacity=1GiB", "hbm_arena_fraction:0.5", 20, 0, 1.0, 1); /* device faults */
    run_ex2("sim:capacity=1GiB", "hbm_arena_mb:512", 21, 0, 1.0, 0, 1);   /* streams, events, pools */
    run_ex2("sim:capacity=256MiB,memory=host", "hbm_arena_fraction:0.9", 22, 1, 1.0, 0, 1);
    run_ex2("sim:capacity=1GiB", "expandable_segments:True,hbm_arena_mb:256", 23, 0, 1.0, 1, 1); /* beside VMM */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(default_settings_two_seeds),
        cmocka_unit_test(the_arena_policy),
        cmocka_unit_test(max_split_size_with_memory_pressure),
        cmocka_unit_test(roundup_divisions),
        cmocka_unit_test(gc_under_a_memory_fraction),
        cmocka_unit_test(npu_padding_and_large_segments),
        cmocka_unit_test(host_backed_blocks_never_overlap),
        cmocka_unit_test(expandable_segments),
        cmocka_unit_test(injected_faults_are_returned_and_leak_nothing),
        cmocka_unit_test(streams_events_and_private_pools),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
