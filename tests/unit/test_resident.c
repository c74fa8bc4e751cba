/* test_resident.c: what still holds a device's memory while pools sleep (src/core/resident.c, hbm_resident_get), on
 * the simulated device: others=SIZE is memory other processes hold there, which hbmalloc must call outside. */
#include "helpers.h"

static hbm_mempool tagged(hbm_allocator *a, const char *tag)
{
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    if (hbm_pool_tag(a, mp, tag, 0) != HBM_OK)
        fail_msg("hbm_pool_tag(%s): %s", tag, hbm_last_error(a));
    return mp;
}

static void *in_pool(hbm_allocator *a, hbm_mempool mp, size_t n)
{
    void *p = NULL;
    hbm_status rc = hbm_mempool_malloc(a, mp, n, 0, &p);
    if (rc != HBM_OK)
        fail_msg("hbm_mempool_malloc(%zu) = %s: %s", n, hbm_status_name(rc), hbm_last_error(a));
    return p;
}

static hbm_resident resident(hbm_allocator *a)
{
    hbm_resident r;
    assert_int_equal(hbm_resident_get(a, &r), HBM_OK);
    /* The split adds up to what the statistics call reserved, and the pages asleep to theirs. */
    hbm_stats s = stats_of(a);
    assert_int_equal(r.reserved, s.reserved_bytes[HBM_POOL_ALL].current);
    assert_int_equal(r.reserved, r.asleep_reserved + r.awake_reserved + r.graph_reserved + r.default_reserved);
    assert_int_equal(r.asleep_bytes, s.asleep_bytes);
    return r;
}

static const char *describe(const hbm_resident *r)
{
    static char buf[1024];
    size_t n = hbm_resident_describe(r, buf, sizeof buf);
    assert_int_equal(n, strlen(buf));
    return buf;
}

/* Where `what` is in `text` (fails the test when it is not there): to check the order of the holders. */
static size_t at(const char *text, const char *what)
{
    const char *p = strstr(text, what);
    if (!p)
        fail_msg("'%s' is not in: %s", what, text);
    return (size_t)(p - text);
}

/* The case: a job put one pool to sleep and the device still looks full. Every holder is apart and exact:
 * the pool asleep (its pages given back), the one left awake, a graph pool, the default pools' tensors and cache,
 * and the memory other processes hold, which is the largest and comes first. */
static void every_holder_is_counted_apart_and_the_largest_comes_first(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB,others=2GiB", "");
    hbm_mempool weights = tagged(a, "weights"), kv = tagged(a, "kv_cache"), graph;
    void *w = in_pool(a, weights, 100 * MiB); /* 5 pages of 20 MiB */
    void *k = in_pool(a, kv, 60 * MiB);       /* 3 pages */
    assert_int_equal(hbm_mempool_create(a, &graph), HBM_OK);
    void *g = in_pool(a, graph, 30 * MiB);      /* a 30 MiB segment of its own */
    void *cached = must_malloc(a, 50 * MiB, 0); /* a 50 MiB segment, freed whole: the cache */
    void *live = must_malloc(a, 5 * MiB, 0);    /* a 20 MiB segment (kLargeBuffer), 15 MiB of it free */
    hbm_free(a, cached);
    assert_int_equal(hbm_pool_sleep(a, weights, NULL), HBM_OK);
    assert_valid(a);

    hbm_resident r = resident(a);
    assert_int_equal(r.device, 0);
    assert_int_equal(r.device_total, 8 * GiB);
    assert_int_equal(r.device_used, 2 * GiB + 160 * MiB); /* others + kv_cache 60 + graph 30 + default 70 */
    assert_int_equal(r.outside, 2 * GiB);
    assert_int_equal(r.reserved, 160 * MiB);
    assert_int_equal(r.asleep_reserved, 0);
    assert_int_equal(r.asleep_bytes, 100 * MiB);
    assert_int_equal(r.awake_reserved, 60 * MiB);
    assert_int_equal(r.awake_live, 60 * MiB);
    assert_int_equal(r.graph_reserved, 30 * MiB);
    assert_int_equal(r.graph_live, 30 * MiB);
    assert_int_equal(r.default_reserved, 70 * MiB);
    assert_int_equal(r.default_live, 5 * MiB);
    assert_int_equal(r.cache, 65 * MiB);
    assert_int_equal(r.releasable, 50 * MiB); /* the whole free segment; not the rest of the split one */
    assert_int_equal(r.asleep_pools, 1);
    assert_int_equal(r.awake_pools, 1);
    assert_int_equal(r.graph_pools, 1);
    assert_string_equal(r.awake_tags, "kv_cache 60.00 MiB");

    const char *s = describe(&r);
    assert_string_equal(s, "device 0: 2.16 GiB used of 8.00 GiB, hbmalloc holds 160.00 MiB; largest first: 2.00 GiB "
                           "outside hbmalloc (other processes, the runtime's context, communicators' buffers, other "
                           "allocators), 65.00 MiB cached by hbmalloc (empty_cache() gives back 50.00 MiB of it), "
                           "60.00 MiB in 1 awake pool (kv_cache 60.00 MiB), 30.00 MiB in 1 untagged private pool "
                           "(graph pools: they do not sleep), 5.00 MiB in tensors of the default pools; 1 pool asleep "
                           "gave back 100.00 MiB");

    /* releasable is what empty_cache gives back: exactly. */
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    hbm_resident after = resident(a);
    assert_int_equal(after.default_reserved, r.default_reserved - r.releasable);
    assert_int_equal(after.cache, 15 * MiB);
    assert_int_equal(after.releasable, 0);
    assert_int_equal(after.outside, 2 * GiB);
    assert_int_equal(after.device_used, r.device_used - (int64_t)r.releasable);
    s = describe(&after);
    assert_true(at(s, "15.00 MiB cached by hbmalloc (free space in segments in use: empty_cache() cannot give it "
                      "back)") < at(s, "5.00 MiB in tensors"));

    /* Awake again: nothing asleep, the pool's pages held again and named. */
    assert_int_equal(hbm_pool_wake(a, weights, NULL), HBM_OK);
    r = resident(a);
    assert_int_equal(r.asleep_pools, 0);
    assert_int_equal(r.asleep_bytes, 0);
    assert_int_equal(r.awake_pools, 2);
    assert_int_equal(r.awake_reserved, 160 * MiB);
    assert_string_equal(r.awake_tags, "weights 100.00 MiB, kv_cache 60.00 MiB");
    assert_non_null(strstr(describe(&r), "160.00 MiB in 2 awake pools (weights 100.00 MiB, kv_cache 60.00 MiB)"));
    assert_non_null(strstr(describe(&r), "; no pool is asleep"));
    hbm_free(a, w);
    hbm_free(a, k);
    hbm_free(a, g);
    hbm_free(a, live);
    assert_valid(a);
    hbm_destroy(a);
}

/* Without other processes the largest holder is hbmalloc's: here the pools the job forgot to put to sleep. Pools that
 * share a tag are summed under it. */
static void awake_pools_are_named_by_tag_the_largest_first(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB", "");
    hbm_mempool kv1 = tagged(a, "kv_cache"), kv2 = tagged(a, "kv_cache"), w = tagged(a, "weights");
    void *p1 = in_pool(a, kv1, 100 * MiB), *p2 = in_pool(a, kv2, 100 * MiB), *p3 = in_pool(a, w, 40 * MiB);
    void *d = must_malloc(a, 20 * MiB, 0);
    hbm_resident r = resident(a);
    assert_int_equal(r.outside, 0);
    assert_int_equal(r.device_used, 260 * MiB);
    assert_int_equal(r.awake_pools, 3);
    assert_int_equal(r.awake_reserved, 240 * MiB);
    assert_int_equal(r.default_live, 20 * MiB);
    assert_int_equal(r.cache, 0);
    assert_string_equal(r.awake_tags, "kv_cache 200.00 MiB, weights 40.00 MiB");
    assert_string_equal(describe(&r), "device 0: 260.00 MiB used of 8.00 GiB, hbmalloc holds 260.00 MiB; largest "
                                      "first: 240.00 MiB in 3 awake pools (kv_cache 200.00 MiB, weights 40.00 MiB), "
                                      "20.00 MiB in tensors of the default pools; no pool is asleep");
    /* A sentence cut to its buffer stays a string. */
    char small[24];
    assert_int_equal(hbm_resident_describe(&r, small, sizeof small), sizeof small - 1);
    assert_string_equal(small, "device 0: 260.00 MiB us");
    hbm_free(a, p1);
    hbm_free(a, p2);
    hbm_free(a, p3);
    hbm_free(a, d);
    hbm_destroy(a);
}

/* With expandable segments the cache is pages: empty_cache gives back the free pages no tensor shares. */
static void with_expandable_segments_the_free_whole_pages_are_releasable(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB", "expandable_segments:True");
    void *p = must_malloc(a, 30 * MiB, 0), *q = must_malloc(a, 30 * MiB, 0); /* pages 0-2 of 20 MiB */
    hbm_free(a, p); /* [0, 30 MiB) free: page 0 whole, page 1 shared with q */
    hbm_resident r = resident(a);
    assert_int_equal(r.default_reserved, 60 * MiB);
    assert_int_equal(r.default_live, 30 * MiB);
    assert_int_equal(r.cache, 30 * MiB);
    assert_int_equal(r.releasable, 20 * MiB);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    hbm_resident after = resident(a);
    assert_int_equal(after.default_reserved, 40 * MiB);
    assert_int_equal(after.releasable, 0);
    hbm_free(a, q);
    hbm_destroy(a);
}

/* A sleep the device stopped part-way leaves pages of an asleep pool mapped: held, and said with the way out. */
static void pages_left_mapped_by_a_stopped_sleep_are_still_held(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB", "");
    hbm_mempool kv = tagged(a, "kv_cache");
    void *p = in_pool(a, kv, 100 * MiB);
    hbm__sim_fault unmap = {
        .kind = HBM__OP_UNMAP, .nth = 3, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
    assert_int_equal(hbm__sim_add_fault(sim_of(a), &unmap), 0);
    assert_int_equal(hbm_pool_sleep(a, kv, NULL), HBM_ERR_BACKEND);
    hbm__sim_clear_faults(sim_of(a));
    hbm_resident r = resident(a);
    assert_int_equal(r.asleep_pools, 1);
    assert_int_equal(r.awake_pools, 0);
    assert_int_equal(r.asleep_bytes, 40 * MiB); /* two pages given back before the third unmap failed */
    assert_int_equal(r.asleep_reserved, 60 * MiB);
    assert_int_equal(r.device_used, 60 * MiB);
    assert_string_equal(r.awake_tags, "");
    const char *s = describe(&r);
    assert_int_equal(at(s, "largest first: 60.00 MiB still mapped in 1 pool being put to sleep, woken, or whose "
                           "sleep stopped part-way (sleep again); 1 pool asleep gave back 40.00 MiB"),
                     at(s, "largest first"));
    assert_int_equal(hbm_pool_sleep(a, kv, NULL), HBM_OK);
    r = resident(a);
    assert_int_equal(r.asleep_reserved, 0);
    assert_int_equal(r.asleep_bytes, 100 * MiB);
    assert_int_equal(r.device_used, 0);
    assert_string_equal(describe(&r), "device 0: 0 bytes used of 8.00 GiB, hbmalloc holds 0 bytes; nothing holds "
                                      "memory; 1 pool asleep gave back 100.00 MiB");
    hbm_free(a, p);
    hbm_destroy(a);
}

/* The runtime's memory query fails (a wedged driver, a lost context): the figures hbmalloc has are still given, the
 * device's used memory and what lies outside are unknown, and the call is not an error. */
static void a_failed_memory_query_leaves_used_unknown_without_an_error(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB,others=2GiB", "");
    void *p = must_malloc(a, 50 * MiB, 0);
    hbm__sim_fault info = {
        .kind = HBM__OP_INFO, .nth = 0, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
    assert_int_equal(hbm__sim_add_fault(sim_of(a), &info), 0);
    hbm_resident r;
    assert_int_equal(hbm_resident_get(a, &r), HBM_OK);
    assert_string_equal(hbm_last_error(a), ""); /* the last error stays the caller's */
    assert_int_equal(r.device_used, -1);
    assert_int_equal(r.outside, -1);
    assert_int_equal(r.device_total, 8 * GiB); /* the capacity read at create */
    assert_int_equal(r.reserved, 50 * MiB);
    assert_int_equal(r.default_live, 50 * MiB);
    assert_string_equal(describe(&r), "device 0: used memory unknown (the runtime's query failed), hbmalloc holds "
                                      "50.00 MiB; largest first: 50.00 MiB in tensors of the default pools; no pool "
                                      "is asleep");
    hbm__sim_clear_faults(sim_of(a));
    assert_int_equal(hbm_resident_get(a, &r), HBM_OK);
    assert_int_equal(r.device_used, 2 * GiB + 50 * MiB);
    assert_int_equal(r.outside, 2 * GiB);
    assert_int_equal(hbm_resident_get(NULL, &r), HBM_ERR_INVALID);
    assert_int_equal(hbm_resident_get(a, NULL), HBM_ERR_INVALID);
    assert_int_equal(hbm_resident_describe(&r, NULL, 0), 0);
    hbm_free(a, p);
    hbm_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_holder_is_counted_apart_and_the_largest_comes_first),
        cmocka_unit_test(awake_pools_are_named_by_tag_the_largest_first),
        cmocka_unit_test(with_expandable_segments_the_free_whole_pages_are_releasable),
        cmocka_unit_test(pages_left_mapped_by_a_stopped_sleep_are_still_held),
        cmocka_unit_test(a_failed_memory_query_leaves_used_unknown_without_an_error),
    };
    setenv("HBMALLOC_QUIET", "1", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
