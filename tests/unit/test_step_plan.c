/* test_step_plan.c: the hbm_step_plan policy (src/policy/step_plan.c) and the planners (src/policy/lifetime_planner.c,
 * the step plan's src/policy/lifetime_sweep.c): a toy training loop
 * (parameters kept, activations freed in reverse, a loss carried into the next step) is learnt from its steps and
 * served from one region; late frees, record_stream, a changed step, longer sizes, another stream, a device too
 * small for the region each fall back or say so; beside expandable segments the same; the validator after every
 * call. */
#include "helpers.h"
#include "policy/lifetime_sweep.h"

#define NOVMM "sim:vmm=off,capacity=8GiB"

typedef struct loop {
    hbm_allocator *a;
    void *param[3];
    void *carry;   /* the loss of the step before, freed early in the next */
    size_t layers; /* activations per step */
    size_t scale;  /* MiB per activation unit */
    bool unmarked; /* no hbm_step: the allocator finds the steps */
} loop;

static void *alloc_checked(loop *l, size_t n)
{
    void *p = must_malloc(l->a, n, 0);
    assert_valid(l->a);
    return p;
}

static void free_checked(loop *l, void *p)
{
    assert_int_equal(hbm_free(l->a, p), HBM_OK);
    assert_valid(l->a);
}

static size_t device_calls(hbm_allocator *a, int op)
{
    hbm__sim_counters c;
    hbm__sim_get_counters(sim_of(a), &c);
    return (size_t)c.calls[op];
}

static loop start(const char *spec, const char *settings)
{
    loop l = {.a = open_sim(spec, settings), .layers = 6, .scale = 4};
    for (int i = 0; i < 3; i++)
        l.param[i] = alloc_checked(&l, (size_t)(i + 1) * 10 * MiB);
    return l;
}

/* One step: activations forward, the last step's loss freed after the second, backward temporaries, a new loss;
 * hbm_step at the end. */
static void one_step(loop *l)
{
    void *act[16];
    for (size_t i = 0; i < l->layers; i++) {
        act[i] = alloc_checked(l, l->scale * (i + 1) * MiB + 4096 * i);
        if (i == 1 && l->carry) {
            free_checked(l, l->carry);
            l->carry = NULL;
        }
    }
    for (size_t i = l->layers; i-- > 0;) {
        void *grad = alloc_checked(l, l->scale * MiB / 2 + 512 * i);
        free_checked(l, act[i]);
        free_checked(l, grad);
    }
    l->carry = alloc_checked(l, 3 * MiB);
    if (!l->unmarked)
        assert_int_equal(hbm_step(l->a), HBM_OK);
    assert_valid(l->a);
}

static void finish(loop *l)
{
    if (l->carry)
        free_checked(l, l->carry);
    for (int i = 0; i < 3; i++)
        free_checked(l, l->param[i]);
    assert_int_equal(hbm_destroy(l->a), HBM_OK);
}

static void a_repeating_step_is_learnt_and_served_from_one_region(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    one_step(&l); /* step 0: the warm-up */
    one_step(&l); /* step 1: recorded, planned at its end without the carried loss */
    hbm_stats s = stats_of(l.a);
    assert_int_equal(s.steps, 2);
    assert_int_equal(s.plan_replans, 1);
    assert_int_equal(s.plan_hits, 0);
    int64_t per_step = (int64_t)(2 * l.layers + 1);
    one_step(&l); /* step 2: served, the loss unplanned; planned again cyclically at its end */
    s = stats_of(l.a);
    assert_int_equal(s.plan_hits, per_step - 1);
    assert_int_equal(s.plan_unplanned, 1);
    assert_int_equal(s.plan_misses, 0);
    assert_int_equal(s.plan_replans, 2);
    for (int k = 0; k < 4; k++) /* steps 3-6: everything from the cyclic plan, the loss too */
        one_step(&l);
    s = stats_of(l.a);
    assert_true(s.arena_bytes >= s.plan_height && s.plan_height > 0); /* the region holds the cyclic plan (taller: it
                                                                         places the loss too) */
    assert_int_equal(s.plan_hits, per_step - 1 + 4 * per_step);
    assert_int_equal(s.plan_unplanned, 1);
    assert_int_equal(s.plan_misses, 0);
    assert_int_equal(s.plan_replans, 2);
    /* The step's memory is the plan's height: reserved is the parameters' segments and the region. */
    size_t peak_step = 0; /* the most the step holds at once: the activations plus one temporary, plus the loss */
    for (size_t i = 0; i < l.layers; i++)
        peak_step += l.scale * (i + 1) * MiB + 4096 * i;
    peak_step += l.scale * MiB / 2 + 512 * (l.layers - 1) + 3 * MiB;
    assert_true((uint64_t)s.plan_height >= peak_step - 3 * MiB);
    assert_true((uint64_t)s.plan_height <= peak_step + 3 * MiB);
    finish(&l);
}

/* Allocation k of the step whose planned range is still held when the step comes round again (a late free):
 * it misses and falls back, and no two live blocks ever share a byte. */
static void a_busy_range_falls_back_and_never_overlaps(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    for (int k = 0; k < 4; k++)
        one_step(&l);
    hbm_stats s0 = stats_of(l.a);
    /* Hold the step's first activation over the boundary: next step, position 0's range is busy. */
    void *act0 = alloc_checked(&l, l.scale * MiB);
    void *act1 = alloc_checked(&l, 2 * l.scale * MiB + 4096);
    free_checked(&l, l.carry);
    l.carry = NULL;
    assert_int_equal(hbm_step(l.a), HBM_OK);        /* a short step: positions 0-1 only */
    void *again = alloc_checked(&l, l.scale * MiB); /* position 0: its range is act0's */
    hbm_stats s1 = stats_of(l.a);
    assert_int_equal(s1.plan_misses, s0.plan_misses + 1);
    uintptr_t x = (uintptr_t)again, y = (uintptr_t)act0;
    assert_true(x + l.scale * MiB <= y || y + l.scale * MiB <= x);
    free_checked(&l, again);
    free_checked(&l, act1);
    free_checked(&l, act0);
    finish(&l);
}

/* record_stream on a planned block: until the other stream's work is done its range is not reused. */
static void a_block_used_by_another_stream_keeps_its_range(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    for (int k = 0; k < 4; k++)
        one_step(&l);
    hbm__sim_stream_hold(sim_of(l.a), 0, 7, 1);
    void *act0 = alloc_checked(&l, l.scale * MiB);
    assert_int_equal(hbm_record_stream(l.a, act0, 7), HBM_OK);
    free_checked(&l, act0); /* freed, but stream 7 may still read it */
    assert_int_equal(hbm_step(l.a), HBM_OK);
    int64_t misses = stats_of(l.a).plan_misses;
    void *again = alloc_checked(&l, l.scale * MiB);
    assert_ptr_not_equal(again, act0);
    assert_int_equal(stats_of(l.a).plan_misses, misses + 1);
    hbm__sim_stream_hold(sim_of(l.a), 0, 7, 0);
    free_checked(&l, again);
    finish(&l);
}

/* The step changes shape (more layers) and sizes (longer): misses pass the threshold, the allocator plans again and
 * serves the new step; sizes back to the old ones fit the envelope. */
static void a_changed_step_is_planned_again(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    for (int k = 0; k < 4; k++)
        one_step(&l);
    int64_t plans = stats_of(l.a).plan_replans;
    l.layers = 9;
    l.scale = 6;
    for (int k = 0; k < 5; k++)
        one_step(&l);
    hbm_stats s = stats_of(l.a);
    assert_true(s.plan_replans > plans);
    int64_t hits = s.plan_hits, misses = s.plan_misses;
    one_step(&l);
    s = stats_of(l.a);
    assert_int_equal(s.plan_hits - hits, (int64_t)(2 * l.layers + 1));
    assert_int_equal(s.plan_misses, misses);
    l.scale = 5; /* smaller sizes: within the envelope */
    one_step(&l);
    assert_int_equal(stats_of(l.a).plan_misses, misses);
    finish(&l);
}

/* Only the first allocation's stream is learnt: another stream's allocations neither count nor use the region. */
static void another_stream_is_not_planned(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    for (int k = 0; k < 3; k++) {
        void *side = must_malloc(l.a, 5 * MiB, 3);
        one_step(&l);
        free_checked(&l, side);
    }
    hbm_stats s = stats_of(l.a);
    int64_t served = s.plan_hits + s.plan_misses + s.plan_unplanned;
    void *side = must_malloc(l.a, 5 * MiB, 3);
    s = stats_of(l.a);
    assert_int_equal(s.plan_hits + s.plan_misses + s.plan_unplanned, served);
    free_checked(&l, side);
    finish(&l);
}

/* A device that cannot give the region (every device allocation of 60 MiB or more fails): said in the warning,
 * every allocation served by the caching policy, the plan's positions counted as misses. */
static void a_device_that_cannot_give_the_region_falls_back(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    hbm__sim_fault f = {.kind = HBM__OP_MALLOC, .nth = 0, .min_size = 60 * MiB, .max_size = SIZE_MAX, .code = 2};
    assert_int_equal(hbm__sim_add_fault(sim_of(l.a), &f), 0);
    for (int k = 0; k < 5; k++)
        one_step(&l);
    hbm_stats s = stats_of(l.a);
    assert_true(s.plan_replans >= 1);
    assert_int_equal(s.arena_bytes, 0);
    assert_int_equal(s.plan_hits, 0);
    assert_true(s.plan_misses >= (int64_t)(2 * l.layers));
    assert_non_null(strstr(hbm_warning(l.a), "the device could not give an arena"));
    finish(&l);
}

/* With virtual memory and expandable segments in force the step plan works the same: the region is address space
 * beside the expandable segments, mapped page by page as the plan's allocations touch it; the parameters (never
 * planned) stay in an expandable segment, and the pages the warm-up steps mapped are unmapped when the plan takes
 * over. */
static void with_expandable_segments_the_region_sits_beside_them(void **st)
{
    (void)st;
    loop l = start("sim:capacity=8GiB", "expandable_segments:True,hbm_step_plan:True");
    for (int k = 0; k < 7; k++)
        one_step(&l);
    hbm_stats s = stats_of(l.a);
    int64_t per_step = (int64_t)(2 * l.layers + 1);
    assert_true(s.expandable_segments);
    assert_int_equal(s.steps, 7);
    assert_int_equal(s.plan_hits, per_step - 1 + 4 * per_step); /* as without virtual memory */
    assert_int_equal(s.plan_misses, 0);
    assert_true(s.arena_bytes >= s.plan_height && s.plan_height > 0);
    assert_null(strstr(hbm_warning(l.a), "not used"));
    const hbm__segment *region = l.a->region_seg;
    assert_non_null(region);
    assert_true(region->expandable);
    assert_int_equal(device_calls(l.a, HBM__OP_MALLOC), 0); /* nothing but pages */
    for (int i = 0; i < 3; i++) {
        hbm__segment *seg = hbm__segment_find(l.a, (uintptr_t)l.param[i]);
        assert_non_null(seg);
        assert_true(seg->expandable);
        assert_true(seg != region);
    }
    /* The region's pages mapped are those its plan touched: the pages under the plan's height, no more. */
    size_t touched = region->mapped_pages * region->page;
    assert_true(touched >= (size_t)s.plan_height);
    assert_true(touched < (size_t)s.plan_height + region->page);
    /* Outside the region only the parameters' pages stay mapped (60 MiB on 20 MiB pages). */
    assert_int_equal((size_t)s.reserved_bytes[HBM_POOL_ALL].current - touched, 60 * MiB);
    finish(&l);
}

static void a_plan_file_and_the_step_plan_are_refused_together(void **st)
{
    (void)st;
    hbm_allocator *a = NULL;
    char err[512];
    assert_int_equal(hbm_open(&a, NOVMM, 0, "hbm_step_plan:True,hbm_plan_file:/dev/null", err, sizeof err),
                     HBM_ERR_CONF);
    assert_null(a);
    assert_non_null(strstr(err, "keep one"));
}

/* ---- the planner ---- */

static int live_together(const hbm_lifetime *x, const hbm_lifetime *y)
{
    for (uint32_t t = 0; t < 64; t++) {
        int in_x = (t >= x->start && t < x->end) || t < x->wrap, in_y = (t >= y->start && t < y->end) || t < y->wrap;
        if (in_x && in_y)
            return 1;
    }
    return 0;
}

/* n random lifetimes over a period of 40 allocations, some carried into the next period (wrap), from the state *r. */
static void random_cycle(hbm_lifetime *b, size_t n, uint64_t *r)
{
    for (size_t i = 0; i < n; i++) {
        *r = *r * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t s = (uint32_t)(*r >> 33) % 40, len = 1 + (uint32_t)(*r >> 40) % 20;
        b[i] = (hbm_lifetime){.size = 512 * (1 + (*r >> 50) % 64), .start = s, .end = s + len};
        if (b[i].end >= 40) { /* past the period's end: it wraps into the next */
            b[i].wrap = b[i].end - 40 < s ? b[i].end - 40 : 0;
            b[i].end = 40;
        }
    }
}

/* Random cyclic problems: no two buffers live at one allocation overlap, the height covers them, no plan is lower
 * than the peak, and the same seed gives the same plan. */
static void cyclic_plans_never_overlap_buffers_live_together(void **st)
{
    (void)st;
    uint64_t r = 12345;
    for (int trial = 0; trial < 200; trial++) {
        hbm_lifetime b[24], again[24];
        size_t n = 1 + trial % 24;
        random_cycle(b, n, &r);
        memcpy(again, b, sizeof b);
        hbm_plan_info info, info2;
        assert_int_equal(hbm_plan_lifetimes(b, n, 50, 7, &info), HBM_OK);
        assert_int_equal(hbm_plan_lifetimes(again, n, 50, 7, &info2), HBM_OK);
        assert_int_equal(info.height, info2.height);
        assert_true(info.height >= info.peak_live);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(b[i].offset, again[i].offset);
            assert_true(b[i].offset + b[i].size <= info.height);
            for (size_t j = i + 1; j < n; j++)
                if (live_together(&b[i], &b[j]))
                    assert_true(b[i].offset + b[i].size <= b[j].offset || b[j].offset + b[j].size <= b[i].offset);
        }
    }
}

/* The step plan's planner (src/policy/lifetime_sweep.c) on the same random cyclic problems: no two buffers live at
 * one allocation overlap, the height is the highest buffer's top and no lower than the peak, and each buffer not
 * live at the quietest allocation lies at or above the ones that are (the stack at the bottom). */
static void the_sweep_never_overlaps_buffers_live_together(void **st)
{
    (void)st;
    uint64_t r = 54321;
    for (int trial = 0; trial < 400; trial++) {
        hbm_lifetime b[40], copy[40];
        size_t n = 1 + trial % 40;
        random_cycle(b, n, &r);
        memcpy(copy, b, sizeof b);
        uint64_t height, top = 0;
        hbm_plan_info info;
        assert_int_equal(hbm__plan_sweep(b, n, 40, &height), HBM_OK);
        assert_int_equal(hbm_plan_lifetimes(copy, n, 1, 1, &info), HBM_OK); /* for its peak_live */
        assert_true(height >= info.peak_live);
        for (size_t i = 0; i < n; i++) {
            if (b[i].offset + b[i].size > top)
                top = b[i].offset + b[i].size;
            for (size_t j = i + 1; j < n; j++)
                if (live_together(&b[i], &b[j]))
                    assert_true(b[i].offset + b[i].size <= b[j].offset || b[j].offset + b[j].size <= b[i].offset);
        }
        assert_int_equal(height, top);
    }
    /* Out of bounds: refused, as the search refuses them; none to place: height 0. */
    hbm_lifetime past = {.size = 512, .start = 0, .end = 41}, self = {.size = 512, .start = 3, .end = 40, .wrap = 4};
    hbm_lifetime empty = {.size = 512, .start = 3, .end = 3}, zero = {.size = 0, .start = 0, .end = 1};
    hbm_lifetime huge[2] = {{.size = (uint64_t)1 << 62, .start = 0, .end = 1}, {.size = 512, .start = 0, .end = 1}};
    uint64_t h = 1;
    assert_int_equal(hbm__plan_sweep(&past, 1, 40, &h), HBM_ERR_INVALID);
    assert_int_equal(hbm__plan_sweep(&self, 1, 40, &h), HBM_ERR_INVALID);
    assert_int_equal(hbm__plan_sweep(&empty, 1, 40, &h), HBM_ERR_INVALID);
    assert_int_equal(hbm__plan_sweep(&zero, 1, 40, &h), HBM_ERR_INVALID);
    assert_int_equal(hbm__plan_sweep(huge, 2, 40, &h), HBM_ERR_INVALID);
    assert_int_equal(hbm__plan_sweep(NULL, 1, 40, &h), HBM_ERR_INVALID);
    assert_int_equal(hbm__plan_sweep(NULL, 0, 40, &h), HBM_OK);
    assert_int_equal(h, 0);
}

/* The cycle is cut where the fewest bytes are live: at allocation 5 none is, so the 4 KiB buffer carried over the
 * boundary ([30, 40) and [0, 5)) shares one range with the two 64 KiB ones, none live with another. Cut at the
 * boundary instead, it would be stacked below them: 69,632 bytes. */
static void the_sweep_cuts_the_cycle_where_the_fewest_bytes_live(void **st)
{
    (void)st;
    hbm_lifetime b[3] = {{.size = 4096, .start = 30, .end = 40, .wrap = 5},
                         {.size = 65536, .start = 6, .end = 12},
                         {.size = 65536, .start = 14, .end = 29}};
    uint64_t height;
    assert_int_equal(hbm__plan_sweep(b, 3, 40, &height), HBM_OK);
    assert_int_equal(height, 65536);
    assert_int_equal(b[0].offset, 0);
    assert_int_equal(b[1].offset, 0);
    assert_int_equal(b[2].offset, 0);
}

/* The search's greedy placement by size, as the step plan uses it on steps too long for the eight orders: no two
 * buffers live together overlap, the height is the highest top; a budget that holds no evaluation makes none. */
static void the_placement_by_size_keeps_buffers_apart_within_its_budget(void **st)
{
    (void)st;
    uint64_t r = 777;
    for (int trial = 0; trial < 200; trial++) {
        hbm_lifetime b[40];
        size_t n = 2 + trial % 39;
        random_cycle(b, n, &r);
        b[0].offset = 7;
        uint64_t height, top = 0;
        assert_int_equal(hbm__plan_by_size(b, n, (uint64_t)n * n / 2 - 1, &height), HBM_OK);
        assert_int_equal(height, UINT64_MAX); /* not one evaluation within the budget */
        assert_int_equal(b[0].offset, 7);
        assert_int_equal(hbm__plan_by_size(b, n, (uint64_t)n * n, &height), HBM_OK);
        for (size_t i = 0; i < n; i++) {
            if (b[i].offset + b[i].size > top)
                top = b[i].offset + b[i].size;
            for (size_t j = i + 1; j < n; j++)
                if (live_together(&b[i], &b[j]))
                    assert_true(b[i].offset + b[i].size <= b[j].offset || b[j].offset + b[j].size <= b[i].offset);
        }
        assert_int_equal(height, top);
    }
}

/* A 4 MiB parameter, then twelve steps of a 12 MiB tensor and a 4 MiB one, each freed at once; hbm_step. The
 * caching policy serves both from the 20 MiB segment the parameter opened; a plan would need its own 12 MiB beside
 * that segment, which stays for the parameter. */
static hbm_stats beside_a_parameter(const char *settings, hbm_allocator **out)
{
    hbm_allocator *a = open_sim(NOVMM, settings);
    void *param = must_malloc(a, 4 * MiB, 0);
    for (int step = 0; step < 12; step++) {
        void *x = must_malloc(a, 12 * MiB, 0);
        assert_int_equal(hbm_free(a, x), HBM_OK);
        void *y = must_malloc(a, 4 * MiB, 0);
        assert_int_equal(hbm_free(a, y), HBM_OK);
        assert_int_equal(hbm_step(a), HBM_OK);
        assert_valid(a);
    }
    hbm_stats s = stats_of(a);
    assert_int_equal(hbm_free(a, param), HBM_OK);
    *out = a;
    return s;
}

/* A plan whose steps would hold more than the caching policy did is not used, and the first plan (in force for a
 * step, not judged) is dropped with it: once the cache has grown again the steps hold what they hold without the
 * step plan. Said once, though tried again after 1, 2, 4 steps. */
static void a_plan_larger_than_the_cache_is_not_used(void **st)
{
    (void)st;
    hbm_allocator *plain, *planned;
    hbm_stats p = beside_a_parameter("", &plain);
    hbm_stats s = beside_a_parameter("hbm_step_plan:True", &planned);
    assert_int_equal(p.reserved_bytes[HBM_POOL_ALL].current, 20 * (int64_t)MiB);
    assert_int_equal(s.plan_replans, 1); /* the first plan only */
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, p.reserved_bytes[HBM_POOL_ALL].current);
    assert_int_equal(s.arena_bytes, 0);
    const char *said = strstr(hbm_warning(planned), "hbm_step_plan: with a plan, steps of 2 allocations would hold "
                                                    "32.00 MiB, more than the 20.00 MiB");
    assert_non_null(said);
    assert_null(strstr(said + 1, "hbm_step_plan:"));
    assert_int_equal(hbm_destroy(plain), HBM_OK);
    assert_int_equal(hbm_destroy(planned), HBM_OK);
}

/* A buffer carried over the boundary ([30, 40) and [0, 5)) cannot share its range with one live at allocation 2;
 * without the wrap it could. */
static void a_wrapped_lifetime_meets_the_next_periods_start(void **st)
{
    (void)st;
    hbm_lifetime b[2] = {{.size = 4096, .start = 30, .end = 40, .wrap = 5}, {.size = 4096, .start = 0, .end = 4}};
    hbm_plan_info info;
    assert_int_equal(hbm_plan_lifetimes(b, 2, 0, 1, &info), HBM_OK);
    assert_int_equal(info.height, 8192);
    assert_int_equal(info.peak_live, 8192);
    b[0].wrap = 0;
    assert_int_equal(hbm_plan_lifetimes(b, 2, 0, 1, &info), HBM_OK);
    assert_int_equal(info.height, 4096);
}

static void bad_lifetimes_are_refused(void **st)
{
    (void)st;
    hbm_plan_info info;
    hbm_lifetime empty = {.size = 512, .start = 3, .end = 3}, zero = {.size = 0, .start = 0, .end = 1};
    hbm_lifetime huge[2] = {{.size = (uint64_t)1 << 62, .start = 0, .end = 1}, {.size = 512, .start = 0, .end = 1}};
    assert_int_equal(hbm_plan_lifetimes(&empty, 1, 0, 1, &info), HBM_ERR_INVALID);
    assert_int_equal(hbm_plan_lifetimes(&zero, 1, 0, 1, &info), HBM_ERR_INVALID);
    assert_int_equal(hbm_plan_lifetimes(huge, 2, 0, 1, &info), HBM_ERR_INVALID);
    assert_int_equal(hbm_plan_lifetimes(NULL, 1, 0, 1, &info), HBM_ERR_INVALID);
    assert_int_equal(hbm_plan_lifetimes(NULL, 0, 0, 1, &info), HBM_OK);
    assert_int_equal(info.height, 0);
}

/* A step the plan does not fit (other sizes) on a device with no room for new segments: the misses are served best
 * fit from the plan's region, not refused as out of memory. */
static void misses_under_pressure_use_the_regions_free_space(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    for (int k = 0; k < 4; k++)
        one_step(&l);
    assert_int_equal(hbm_empty_cache(l.a), HBM_OK);
    hbm_stats s = stats_of(l.a);
    assert_true(s.arena_bytes > 0);
    /* No new segment from here: the limit is what is reserved now. */
    assert_int_equal(hbm_set_memory_fraction(l.a, (double)s.reserved_bytes[0].current / (double)(8 * GiB)), HBM_OK);
    l.layers = 4;
    l.scale = 5;
    one_step(&l); /* must_malloc fails the test on an OOM */
    hbm_stats t = stats_of(l.a);
    assert_int_equal(t.num_ooms, 0);
    assert_true(t.plan_misses > s.plan_misses);
    assert_int_equal(t.reserved_bytes[0].current, s.reserved_bytes[0].current);
    finish(&l);
}

/* An evaluation step: forward activations only, of other sizes, freed at once. */
static void eval_step(loop *l)
{
    void *act[4];
    for (size_t i = 0; i < 4; i++)
        act[i] = alloc_checked(l, l->scale * (i + 2) * MiB + 8192);
    for (size_t i = 0; i < 4; i++)
        free_checked(l, act[i]);
    assert_int_equal(hbm_step(l->a), HBM_OK);
    assert_valid(l->a);
}

/* Training and evaluation steps in turn: each shape gets its plan and keeps it. The loss carried from a training
 * step over the evaluation step lies where the evaluation's plan may want to be: those few misses are served by the
 * caching policy and re-planning backs off, per shape, so that planning does not go on step after step. */
/* The steady state: after two whole steps served without a miss by the cyclic plan, the steps are no longer recorded
 * (each allocation is only counted); they are served all the same. A step that then misses is not recorded either,
 * so the next one is, and the re-plan is made from it: one step later than from recorded steps. */
static void the_steady_state_is_served_unrecorded_until_a_step_misses(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    for (int k = 0; k < 6; k++) /* learnt (steps 1, 2), then two clean steps: quiet from step 5 */
        one_step(&l);
    const int64_t per_step = 2 * (int64_t)l.layers + 1;
    hbm_stats s = stats_of(l.a);
    one_step(&l);
    hbm_stats t = stats_of(l.a);
    assert_int_equal(t.plan_hits - s.plan_hits, per_step);
    assert_int_equal(t.plan_misses, s.plan_misses);
    /* unrecorded: a block allocated now carries no record of its step (its note 0); one more allocation in a step
     * changes that step, so look at the carried loss, made last in the step above */
    assert_int_equal(((hbm__block *)hbm__ptrmap_get(&l.a->live, (uintptr_t)l.carry))->note, 0);
    l.scale = 8;  /* the activations grow: past the plan's sizes */
    one_step(&l); /* missed, unrecorded */
    hbm_stats u = stats_of(l.a);
    assert_true(u.plan_misses > t.plan_misses);
    assert_int_equal(u.plan_replans, t.plan_replans);
    one_step(&l); /* missed, recorded: re-planned at its end */
    hbm_stats v = stats_of(l.a);
    assert_true(v.plan_misses > u.plan_misses);
    assert_true(v.plan_replans > u.plan_replans);
    assert_int_equal(((hbm__block *)hbm__ptrmap_get(&l.a->live, (uintptr_t)l.carry))->note != 0, 1);
    one_step(&l); /* served again from the new plan (the loss carried in: unplanned until the plan is cyclic) */
    hbm_stats w = stats_of(l.a);
    assert_int_equal(w.plan_hits - v.plan_hits + w.plan_unplanned - v.plan_unplanned, per_step);
    assert_int_equal(w.plan_misses, v.plan_misses);
    one_step(&l); /* the cyclic plan: every allocation */
    hbm_stats x = stats_of(l.a);
    assert_int_equal(x.plan_hits - w.plan_hits, per_step);
    assert_int_equal(x.plan_misses, v.plan_misses);
    finish(&l);
}

static void alternating_step_shapes_keep_a_plan_each(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    for (int k = 0; k < 8; k++) { /* learn both */
        one_step(&l);
        one_step(&l);
        eval_step(&l);
    }
    hbm_stats s = stats_of(l.a);
    for (int k = 0; k < 8; k++) {
        one_step(&l);
        one_step(&l);
        eval_step(&l);
    }
    hbm_stats t = stats_of(l.a);
    assert_true(t.plan_replans - s.plan_replans <= 2);
    int64_t allocs = 8 * (2 * (int64_t)(2 * l.layers + 1) + 4);
    assert_true(10 * (t.plan_hits - s.plan_hits) >= 9 * allocs); /* 90% or more from the plans */
    finish(&l);
}

/* A plan higher than the region while a block of the region is held across the boundary: the old region becomes an
 * ordinary segment (the validator agrees), a new one is made, and the old is given back once its block is freed. */
static void a_higher_plan_retires_a_region_in_use(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    for (int k = 0; k < 4; k++)
        one_step(&l);
    hbm_stats s = stats_of(l.a);
    int64_t small_region = s.arena_bytes;
    void *held = alloc_checked(&l, l.scale * MiB); /* position 0: in the region, held past the boundary */
    assert_int_equal(hbm_step(l.a), HBM_OK);
    l.scale = 8; /* steps twice as large: misses, a new plan higher than the region */
    for (int k = 0; k < 4; k++)
        one_step(&l);
    s = stats_of(l.a);
    assert_true(s.arena_bytes > small_region);
    int64_t segments = s.segment[HBM_POOL_ALL].current;
    free_checked(&l, held);
    assert_int_equal(hbm_empty_cache(l.a), HBM_OK);
    assert_valid(l.a);
    assert_true(stats_of(l.a).segment[HBM_POOL_ALL].current < segments); /* the old region went back */
    finish(&l);
}

/* The same beside expandable segments: the retired region, still holding one block, is an expandable segment of
 * the large pool whose free pages are unmapped at the boundaries after the new plan (not left reserved whole until
 * its last block is freed), and is given back once that block is. */
static void beside_expandable_segments_a_retired_region_drains_page_by_page(void **st)
{
    (void)st;
    loop l = start("sim:capacity=8GiB", "expandable_segments:True,hbm_step_plan:True");
    for (int k = 0; k < 4; k++)
        one_step(&l);
    const hbm__segment *old = l.a->region_seg;
    assert_non_null(old);
    void *held = alloc_checked(&l, l.scale * MiB);
    assert_ptr_equal(hbm__segment_find(l.a, (uintptr_t)held), old);
    assert_int_equal(hbm_step(l.a), HBM_OK);
    l.scale = 8;
    for (int k = 0; k < 4; k++)
        one_step(&l);
    assert_true(l.a->region_seg != old);
    hbm__segment *seg = hbm__segment_find(l.a, (uintptr_t)held);
    assert_ptr_equal(seg, old);
    assert_ptr_equal(seg->pool, &l.a->large);
    size_t first = ((uintptr_t)held - seg->addr) / seg->page;
    size_t last = ((uintptr_t)held + l.scale / 2 * MiB - 1 - seg->addr) / seg->page; /* held: 4 MiB */
    assert_int_equal(seg->mapped_pages, last - first + 1);                           /* held's pages only */
    free_checked(&l, held);
    assert_int_equal(hbm_empty_cache(l.a), HBM_OK);
    assert_valid(l.a);
    assert_null(hbm__segment_find(l.a, (uintptr_t)held)); /* the old region went back */
    finish(&l);
}

/* A job that never calls hbm_step: the period of its allocations is found (at 1024 allocations, over half of them
 * repeating) and the steps are planned and served as if marked; a first hbm_step takes over. Allocations that do
 * not repeat never look like steps. */
static void unmarked_steps_are_found(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    l.unmarked = true;
    for (int k = 0; k < 100; k++)
        one_step(&l);
    hbm_stats s = stats_of(l.a);
    assert_true(s.steps > 2);
    assert_true(s.plan_replans >= 1);
    for (int k = 0; k < 10; k++)
        one_step(&l);
    hbm_stats t = stats_of(l.a);
    assert_int_equal(t.steps - s.steps, 10); /* one boundary per step of 13 allocations */
    assert_int_equal(t.plan_hits - s.plan_hits, 10 * (int64_t)(2 * l.layers + 1));
    assert_int_equal(t.plan_misses, s.plan_misses);
    l.unmarked = false; /* the job marks its steps from here: only its marks count */
    one_step(&l);
    int64_t marked = stats_of(l.a).steps;
    one_step(&l);
    one_step(&l);
    assert_int_equal(stats_of(l.a).steps, marked + 2);
    finish(&l);

    hbm_allocator *a = open_sim(NOVMM, "hbm_step_plan:True");
    uint64_t r = 99;
    void *live[64] = {0};
    for (int i = 0; i < 5000; i++) { /* random sizes and lifetimes */
        r = r * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((r >> 33) % 64);
        if (live[j])
            assert_int_equal(hbm_free(a, live[j]), HBM_OK);
        live[j] = must_malloc(a, 512 + (r >> 40) % (4 * MiB), 0);
    }
    assert_int_equal(stats_of(a).steps, 0);
    assert_int_equal(stats_of(a).plan_replans, 0);
    for (int j = 0; j < 64; j++)
        hbm_free(a, live[j]);
    assert_int_equal(hbm_destroy(a), HBM_OK);
}

/* One long step of a deep model, unmarked: 200 identical layers forward, each keeping its activation for the
 * backward pass (with a temporary freed at once), then the layers backward, freeing them. The layers repeat far more
 * than twice, at every power of two the allocator looks, but the live bytes rise (forward) or fall (backward) by a
 * layer each period: a repeat inside a step, not a step. Planning it as one reserved a region in the middle of the
 * step beside the caching policy's segments (MindSpore's pangu_2.6B graph then ran out of memory at 1.17x its live
 * bytes, where PyTorch's policy alone fits). */
static void layers_inside_one_step_are_not_steps(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim(NOVMM, "hbm_step_plan:True");
    enum { LAYERS = 400 };
    static void *act[LAYERS];
    for (int pass = 0; pass < 4; pass++) {
        for (int i = 0; i < LAYERS; i++) { /* four allocations a layer: a period long enough to be taken */
            act[i] = must_malloc(a, 2 * MiB + 512, 0);
            void *tmp = must_malloc(a, 3 * MiB, 0), *tmp2 = must_malloc(a, 512 * 1024, 0);
            void *tmp3 = must_malloc(a, 1536 * 1024, 0);
            assert_int_equal(hbm_free(a, tmp), HBM_OK);
            assert_int_equal(hbm_free(a, tmp2), HBM_OK);
            assert_int_equal(hbm_free(a, tmp3), HBM_OK);
        }
        for (int i = LAYERS; i-- > 0;) {
            void *grad = must_malloc(a, 2 * MiB + 512, 0);
            assert_int_equal(hbm_free(a, act[i]), HBM_OK);
            assert_int_equal(hbm_free(a, grad), HBM_OK);
        }
        if (pass == 0) { /* 2,400 allocations seen, looked at 1024 and 2048: no step found, no region */
            hbm_stats s = stats_of(a);
            assert_int_equal(s.steps, 0);
            assert_int_equal(s.plan_replans, 0);
            assert_int_equal(s.plan_height, 0);
            assert_valid(a);
        }
    }
    /* three more identical steps: now the whole step repeats, found at 8192 allocations (period 2,400) */
    assert_true(stats_of(a).steps >= 1);
    assert_int_equal(hbm_destroy(a), HBM_OK);
}

/* ---- property: random steps, perturbed ---- */

typedef struct entry {
    unsigned char *p;
    size_t n;
    unsigned char pat;
    int due_step, due_pos; /* freed when the loop reaches this step and position */
} entry;


static void free_entry(hbm_allocator *a, entry *e, int fill)
{
    if (fill)
        for (size_t i = 0; i < e->n; i += 97)
            if (e->p[i] != e->pat)
                fail_msg("block %p of %zu bytes was overwritten at %zu", (void *)e->p, e->n, i);
    assert_int_equal(hbm_free(a, e->p), HBM_OK);
    assert_valid(a);
}

/* A random step of T allocations (sizes, free points, some carried into the next step, a few kept for good),
 * repeated with perturbations: sizes grown (variable lengths), allocations skipped or inserted, frees late by a few
 * positions or by a step, record_stream on held streams, a new template now and then, device faults. The validator
 * runs after every call; with memory=host every block is filled and checked at its free, so a range handed out
 * twice is caught. */
static void run_steps_with(const char *spec, const char *settings, uint64_t seed, int fill, int faults, int pressure)
{
    hbm_allocator *a = open_sim(spec, settings);
    rng_state = seed * 0x9E3779B97F4A7C15ull + 7;
    enum { T = 48, STEPS = 60, MAXLIVE = 512 };
    size_t size[T];
    int free_at[T]; /* position of its free, >= T: in the next step, -1: kept */
    entry live[MAXLIVE];
    int nl = 0, injected = 0;
    for (int step = 0; step < STEPS; step++) {
        if (step % 20 == 0) { /* a new template: the step changes shape */
            for (int i = 0; i < T; i++) {
                size[i] = 512 + rnd() % (fill ? 192 * 1024 : 24 * MiB);
                uint64_t r = rnd() % 100;
                free_at[i] = r < 3 ? -1 : r < 15 ? T + (int)(rnd() % 6) : i + 1 + (int)(rnd() % (T - i));
            }
        }
        if (faults && step % 3 == 0) {
            hbm__sim_clear_faults(sim_of(a));
            hbm__sim_fault f = {.kind = rnd() % 2 ? HBM__OP_MALLOC : HBM__OP_FREE,
                                .nth = 1 + rnd() % 4,
                                .min_size = 0,
                                .max_size = SIZE_MAX,
                                .code = rnd() % 2 ? HBM__BE_OOM : HBM__SIM_ERR_INJECTED};
            hbm__sim_add_fault(sim_of(a), &f);
        }
        if (rnd() % 4 == 0)
            hbm__sim_stream_hold(sim_of(a), 0, 5, (int)(rnd() % 2));
        for (int pos = 0; pos <= T; pos++) {
            for (int j = 0; j < nl;) { /* what is due */
                if (live[j].due_step < step || (live[j].due_step == step && live[j].due_pos <= pos)) {
                    free_entry(a, &live[j], fill);
                    live[j] = live[--nl];
                } else {
                    j++;
                }
            }
            if (pos == T)
                break;
            int copies = rnd() % 200 == 0 ? 0 : rnd() % 200 == 0 ? 2 : 1; /* skipped, inserted */
            for (int c = 0; c < copies && nl < MAXLIVE; c++) {
                size_t n = c ? 512 + rnd() % 65536 : size[pos];
                if (rnd() % 20 == 0)
                    n += n / 2; /* longer this step */
                void *p = NULL;
                hbm_status rc = hbm_malloc(a, n, 0, &p);
                assert_valid(a);
                if (rc != HBM_OK) {
                    assert_true(rc == HBM_ERR_OOM || (faults && rc == HBM_ERR_BACKEND));
                    injected++;
                    continue;
                }
                entry *e = &live[nl++];
                *e = (entry){p, n, (unsigned char)(rnd() | 1), step, free_at[pos]};
                if (free_at[pos] < 0)
                    e->due_step = step + 25; /* "kept": long after */
                else if (free_at[pos] >= T)
                    e->due_step = step + 1, e->due_pos = free_at[pos] - T;
                if (rnd() % 30 == 0)
                    e->due_pos += 1 + (int)(rnd() % 4); /* a late free */
                if (rnd() % 60 == 0)
                    e->due_step++; /* a step late */
                if (fill)
                    for (size_t i = 0; i < n; i += 97)
                        e->p[i] = e->pat;
                if (rnd() % 40 == 0) {
                    assert_int_equal(hbm_record_stream(a, p, 5), HBM_OK);
                    assert_valid(a);
                }
            }
        }
        hbm_status rc = hbm_step(a);
        assert_true(rc == HBM_OK);
        assert_valid(a);
    }
    hbm__sim_clear_faults(sim_of(a));
    hbm__sim_stream_hold(sim_of(a), 0, 5, 0);
    while (nl > 0)
        free_entry(a, &live[--nl], fill);
    hbm_stats s = stats_of(a);
    print_message("  %s \"%s\" seed %llu: %lld hits, %lld misses, %lld unplanned, %lld plans, %d failed allocations\n",
                  spec, settings, (unsigned long long)seed, (long long)s.plan_hits, (long long)s.plan_misses,
                  (long long)s.plan_unplanned, (long long)s.plan_replans, injected);
    if (!faults && !pressure)
        assert_true(s.plan_hits > s.plan_misses); /* the plan serves most of what it planned */
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].current, 0);
    assert_int_equal(hbm_destroy(a), HBM_OK);
}

static void run_steps(const char *spec, uint64_t seed, int fill, int faults, int pressure)
{
    run_steps_with(spec, "hbm_step_plan:True", seed, fill, faults, pressure);
}

/* While a plan is served the region's freed blocks are left loose (src/core/region.c: not coalesced, outside the free
 * tree). A request the plan does not serve, larger than any loose block but inside the region's free space, is
 * served there all the same (the loose blocks coalesced first), with no new segment and no OOM; a region with
 * no plan in force is coalesced again. */
static void loose_blocks_are_coalesced_before_the_region_says_it_is_full(void **st)
{
    (void)st;
    loop l = start(NOVMM, "hbm_step_plan:True");
    for (int k = 0; k < 4; k++)
        one_step(&l);
    free_checked(&l, l.carry);
    l.carry = NULL;
    hbm_stats s = stats_of(l.a);
    assert_true(s.plan_hits > 0);
    assert_true(l.a->region.lazy);
    assert_true(l.a->region.nloose > 1); /* the step's blocks, freed where they were */
    for (const hbm__block *b = l.a->region.loose; b; b = (const hbm__block *)b->node.r)
        assert_true(b->size < (size_t)s.arena_bytes);
    assert_int_equal(hbm_set_memory_fraction(l.a, (double)s.reserved_bytes[0].current / (double)(8 * GiB)), HBM_OK);
    char *whole = alloc_checked(&l, (size_t)s.arena_bytes); /* the whole region: not planned, a miss */
    hbm_stats t = stats_of(l.a);
    assert_ptr_equal(whole, (char *)l.a->region_seg->addr);
    assert_int_equal(t.num_ooms, 0);
    assert_int_equal(t.reserved_bytes[0].current, s.reserved_bytes[0].current);
    assert_int_equal(l.a->region.nloose, 0);
    free_checked(&l, whole); /* left loose again: the plan is still in force */
    assert_int_equal(l.a->region.nloose, 1);
    finish(&l);
}

static void random_perturbed_steps_keep_every_invariant(void **st)
{
    (void)st;
    run_steps("sim:vmm=off,capacity=8GiB", 1, 0, 0, 0);
    run_steps("sim:vmm=off,capacity=8GiB", 2, 0, 0, 0);
    run_steps("sim:capacity=256MiB,memory=host", 3, 1, 0, 0); /* blocks filled and checked */
    run_steps("sim:vmm=off,capacity=2GiB", 4, 0, 1, 1);       /* device faults, memory pressure */
    run_steps("sim:vmm=off,capacity=600MiB", 5, 0, 0, 1);     /* OOMs while planning and serving; the region's
                                                                 best fit before an OOM */
    /* The same beside expandable segments: the region a plain allocation, the rest mapped page by page. */
    const char *es = "expandable_segments:True,hbm_step_plan:True";
    run_steps_with("sim:capacity=8GiB", es, 6, 0, 0, 0);
    run_steps_with("sim:capacity=256MiB,memory=host", es, 7, 1, 0, 0);
    run_steps_with("sim:capacity=2GiB", es, 8, 0, 1, 1);
    run_steps_with("sim:capacity=600MiB", es, 9, 0, 0, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_repeating_step_is_learnt_and_served_from_one_region),
        cmocka_unit_test(a_busy_range_falls_back_and_never_overlaps),
        cmocka_unit_test(a_block_used_by_another_stream_keeps_its_range),
        cmocka_unit_test(a_changed_step_is_planned_again),
        cmocka_unit_test(misses_under_pressure_use_the_regions_free_space),
        cmocka_unit_test(alternating_step_shapes_keep_a_plan_each),
        cmocka_unit_test(unmarked_steps_are_found),
        cmocka_unit_test(layers_inside_one_step_are_not_steps),
        cmocka_unit_test(the_steady_state_is_served_unrecorded_until_a_step_misses),
        cmocka_unit_test(a_higher_plan_retires_a_region_in_use),
        cmocka_unit_test(beside_expandable_segments_a_retired_region_drains_page_by_page),
        cmocka_unit_test(another_stream_is_not_planned),
        cmocka_unit_test(a_device_that_cannot_give_the_region_falls_back),
        cmocka_unit_test(with_expandable_segments_the_region_sits_beside_them),
        cmocka_unit_test(a_plan_file_and_the_step_plan_are_refused_together),
        cmocka_unit_test(cyclic_plans_never_overlap_buffers_live_together),
        cmocka_unit_test(a_wrapped_lifetime_meets_the_next_periods_start),
        cmocka_unit_test(the_sweep_never_overlaps_buffers_live_together),
        cmocka_unit_test(the_sweep_cuts_the_cycle_where_the_fewest_bytes_live),
        cmocka_unit_test(the_placement_by_size_keeps_buffers_apart_within_its_budget),
        cmocka_unit_test(a_plan_larger_than_the_cache_is_not_used),
        cmocka_unit_test(bad_lifetimes_are_refused),
        cmocka_unit_test(loose_blocks_are_coalesced_before_the_region_says_it_is_full),
        cmocka_unit_test(random_perturbed_steps_keep_every_invariant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
