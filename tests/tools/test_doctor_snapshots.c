/* test_doctor_snapshots.c: `hbmalloc doctor --snapshot` (tools/doctor/doctor_snapshots.c, tools/trace/ranks.c):
 * several ranks' snapshots compared. The snapshots are written by hbmalloc's own writer (src/io/snapshot.c: the
 * keys of torch's _memory_snapshot_pickled, pytorch/pytorch v2.5.0 torch/csrc/cuda/memory_snapshot.cpp) from the
 * simulated device, each block allocated at a frame (a label "name\tfile\tline" is written as torch's frame dict), or
 * in torch's own shape as JSON where the test needs torch's frames (copied from tests/data/linear-10k-50k-grad.pickle,
 * a real torch 2.4 snapshot recorded with C++ stacks). */
#include <sys/stat.h>

#include "helpers.h"

#include "doctor/doctor_snapshots.h"
#include "util/util.h"
#include "trace/ranks.h"

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hbm-ranks-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int remove_dir(void **state)
{
    (void)state;
    remove_records_dir(dir);
    return 0;
}

static const char *in_dir(const char *name)
{
    static char path[4][256];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

/* Blocks a rank holds: count blocks of size bytes, allocated at frame ("name\tfile\tline"). */
typedef struct held {
    size_t size;
    int count;
    const char *frame;
} held;

/* One rank's snapshot by hbmalloc's writer: its blocks held, `cached` bytes allocated and freed (reserved, not
 * allocated), and `emptied` bytes allocated, freed and given back (hbm_empty_cache: only the history shows them). */
static void write_rank(const char *name, const held *h, size_t n, size_t cached, size_t emptied)
{
    hbm_allocator *a = open_sim("sim:capacity=200GiB", "");
    assert_int_equal(hbm_history_enable(a, 100000), HBM_OK);
    void *p;
    if (emptied) {
        assert_int_equal(hbm_malloc(a, emptied, 0, &p), HBM_OK);
        assert_int_equal(hbm_free(a, p), HBM_OK);
        assert_int_equal(hbm_empty_cache(a), HBM_OK);
    }
    for (size_t i = 0; i < n; i++) {
        hbm_label l;
        assert_int_equal(hbm_label_intern(a, h[i].frame, &l), HBM_OK);
        for (int k = 0; k < h[i].count; k++)
            assert_int_equal(hbm_malloc_labeled(a, h[i].size, 0, l, &p), HBM_OK);
    }
    if (cached) {
        assert_int_equal(hbm_malloc(a, cached, 0, &p), HBM_OK);
        assert_int_equal(hbm_free(a, p), HBM_OK);
    }
    hbm_snapshot *s;
    char err[512];
    assert_int_equal(hbm_snapshot_take(a, &s), HBM_OK);
    assert_int_equal(hbm_snapshot_save(s, in_dir(name), HBM_SNAPSHOT_PICKLE, err, sizeof err), HBM_OK);
    hbm_snapshot_free(s);
    hbm_destroy(a);
}

static void write_text(const char *name, const char *text)
{
    FILE *f = fopen(in_dir(name), "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* What every rank of a data-parallel step holds (sizes of a transformer's layers), and the last pipeline stage's
 * extra: its logits, at another frame. */
static const held common[] = {{1 * GiB, 8, "forward\tmodel.py\t50"}, {64 * MiB, 16, "attention\tmodel.py\t77"}};
static const held last_stage[] = {{1 * GiB, 8, "forward\tmodel.py\t50"},
                                  {64 * MiB, 16, "attention\tmodel.py\t77"},
                                  {2 * GiB, 3, "logits\ttrain.py\t88"},
                                  {1 * GiB, 2, "checkpoint\ttrain.py\t120"}};

/* The text the section prints, as one string. */
static char *section(const doctor_snaps *s)
{
    static char buf[16384];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    assert_non_null(f);
    doctor_snaps_text(s, f);
    fclose(f);
    return buf;
}

static void has_text(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("expected \"%s\" in:\n%s", needle, hay);
}

static void ranks_come_from_file_names(void **st)
{
    (void)st;
    assert_int_equal(ranks_from_name("rank3.pickle"), 3);
    assert_int_equal(ranks_from_name("/d/snap_rank_12.pickle"), 12);
    assert_int_equal(ranks_from_name("RANK-2.json"), 2);
    assert_int_equal(ranks_from_name("snapshot-r7.pickle"), 7);
    assert_int_equal(ranks_from_name("hbmalloc-oom-rank7-dev1-pid4242-1.pickle"), 7); /* hbm_oom_dump's name */
    assert_int_equal(ranks_from_name("hbmalloc-oom-norank-dev0-pid4242-1.pickle"), -1);
    assert_int_equal(ranks_from_name("/jobs/rank1/snapshot.pickle"), -1); /* only the file's own name */
    assert_int_equal(ranks_from_name("trace-r2d2.pickle"), -1);
    assert_int_equal(ranks_from_name("rank12345678.pickle"), -1); /* past seven digits: no rank */
    assert_int_equal(ranks_from_name("oom.pickle"), -1);
}

static void the_rule_takes_the_median_rank_and_three_spreads(void **st)
{
    (void)st;
    double four[] = {40, 10, 30, 20};
    assert_true(ranks_median(four, 4) == 20); /* the lower middle: one rank's own value */
    double two[] = {30, 20};
    assert_true(ranks_median(two, 2) == 20); /* with two ranks, the smaller */
    double g = RANKS_MIN_BYTES;
    assert_true(ranks_is_high(30 * g, 20 * g, 0, g));
    assert_false(ranks_is_high(20.5 * g, 20 * g, 0, g)); /* under 20% above */
    assert_false(ranks_is_high(1.9 * g, 1 * g, 0, g));   /* under 1 GiB above */
    double spread[] = {10 * g, 20 * g, 30 * g, 40 * g, 50 * g};
    double m = ranks_median(spread, 5), mad = ranks_mad(spread, 5, m);
    assert_true(m == 30 * g && mad == 10 * g);
    assert_false(ranks_is_high(50 * g, m, mad, g)); /* ranks that spread widely: within three spreads */
    assert_true(ranks_is_high(80 * g, m, mad, g));
}

static void the_rank_holding_more_is_named_with_its_sizes_and_frames(void **st)
{
    (void)st;
    write_rank("snap_rank0.pickle", common, 2, 0, 0);
    write_rank("snap_rank1.pickle", common, 2, 0, 0);
    write_rank("snap_rank2.pickle", common, 2, 0, 0);
    write_rank("snap_rank3.pickle", last_stage, 4, 0, 0);
    doctor d;
    doctor_init(&d);
    doctor_snaps s;
    doctor_snaps_init(&s);
    char err[700];
    assert_int_equal(doctor_snaps_add(&s, dir, err, sizeof err), 0); /* a folder */
    assert_int_equal(s.npaths, 4);
    assert_int_equal(doctor_snaps_run(&s, &d, NULL), 0);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.noutliers, 1);
    for (int k = 0; k < 4; k++)
        assert_int_equal(s.r[k].rank, k);
    const snap_rank *r = &s.r[3];
    assert_true(r->outlier & SNAP_RESERVED);
    assert_int_equal(s.r[0].outlier | s.r[1].outlier | s.r[2].outlier, 0);
    assert_int_not_equal(s.r[s.median].rank, 3);
    /* What it holds more: 3 x 2 GiB at train.py:88, then 2 x 1 GiB at train.py:120 (the size the others hold at
     * model.py:50 too: told apart by the frame), nothing else. */
    assert_int_equal(r->ndiff_all, 2);
    assert_string_equal(snaps_frame(&s, r->diff[0].g.frame), "train.py:88:logits");
    assert_int_equal(r->diff[0].dcount, 3);
    assert_int_equal(r->diff[0].dbytes, 6 * GiB);
    assert_string_equal(snaps_frame(&s, r->diff[1].g.frame), "train.py:120:checkpoint");
    assert_int_equal(r->diff[1].dbytes, 2 * GiB);
    assert_int_equal(r->diff_bytes, 8 * GiB);
    assert_int_equal(d.n, 1);
    assert_string_equal(d.f[0].id, "rank-outlier");
    has_text(d.f[0].title, "rank 3 stands out among 4 ranks");
    has_text(d.f[0].why, "allocated at train.py:88:logits");
    char *text = section(&s);
    has_text(text, "+6.00 GiB    3 more blocks of 2.00 GiB at train.py:88:logits");
    has_text(text, "+2.00 GiB    2 more blocks of 1024.00 MiB at train.py:120:checkpoint"); /* PyTorch's format_size */
    for (const char *l = text; *l;) { /* the doctor's 100 columns, no space at a line's end */
        size_t len = strcspn(l, "\n");
        if (len > 100 || (len && l[len - 1] == ' '))
            fail_msg("line of %zu columns or ending in a space: %.*s", len, (int)len, l);
        l += len + (l[len] == '\n');
    }
    doctor_snaps_free(&s);
    doctor_free(&d);
}

static void ranks_alike_have_no_outlier(void **st)
{
    (void)st;
    write_rank("rank0.pickle", common, 2, 0, 0);
    write_rank("rank1.pickle", common, 2, 0, 0);
    write_rank("rank2.pickle", common, 2, 64 * MiB, 0); /* a little cached: under the rule's floor */
    doctor d;
    doctor_init(&d);
    doctor_snaps s;
    doctor_snaps_init(&s);
    char err[700], pattern[128];
    snprintf(pattern, sizeof pattern, "%s/rank*.pickle", dir); /* a pattern, as the shell left it quoted */
    assert_int_equal(doctor_snaps_add(&s, pattern, err, sizeof err), 0);
    assert_int_equal(s.npaths, 3);
    assert_int_equal(doctor_snaps_run(&s, &d, NULL), 0);
    assert_int_equal(s.n, 3);
    assert_int_equal(s.noutliers, 0);
    assert_int_equal(d.n, 0);
    has_text(section(&s), "No outlier");
    doctor_snaps_free(&s);
    doctor_free(&d);
}

/* torch's frames, innermost first, as the real snapshot tests/data/linear-10k-50k-grad.pickle records them (C++
 * stacks on: the capture, the caching allocator, the interpreter, then the Python frames). */
#define TORCH_FRAMES                                                                                                   \
    "[{\"name\":\"torch::unwind::unwind()\",\"filename\":\"??\",\"line\":0},"                                          \
    "{\"name\":\"torch::cuda::(anonymous namespace)::gather_with_cpp()\",\"filename\":\"memory_snapshot.cpp\","        \
    "\"line\":0},"                                                                                                     \
    "{\"name\":\"c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc(signed char, unsigned long, " \
    "CUstream_st*)\",\"filename\":\"CUDACachingAllocator.cpp\",\"line\":0},"                                           \
    "{\"name\":\"cfunction_call\",\"filename\":\"/usr/local/src/conda/python-3.10.14/Objects/methodobject.c\","        \
    "\"line\":543},"                                                                                                   \
    "{\"name\":\"__init__\",\"filename\":\"/home/u/env/lib/python3.10/site-packages/torch/nn/modules/linear.py\","     \
    "\"line\":99},"                                                                                                    \
    "{\"name\":\"<module>\",\"filename\":\"/mnt/ssd1/u/model_memory_usage/profile_grad.py\",\"line\":8}]"

/* A snapshot in torch's shape (JSON: json.dump(torch.cuda.memory._snapshot())): one segment of `blocks` 1 GiB blocks
 * at torch's frames, and a free rest; top: more top-level keys. */
/* The snapshots one --snapshot argument names (a file, a folder, a pattern), compared. */
static void compare(doctor *d, doctor_snaps *s, const char *arg)
{
    doctor_init(d);
    doctor_snaps_init(s);
    char err[700];
    assert_int_equal(doctor_snaps_add(s, arg, err, sizeof err), 0);
    assert_int_equal(doctor_snaps_run(s, d, NULL), 0);
}

static void write_torch(const char *name, int blocks, const char *top)
{
    char buf[16384];
    hbm__sbuf sb;
    hbm__sb_init(&sb, buf, sizeof buf);
    hbm__sb_printf(&sb,
                   "{%s\"segments\":[{\"device\":0,\"address\":139692569788416,\"total_size\":%zu,\"stream\":0,"
                   "\"segment_type\":\"large\",\"blocks\":[",
                   top, (size_t)(blocks + 1) * GiB);
    for (int k = 0; k < blocks; k++)
        hbm__sb_printf(&sb, "{\"size\":%zu,\"requested_size\":%zu,\"state\":\"active_allocated\",\"frames\":%s},", GiB,
                       GiB, TORCH_FRAMES);
    hbm__sb_printf(&sb, "{\"size\":%zu,\"state\":\"inactive\",\"frames\":[]}]}],\"device_traces\":[[]]}\n", GiB);
    assert_true(sb.len < sizeof buf - 1);
    write_text(name, buf);
}

static void a_torch_stack_is_named_by_its_first_frame_outside_torch(void **st)
{
    (void)st;
    write_torch("a_rank0.json", 4, "");
    write_torch("a_rank1.json", 4, "");
    write_torch("a_rank2.json", 8, "");
    doctor d;
    doctor_snaps s;
    compare(&d, &s, in_dir("a_rank*.json"));
    assert_int_equal(s.noutliers, 1);
    const snap_rank *r = &s.r[2];
    assert_false(s.use_peak); /* no segment events in these histories: reserved at the snapshot is compared */
    assert_int_equal(r->reserved, 9 * GiB);
    assert_int_equal(r->largest_free, 1 * GiB);
    assert_int_equal(r->ndiff_all, 1);
    assert_string_equal(snaps_frame(&s, r->diff[0].g.frame), "profile_grad.py:8:<module>"); /* torch's _frame_fmt */
    assert_int_equal(r->diff[0].dcount, 4);
    doctor_snaps_free(&s);
    doctor_free(&d);
}

static void cached_memory_makes_an_unallocated_outlier_and_the_peak_comes_from_the_history(void **st)
{
    (void)st;
    write_rank("rank0.pickle", common, 2, 0, 0);
    write_rank("rank1.pickle", common, 2, 0, 0);
    write_rank("rank2.pickle", common, 2, 0, 12 * GiB); /* reached 12 GiB more, then emptied its cache */
    write_rank("rank3.pickle", common, 2, 6 * GiB, 0);  /* holds 6 GiB cached, free */
    doctor d;
    doctor_snaps s;
    compare(&d, &s, dir);
    assert_true(s.use_peak);
    const snap_rank *r2 = &s.r[2], *r3 = &s.r[3];
    assert_int_equal(r2->reserved, s.r[0].reserved);
    assert_int_equal(r2->peak, 12 * GiB + 0); /* its first 12 GiB segment, before the cache was emptied */
    assert_true(r2->outlier & SNAP_RESERVED); /* its peak */
    assert_false(r2->outlier & SNAP_UNALLOCATED);
    assert_true(r3->outlier & SNAP_UNALLOCATED);
    assert_int_equal(r3->reserved - r3->allocated, 6 * GiB);
    assert_int_equal(r3->largest_free, 6 * GiB);
    assert_int_equal(r3->ndiff_all, 0); /* nothing active more than the median rank: the cache */
    char *text = section(&s);
    has_text(text, "It holds no active blocks that rank 0 (the median rank) does not.");
    /* The figures that stand out, each against the median's, one separator between two. */
    has_text(text, "\n  Outlier rank 2: peak reserved 12.00 GiB against 9.00 GiB\n");
    has_text(text,
             "\n  Outlier rank 3: peak reserved 15.00 GiB against 9.00 GiB; unallocated 6.00 GiB against 0 bytes\n");
    doctor_snaps_free(&s);
    doctor_free(&d);
}

static void outside_is_read_where_the_snapshot_says_and_unknown_elsewhere(void **st)
{
    (void)st;
    write_torch("o_rank0.json", 4, "\"outside_bytes\":1073741824,");
    write_torch("o_rank1.json", 4, "\"outside_bytes\":1073741824,");
    write_torch("o_rank2.json", 4, "\"device_used_bytes\":11811160064,"); /* 11 GiB used, 5 reserved: 6 outside */
    write_torch("o_rank3.json", 4, "\"rank\":7,");                        /* a "rank" key outranks the name */
    doctor d;
    doctor_snaps s;
    compare(&d, &s, dir);
    assert_int_equal(s.n, 4);
    assert_int_equal(s.r[0].outside, 1 * GiB);
    assert_int_equal(s.r[2].outside, 6 * GiB);
    assert_int_equal(s.r[3].rank, 7);
    assert_int_equal(s.r[3].outside, -1);
    assert_int_equal(s.noutside, 3);
    assert_int_equal(s.r[2].outlier, SNAP_OUTSIDE);
    assert_int_equal(s.noutliers, 1);
    has_text(d.f[0].title, "outside the allocator 6.00 GiB");
    has_text(section(&s), "unknown");
    doctor_snaps_free(&s);
    doctor_free(&d);
}

static void bad_input_is_said_and_the_rest_compared(void **st)
{
    (void)st;
    write_rank("rank0.pickle", common, 2, 0, 0);
    write_rank("rank1.pickle", common, 2, 0, 0);
    write_rank("rank1_again.pickle", last_stage, 4, 0, 0);
    write_text("rank2.pickle", "Traceback (most recent call last):\n  a log, not a snapshot\n");
    /* A snapshot cut short (a dump the job's end interrupted): its first half. */
    FILE *in = fopen(in_dir("rank0.pickle"), "rb");
    char half[4096];
    size_t got = fread(half, 1, sizeof half, in);
    fclose(in);
    FILE *out = fopen(in_dir("rank3.pickle"), "wb");
    fwrite(half, 1, got / 2, out);
    fclose(out);
    write_text("rank4.json", "{\"segments\": 3}");
    doctor d;
    doctor_init(&d);
    doctor_snaps s;
    doctor_snaps_init(&s);
    char err[700];
    static const char *const names[] = {"rank0.pickle", "rank1.pickle", "rank1_again.pickle",
                                        "rank2.pickle", "rank3.pickle", "rank4.json"};
    for (int k = 0; k < 6; k++)
        assert_int_equal(doctor_snaps_add(&s, in_dir(names[k]), err, sizeof err), 0);
    char pattern[128];
    snprintf(pattern, sizeof pattern, "%s/nothing*.pickle", dir);
    assert_int_equal(doctor_snaps_add(&s, pattern, err, sizeof err), -1);
    has_text(err, "no file matches");
    mkdir(in_dir("empty"), 0700);
    assert_int_equal(doctor_snaps_add(&s, in_dir("empty"), err, sizeof err), -1);
    has_text(err, "no snapshot in the folder");
    rmdir(in_dir("empty"));
    assert_int_equal(doctor_snaps_run(&s, &d, NULL), 0);
    assert_int_equal(s.n, 2); /* rank 0 and the first rank 1 */
    assert_int_equal(s.unreadable, 3);
    assert_int_equal(s.nbad, 4);
    char *text = section(&s);
    has_text(text, "rank1_again.pickle is left out: it is rank 1 too");
    has_text(text, "rank2.pickle is not a memory snapshot");
    has_text(text, "rank3.pickle is not a memory snapshot this reads: offset");
    has_text(text, "rank4.json is not a PyTorch memory snapshot (no list of segments)");
    assert_int_equal(s.noutliers, 0);
    doctor_snaps_free(&s);
    doctor_free(&d);
}

static void one_snapshot_has_nothing_to_compare(void **st)
{
    (void)st;
    write_rank("rank0.pickle", last_stage, 4, 0, 0);
    doctor d;
    doctor_snaps s;
    compare(&d, &s, in_dir("rank0.pickle"));
    assert_int_equal(s.n, 1);
    assert_int_equal(d.n, 0);
    has_text(section(&s), "One rank's snapshot only: nothing to compare it with.");
    doctor_snaps_free(&s);
    doctor_free(&d);
}

/* A pickle by hand (protocol 2), as Python's pickle writes a list holding one object many times (a memo reference,
 * BINGET: two bytes a repeat): {"segments": [seg] * segs, "device_traces": [[event] * events]}, where seg is
 * {"device": 0, "total_size": total, "blocks": [block] * blocks}, block {"size": size, "state":
 * "active_pending_free"} and event {"action": "segment_free", "size": size}. */
static void put_str(FILE *f, const char *s)
{
    uint32_t n = (uint32_t)strlen(s);
    fputc('X', f); /* BINUNICODE: length, little-endian */
    for (int i = 0; i < 4; i++)
        fputc((int)(n >> (8 * i) & 0xff), f);
    fputs(s, f);
}

static void put_long(FILE *f, uint64_t v)
{
    fputc(0x8a, f), fputc(8, f); /* LONG1, eight bytes little-endian */
    for (int i = 0; i < 8; i++)
        fputc((int)(v >> (8 * i) & 0xff), f);
}

/* count references to the dict just written (memo slot memo): BINPUT once, then BINGET. */
static void put_repeats(FILE *f, int memo, int count)
{
    fputc('q', f), fputc(memo, f);
    for (int i = 1; i < count; i++)
        fputc('h', f), fputc(memo, f);
}

static void write_snapshot(const char *name, uint64_t total, int segs, uint64_t size, int blocks, int events)
{
    FILE *f = fopen(in_dir(name), "wb");
    assert_non_null(f);
    fputs("\x80\x02}", f);
    put_str(f, "segments");
    fputs("](}(", f);
    put_str(f, "device");
    fputc('K', f), fputc(0, f);
    put_str(f, "total_size");
    put_long(f, total);
    put_str(f, "blocks");
    fputc(']', f);
    if (blocks) {
        fputs("(}(", f);
        put_str(f, "size");
        put_long(f, size);
        put_str(f, "state");
        put_str(f, "active_pending_free");
        fputc('u', f);
        put_repeats(f, 2, blocks);
        fputc('e', f);
    }
    fputc('u', f);
    put_repeats(f, 1, segs);
    fputs("es", f);
    put_str(f, "device_traces");
    fputs("]]", f);
    if (events) {
        fputs("(}(", f);
        put_str(f, "action");
        put_str(f, "segment_free");
        put_str(f, "size");
        put_long(f, size);
        fputc('u', f);
        put_repeats(f, 3, events);
        fputc('e', f);
    }
    fputs("as.", f);
    fclose(f);
}

/* Sizes that add up past what any device has: the file is refused, not summed past int64_t (found by fuzzing's
 * kin under UBSan). 40,000 references to one 2^48-byte segment overflowed the reserved figure; three to a block of
 * 2^47 bytes freed while a stream used it overflowed the outlier's differences; three segment_free events of 2^47
 * bytes, the history walked back. A snapshot whose segments list no blocks is read by the segments' own figures,
 * and its history back to its start (two segments freed: a peak of 5 MiB). */
static void sizes_past_any_device_are_refused_and_segments_without_blocks_read(void **st)
{
    (void)st;
    write_snapshot("rank0.pickle", 1ull << 48, 40000, 0, 0, 0);
    write_snapshot("rank1.pickle", 1ull << 20, 1, 1ull << 47, 3, 0);
    write_snapshot("rank2.pickle", 1ull << 20, 1, 1ull << 47, 0, 3);
    write_snapshot("rank3.pickle", 1ull << 20, 3, 1ull << 20, 0, 2);
    write_snapshot("rank4.pickle", 1ull << 20, 3, 1ull << 20, 0, 2);
    doctor d;
    doctor_snaps s;
    compare(&d, &s, dir);
    assert_int_equal(s.n, 2);
    assert_int_equal(s.unreadable, 3);
    char *text = section(&s);
    has_text(text, "rank0.pickle: the segments on one device add up to more than");
    has_text(text, "rank1.pickle: the active blocks on one device add up to more than");
    has_text(text, "rank2.pickle: the history's segment events add up to more than");
    for (size_t i = 0; i < s.n; i++) {
        assert_int_equal(s.r[i].reserved, 3 << 20);
        assert_int_equal(s.r[i].peak, 5 << 20);
        assert_int_equal(s.r[i].allocated, 0);
    }
    doctor_snaps_free(&s);
    doctor_free(&d);
}

int main(void)
{
    setenv("HBMALLOC_QUIET", "1", 1);
#define T(f) cmocka_unit_test_setup_teardown(f, make_dir, remove_dir)
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ranks_come_from_file_names),
        cmocka_unit_test(the_rule_takes_the_median_rank_and_three_spreads),
        T(the_rank_holding_more_is_named_with_its_sizes_and_frames),
        T(ranks_alike_have_no_outlier),
        T(a_torch_stack_is_named_by_its_first_frame_outside_torch),
        T(cached_memory_makes_an_unallocated_outlier_and_the_peak_comes_from_the_history),
        T(outside_is_read_where_the_snapshot_says_and_unknown_elsewhere),
        T(bad_input_is_said_and_the_rest_compared),
        T(one_snapshot_has_nothing_to_compare),
        T(sizes_past_any_device_are_refused_and_segments_without_blocks_read),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
