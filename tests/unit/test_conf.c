/* test_conf.c: the PYTORCH_*_ALLOC_CONF grammar, key by key. */
#include "helpers.h"

#include "conf/conf.h"
#include "util/util.h"

static hbm__conf conf;
static char err[600];

static hbm_status parse(const char *s, hbm_dialect d)
{
    err[0] = 0;
    return hbm__conf_parse(&conf, s, d, err, sizeof err);
}

static void accept_cuda(const char *s)
{
    if (parse(s, HBM_DIALECT_CUDA) != HBM_OK)
        fail_msg("'%s' rejected: %s", s, err);
}

/* Rejected, and the message names the key. */
static void reject(const char *s, hbm_dialect d, const char *must_contain)
{
    if (parse(s, d) != HBM_ERR_CONF)
        fail_msg("'%s' accepted, expected an error mentioning '%s'", s, must_contain);
    if (!strstr(err, must_contain))
        fail_msg("'%s': error '%s' does not mention '%s'", s, err, must_contain);
}

static void empty_string_gives_pytorch_defaults(void **st)
{
    (void)st;
    accept_cuda("");
    assert_true(conf.max_split_size == SIZE_MAX);
    assert_int_equal(conf.max_non_split_rounding, 20 * MiB);
    assert_int_equal(conf.large_segment_size, 20 * MiB);
    assert_true(conf.gc_threshold == 0.0);
    assert_true(conf.memory_fraction == 1.0);
    assert_false(conf.expandable_segments);
    for (int k = 0; k < HBM__ROUNDUP_INTERVALS; k++)
        assert_int_equal(conf.roundup_divisions[k], 0);
}

static void max_split_size_is_mib_and_at_least_20(void **st)
{
    (void)st;
    accept_cuda("max_split_size_mb:20");
    assert_int_equal(conf.max_split_size, 20 * MiB);
    accept_cuda("max_split_size_mb:512");
    assert_int_equal(conf.max_split_size, 512 * MiB);
    reject("max_split_size_mb:19", HBM_DIALECT_CUDA, ">= 20");
    reject("max_split_size_mb:19", HBM_DIALECT_CUDA, "max_split_size_mb");
    reject("max_split_size_mb:-5", HBM_DIALECT_CUDA, "max_split_size_mb");
    reject("max_split_size_mb:12abc", HBM_DIALECT_CUDA, "12abc");
    reject("max_split_size_mb:", HBM_DIALECT_CUDA, "needs a value");
    reject("max_split_size_mb", HBM_DIALECT_CUDA, "needs a value");
    /* Huge values clamp as PyTorch's do, rather than overflow. */
    accept_cuda("max_split_size_mb:18446744073709551615");
    assert_true(conf.max_split_size >= SIZE_MAX - MiB);
}

static void whitespace_is_dropped_like_pytorch_tokenizer(void **st)
{
    (void)st;
    accept_cuda("  max_split_size_mb : 128 ,\texpandable_segments: True ");
    assert_int_equal(conf.max_split_size, 128 * MiB);
    assert_true(conf.expandable_segments);
}

static void booleans_are_case_sensitive(void **st)
{
    (void)st;
    accept_cuda("expandable_segments:True");
    assert_true(conf.expandable_segments);
    accept_cuda("expandable_segments:False");
    assert_false(conf.expandable_segments);
    reject("expandable_segments:true", HBM_DIALECT_CUDA, "True or False");
    reject("expandable_segments:1", HBM_DIALECT_CUDA, "expandable_segments");
    reject("release_lock_on_cudamalloc:yes", HBM_DIALECT_CUDA, "release_lock_on_cudamalloc");
}

static void gc_threshold_is_open_interval(void **st)
{
    (void)st;
    accept_cuda("garbage_collection_threshold:0.6");
    assert_true(conf.gc_threshold == 0.6);
    reject("garbage_collection_threshold:0", HBM_DIALECT_CUDA, "(0.0, 1.0)");
    reject("garbage_collection_threshold:1.0", HBM_DIALECT_CUDA, "strictly between 0 and 1");
    reject("garbage_collection_threshold:abc", HBM_DIALECT_CUDA, "garbage_collection_threshold");
    reject("garbage_collection_threshold:0.5x", HBM_DIALECT_CUDA, "garbage_collection_threshold");
}

static void fraction_is_closed_interval(void **st)
{
    (void)st;
    accept_cuda("per_process_memory_fraction:0");
    assert_true(conf.memory_fraction == 0.0);
    accept_cuda("per_process_memory_fraction:1");
    accept_cuda("per_process_memory_fraction:0.25");
    assert_true(conf.memory_fraction == 0.25);
    reject("per_process_memory_fraction:1.5", HBM_DIALECT_CUDA, "[0, 1]");
}

static void roundup_single_value_must_be_power_of_two(void **st)
{
    (void)st;
    accept_cuda("roundup_power2_divisions:4");
    for (int k = 0; k < HBM__ROUNDUP_INTERVALS; k++)
        assert_int_equal(conf.roundup_divisions[k], 4);
    reject("roundup_power2_divisions:3", HBM_DIALECT_CUDA, "power of two");
    reject("roundup_power2_divisions:0", HBM_DIALECT_CUDA, "power of two");
}

static void roundup_list_follows_code_not_docs(void **st)
{
    (void)st;
    /* pytorch/pytorch c10/core/AllocatorConfig.cpp, parseRoundUpPower2Divisions (the docs say otherwise):
     * [256:1,512:2,1024:4,>:8] gives 1 below 512 MiB,
     * 2 for [512 MiB, 1 GiB), 4 for [1, 2) GiB and 8 from 2 GiB. Entry B sets
     * index log2(B); the first entry fills the lower ones; '>' fills after the last. */
    accept_cuda("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]");
    for (int k = 0; k <= 8; k++)
        assert_int_equal(conf.roundup_divisions[k], 1);
    assert_int_equal(conf.roundup_divisions[9], 2);
    assert_int_equal(conf.roundup_divisions[10], 4);
    for (int k = 11; k < HBM__ROUNDUP_INTERVALS; k++)
        assert_int_equal(conf.roundup_divisions[k], 8);
    accept_cuda("roundup_power2_divisions:[1:0,>:4]");
    assert_int_equal(conf.roundup_divisions[0], 0);
    assert_int_equal(conf.roundup_divisions[1], 4);
    reject("roundup_power2_divisions:[3:2]", HBM_DIALECT_CUDA, "interval bounds must be a power of two");
    reject("roundup_power2_divisions:[256:3]", HBM_DIALECT_CUDA, "0 or a power of two");
    reject("roundup_power2_divisions:[256:2", HBM_DIALECT_CUDA, "not closed");
    reject("roundup_power2_divisions:[256-2]", HBM_DIALECT_CUDA, "roundup_power2_divisions");
}

static void separators_are_enforced(void **st)
{
    (void)st;
    reject("max_split_size_mb:128 expandable_segments:True", HBM_DIALECT_CUDA, "expected ','");
    reject("max_split_size_mb;128", HBM_DIALECT_CUDA, "Unrecognized key");
    reject(",max_split_size_mb:128", HBM_DIALECT_CUDA, "expected a key");
    accept_cuda("max_split_size_mb:128,"); /* a trailing comma is harmless */
}

static void unknown_and_foreign_keys_are_rejected_by_dialect(void **st)
{
    (void)st;
    reject("max_split_size:128", HBM_DIALECT_CUDA, "Unrecognized key 'max_split_size' in CUDA allocator config");
    reject("base_addr_aligned_kb:8", HBM_DIALECT_CUDA, "torch_npu key");
    reject("backend:native", HBM_DIALECT_NPU, "torch_npu not support key 'backend'");
    reject("release_lock_on_cudamalloc:True", HBM_DIALECT_NPU, "torch_npu not support key");
    reject("bogus:1", HBM_DIALECT_NPU, "Unrecognized key 'bogus' in NPU allocator config");
}

static void later_keys_override_earlier_ones(void **st)
{
    (void)st;
    accept_cuda("max_split_size_mb:100,max_split_size_mb:200");
    assert_int_equal(conf.max_split_size, 200 * MiB);
}

static void cuda_only_keys_validate_their_ranges(void **st)
{
    (void)st;
    accept_cuda("backend:cudaMallocAsync");
    assert_true(conf.backend_async);
    assert_non_null(strstr(conf.warnings, "cudaMallocAsync"));
    reject("backend:foo", HBM_DIALECT_CUDA, "native or cudaMallocAsync");
    accept_cuda("pinned_num_register_threads:8");
    reject("pinned_num_register_threads:6", HBM_DIALECT_CUDA, "power of two");
    reject("pinned_num_register_threads:256", HBM_DIALECT_CUDA, "<= 128");
    reject("pinned_reserve_segment_size_mb:0", HBM_DIALECT_CUDA, "> 0");
    accept_cuda("large_segment_size_mb:64");
    assert_int_equal(conf.large_segment_size, 64 * MiB);
    reject("large_segment_size_mb:10", HBM_DIALECT_CUDA, "> 10");
    reject("max_non_split_rounding_mb:10", HBM_DIALECT_CUDA, ">= 20");
    accept_cuda("max_non_split_rounding_mb:40,graph_capture_record_stream_reuse:True,throw_on_cudamalloc_oom:True");
    assert_int_equal(conf.max_non_split_rounding, 40 * MiB);
    assert_true(conf.throw_on_malloc_oom);
}

static void npu_keys_and_cross_rules(void **st)
{
    (void)st;
    assert_int_equal(parse("base_addr_aligned_kb:0,page_size:1g,multi_stream_lazy_reclaim:True", HBM_DIALECT_NPU),
                     HBM_OK);
    assert_int_equal(conf.base_addr_aligned_kb, 0);
    assert_true(conf.page_size_1g);
    assert_true(conf.multi_stream_lazy_reclaim);
    reject("base_addr_aligned_kb:17", HBM_DIALECT_NPU, "[0, 16]");
    reject("page_size:2m", HBM_DIALECT_NPU, "1g");
    reject("segment_size_mb:600", HBM_DIALECT_NPU, "[20, 512]");
    /* large_segment_size_mb has no upper bound on NPU either (torch_npu 2.12 NPUAllocatorConfig.cpp
     * parseLargeSegmentSize: "must be > 10 MB"); [20, 512] is segment_size_mb's range. */
    assert_int_equal(parse("large_segment_size_mb:600", HBM_DIALECT_NPU), HBM_OK);
    assert_int_equal(conf.large_segment_size, 600 * MiB);
    reject("large_segment_size_mb:10", HBM_DIALECT_NPU, "> 10");
    /* The newest torch_npu refuses expandable segments together with max_split or GC in its variable. */
    strcpy(conf.source, "PYTORCH_NPU_ALLOC_CONF");
    reject("expandable_segments:True,max_split_size_mb:128", HBM_DIALECT_NPU, "cannot be enabled with");
    reject("garbage_collection_threshold:0.5,expandable_segments:True", HBM_DIALECT_NPU, "cannot be enabled with");
    strcpy(conf.source, "");
    assert_int_equal(parse("expandable_segments:True", HBM_DIALECT_NPU), HBM_OK);
    /* segment_size_mb is deprecated; large_segment_size_mb wins when both are given. */
    assert_int_equal(parse("large_segment_size_mb:64,segment_size_mb:128", HBM_DIALECT_NPU), HBM_OK);
    assert_int_equal(conf.large_segment_size, 64 * MiB);
    assert_non_null(strstr(conf.warnings, "deprecated"));
}

static void hostile_strings_are_rejected_cleanly(void **st)
{
    (void)st;
    char big[8192];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = 0;
    reject(big, HBM_DIALECT_CUDA, "longer than");
    reject("expandable_segments:Tr\x01ue", HBM_DIALECT_CUDA, "non-printable");
    /* Many entries: more tokens than the lexer holds. */
    char many[4096] = "";
    for (int i = 0; i < 100; i++)
        strcat(many, "expandable_segments:True,");
    reject(many, HBM_DIALECT_CUDA, "tokens");
    /* A C string ends at its first NUL: what follows is not read. */
    const char nul[] = "expandable_segments:True\0max_split_size_mb:1";
    accept_cuda(nul);
    assert_true(conf.expandable_segments);
    assert_true(conf.max_split_size == SIZE_MAX);
}

static void environment_precedence(void **st)
{
    (void)st;
    unsetenv("HBMALLOC_CONF");
    unsetenv("PYTORCH_ALLOC_CONF");
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:64", 1);
    assert_int_equal(hbm__conf_load(&conf, NULL, HBM_DIALECT_CUDA, err, sizeof err), HBM_OK);
    assert_int_equal(conf.max_split_size, 64 * MiB);
    assert_string_equal(conf.source, "PYTORCH_CUDA_ALLOC_CONF");
    setenv("HBMALLOC_CONF", "max_split_size_mb:96", 1);
    assert_int_equal(hbm__conf_load(&conf, NULL, HBM_DIALECT_CUDA, err, sizeof err), HBM_OK);
    assert_int_equal(conf.max_split_size, 96 * MiB);
    assert_string_equal(conf.source, "HBMALLOC_CONF");
    /* An explicit string wins over both, even an empty one. */
    assert_int_equal(hbm__conf_load(&conf, "", HBM_DIALECT_CUDA, err, sizeof err), HBM_OK);
    assert_true(conf.max_split_size == SIZE_MAX);
    /* The error names where the bad string came from. */
    setenv("HBMALLOC_CONF", "max_split_size_mb:1", 1);
    assert_int_equal(hbm__conf_load(&conf, NULL, HBM_DIALECT_CUDA, err, sizeof err), HBM_ERR_CONF);
    assert_non_null(strstr(err, "HBMALLOC_CONF"));
    unsetenv("HBMALLOC_CONF");
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    /* NPU: both its variables set is an error, as in torch_npu. */
    setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:True", 1);
    setenv("PYTORCH_ALLOC_CONF", "expandable_segments:False", 1);
    assert_int_equal(hbm__conf_load(&conf, NULL, HBM_DIALECT_NPU, err, sizeof err), HBM_ERR_CONF);
    assert_non_null(strstr(err, "please set only one"));
    unsetenv("PYTORCH_ALLOC_CONF");
    assert_int_equal(hbm__conf_load(&conf, NULL, HBM_DIALECT_NPU, err, sizeof err), HBM_OK);
    assert_true(conf.expandable_segments);
    unsetenv("PYTORCH_NPU_ALLOC_CONF");
}

static void describe_lists_effective_values(void **st)
{
    (void)st;
    char out[4096];
    assert_int_equal(
        hbm_settings_check("max_split_size_mb:256,garbage_collection_threshold:0.8", HBM_DIALECT_CUDA, out, sizeof out),
        HBM_OK);
    assert_non_null(strstr(out, "max_split_size_mb: 256\n"));
    assert_non_null(strstr(out, "garbage_collection_threshold: 0.8 (inactive"));
    assert_int_equal(hbm_settings_check("max_split_size_mb:2", HBM_DIALECT_CUDA, out, sizeof out), HBM_ERR_CONF);
    assert_non_null(strstr(out, "max_split_size_mb:2"));
}

/* hbmalloc's own policy keys, in both dialects. */
static void hbmalloc_policy_keys(void **st)
{
    (void)st;
    for (int d = 0; d < 2; d++) {
        hbm_dialect dl = d ? HBM_DIALECT_NPU : HBM_DIALECT_CUDA;
        assert_int_equal(parse("expandable_segments:True,hbm_expandable_page_mb:2", dl), HBM_OK);
        assert_int_equal(conf.expandable_page, 2 * MiB);
        assert_int_equal(parse("hbm_expandable_page_mb:1024", dl), HBM_OK);
        assert_int_equal(conf.expandable_page, 1024 * MiB);
        reject("hbm_expandable_page_mb:3", dl, "even whole number of MiB in [2, 1024]");
        reject("hbm_expandable_page_mb:0", dl, "hbm_expandable_page_mb");
        reject("hbm_expandable_page_mb:2048", dl, "[2, 1024]");
        reject("hbm_expandable_page_mb:2.5", dl, "hbm_expandable_page_mb");
    }
    assert_int_equal(parse("", HBM_DIALECT_CUDA), HBM_OK);
    assert_int_equal(conf.expandable_page, 0); /* default: large_segment_size, PyTorch's 20 MiB */
    char out[4096];
    assert_int_equal(hbm_settings_check("hbm_expandable_page_mb:4", HBM_DIALECT_CUDA, out, sizeof out), HBM_OK);
    assert_non_null(strstr(out, "hbm_expandable_page_mb: 4 (hbmalloc policy: large-pool page of expandable segments; "
                                "needs expandable_segments:True)"));
}

/* Issue #29 item 13: "did you mean" for a key one or two edits away (an adjacent swap counts one), among the keys
 * this release reads in this dialect; KEY=VALUE is told to use ':'; an explicit string's error names it as the
 * caller's argument, not "explicit"; the verdict itself is unchanged (refused). */
static void a_mistyped_key_is_told_the_nearest_one(void **st)
{
    (void)st;
    reject("expandable_segment:True", HBM_DIALECT_CUDA, "Unrecognized key 'expandable_segment'");
    reject("expandable_segment:True", HBM_DIALECT_CUDA, "; did you mean 'expandable_segments'?");
    reject("garbage_colelction_threshold:0.6", HBM_DIALECT_CUDA, "did you mean 'garbage_collection_threshold'?");
    reject("base_addr_aligned:4", HBM_DIALECT_NPU, "did you mean 'base_addr_aligned_kb'?");
    reject("max_split_size_mb=64", HBM_DIALECT_CUDA, "separated by ':', not '=': write 'max_split_size_mb:64'");
    /* Nothing near: no guess. Another dialect's key is not offered. */
    assert_int_equal(parse("frobnicate:1", HBM_DIALECT_CUDA), HBM_ERR_CONF);
    assert_null(strstr(err, "did you mean"));
    assert_int_equal(parse("base_addr_aligned:4", HBM_DIALECT_CUDA), HBM_ERR_CONF);
    assert_null(strstr(err, "did you mean"));
    const char *const names[] = {"replay", "sweep", "plan", "view", "conf", "doctor", "top", "version"};
    assert_string_equal(hbm__nearest("replya", names, 8), "replay");
    assert_string_equal(hbm__nearest("veiw", names, 8), "view");
    assert_null(hbm__nearest("frobnicate", names, 8));
    assert_string_equal(hbm__nearest("to", names, 8), "top");
    unsetenv("HBMALLOC_CONF");
    assert_int_equal(hbm__conf_load(&conf, "expandable_segment:True", HBM_DIALECT_CUDA, err, sizeof err), HBM_ERR_CONF);
    assert_non_null(strstr(err, "(from " HBM__FROM_ARGUMENT ")"));
    assert_null(strstr(err, "explicit"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(hbmalloc_policy_keys),
        cmocka_unit_test(empty_string_gives_pytorch_defaults),
        cmocka_unit_test(max_split_size_is_mib_and_at_least_20),
        cmocka_unit_test(whitespace_is_dropped_like_pytorch_tokenizer),
        cmocka_unit_test(booleans_are_case_sensitive),
        cmocka_unit_test(gc_threshold_is_open_interval),
        cmocka_unit_test(fraction_is_closed_interval),
        cmocka_unit_test(roundup_single_value_must_be_power_of_two),
        cmocka_unit_test(roundup_list_follows_code_not_docs),
        cmocka_unit_test(separators_are_enforced),
        cmocka_unit_test(unknown_and_foreign_keys_are_rejected_by_dialect),
        cmocka_unit_test(later_keys_override_earlier_ones),
        cmocka_unit_test(cuda_only_keys_validate_their_ranges),
        cmocka_unit_test(npu_keys_and_cross_rules),
        cmocka_unit_test(hostile_strings_are_rejected_cleanly),
        cmocka_unit_test(environment_precedence),
        cmocka_unit_test(describe_lists_effective_values),
        cmocka_unit_test(a_mistyped_key_is_told_the_nearest_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
