/* test_doctor.c: hbmalloc doctor's parsers and log recognisers, on real log lines (tests/data/doctor/SOURCES.md). */
#define _GNU_SOURCE /* fopencookie */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>

#include "helpers.h"

#include "doctor/doctor.h"
#include "doctor/doctor_ranks.h"
#include "doctor/wrap.h"

#define LOGS HBM_TEST_DATA "/doctor/logs/"

static void versions_compare_by_torch_npu_grammar(void **st)
{
    (void)st;
    assert_int_equal(doctor_vercmp("24.1.rc2", "24.1.0"), -1); /* a release candidate precedes its release */
    assert_int_equal(doctor_vercmp("23.0.rc3", "23.0.0"), -1);
    assert_int_equal(doctor_vercmp("23.0.RC3", "23.0.rc3"), 0);
    assert_int_equal(doctor_vercmp("22.0.3", "23.0.0"), -1);
    assert_int_equal(doctor_vercmp("25.3.rc1", "23.0.0"), 1);
    assert_int_equal(doctor_vercmp("23.0", "23.0.0"), 0);
    assert_int_equal(doctor_vercmp("7.3.0.1.231", "7.2.99"), 1);
    assert_int_equal(doctor_vercmp("7.10.0", "7.9.0"), 1); /* numbers, not text */
}

static void firmware_ranges_from_version_info(void **st)
{
    (void)st;
    /* A user's report (tests/data/doctor/SOURCES.md, root-mismatch): driver 24.1.rc2 takes [7.0.0, 7.2.99], firmware
     * 7.3.0.1.231. */
    assert_int_equal(doctor_in_ranges("7.3.0.1.231", "[7.0.0,7.2.99]"), 0);
    assert_int_equal(doctor_in_ranges("7.1.0.7.220", "[7.0.0,7.2.99]"), 1);
    assert_int_equal(doctor_in_ranges("7.5.0", "[6.4.0,6.4.99],[7.0.0,8.9.9]"), 1);
    assert_int_equal(doctor_in_ranges("6.5.0", "[6.4.0,6.4.99],[7.0.0,8.9.9]"), 0);
    assert_int_equal(doctor_in_ranges("24.1.rc3", "[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.]"), 1);
    assert_int_equal(doctor_in_ranges("24.2.0", "[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.]"), 0);
    assert_int_equal(doctor_in_ranges("7.0.0", "7.0.0-7.2.99"), -1);
}

static void sizes_as_pytorch_prints_them(void **st)
{
    (void)st;
    size_t n;
    assert_true(doctor_size("20.00 MiB)", &n) == 20.0 * 1048576 && n == 9);
    assert_true(doctor_size("0 bytes free", &n) == 0 && n == 7);
    assert_true(doctor_size("1.50 KiB", &n) == 1536 && n == 8);
    assert_true(doctor_size("79.15 GiB", &n) > 79.0 * 1073741824);
    doctor_size("12 apples", &n);
    assert_int_equal(n, 0);
    doctor_size("MiB", &n);
    assert_int_equal(n, 0);
    doctor_size("1e999 GiB", &n); /* inf: no size (inf - inf would be a NaN that passes every comparison) */
    assert_int_equal(n, 0);
    char digits[420];
    memset(digits, '9', 400);
    strcpy(digits + 400, " GiB");
    doctor_size(digits, &n);
    assert_int_equal(n, 0);
}

static const finding *only(doctor *d, const char *log, const char *id)
{
    char err[512];
    if (doctor_log(d, log, err, sizeof err))
        fail_msg("%s", err);
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->f[i].id, id))
            return &d->f[i];
    fail_msg("%s: no finding %s (%zu findings, first %s)", log, id, d->n, d->n ? d->f[0].id : "-");
    return NULL;
}

static void has_text(const char *hay, const char *needle)
{
    if (!strstr(hay, needle))
        fail_msg("expected \"%s\" in:\n%s", needle, hay);
}

static void npu_out_of_memory_old_format(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    const finding *f = only(&d, LOGS "npu_oom_vllm_ascend_19.log", "oom-fragmentation");
    /* 10.65 GiB reserved - 10.24 GiB allocated = 419.84 MiB, more than the 22 MiB asked for. */
    has_text(f->title, "419.84 MiB reserved but unallocated");
    has_text(f->title, "22.00 MiB request");
    has_text(f->why, "60.97 GiB in all, 19.52 MiB of it free");
    has_text(f->next[0], "PYTORCH_NPU_ALLOC_CONF='expandable_segments:True'");
    has_text(f->next[f->nnext - 1], "\n$ hbmalloc sweep oom.pickle --capacity 60.97GiB --backend sim:dialect=npu\n");
    assert_int_equal(d.n, 1);
    doctor_free(&d);
}

/* No split limit is typed from a log: which value helps depends on the job, so the doctor names the replay that
 * proves one (with the device's capacity, the NPU dialect and no virtual memory filled in). */
static void npu_out_of_memory_without_virtual_memory_asks_for_a_replay(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    d.npu_vmm = 0; /* what the environment found */
    snprintf(d.npu_vmm_why, sizeof d.npu_vmm_why, "Ascend HDK 22.0.3 is older than 23.0.0");
    const finding *f = only(&d, LOGS "npu_oom_sglang_29838.log", "oom-fragmentation");
    has_text(f->next[0], "this NPU cannot do them (Ascend HDK 22.0.3 is older than 23.0.0)");
    has_text(f->next[0], "hbmalloc doctor --trace oom.pickle");
    for (int k = 0; k < f->nnext; k++)
        if (strstr(f->next[k], "max_split_size_mb:") || strstr(f->next[k], "garbage_collection_threshold:"))
            fail_msg("a typed split/GC setting: %s", f->next[k]);
    has_text(f->next[f->nnext - 1], "--backend sim:dialect=npu,vmm=off");
    has_text(f->why, "2.88 GiB of device memory is used by other processes"); /* 61.27 - 5.04 MiB - 58.39 */
    doctor_free(&d);
}

static void cuda_out_of_memory_both_formats(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    const finding *f = only(&d, LOGS "cuda_oom_pytorch_16417.log", "oom-fragmentation");
    has_text(f->title, "194.87 MiB reserved but unallocated");
    has_text(f->next[0], "PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'");
    doctor_free(&d);
    doctor_init(&d);
    /* 9.35 GiB cached but 22.78 GiB asked: capacity, not fragmentation. 18.73 GiB in use - 18.43 GiB held. */
    f = only(&d, LOGS "cuda_oom_cads_4.log", "oom-capacity");
    has_text(f->title, "22.78 GiB request");
    has_text(f->why, "Even the cached free memory could not hold the request");
    doctor_free(&d);
    doctor_init(&d);
    f = only(&d, LOGS "cuda_oom_unilm_137.log", "oom-capacity"); /* 10.86 - 10.85 GiB = 10.24 MiB < 128 MiB */
    has_text(f->why, "10.24 MiB");
    doctor_free(&d);
}

static void repeated_failures_are_counted_once(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    char err[512];
    assert_int_equal(doctor_log(&d, LOGS "npu_oom_vllm_ascend_19.log", err, sizeof err), 0);
    assert_int_equal(doctor_log(&d, LOGS "npu_oom_vllm_ascend_19.log", err, sizeof err), 0);
    assert_int_equal(d.n, 1);
    assert_int_equal(d.f[0].count, 2);
    assert_int_equal(doctor_log(&d, LOGS "does-not-exist.log", err, sizeof err), -1);
    has_text(err, "cannot open log " LOGS "does-not-exist.log: No such file or directory"); /* the system's reason */
    doctor_free(&d);
}

/* A log as a stream of its text. */
static void read_text(doctor *d, const char *name, const char *text, size_t len)
{
    FILE *fp = fmemopen((void *)text, len, "rb");
    assert_non_null(fp);
    char err[256];
    assert_int_equal(doctor_log_stream(d, fp, name, err, sizeof err), 0);
    fclose(fp);
}

/* 20,000 lines, each a different failing HCCL call (the title names the call and its code): 19,000 of code 4, then
 * 1,000 of as many codes. Code 4's first 16 calls are listed apart and the rest counted in the last; other codes
 * are findings of their own up to 256 titles of the id, the rest counted in the id's last. Before, each line was a
 * finding of 6 KB and was compared with every earlier one. */
static void distinct_failing_calls_stay_a_few_findings(void **st)
{
    (void)st;
    enum { LINES = 20000, SAME = 19000 };
    size_t cap = (size_t)LINES * 120, len = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    for (int i = 0; i < LINES; i++)
        len += (size_t)snprintf(text + len, cap - len,
                                "RuntimeError: HCCL function error: HcclCall%d(comm, &root), error code is %d\n", i,
                                i < SAME ? 4 : 1000 + i);
    doctor d;
    doctor_init(&d);
    read_text(&d, "calls.log", text, len);
    size_t hccl = 0, code4 = 0;
    long counted = 0;
    for (size_t i = 0; i < d.n; i++)
        if (!strcmp(d.f[i].id, "hccl-error")) {
            hccl++, counted += d.f[i].count + d.f[i].other_titles;
            code4 += d.f[i].code == 4;
        }
    assert_int_equal(code4, DOC_MAX_TITLES);
    assert_int_equal(hccl, DOC_MAX_CODES);
    assert_int_equal(counted, LINES); /* every line counted once */
    assert_int_equal(d.f[DOC_MAX_TITLES - 1].other_titles, SAME - DOC_MAX_TITLES);
    assert_int_equal(d.f[d.n - 1].other_titles, LINES - SAME - (DOC_MAX_CODES - DOC_MAX_TITLES));
    doctor_free(&d);
    free(text);
}

/* After 15 failing operators of one code and a refused feature (a warning), an uncorrectable memory error is a
 * finding of its own, an error with its own reason: calls fold only into their own code. */
static void a_new_code_after_many_calls_keeps_its_severity(void **st)
{
    (void)st;
    char text[4096];
    size_t len = 0;
    for (int i = 0; i < 15; i++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "RuntimeError: NPU function error: aclnnOp%d(x), error code is 507015\n", i);
    len += (size_t)snprintf(text + len, sizeof text - len,
                            "RuntimeError: NPU function error: aclrtSetDevice(x), error code is 207000\n"
                            "RuntimeError: NPU function error: aclrtMemcpy(x), error code is 507054\n");
    doctor d;
    doctor_init(&d);
    read_text(&d, "npu.log", text, len);
    const finding *f = NULL;
    for (size_t i = 0; i < d.n; i++)
        f = strstr(d.f[i].title, "aclrtMemcpy returned 507054") ? &d.f[i] : f;
    if (!f)
        fail_msg("507054 was folded (%zu findings)", d.n);
    else
        assert_int_equal(f->severity, SEV_ERROR);
    doctor_free(&d);
}

static void expandable_segments_warning_with_its_odd_spacing(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    const finding *f = only(&d, LOGS "expandable_mmcv_3216.log", "expandable-ignored");
    has_text(f->evidence, "expandable_mmcv_3216.log:2:");
    has_text(f->why, "207000");
    assert_int_equal(d.n, 1); /* "currently defaults to false" is not a failure */
    doctor_free(&d);
}

static void hccl_codes_by_name_with_a_checklist(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    const finding *f = only(&d, LOGS "hccl_vllm_ascend_672.log", "hccl-error");
    has_text(f->title, "hcclCommInitRootInfoConfig returned 15 (HCCL_E_RUNTIME)");
    has_text(f->next[0], "one card");
    doctor_free(&d);
    doctor_init(&d);
    f = only(&d, LOGS "hccl_vllm_ascend_405.log", "hccl-error");
    has_text(f->title, "HcclGetRootInfo returned 11 (HCCL_E_TCP_CONNECT)");
    has_text(f->next[f->nnext - 1], "HCCL_HOST_SOCKET_PORT_RANGE");
    doctor_free(&d);
    doctor_init(&d);
    f = only(&d, LOGS "hccl_gpustack_2021.log", "hccl-error");
    has_text(f->title, "HcclCommInitRootInfo returned 2 (HCCL_E_PTR)"); /* 2 is HCCL_E_PTR, not HCCL_E_PARA */
    has_text(f->why, "unconfirmed");
    assert_int_equal(d.n, 1);
    doctor_free(&d);
}

/* HCCL_E_OOM (24): the communicator found no device memory for its buffers. The line is constructed in the shape
 * torch_npu's HCCL_CHECK_ERROR writes (Ascend/pytorch torch_npu/csrc/distributed/HCCLUtils.hpp:17-44, as the
 * recorded logs beside it show); the advice sizes hbm_headroom_mb from HCCL_BUFFSIZE (issue #40 item 2), and
 * tests/cli/doctor.sh pastes the export it prints into hbmalloc conf. */
static void an_hccl_out_of_memory_advises_a_headroom_sized_from_its_buffers(void **st)
{
    (void)st;
    static char line[] =
        "[rank3]: RuntimeError: HcclCommInitRootInfo:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:"
        "102 HCCL function error: HcclCommInitRootInfo(numRanks, &rootInfo, rank, &(comm->hcclComm_)), "
        "error code is 24\n";
    const char *sizes[][2] = {
        {NULL, "hbm_headroom_mb:400'"}, {"500", "hbm_headroom_mb:1000'"}, {"junk", "hbm_headroom_mb:400'"}};
    for (int i = 0; i < 3; i++) {
        if (sizes[i][0])
            setenv("HCCL_BUFFSIZE", sizes[i][0], 1);
        else
            unsetenv("HCCL_BUFFSIZE");
        FILE *fp = fmemopen(line, strlen(line), "rb");
        doctor d;
        doctor_init(&d);
        char err[256];
        assert_int_equal(doctor_log_stream(&d, fp, "hccl-oom.log", err, sizeof err), 0);
        fclose(fp);
        assert_int_equal(d.n, 1);
        has_text(d.f[0].title, "HcclCommInitRootInfo returned 24 (HCCL_E_OOM)");
        has_text(d.f[0].next[d.f[0].nnext - 1], "export HBMALLOC_CONF='");
        has_text(d.f[0].next[d.f[0].nnext - 1], sizes[i][1]);
        doctor_free(&d);
    }
    unsetenv("HCCL_BUFFSIZE");
}

/* Found by fuzz_doctor: a 40-digit version part overflowed; a 60-digit size overflowed the byte count. */
static void garbled_numbers_are_clamped_not_undefined(void **st)
{
    (void)st;
    assert_int_equal(doctor_vercmp("7.7777777777777777777777777777777777777777.0", "7.2.99"), 1);
    assert_int_equal(doctor_vercmp("24.1.rc99999999999999999999999999", "24.1.0"), -1);
    static char line[] =
        "CUDA out of memory. Tried to allocate 777777777777777777777777777777777777777777777777777777777"
        "77 GiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB "
        "reserved in total by PyTorch)\n";
    FILE *fp = fmemopen(line, strlen(line), "rb");
    doctor d;
    doctor_init(&d);
    char err[256];
    assert_int_equal(doctor_log_stream(&d, fp, "garbled.log", err, sizeof err), 0);
    fclose(fp);
    assert_int_equal(d.n, 1);
    has_text(d.f[0].title, "GiB request failed");
    doctor_free(&d);
}

static void npu_runtime_error_codes(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    const finding *f = only(&d, LOGS "acl_vllm_ascend_116.log", "acl-error");
    has_text(f->title, "c10_npu::acl::AclrtSynchronizeStreamWithTimeout returned 507001");
    doctor_free(&d);
}

/* A log as a stream: an OOM line, then `endless` bytes with no line end, then a read error (EIO). The heap's
 * highest use while it is read is noted (mallinfo2; 0 where a sanitizer's allocator does not say). */
typedef struct failing_log {
    size_t at, endless;
    size_t heap0, heap_peak;
} failing_log;

static const char oom_line[] = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 1.96 "
                               "GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB reserved in "
                               "total by PyTorch)\n";

static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static ssize_t failing_read(void *cookie, char *buf, size_t size)
{
    failing_log *l = cookie;
    size_t h = heap_in_use();
    l->heap_peak = h > l->heap_peak ? h : l->heap_peak;
    size_t n = 0, first = sizeof oom_line - 1;
    while (n < size && l->at < first)
        buf[n++] = oom_line[l->at++];
    while (n < size && l->at < first + l->endless)
        buf[n++] = 'x', l->at++;
    if (n)
        return (ssize_t)n;
    errno = EIO;
    return -1;
}

/* Issue #28 item 13: a log line was read whole whatever its length (getline), so --log /dev/zero grew without
 * bound, and under a memory limit getline's failure was taken for the end of the file: "No problems found", exit 0.
 * Lines are read up to 64 KiB (the rest skipped), and a read error is a finding, after what was read before it. */
static void a_read_error_is_a_finding_and_an_endless_line_stays_bounded(void **st)
{
    (void)st;
    failing_log l = {0, 8 << 20, 0, 0};
    l.heap0 = heap_in_use();
    cookie_io_functions_t io = {.read = failing_read};
    FILE *fp = fopencookie(&l, "r", io);
    assert_non_null(fp);
    doctor d;
    doctor_init(&d);
    char err[256];
    assert_int_equal(doctor_log_stream(&d, fp, "failing.log", err, sizeof err), 0);
    fclose(fp);
    int oom = 0, unreadable = 0;
    for (size_t i = 0; i < d.n; i++) {
        oom |= !strncmp(d.f[i].id, "oom-", 4);
        if (!strcmp(d.f[i].id, "log-unreadable")) {
            unreadable = 1;
            assert_int_equal(d.f[i].severity, SEV_ERROR);
            has_text(d.f[i].evidence, "failing.log:3: the read failed");
        }
    }
    assert_true(oom && unreadable);
    if (l.heap_peak > l.heap0 + (1 << 20))
        fail_msg("the heap grew by %zu bytes reading an endless line", l.heap_peak - l.heap0);
    doctor_free(&d);
}

/* ---- text for people (issue #36 item 7): 100 columns, broken at words, quotes cut at words ---- */

/* doctor_wrap's output of text after prefix at width, in a buffer the caller frees. */
static char *wrapped(int width, const char *prefix, const char *text)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    assert_non_null(fp);
    doctor_wrap(fp, width, prefix, text);
    fclose(fp);
    return buf;
}

/* text after prefix at width comes out exactly as want. */
static void wraps_as(int width, const char *prefix, const char *text, const char *want)
{
    char *out = wrapped(width, prefix, text);
    assert_string_equal(out, want);
    free(out);
}

/* Every line at most width characters (UTF-8: a character is one), none ending in a space; the words, in order,
 * are those of prefix and text (a word is never cut, and none is lost). */
static void fits_and_keeps_words(const char *out, int width, const char *prefix, const char *text)
{
    for (const char *l = out; *l;) {
        size_t n = strcspn(l, "\n"), chars = 0;
        for (size_t i = 0; i < n; i++)
            chars += ((unsigned char)l[i] & 0xC0) != 0x80;
        if (chars > (size_t)width)
            fail_msg("a line of %zu characters, over %d:\n%s", chars, width, out);
        if (n && l[n - 1] == ' ')
            fail_msg("a line ends in a space:\n%s", out);
        l += n + (l[n] == '\n');
    }
    char want[2048], got[2048];
    snprintf(want, sizeof want, "%s %s", prefix, text);
    snprintf(got, sizeof got, "%s", out);
    char *w = want, *g = got, *a, *b;
    for (;;) {
        a = strtok_r(w, " \n", &w);
        b = strtok_r(g, " \n", &g);
        if (!a || !b)
            break;
        if (strcmp(a, b))
            fail_msg("word '%s' came out as '%s':\n%s", a, b, out);
    }
    assert_true(!a && !b);
}

static void lines_wrap_at_words_and_hang_under_the_text(void **st)
{
    (void)st;
    const char *why = "The driver and firmware packages do not match. The runtime then answers virtual-memory calls "
                      "with 207000 (ACL_ERROR_RT_FEATURE_NOT_SUPPORT, 'Feature is not supported and the possible "
                      "cause is that driver and firmware packages do not match'): torch_npu prints "
                      "'expandable_segments feature is not supportted' and runs without them.";
    char *out = wrapped(DOCTOR_WIDTH, "   why: ", why);
    fits_and_keeps_words(out, DOCTOR_WIDTH, "   why: ", why);
    assert_non_null(strstr(out, "\n        ")); /* the further lines under the text, after "   why: " */
    assert_int_equal(strncmp(out, "   why: The driver", 18), 0);
    free(out);
    /* Short text: one line, as printf would write it. */
    wraps_as(DOCTOR_WIDTH, "  - ", "nothing to wrap", "  - nothing to wrap\n");
    /* A run of spaces inside a line is kept as the log wrote it; at a break it goes. */
    wraps_as(40, "", "supportted                     and the possible cause",
             "supportted                     and the\npossible cause\n");
}

static void a_long_word_breaks_only_where_it_may_and_an_export_stays_whole(void **st)
{
    (void)st;
    /* A path longer than a line breaks after a '/'; the pieces joined give it back. */
    const char *path = "/usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/lib64/plugin/opskernel/libhccl_plugin.so";
    char *out = wrapped(40, "    ", path);
    char joined[512] = "";
    for (char *l = out, *e; *l; l = e + 1) {
        e = strchr(l, '\n');
        assert_non_null(e);
        *e = 0;
        size_t lead = strspn(l, " ");
        assert_int_equal(lead, 4);
        assert_true(strlen(l) <= 40);
        assert_true(l[strlen(l) - 1] == '/' || !e[1]); /* every line but the last ends a directory */
        strcat(joined, l + lead);
    }
    assert_string_equal(joined, path);
    free(out);
    /* Chinese has no spaces: it breaks between characters, each two columns wide, never inside one. */
    const char *zh = "\xe5\x88\x9d\xe5\xa7\x8b\xe5\x8c\x96\xe9\x80\x9a\xe4\xbf\xa1\xe5\x9f\x9f"
                     "\xe5\xa4\xb1\xe8\xb4\xa5"; /* 8 characters, 16 columns */
    wraps_as(10, "", zh,
             "\xe5\x88\x9d\xe5\xa7\x8b\xe5\x8c\x96\xe9\x80\x9a\xe4\xbf\xa1\n"
             "\xe5\x9f\x9f\xe5\xa4\xb1\xe8\xb4\xa5\n");
    /* A word with nowhere to break is written whole, past the width, never cut. */
    wraps_as(20, "", "see abcdefghijklmnopqrstuvwxyz0123456789 here",
             "see\nabcdefghijklmnopqrstuvwxyz0123456789\nhere\n");
    /* "export VAR=VALUE" is pasted: it moves to a line of its own rather than break after "export". */
    const char *next = "to drop only the part the device ignores, with the same memory use as today: export "
                       "PYTORCH_NPU_ALLOC_CONF='max_split_size_mb:32'";
    out = wrapped(DOCTOR_WIDTH, "     1) ", next);
    assert_non_null(strstr(out, "\n        export PYTORCH_NPU_ALLOC_CONF='max_split_size_mb:32'\n"));
    free(out);
    /* A figure keeps its unit, an option its value. */
    wraps_as(20, "", "on a GPU of 80.00 GiB", "on a GPU of\n80.00 GiB\n");
    wraps_as(25, "", "npu-smi info -t board -i 0 must say OK", "npu-smi info -t board\n-i 0 must say OK\n");
}

static void quotes_are_cut_at_a_word_and_marked(void **st)
{
    (void)st;
    int cut;
    const char *s = "Warning: expandable_segments feature is not supportted and the possible cause is that driver";
    assert_int_equal(doctor_quote_len(s, strlen(s), 200, &cut), strlen(s));
    assert_false(cut);
    size_t n = doctor_quote_len(s, strlen(s), 50, &cut); /* 50 ends inside "supportted" */
    assert_true(cut);
    assert_int_equal(n, strlen("Warning: expandable_segments feature is not"));
    n = doctor_quote_len(s, strlen(s), 43, &cut); /* 43 is the space after "not": that word is whole */
    assert_int_equal(n, strlen("Warning: expandable_segments feature is not"));
    /* Between two Chinese characters is a word boundary; inside one never. */
    const char *zh = "RuntimeError: \xe5\x88\x9d\xe5\xa7\x8b\xe5\x8c\x96";
    n = doctor_quote_len(zh, strlen(zh), 20, &cut);
    assert_int_equal(n, 14 + 6);
    n = doctor_quote_len(zh, strlen(zh), 19, &cut);
    assert_int_equal(n, 14 + 3);
    /* The release a log names keeps its line up to a word ("driver and firmwa)" was what a cut left). */
    doctor d;
    doctor_init(&d);
    char line[400];
    snprintf(line, sizeof line,
             "[W compiler_depend.ts:631] Warning: expandable_segments feature is not supportted                     "
             "and the possible cause is that driver and firmware packages do not match. (function operator())\n");
    doctor_log_versions(&d, "train.log", 7, line);
    assert_string_equal(d.torch_npu_version, "2.1.0.post6");
    const char *q = strstr(d.torch_npu_from, "train.log:7: [W compiler_depend.ts:631]");
    assert_non_null(q);
    size_t fl = strlen(d.torch_npu_from);
    assert_true(fl > 4 && !strcmp(d.torch_npu_from + fl - 4, " ..."));
    const char *body = d.torch_npu_from + strlen("train.log:7: ");
    size_t bl = fl - 4 - strlen("train.log:7: ");
    assert_int_equal(strncmp(body, line, bl), 0);
    assert_true(line[bl] == ' '); /* the quote ends where a word does */
    has_text(d.probe_failed_at, " ...");
    doctor_free(&d);
}

/* ---- several ranks (issue #40 item 3; DOCTOR.md, "Several ranks") ---- */

/* A log in memory under a name: the doctor reads it as one file (its name can give its rank). */
static void log_text(doctor *d, const char *name, const char *text)
{
    FILE *fp = fmemopen((void *)text, strlen(text), "rb");
    assert_non_null(fp);
    char err[256];
    assert_int_equal(doctor_log_stream(d, fp, name, err, sizeof err), 0);
    fclose(fp);
}

static const finding *find(const doctor *d, const char *id)
{
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->f[i].id, id))
            return &d->f[i];
    return NULL;
}

/* doctor_ranks_json's document, in a buffer the caller frees. */
static char *ranks_json(const doctor *d)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&buf, &len);
    assert_non_null(fp);
    doctor_ranks_json(d, fp);
    fclose(fp);
    if (!buf)
        fail_msg("no JSON");
    return buf;
}

/* The rank of a line: torch's excepthook "[rank3]: " (distributed_c10d.py), c10's "[rank3]:" before its own time,
 * torchrun's tee "[default3]:" (a local rank, tail_log.py) stacked on them, the template "[3]:"; else the file's
 * name (msrun's worker_3.log, rank_12.txt, torchrun's --log-dir <run>_<8>/attempt_0/<local rank>/stderr.log). */
static void ranks_come_from_launcher_prefixes_and_file_names(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    assert_int_equal(doctor_ranks_line(&d, "tee.log", 1, "[default3]:[rank3]: Traceback (most recent call last):\n"),
                     strlen("[default3]:[rank3]: "));
    assert_int_equal(doctor_ranks_line(&d, "tee.log", 2, "[rank5]:[W1218 20:07:21.482907315 x.cpp:1] Warning\n"),
                     strlen("[rank5]:"));
    assert_int_equal(doctor_ranks_line(&d, "tee.log", 3, "[default1]:2025-12-18 20:07:20,101 - INFO - step\n"),
                     strlen("[default1]:"));
    assert_int_equal(doctor_ranks_line(&d, "tee.log", 4, "[7]:hello\n"), strlen("[7]:"));
    assert_int_equal(doctor_ranks_line(&d, "tee.log", 5, "[W1218 20:07:21.4 x.cpp:1] no prefix\n"), 0);
    assert_int_equal(doctor_ranks_line(&d, "tee.log", 6, "[INFO]: a level is not a rank\n"), 0);
    doctor_ranks_line(&d, "out/msrun_log/worker_12.log", 1, "x\n");
    doctor_ranks_line(&d, "log/rank_4/error.log", 1, "x\n");
    doctor_ranks_line(&d, "logs/run7_ab12cd34/attempt_0/2/stderr.log", 1, "x\n");
    char *j = ranks_json(&d);
    has_text(j, "{\"label\":\"rank 3\",\"rank\":3,\"local\":false");
    has_text(j, "{\"label\":\"rank 5\",\"rank\":5,\"local\":false");
    has_text(j, "{\"label\":\"local rank 1 of tee.log\",\"rank\":1,\"local\":true");
    has_text(j, "{\"label\":\"rank 7\",\"rank\":7");
    has_text(j, "{\"path\":\"out/msrun_log/worker_12.log\",\"rank\":12,\"local\":false");
    has_text(j, "{\"path\":\"log/rank_4/error.log\",\"rank\":4,\"local\":false");
    has_text(j, "{\"path\":\"logs/run7_ab12cd34/attempt_0/2/stderr.log\",\"rank\":2,\"local\":true");
    has_text(j, "\"job\":\"torchrun run run7\"");
    if (strstr(j, "\"label\":\"local rank 3"))
        fail_msg("[default3]:[rank3]: is global rank 3, not a local rank of its own: %s", j);
    free(j);
    doctor_free(&d);
}

/* torchrun --tee 3 of a 4-GPU job (tests/data/doctor/SOURCES.md): rank 3 runs out of memory, its exit warning
 * bounds when; ranks 0-2's watchdogs time out 600 s later (Timeout(ms)=600000): the consequence, confirmed. */
static void the_rank_that_ran_out_of_memory_first_explains_the_others_timeouts(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    char err[512];
    assert_int_equal(doctor_log_arg(&d, LOGS "ranks_torchrun_tee_constructed.log", err, sizeof err), 0);
    doctor_ranks_report(&d);
    const finding *f = find(&d, "ranks-first-failure");
    if (!f) {
        fail_msg("no ranks-first-failure (%zu findings, first %s)", d.n, d.n ? d.f[0].id : "-");
        return;
    }
    assert_int_equal(f->severity, SEV_ERROR);
    has_text(f->title, "rank 3 failed first: GPU out of memory with 6.87 GiB reserved but unallocated");
    has_text(f->title, "the collective errors of ranks 0-2 came 601 s later: its consequence");
    has_text(f->evidence, "ranks_torchrun_tee_constructed.log:8: [default3]:[rank3]: torch.OutOfMemoryError");
    has_text(f->why, "window: the collective timeout the logs state, 600 s, + 60 s");
    has_text(f->why, "rank 0, 12-18 20:17:21: NCCL error: a collective timed out");
    assert_null(find(&d, "ranks-first-failure-unconfirmed"));
    /* The timeouts are another rank's consequence, not this device's memory: no headroom advice on them. */
    const finding *t = find(&d, "nccl-error");
    assert_non_null(t);
    for (int k = 0; k < t->nnext; k++)
        if (strstr(t->next[k], "hbm_headroom_mb"))
            fail_msg("headroom advice on a timeout: %s", t->next[k]);
    char *j = ranks_json(&d);
    has_text(j, "\"timeline\":{\"first\":\"rank 3\",\"first_finding\":\"oom-fragmentation\",\"first_kind\":\"oom\"");
    has_text(j, "\"ordered_by\":\"time\",\"consequence\":\"confirmed\"");
    free(j);
    doctor_free(&d);
}

/* Lines without times (NCCL's INFO lines have none, nor do tracebacks): ordered by position in the file only, and
 * said to be unconfirmed. */
static void without_times_the_order_is_the_files_and_unconfirmed(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    log_text(&d, "node0.log",
             "[default0]:node0:1200:1200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
             "[default1]:node0:1201:1201 [1] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
             "[default1]:torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 1.96 "
             "GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB reserved in total by "
             "PyTorch)\n"
             "[default0]:RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
             "remote process exited or there was a network error, NCCL version 2.14.3\n");
    doctor_ranks_report(&d);
    const finding *f = find(&d, "ranks-first-failure-unconfirmed");
    if (!f) {
        fail_msg("no unconfirmed timeline (%zu findings)", d.n);
        return;
    }
    has_text(f->title, "local rank 1 of node0.log failed first as far as the logs show (GPU out of memory");
    has_text(f->title, "ordered by their position in node0.log only");
    assert_null(find(&d, "ranks-first-failure"));
    char *j = ranks_json(&d);
    has_text(j, "\"ordered_by\":\"position\",\"consequence\":\"unconfirmed\"");
    has_text(j, "\"host\":\"node0\",\"pid\":1201");
    free(j);
    doctor_free(&d);
}

/* Both with times: rank 0's NCCL error five seconds BEFORE rank 1's out-of-memory message is not explained by it. */
static void a_collective_error_before_the_out_of_memory_is_unconfirmed(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    log_text(&d, "rank_0.log",
             "2025-01-05 10:00:00,000 ERROR RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/"
             "ProcessGroupNCCL.cpp:1275, remote process exited or there was a network error, NCCL version 2.14.3\n");
    log_text(&d, "rank_1.log",
             "2025-01-05 10:00:05,000 ERROR torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 "
             "MiB (GPU 1; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB reserved in "
             "total by PyTorch)\n");
    doctor_ranks_report(&d);
    const finding *f = find(&d, "ranks-first-failure-unconfirmed");
    if (!f) {
        fail_msg("no unconfirmed timeline (%zu findings, first %s)", d.n, d.n ? d.f[0].id : "-");
        return;
    }
    has_text(f->title, "rank 0 failed first as far as the logs show (NCCL error");
    has_text(f->title, "a collective error came before rank 1's out-of-memory failure");
    doctor_free(&d);
}

/* A collective error later than the window (no timeout stated: HCCL_EXEC_TIMEOUT's default 1836 s + 60 s) is not
 * taken for the consequence; one stated by a watchdog line (Timeout(ms)=) sets the window. */
static void a_collective_error_past_the_collective_timeout_is_unconfirmed(void **st)
{
    (void)st;
    const char *late[] = {"2025-01-05 10:35:00,000", "2025-01-05 10:20:00,000"}; /* 2100 s, 1200 s after */
    for (int i = 0; i < 2; i++) {
        doctor d;
        doctor_init(&d);
        log_text(&d, "rank_0.log",
                 "2025-01-05 10:00:00,000 ERROR torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                 "20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB "
                 "reserved in total by PyTorch)\n");
        char text[600];
        snprintf(text, sizeof text,
                 "%s ERROR RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
                 "remote process exited or there was a network error, NCCL version 2.14.3\n",
                 late[i]);
        log_text(&d, "rank_1.log", text);
        doctor_ranks_report(&d);
        const finding *f = find(&d, i == 0 ? "ranks-first-failure-unconfirmed" : "ranks-first-failure");
        if (!f) {
            fail_msg("%s: not as expected (%zu findings, first %s)", late[i], d.n, d.n ? d.f[0].id : "-");
            return;
        }
        if (i == 0)
            has_text(f->title, "rank 1's collective error came 2100 s after the first failure, later than the "
                               "collective timeout allows (window 1896 s)");
        doctor_free(&d);
    }
}

/* Two hosts (NCCL's "host:pid:tid" lines): half a second between an out-of-memory message on one and a collective
 * error on the other is closer than their clocks are trusted to agree; five seconds is not. */
static void two_hosts_clocks_are_trusted_to_a_second_only(void **st)
{
    (void)st;
    const char *at[] = {"2025-01-05 10:00:00,700", "2025-01-05 10:00:05,700"};
    for (int i = 0; i < 2; i++) {
        doctor d;
        doctor_init(&d);
        log_text(&d, "rank_0.log",
                 "hostA:100:100 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>\n"
                 "2025-01-05 10:00:00,200 ERROR torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                 "20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB "
                 "reserved in total by PyTorch)\n");
        char text[600];
        snprintf(text, sizeof text,
                 "hostB:200:200 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>\n"
                 "%s ERROR RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, "
                 "remote process exited or there was a network error, NCCL version 2.14.3\n",
                 at[i]);
        log_text(&d, "rank_4.log", text);
        doctor_ranks_report(&d);
        if (i == 0) {
            const finding *f = find(&d, "ranks-first-failure-unconfirmed");
            if (!f) {
                fail_msg("0.5 s across hosts confirmed (%zu findings, first %s)", d.n, d.n ? d.f[0].id : "-");
                return;
            }
            has_text(f->title, "closer than two hosts' clocks are trusted to agree");
            has_text(f->why, "several hosts: their times come from different clocks");
        } else {
            const finding *f = find(&d, "ranks-first-failure");
            if (!f) {
                fail_msg("5 s across hosts not confirmed (%zu findings, first %s)", d.n, d.n ? d.f[0].id : "-");
                return;
            }
            has_text(f->title, "rank 0 failed first: GPU out of memory");
        }
        doctor_free(&d);
    }
}

/* March 1st of a leap year on a torch C++ line (no year) read before the dated lines: counted again in 2024, it is
 * day 60, not day 59. Rank 1's 00:00:10 comes before rank 0's 00:00:30 whichever log is read first. */
static void a_time_without_a_year_counts_the_leap_day_whatever_the_order(void **st)
{
    (void)st;
    const char *undated = "[rank0]:[E301 00:00:30.426415540 ProcessGroupNCCL.cpp:629] [Rank 0] Watchdog caught "
                          "collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran "
                          "for 600081 milliseconds\n";
    const char *dated = "2024-03-01 00:00:10,000 ERROR torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to "
                        "allocate 20.00 MiB (GPU 1; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB "
                        "free; 1.25 GiB reserved in total by PyTorch)\n";
    for (int order = 0; order < 2; order++) {
        doctor d;
        doctor_init(&d);
        log_text(&d, order ? "rank_1.log" : "rank_0.log", order ? dated : undated);
        log_text(&d, order ? "rank_0.log" : "rank_1.log", order ? undated : dated);
        doctor_ranks_report(&d);
        char *j = ranks_json(&d);
        if (!strstr(j, "\"timeline\":{\"first\":\"rank 1\""))
            fail_msg("read %s first: not rank 1 first:\n%s", order ? "the dated log" : "the undated log", j);
        free(j);
        doctor_free(&d);
    }
}

/* A failure counted in another finding (the 17th call of one code) is still its rank's failure with its own title:
 * rank 1's earlier aclnnOpX is named first, not the finding's aclnnOp15. */
static void a_folded_line_keeps_its_own_title_in_the_timeline(void **st)
{
    (void)st;
    char text[4096];
    size_t len = 0;
    for (int i = 0; i < 16; i++)
        len += (size_t)snprintf(text + len, sizeof text - len,
                                "2025-01-05 10:00:%02d,000 ERROR RuntimeError: NPU function error: aclnnOp%d(x), error "
                                "code is 507015\n",
                                10 + i, i);
    doctor d;
    doctor_init(&d);
    log_text(&d, "rank_0.log", text);
    log_text(&d, "rank_1.log",
             "2025-01-05 10:00:01,000 ERROR RuntimeError: NPU function error: aclnnOpX(x), error code is 507015\n");
    doctor_ranks_report(&d);
    char *j = ranks_json(&d);
    has_text(j, "\"first\":\"rank 1\"");
    has_text(j, "\"title\":\"NPU runtime error: aclnnOpX returned 507015");
    free(j);
    doctor_free(&d);
}

/* torch's C++ lines carry no year: such a time takes the logs' latest stated year, for every comparison alike.
 * Compared as a year-less time with each dated line, rank 1's 00:08:20 came after rank 0's 2025-01-01 00:00:10 and
 * before rank 2's 2024-01-01 00:16:40, which came before rank 0's: no order, and the sort named rank 0. */
static void a_time_without_a_year_takes_the_logs_year(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    log_text(&d, "rank_0.log",
             "2025-01-01 00:00:10,000 ERROR torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 "
             "MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB reserved in "
             "total by PyTorch)\n");
    log_text(&d, "rank_1.log",
             "[rank1]:[E101 00:08:20.426415540 ProcessGroupNCCL.cpp:629] [Rank 1] Watchdog caught collective "
             "operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600081 "
             "milliseconds\n");
    log_text(&d, "rank_2.log",
             "2024-01-01 00:16:40,000 ERROR torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 "
             "MiB (GPU 2; 1.96 GiB total capacity; 1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB reserved in "
             "total by PyTorch)\n");
    doctor_ranks_report(&d);
    char *j = ranks_json(&d);
    has_text(j, "\"timeline\":{\"first\":\"rank 1\"");
    free(j);
    doctor_free(&d);
}

/* Logs of mixed jobs (different world sizes; one rank written by two processes) and ranks with no log. */
static void mixed_jobs_and_missing_ranks_are_named(void **st)
{
    (void)st;
    doctor d;
    doctor_init(&d);
    log_text(&d, "a/rank_0.log", "WORLD_SIZE=8 pid=100\n");
    log_text(&d, "a/rank_1.log", "WORLD_SIZE=8 pid=101\n");
    log_text(&d, "b/rank_3.log", "WORLD_SIZE=16 pid=300\n");
    doctor_ranks_report(&d);
    const finding *m = find(&d, "ranks-mixed-jobs");
    if (!m) {
        fail_msg("no ranks-mixed-jobs (%zu findings)", d.n);
        return;
    }
    has_text(m->title, "world size 8 in a/rank_0.log but 16 in b/rank_3.log");
    const finding *g = find(&d, "ranks-missing");
    if (!g) {
        fail_msg("no ranks-missing (%zu findings)", d.n);
        return;
    }
    has_text(g->title, "13 of the job's 16 ranks have no log: 2, 4-15");
    doctor_free(&d);
    doctor_init(&d);
    log_text(&d, "x/rank_1.log", "pid=101\n");
    log_text(&d, "y/rank_1.log", "pid=977\n");
    log_text(&d, "y/rank_0.log", "pid=976\n");
    doctor_ranks_report(&d);
    m = find(&d, "ranks-mixed-jobs");
    if (!m) {
        fail_msg("two processes of rank 1 not said (%zu findings)", d.n);
        return;
    }
    has_text(m->title, "rank 1 was written by two processes, pid 101 (x/rank_1.log) and pid 977 (y/rank_1.log)");
    assert_null(find(&d, "ranks-missing"));
    doctor_free(&d);
    doctor_init(&d);
    log_text(&d, "rank_0.log", "export SLURM_JOB_ID=4711\n");
    log_text(&d, "rank_1.log", "export SLURM_JOB_ID=4712\n");
    doctor_ranks_report(&d);
    m = find(&d, "ranks-mixed-jobs");
    if (!m) {
        fail_msg("two job ids not said (%zu findings)", d.n);
        return;
    }
    has_text(m->title, "slurm job 4711 in rank_0.log but slurm job 4712 in rank_1.log");
    doctor_free(&d);
}

/* Issue #40 item 2 for NCCL: its out-of-memory, the cause on the line after torch's "Last error:" (NCCLUtils.cpp's
 * getNcclErrorDetailStr; NCCL's CUCHECK "Cuda failure %d '%s'"), advises hbm_headroom_mb: 700 MiB per communicator
 * (NVIDIA/nccl#964), times NCCL_BUFFSIZE / 4 MiB where it is set larger. tests/cli/doctor.sh pastes it. */
static void an_nccl_out_of_memory_advises_a_headroom_for_its_communicator(void **st)
{
    (void)st;
    const char *sizes[][2] = {{NULL, "hbm_headroom_mb:700'"},
                              {"16777216", "hbm_headroom_mb:2800'"},
                              {"1048576", "hbm_headroom_mb:700'"},
                              {"junk", "hbm_headroom_mb:700'"}};
    for (int i = 0; i < 4; i++) {
        if (sizes[i][0])
            setenv("NCCL_BUFFSIZE", sizes[i][0], 1);
        else
            unsetenv("NCCL_BUFFSIZE");
        doctor d;
        doctor_init(&d);
        char err[512];
        assert_int_equal(doctor_log(&d, LOGS "nccl_oom_last_error_constructed.log", err, sizeof err), 0);
        const finding *f = NULL;
        for (size_t k = 0; k < d.n; k++)
            if (strstr(d.f[k].title, "NCCL out of device memory"))
                f = &d.f[k];
        if (!f) {
            fail_msg("no NCCL out-of-memory finding (%zu findings)", d.n);
            return;
        }
        has_text(f->evidence, "nccl_oom_last_error_constructed.log:7: [rank0]: Cuda failure 2 'out of memory'");
        has_text(f->next[f->nnext - 1], "export HBMALLOC_CONF='");
        has_text(f->next[f->nnext - 1], sizes[i][1]);
        doctor_free(&d);
    }
    unsetenv("NCCL_BUFFSIZE");
}

/* Issue #40 item 2: a communicator that fails on a rank whose earlier out-of-memory message showed more reserved but
 * unallocated than the communicator needs gets the headroom advice; one after a small cache does not. */
static void a_communicator_failing_after_a_large_cache_advises_a_headroom(void **st)
{
    (void)st;
    unsetenv("HCCL_BUFFSIZE");
    /* 6.40 GiB, then 100 MiB reserved but unallocated; then figures of 400 digits, which strtod reads as inf (inf -
     * inf is NaN, which compared as more than any headroom): no size at all. */
    char huge[410];
    memset(huge, '9', 400);
    strcpy(huge + 400, " GiB");
    const char *reserved[] = {"56.52 GiB", "50.22 GiB", huge}, *allocated[] = {"50.12 GiB", "50.12 GiB", huge};
    for (int i = 0; i < 3; i++) {
        char text[2400];
        snprintf(text, sizeof text,
                 "RuntimeError: NPU out of memory. Tried to allocate 1.50 GiB (NPU 1; 60.97 GiB total capacity; "
                 "%s already allocated; 50.12 GiB current active; 1.03 GiB free; %s reserved in total by "
                 "PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
                 "fragmentation.\n"
                 "[rank1]: RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:102 HCCL "
                 "function error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, "
                 "&(comm->hcclComm_)), error code is 15\n",
                 allocated[i], reserved[i]);
        doctor d;
        doctor_init(&d);
        log_text(&d, "worker_1.log", text);
        doctor_ranks_report(&d);
        const finding *f = find(&d, "hccl-error");
        assert_non_null(f);
        int advised = 0;
        for (int k = 0; k < f->nnext; k++)
            if (strstr(f->next[k], "export HBMALLOC_CONF='hbm_headroom_mb:400'")) {
                advised = 1;
                has_text(f->next[k], "(worker_1.log:1) showed 6.40 GiB reserved but unallocated");
            }
        if (advised != (i == 0))
            fail_msg("%.20s reserved: headroom advice %s", reserved[i], advised ? "given" : "missing");
        doctor_free(&d);
    }
}

/* A log of a thousand ranks failing again and again, streamed: the heap stays bounded (failures kept per rank and in
 * all), whatever the log's length. Lines made on demand by a reader (no file); the heap's peak noted while it reads. */
typedef struct many_ranks {
    long line, lines;
    size_t heap0, heap_peak;
    char buf[400];
    size_t at, len;
} many_ranks;

static ssize_t many_read(void *cookie, char *out, size_t size)
{
    many_ranks *m = cookie;
    size_t h = heap_in_use();
    m->heap_peak = h > m->heap_peak ? h : m->heap_peak;
    size_t n = 0;
    while (n < size) {
        if (m->at == m->len) {
            if (m->line == m->lines)
                break;
            long r = m->line % 1000;
            m->len = (size_t)snprintf(m->buf, sizeof m->buf,
                                      "[rank%ld]:[E1218 20:%02ld:%02ld.426415540 ProcessGroupNCCL.cpp:629] [Rank %ld] "
                                      "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=%ld, "
                                      "OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600081 milliseconds\n",
                                      r, m->line / 60000 % 60, m->line / 1000 % 60, r, m->line);
            m->at = 0;
            m->line++;
        }
        size_t k = m->len - m->at < size - n ? m->len - m->at : size - n;
        memcpy(out + n, m->buf + m->at, k);
        n += k, m->at += k;
    }
    return (ssize_t)n;
}

static void a_long_log_of_many_ranks_stays_in_bounded_memory(void **st)
{
    (void)st;
    many_ranks *m = calloc(1, sizeof *m);
    assert_non_null(m);
    m->lines = 200000; /* 200 failures of each of 1000 ranks: kept, about 140 MB */
    m->heap0 = heap_in_use();
    cookie_io_functions_t io = {.read = many_read};
    FILE *fp = fopencookie(m, "r", io);
    assert_non_null(fp);
    doctor d;
    doctor_init(&d);
    char err[256];
    assert_int_equal(doctor_log_stream(&d, fp, "all.log", err, sizeof err), 0);
    fclose(fp);
    assert_int_equal(m->line, m->lines);
    if (m->heap_peak > m->heap0 + (12 << 20))
        fail_msg("the heap grew by %zu bytes reading %ld lines", m->heap_peak - m->heap0, m->lines);
    char *j = ranks_json(&d);
    has_text(j, "{\"label\":\"rank 999\",\"rank\":999");
    has_text(j, "\"failures_kept\":4,\"failures_more\":196");
    free(j);
    doctor_free(&d);
    free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(versions_compare_by_torch_npu_grammar),
        cmocka_unit_test(firmware_ranges_from_version_info),
        cmocka_unit_test(sizes_as_pytorch_prints_them),
        cmocka_unit_test(npu_out_of_memory_old_format),
        cmocka_unit_test(npu_out_of_memory_without_virtual_memory_asks_for_a_replay),
        cmocka_unit_test(cuda_out_of_memory_both_formats),
        cmocka_unit_test(repeated_failures_are_counted_once),
        cmocka_unit_test(distinct_failing_calls_stay_a_few_findings),
        cmocka_unit_test(a_new_code_after_many_calls_keeps_its_severity),
        cmocka_unit_test(expandable_segments_warning_with_its_odd_spacing),
        cmocka_unit_test(hccl_codes_by_name_with_a_checklist),
        cmocka_unit_test(an_hccl_out_of_memory_advises_a_headroom_sized_from_its_buffers),
        cmocka_unit_test(npu_runtime_error_codes),
        cmocka_unit_test(garbled_numbers_are_clamped_not_undefined),
        cmocka_unit_test(a_read_error_is_a_finding_and_an_endless_line_stays_bounded),
        cmocka_unit_test(lines_wrap_at_words_and_hang_under_the_text),
        cmocka_unit_test(a_long_word_breaks_only_where_it_may_and_an_export_stays_whole),
        cmocka_unit_test(quotes_are_cut_at_a_word_and_marked),
        cmocka_unit_test(ranks_come_from_launcher_prefixes_and_file_names),
        cmocka_unit_test(the_rank_that_ran_out_of_memory_first_explains_the_others_timeouts),
        cmocka_unit_test(without_times_the_order_is_the_files_and_unconfirmed),
        cmocka_unit_test(a_collective_error_before_the_out_of_memory_is_unconfirmed),
        cmocka_unit_test(a_collective_error_past_the_collective_timeout_is_unconfirmed),
        cmocka_unit_test(two_hosts_clocks_are_trusted_to_a_second_only),
        cmocka_unit_test(a_time_without_a_year_takes_the_logs_year),
        cmocka_unit_test(a_time_without_a_year_counts_the_leap_day_whatever_the_order),
        cmocka_unit_test(a_folded_line_keeps_its_own_title_in_the_timeline),
        cmocka_unit_test(mixed_jobs_and_missing_ranks_are_named),
        cmocka_unit_test(an_nccl_out_of_memory_advises_a_headroom_for_its_communicator),
        cmocka_unit_test(a_communicator_failing_after_a_large_cache_advises_a_headroom),
        cmocka_unit_test(a_long_log_of_many_ranks_stays_in_bounded_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
