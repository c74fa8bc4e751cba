/* test_arena.c: the hbm_arena policy (src/arena.c): one region, every size of its stream best fit in it down to
 * 512 bytes, coalesced across it, kept by empty_cache; segments beyond it; other streams, private pools,
 * expandable segments and a device that cannot give it handled and said. */
#include "helpers.h"

static size_t device_mallocs(hbm_allocator *a)
{
    hbm__sim_counters c;
    hbm__sim_get_counters(sim_of(a), &c);
    return (size_t)c.calls[HBM__OP_MALLOC];
}

static void one_region_serves_every_size_split_to_512_bytes(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=4GiB", "hbm_arena_mb:1024");
    char *tiny = must_malloc(a, 1, 0), *small = must_malloc(a, 700 * 1024, 0), *big = must_malloc(a, 30 * MiB, 0);
    assert_int_equal(device_mallocs(a), 1); /* the arena, nothing else: no 2 MiB or 20 MiB segments */
    hbm_stats s = stats_of(a);
    assert_int_equal(s.arena_bytes, 1024 * MiB);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 1024 * MiB);
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].current, 512 + 700 * 1024 + 30 * MiB);
    assert_int_equal(s.segment[HBM_POOL_ALL].current, 1);
    /* Best fit, 512-byte granules: the blocks lie back to back at the arena's start. */
    assert_ptr_equal(small, tiny + 512);
    assert_ptr_equal(big, small + 700 * 1024);
    assert_valid(a);
    /* Freed in any order, they coalesce into the whole region again; empty_cache keeps it. */
    hbm_free(a, small);
    hbm_free(a, tiny);
    hbm_free(a, big);
    assert_valid(a);
    hbm_snapshot *snap;
    assert_int_equal(hbm_snapshot_take(a, &snap), HBM_OK);
    assert_int_equal(snap->nsegments, 1);
    assert_int_equal(snap->nblocks, 1);
    assert_int_equal(snap->blocks[0].size, 1024 * MiB);
    assert_int_equal(snap->segments[0].is_small, 0);
    hbm_snapshot_free(snap);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    s = stats_of(a);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 1024 * MiB);
    assert_int_equal(s.num_device_free, 0);
    hbm_destroy(a);
}

static void what_does_not_fit_goes_to_segments_which_are_released(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=4GiB", "hbm_arena_mb:64");
    void *p = must_malloc(a, 40 * MiB, 0);
    void *q = must_malloc(a, 40 * MiB, 0); /* 24 MiB left in the arena: a segment */
    void *r = must_malloc(a, 4096, 0);     /* fits in the arena's rest */
    assert_int_equal(device_mallocs(a), 2);
    hbm_free(a, q);
    assert_int_equal(hbm_empty_cache(a), HBM_OK); /* the segment goes back, the arena stays */
    hbm_stats s = stats_of(a);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 64 * MiB);
    assert_int_equal(s.num_device_free, 1);
    hbm_free(a, p);
    hbm_free(a, r);
    assert_valid(a);
    /* An out-of-memory message says what the arena holds. */
    void *in = must_malloc(a, 50 * MiB, 0), *out = NULL;
    assert_int_equal(hbm_malloc(a, 4 * GiB, 0, &out), HBM_ERR_OOM);
    assert_non_null(strstr(hbm_last_error(a), "The hbm_arena of 64.00 MiB holds 14.00 MiB free, the largest piece "
                                              "14.00 MiB."));
    assert_int_equal(hbm_malloc(a, 4 * GiB, 3, &out), HBM_ERR_OOM);
    assert_non_null(strstr(hbm_last_error(a), "(it serves only the stream of the first allocation)"));
    hbm_free(a, in);
    /* Under pressure the OOM retry frees segments, never the arena: 4 GiB - 64 MiB is what a segment can have. */
    void *huge = must_malloc(a, 4 * GiB - 64 * MiB, 0);
    hbm_free(a, huge);
    assert_valid(a);
    hbm_destroy(a);
}

static void other_streams_and_private_pools_use_segments(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=4GiB", "hbm_arena_mb:256");
    void *p = must_malloc(a, 1 * MiB, 7); /* the first allocation's stream owns the arena */
    void *q = must_malloc(a, 1 * MiB, 9); /* another stream: its own segment (a block freed on one stream may
                                              still be in use by its queued work) */
    assert_int_equal(device_mallocs(a), 2);
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    assert_int_equal(hbm_mempool_begin_stream(a, mp, 7), HBM_OK);
    void *r = must_malloc(a, 1 * MiB, 7); /* routed to the private pool: not the arena */
    assert_int_equal(hbm_mempool_end(a, mp), HBM_OK);
    assert_int_equal(device_mallocs(a), 3);
    /* record_stream on an arena block: the block waits for the other stream before the arena reuses it. */
    assert_int_equal(hbm_record_stream(a, p, 9), HBM_OK);
    hbm_free(a, p);
    hbm_free(a, q);
    hbm_free(a, r);
    assert_valid(a);
    assert_int_equal(hbm_mempool_release(a, mp), HBM_OK);
    hbm_destroy(a);
}

static void an_arena_the_device_cannot_give_is_said_and_segments_serve(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_arena_mb:2048");
    void *p = must_malloc(a, 4096, 0);
    assert_non_null(strstr(hbm_warning(a), "hbm_arena: the device could not give an arena of 2.00 GiB (HBM_ERR_OOM): "
                                           "allocations use segments instead"));
    assert_int_equal(stats_of(a).arena_bytes, 0);
    hbm_free(a, p);
    assert_valid(a);
    hbm_destroy(a);
    /* Sized as a share of free memory. */
    a = open_sim("sim:capacity=1GiB", "hbm_arena_fraction:0.5");
    p = must_malloc(a, 4096, 0);
    assert_int_equal(stats_of(a).arena_bytes, 512 * MiB);
    hbm_free(a, p);
    hbm_destroy(a);
    /* A memory fraction lower than the arena: refused the same way. */
    a = open_sim("sim:capacity=1GiB", "hbm_arena_mb:800,per_process_memory_fraction:0.5");
    p = must_malloc(a, 4096, 0);
    assert_non_null(strstr(hbm_warning(a), "exceeds the memory fraction's limit"));
    hbm_free(a, p);
    hbm_destroy(a);
    /* With virtual memory in force, expandable segments do the arena's work: not used, and said. */
    a = open_sim("sim:capacity=1GiB", "expandable_segments:True,hbm_arena_mb:256");
    p = must_malloc(a, 4096, 0);
    assert_non_null(strstr(hbm_warning(a), "hbm_arena is not used: expandable segments are in force"));
    assert_int_equal(stats_of(a).arena_bytes, 0);
    hbm_free(a, p);
    hbm_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_region_serves_every_size_split_to_512_bytes),
        cmocka_unit_test(what_does_not_fit_goes_to_segments_which_are_released),
        cmocka_unit_test(other_streams_and_private_pools_use_segments),
        cmocka_unit_test(an_arena_the_device_cannot_give_is_said_and_segments_serve),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
