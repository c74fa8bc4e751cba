/*
 * test_conf_cases.c: settings strings decided as the frameworks decide them, case by case.
 *
 * Each case names the release whose parser it reproduces and the source it was read from:
 *   [T]   pytorch/pytorch c10/core/AllocatorConfig.h (ConfigTokenizer: isspace dropped, toSizeT = std::stoull,
 *         toDouble = std::stod, toBool True/False, checkToken only bounds-checks)
 *   [A]   pytorch/pytorch main c10/core/AllocatorConfig.cpp: parseLargeSegmentSize (l. 83-101, "> 10"),
 *         parseMaxSplitSize (l. 104-121, ">= large_segment_size_mb"), parseMaxNonSplitRoundingSize (l. 123-140),
 *         parseGarbageCollectionThreshold (l. 142-153), parseRoundUpPower2Divisions (l. 155-221: '>' fills from
 *         last_index + 1, last_index starts at 0, the first B:v entry fills below), parseArgs (l. 255-263:
 *         large_segment_size_mb read first, max_non_split_rounding_size_ = large_segment_size_)
 *   [C]   pytorch/pytorch c10/cuda/CUDAAllocatorConfig.cpp after PR #165281 (ConfigTokenizer):
 *         parsePerProcessMemoryFraction "[0.0, 1.0]", parsePinnedReserveSegmentSize "> 0", "Unrecognized key 'K'
 *         in CUDA allocator config.", parseReserveSpec (invalid reserve: TORCH_WARN, default kept)
 *   [O]   pytorch/pytorch c10/cuda/CUDAAllocatorConfig.cpp before PR #165281 (PyTorch <= 2.9): lexArgs drops only
 *         ' ', consumeToken "Error parsing CachingAllocator settings, expected c", parseMaxSplitSize stoi and
 *         "must be > 20", '>' std::fill from last_index, "Unrecognized CachingAllocator option: K"
 *   [N2]  Ascend/pytorch v6.0.rc2-pytorch2.1.0 NPUCachingAllocator.cpp: l. 666 lexArgs ' ', l. 681 consumeToken,
 *         l. 689-691 stoi and "> 20", l. 737 probe inside parseExpandableSegments turns expandable off,
 *         l. 784 "Unrecognized CachingAllocator option", l. 795 the combination check after it
 *   [N12] Ascend/pytorch v26.1.0-pytorch2.12.0 NPUAllocatorConfig.cpp: l. 88 isDigit max_split_size_mb,
 *         l. 91 ">= large segment", l. 248 segment_size_mb isDigit [20, 512], l. 269-271 large_segment_size_mb
 *         isDigit "> 10" (no upper bound), l. 397 large_segment_size_mb read first
 *   [NM]  Ascend/pytorch master 9e73e708a NPUAllocatorConfig.cpp: l. 123-126 base_addr_aligned_kb isDigit and
 *         no leading zeros, l. 181 page_size 1g, l. 251/254 unknown keys, l. 293 pinned_reserve_segment_size_mb
 *         toSizeT without a bound, l. 310-314 the combination check before the probe
 *   [S]   Ascend/pytorch v7.2.0.1-pytorch2.6.0 NPUCachingAllocator.cpp (the first release with segment_size_mb):
 *         l. 1048 m_segment_size_mb, a member of its own; l. 2320-2322 the page of a large-pool expandable segment;
 *         l. 2557-2566 get_allocation_size: whole segments kLargeBuffer (20 MiB). The same at every tag to 2.10.
 *   [SM]  Ascend/pytorch master NPUCachingAllocator.cpp l. 2762-2769 get_custom_expandable_segment_size
 *         (large_segment_size_mb, when not 20 MiB, wins), l. 2771-2778 get_allocation_size (large_segment_size());
 *         NPUAllocatorConfig.cpp l. 190 "deprecated", l. 355-359 "Both ... are set" (from 2.11)
 * Releases and the keys each knows: src/conf/releases.c (PyTorch) and src/conf/npu_releases.inc (torch_npu, generated
 * from the tags by scripts/gen-npu-releases.py).
 */
#include "helpers.h"

#include "conf/conf.h"
#include "conf/releases.h"

#define C HBM_DIALECT_CUDA
#define N HBM_DIALECT_NPU

typedef struct conf_case {
    const char *src; /* where the expectation was read */
    hbm_dialect d;
    const char *release; /* "strict" (HBMALLOC_CONF), "" (the newest), or a version */
    int vmm;             /* the device's virtual memory: 1, 0, -1 unknown */
    const char *s;
    int ok;            /* accepted? */
    const char *text;  /* in the error (refused) or the warnings (accepted); NULL: no warning at all */
    const char *field; /* a value to check when accepted, or NULL */
    double want;
} conf_case;

static const conf_case cases[] = {
    /* ---- numbers: strict for hbmalloc, a prefix for the frameworks ---- */
    {"[T] stoull prefix", C, "", -1, "max_split_size_mb:128abc", 1, "reads 'max_split_size_mb:128abc' as 128",
     "max_split_mb", 128},
    {"hbmalloc strict", C, "strict", -1, "max_split_size_mb:128abc", 0, "128abc", NULL, 0},
    {"[T] stoull '+'", C, "", -1, "max_split_size_mb:+64", 1, "as 64", "max_split_mb", 64},
    {"[T] stoull wraps '-'", C, "", -1, "max_split_size_mb:-5", 1, "(wrapped)", "max_split_unlimited", 1},
    {"[T] stoull throws", C, "", -1, "max_split_size_mb:abc", 0, "not a number", NULL, 0},
    {"[T] stoull out of range", C, "", -1, "max_split_size_mb:99999999999999999999999", 0, "out of range", NULL, 0},
    {"[O] stoi out of int range", C, "2.6", -1, "max_split_size_mb:3000000000", 0, "out of int range", NULL, 0},
    {"[T] isspace dropped inside a word", C, "", -1, "max_split_size_mb: 1 28", 1, "spaces inside", "max_split_mb",
     128},
    {"hbmalloc strict: a space splits words", C, "strict", -1, "max_split_size_mb:1 28", 0, "expected ','", NULL, 0},
    {"[T] stod prefix", C, "", -1, "garbage_collection_threshold:0.5x,per_process_memory_fraction:0.9", 1, "as 0.5",
     "gc", 0.5},
    {"[T] stod hex float", C, "", -1, "garbage_collection_threshold:0x1p-1,per_process_memory_fraction:0.9", 1,
     "as 0.5", "gc", 0.5},
    {"[A] GC range, nan refused", C, "", -1, "garbage_collection_threshold:nan", 0, "strictly between", NULL, 0},
    {"[A] GC range, 1 refused", C, "", -1, "garbage_collection_threshold:1", 0, "strictly between", NULL, 0},
    {"[T] toBool is case-sensitive", C, "", -1, "expandable_segments:true", 0, "True or False", NULL, 0},
    /* ---- separators ---- */
    {"[T] checkToken ignores a wrong separator", C, "", -1, "max_split_size_mb,64", 1, "does not check the separator",
     "max_split_mb", 64},
    {"[O] consumeToken enforces it", C, "2.6", -1, "max_split_size_mb,64", 0, "expected :", NULL, 0},
    {"[T] a trailing comma", C, "", -1, "max_split_size_mb:64,", 1, NULL, "max_split_mb", 64},
    {"[T] an empty entry is a key ','", C, "", -1, "max_split_size_mb:64,,expandable_segments:True", 0,
     "Unrecognized key ','", NULL, 0},
    {"[T] index out of bounds", C, "", -1, "max_split_size_mb", 0, "needs a value", NULL, 0},
    /* ---- max_split_size_mb / max_non_split_rounding_mb / large_segment_size_mb ---- */
    {"[A] >= 20", C, "", -1, "max_split_size_mb:20", 1, NULL, "max_split_mb", 20},
    {"[A] 19 refused", C, "", -1, "max_split_size_mb:19", 0, ">= 20", NULL, 0},
    {"[O] > 20 before 2.10", C, "2.6", -1, "max_split_size_mb:20", 0, "> 20", NULL, 0},
    {"[O] 21 in 2.6", C, "2.6", -1, "max_split_size_mb:21", 1, NULL, "max_split_mb", 21},
    {"[A] large_segment_size_mb > 10, no upper bound", C, "", -1, "large_segment_size_mb:1024", 1, NULL,
     "large_segment_mb", 1024},
    {"[A] large_segment_size_mb 10 refused", C, "", -1, "large_segment_size_mb:10", 0, "> 10", NULL, 0},
    {"[A] large segment read first, bounds max_split", C, "", -1, "max_split_size_mb:32,large_segment_size_mb:64", 0,
     ">= 64", NULL, 0},
    {"[A] large segment sets max_non_split's default", C, "", -1, "large_segment_size_mb:64", 1, NULL,
     "max_non_split_mb", 64},
    {"[A] max_non_split explicit wins", C, "", -1, "large_segment_size_mb:64,max_non_split_rounding_mb:128", 1, NULL,
     "max_non_split_mb", 128},
    {"[A] max_non_split >= large segment", C, "", -1, "max_non_split_rounding_mb:40,large_segment_size_mb:64", 0,
     "max_non_split_rounding_mb too small", NULL, 0},
    {"[C] large_segment_size_mb unknown to 2.10", C, "2.10", -1, "large_segment_size_mb:64", 0,
     "known from PyTorch 2.11", NULL, 0},
    {"[N12] torch_npu 2.12 large segment > 10, no upper bound", N, "2.12.0", -1, "large_segment_size_mb:600", 1, NULL,
     "large_segment_mb", 600},
    {"[N12] torch_npu 2.12 max_split digits only", N, "2.12.0", -1, "max_split_size_mb:+64", 0, "is invalid", NULL, 0},
    {"[N2] torch_npu 2.1.0.post6 stoi prefix", N, "2.1.0.post6", -1, "max_split_size_mb:64abc", 1, "as 64",
     "max_split_mb", 64},
    {"[N2] torch_npu 2.1.0.post6 > 20", N, "2.1.0.post6", -1, "max_split_size_mb:20", 0, "> 20", NULL, 0},
    {"[N12] segment_size_mb [20, 512]", N, "2.12.0", -1, "segment_size_mb:600", 0, "[20, 512]", NULL, 0},
    /* segment_size_mb sizes the pages of expandable segments, never whole segments (issue #29 item 17) */
    {"[S] segment_size_mb: whole segments stay 20 MiB", N, "2.6.0.post4", -1,
     "segment_size_mb:64,expandable_segments:True", 1, NULL, "large_segment_mb", 20},
    {"[S] segment_size_mb: the expandable page", N, "2.6.0.post4", -1, "segment_size_mb:64,expandable_segments:True", 1,
     NULL, "page_mb", 64},
    {"[S] 2.10: no large_segment_size_mb yet", N, "2.10.0.post4", -1, "segment_size_mb:128", 1, NULL, "page_mb", 128},
    {"[SM] master: the expandable page", N, "", -1, "segment_size_mb:64", 1, "deprecated", "page_mb", 64},
    {"[SM] master: whole segments stay 20 MiB", N, "", -1, "segment_size_mb:64", 1, "deprecated", "large_segment_mb",
     20},
    {"[SM] large_segment_size_mb wins the page", N, "", -1, "segment_size_mb:64,large_segment_size_mb:32", 1,
     "are both set", "page_mb", 0},
    {"[SM] large_segment_size_mb 20 is unset to torch_npu", N, "", -1, "large_segment_size_mb:20,segment_size_mb:64", 1,
     "deprecated", "page_mb", 64},
    {"hbm_expandable_page_mb wins over segment_size_mb", N, "strict", -1, "segment_size_mb:64,hbm_expandable_page_mb:2",
     1, "deprecated", "page_mb", 2},
    /* ---- roundup_power2_divisions ---- */
    {"[A] '>' after the last entry", C, "", -1, "roundup_power2_divisions:[256:1,512:2,>:4]", 1, NULL, "div9", 2},
    {"[A] '>' fills above", C, "", -1, "roundup_power2_divisions:[256:1,512:2,>:4]", 1, NULL, "div10", 4},
    {"[A] the first entry fills below", C, "", -1, "roundup_power2_divisions:[256:1,512:2,>:4]", 1, NULL, "div0", 1},
    {"[O] '>' also overwrote the last entry", C, "2.6", -1, "roundup_power2_divisions:[256:1,512:2,>:4]", 1, NULL,
     "div9", 4},
    {"[A] a leading '>' leaves interval 0", C, "", -1, "roundup_power2_divisions:[>:4]", 1, NULL, "div0", 0},
    {"[A] a leading '>' fills 1..15", C, "", -1, "roundup_power2_divisions:[>:4]", 1, NULL, "div15", 4},
    {"[A] '>' does not end the first value", C, "", -1, "roundup_power2_divisions:[>:2,256:8]", 1, NULL, "div3", 8},
    {"[A] an empty list changes nothing", C, "", -1, "roundup_power2_divisions:[]", 1, NULL, "div5", 0},
    {"[A] a ',' before ']'", C, "", -1, "roundup_power2_divisions:[256:4,]", 1, NULL, "div8", 4},
    {"hbmalloc strict: no ',' before ']'", C, "strict", -1, "roundup_power2_divisions:[256:4,]", 0, "before ']'", NULL,
     0},
    {"[A] any power of two", C, "", -1, "roundup_power2_divisions:4294967296", 1, NULL, "div0", 4294967296.0},
    {"[A] 0 refused in the single form", C, "", -1, "roundup_power2_divisions:0", 0, "power of two", NULL, 0},
    {"[A] 0 allowed in a list", C, "", -1, "roundup_power2_divisions:[64:0,>:4]", 1, NULL, "div6", 0},
    {"[A] bounds are powers of two", C, "", -1, "roundup_power2_divisions:[300:4]", 0, "intervals have to be power",
     NULL, 0},
    {"[A] an unclosed list", C, "", -1, "roundup_power2_divisions:[256:4", 0, "not closed", NULL, 0},
    /* ---- keys by release ---- */
    {"[C] per_process_memory_fraction from 2.9", C, "2.8", -1, "per_process_memory_fraction:0.5", 0,
     "known from PyTorch 2.9", NULL, 0},
    {"[C] per_process_memory_fraction in 2.9", C, "2.9", -1, "per_process_memory_fraction:0.5", 1, NULL, "fraction",
     0.5},
    {"[C] fraction range", C, "", -1, "per_process_memory_fraction:1.5", 0, "[0, 1]", NULL, 0},
    {"[O] unknown key, old words", C, "2.6", -1, "frobnicate:1", 0,
     "Unrecognized CachingAllocator option: "
     "frobnicate",
     NULL, 0},
    {"[C] unknown key, new words", C, "", -1, "frobnicate:1", 0, "Unrecognized key 'frobnicate' in CUDA", NULL, 0},
    {"[C] expandable_segments from 2.1", C, "2.1", -1, "expandable_segments:True", 1, NULL, "expandable", 1},
    {"[C] pinned_reserve_segment_size_mb > 0", C, "", -1, "pinned_reserve_segment_size_mb:0", 0, "greater than 0", NULL,
     0},
    {"[NM] pinned_reserve_segment_size_mb:0 on NPU", N, "", -1, "pinned_reserve_segment_size_mb:0", 1, NULL, NULL, 0},
    {"[C] expandable_segments_reserve", C, "", -1, "expandable_segments_reserve:40G", 1, NULL, "reserve", 40},
    {"[C] an invalid reserve is ignored with a warning", C, "", -1, "expandable_segments_reserve:-1", 1,
     "ignores the invalid expandable-segment reserve", "reserve_set", 0},
    {"[C] reserve by class", C, "", -1, "expandable_segments_reserve_by_class:[serving:0.25,bulk:40G]", 1, NULL,
     "reserve_classes", 2},
    {"[C] not known to 2.12", C, "2.12", -1, "expandable_segments_reserve:0.5", 0, "known from PyTorch 2.14", NULL, 0},
    {"torch_npu key in CUDA", C, "", -1, "base_addr_aligned_kb:16", 0, "torch_npu key", NULL, 0},
    {"[NM] CUDA key in NPU", N, "", -1, "backend:native", 0, "torch_npu not support key 'backend'", NULL, 0},
    {"[NM] base_addr_aligned_kb leading zero", N, "", -1, "base_addr_aligned_kb:016", 0, "leading zeros", NULL, 0},
    {"[NM] base_addr_aligned_kb 0", N, "", -1, "base_addr_aligned_kb:0", 1, NULL, NULL, 0},
    {"[NM] page_size 1g only", N, "", -1, "page_size:2m", 0, "1g", NULL, 0},
    {"torch_npu 2.1.0.post6 knows no roundup", N, "2.1.0.post6", -1, "roundup_power2_divisions:4", 0,
     "known from torch_npu v7.3.0", NULL, 0},
    {"torch_npu 2.1.0.post6 align_hugepages", N, "2.1.0.post6", -1, "align_hugepages:True", 1, NULL, NULL, 0},
    {"torch_npu 2.1.0.post8 has no align_hugepages", N, "2.1.0.post8", -1, "align_hugepages:True", 0,
     "Unrecognized CachingAllocator option", NULL, 0},
    {"hbm_ keys only in HBMALLOC_CONF", C, "strict", -1, "hbm_remap_free_pages:True", 1, NULL, NULL, 0},
    /* ---- torch_npu: expandable segments with max_split / GC ---- */
    {"[N2] accepted where the probe fails", N, "2.1.0.post6", 0,
     "max_split_size_mb:32,garbage_collection_threshold:0.6,expandable_segments:True", 1,
     "turns expandable segments off", "expandable", 0},
    {"[N2] refused where the device can", N, "2.1.0.post6", 1,
     "max_split_size_mb:32,garbage_collection_threshold:0.6,expandable_segments:True", 0, "cannot be enabled with",
     NULL, 0},
    {"[N2] device unknown: left to the allocator", N, "2.1.0.post6", -1,
     "max_split_size_mb:32,expandable_segments:True", 1, "only where the device has no virtual memory", NULL, 0},
    {"[NM] refused on every device from 2.13", N, "", 0, "max_split_size_mb:32,expandable_segments:True", 0,
     "cannot be enabled with", NULL, 0},
    {"torch_npu 2.0.1.post1 has no check", N, "2.0.1.post1", 1, "max_split_size_mb:32,expandable_segments:True", 1,
     NULL, "expandable", 1},
    {"hbmalloc strict runs the combination, as PyTorch on CUDA", N, "strict", 1,
     "max_split_size_mb:32,expandable_segments:True", 1, "hbmalloc runs them together", "expandable", 1},
};

static double field(const hbm__conf *c, const char *f)
{
    if (!strcmp(f, "max_split_mb"))
        return (double)(c->max_split_size / MiB);
    if (!strcmp(f, "max_split_unlimited"))
        return c->max_split_size >= SIZE_MAX / MiB * MiB;
    if (!strcmp(f, "max_non_split_mb"))
        return (double)(c->max_non_split_rounding / MiB);
    if (!strcmp(f, "large_segment_mb"))
        return (double)(c->large_segment_size / MiB);
    if (!strcmp(f, "page_mb"))
        return (double)(c->expandable_page / MiB);
    if (!strcmp(f, "gc"))
        return c->gc_threshold;
    if (!strcmp(f, "fraction"))
        return c->memory_fraction;
    if (!strcmp(f, "expandable"))
        return c->expandable_segments;
    if (!strcmp(f, "reserve"))
        return c->es_reserve;
    if (!strcmp(f, "reserve_set"))
        return c->es_reserve_set;
    if (!strcmp(f, "reserve_classes"))
        return c->es_reserve_classes;
    if (!strncmp(f, "div", 3))
        return (double)c->roundup_divisions[atoi(f + 3)];
    fail_msg("unknown field %s", f);
    return 0;
}

static void every_case_decides_as_its_source(void **st)
{
    (void)st;
    static hbm__conf conf;
    char err[700];
    int failures = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conf_case *k = &cases[i];
        hbm__release rel;
        bool strict = !strcmp(k->release, "strict");
        assert_int_equal(hbm__release_find(&rel, k->d, strict ? NULL : k->release, err, sizeof err), HBM_OK);
        hbm__conf_defaults(&conf, k->d);
        snprintf(conf.source, sizeof conf.source, "%s",
                 strict      ? "HBMALLOC_CONF"
                 : k->d == N ? "PYTORCH_NPU_ALLOC_CONF"
                             : "PYTORCH_CUDA_ALLOC_CONF");
        err[0] = 0;
        hbm_status rc = hbm__conf_parse_release(&conf, k->s, k->d, strict ? NULL : &rel, k->vmm, err, sizeof err);
        const char *why = NULL;
        if ((rc == HBM_OK) != k->ok)
            why = k->ok ? "refused" : "accepted";
        else if (!k->ok && k->text && !strstr(err, k->text))
            why = "error text differs";
        else if (k->ok && k->text && !strstr(conf.warnings, k->text))
            why = "warning missing";
        else if (k->ok && !k->text && conf.warnings[0] && !strstr(conf.warnings, "deprecated"))
            why = "unexpected warning";
        else if (k->ok && k->field && field(&conf, k->field) != k->want)
            why = "wrong value";
        if (why) {
            print_message("case %zu (%s, %s %s): '%s': %s; err '%s'; warnings '%s'%s%s: %g\n", i, k->src,
                          k->d == N ? "npu" : "cuda", k->release, k->s, why, err, conf.warnings, k->field ? "; " : "",
                          k->field ? k->field : "", k->field && rc == HBM_OK ? field(&conf, k->field) : 0.0);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

static void releases_are_found_by_version(void **st)
{
    (void)st;
    hbm__release r;
    char err[300];
    assert_int_equal(hbm__release_find(&r, N, "2.1.0.post6", err, sizeof err), HBM_OK);
    assert_non_null(strstr(r.name, "v6.0.rc2"));
    assert_true(r.warn_probe);
    /* A version between two known ones reads as the older. */
    assert_int_equal(hbm__release_find(&r, N, "2.1.0.post9", err, sizeof err), HBM_OK);
    assert_non_null(strstr(r.name, "2.1.0.post8"));
    assert_int_equal(hbm__release_find(&r, C, "2.6.0+cu124", err, sizeof err), HBM_OK);
    assert_string_equal(r.name, "PyTorch 2.6");
    assert_false(r.tokenizer);
    assert_int_equal(hbm__release_find(&r, C, "2.14.0a0+4fdf77b", err, sizeof err), HBM_OK);
    assert_true(r.tokenizer);
    assert_int_equal(hbm__release_find(&r, C, "1.13", err, sizeof err), HBM_ERR_CONF);
    assert_non_null(strstr(err, "older than"));
    assert_int_equal(hbm__release_find(&r, N, "banana", err, sizeof err), HBM_ERR_CONF);
    assert_non_null(strstr(err, "not a version"));
    char since[200];
    assert_string_equal(hbm__release_key_since(C, "per_process_memory_fraction", since, sizeof since), "PyTorch 2.9");
    assert_non_null(strstr(hbm__release_key_since(N, "base_addr_aligned_kb", since, sizeof since), "v6.0.rc3"));
    assert_null(hbm__release_key_since(N, "frobnicate", since, sizeof since));
}

/* The policy string of every accepted case, read strictly, is the same device-memory policy. */
static void policy_strings_round_trip(void **st)
{
    (void)st;
    static hbm__conf a, b;
    char err[700], pol[1024];
    int checked = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const conf_case *k = &cases[i];
        if (!k->ok)
            continue;
        hbm__release rel;
        bool strict = !strcmp(k->release, "strict");
        assert_int_equal(hbm__release_find(&rel, k->d, strict ? NULL : k->release, err, sizeof err), HBM_OK);
        hbm__conf_defaults(&a, k->d);
        strcpy(a.source, strict ? "HBMALLOC_CONF" : "PYTORCH_ALLOC_CONF");
        assert_int_equal(hbm__conf_parse_release(&a, k->s, k->d, strict ? NULL : &rel, k->vmm, err, sizeof err),
                         HBM_OK);
        hbm__conf_policy_string(&a, pol, sizeof pol);
        hbm__conf_defaults(&b, k->d);
        strcpy(b.source, "HBMALLOC_CONF");
        if (hbm__conf_parse(&b, pol, k->d, err, sizeof err) != HBM_OK)
            fail_msg("case %zu '%s': policy '%s' refused: %s", i, k->s, pol, err);
        if (a.max_split_size != b.max_split_size || a.max_non_split_rounding != b.max_non_split_rounding ||
            a.large_segment_size != b.large_segment_size || a.gc_threshold != b.gc_threshold ||
            a.memory_fraction != b.memory_fraction || a.expandable_segments != b.expandable_segments ||
            memcmp(a.roundup_divisions, b.roundup_divisions, sizeof a.roundup_divisions) ||
            a.page_size_1g != b.page_size_1g || a.base_addr_aligned_kb != b.base_addr_aligned_kb ||
            a.expandable_page != b.expandable_page)
            fail_msg("case %zu '%s': policy '%s' reads back differently", i, k->s, pol);
        checked++;
    }
    assert_true(checked > 30);
}

/* A PYTORCH_* variable is read as the release the plug-in names. */
static void the_plugin_names_the_release(void **st)
{
    (void)st;
    static hbm__conf conf;
    char err[600];
    setenv("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:32,expandable_segments:True", 1);
    unsetenv("HBMALLOC_CONF");
    unsetenv("PYTORCH_ALLOC_CONF");
    unsetenv("HBMALLOC_TORCH_NPU_VERSION");
    assert_int_equal(hbm__conf_load(&conf, NULL, N, err, sizeof err), HBM_ERR_CONF); /* the newest refuses it */
    setenv("HBMALLOC_TORCH_NPU_VERSION", "2.1.0.post6", 1);
    assert_int_equal(hbm__conf_load(&conf, NULL, N, err, sizeof err), HBM_OK);
    assert_true(conf.combo_needs_no_vmm);
    assert_non_null(strstr(conf.release, "2.1.0.post6"));
    setenv("HBMALLOC_TORCH_NPU_VERSION", "nonsense", 1);
    assert_int_equal(hbm__conf_load(&conf, NULL, N, err, sizeof err), HBM_ERR_CONF);
    assert_non_null(strstr(err, "HBMALLOC_TORCH_NPU_VERSION"));
    unsetenv("HBMALLOC_TORCH_NPU_VERSION");
    unsetenv("PYTORCH_NPU_ALLOC_CONF");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_case_decides_as_its_source),
        cmocka_unit_test(releases_are_found_by_version),
        cmocka_unit_test(the_plugin_names_the_release),
        cmocka_unit_test(policy_strings_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
