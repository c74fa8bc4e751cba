/* test_capture.c: graph capture (PyTorch's beginAllocateToPool with a stream filter). The simulated
 * device enforces CUDA's capture rules (sim.c, capture_check): while a stream captures, only calls that
 * obtain memory, made in relaxed mode, are allowed; a free, a synchronization, an event query or an event
 * recorded on the capturing stream is a violation. */
#include "helpers.h"

#define S1 ((hbm_stream)0x51)
#define S2 ((hbm_stream)0x52)

/* The filter CUDAGraph::capture_begin passes: "this stream is the one being captured". */
static int is_stream(void *ctx, hbm_stream s) { return s == *(hbm_stream *)ctx; }

static hbm__sim_counters counters(hbm_allocator *a)
{
    hbm__sim_counters c;
    hbm__sim_get_counters(sim_of(a), &c);
    return c;
}

/* Begin a capture of stream *s into a new pool, as the plug-in does on capture_begin. */
static hbm_mempool begin(hbm_allocator *a, hbm_stream *s)
{
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    assert_int_equal(hbm_mempool_begin_capture(a, mp, is_stream, s), HBM_OK);
    assert_int_equal(hbm__sim_stream_capture(sim_of(a), 0, *s, 1), 0);
    return mp;
}

static void end(hbm_allocator *a, hbm_mempool mp, hbm_stream s)
{
    assert_int_equal(hbm__sim_stream_capture(sim_of(a), 0, s, 0), 0);
    assert_int_equal(hbm_mempool_end(a, mp), HBM_OK);
}

static bool in_pool(hbm_allocator *a, void *p, hbm_mempool id)
{
    hbm_snapshot *s;
    assert_int_equal(hbm_snapshot_take(a, &s), HBM_OK);
    bool found = false;
    for (size_t i = 0; i < s->nsegments; i++)
        if ((uint64_t)(uintptr_t)p >= s->segments[i].addr &&
            (uint64_t)(uintptr_t)p < s->segments[i].addr + s->segments[i].total_size)
            found = s->segments[i].pool == id;
    hbm_snapshot_free(s);
    return found;
}

static void sim_forbids_what_a_capture_forbids(void **state)
{
    (void)state;
    /* The model itself: without it the tests below could not fail. */
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    hbm_backend *b = a->backend;
    void *ctx = b->ctx;
    uintptr_t p;
    assert_int_equal(b->ops->mem_alloc(ctx, 0, 2 * MiB, &p), 0);
    assert_int_equal(hbm__sim_stream_capture(ctx, 0, S1, 1), 0);
    uintptr_t q;
    assert_int_equal(b->ops->mem_alloc(ctx, 0, 2 * MiB, &q), HBM__SIM_ERR_CAPTURE); /* global mode */
    assert_int_equal(b->ops->mem_free(ctx, 0, p, 2 * MiB), HBM__SIM_ERR_CAPTURE);
    assert_int_equal(b->ops->stream_sync(ctx, 0, S2), HBM__SIM_ERR_CAPTURE);
    uint64_t ev;
    assert_int_equal(b->ops->event_create(ctx, 0, &ev), 0);
    assert_int_equal(b->ops->event_record(ctx, 0, ev, S1), HBM__SIM_ERR_CAPTURE);
    assert_int_equal(b->ops->event_record(ctx, 0, ev, S2), 0); /* another stream: allowed */
    assert_int_equal(b->ops->event_query(ctx, 0, ev), HBM__SIM_ERR_CAPTURE);
    int mode = HBM__CAPTURE_MODE_RELAXED;
    assert_int_equal(b->ops->capture_mode(ctx, 0, &mode), 0);
    assert_int_equal(mode, HBM__CAPTURE_MODE_GLOBAL);
    assert_int_equal(b->ops->mem_alloc(ctx, 0, 2 * MiB, &q), 0); /* relaxed: allowed */
    assert_int_equal(b->ops->capture_mode(ctx, 0, &mode), 0);
    assert_int_equal(counters(a).capture_violations, 5);
    assert_int_equal(hbm__sim_stream_capture(ctx, 0, S1, 0), 0);
    assert_int_equal(b->ops->mem_free(ctx, 0, p, 2 * MiB), 0);
    assert_int_equal(b->ops->mem_free(ctx, 0, q, 2 * MiB), 0);
    assert_int_equal(b->ops->event_destroy(ctx, 0, ev), 0);
    hbm_destroy(a);
}

static void capture_routes_only_the_streams_its_filter_accepts(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    hbm_stream s1 = S1;
    hbm_mempool mp = begin(a, &s1);
    assert_int_equal(hbm_captures_underway(a), 1);
    void *in = must_malloc(a, 3 * MiB, S1), *small_in = must_malloc(a, 4096, S1);
    void *out = must_malloc(a, 3 * MiB, S2);
    assert_true(in_pool(a, in, mp));
    assert_true(in_pool(a, small_in, mp));
    assert_false(in_pool(a, out, mp));
    assert_valid(a);
    end(a, mp, S1);
    assert_int_equal(hbm_captures_underway(a), 0);
    /* After the capture the stream allocates from the default pools again. */
    void *after = must_malloc(a, 3 * MiB, S1);
    assert_false(in_pool(a, after, mp));
    hbm_free(a, in);
    hbm_free(a, small_in);
    hbm_free(a, out);
    hbm_free(a, after);
    assert_int_equal(hbm_mempool_release(a, mp), HBM_OK);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(stats_of(a).reserved_bytes[0].current, 0);
    assert_int_equal(counters(a).capture_violations, 0);
    assert_valid(a);
    hbm_destroy(a);
}

static void blocks_of_a_capture_are_never_handed_out_outside_it_until_release(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    hbm_stream s1 = S1;
    hbm_mempool mp = begin(a, &s1);
    /* Inside the capture: tensors come and go; freed blocks stay in the graph's pool. */
    void *g[8];
    for (int i = 0; i < 8; i++)
        g[i] = must_malloc(a, (size_t)(i + 1) * MiB, S1);
    for (int i = 0; i < 8; i += 2)
        hbm_free(a, g[i]);
    end(a, mp, S1);
    size_t pool_bytes = hbm_mempool_reserved(a, mp);
    assert_true(pool_bytes > 0);
    /* Eager tensors after the capture, of every size the graph freed, on the same stream: none lands in
     * the graph's pool (a replay would overwrite it). */
    void *e[16];
    for (int i = 0; i < 16; i++) {
        e[i] = must_malloc(a, (size_t)(i % 8 + 1) * MiB, S1);
        assert_false(in_pool(a, e[i], mp));
    }
    assert_int_equal(hbm_mempool_reserved(a, mp), pool_bytes);
    /* Graph reset: the rest of its tensors are freed, then the pool is released and emptied. */
    for (int i = 1; i < 8; i += 2)
        hbm_free(a, g[i]);
    assert_int_equal(hbm_mempool_release(a, mp), HBM_OK);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(hbm_mempool_reserved(a, mp), 0);
    for (int i = 0; i < 16; i++)
        hbm_free(a, e[i]);
    assert_valid(a);
    assert_int_equal(counters(a).capture_violations, 0);
    hbm_destroy(a);
}

static void nothing_forbidden_reaches_the_device_during_capture(void **state)
{
    (void)state;
    const char *confs[] = {"",
                           "expandable_segments:True",
                           "expandable_segments:True,hbm_remap_free_pages:True",
                           "garbage_collection_threshold:0.5",
                           "max_split_size_mb:20",
                           "hbm_headroom_mb:64" /* its memory query on each new segment: relaxed mode too */};
    for (size_t c = 0; c < sizeof confs / sizeof *confs; c++) {
        hbm_allocator *a = open_sim("sim:capacity=2GiB", confs[c]);
        if (strstr(confs[c], "garbage"))
            assert_int_equal(hbm_set_memory_fraction(a, 0.5), HBM_OK);
        /* Before the capture: a block used by S2, freed while S2 still works, leaves a pending event. */
        hbm__sim_stream_hold(sim_of(a), 0, S2, 1);
        void *shared = must_malloc(a, 5 * MiB, S1);
        assert_int_equal(hbm_record_stream(a, shared, S2), HBM_OK);
        hbm_free(a, shared);
        /* And one of S2's used by S1 that will be freed during the capture of S1: recording its event on S1
         * then would put the event into the graph. */
        void *later = must_malloc(a, 7 * MiB, S2);
        assert_int_equal(hbm_record_stream(a, later, S1), HBM_OK);
        void *cached = must_malloc(a, 64 * MiB, 0);
        hbm_free(a, cached);
        hbm__sim_counters before = counters(a);

        hbm_stream s1 = S1;
        hbm_mempool mp = begin(a, &s1);
        void *g[20];
        for (int i = 0; i < 20; i++) { /* new segments: allowed, in relaxed mode */
            g[i] = must_malloc(a, (size_t)(i % 5 + 1) * 3 * MiB + (size_t)i * 4096, S1);
            if (i % 3 == 0)
                hbm_free(a, g[i]);
        }
        hbm_free(a, later); /* deferred: no event recorded now */
        void *x = must_malloc(a, 1 * MiB, S2);
        hbm_free(a, x);
        assert_valid(a);
        hbm__sim_counters during = counters(a);
        end(a, mp, S1);

        char what[64];
        snprintf(what, sizeof what, "conf '%s'", confs[c]);
        if (during.capture_violations != 0)
            fail_msg("%s: %llu capture violations", what, (unsigned long long)during.capture_violations);
        assert_int_equal(during.calls[HBM__OP_QUERY], before.calls[HBM__OP_QUERY]);
        assert_int_equal(during.calls[HBM__OP_EVSYNC], before.calls[HBM__OP_EVSYNC]);
        assert_int_equal(during.calls[HBM__OP_SYNC], before.calls[HBM__OP_SYNC]);
        assert_int_equal(during.calls[HBM__OP_FREE], before.calls[HBM__OP_FREE]);
        assert_int_equal(during.calls[HBM__OP_UNMAP], before.calls[HBM__OP_UNMAP]);
        assert_true(during.calls[HBM__OP_MALLOC] + during.calls[HBM__OP_MAP] >
                    before.calls[HBM__OP_MALLOC] + before.calls[HBM__OP_MAP]);
        if (strstr(confs[c], "headroom")) /* the headroom asked the device during the capture, legally */
            assert_true(during.calls[HBM__OP_INFO] > before.calls[HBM__OP_INFO]);

        /* After the capture: the deferred free records its event, and both blocks come back once S1 and S2 are
         * done. */
        assert_int_equal(a->ndeferred, 1);
        hbm_stats s = stats_of(a);
        int64_t active = s.active_bytes[0].current;
        hbm__sim_stream_hold(sim_of(a), 0, S2, 0);
        void *y = must_malloc(a, 4096, 0); /* the malloc that processes events */
        assert_int_equal(a->ndeferred, 0);
        s = stats_of(a);
        assert_int_equal(s.active_bytes[0].current, active - (int64_t)(5 + 7) * (int64_t)MiB + 4096);
        hbm_free(a, y);
        for (int i = 0; i < 20; i++)
            if (i % 3)
                hbm_free(a, g[i]);
        hbm_mempool_release(a, mp);
        assert_int_equal(hbm_empty_cache(a), HBM_OK);
        assert_int_equal(stats_of(a).active_bytes[0].current, 0);
        assert_valid(a);
        hbm_destroy(a);
    }
}

static void empty_cache_during_capture_is_refused_and_changes_nothing(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    void *p = must_malloc(a, 30 * MiB, 0);
    hbm_free(a, p);
    hbm_stream s1 = S1;
    hbm_mempool mp = begin(a, &s1);
    int64_t reserved = stats_of(a).reserved_bytes[0].current;
    assert_int_equal(hbm_empty_cache(a), HBM_ERR_CAPTURE);
    assert_non_null(strstr(hbm_last_error(a), "during a graph capture: nothing was released"));
    assert_int_equal(stats_of(a).reserved_bytes[0].current, reserved);
    assert_int_equal(counters(a).capture_violations, 0);
    end(a, mp, S1);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(stats_of(a).reserved_bytes[0].current, 0);
    hbm_mempool_release(a, mp);
    assert_valid(a);
    hbm_destroy(a);
}

static void oom_during_capture_releases_nothing_and_says_why(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=256MiB", "");
    /* 200 MiB cached in the default pool: a plain malloc would release it and succeed. */
    void *p = must_malloc(a, 200 * MiB, 0);
    hbm_free(a, p);
    hbm_stream s1 = S1;
    hbm_mempool mp = begin(a, &s1);
    void *q = NULL;
    hbm__sim_counters before = counters(a);
    assert_int_equal(hbm_malloc(a, 100 * MiB, S1, &q), HBM_ERR_OOM);
    assert_null(q);
    assert_non_null(strstr(hbm_last_error(a), "A graph capture is under way"));
    assert_non_null(strstr(hbm_last_error(a), "before the capture begins"));
    assert_int_equal(counters(a).calls[HBM__OP_FREE], before.calls[HBM__OP_FREE]);
    assert_int_equal(counters(a).capture_violations, 0);
    assert_int_equal(stats_of(a).num_ooms, 1);
    assert_valid(a);
    end(a, mp, S1);
    /* The same request outside a capture releases the cache and succeeds. */
    q = must_malloc(a, 100 * MiB, S1);
    hbm_free(a, q);
    hbm_mempool_release(a, mp);
    assert_valid(a);
    hbm_destroy(a);
}

static void captures_may_share_a_pool_and_end_one_by_one(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    hbm_stream s1 = S1, s2 = S2;
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    assert_int_equal(hbm_mempool_begin_capture(a, mp, is_stream, &s1), HBM_OK);
    assert_int_equal(hbm_mempool_begin_capture(a, mp, is_stream, &s2), HBM_OK);
    assert_int_equal(hbm_captures_underway(a), 2);
    void *p1 = must_malloc(a, 3 * MiB, S1), *p2 = must_malloc(a, 3 * MiB, S2);
    assert_true(in_pool(a, p1, mp) && in_pool(a, p2, mp));
    assert_int_equal(hbm_mempool_end(a, mp), HBM_OK);
    assert_int_equal(hbm_captures_underway(a), 1);
    assert_int_equal(hbm_mempool_end(a, mp), HBM_OK);
    assert_int_equal(hbm_captures_underway(a), 0);
    assert_int_equal(hbm_mempool_end(a, mp), HBM_ERR_INVALID);
    assert_int_equal(hbm_mempool_begin_capture(a, mp, NULL, NULL), HBM_ERR_INVALID);
    hbm_free(a, p1);
    hbm_free(a, p2);
    assert_int_equal(hbm_mempool_release(a, mp), HBM_OK);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(stats_of(a).reserved_bytes[0].current, 0);
    assert_valid(a);
    hbm_destroy(a);
}

static void destroy_during_capture_returns_everything(void **state)
{
    (void)state;
    hbm_backend *b;
    char err[256];
    assert_int_equal(hbm_backend_open(&b, "sim:capacity=1GiB", err, sizeof err), HBM_OK);
    hbm_allocator *a;
    assert_int_equal(hbm_create(&a, b, 0, "", err, sizeof err), HBM_OK);
    void *u = must_malloc(a, 2 * MiB, S1);
    hbm_record_stream(a, u, S2);
    hbm_stream s1 = S1;
    hbm_mempool mp;
    hbm_mempool_create(a, &mp);
    hbm_mempool_begin_capture(a, mp, is_stream, &s1);
    must_malloc(a, 5 * MiB, S1);
    hbm_free(a, u); /* deferred */
    assert_valid(a);
    hbm_destroy(a);
    assert_sim_empty(b);
    hbm_backend_close(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sim_forbids_what_a_capture_forbids),
        cmocka_unit_test(capture_routes_only_the_streams_its_filter_accepts),
        cmocka_unit_test(blocks_of_a_capture_are_never_handed_out_outside_it_until_release),
        cmocka_unit_test(nothing_forbidden_reaches_the_device_during_capture),
        cmocka_unit_test(empty_cache_during_capture_is_refused_and_changes_nothing),
        cmocka_unit_test(oom_during_capture_releases_nothing_and_says_why),
        cmocka_unit_test(captures_may_share_a_pool_and_end_one_by_one),
        cmocka_unit_test(destroy_during_capture_returns_everything),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
