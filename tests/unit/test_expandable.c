/* test_expandable.c: expandable segments: growth by pages, unmapping, rollback, fallback, teardown. */
#include "helpers.h"

static hbm__sim_counters sim_counters(hbm_allocator *a)
{
    hbm__sim_counters c;
    hbm__sim_get_counters(sim_of(a), &c);
    return c;
}

/* A large_segment_size_mb past any device (PyTorch has no upper bound) with expandable segments: the page is
 * capped at 2^62 bytes, so rounding it to the granularity cannot wrap to 0 (fuzz_conf found a division by zero);
 * the reservation is refused as out of memory and the allocator stays whole. */
static void an_absurd_large_segment_size_is_an_oom_not_a_crash(void **st)
{
    (void)st;
    hbm_allocator *a =
        open_sim("sim:capacity=8GiB", "expandable_segments:True,large_segment_size_mb:7607903978898995426");
    void *p = NULL;
    assert_int_equal(hbm_malloc(a, 12 * MiB, 0, &p), HBM_ERR_OOM);
    assert_null(p);
    void *small = must_malloc(a, 4096, 0); /* the small pool's 2 MiB pages still work */
    assert_valid(a);
    hbm_free(a, small);
    hbm_destroy(a);
}

static void a_large_request_maps_one_20mib_page_of_a_reservation(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=80GiB", "expandable_segments:True");
    void *p = must_malloc(a, 1536 * 1024, 0);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.expandable_segments, 1);
    assert_int_equal(s.num_expandable_segments, 1);
    assert_int_equal(s.reserved_bytes[HBM_POOL_LARGE].current, 20 * MiB);
    assert_int_equal(s.segment[HBM_POOL_ALL].current, 0); /* expandable segments are not counted, as in PyTorch */
    assert_int_equal(s.inactive_split[HBM_POOL_ALL].current, 0);
    assert_int_equal(s.num_device_alloc, 1);
    hbm__sim_counters c = sim_counters(a);
    assert_int_equal(c.live_reservations, 1);
    assert_int_equal(c.live_handles, 1);
    assert_int_equal(c.mapped_pages, 10);    /* 20 MiB in 2 MiB granules */
    assert_int_equal(c.live_allocations, 0); /* no plain device allocation */
    /* The reservation is 9/8 of the device: the segment holds the pointer. */
    hbm__segment *seg = hbm__segment_find(a, (uintptr_t)p);
    assert_non_null(seg);
    assert_true(seg->expandable);
    assert_int_equal(seg->size, 90 * GiB);
    /* Its page table is made as pages are mapped (issue #38 item 4): 16 entries of the 4,608 pages, then the table
     * doubles as the segment grows. */
    assert_int_equal(seg->npages, 90 * GiB / (20 * MiB));
    assert_int_equal(seg->pages_made, 16);
    void *q = must_malloc(a, 400 * MiB, 0); /* pages 1 to 20 */
    assert_int_equal(seg->pages_made, 32);
    assert_valid(a);
    hbm_free(a, q);
    assert_valid(a);
    hbm_destroy(a);
}

static void small_pool_pages_are_2mib(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "expandable_segments:True");
    must_malloc(a, 4096, 0);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_SMALL].current, 2 * MiB);
    must_malloc(a, MiB, 0);
    must_malloc(a, MiB - 4096, 0); /* fills the rest of the page exactly */
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_SMALL].current, 2 * MiB);
    must_malloc(a, 512, 0);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_SMALL].current, 4 * MiB);
    assert_int_equal(stats_of(a).num_expandable_segments, 1);
    must_malloc(a, 2 * MiB, 0);
    assert_int_equal(stats_of(a).num_expandable_segments, 2); /* one per pool */
    assert_valid(a);
    hbm_destroy(a);
}

static size_t reserved_after_8x16_then_4x32(const char *settings)
{
    hbm_allocator *a = open_sim("sim", settings);
    void *p[8];
    for (int i = 0; i < 8; i++)
        p[i] = must_malloc(a, 16 * MiB, 0);
    for (int i = 0; i < 8; i++)
        hbm_free(a, p[i]);
    for (int i = 0; i < 4; i++)
        must_malloc(a, 32 * MiB, 0);
    assert_valid(a);
    size_t peak = (size_t)stats_of(a).reserved_bytes[HBM_POOL_ALL].peak;
    hbm_destroy(a);
    return peak;
}

static void expandable_segments_reuse_freed_memory_across_sizes(void **st)
{
    (void)st;
    /* The PyTorch devlog's walkthrough (pytorch/devlogs content/eager/2026-06-01-cuda-caching-allocator.md, ezyang):
     * 8 x 16 MiB, free, 4 x 32 MiB
     * reserves 256 MiB with whole segments, 140 MiB (7 pages of 20 MiB) with expandable ones. */
    assert_int_equal(reserved_after_8x16_then_4x32(""), 256 * MiB);
    assert_int_equal(reserved_after_8x16_then_4x32("expandable_segments:True"), 140 * MiB);
}

static void empty_cache_unmaps_free_pages_and_releases_empty_reservations(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "expandable_segments:True");
    void *x = must_malloc(a, 10 * MiB, 0);
    void *y = must_malloc(a, 10 * MiB, 0); /* x and y share page 0 */
    void *z = must_malloc(a, 30 * MiB, 0); /* pages 1-2 */
    hbm_free(a, z);
    hbm_free(a, x);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 20 * MiB); /* page 0 still holds y */
    assert_int_equal(s.num_device_free, 1);                             /* one unmap_block */
    assert_int_equal(sim_counters(a).live_handles, 1);
    assert_valid(a);
    hbm_free(a, y);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    s = stats_of(a);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 0);
    assert_int_equal(s.num_expandable_segments, 0);
    hbm__sim_counters c = sim_counters(a);
    assert_int_equal(c.live_reservations, 0);
    assert_int_equal(c.live_handles, 0);
    assert_int_equal(c.mapped_pages, 0);
    assert_valid(a);
    hbm_destroy(a);
}

static void a_partly_free_page_keeps_its_mapped_sliver(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "expandable_segments:True");
    void *x = must_malloc(a, 30 * MiB, 0); /* pages 0-1, 10 MiB free tail on page 1 */
    void *y = must_malloc(a, 5 * MiB, 0);  /* in the tail */
    hbm_free(a, x);                        /* page 0 fully free, page 1 half */
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 20 * MiB);
    assert_valid(a);
    /* The freed page is mapped again for the next request at the lowest address. */
    void *z = must_malloc(a, 20 * MiB, 0);
    assert_ptr_equal(z, x);
    hbm_free(a, y);
    hbm_free(a, z);
    assert_valid(a);
    hbm_destroy(a);
}

static void each_stream_gets_its_own_segment(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "expandable_segments:True");
    void *p = must_malloc(a, 8 * MiB, 1);
    void *q = must_malloc(a, 8 * MiB, 2);
    assert_ptr_not_equal(hbm__segment_find(a, (uintptr_t)p), hbm__segment_find(a, (uintptr_t)q));
    assert_int_equal(stats_of(a).num_expandable_segments, 2);
    hbm_free(a, p);
    assert_ptr_not_equal(must_malloc(a, 8 * MiB, 2), p); /* a free block serves only its stream */
    assert_valid(a);
    hbm_destroy(a);
}

/* [A live][P1 unmapped][C free, mapped][P3 unmapped][E live]: a 60 MiB request must map P1 and P3. */
static hbm_allocator *holey(void **blocks)
{
    hbm_allocator *a = open_sim("sim", "expandable_segments:True");
    for (int i = 0; i < 5; i++)
        blocks[i] = must_malloc(a, 20 * MiB, 0);
    hbm_free(a, blocks[1]);
    hbm_free(a, blocks[3]);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    hbm_free(a, blocks[2]);
    assert_valid(a);
    return a;
}

static void a_request_can_map_several_holes_at_the_lowest_address(void **st)
{
    (void)st;
    void *b[5];
    hbm_allocator *a = holey(b);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 60 * MiB);
    void *p = must_malloc(a, 60 * MiB, 0);
    assert_ptr_equal(p, b[1]);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 100 * MiB);
    assert_valid(a);
    hbm_destroy(a);
}

static void a_failure_part_way_rolls_back(void **st)
{
    (void)st;
    static const struct {
        int kind;
        uint64_t nth;
    } faults[] = {{HBM__OP_CREATE, 2}, {HBM__OP_MAP, 2}, {HBM__OP_ACCESS, 2}, {HBM__OP_CREATE, 1}};
    for (size_t f = 0; f < sizeof faults / sizeof faults[0]; f++) {
        void *b[5];
        hbm_allocator *a = holey(b);
        hbm_stats before = stats_of(a);
        hbm__sim_counters cb = sim_counters(a);
        hbm__sim_fault rule = {.kind = faults[f].kind,
                               .nth = faults[f].nth,
                               .min_size = 0,
                               .max_size = SIZE_MAX,
                               .code = HBM__SIM_ERR_INJECTED};
        hbm__sim_add_fault(sim_of(a), &rule);
        void *p;
        assert_int_equal(hbm_malloc(a, 60 * MiB, 0, &p), HBM_ERR_BACKEND);
        assert_non_null(strstr(hbm_last_error(a), "injected"));
        hbm_stats after = stats_of(a);
        assert_int_equal(after.reserved_bytes[HBM_POOL_ALL].current, before.reserved_bytes[HBM_POOL_ALL].current);
        assert_int_equal(after.allocated_bytes[HBM_POOL_ALL].current, before.allocated_bytes[HBM_POOL_ALL].current);
        hbm__sim_counters ca = sim_counters(a);
        assert_int_equal(ca.live_handles, cb.live_handles);
        assert_int_equal(ca.mapped_pages, cb.mapped_pages);
        assert_valid(a);
        hbm__sim_clear_faults(sim_of(a));
        assert_ptr_equal(must_malloc(a, 60 * MiB, 0), b[1]); /* and then it works */
        assert_valid(a);
        hbm_destroy(a);
    }
}

static void out_of_memory_while_mapping_goes_through_the_retry_ladder(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "expandable_segments:True");
    hbm_free(a, must_malloc(a, 60 * MiB, 1)); /* cached on stream 1 */
    void *p = must_malloc(a, 60 * MiB, 2);    /* needs stream 1's pages unmapped first */
    assert_non_null(p);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 60 * MiB);
    assert_int_equal(sim_counters(a).live_reservations, 1); /* stream 1's emptied reservation is gone */
    void *q;
    assert_int_equal(hbm_malloc(a, 60 * MiB, 2, &q), HBM_ERR_OOM);
    assert_non_null(strstr(hbm_last_error(a), "does not fit"));
    assert_valid(a);
    hbm_destroy(a);
}

static void unsupported_device_falls_back_with_one_clear_warning(void **st)
{
    (void)st;
    setenv("HBMALLOC_QUIET", "1", 1);
    hbm_allocator *a = open_sim("sim:firmware=22.0.3,dialect=npu", "expandable_segments:True");
    const char *w = hbm_warning(a);
    assert_non_null(strstr(w, "expandable_segments:True is not supported by the sim backend on device 0"));
    assert_non_null(strstr(w, "firmware 22.0.3 predates virtual-memory support"));
    assert_non_null(strstr(w, "HDK >= 23.0.0"));
    assert_non_null(strstr(w, "Using expandable_segments:False instead"));
    assert_non_null(strstr(w, "Check the device with: hbmalloc doctor"));
    assert_non_null(strstr(w, "hbmalloc conf expandable_segments:True --backend 'sim:firmware=22.0.3,dialect=npu'"));
    assert_null(strstr(w, "supportted"));
    hbm_stats s = stats_of(a);
    assert_int_equal(s.expandable_segments, 0);
    must_malloc(a, 1536 * 1024, 0);
    s = stats_of(a);
    assert_int_equal(s.segment[HBM_POOL_ALL].current, 1); /* a whole segment, as without the setting */
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 20 * MiB);
    char out[4096];
    hbm_settings_describe(a, out, sizeof out);
    assert_non_null(strstr(out, "expandable_segments: True\n"));
    assert_non_null(strstr(out, "expandable_segments in force: False (fallback: firmware 22.0.3"));
    assert_valid(a);
    hbm_destroy(a);

    a = open_sim("sim:vmm=off", "expandable_segments:True");
    assert_non_null(strstr(hbm_warning(a), "no virtual-memory support (sim vmm=off)"));
    hbm_destroy(a);
    a = open_sim("sim:vmm=off", "");
    assert_string_equal(hbm_warning(a), ""); /* not asked for: nothing to say */
    hbm_destroy(a);
    a = open_sim("sim:firmware=23.0.1", "expandable_segments:True");
    assert_string_equal(hbm_warning(a), "");
    assert_int_equal(stats_of(a).expandable_segments, 1);
    hbm_destroy(a);
    unsetenv("HBMALLOC_QUIET");
}

static void destroy_returns_every_reservation_handle_and_mapping(void **st)
{
    (void)st;
    for (int with_fault = 0; with_fault < 2; with_fault++) {
        hbm_backend *b;
        char err[256];
        assert_int_equal(hbm_backend_open(&b, "sim:capacity=4GiB", err, sizeof err), HBM_OK);
        hbm_allocator *a;
        assert_int_equal(hbm_create(&a, b, 0, "expandable_segments:True", err, sizeof err), HBM_OK);
        if (with_fault) {
            hbm__sim_fault rule = {
                .kind = HBM__OP_MAP, .nth = 7, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
            hbm__sim_add_fault(hbm__sim_ctx(b), &rule);
        }
        int failures = 0;
        for (int i = 0; i < 60; i++) {
            void *p;
            if (hbm_malloc(a, (size_t)(i % 7 + 1) * 3 * MiB + 512 * (size_t)i, (hbm_stream)(i % 3), &p) != HBM_OK)
                failures++;
            else if (i % 4 == 0)
                hbm_free(a, p);
            assert_valid(a);
        }
        assert_int_equal(failures, with_fault);
        hbm__sim_counters c;
        hbm__sim_get_counters(hbm__sim_ctx(b), &c);
        assert_true(c.live_reservations > 0 && c.live_handles > 0);
        hbm_destroy(a);
        assert_sim_empty(b);
        hbm_backend_close(b);
    }
}

static void variable_length_finetuning_keeps_reserved_near_allocated(void **st)
{
    (void)st;
    /* Steps with a new sequence length each: whole segments cached for one
     * length rarely fit the next; expandable segments remap freed pages. */
    hbm_allocator *native = open_sim("sim", "");
    hbm_allocator *exp = open_sim("sim", "expandable_segments:True");
    hbm_allocator *both[2] = {native, exp};
    uint64_t rng = 12345;
    enum { LIVE = 64 };
    void *live[2][LIVE] = {{0}};
    for (int step = 0; step < 30; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        size_t seq = 128 + (size_t)(rng >> 33) % 1920;
        for (int k = 0; k < 2; k++) {
            for (int l = 0; l < LIVE; l++)
                live[k][l] = must_malloc(both[k], seq * (size_t)(l % 4 + 1) * 16384, 0);
            for (int l = LIVE; l-- > 0;)
                hbm_free(both[k], live[k][l]);
        }
    }
    hbm_stats n = stats_of(native), e = stats_of(exp);
    double rn = (double)n.reserved_bytes[0].peak / (double)n.allocated_bytes[0].peak;
    double re = (double)e.reserved_bytes[0].peak / (double)e.allocated_bytes[0].peak;
    print_message("  native reserved/allocated %.3f, expandable %.3f\n", rn, re);
    assert_true(rn > 1.2);
    /* Within peak allocated plus about one page per pool. */
    assert_true((size_t)e.reserved_bytes[0].peak <= (size_t)e.allocated_bytes[0].peak + 20 * MiB + 2 * MiB);
    assert_valid(native);
    assert_valid(exp);
    hbm_destroy(native);
    hbm_destroy(exp);
}

static void a_block_waiting_on_another_stream_is_not_part_of_a_growth_chain(void **st)
{
    (void)st;
    /* Found by the thread stress test: a freed block still waiting on an event at the
     * mapped frontier was taken as the start of the chain to grow. */
    hbm_allocator *a = open_sim("sim", "expandable_segments:True");
    hbm__sim_stream_hold(sim_of(a), 0, 2, 1);
    must_malloc(a, 10 * MiB, 0);
    void *b = must_malloc(a, 10 * MiB, 0); /* page 0 is full */
    hbm_record_stream(a, b, 2);
    hbm_free(a, b);                       /* pending, at the end of the mapped pages */
    void *c = must_malloc(a, 8 * MiB, 0); /* no free block fits: grow, never into the pending block */
    assert_ptr_not_equal(c, b);
    hbm__segment *seg = hbm__segment_find(a, (uintptr_t)c);
    assert_ptr_equal(c, (void *)(seg->addr + 20 * MiB)); /* page 1 */
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 40 * MiB);
    assert_valid(a);
    hbm__sim_stream_hold(sim_of(a), 0, 2, 0);
    hbm_free(a, c);
    must_malloc(a, 512, 0); /* polls the event */
    assert_valid(a);
    hbm_destroy(a);
}

static size_t reserved_after_hole(const char *settings)
{
    hbm_allocator *a = open_sim("sim", settings);
    void *x = must_malloc(a, 200 * MiB, 0);
    must_malloc(a, 100 * MiB, 0);
    hbm_free(a, x);               /* a 200 MiB hole, mapped and free */
    must_malloc(a, 300 * MiB, 0); /* does not fit the hole */
    assert_valid(a);
    size_t r = (size_t)stats_of(a).reserved_bytes[HBM_POOL_ALL].peak;
    hbm_destroy(a);
    return r;
}

static void remap_policy_moves_free_pages_instead_of_growing(void **st)
{
    (void)st;
    assert_int_equal(reserved_after_hole("expandable_segments:True"), 600 * MiB); /* PyTorch's behaviour */
    assert_int_equal(reserved_after_hole("expandable_segments:True,hbm_remap_free_pages:True"), 400 * MiB);
}

static void remap_policy_looks_up_the_chain_again_after_moving_pages(void **st)
{
    (void)st;
    /* Found by fuzz_ops: moving a free page next to the unmapped range chosen for
     * growth merged that range away, and the chain pointed at a recycled block. */
    hbm_allocator *a = open_sim("sim", "expandable_segments:True,hbm_remap_free_pages:True");
    void *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = must_malloc(a, 20 * MiB, 0); /* pages 0..3 */
    hbm_free(a, p[1]);
    hbm_free(a, p[2]);
    assert_int_equal(hbm_empty_cache(a), HBM_OK); /* pages 1-2 unmapped */
    hbm_free(a, p[3]);                            /* page 3 free and mapped, next to them */
    void *q = must_malloc(a, 30 * MiB, 0);        /* grows into pages 1-2, moving page 3's handle */
    assert_ptr_equal(q, p[1]);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 60 * MiB);
    assert_valid(a);
    hbm_destroy(a);
}

static void remap_policy_returns_the_other_pools_free_pages_first(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "expandable_segments:True,hbm_remap_free_pages:True");
    void *small[40];
    for (int i = 0; i < 40; i++)
        small[i] = must_malloc(a, MiB, 0); /* 20 small pages */
    for (int i = 0; i < 40; i++)
        hbm_free(a, small[i]);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_SMALL].current, 40 * MiB);
    must_malloc(a, 30 * MiB, 0); /* two large pages: 40 MiB of small pages go back first */
    hbm_stats s = stats_of(a);
    assert_int_equal(s.reserved_bytes[HBM_POOL_SMALL].current, 0);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].peak, 40 * MiB);
    assert_valid(a);
    hbm_destroy(a);
}

/* hbm_expandable_page_mb: the large pool maps in pages of that size instead of 20 MiB. */
static void a_smaller_large_page_maps_only_what_the_request_needs(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=80GiB", "expandable_segments:True,hbm_expandable_page_mb:2");
    void *p = must_malloc(a, 3 * MiB, 0);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.reserved_bytes[HBM_POOL_LARGE].current, 4 * MiB); /* two 2 MiB pages, not one of 20 */
    assert_int_equal(sim_counters(a).live_handles, 2);
    void *q = must_malloc(a, 25 * MiB, 0); /* the 1 MiB left in page 2, then 12 pages more: 28 MiB for 28 MiB */
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_LARGE].current, 28 * MiB);
    hbm_free(a, q);
    hbm_free(a, p);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(sim_counters(a).live_handles, 0);
    assert_valid(a);
    hbm_destroy(a);
    /* The same requests with PyTorch's page: 20 MiB, then 40 MiB. */
    a = open_sim("sim:capacity=80GiB", "expandable_segments:True");
    must_malloc(a, 3 * MiB, 0);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_LARGE].current, 20 * MiB);
    must_malloc(a, 25 * MiB, 0);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_LARGE].current, 40 * MiB);
    hbm_destroy(a);
}

/* getBaseAllocation: a plain segment has one device allocation to name; an expandable one has none, and
 * PyTorch refuses with this text (CUDACachingAllocator.cpp getBaseAllocation). */
static void the_base_of_a_block_is_its_segment_and_expandable_ones_refuse(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    void *p = must_malloc(a, 3 * MiB, 0), *q = must_malloc(a, 5 * MiB, 0);
    void *base = NULL;
    size_t size = 0;
    assert_int_equal(hbm_segment_of(a, q, &base, &size), HBM_OK);
    assert_ptr_equal(base, p); /* both from one 20 MiB segment, p at its start */
    assert_int_equal(size, 20 * MiB);
    assert_int_equal(hbm_segment_of(a, (char *)q + 512, &base, &size), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "not the start of a live block"));
    hbm_free(a, p);
    hbm_free(a, q);
    hbm_destroy(a);
    a = open_sim("sim:capacity=1GiB", "expandable_segments:True");
    p = must_malloc(a, 3 * MiB, 0);
    assert_int_equal(hbm_segment_of(a, p, &base, &size), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "Tensors allocated with expandable_segments=True cannot be shared "
                                              "between processes"));
    hbm_free(a, p);
    hbm_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_smaller_large_page_maps_only_what_the_request_needs),
        cmocka_unit_test(the_base_of_a_block_is_its_segment_and_expandable_ones_refuse),
        cmocka_unit_test(a_large_request_maps_one_20mib_page_of_a_reservation),
        cmocka_unit_test(an_absurd_large_segment_size_is_an_oom_not_a_crash),
        cmocka_unit_test(small_pool_pages_are_2mib),
        cmocka_unit_test(expandable_segments_reuse_freed_memory_across_sizes),
        cmocka_unit_test(empty_cache_unmaps_free_pages_and_releases_empty_reservations),
        cmocka_unit_test(a_partly_free_page_keeps_its_mapped_sliver),
        cmocka_unit_test(each_stream_gets_its_own_segment),
        cmocka_unit_test(a_request_can_map_several_holes_at_the_lowest_address),
        cmocka_unit_test(a_failure_part_way_rolls_back),
        cmocka_unit_test(out_of_memory_while_mapping_goes_through_the_retry_ladder),
        cmocka_unit_test(unsupported_device_falls_back_with_one_clear_warning),
        cmocka_unit_test(destroy_returns_every_reservation_handle_and_mapping),
        cmocka_unit_test(variable_length_finetuning_keeps_reserved_near_allocated),
        cmocka_unit_test(a_block_waiting_on_another_stream_is_not_part_of_a_growth_chain),
        cmocka_unit_test(remap_policy_moves_free_pages_instead_of_growing),
        cmocka_unit_test(remap_policy_looks_up_the_chain_again_after_moving_pages),
        cmocka_unit_test(remap_policy_returns_the_other_pools_free_pages_first),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
