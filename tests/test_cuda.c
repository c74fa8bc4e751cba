/* test_cuda.c: the CUDA backend against tests/fake_cuda.c, loaded through the same dlopen path. */
#include "helpers.h"

#include <dlfcn.h>

static void *lib;
static void (*fake_reset)(void);
static void (*fake_set)(const char *, long);
static void (*fake_outstanding)(long[5]);
static long (*fake_get)(const char *);
static char spec[600];

static int setup(void **st)
{
    (void)st;
    lib = dlopen(HBM_FAKE_CUDA, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        return -1;
    fake_reset = (void (*)(void))dlsym(lib, "fake_cuda_reset");
    fake_set = (void (*)(const char *, long))dlsym(lib, "fake_cuda_set");
    fake_outstanding = (void (*)(long[5]))dlsym(lib, "fake_cuda_outstanding");
    fake_get = (long (*)(const char *))dlsym(lib, "fake_cuda_get");
    snprintf(spec, sizeof spec, "cuda:lib=%s", HBM_FAKE_CUDA);
    setenv("HBMALLOC_QUIET", "1", 1);
    return fake_reset && fake_set && fake_outstanding && fake_get ? 0 : -1;
}

static int teardown(void **st)
{
    (void)st;
    dlclose(lib);
    return 0;
}

static int reset(void **st)
{
    (void)st;
    fake_reset();
    return 0;
}

static void assert_driver_empty(void)
{
    long o[5];
    fake_outstanding(o);
    if (o[0] || o[1] || o[2] || o[3] || o[4])
        fail_msg("the fake driver still holds %ld allocations, %ld reservations, %ld handles, %ld mappings, %ld events",
                 o[0], o[1], o[2], o[3], o[4]);
}

static hbm_allocator *open_cuda(const char *settings)
{
    hbm_allocator *a = NULL;
    char err[600];
    if (hbm_open(&a, spec, 0, settings, err, sizeof err) != HBM_OK)
        fail_msg("%s", err);
    return a;
}

/* As PyTorch's alloc_block (CUDAStreamCaptureModeGuard): cuMemAlloc and cuMemCreate run with the thread in
 * relaxed capture mode, so a graph captured by another thread in global mode is not invalidated; the thread's
 * mode is restored afterwards. */
static void device_memory_is_obtained_in_relaxed_capture_mode(void **st)
{
    (void)st;
    const char *confs[] = {"", "expandable_segments:True"};
    for (int i = 0; i < 2; i++) {
        fake_reset();
        hbm_allocator *a = open_cuda(confs[i]);
        void *p = NULL;
        assert_int_equal(hbm_malloc(a, 30 << 20, 0, &p), HBM_OK);
        assert_true(fake_get("allocs_relaxed") >= 1);
        assert_int_equal(fake_get("allocs_not_relaxed"), 0);
        assert_int_equal(fake_get("capture_mode"), 0); /* back to global */
        hbm_free(a, p);
        hbm_destroy(a);
        assert_driver_empty();
    }
}

static void allocates_through_the_versioned_entry_points(void **st)
{
    (void)st;
    /* getproc 2: cuGetProcAddress_v2; 1: cuGetProcAddress; 0: neither, the explicit _v2 exports.
     * The fake's plain cuMemAlloc is the 32-bit CUDA 2.0 ABI and fails: using it would show. */
    for (long mode = 2; mode >= 0; mode--) {
        fake_reset();
        fake_set("getproc", mode);
        hbm_allocator *a = open_cuda("");
        void *p = must_malloc(a, 5 * MiB, 0);
        memset(p, 0x5a, 5 * MiB); /* cuMemAlloc is host memory in the fake */
        hbm_free(a, p);
        assert_ptr_equal(must_malloc(a, 5 * MiB, 0), p);
        char out[2048];
        hbm_settings_describe(a, out, sizeof out);
        assert_non_null(strstr(out, "cuda 0 (CUDA driver API 12.4 (12040)"));
        assert_int_equal(hbm_sim_hold_stream(a, 1, 1), HBM_ERR_INVALID); /* the simulated device's only */
        assert_valid(a);
        hbm_destroy(a);
        assert_driver_empty();
    }
}

static void out_of_memory_names_the_cuda_device(void **st)
{
    (void)st;
    fake_set("memory", 256L << 20);
    hbm_allocator *a = open_cuda("");
    void *p;
    assert_int_equal(hbm_malloc(a, 300 * MiB, 0, &p), HBM_ERR_OOM);
    assert_non_null(strstr(hbm_last_error(a), "out of memory on cuda device 0"));
    assert_non_null(strstr(hbm_last_error(a), "total capacity of 256.00 MiB"));
    hbm_destroy(a);
}

static void expandable_segments_use_the_virtual_memory_api(void **st)
{
    (void)st;
    hbm_allocator *a = open_cuda("expandable_segments:True");
    assert_string_equal(hbm_warning(a), "");
    void *p = must_malloc(a, 30 * MiB, 0);
    assert_int_equal(stats_of(a).num_expandable_segments, 1);
    long o[5];
    fake_outstanding(o);
    assert_int_equal(o[1], 1); /* one reservation */
    assert_int_equal(o[2], 2); /* two 20 MiB handles */
    assert_int_equal(o[3], 2); /* mapped one by one */
    hbm_free(a, p);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_driver_empty();
    assert_valid(a);
    hbm_destroy(a);
    assert_driver_empty();
}

static void no_virtual_memory_gives_the_reason_and_whole_segments(void **st)
{
    (void)st;
    fake_set("vmm", 0);
    hbm_allocator *a = open_cuda("expandable_segments:True");
    assert_non_null(strstr(hbm_warning(a), "CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0"));
    must_malloc(a, 30 * MiB, 0);
    assert_int_equal(stats_of(a).segment[HBM_POOL_ALL].current, 1);
    hbm_destroy(a);
    fake_reset();
    fake_set("version", 9020);
    a = open_cuda("expandable_segments:True");
    assert_non_null(strstr(hbm_warning(a), "CUDA driver 9.2 predates virtual memory management"));
    hbm_destroy(a);
}

static void driver_errors_carry_the_driver_text_and_leak_nothing(void **st)
{
    (void)st;
    int total_errors = 0;
    for (int expandable = 0; expandable < 2; expandable++)
        for (long k = 1; k <= 40; k++) {
            fake_reset();
            hbm_allocator *a = open_cuda(expandable ? "expandable_segments:True" : "");
            fake_set("fail_nth", k);
            void *live[6] = {0};
            int errors = fault_workload(a, "CUDA_ERROR_UNKNOWN (999): unknown error (injected", live);
            fake_set("fail_nth", 0);
            for (int i = 0; i < 6; i++)
                if (live[i])
                    assert_int_equal(hbm_free(a, live[i]), HBM_OK);
            hbm_destroy(a);
            assert_driver_empty();
            total_errors += errors;
        }
    assert_true(total_errors > 20); /* most of the 80 runs hit an injected failure */
}

static void cross_stream_frees_wait_for_cuda_events(void **st)
{
    (void)st;
    fake_set("hold_events", 1);
    hbm_allocator *a = open_cuda("");
    void *p = must_malloc(a, 4096, 1);
    assert_int_equal(hbm_record_stream(a, p, 2), HBM_OK);
    hbm_free(a, p);
    void *q = must_malloc(a, 4096, 1);
    assert_ptr_not_equal(q, p); /* the event has not completed */
    assert_int_equal(hbm_empty_cache(a), HBM_OK); /* waits on it */
    assert_int_equal(stats_of(a).num_sync_all_streams, 1);
    assert_valid(a);
    hbm_destroy(a);
    assert_driver_empty();
}

static void a_missing_library_is_a_clear_error(void **st)
{
    (void)st;
    hbm_allocator *a;
    char err[600];
    assert_int_equal(hbm_open(&a, "cuda:lib=/nonexistent/libcuda.so.1", 0, "", err, sizeof err), HBM_ERR_BACKEND);
    assert_non_null(strstr(err, "cannot load /nonexistent/libcuda.so.1"));
    assert_int_equal(hbm_open(&a, "cuda:bogus=1", 0, "", err, sizeof err), HBM_ERR_INVALID);
    assert_non_null(strstr(err, "unknown option"));
    fake_set("devices", 0);
    assert_int_equal(hbm_open(&a, spec, 0, "", err, sizeof err), HBM_ERR_BACKEND);
    assert_non_null(strstr(err, "no CUDA device"));
}

static void each_device_gets_its_own_context_and_allocator(void **st)
{
    (void)st;
    fake_set("devices", 2);
    hbm_devices *d;
    char err[600];
    assert_int_equal(hbm_devices_open(&d, spec, "", err, sizeof err), HBM_OK);
    assert_int_equal(hbm_devices_count(d), 2);
    void *p0, *p1;
    assert_int_equal(hbm_devices_malloc(d, 0, 3 * MiB, 0, &p0), HBM_OK);
    assert_int_equal(hbm_devices_malloc(d, 1, 3 * MiB, 0, &p1), HBM_OK);
    assert_int_equal(hbm_devices_free(d, 0, p1), HBM_ERR_WRONG_DEVICE);
    assert_int_equal(hbm_devices_free(d, 1, p1), HBM_OK);
    assert_int_equal(hbm_devices_free(d, 0, p0), HBM_OK);
    hbm_devices_close(d);
    assert_driver_empty();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(allocates_through_the_versioned_entry_points, reset),
        cmocka_unit_test_setup(device_memory_is_obtained_in_relaxed_capture_mode, reset),
        cmocka_unit_test_setup(out_of_memory_names_the_cuda_device, reset),
        cmocka_unit_test_setup(expandable_segments_use_the_virtual_memory_api, reset),
        cmocka_unit_test_setup(no_virtual_memory_gives_the_reason_and_whole_segments, reset),
        cmocka_unit_test_setup(driver_errors_carry_the_driver_text_and_leak_nothing, reset),
        cmocka_unit_test_setup(cross_stream_frees_wait_for_cuda_events, reset),
        cmocka_unit_test_setup(a_missing_library_is_a_clear_error, reset),
        cmocka_unit_test_setup(each_device_gets_its_own_context_and_allocator, reset),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
