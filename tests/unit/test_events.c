/* test_events.c: frees that wait for other streams (record_stream, events: src/core/events.c). */
#include "helpers.h"

#define S1 ((hbm_stream)1)
#define S2 ((hbm_stream)2)
#define S3 ((hbm_stream)3)

static void a_block_used_by_another_stream_waits_for_its_event(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    hbm__sim_stream_hold(sim_of(a), 0, S2, 1);
    void *p = must_malloc(a, 4096, S1);
    assert_int_equal(hbm_record_stream(a, p, S2), HBM_OK);
    assert_int_equal(hbm_free(a, p), HBM_OK);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].current, 0); /* the free was requested */
    assert_int_equal(s.active_bytes[HBM_POOL_ALL].current, 4096); /* but has not completed */
    assert_int_equal(hbm__sim_stream_pending(sim_of(a), 0, S2), 1);
    assert_valid(a);
    void *q = must_malloc(a, 4096, S1);
    assert_ptr_not_equal(q, p); /* not reused while stream 2 may still read it */
    hbm_free(a, q);
    hbm__sim_stream_hold(sim_of(a), 0, S2, 0); /* stream 2 finishes */
    void *r = must_malloc(a, 4096, S1);        /* the event is polled at malloc */
    assert_ptr_equal(r, p);
    assert_int_equal(stats_of(a).num_sync_all_streams, 0);
    assert_valid(a);
    hbm_destroy(a);
}

/* active and active_bytes of a block freed while another stream uses it: active until its event completes, as
 * PyTorch's free_block decrements them (CUDACachingAllocator.cpp) while free() decrements allocation at once. Their
 * peak, allocated and freed counts too: the engine keeps them as allocation's plus the pending blocks (core/stats.c),
 * so each is checked where the two differ (a malloc while a block is pending, the resets, a completion after the
 * accumulated counts were reset). */
static void active_counts_a_pending_block_until_its_event_completes(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    assert_int_equal(hbm_sim_hold_stream(a, S2, 1), HBM_OK);
    void *p = must_malloc(a, 4096, S1);
    assert_int_equal(hbm_record_stream(a, p, S2), HBM_OK);
    assert_int_equal(hbm_free(a, p), HBM_OK);
    void *q = must_malloc(a, 1024, S1); /* active 2 (one pending), allocation 1 */
    hbm_stats s = stats_of(a);
    for (int k = HBM_POOL_ALL; k <= HBM_POOL_SMALL; k++) { /* both are small blocks */
        assert_int_equal(s.allocation[k].peak, 1);
        assert_int_equal(s.active[k].current, 2);
        assert_int_equal(s.active[k].peak, 2);
        assert_int_equal(s.active_bytes[k].peak, 4096 + 1024);
        assert_int_equal(s.active[k].allocated, 2);
        assert_int_equal(s.active[k].freed, 0); /* freed, not completed */
        assert_int_equal(s.allocation[k].freed, 1);
    }
    assert_int_equal(s.active[HBM_POOL_LARGE].peak, 0);
    hbm_free(a, q); /* completes at once: active 1 */
    hbm_reset_peak_stats(a);
    s = stats_of(a);
    assert_int_equal(s.active[HBM_POOL_ALL].peak, 1); /* the pending block */
    assert_int_equal(s.active_bytes[HBM_POOL_ALL].peak, 4096);
    assert_int_equal(s.allocation[HBM_POOL_ALL].peak, 0);
    hbm_reset_accumulated_stats(a);
    assert_int_equal(hbm_sim_hold_stream(a, S2, 0), HBM_OK); /* stream 2 finishes */
    q = must_malloc(a, 512, S1);                             /* the event is polled */
    hbm_free(a, q);
    s = stats_of(a);
    for (int k = HBM_POOL_ALL; k <= HBM_POOL_SMALL; k++) {
        assert_int_equal(s.active[k].current, 0);
        assert_int_equal(s.active[k].allocated, 1);
        assert_int_equal(s.active[k].freed, 2); /* the completion after the reset counts */
        assert_int_equal(s.active_bytes[k].freed, 4096 + 512);
        assert_int_equal(s.allocation[k].freed, 1);
        assert_int_equal(s.active[k].peak, 1);
    }
    assert_valid(a);
    hbm_destroy(a);
}

/* Many streams, each holding one freed block (a replay plays each pending free on a stream of its own): each block
 * comes back when its own stream finishes, in any order, through the public hold; a stream's queue is erased once
 * empty (as PyTorch erases an empty deque), so a malloc polls only the streams with events outstanding. */
static void many_streams_each_release_their_own_block(void **st)
{
    (void)st;
    enum { N = 300 };
    hbm_allocator *a = open_sim("sim", "");
    void *p[N];
    for (int i = 0; i < N; i++) {
        hbm_stream s = (hbm_stream)1000 + (hbm_stream)i;
        p[i] = must_malloc(a, 4096, 0);
        assert_int_equal(hbm_sim_hold_stream(a, s, 1), HBM_OK);
        assert_int_equal(hbm_record_stream(a, p[i], s), HBM_OK);
        assert_int_equal(hbm_free(a, p[i]), HBM_OK);
    }
    assert_int_equal(a->nqueues, N);
    for (int i = N; i-- > 0;) { /* the last first: no stream waits on another */
        assert_int_equal(hbm_sim_hold_stream(a, (hbm_stream)1000 + (hbm_stream)i, 0), HBM_OK);
        void *q = must_malloc(a, 4096, 0); /* polls: block i is free again, and the first fit */
        assert_int_equal(a->nqueues, (size_t)i);
        assert_int_equal(stats_of(a).active_bytes[HBM_POOL_ALL].current, (int64_t)(i + 1) * 4096);
        assert_int_equal(hbm_free(a, q), HBM_OK);
        assert_valid(a);
    }
    hbm_destroy(a);
    assert_int_equal(hbm_sim_hold_stream(NULL, 1, 1), HBM_ERR_INVALID);
}

static void a_use_on_the_allocating_stream_is_ignored(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    hbm__sim_stream_hold(sim_of(a), 0, S1, 1);
    void *p = must_malloc(a, 4096, S1);
    assert_int_equal(hbm_record_stream(a, p, S1), HBM_OK);
    hbm_free(a, p);
    assert_ptr_equal(must_malloc(a, 4096, S1), p);
    hbm_device_counters d;
    hbm_get_device_counters(a, &d);
    assert_int_equal(d.event_calls, 0);
    hbm_destroy(a);
}

static void every_stream_must_finish_and_streams_do_not_block_each_other(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    void *ctx = sim_of(a);
    hbm__sim_stream_hold(ctx, 0, S2, 1);
    hbm__sim_stream_hold(ctx, 0, S3, 1);
    void *both = must_malloc(a, 8192, S1);
    void *only3 = must_malloc(a, 16384, S1);
    hbm_record_stream(a, both, S2);
    hbm_record_stream(a, both, S3);
    hbm_record_stream(a, both, S3); /* twice: one event */
    hbm_record_stream(a, only3, S3);
    hbm_free(a, both);
    hbm_free(a, only3);
    assert_int_equal(hbm__sim_stream_pending(ctx, 0, S3), 2);
    hbm__sim_stream_hold(ctx, 0, S3, 0);
    must_malloc(a, 512 * 1024, S1); /* polls: only3 is free now, both still waits for stream 2 */
    assert_int_equal(stats_of(a).active_bytes[HBM_POOL_ALL].current, 512 * 1024 + 8192);
    assert_valid(a);
    hbm__sim_stream_hold(ctx, 0, S2, 0);
    must_malloc(a, 512, S1);
    assert_int_equal(stats_of(a).active_bytes[HBM_POOL_ALL].current, 512 * 1024 + 512);
    assert_valid(a);
    hbm_destroy(a);
}

static void empty_cache_waits_for_pending_frees(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    hbm__sim_stream_hold(sim_of(a), 0, S2, 1);
    void *p = must_malloc(a, 30 * MiB, S1);
    hbm_record_stream(a, p, S2);
    hbm_free(a, p);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.num_sync_all_streams, 1);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, 0);
    assert_int_equal(s.active[HBM_POOL_ALL].current, 0);
    assert_valid(a);
    hbm_destroy(a);
}

static void oom_drains_pending_frees_before_giving_up(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=100MiB", "");
    hbm__sim_stream_hold(sim_of(a), 0, S2, 1);
    void *p = must_malloc(a, 80 * MiB, S1);
    hbm_record_stream(a, p, S2);
    hbm_free(a, p);
    void *q = must_malloc(a, 60 * MiB, S1); /* only fits once p's event is waited for and its segment freed */
    assert_non_null(q);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.num_sync_all_streams, 1);
    assert_int_equal(s.num_alloc_retries, 1);
    assert_valid(a);
    hbm_destroy(a);
}

static void bad_pointers_and_streams_are_reported(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:streams=strict", "");
    hbm__sim_stream_create(sim_of(a), 0, S1);
    void *p = must_malloc(a, 4096, S1);
    must_malloc(a, 4096, S1);
    assert_int_equal(hbm_record_stream(a, p, (hbm_stream)0xdead), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "unknown stream"));
    assert_non_null(strstr(hbm_last_error(a), "0xdead"));
    assert_int_equal(hbm_record_stream(a, p, 0), HBM_OK); /* stream 0 always exists */
    hbm__sim_stream_hold(sim_of(a), 0, 0, 1);
    assert_int_equal(hbm_free(a, p), HBM_OK);
    assert_int_equal(hbm_free(a, p), HBM_ERR_DOUBLE_FREE); /* freed, pending: still a double free */
    assert_int_equal(hbm_record_stream(a, p, 0), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "not a live block"));
    int local;
    assert_int_equal(hbm_record_stream(a, &local, 0), HBM_ERR_FOREIGN_PTR);
    assert_int_equal(hbm_record_stream(a, NULL, 0), HBM_OK);
    assert_valid(a);
    hbm_destroy(a);
}

static void an_event_failure_falls_back_to_waiting_for_the_stream(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    hbm__sim_stream_hold(sim_of(a), 0, S2, 1);
    hbm__sim_fault f = {
        .kind = HBM__OP_EVENT, .nth = 0, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
    hbm__sim_add_fault(sim_of(a), &f);
    void *p = must_malloc(a, 4096, S1);
    hbm_record_stream(a, p, S2);
    assert_int_equal(hbm_free(a, p), HBM_OK);
    assert_int_equal(hbm__sim_stream_pending(sim_of(a), 0, S2), 0); /* waited for */
    assert_ptr_equal(must_malloc(a, 4096, S1), p);
    assert_valid(a);
    hbm_destroy(a);
}

static void destroy_with_pending_frees_leaves_no_event(void **st)
{
    (void)st;
    hbm_backend *b;
    char err[256];
    assert_int_equal(hbm_backend_open(&b, "sim", err, sizeof err), HBM_OK);
    hbm_allocator *a;
    assert_int_equal(hbm_create(&a, b, 0, "", err, sizeof err), HBM_OK);
    hbm__sim_stream_hold(hbm__sim_ctx(b), 0, S2, 1);
    for (int i = 0; i < 10; i++) {
        void *p = must_malloc(a, 4096 * (size_t)(i + 1), S1);
        hbm_record_stream(a, p, S2);
        hbm_free(a, p);
    }
    hbm_destroy(a);
    hbm__sim_counters c;
    hbm__sim_get_counters(hbm__sim_ctx(b), &c);
    assert_int_equal(c.live_events, 0);
    assert_sim_empty(b);
    hbm_backend_close(b);
}

/* ---- private pools ---- */


/* A block's stream uses are its own while it is held (core/types.h: they share their bytes with the free tree's
 * node): five uses recorded (the array grows twice), each one waited for at the free, none carried into the block's
 * next life (its merge back into the free tree would have overwritten them), and those of a block still allocated at
 * destroy freed with it (LeakSanitizer in the sanitizer build says if not). */
static void stream_uses_belong_to_one_life_of_a_block(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    hbm_stream others[] = {S2, S3, (hbm_stream)4, (hbm_stream)5, (hbm_stream)6};
    void *p = must_malloc(a, 4096, S1);
    for (int i = 0; i < 5; i++) {
        assert_int_equal(hbm_sim_hold_stream(a, others[i], 1), HBM_OK);
        assert_int_equal(hbm_record_stream(a, p, others[i]), HBM_OK);
        assert_int_equal(hbm_record_stream(a, p, others[i]), HBM_OK); /* once each */
    }
    hbm__block *b = hbm__ptrmap_get(&a->live, (uintptr_t)p);
    assert_non_null(b->uses);
    assert_int_equal(b->uses->n, 5);
    assert_int_equal(hbm_free(a, p), HBM_OK);
    assert_int_equal(b->event_count, 5);
    assert_null(b->uses); /* given to the events */
    assert_valid(a);
    for (int i = 0; i < 5; i++) {
        hbm_sim_hold_stream(a, others[i], 0);
        void *q = must_malloc(a, 4096, S1);   /* polls the events */
        assert_true(i < 4 ? q != p : q == p); /* reusable only once the fifth stream is done */
        hbm_free(a, q);
    }
    void *again = must_malloc(a, 4096, S1);
    assert_ptr_equal(again, p);
    b = hbm__ptrmap_get(&a->live, (uintptr_t)again);
    assert_null(b->uses); /* a new life starts with none */
    assert_int_equal(hbm_free(a, again), HBM_OK);
    assert_int_equal(stats_of(a).active_bytes[HBM_POOL_ALL].current, 0); /* freed at once: no events */
    void *kept = must_malloc(a, 4096, S1);
    assert_int_equal(hbm_record_stream(a, kept, S2), HBM_OK);
    assert_int_equal(hbm_record_stream(a, kept, S3), HBM_OK);
    assert_valid(a);
    hbm_destroy(a); /* kept's uses go with it */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_block_used_by_another_stream_waits_for_its_event),
        cmocka_unit_test(many_streams_each_release_their_own_block),
        cmocka_unit_test(a_use_on_the_allocating_stream_is_ignored),
        cmocka_unit_test(every_stream_must_finish_and_streams_do_not_block_each_other),
        cmocka_unit_test(empty_cache_waits_for_pending_frees),
        cmocka_unit_test(oom_drains_pending_frees_before_giving_up),
        cmocka_unit_test(bad_pointers_and_streams_are_reported),
        cmocka_unit_test(an_event_failure_falls_back_to_waiting_for_the_stream),
        cmocka_unit_test(destroy_with_pending_frees_leaves_no_event),
        cmocka_unit_test(stream_uses_belong_to_one_life_of_a_block),
        cmocka_unit_test(active_counts_a_pending_block_until_its_event_completes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
