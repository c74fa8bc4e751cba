/* test_arena.c: the hbm_arena policy (src/policy/arena.c): one region, every size of its stream best fit in it down to
 * 512 bytes, coalesced across it, kept by empty_cache; segments beyond it; other streams, private pools,
 * expandable segments and a device that cannot give it handled and said. */
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "run/plan.h"
#include "trace/trace.h"
#include "util/util.h"

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
    assert_non_null(strstr(hbm_last_error(a),
                           "The region of 64.00 MiB that hbm_arena serves from holds 14.00 MiB free, the largest piece "
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
}

/* With expandable segments in force too, the arena is one plain allocation beside them, and what does not fit in
 * it goes to an expandable segment, mapped page by page. */
static void beside_expandable_segments_the_arena_is_one_plain_allocation(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "expandable_segments:True,hbm_arena_mb:256");
    void *p = must_malloc(a, 4096, 0);
    assert_valid(a);
    assert_int_equal(stats_of(a).arena_bytes, 256 * MiB);
    assert_false(hbm__segment_find(a, (uintptr_t)p)->expandable);
    void *big = must_malloc(a, 300 * MiB, 0);
    assert_valid(a);
    assert_true(hbm__segment_find(a, (uintptr_t)big)->expandable);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 256 * MiB + 300 * MiB);
    hbm_free(a, big);
    assert_int_equal(hbm_empty_cache(a), HBM_OK); /* its pages unmapped, the arena kept */
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 256 * MiB);
    hbm_free(a, p);
    assert_valid(a);
    hbm_destroy(a);
}

/* ---- hbm_plan_file: a plan from an earlier run served from the arena ---- */

static char plan_path[] = "/tmp/hbm_plan_XXXXXX";

static void write_file(const char *text)
{
    int fd = mkstemp(plan_path);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* Replays t on a; sizes scaled by `grow` for every `every`-th allocation (0: none); the validator after each op. */
static void replay_checked(hbm_allocator *a, const trace *t, int every)
{
    void **slot = calloc(t->nslots + 1, sizeof *slot);
    size_t nalloc = 0;
    for (size_t i = 0; i < t->n; i++) {
        const trace_event *e = &t->ev[i];
        if (e->kind == EV_ALLOC) {
            size_t size = (size_t)e->size * (every && ++nalloc % (size_t)every == 0 ? 2 : 1);
            slot[e->slot] = must_malloc(a, size, e->stream);
        } else if (e->kind == EV_FREE) {
            assert_int_equal(hbm_free(a, slot[e->slot]), HBM_OK);
            slot[e->slot] = NULL;
        }
        assert_valid(a);
    }
    for (size_t i = 0; i < t->nslots; i++)
        if (slot[i])
            hbm_free(a, slot[i]);
    free(slot);
}

/* A random trace of n allocations: sizes 1 KiB to 64 MiB, up to 40 live. */
static void random_trace(trace *t, int n, uint64_t seed)
{
    static char text[1 << 20];
    hbm__sbuf sb;
    hbm__sb_init(&sb, text, sizeof text);
    hbm__sb_printf(&sb, "hbmtrace 1\n");
    int live[40] = {0}, nlive = 0, next = 1;
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        if (nlive == 40 || (nlive && (seed >> 33) % 3 == 0)) {
            int k = (int)((seed >> 40) % (uint64_t)nlive);
            hbm__sb_printf(&sb, "f %d\n", live[k]);
            live[k] = live[--nlive];
        }
        hbm__sb_printf(&sb, "a %d %llu 0\n", next, (unsigned long long)(1024 + (seed >> 20) % (64 * MiB)));
        live[nlive++] = next++;
    }
    char err[256];
    assert_int_equal(trace_read_text_mem("random", text, sb.len, t, err, sizeof err), 0);
}

/* t replayed with every 5th allocation twice its size, under settings that serve t's plan: the statistics. */
static hbm_stats differing_run(const char *settings, const trace *t)
{
    hbm_allocator *a = open_sim("sim:capacity=64GiB", settings);
    replay_checked(a, t, 5);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.plan_hits + s.plan_misses, 3000);
    assert_true(s.plan_misses >= 600);
    hbm_destroy(a);
    return s;
}

static void a_plan_from_an_earlier_run_is_served_at_its_offsets(void **st)
{
    (void)st;
    trace t;
    random_trace(&t, 3000, 42);
    plan p;
    char err[256];
    assert_int_equal(plan_build(&t, NULL, &p, err, sizeof err), 0);
    FILE *f = fdopen(mkstemp(plan_path), "w");
    assert_non_null(f);
    assert_int_equal(plan_write(&p, "random", f), 0);
    fclose(f);
    char settings[200];
    snprintf(settings, sizeof settings, "hbm_plan_file:%s", plan_path);
    /* The same run: every allocation at its offset, one device allocation of the plan's height. */
    hbm_allocator *a = open_sim("sim:capacity=64GiB", settings);
    replay_checked(a, &t, 0);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.plan_hits, 3000);
    assert_int_equal(s.plan_misses, 0);
    assert_int_equal(s.plan_height, (int64_t)p.height);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].peak, (int64_t)p.height);
    assert_int_equal(device_mallocs(a), 1);
    hbm_destroy(a);
    /* A run that differs (every 5th allocation twice the size): those miss and are served by best fit in the arena
     * or segments; the rest still hit when their range is free; the validator holds throughout. */
    s = differing_run(settings, &t);
    assert_true(s.plan_hits > 0);
    /* Beside expandable segments the region is address space mapped page by page (2 MiB) as the plan's
     * allocations touch it: the same run maps the pages under the plan's height and makes no device allocation;
     * what a differing run misses goes to the region's mapped free space, then to expandable segments. */
    char both[240];
    snprintf(both, sizeof both, "expandable_segments:True,%s", settings);
    a = open_sim("sim:capacity=64GiB", both);
    replay_checked(a, &t, 0);
    s = stats_of(a);
    assert_int_equal(s.plan_hits, 3000);
    assert_true(a->region_seg->expandable);
    size_t pages = (p.height + 2 * MiB - 1) / (2 * MiB);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].peak, (int64_t)(pages * 2 * MiB));
    assert_int_equal(device_mallocs(a), 0);
    hbm_destroy(a);
    s = differing_run(both, &t);
    assert_true(s.num_device_alloc > 1); /* pages mapped for what the arena could not hold */
    unlink(plan_path);
    plan_free(&p);
    trace_free(&t);
}

static void a_taken_range_is_a_miss_not_an_overlap(void **st)
{
    (void)st;
    /* Allocations 0 and 1 planned at the same offset (1 was to come after 0's free): 0 stays live, so 1 misses and
     * goes elsewhere in the arena. */
    strcpy(plan_path, "/tmp/hbm_plan_XXXXXX");
    write_file("hbmplan 1\nheight 8192\n# alloc offset size start end\n0 0 4096 0 1\n1 0 4096 1 2\n");
    char settings[200];
    snprintf(settings, sizeof settings, "hbm_plan_file:%s", plan_path);
    hbm_allocator *a = open_sim("sim:capacity=1GiB", settings);
    char *p0 = must_malloc(a, 4096, 0), *p1 = must_malloc(a, 4096, 0);
    assert_ptr_equal(p1, p0 + 4096);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.plan_hits, 1);
    assert_int_equal(s.plan_misses, 1);
    assert_int_equal(s.arena_bytes, 8192);
    hbm_free(a, p0);
    hbm_free(a, p1);
    assert_valid(a);
    hbm_destroy(a);
    unlink(plan_path);
}

static void bad_plan_files_are_refused_with_file_and_line(void **st)
{
    (void)st;
    const struct {
        const char *text, *want;
    } cases[] = {
        {"hbmplan 2\n", ":1: not a plan file"},
        {"hbmplan 1\nheight 0\n", ":2: expected 'height BYTES'"},
        {"hbmplan 1\nheight 4096\n0 0 4096 0 1\n2 0 512 0 1\n", ":4: allocations must be numbered"},
        {"hbmplan 1\nheight 4096\n0 512 4096 0 1\n", ":3: offset and size must be multiples of 512 inside the height"},
        {"hbmplan 1\nheight 4096\n0 0 100 0 1\n", ":3: offset and size must be multiples"},
        {"hbmplan 1\nheight 4096\n0 0\n", ":3: expected 'alloc offset size start end'"},
        {"hbmplan 1\nheight 4096\n0 0 4096 5 5\n", ":3: the lifetime [start, end) must be a non-empty range"},
        {"hbmplan 1\n", "no height line"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        strcpy(plan_path, "/tmp/hbm_plan_XXXXXX");
        write_file(cases[i].text);
        char settings[200], err[512];
        snprintf(settings, sizeof settings, "hbm_plan_file:%s", plan_path);
        hbm_allocator *a;
        assert_int_equal(hbm_open(&a, "sim:capacity=1GiB", 0, settings, err, sizeof err), HBM_ERR_CONF);
        if (!strstr(err, cases[i].want) || !strstr(err, plan_path))
            fail_msg("case %zu: '%s' lacks '%s'", i, err, cases[i].want);
        unlink(plan_path);
    }
    char err[512];
    hbm_allocator *a;
    assert_int_equal(hbm_open(&a, "sim:capacity=1GiB", 0, "hbm_plan_file:/nonexistent/p.plan", err, sizeof err),
                     HBM_ERR_CONF);
    assert_non_null(strstr(err, "cannot open /nonexistent/p.plan"));
    assert_int_equal(hbm_open(&a, "sim:capacity=1GiB", 0, "hbm_plan_file:/dev/zero", err, sizeof err), HBM_ERR_CONF);
    assert_non_null(strstr(err, "(not a regular file)"));
    /* Issue #28 item 12: a FIFO blocked hbm_open for ever (the file was opened before it was checked): it is opened
     * without blocking and refused. The alarm turns the old hang into a failure. */
    char dir[] = "/tmp/hbm_fifo_XXXXXX", fifo[64], settings[100];
    assert_non_null(mkdtemp(dir));
    snprintf(fifo, sizeof fifo, "%s/plan", dir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    snprintf(settings, sizeof settings, "hbm_plan_file:%s", fifo);
    alarm(60);
    assert_int_equal(hbm_open(&a, "sim:capacity=1GiB", 0, settings, err, sizeof err), HBM_ERR_CONF);
    alarm(0);
    assert_non_null(strstr(err, "(not a regular file)"));
    unlink(fifo);
    rmdir(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(one_region_serves_every_size_split_to_512_bytes),
        cmocka_unit_test(what_does_not_fit_goes_to_segments_which_are_released),
        cmocka_unit_test(other_streams_and_private_pools_use_segments),
        cmocka_unit_test(beside_expandable_segments_the_arena_is_one_plain_allocation),
        cmocka_unit_test(an_arena_the_device_cannot_give_is_said_and_segments_serve),
        cmocka_unit_test(a_plan_from_an_earlier_run_is_served_at_its_offsets),
        cmocka_unit_test(a_taken_range_is_a_miss_not_an_overlap),
        cmocka_unit_test(bad_plan_files_are_refused_with_file_and_line),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
