/*
 * test_faults.c: the fault-injection sweep. For each workload, count the device
 * calls of a clean run, then for every k up to that count run it again with
 * call k failing: every failure must come back to the caller as a status (or
 * be recovered by the documented retry), the validator must pass after the
 * failing call and at the end, and after destroy the device must hold nothing.
 */
#include "helpers.h"

#include "trace/trace.h"

#ifndef HBM_EXAMPLES
#error "HBM_EXAMPLES must name examples/"
#endif

typedef struct workload {
    const char *name;
    const char *settings;
    const trace *t;
    int streams; /* also use record_stream on every 3rd block, with stream 7 held */
} workload;

static uint64_t total_calls(hbm_backend *b)
{
    hbm__sim_counters c;
    hbm__sim_get_counters(hbm__sim_ctx(b), &c);
    uint64_t n = 0;
    for (int i = 0; i < HBM__OP_KINDS; i++)
        n += c.calls[i];
    return n;
}

/* Runs the workload; returns the device calls it made. fail_at > 0 makes that call fail with code. */
static uint64_t run(const workload *w, uint64_t fail_at, int code, int *errors)
{
    hbm_backend *b;
    hbm_allocator *a;
    char err[512];
    if (hbm_backend_open(&b, "sim:capacity=48GiB", err, sizeof err) != HBM_OK ||
        hbm_create(&a, b, 0, w->settings, err, sizeof err) != HBM_OK)
        fail_msg("%s: %s", w->name, err);
    uint64_t before = total_calls(b);
    if (fail_at) {
        hbm__sim_fault f = {.kind = -1, .nth = fail_at, .min_size = 0, .max_size = SIZE_MAX, .code = code};
        hbm__sim_add_fault(hbm__sim_ctx(b), &f);
    }
    if (w->streams)
        hbm__sim_stream_hold(hbm__sim_ctx(b), 0, 7, 1);
    void **slot = calloc(w->t->nslots + 1, sizeof *slot);
    for (size_t i = 0; i < w->t->n; i++) {
        const trace_event *e = &w->t->ev[i];
        hbm_status rc = HBM_OK;
        if (e->kind == EV_ALLOC) {
            rc = hbm_malloc(a, (size_t)e->size, e->stream, &slot[e->slot]);
            if (rc == HBM_OK && w->streams && i % 3 == 0)
                rc = hbm_record_stream(a, slot[e->slot], 7);
        } else if (e->kind == EV_FREE) {
            rc = hbm_free(a, slot[e->slot]);
            slot[e->slot] = NULL;
        }
        if (w->streams && i % 500 == 499)
            hbm__sim_stream_hold(hbm__sim_ctx(b), 0, 7, (int)(i / 500 % 2));
        if (rc != HBM_OK) {
            /* Only these may come back: the device's error, or out of memory after the retry ladder. */
            if (rc != HBM_ERR_BACKEND && rc != HBM_ERR_OOM)
                fail_msg("%s, call %llu failing: event %zu gave %s: %s", w->name, (unsigned long long)fail_at, i,
                         hbm_status_name(rc), hbm_last_error(a));
            if (!hbm_last_error(a)[0])
                fail_msg("%s: a failure without a message", w->name);
            (*errors)++;
            assert_valid(a);
        }
    }
    uint64_t calls = total_calls(b) - before;
    hbm__sim_clear_faults(hbm__sim_ctx(b));
    assert_valid(a);
    /* Statistics stay consistent with what the caller holds. */
    int64_t live = 0;
    for (size_t s = 0; s < w->t->nslots; s++)
        if (slot[s])
            live += (int64_t)hbm_block_size(a, slot[s]);
    assert_int_equal(stats_of(a).allocated_bytes[HBM_POOL_ALL].current, live);
    hbm_destroy(a);
    assert_sim_empty(b);
    hbm_backend_close(b);
    free(slot);
    return calls;
}

static void sweep(const workload *w)
{
    int errors = 0;
    uint64_t n = run(w, 0, 0, &errors);
    assert_int_equal(errors, 0);
    int failed_runs = 0;
    for (uint64_t k = 1; k <= n; k++) {
        int e1 = 0, e2 = 0;
        run(w, k, HBM__SIM_ERR_INJECTED, &e1);
        run(w, k, HBM__BE_OOM, &e2);
        failed_runs += e1 > 0;
    }
    print_message("  %s: %llu device calls, each failed in turn (device error, then out of memory); %d of the "
                  "device-error runs returned an error to the caller, the rest recovered\n",
                  w->name, (unsigned long long)n, failed_runs);
    assert_true(failed_runs > 0);
}

static trace real;

static int setup(void **st)
{
    (void)st;
    char err[512];
    return trace_read_text(HBM_EXAMPLES "/cs336-lm-ctx512-forward.trace", &real, err, sizeof err);
}

static int teardown(void **st)
{
    (void)st;
    trace_free(&real);
    return 0;
}

static void real_trace_whole_segments(void **st)
{
    (void)st;
    workload w = {"cs336 ctx512 forward", "", &real, 0};
    sweep(&w);
}

static void real_trace_expandable_segments(void **st)
{
    (void)st;
    workload w = {"cs336 ctx512 forward, expandable", "expandable_segments:True", &real, 0};
    sweep(&w);
}

static void real_trace_with_cross_stream_frees(void **st)
{
    (void)st;
    workload w = {"cs336 ctx512 forward, record_stream", "max_split_size_mb:64", &real, 1};
    sweep(&w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(real_trace_whole_segments),
        cmocka_unit_test(real_trace_expandable_segments),
        cmocka_unit_test(real_trace_with_cross_stream_frees),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
