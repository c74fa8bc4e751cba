/* test_engine.c: PyTorch's caching policy, rule by rule (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp: the
 * constants and round_size, the pools, get_free_block, should_split, free_block, memory_stats, the OOM message,
 * set_memory_fraction; docs/POLICY.md cites the lines). */
#include "helpers.h"

static hbm__conf defaults(void)
{
    hbm__conf c;
    hbm__conf_defaults(&c, HBM_DIALECT_CUDA);
    return c;
}

static void round_size_matches_pytorch(void **st)
{
    (void)st;
    hbm__conf c = defaults();
    assert_int_equal(hbm__round_size(&c, 1), 512);
    assert_int_equal(hbm__round_size(&c, 512), 512);
    assert_int_equal(hbm__round_size(&c, 513), 1024);
    assert_int_equal(hbm__round_size(&c, 1200), 1536);
    for (int k = 0; k < HBM__ROUNDUP_INTERVALS; k++)
        c.roundup_divisions[k] = 4;
    /* The docs' 1200 -> 1280 example holds in MiB; in bytes the 512*d guard rounds to 512. */
    assert_int_equal(hbm__round_size(&c, 1200 * MiB), 1280 * MiB);
    assert_int_equal(hbm__round_size(&c, 1200), 1536);
    assert_int_equal(hbm__round_size(&c, 1024 * MiB), 1024 * MiB); /* powers of two stay */
    assert_int_equal(hbm__round_size(&c, 1025 * MiB), 1280 * MiB);
    assert_int_equal(hbm__round_size(&c, 3000), 3072); /* floor 2048, step 512 */
}

static void allocation_size_picks_segment_size(void **st)
{
    (void)st;
    hbm__conf c = defaults();
    assert_int_equal(hbm__allocation_size(&c, 512), 2 * MiB);
    assert_int_equal(hbm__allocation_size(&c, MiB), 2 * MiB);
    assert_int_equal(hbm__allocation_size(&c, MiB + 512), 20 * MiB);
    assert_int_equal(hbm__allocation_size(&c, 10 * MiB - 512), 20 * MiB);
    assert_int_equal(hbm__allocation_size(&c, 10 * MiB), 10 * MiB);
    assert_int_equal(hbm__allocation_size(&c, 11 * MiB + 512), 12 * MiB);
    c.large_segment_size = 64 * MiB;
    assert_int_equal(hbm__allocation_size(&c, 3 * MiB), 64 * MiB);
    c.page_size_1g = true;
    assert_int_equal(hbm__allocation_size(&c, 3 * MiB), GiB);
    assert_int_equal(hbm__allocation_size(&c, GiB + 512), 2 * GiB);
    assert_int_equal(hbm__allocation_size(&c, 4096), 2 * MiB); /* small pool unaffected */
}

static void small_requests_share_one_2mib_segment(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    void *p[4];
    for (int i = 0; i < 4; i++)
        p[i] = must_malloc(a, 512 * 1024, 0);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.segment[HBM_POOL_SMALL].current, 1);
    assert_int_equal(s.reserved_bytes[HBM_POOL_SMALL].current, 2 * MiB);
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].current, 2 * MiB);
    assert_int_equal(s.segment[HBM_POOL_LARGE].current, 0);
    for (int i = 1; i < 4; i++)
        assert_ptr_equal((char *)p[i], (char *)p[0] + i * 512 * 1024);
    assert_valid(a);
    hbm_destroy(a);
}

static void mid_size_request_takes_a_20mib_segment_and_splits(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    must_malloc(a, 1536 * 1024, 0);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.reserved_bytes[HBM_POOL_LARGE].current, 20 * MiB);
    assert_int_equal(s.allocated_bytes[HBM_POOL_LARGE].current, 1536 * 1024);
    assert_int_equal(s.inactive_split[HBM_POOL_LARGE].current, 1);
    assert_int_equal(s.inactive_split_bytes[HBM_POOL_LARGE].current, 20 * MiB - 1536 * 1024);
    assert_valid(a);
    hbm_destroy(a);
}

static void large_pool_keeps_up_to_1mib_of_slack_in_the_block(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    must_malloc(a, 1536 * 1024, 0);        /* leaves 18.5 MiB free in the segment */
    void *q = must_malloc(a, 18 * MiB, 0); /* remainder 0.5 MiB <= 1 MiB: not split */
    assert_int_equal(hbm_block_size(a, q), 18 * MiB + 512 * 1024);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].current, 20 * MiB);
    assert_int_equal(s.requested_bytes[HBM_POOL_ALL].current, 18 * MiB + 1536 * 1024);
    assert_int_equal(s.inactive_split[HBM_POOL_ALL].current, 0);
    assert_valid(a);
    hbm_destroy(a);
}

static void best_fit_takes_the_smallest_block_then_the_lowest_address(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    void *x = must_malloc(a, 12 * MiB, 0);
    void *y = must_malloc(a, 16 * MiB, 0);
    void *z = must_malloc(a, 12 * MiB, 0);
    assert_true(x < z);
    hbm_free(a, z);
    hbm_free(a, y);
    hbm_free(a, x);
    assert_ptr_equal(must_malloc(a, 11 * MiB, 0), x);
    assert_ptr_equal(must_malloc(a, 11 * MiB, 0), z);
    assert_ptr_equal(must_malloc(a, 11 * MiB, 0), y);
    assert_int_equal(stats_of(a).num_device_alloc, 3);
    assert_valid(a);
    hbm_destroy(a);
}

static void free_blocks_serve_only_their_own_stream(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    void *p = must_malloc(a, 4096, 1);
    hbm_free(a, p);
    void *q = must_malloc(a, 4096, 2);
    assert_ptr_not_equal(p, q);
    assert_int_equal(stats_of(a).num_device_alloc, 2);
    assert_ptr_equal(must_malloc(a, 4096, 1), p);
    assert_int_equal(stats_of(a).num_device_alloc, 2);
    assert_valid(a);
    hbm_destroy(a);
}

static void oversize_blocks_are_never_split_and_reused_within_tolerance(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "max_split_size_mb:40");
    void *big = must_malloc(a, 60 * MiB, 0);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.oversize_segments.current, 1);
    assert_int_equal(s.oversize_allocations.current, 1);
    assert_int_equal(s.max_split_size, 40 * MiB);
    hbm_free(a, big);
    assert_int_equal(stats_of(a).oversize_allocations.current, 0);
    /* >= MS and the block within 20 MiB of the request: reused whole. */
    void *p = must_malloc(a, 41 * MiB, 0);
    assert_ptr_equal(p, big);
    assert_int_equal(hbm_block_size(a, p), 60 * MiB);
    hbm_free(a, p);
    /* 60 >= 40 + 20: outside the tolerance, a new segment. */
    void *q = must_malloc(a, 40 * MiB, 0);
    assert_ptr_not_equal(q, big);
    /* A request under MS never takes an oversize block. */
    void *r = must_malloc(a, 30 * MiB, 0);
    assert_ptr_not_equal(r, big);
    s = stats_of(a);
    assert_int_equal(s.num_device_alloc, 3);
    assert_int_equal(s.oversize_segments.current, 2);
    assert_valid(a);
    hbm_destroy(a);
}

static void freed_neighbours_coalesce_and_whole_segments_return_on_empty_cache(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    void *p[3];
    for (int i = 0; i < 3; i++)
        p[i] = must_malloc(a, 4096, 0);
    hbm_free(a, p[1]);
    assert_int_equal(stats_of(a).inactive_split[HBM_POOL_SMALL].current, 2); /* the hole and the tail */
    hbm_free(a, p[0]);
    assert_int_equal(stats_of(a).inactive_split[HBM_POOL_SMALL].current, 2);
    assert_valid(a);
    assert_int_equal(hbm_empty_cache(a), HBM_OK); /* still split by p[2]: stays */
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 2 * MiB);
    hbm_free(a, p[2]);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.inactive_split[HBM_POOL_ALL].current, 0);
    assert_int_equal(s.inactive_split_bytes[HBM_POOL_ALL].current, 0);
    assert_int_equal(a->small.nfree, 1);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    s = stats_of(a);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 0);
    assert_int_equal(s.segment[HBM_POOL_ALL].current, 0);
    assert_int_equal(s.num_device_free, 1);
    assert_valid(a);
    hbm_destroy(a);
}

static void cache_hit_reuses_the_block_without_a_device_call(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    void *p = must_malloc(a, 300000, 0);
    hbm_free(a, p);
    for (int i = 0; i < 100; i++) {
        void *q = must_malloc(a, 300000, 0);
        assert_ptr_equal(q, p);
        hbm_free(a, q);
    }
    hbm_device_counters d;
    hbm_get_device_counters(a, &d);
    assert_int_equal(d.malloc_calls, 1);
    hbm_destroy(a);
}

static void oom_retry_releases_cache_of_other_streams(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "");
    hbm_free(a, must_malloc(a, 60 * MiB, 1));
    void *p = must_malloc(a, 50 * MiB, 2);
    assert_non_null(p);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.num_device_free, 1);
    assert_int_equal(s.num_ooms, 0);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 50 * MiB);
    assert_valid(a);
    hbm_destroy(a);
}

static void release_available_frees_oversize_blocks_before_emptying_the_cache(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "max_split_size_mb:40");
    hbm_free(a, must_malloc(a, 60 * MiB, 0)); /* cached oversize segment */
    must_malloc(a, 30 * MiB, 0);              /* under MS: cannot use it, new segment */
    hbm_free(a, must_malloc(a, MiB, 0));      /* a cached small segment */
    must_malloc(a, 35 * MiB, 0);              /* device full: frees the 60 MiB block only */
    hbm_stats s = stats_of(a);
    assert_int_equal(s.num_alloc_retries, 0);
    assert_int_equal(s.num_device_free, 1);
    assert_int_equal(s.reserved_bytes[HBM_POOL_SMALL].current, 2 * MiB);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current,
                     (30 + 36 + 2) * MiB); /* 35 MiB rounds to a 36 MiB segment */
    assert_valid(a);
    hbm_destroy(a);
}

static void oom_reports_every_figure_and_keeps_state(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "");
    void *p = must_malloc(a, 90 * MiB, 0);
    void *q = NULL;
    assert_int_equal(hbm_malloc(a, 20 * MiB, 0, &q), HBM_ERR_OOM);
    assert_null(q);
    const char *m = hbm_last_error(a);
    assert_non_null(strstr(m, "Tried to allocate 20.00 MiB"));
    assert_non_null(strstr(m, "total capacity of 100.00 MiB of which 10.00 MiB is free"));
    assert_non_null(strstr(m, "90.00 MiB is allocated by hbmalloc"));
    assert_non_null(strstr(m, "0 bytes is reserved but unallocated"));
    assert_non_null(strstr(m, "largest free cached block is 0 bytes"));
    assert_non_null(strstr(m, "does not fit"));
    assert_null(strstr(m, "expandable_segments"));
    hbm_stats s = stats_of(a);
    assert_int_equal(s.num_ooms, 1);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].current, 90 * MiB);
    assert_valid(a);
    hbm_free(a, p);
    assert_non_null(must_malloc(a, 20 * MiB, 0)); /* works once memory is back */
    hbm_destroy(a);
}

/* Five 20 MiB segments, each [8 MiB free][8 MiB live][4 MiB free]. */
static hbm_allocator *fragmented(const char *settings)
{
    hbm_allocator *a = open_sim("sim:capacity=100MiB", settings);
    void *first[5];
    for (int i = 0; i < 5; i++) {
        first[i] = must_malloc(a, 8 * MiB, 0);
        must_malloc(a, 8 * MiB, 0);
    }
    for (int i = 0; i < 5; i++)
        hbm_free(a, first[i]);
    return a;
}

static void oom_advice_blames_fragmentation_only_when_it_is_the_cause(void **st)
{
    (void)st;
    hbm_allocator *a = fragmented("");
    void *p;
    assert_int_equal(hbm_malloc(a, 9 * MiB, 0, &p), HBM_ERR_OOM);
    const char *m = hbm_last_error(a);
    assert_non_null(strstr(m, "60.00 MiB is reserved but unallocated"));
    assert_non_null(strstr(m, "largest free cached block is 8.00 MiB"));
    assert_non_null(strstr(m, "try expandable_segments:True"));
    assert_valid(a);
    hbm_destroy(a);
}

static void oom_advice_never_suggests_a_setting_in_force(void **st)
{
    (void)st;
    /* Ten 10 MiB blocks fill five 20 MiB pages; freeing every other one leaves
     * 50 MiB cached, pinned one block per page by the live ones. */
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "expandable_segments:True");
    void *blk[10];
    for (int i = 0; i < 10; i++)
        blk[i] = must_malloc(a, 10 * MiB, 0);
    for (int i = 1; i < 10; i += 2)
        hbm_free(a, blk[i]);
    void *p;
    assert_int_equal(hbm_malloc(a, 15 * MiB, 0, &p), HBM_ERR_OOM);
    assert_valid(a);
    const char *m = hbm_last_error(a);
    assert_null(strstr(m, "try expandable_segments:True"));
    assert_non_null(strstr(m, "fragmented"));
    hbm_destroy(a);
}

static void memory_fraction_caps_reserved_memory(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "");
    assert_int_equal(hbm_set_memory_fraction(a, 1.5), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "invalid fraction"));
    assert_int_equal(hbm_set_memory_fraction(a, 0.5), HBM_OK);
    must_malloc(a, 40 * MiB, 0);
    void *p;
    assert_int_equal(hbm_malloc(a, 20 * MiB, 0, &p), HBM_ERR_OOM);
    const char *m = hbm_last_error(a);
    assert_non_null(strstr(m, "50.00 MiB allowed"));
    assert_non_null(strstr(m, "raise per_process_memory_fraction"));
    assert_int_equal(hbm_set_memory_fraction(a, 1.0), HBM_OK); /* 1 lifts the limit */
    assert_non_null(must_malloc(a, 20 * MiB, 0));
    assert_valid(a);
    hbm_destroy(a);
}

/* Lowering the fraction below what is reserved is allowed (as in PyTorch): the validator accepts that state, also
 * after empty_cache with blocks still live, and no new segment goes above the limit. */
static void a_fraction_below_reserved_memory_is_a_legal_state(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "");
    void *x = must_malloc(a, 30 * MiB, 0), *y = must_malloc(a, 30 * MiB, 0);
    assert_int_equal(hbm_set_memory_fraction(a, 0.2), HBM_OK); /* 20 MiB allowed, 60 reserved */
    assert_valid(a);
    assert_int_equal(hbm_free(a, y), HBM_OK);
    assert_int_equal(hbm_empty_cache(a), HBM_OK); /* 30 MiB stay, with x live */
    assert_valid(a);
    void *p;
    assert_int_equal(hbm_malloc(a, 20 * MiB, 0, &p), HBM_ERR_OOM);
    assert_valid(a);
    /* What the check still catches: reserved memory that grew past the limit after it was set. */
    a->total_reserved += 64 * MiB;
    char rep[512];
    assert_int_not_equal(hbm_check(a, rep, sizeof rep), 0);
    assert_non_null(strstr(rep, "memory-fraction limit"));
    a->total_reserved -= 64 * MiB;
    assert_int_equal(hbm_free(a, x), HBM_OK);
    hbm_destroy(a);
}

static void memory_fraction_from_settings_applies_at_create(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "per_process_memory_fraction:0.3");
    void *p;
    assert_int_equal(hbm_malloc(a, 40 * MiB, 0, &p), HBM_ERR_OOM);
    assert_non_null(must_malloc(a, 30 * MiB, 0));
    hbm_destroy(a);
}

static void gc_frees_cached_segments_older_than_the_mean_age(void **st)
{
    (void)st;
    /* allowed 80 MiB, GC threshold 0.6 x 80 = 48 MiB. */
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "garbage_collection_threshold:0.6");
    assert_int_equal(hbm_set_memory_fraction(a, 0.8), HBM_OK);
    void *A = must_malloc(a, 18 * MiB, 0);
    void *B = must_malloc(a, 12 * MiB, 0);
    hbm_free(a, A);              /* A enters the free tree at age clock 2 */
    must_malloc(a, 20 * MiB, 0); /* miss; reserved 30 <= 48: no GC; now 50 */
    hbm_free(a, B);              /* B enters at clock 3 */
    must_malloc(a, 20 * MiB, 0); /* miss at clock 4: reserved 50 > 48, target 2 MiB */
    hbm_stats s = stats_of(a);
    /* Ages: A 2, B 1, mean 1.5: only A goes, and it meets the target. */
    assert_int_equal(s.num_device_free, 1);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, (12 + 20 + 20) * MiB);
    assert_ptr_equal(must_malloc(a, 12 * MiB, 0), B); /* B is still cached */
    assert_valid(a);
    hbm_destroy(a);
}

static void gc_does_nothing_without_a_fraction_limit(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "garbage_collection_threshold:0.6");
    void *A = must_malloc(a, 18 * MiB, 0);
    void *B = must_malloc(a, 12 * MiB, 0);
    hbm_free(a, A);
    must_malloc(a, 20 * MiB, 0);
    hbm_free(a, B);
    must_malloc(a, 20 * MiB, 0);
    assert_int_equal(stats_of(a).num_device_free, 0);
    hbm_destroy(a);
}

static void zero_and_huge_sizes(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    void *p = (void *)1;
    assert_int_equal(hbm_malloc(a, 0, 0, &p), HBM_OK);
    assert_null(p);
    assert_int_equal(hbm_free(a, NULL), HBM_OK);
    assert_int_equal(hbm_malloc(a, (size_t)1 << 60, 0, &p), HBM_ERR_OOM);
    assert_non_null(strstr(hbm_last_error(a), "more than 1EB"));
    assert_int_equal(hbm_malloc(a, SIZE_MAX, 0, &p), HBM_ERR_OOM);
    assert_int_equal(stats_of(a).num_ooms, 2);
    assert_int_equal(stats_of(a).num_device_alloc, 0);
    assert_int_equal(hbm_malloc(NULL, 10, 0, &p), HBM_ERR_INVALID);
    assert_int_equal(hbm_malloc(a, 10, 0, NULL), HBM_ERR_INVALID);
    assert_valid(a);
    hbm_destroy(a);
}

static void stats_resets_and_flat_names(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    void *p = must_malloc(a, 1000, 0);
    hbm_free(a, p);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].peak, 1024);
    assert_int_equal(s.requested_bytes[HBM_POOL_ALL].peak, 1000);
    assert_int_equal(s.allocation[HBM_POOL_SMALL].allocated, 1);
    assert_int_equal(s.allocation[HBM_POOL_SMALL].freed, 1);
    assert_int_equal(s.max_split_size, -1);
    hbm_reset_peak_stats(a);
    s = stats_of(a);
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].peak, 0);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].peak, 2 * MiB);
    hbm_reset_accumulated_stats(a);
    s = stats_of(a);
    assert_int_equal(s.allocation[HBM_POOL_SMALL].allocated, 0);
    assert_int_equal(s.num_device_alloc, 0);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 2 * MiB);

    hbm_stat_entry e[HBM_STAT_ENTRIES + 4];
    int n = hbm_stats_flatten(&s, e, HBM_STAT_ENTRIES + 4);
    assert_int_equal(n, HBM_STAT_ENTRIES);
    for (int i = 1; i < n; i++)
        assert_true(strcmp(e[i - 1].name, e[i].name) < 0);
    int found = 0;
    for (int i = 0; i < n; i++) {
        if (!strcmp(e[i].name, "reserved_bytes.all.current")) {
            assert_int_equal(e[i].value, 2 * MiB);
            found++;
        }
        if (!strcmp(e[i].name, "max_split_size")) {
            assert_int_equal(e[i].value, -1);
            found++;
        }
        if (!strcmp(e[i].name, "inactive_split_bytes.large_pool.freed"))
            found++;
    }
    assert_int_equal(found, 3);
    assert_int_equal(hbm_stats_flatten(&s, e, 10), 10);
    hbm_destroy(a);
}

/* The freed counts are not moved by a free (core/stats.h: made when read, from what was added and the current value,
 * and the current value at the last reset of the accumulated counts): PyTorch's figures across a reset with blocks
 * live, for every kind of counter (a pool's, "all", the oversize ones, segments given back). */
static void freed_counts_are_made_when_read_and_survive_a_reset(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "max_split_size_mb:20");
    void *p[3], *big = must_malloc(a, 40 * MiB, 0);
    for (int i = 0; i < 3; i++)
        p[i] = must_malloc(a, 4096, 0);
    hbm_free(a, p[0]);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.allocation[HBM_POOL_SMALL].allocated, 3);
    assert_int_equal(s.allocation[HBM_POOL_SMALL].freed, 1);
    assert_int_equal(s.allocation[HBM_POOL_ALL].freed, 1);
    hbm_reset_accumulated_stats(a); /* two small blocks and the big one live */
    hbm_free(a, p[1]);
    hbm_free(a, p[2]);
    hbm_free(a, big);
    void *q = must_malloc(a, 4096, 0);
    assert_int_equal(hbm_empty_cache(a), HBM_OK); /* the big segment goes back */
    s = stats_of(a);
    assert_int_equal(s.allocation[HBM_POOL_SMALL].allocated, 1);
    assert_int_equal(s.allocation[HBM_POOL_SMALL].freed, 2);
    assert_int_equal(s.allocation[HBM_POOL_SMALL].current, 1);
    assert_int_equal(s.allocation[HBM_POOL_LARGE].freed, 1);
    assert_int_equal(s.allocation[HBM_POOL_ALL].freed, 3);
    assert_int_equal(s.allocated_bytes[HBM_POOL_SMALL].freed, 2 * 4096);
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].freed, 2 * 4096 + 40 * MiB);
    assert_int_equal(s.oversize_allocations.allocated, 0);
    assert_int_equal(s.oversize_allocations.freed, 1);
    assert_int_equal(s.segment[HBM_POOL_LARGE].freed, 1);
    assert_int_equal(s.reserved_bytes[HBM_POOL_LARGE].freed, 40 * MiB);
    assert_int_equal(s.oversize_segments.freed, 1);
    hbm_reset_accumulated_stats(a); /* a second reset starts from here */
    hbm_free(a, q);
    s = stats_of(a);
    assert_int_equal(s.allocation[HBM_POOL_SMALL].allocated, 0);
    assert_int_equal(s.allocation[HBM_POOL_SMALL].freed, 1);
    assert_int_equal(s.requested_bytes[HBM_POOL_ALL].freed, 4096);
    assert_valid(a);
    hbm_destroy(a);
}

/* hbm_headroom_mb (issue #40 item 2): a new segment must leave that much of the device free as the runtime counts
 * it. A cached oversize block goes back before the headroom is crossed (without the setting the device has room and
 * a second segment is made), and what other processes hold counts against it. */
static void a_headroom_makes_the_cache_give_back_before_it_is_crossed(void **st)
{
    (void)st;
    size_t reserved[2];
    for (int with = 0; with < 2; with++) {
        hbm_allocator *a =
            open_sim("sim:capacity=1GiB", with ? "max_split_size_mb:100,hbm_headroom_mb:256" : "max_split_size_mb:100");
        void *p = must_malloc(a, 500 * MiB, 0);
        hbm_free(a, p); /* cached: an oversize block, which a 300 MiB request cannot split */
        void *q = must_malloc(a, 300 * MiB, 0);
        hbm_stats s = stats_of(a);
        reserved[with] = (size_t)s.reserved_bytes[HBM_POOL_ALL].current;
        assert_int_equal(s.num_device_free, with ? 1 : 0);
        size_t dev_free, dev_total;
        assert_int_equal(hbm_mem_get_info(a, &dev_free, &dev_total), HBM_OK);
        if (with)
            assert_true(dev_free >= 256 * MiB);
        assert_valid(a);
        hbm_free(a, q);
        hbm_destroy(a);
    }
    assert_int_equal(reserved[0], 800 * MiB);
    assert_int_equal(reserved[1], 300 * MiB);
}

static void a_headroom_counts_other_processes_and_is_named_at_the_oom(void **st)
{
    (void)st;
    void *p;
    hbm_allocator *a = open_sim("sim:capacity=1GiB,others=300MiB", "");
    assert_int_equal(hbm_malloc(a, 500 * MiB, 0, &p), HBM_OK); /* 224 MiB left: fine without a headroom */
    hbm_free(a, p);
    hbm_destroy(a);
    a = open_sim("sim:capacity=1GiB,others=300MiB", "hbm_headroom_mb:256");
    assert_int_equal(hbm_malloc(a, 500 * MiB, 0, &p), HBM_ERR_OOM);
    assert_non_null(strstr(hbm_last_error(a), "hbm_headroom_mb keeps 256.00 MiB of the device free for memory outside "
                                              "hbmalloc"));
    assert_non_null(strstr(hbm_last_error(a), "this allocation would leave 224.00 MiB"));
    assert_int_equal(hbm_malloc(a, 400 * MiB, 0, &p), HBM_OK); /* 324 MiB left */
    assert_int_equal(stats_of(a).num_ooms, 1);
    assert_valid(a);
    hbm_free(a, p);
    hbm_destroy(a);
    char err[256];
    assert_int_equal(hbm_open(&a, "sim", 0, "hbm_headroom_mb:lots", err, sizeof err), HBM_ERR_CONF);
    assert_non_null(strstr(err, "hbm_headroom_mb"));
}

static void npu_dialect_pads_every_request_by_32_bytes(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:dialect=npu", "");
    void *p = must_malloc(a, 512, 0);
    assert_int_equal(hbm_block_size(a, p), 1024);
    void *q = must_malloc(a, 480, 0);
    assert_int_equal(hbm_block_size(a, q), 512);
    assert_int_equal(stats_of(a).requested_bytes[HBM_POOL_ALL].current, 992);
    hbm_destroy(a);
}

static void device_errors_are_returned_and_leave_state_intact(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    void *live = must_malloc(a, 4096, 0);
    hbm__sim_fault f = {
        .kind = HBM__OP_MALLOC, .nth = 1, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
    hbm__sim_add_fault(sim_of(a), &f);
    void *p;
    assert_int_equal(hbm_malloc(a, 30 * MiB, 0, &p), HBM_ERR_BACKEND);
    assert_non_null(strstr(hbm_last_error(a), "injected fault"));
    assert_int_equal(stats_of(a).num_ooms, 0);
    assert_valid(a);
    assert_non_null(must_malloc(a, 30 * MiB, 0)); /* the rule fired once */
    hbm_free(a, live);
    assert_valid(a);
    hbm_destroy(a);
}

static void failing_device_free_keeps_the_segment_cached(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    hbm_free(a, must_malloc(a, 30 * MiB, 0));
    hbm__sim_fault f = {
        .kind = HBM__OP_FREE, .nth = 0, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
    hbm__sim_add_fault(sim_of(a), &f);
    assert_int_equal(hbm_empty_cache(a), HBM_ERR_BACKEND);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 30 * MiB);
    assert_valid(a);
    hbm__sim_clear_faults(sim_of(a));
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 0);
    hbm_destroy(a);
}

static void destroy_returns_everything_to_the_device(void **st)
{
    (void)st;
    hbm_backend *b;
    char err[256];
    assert_int_equal(hbm_backend_open(&b, "sim:memory=host,capacity=1GiB", err, sizeof err), HBM_OK);
    hbm_allocator *a;
    assert_int_equal(hbm_create(&a, b, 0, "", err, sizeof err), HBM_OK);
    for (int i = 0; i < 50; i++)
        must_malloc(a, (size_t)(i + 1) * 100000, (hbm_stream)(i % 3));
    hbm__sim_counters c;
    hbm__sim_get_counters(hbm__sim_ctx(b), &c);
    assert_true(c.live_allocations > 0);
    hbm_destroy(a);
    assert_sim_empty(b);
    hbm_backend_close(b);
}

static void create_rejects_bad_settings_and_devices(void **st)
{
    (void)st;
    hbm_allocator *a = (hbm_allocator *)1;
    char err[512];
    assert_int_equal(hbm_open(&a, "sim", 0, "max_split_size_mb:1", err, sizeof err), HBM_ERR_CONF);
    assert_null(a);
    assert_non_null(strstr(err, "max_split_size_mb"));
    assert_int_equal(hbm_open(&a, "sim", 3, "", err, sizeof err), HBM_ERR_INVALID);
    assert_non_null(strstr(err, "device 3 does not exist"));
    assert_int_equal(hbm_open(&a, "nosuch", 0, "", err, sizeof err), HBM_ERR_INVALID);
    assert_non_null(strstr(err, "unknown backend"));
    char out[2048];
    assert_int_equal(hbm_open(&a, "sim", 0, "max_split_size_mb:64", err, sizeof err), HBM_OK);
    assert_int_equal(hbm_settings_describe(a, out, sizeof out), HBM_OK);
    assert_non_null(strstr(out, "max_split_size_mb: 64\n"));
    assert_non_null(strstr(out, "device: sim 0"));
    hbm_destroy(a);
}

/* The replay tools' mode: with the lock held elsewhere, calls still go through (a locked allocator would
 * wait forever here), and the policy is the same as with locking. */
static void single_thread_mode_takes_no_lock(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", ""), *b = open_sim("sim", "");
    hbm_set_single_thread(a);
    hbm__mutex_take(&a->lock);
    void *p[4], *q[4];
    size_t sizes[4] = {1000, 3u << 20, 700, 12u << 20};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(hbm_malloc(a, sizes[i], 0, &p[i]), HBM_OK);
        assert_int_equal(hbm_malloc(b, sizes[i], 0, &q[i]), HBM_OK);
        assert_int_equal(hbm_block_size(a, p[i]), hbm_block_size(b, q[i]));
    }
    assert_int_equal(hbm_free(a, p[1]), HBM_OK);
    assert_int_equal(hbm_free(b, q[1]), HBM_OK);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(hbm_empty_cache(b), HBM_OK);
    hbm_stats sa, sb;
    assert_int_equal(hbm_get_stats(a, &sa), HBM_OK);
    assert_int_equal(hbm_get_stats(b, &sb), HBM_OK);
    assert_int_equal(sa.reserved_bytes[HBM_POOL_ALL].current, sb.reserved_bytes[HBM_POOL_ALL].current);
    assert_int_equal(sa.allocated_bytes[HBM_POOL_ALL].peak, sb.allocated_bytes[HBM_POOL_ALL].peak);
    assert_valid(a);
    hbm__mutex_give(&a->lock);
    hbm_destroy(a);
    hbm_destroy(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_size_matches_pytorch),
        cmocka_unit_test(allocation_size_picks_segment_size),
        cmocka_unit_test(small_requests_share_one_2mib_segment),
        cmocka_unit_test(mid_size_request_takes_a_20mib_segment_and_splits),
        cmocka_unit_test(large_pool_keeps_up_to_1mib_of_slack_in_the_block),
        cmocka_unit_test(best_fit_takes_the_smallest_block_then_the_lowest_address),
        cmocka_unit_test(free_blocks_serve_only_their_own_stream),
        cmocka_unit_test(oversize_blocks_are_never_split_and_reused_within_tolerance),
        cmocka_unit_test(freed_neighbours_coalesce_and_whole_segments_return_on_empty_cache),
        cmocka_unit_test(cache_hit_reuses_the_block_without_a_device_call),
        cmocka_unit_test(oom_retry_releases_cache_of_other_streams),
        cmocka_unit_test(release_available_frees_oversize_blocks_before_emptying_the_cache),
        cmocka_unit_test(oom_reports_every_figure_and_keeps_state),
        cmocka_unit_test(oom_advice_blames_fragmentation_only_when_it_is_the_cause),
        cmocka_unit_test(oom_advice_never_suggests_a_setting_in_force),
        cmocka_unit_test(memory_fraction_caps_reserved_memory),
        cmocka_unit_test(a_fraction_below_reserved_memory_is_a_legal_state),
        cmocka_unit_test(memory_fraction_from_settings_applies_at_create),
        cmocka_unit_test(gc_frees_cached_segments_older_than_the_mean_age),
        cmocka_unit_test(gc_does_nothing_without_a_fraction_limit),
        cmocka_unit_test(zero_and_huge_sizes),
        cmocka_unit_test(stats_resets_and_flat_names),
        cmocka_unit_test(freed_counts_are_made_when_read_and_survive_a_reset),
        cmocka_unit_test(a_headroom_makes_the_cache_give_back_before_it_is_crossed),
        cmocka_unit_test(a_headroom_counts_other_processes_and_is_named_at_the_oom),
        cmocka_unit_test(npu_dialect_pads_every_request_by_32_bytes),
        cmocka_unit_test(device_errors_are_returned_and_leave_state_intact),
        cmocka_unit_test(failing_device_free_keeps_the_segment_cached),
        cmocka_unit_test(destroy_returns_everything_to_the_device),
        cmocka_unit_test(create_rejects_bad_settings_and_devices),
        cmocka_unit_test(single_thread_mode_takes_no_lock),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
