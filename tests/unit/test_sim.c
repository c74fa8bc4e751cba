/* test_sim.c: the simulated device: capacity, addresses, counters, cost model, faults, host mode. */
#include "helpers.h"
#include "util/ranges.h"

static hbm_backend *open_backend(const char *spec)
{
    hbm_backend *b;
    char err[512];
    if (hbm_backend_open(&b, spec, err, sizeof err) != HBM_OK)
        fail_msg("%s: %s", spec, err);
    return b;
}

static void capacity_is_enforced_as_oom(void **st)
{
    (void)st;
    hbm_backend *b = open_backend("sim:capacity=64MiB");
    uintptr_t p, q;
    assert_int_equal(b->ops->mem_alloc(b->ctx, 0, 40 * MiB, &p), 0);
    assert_int_equal(b->ops->mem_alloc(b->ctx, 0, 30 * MiB, &q), HBM__BE_OOM);
    size_t fr, tot;
    assert_int_equal(b->ops->mem_info(b->ctx, 0, &fr, &tot), 0);
    assert_int_equal(tot, 64 * MiB);
    assert_int_equal(fr, 24 * MiB);
    assert_int_equal(b->ops->mem_free(b->ctx, 0, p, 40 * MiB), 0);
    assert_int_equal(b->ops->mem_free(b->ctx, 0, p, 40 * MiB), HBM__SIM_ERR_BAD_FREE);
    hbm_backend_close(b);
}

static void address_only_mode_serves_a_1tib_device(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=1TiB", "");
    void *p[10];
    for (int i = 0; i < 10; i++)
        p[i] = must_malloc(a, 100 * GiB, 0);
    void *q;
    assert_int_equal(hbm_malloc(a, 100 * GiB, 0, &q), HBM_ERR_OOM);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, (int64_t)(1000 * GiB));
    for (int i = 0; i < 10; i++)
        hbm_free(a, p[i]);
    assert_valid(a);
    hbm_destroy(a);
}

static void addresses_are_deterministic(void **st)
{
    (void)st;
    uintptr_t first[2][64];
    for (int run = 0; run < 2; run++) {
        hbm_allocator *a = open_sim("sim", "");
        void *p[64];
        for (int i = 0; i < 64; i++) {
            p[i] = must_malloc(a, (size_t)(i * 7919 % 40 + 1) * MiB / 3, (hbm_stream)(i % 2));
            first[run][i] = (uintptr_t)p[i];
            if (i % 3 == 0)
                hbm_free(a, p[i]);
        }
        hbm_destroy(a);
    }
    assert_memory_equal(first[0], first[1], sizeof first[0]);
}

static void freed_ranges_are_reused_first_fit(void **st)
{
    (void)st;
    hbm_backend *b = open_backend("sim");
    uintptr_t x, y, z;
    assert_int_equal(b->ops->mem_alloc(b->ctx, 0, 4 * MiB, &x), 0);
    assert_int_equal(b->ops->mem_alloc(b->ctx, 0, 4 * MiB, &y), 0);
    assert_int_equal(y, x + 4 * MiB);
    assert_int_equal(b->ops->mem_free(b->ctx, 0, x, 4 * MiB), 0);
    assert_int_equal(b->ops->mem_alloc(b->ctx, 0, 2 * MiB, &z), 0);
    assert_int_equal(z, x);
    hbm_backend_close(b);
}

/* The free ranges (src/util/ranges.c, a treap since issue #38 item 5) place as the sorted list they replaced:
 * 20,000 random takes and give-backs against a first-fit list written here, the same address or the same refusal
 * each time, the same number of ranges, and the treap's shape rules every 100 operations. */
typedef struct ref_range {
    uintptr_t start, end;
} ref_range;

static int ref_take(ref_range *r, size_t *n, size_t size, uintptr_t *out)
{
    for (size_t i = 0; i < *n; i++)
        if (r[i].end - r[i].start >= size) {
            *out = r[i].start;
            r[i].start += size;
            if (r[i].start == r[i].end)
                memmove(&r[i], &r[i + 1], (--*n - i) * sizeof *r);
            return 0;
        }
    return -1;
}

static void ref_give(ref_range *r, size_t *n, uintptr_t start, uintptr_t end)
{
    size_t i = 0;
    while (i < *n && r[i].start < start)
        i++;
    int prev = i > 0 && r[i - 1].end == start, next = i < *n && r[i].start == end;
    if (prev && next) {
        r[i - 1].end = r[i].end;
        memmove(&r[i], &r[i + 1], (--*n - i) * sizeof *r);
    } else if (prev) {
        r[i - 1].end = end;
    } else if (next) {
        r[i].start = start;
    } else {
        memmove(&r[i + 1], &r[i], (*n - i) * sizeof *r);
        r[i] = (ref_range){start, end};
        ++*n;
    }
}

static void free_ranges_place_as_a_first_fit_list(void **st)
{
    (void)st;
    enum { OPS = 20000, HELD = 4096 };
    const uintptr_t base = 1 << 20, span = (uintptr_t)1 << 30;
    ref_range *ref = calloc(HELD + 2, sizeof *ref);
    ref_range *held = calloc(HELD, sizeof *held);
    assert_non_null(ref);
    assert_non_null(held);
    size_t nref = 0, nheld = 0;
    hbm__ranges rs = {0};
    assert_int_equal(hbm__ranges_give(&rs, base, base + span), 0);
    ref_give(ref, &nref, base, base + span);
    uint64_t x = 88172645463325252ull;
    for (int op = 0; op < OPS; op++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        if (nheld < HELD && (nheld == 0 || x % 100 < 55)) {
            size_t size = ((x >> 8) % 64 + 1) * 4096 * (x % 7 == 0 ? 512 : 1); /* now and then a large one */
            uintptr_t a = 0, b = 0;
            int ra = hbm__ranges_take(&rs, size, &a), rb = ref_take(ref, &nref, size, &b);
            assert_int_equal(ra, rb);
            assert_int_equal(a, b);
            if (!ra)
                held[nheld++] = (ref_range){a, a + size};
        } else {
            size_t k = (size_t)(x >> 20) % nheld;
            ref_range h = held[k];
            held[k] = held[--nheld];
            assert_int_equal(hbm__ranges_give(&rs, h.start, h.end), 0);
            ref_give(ref, &nref, h.start, h.end);
        }
        assert_int_equal(rs.n, nref);
        if (op % 100 == 0)
            assert_int_equal(hbm__ranges_verify(&rs), (long)nref);
    }
    while (nheld) { /* everything back: one range again */
        ref_range h = held[--nheld];
        assert_int_equal(hbm__ranges_give(&rs, h.start, h.end), 0);
    }
    assert_int_equal(hbm__ranges_verify(&rs), 1);
    uintptr_t all;
    assert_int_equal(hbm__ranges_take(&rs, span + 1, &all), -1);
    assert_int_equal(hbm__ranges_take(&rs, span, &all), 0);
    assert_int_equal(all, base);
    assert_int_equal(hbm__ranges_verify(&rs), 0);
    hbm__ranges_clear(&rs);
    free(ref);
    free(held);
}

/* A reservation's page table is made as pages are mapped (issue #38 item 4: a table of the whole range was zeroed at
 * each reservation): 8 TiB reserved, its first and last pages mapped, unreserving refused while any is. */
static void a_large_reservation_maps_its_far_pages(void **st)
{
    (void)st;
    hbm_backend *b = open_backend("sim:capacity=8TiB");
    const hbm__backend_ops *o = b->ops;
    const size_t span = (size_t)8 << 40, page = 2 * MiB;
    uintptr_t va;
    uint64_t h1, h2;
    assert_int_equal(o->vmm_reserve(b->ctx, 0, span, &va), 0);
    assert_int_equal(o->vmm_create(b->ctx, 0, page, &h1), 0);
    assert_int_equal(o->vmm_create(b->ctx, 0, page, &h2), 0);
    assert_int_equal(o->vmm_map(b->ctx, 0, va + span - page, page, h1), 0);
    assert_int_equal(o->vmm_map(b->ctx, 0, va, page, h2), 0);
    assert_int_equal(o->vmm_map(b->ctx, 0, va + span - page, page, h2), HBM__SIM_ERR_STILL_MAPPED);
    assert_int_equal(o->vmm_unmap(b->ctx, 0, va + page, page), HBM__SIM_ERR_BAD_RANGE); /* never mapped */
    hbm__sim_counters c;
    hbm__sim_get_counters(b->ctx, &c);
    assert_int_equal(c.mapped_pages, 2);
    assert_int_equal(o->vmm_unmap(b->ctx, 0, va, page), 0);
    assert_int_equal(o->vmm_unreserve(b->ctx, 0, va, span), HBM__SIM_ERR_STILL_MAPPED); /* the last page is */
    assert_int_equal(o->vmm_unmap(b->ctx, 0, va + span - page, page), 0);
    assert_int_equal(o->vmm_unreserve(b->ctx, 0, va, span), 0);
    assert_int_equal(o->vmm_release(b->ctx, 0, h1), 0);
    assert_int_equal(o->vmm_release(b->ctx, 0, h2), 0);
    hbm_backend_close(b);
}

static void counters_and_cost_model(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:malloc_us=100,free_us=50,info_us=0,malloc_us_per_gib=1000", "");
    hbm_device_counters d0;
    hbm_get_device_counters(a, &d0); /* create asked for memory info */
    assert_int_equal(d0.info_calls, 1);
    hbm_free(a, must_malloc(a, GiB, 0));
    hbm_empty_cache(a);
    hbm_device_counters d;
    hbm_get_device_counters(a, &d);
    assert_int_equal(d.malloc_calls, 1);
    assert_int_equal(d.free_calls, 1);
    assert_int_equal(d.device_ns, 100000 + 1000000 + 50000);
    hbm__sim_counters c;
    hbm__sim_get_counters(sim_of(a), &c);
    assert_int_equal(c.calls[HBM__OP_MALLOC], 1);
    assert_int_equal(c.calls[HBM__OP_FREE], 1);
    assert_int_equal(c.live_allocations, 0);
    hbm_destroy(a);
}

static void fault_rules_match_by_kind_size_and_count(void **st)
{
    (void)st;
    hbm_backend *b = open_backend("sim");
    void *s = hbm__sim_ctx(b);
    hbm__sim_fault big = {
        .kind = HBM__OP_MALLOC, .nth = 0, .min_size = 100 * MiB, .max_size = SIZE_MAX, .code = HBM__BE_OOM};
    hbm__sim_add_fault(s, &big);
    uintptr_t p;
    assert_int_equal(b->ops->mem_alloc(b->ctx, 0, 200 * MiB, &p), HBM__BE_OOM);
    assert_int_equal(b->ops->mem_alloc(b->ctx, 0, 200 * MiB, &p), HBM__BE_OOM);
    assert_int_equal(b->ops->mem_alloc(b->ctx, 0, 2 * MiB, &p), 0);
    hbm__sim_clear_faults(s);
    hbm__sim_fault third = {.kind = -1, .nth = 3, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
    hbm__sim_add_fault(s, &third);
    size_t fr, tot;
    uintptr_t q;
    assert_int_equal(b->ops->mem_info(b->ctx, 0, &fr, &tot), 0);
    assert_int_equal(b->ops->mem_alloc(b->ctx, 0, 2 * MiB, &q), 0);
    assert_int_equal(b->ops->mem_free(b->ctx, 0, q, 2 * MiB), HBM__SIM_ERR_INJECTED);
    assert_int_equal(b->ops->mem_free(b->ctx, 0, q, 2 * MiB), 0); /* the failed free changed nothing */
    hbm__sim_counters c;
    hbm__sim_get_counters(s, &c);
    assert_int_equal(c.injected, 3);
    assert_int_equal(c.live_allocations, 1);
    b->ops->mem_free(b->ctx, 0, p, 2 * MiB);
    hbm_backend_close(b);
}

static void fail_nth_from_the_spec_counts_every_call(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:fail_nth=3", ""); /* call 1 is create's memory info */
    must_malloc(a, 4096, 0);                           /* call 2 */
    void *p;
    assert_int_equal(hbm_malloc(a, 30 * MiB, 0, &p), HBM_ERR_BACKEND); /* call 3 */
    assert_valid(a);
    must_malloc(a, 30 * MiB, 0);
    hbm_destroy(a);
}

static void host_mode_gives_writable_memory_and_others_reduce_free(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:memory=host,capacity=256MiB,others=100MiB", "");
    char *p = must_malloc(a, 3 * MiB, 0);
    memset(p, 0xab, 3 * MiB);
    assert_int_equal((unsigned char)p[3 * MiB - 1], 0xab);
    void *q;
    assert_int_equal(hbm_malloc(a, 150 * MiB, 0, &q), HBM_ERR_OOM);
    assert_non_null(strstr(hbm_last_error(a), "in use outside hbmalloc"));
    hbm_free(a, p);
    hbm_destroy(a);
}

static void multiple_devices_have_separate_capacity(void **st)
{
    (void)st;
    hbm_backend *b = open_backend("sim:devices=2,capacity=64MiB");
    hbm_allocator *a0, *a1;
    char err[256];
    assert_int_equal(hbm_create(&a0, b, 0, "", err, sizeof err), HBM_OK);
    assert_int_equal(hbm_create(&a1, b, 1, "", err, sizeof err), HBM_OK);
    void *p = must_malloc(a0, 60 * MiB, 0);
    void *q = must_malloc(a1, 60 * MiB, 0);
    assert_ptr_not_equal(p, q);
    hbm_destroy(a0);
    hbm_destroy(a1);
    hbm_backend_close(b);
}

static void bad_specs_name_the_option(void **st)
{
    (void)st;
    hbm_backend *b;
    char err[512];
    const char *bad[][2] = {
        {"sim:capacity=lots", "capacity"}, {"sim:capacity=0", "capacity"}, {"sim:capacity=9TiB", "8TiB"},
        {"sim:memory=disk", "memory"},     {"sim:devices=0", "devices"},   {"sim:wibble=1", "unknown option 'wibble'"},
        {"sim:malloc_us=-1", "malloc_us"}, {"sim:capacity", "key=value"},  {"sim:dialect=rocm", "dialect"},
        {"sim:fail_nth=0", "fail_nth"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(hbm_backend_open(&b, bad[i][0], err, sizeof err), HBM_ERR_INVALID);
        if (!strstr(err, bad[i][1]))
            fail_msg("%s: '%s' lacks '%s'", bad[i][0], err, bad[i][1]);
    }
}

static void physical_handle_slots_are_reused_and_stale_handles_still_caught(void **st)
{
    (void)st;
    /* Issue #15 item 10: the handle table never shrank (a long expandable replay grew 1.9 -> 55 MB). */
    hbm_backend *b = open_backend("sim:capacity=1GiB");
    const hbm__backend_ops *o = b->ops;
    uint64_t h1, h2, h3;
    uintptr_t va;
    assert_int_equal(o->vmm_reserve(b->ctx, 0, 8 * MiB, &va), 0);
    assert_int_equal(o->vmm_create(b->ctx, 0, 2 * MiB, &h1), 0);
    assert_int_equal(o->vmm_release(b->ctx, 0, h1), 0);
    assert_int_equal(o->vmm_create(b->ctx, 0, 2 * MiB, &h2), 0);
    assert_int_equal(h2 & 0xffffffffu, h1 & 0xffffffffu); /* the same slot */
    assert_int_not_equal(h2, h1);                         /* a new generation */
    assert_int_equal(o->vmm_release(b->ctx, 0, h1), HBM__SIM_ERR_BAD_HANDLE);
    assert_int_equal(o->vmm_map(b->ctx, 0, va, 2 * MiB, h1), HBM__SIM_ERR_BAD_HANDLE);
    assert_int_equal(o->vmm_map(b->ctx, 0, va, 2 * MiB, h2), 0);
    assert_int_equal(o->vmm_create(b->ctx, 0, 2 * MiB, &h3), 0);
    assert_int_equal(o->vmm_release(b->ctx, 0, h2), HBM__SIM_ERR_STILL_MAPPED);
    assert_int_equal(o->vmm_unmap(b->ctx, 0, va, 2 * MiB), 0);
    assert_int_equal(o->vmm_release(b->ctx, 0, h2), 0);
    assert_int_equal(o->vmm_release(b->ctx, 0, h3), 0);
    for (int i = 0; i < 100000; i++) { /* a long run of grow and release */
        assert_int_equal(o->vmm_create(b->ctx, 0, 2 * MiB, &h1), 0);
        assert_int_equal(o->vmm_create(b->ctx, 0, 4 * MiB, &h2), 0);
        assert_int_equal(o->vmm_map(b->ctx, 0, va, 2 * MiB, h1), 0);
        assert_int_equal(o->vmm_unmap(b->ctx, 0, va, 2 * MiB), 0);
        assert_int_equal(o->vmm_release(b->ctx, 0, h2), 0);
        assert_int_equal(o->vmm_release(b->ctx, 0, h1), 0);
    }
    hbm__sim_counters c;
    hbm__sim_get_counters(b->ctx, &c);
    assert_int_equal(c.handle_slots, 2); /* the most live at once, not 200,002 */
    assert_int_equal(c.live_handles, 0);
    assert_int_equal(o->vmm_unreserve(b->ctx, 0, va, 8 * MiB), 0);
    hbm_backend_close(b);
    /* Through the allocator: expandable growth and empty_cache over many steps. */
    hbm_allocator *a = open_sim("sim:capacity=4GiB", "expandable_segments:True");
    for (int step = 0; step < 2000; step++) {
        void *p = must_malloc(a, (size_t)(step % 7 + 1) * 100 * MiB, 0);
        hbm_free(a, p);
        assert_int_equal(hbm_empty_cache(a), HBM_OK);
    }
    hbm__sim_get_counters(hbm__sim_ctx(a->backend), &c);
    assert_true(c.handle_slots > 0 && c.handle_slots <= 7 * 100 / 2 + 1); /* 2 MiB pages of the largest request */
    assert_true(c.calls[HBM__OP_CREATE] > 100 * c.handle_slots);
    hbm_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(capacity_is_enforced_as_oom),
        cmocka_unit_test(address_only_mode_serves_a_1tib_device),
        cmocka_unit_test(addresses_are_deterministic),
        cmocka_unit_test(freed_ranges_are_reused_first_fit),
        cmocka_unit_test(free_ranges_place_as_a_first_fit_list),
        cmocka_unit_test(a_large_reservation_maps_its_far_pages),
        cmocka_unit_test(counters_and_cost_model),
        cmocka_unit_test(fault_rules_match_by_kind_size_and_count),
        cmocka_unit_test(fail_nth_from_the_spec_counts_every_call),
        cmocka_unit_test(host_mode_gives_writable_memory_and_others_reduce_free),
        cmocka_unit_test(multiple_devices_have_separate_capacity),
        cmocka_unit_test(bad_specs_name_the_option),
        cmocka_unit_test(physical_handle_slots_are_reused_and_stale_handles_still_caught),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
