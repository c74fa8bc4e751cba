/* test_cuda.c: the CUDA backend against tests/fakes/fake_cuda.c, loaded through the same dlopen path. */
#include "helpers.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

static void *lib;
static void (*fake_reset)(void);
static void (*fake_set)(const char *, long);
static void (*fake_outstanding)(long[5]);
static long (*fake_get)(const char *);
/* The fake's device work and contexts (fake_work.h), and the driver calls a framework thread makes itself. */
static int (*fake_launch)(void *, uint64_t, size_t);
static int (*fake_first_use)(void *, uint64_t, size_t);
static void (*fake_progress)(long);
static long (*fake_violations)(char *, size_t);
static long (*fake_contexts)(int);
static int (*fake_current)(void);
static int (*fake_can_access)(int, uint64_t, size_t);
static int (*cu_retain)(void **, int);
static int (*cu_release)(int);
static int (*cu_set_current)(void *);
static int (*cu_init)(unsigned);
static int (*fake_poke)(uint64_t, const void *, size_t);
static int (*fake_peek)(uint64_t, void *, size_t);
static const char *(*fake_log)(void);
static int (*fake_host_queued)(uint64_t, size_t);
static int (*cu_mem_info)(size_t *, size_t *);
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
    *(void **)&fake_launch = dlsym(lib, "fake_cuda_launch");
    *(void **)&fake_first_use = dlsym(lib, "fake_cuda_first_use");
    *(void **)&fake_progress = dlsym(lib, "fake_cuda_progress");
    *(void **)&fake_violations = dlsym(lib, "fake_cuda_violations");
    *(void **)&fake_contexts = dlsym(lib, "fake_cuda_contexts");
    *(void **)&fake_current = dlsym(lib, "fake_cuda_current");
    *(void **)&fake_can_access = dlsym(lib, "fake_cuda_can_access");
    *(void **)&cu_retain = dlsym(lib, "cuDevicePrimaryCtxRetain");
    *(void **)&cu_release = dlsym(lib, "cuDevicePrimaryCtxRelease_v2");
    *(void **)&cu_set_current = dlsym(lib, "cuCtxSetCurrent");
    *(void **)&cu_init = dlsym(lib, "cuInit");
    *(void **)&fake_poke = dlsym(lib, "fake_cuda_poke");
    *(void **)&fake_peek = dlsym(lib, "fake_cuda_peek");
    *(void **)&fake_log = dlsym(lib, "fake_cuda_log");
    *(void **)&fake_host_queued = dlsym(lib, "fake_cuda_host_queued");
    *(void **)&cu_mem_info = dlsym(lib, "cuMemGetInfo_v2");
    snprintf(spec, sizeof spec, "cuda:lib=%s", HBM_FAKE_CUDA);
    setenv("HBMALLOC_QUIET", "1", 1);
    return fake_reset && fake_set && fake_outstanding && fake_get && fake_launch && fake_first_use && fake_progress &&
                   fake_violations && fake_contexts && fake_current && fake_can_access && cu_retain && cu_release &&
                   cu_set_current && cu_init && fake_poke && fake_peek && fake_log && cu_mem_info && fake_host_queued
               ? 0
               : -1;
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

/* The device's work was never broken: nothing freed, unmapped or reused under queued work. */
static void assert_no_violation(void)
{
    char first[512];
    long n = fake_violations(first, sizeof first);
    if (n)
        fail_msg("%ld device-work violations; the first: %s", n, first);
}

/* What a framework thread does before it works on a device (PyTorch's device guard): its primary context current. */
static void framework_thread_on(int device)
{
    void *ctx;
    assert_int_equal(cu_init(0), 0);
    assert_int_equal(cu_retain(&ctx, device), 0);
    assert_int_equal(cu_set_current(ctx), 0);
}

static void assert_driver_empty(void)
{
    assert_no_violation();
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

/* An allocator on device 0 of a backend the test holds (for the backend-wide calls: peers). */
static hbm_allocator *open_cuda_on(hbm_backend **b, const char *backend_spec, const char *settings)
{
    hbm_allocator *a = NULL;
    char err[600];
    if (hbm_backend_open(b, backend_spec, err, sizeof err) != HBM_OK ||
        hbm_create(&a, *b, 0, settings, err, sizeof err))
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

/* record_stream: work queued on stream 2 keeps the block from stream 1 until its event completes. */
static void cross_stream_frees_wait_for_cuda_events(void **st)
{
    (void)st;
    framework_thread_on(0);
    hbm_allocator *a = open_cuda("");
    void *p = must_malloc(a, 4096, 1);
    assert_int_equal(fake_first_use((void *)1, (uintptr_t)p, 4096), 0);
    assert_int_equal(hbm_record_stream(a, p, 2), HBM_OK);
    assert_int_equal(fake_launch((void *)2, (uintptr_t)p, 4096), 0); /* stream 2 reads it, still running */
    hbm_free(a, p);
    void *q = must_malloc(a, 4096, 1);
    assert_ptr_not_equal(q, p); /* the event has not completed */
    assert_int_equal(fake_first_use((void *)1, (uintptr_t)q, 4096), 0);
    fake_progress(1); /* stream 1's first use of p completes; stream 2's read does not */
    void *r = must_malloc(a, 4096, 1);
    assert_ptr_not_equal(r, p);
    fake_progress(100); /* everything completes, the event with it */
    void *again = must_malloc(a, 4096, 1);
    assert_ptr_equal(again, p); /* its free completed at this malloc: reused, safely */
    assert_int_equal(fake_first_use((void *)1, (uintptr_t)again, 4096), 0);
    /* Again with the work still running: empty_cache waits for the event (synchronize_and_free_events). */
    assert_int_equal(hbm_record_stream(a, again, 2), HBM_OK);
    assert_int_equal(fake_launch((void *)2, (uintptr_t)again, 4096), 0);
    hbm_free(a, again);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(stats_of(a).num_sync_all_streams, 1);
    assert_ptr_equal(must_malloc(a, 4096, 1), p);
    assert_no_violation();
    assert_valid(a);
    hbm_destroy(a);
    assert_driver_empty();
}

/* cuMemFree "may perform implicit synchronization" (cuda.h): may. A kernel still reading a block its owner freed
 * must be waited for before the segment goes back, at empty_cache, at the OOM retry and at destroy. */
static void segments_go_back_only_after_the_device_has_finished_with_them(void **st)
{
    (void)st;
    framework_thread_on(0);
    fake_set("memory", 64L << 20);
    hbm_allocator *a = open_cuda("");
    void *p = must_malloc(a, 30 * MiB, 0);
    assert_int_equal(fake_first_use(NULL, (uintptr_t)p, 30 * MiB), 0); /* a kernel on the default stream */
    hbm_free(a, p);                                                    /* freed while it runs, as torch does */
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_no_violation();
    /* The OOM retry frees cached segments too. */
    p = must_malloc(a, 30 * MiB, 0);
    assert_int_equal(fake_first_use(NULL, (uintptr_t)p, 30 * MiB), 0);
    hbm_free(a, p);
    void *big = must_malloc(a, 50 * MiB, 0); /* 30 cached + 50 > 64: the cached segment is freed first */
    assert_int_equal(stats_of(a).num_alloc_retries, 1);
    assert_no_violation();
    /* Destroy gives back live blocks too. */
    assert_int_equal(fake_first_use(NULL, (uintptr_t)big, 50 * MiB), 0);
    hbm_destroy(a);
    assert_driver_empty();
    /* Expandable segments: pages are unmapped after the segment's stream has finished (PyTorch's unmapHandles). */
    fake_reset();
    framework_thread_on(0);
    a = open_cuda("expandable_segments:True");
    p = must_malloc(a, 30 * MiB, 3);
    assert_int_equal(fake_first_use((void *)3, (uintptr_t)p, 30 * MiB), 0);
    hbm_free(a, p);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_no_violation();
    p = must_malloc(a, 30 * MiB, 3);
    assert_int_equal(fake_first_use((void *)3, (uintptr_t)p, 30 * MiB), 0);
    hbm_destroy(a);
    assert_driver_empty();
}

/* Each driver call runs on the allocator's device and leaves the caller's context as it was: a framework thread on
 * device 1 (or on none) is still there after every call, empty_cache of every device included. No context is made
 * on a device no allocator serves. */
static void the_callers_context_is_the_same_after_every_call(void **st)
{
    (void)st;
    fake_set("devices", 3);
    hbm_devices *d;
    char err[600];
    assert_int_equal(hbm_devices_open(&d, spec, "expandable_segments:True", err, sizeof err), HBM_OK);
    assert_int_equal(fake_contexts(0) + fake_contexts(1) + fake_contexts(2), 0); /* opening creates none */
    framework_thread_on(1);
    void *p0, *p1;
    assert_int_equal(hbm_devices_malloc(d, 0, 30 * MiB, 0, &p0), HBM_OK);
    assert_int_equal(fake_current(), 1);
    assert_int_equal(hbm_devices_malloc(d, 1, 30 * MiB, 0, &p1), HBM_OK);
    assert_int_equal(fake_current(), 1);
    assert_int_equal(hbm_record_stream(hbm_devices_get(d, 0), p0, 7), HBM_OK);
    assert_int_equal(fake_current(), 1);
    assert_int_equal(hbm_devices_free(d, 0, p0), HBM_OK);
    assert_int_equal(fake_current(), 1);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(hbm_empty_cache(hbm_devices_get(d, i)), HBM_OK);
        assert_int_equal(fake_current(), 1);
    }
    assert_int_equal(fake_contexts(2), 0);     /* device 2 serves nothing: no context there */
    assert_int_equal(cu_set_current(NULL), 0); /* a thread with no context keeps none */
    assert_int_equal(hbm_devices_free(d, 1, p1), HBM_OK);
    assert_int_equal(hbm_empty_cache(hbm_devices_get(d, 1)), HBM_OK);
    assert_int_equal(fake_current(), -1);
    hbm_devices_close(d);
    assert_driver_empty();
}

/* cudaDeviceEnablePeerAccess does not cover cuMemMap'd memory, so each device that touches a page needs its own
 * cuMemSetAccess descriptor. PyTorch grants the owning device and the peers its enablePeerAccess added (addPeer on
 * the pages mapped already, then every new page: CUDACachingAllocator.cpp v2.6.0:533-537, 564-570, 2144-2156), not
 * every device cuDeviceCanAccessPeer reports: on an 8-GPU node that would be 8 descriptors a page, the driver
 * mapping each. */
static void expandable_pages_are_accessible_to_their_device_and_the_peers_enabled_for_it(void **st)
{
    (void)st;
    fake_set("devices", 3); /* every device can reach every other */
    hbm_backend *b;
    char err[600];
    hbm_allocator *a = open_cuda_on(&b, spec, "expandable_segments:True");
    void *p = must_malloc(a, 30 * MiB, 0);
    assert_true(fake_can_access(0, (uintptr_t)p, 30 * MiB));
    assert_false(fake_can_access(1, (uintptr_t)p, 30 * MiB)); /* capable, never enabled: no descriptor */
    assert_false(fake_can_access(2, (uintptr_t)p, 30 * MiB));
    assert_int_equal(fake_get("access_descriptors"), fake_get("access_calls")); /* the owner's alone */
    /* Enabled: the pages mapped already are granted at once, and every page mapped later. */
    assert_int_equal(hbm_backend_enable_peer(b, 0, 1, err, sizeof err), HBM_OK);
    assert_true(fake_can_access(1, (uintptr_t)p, 30 * MiB));
    assert_false(fake_can_access(2, (uintptr_t)p, 30 * MiB));
    void *q = must_malloc(a, 30 * MiB, 0); /* pages mapped after */
    assert_true(fake_can_access(0, (uintptr_t)q, 30 * MiB) && fake_can_access(1, (uintptr_t)q, 30 * MiB));
    assert_false(fake_can_access(2, (uintptr_t)q, 30 * MiB));
    framework_thread_on(1);
    assert_int_equal(fake_launch(NULL, (uintptr_t)q, 30 * MiB), 0); /* a copy on device 1 writes device 0's pages */
    fake_progress(1);                                               /* and completes (the owner synchronizes) */
    assert_int_equal(cu_set_current(NULL), 0);
    assert_no_violation();
    /* Once per pair is enough, its own device needs nothing, a device that does not exist is refused, and a device
     * with nothing mapped is given no context for it. */
    long calls = fake_get("access_calls");
    assert_int_equal(hbm_backend_enable_peer(b, 0, 1, err, sizeof err), HBM_OK);
    assert_int_equal(hbm_backend_enable_peer(b, 0, 0, err, sizeof err), HBM_OK);
    assert_int_equal(fake_get("access_calls"), calls);
    assert_int_equal(hbm_backend_enable_peer(b, 0, 3, err, sizeof err), HBM_ERR_INVALID);
    assert_non_null(strstr(err, "no device 0 or 3 on cuda (it has 3)"));
    assert_int_equal(hbm_backend_enable_peer(b, 2, 0, err, sizeof err), HBM_OK);
    assert_int_equal(fake_contexts(2), 0);
    hbm_free(a, p);
    hbm_free(a, q);
    assert_valid(a);
    hbm_destroy(a);
    hbm_backend_close(b);
    assert_driver_empty();
    /* A peer that cannot reach the device is refused with the driver's words (a descriptor for it would make every
     * later map fail), and the device's own pages go on working. */
    fake_reset();
    fake_set("devices", 2);
    fake_set("peers", 0);
    a = open_cuda_on(&b, spec, "expandable_segments:True");
    p = must_malloc(a, 30 * MiB, 0);
    assert_int_equal(hbm_backend_enable_peer(b, 0, 1, err, sizeof err), HBM_ERR_BACKEND);
    assert_non_null(strstr(err, "cuda: device 1 cannot be given access to device 0's pages: "
                                "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED (217)"));
    assert_false(fake_can_access(1, (uintptr_t)p, 30 * MiB));
    q = must_malloc(a, 30 * MiB, 0);
    assert_true(fake_can_access(0, (uintptr_t)q, 30 * MiB));
    hbm_free(a, p);
    hbm_free(a, q);
    hbm_destroy(a);
    hbm_backend_close(b);
    assert_driver_empty();
}

/* cuda:peers=capable: every device cuDeviceCanAccessPeer reports gets every page, for a framework that cannot say
 * which peers it enables (torch's pluggable allocator keeps its enablePeerAccess to itself). */
static void peers_capable_grants_every_device_that_can_reach_the_pages(void **st)
{
    (void)st;
    fake_set("devices", 3);
    char capable[700];
    snprintf(capable, sizeof capable, "%s,peers=capable", spec);
    hbm_backend *b;
    hbm_allocator *a = open_cuda_on(&b, capable, "expandable_segments:True");
    void *p = must_malloc(a, 30 * MiB, 0);
    for (int d = 0; d < 3; d++)
        assert_true(fake_can_access(d, (uintptr_t)p, 30 * MiB));
    assert_int_equal(fake_get("access_descriptors"), 3 * fake_get("access_calls"));
    assert_int_equal(hbm_backend_enable_peer(b, 0, 2, NULL, 0), HBM_OK); /* granted already */
    hbm_free(a, p);
    hbm_destroy(a);
    hbm_backend_close(b);
    assert_driver_empty();
    char err[600];
    assert_int_equal(hbm_backend_open(&b, "cuda:peers=all", err, sizeof err), HBM_ERR_INVALID);
    assert_non_null(
        strstr(err, "unknown option 'peers=all' (known: lib=PATH, nvml=PATH|off, peers=enabled, peers=capable)"));
}

/* The first calls of many threads at once, on two devices: each context retained once, under the backend's lock;
 * later calls find it without the lock. Each call, on a thread that never had a context, runs with the device's
 * (cuMemGetInfo needs one) and leaves the thread with none. Run under ThreadSanitizer too. */
#define RACERS 8
struct racer {
    hbm_backend *b;
    pthread_barrier_t *start;
    int device, rc, current_after;
};

static void *first_call(void *arg)
{
    struct racer *r = arg;
    size_t free_b = 0, total = 0;
    pthread_barrier_wait(r->start);
    r->rc = hbm_backend_mem_info(r->b, r->device, &free_b, &total);
    r->current_after = fake_current();
    return NULL;
}

static void fresh_threads_get_the_devices_context_retained_once(void **st)
{
    (void)st;
    fake_set("devices", 2);
    hbm_backend *b;
    char err[600];
    assert_int_equal(hbm_backend_open(&b, spec, err, sizeof err), HBM_OK);
    for (int round = 0; round < 2; round++) { /* round 0 retains, round 1 finds the contexts retained */
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, RACERS);
        pthread_t th[RACERS];
        struct racer r[RACERS];
        for (int i = 0; i < RACERS; i++) {
            r[i] = (struct racer){b, &start, i % 2, -1, 99};
            assert_int_equal(pthread_create(&th[i], NULL, first_call, &r[i]), 0);
        }
        for (int i = 0; i < RACERS; i++) {
            pthread_join(th[i], NULL);
            assert_int_equal(r[i].rc, HBM_OK);
            assert_int_equal(r[i].current_after, -1);
        }
        pthread_barrier_destroy(&start);
        assert_int_equal(fake_get("retained"), 2);
        assert_int_equal(fake_contexts(0), 1);
        assert_int_equal(fake_contexts(1), 1);
    }
    hbm_backend_close(b);
    assert_int_equal(fake_get("retained"), 0);
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

static size_t driver_free(void)
{
    size_t f = 0, t = 0;
    assert_int_equal(cu_mem_info(&f, &t), 0);
    return f;
}

/* A pool's sleep and wake as the driver sees them (docs/SLEEP.md, docs/CONTRACTS.md): the device's work waited for
 * first (cuCtxSynchronize: a kernel on another stream the allocator was never told of still reads the block), the
 * backup copied on the pool's stream and waited for, then cuMemUnmap and cuMemRelease page by page; the wake
 * cuMemCreate and cuMemMap, then cuMemSetAccess for the owner and its peer (enabled before the sleep) before anything
 * touches the pages, the copies back waited for before the pinned buffer could be reused. The fake records any
 * unmap, copy or host free under queued work; the contents come back byte for byte; the driver's free memory moves
 * by the pages. */
static void a_pool_sleeps_and_wakes_within_the_drivers_contracts(void **st)
{
    (void)st;
    fake_set("devices", 2);
    framework_thread_on(0);
    hbm_backend *b;
    hbm_allocator *a = open_cuda_on(&b, spec, "");
    assert_int_equal(hbm_backend_enable_peer(b, 0, 1, NULL, 0), HBM_OK);
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    assert_int_equal(hbm_pool_tag(a, mp, "weights", 1), HBM_OK);
    void *p = NULL, *q = NULL;
    assert_int_equal(hbm_mempool_malloc(a, mp, 30 * MiB, 3, &p), HBM_OK);
    assert_int_equal(hbm_mempool_malloc(a, mp, 5 * MiB, 3, &q), HBM_OK);
    unsigned char *pat = malloc(30 * MiB), *back = malloc(30 * MiB);
    for (size_t i = 0; i < 30 * MiB; i++)
        pat[i] = (unsigned char)(i * 7 + (i >> 16));
    assert_int_equal(fake_poke((uintptr_t)p, pat, 30 * MiB), 0);
    assert_int_equal(fake_poke((uintptr_t)q, pat + 1, 5 * MiB), 0);
    assert_int_equal(fake_first_use((void *)3, (uintptr_t)p, 30 * MiB), 0); /* the pool's stream */
    assert_int_equal(fake_launch((void *)5, (uintptr_t)p, 30 * MiB), 0);    /* another, never recorded */
    size_t free0 = driver_free();
    fake_set("log", 1);
    assert_int_equal(hbm_pool_sleep(a, mp, NULL), HBM_OK);
    assert_no_violation();
    const char *log = fake_log();
    assert_true(log_at(log, "cuCtxSynchronize", 0) >= 0);
    assert_true(log_at(log, "cuCtxSynchronize", 0) < log_at(log, "cuMemcpyDtoHAsync_v2", 0));
    assert_true(log_at(log, "cuMemcpyDtoHAsync_v2", 1) < log_at(log, "cuStreamSynchronize", 0));
    assert_true(log_at(log, "cuStreamSynchronize", 0) < log_at(log, "cuMemUnmap", 0));
    assert_int_equal(log_count(log, "cuMemUnmap"), 2); /* 35 MiB in two 20 MiB pages */
    assert_int_equal(log_count(log, "cuMemRelease"), 2);
    assert_int_equal(log_count(log, "cuMemHostAlloc"), 1);
    assert_true(log_at(log, "cuMemUnmap", 0) < log_at(log, "cuMemRelease", 0));
    assert_int_equal(driver_free(), free0 + 40 * MiB);         /* mem_get_info sees the pages back */
    assert_int_equal(fake_peek((uintptr_t)p, back, 4096), -1); /* nothing mapped under the block */
    fake_set("log", 1);
    assert_int_equal(hbm_pool_wake(a, mp, NULL), HBM_OK);
    assert_no_violation();
    log = fake_log();
    assert_int_equal(log_count(log, "cuMemCreate"), 2);
    assert_int_equal(log_count(log, "cuMemMap"), 2);
    assert_true(log_at(log, "cuMemMap", 1) < log_at(log, "cuMemSetAccess", 0));
    assert_true(log_at(log, "cuMemSetAccess", 0) < log_at(log, "cuMemcpyHtoDAsync_v2", 0));
    assert_true(log_at(log, "cuMemcpyHtoDAsync_v2", 1) < log_at(log, "cuStreamSynchronize", 1));
    assert_int_equal(log_count(log, "cuMemFreeHost"), 0); /* kept for the next sleep */
    assert_true(fake_can_access(0, (uintptr_t)p, 30 * MiB) && fake_can_access(1, (uintptr_t)p, 30 * MiB));
    assert_int_equal(fake_peek((uintptr_t)p, back, 30 * MiB), 0);
    assert_memory_equal(back, pat, 30 * MiB);
    assert_int_equal(fake_peek((uintptr_t)q, back, 5 * MiB), 0);
    assert_memory_equal(back, pat + 1, 5 * MiB);
    assert_int_equal(driver_free(), free0);
    assert_int_equal(fake_get("hosts"), 1);
    assert_valid(a);
    hbm_free(a, p);
    hbm_free(a, q);
    hbm_destroy(a);
    hbm_backend_close(b);
    assert_driver_empty();
    assert_int_equal(fake_get("hosts"), 0);
    free(pat);
    free(back);
}

/* The backup file's writes and reads (src/core/sleep_file.c), as the CPU makes them, checked against the fake
 * driver's queued copies: the CPU must not write to the file a pinned buffer that a queued device-to-host copy still
 * fills, nor read the file into one that a queued host-to-device copy still reads (on a GPU the copy runs later: the
 * file would get stale bytes, or the device the next piece's). The fake moves a copy's bytes at once, so the contents
 * alone cannot show it; these definitions take the place of libc's in this program (hbmalloc is linked in). */
static long io_calls, io_early, io_fail_at; /* io_fail_at: the call (1-based) that fails with EIO, 0: none */

static int io_check(uintptr_t p, size_t n)
{
    if (fake_host_queued) {
        io_early += fake_host_queued(p, n);
        if (++io_calls == io_fail_at) {
            errno = EIO;
            return -1;
        }
    }
    return 0;
}

ssize_t pwrite(int fd, const void *p, size_t n, off_t off)
{
    return io_check((uintptr_t)p, n) ? -1 : syscall(SYS_pwrite64, fd, p, n, off);
}

ssize_t pread(int fd, void *p, size_t n, off_t off)
{
    return io_check((uintptr_t)p, n) ? -1 : syscall(SYS_pread64, fd, p, n, off);
}

/* A backup in a file (issue #37 item 4) within the driver's contracts: two pinned buffers of one piece, each piece's
 * copies waited for (its event) before the CPU writes it out, each read in before its copies are queued and only
 * into a buffer whose last copies completed; with a progress callback and without; the contents byte for byte. */
static int progress_calls;
static void count_progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)ctx, (void)done, (void)total;
    progress_calls++;
}

/* A folder made from the template dir for the backup file, and an allocator on the fake driver (a framework thread's
 * context current) with a backup pool tagged "weights". */
static hbm_allocator *file_backed_pool(char *dir, hbm_mempool *mp)
{
    assert_non_null(mkdtemp(dir));
    framework_thread_on(0);
    hbm_allocator *a = open_cuda("");
    assert_int_equal(hbm_mempool_create(a, mp), HBM_OK);
    assert_int_equal(hbm_pool_tag(a, *mp, "weights", 1), HBM_OK);
    return a;
}

static void a_backup_in_a_file_never_touches_a_buffer_under_a_copy(void **st)
{
    (void)st;
    char dir[] = "/tmp/hbm-cuda-bfile-XXXXXX";
    hbm_mempool mp;
    hbm_allocator *a = file_backed_pool(dir, &mp);
    void *p = NULL, *q = NULL;
    assert_int_equal(hbm_mempool_malloc(a, mp, 30 * MiB, 3, &p), HBM_OK);
    assert_int_equal(hbm_mempool_malloc(a, mp, 5 * MiB, 3, &q), HBM_OK);
    unsigned char *pat = malloc(35 * MiB + 1), *back = malloc(30 * MiB);
    for (size_t i = 0; i < 35 * MiB + 1; i++)
        pat[i] = (unsigned char)(i * 13 + (i >> 12));
    for (int with_progress = 0; with_progress < 2; with_progress++) {
        assert_int_equal(fake_poke((uintptr_t)p, pat + with_progress, 30 * MiB), 0);
        assert_int_equal(fake_poke((uintptr_t)q, pat + 30 * MiB, 5 * MiB), 0);
        hbm_sleep_opts o = {.chunk_bytes = 4 * MiB, .backup_dir = dir, .checksum = 1};
        if (with_progress)
            o.progress = count_progress;
        io_calls = io_early = progress_calls = 0;
        fake_set("log", 1);
        assert_int_equal(hbm_pool_sleep(a, mp, &o), HBM_OK);
        assert_no_violation();
        assert_int_equal(log_count(fake_log(), "cuMemHostAlloc"), with_progress ? 0 : 2); /* two pieces, kept */
        assert_int_equal(io_calls, 9);                                                    /* 35 MiB in 4 MiB pieces */
        assert_int_equal(io_early, 0);
        hbm_sleep_opts w = {.progress = o.progress};
        assert_int_equal(hbm_pool_wake(a, mp, &w), HBM_OK);
        assert_no_violation();
        assert_int_equal(io_calls, 18);
        assert_int_equal(io_early, 0);
        assert_int_equal(progress_calls, with_progress ? 18 : 0);
        assert_int_equal(fake_peek((uintptr_t)p, back, 30 * MiB), 0);
        assert_memory_equal(back, pat + with_progress, 30 * MiB);
        assert_int_equal(fake_peek((uintptr_t)q, back, 5 * MiB), 0);
        assert_memory_equal(back, pat + 30 * MiB, 5 * MiB);
    }
    assert_valid(a);
    hbm_free(a, p);
    hbm_free(a, q);
    hbm_destroy(a);
    assert_driver_empty();
    assert_int_equal(rmdir(dir), 0);
    free(pat);
    free(back);
}

static void fill_block(void *p, size_t n, unsigned seed)
{
    unsigned char *pat = malloc(n);
    for (size_t i = 0; i < n; i++)
        pat[i] = (unsigned char)(i * seed + (i >> 13));
    assert_int_equal(fake_poke((uintptr_t)p, pat, n), 0);
    free(pat);
}

static int block_is(void *p, size_t n, unsigned seed)
{
    unsigned char *back = malloc(n);
    int same = fake_peek((uintptr_t)p, back, n) == 0;
    for (size_t i = 0; same && i < n; i++)
        same = back[i] == (unsigned char)(i * seed + (i >> 13));
    free(back);
    return same;
}

static int by_address(const void *x, const void *y)
{
    uintptr_t a = *(const uintptr_t *)x, b = *(const uintptr_t *)y;
    return (a > b) - (a < b);
}

/* Pieces dropped while asleep (found by review): three 4 MiB blocks on three streams, three segments, one piece
 * each; the middle block freed while asleep, so the wake gives its segment back and its piece goes
 * (hbm__sleep_forget): the pieces left, 0 and 2, both use staging buffer 0, and piece 2 must not be read into it
 * while piece 0's copies are queued. Then a file that fails: a write error stops the sleep (the pool awake, its
 * contents in place, the file closed); a read error stops the wake (asleep, nothing lost), and the next wake
 * restores every byte. */
static void a_backup_file_survives_dropped_pieces_and_io_errors(void **st)
{
    (void)st;
    char dir[] = "/tmp/hbm-cuda-bfile-XXXXXX";
    hbm_mempool mp;
    hbm_allocator *a = file_backed_pool(dir, &mp);
    uintptr_t s[3];
    for (int k = 0; k < 3; k++) {
        void *p = NULL;
        assert_int_equal(hbm_mempool_malloc(a, mp, 4 * MiB, (hbm_stream)(uintptr_t)(3 + 2 * k), &p), HBM_OK);
        s[k] = (uintptr_t)p;
    }
    qsort(s, 3, sizeof s[0], by_address);
    for (int k = 0; k < 3; k++)
        fill_block((void *)s[k], 4 * MiB, 11 + 2 * (unsigned)k);
    hbm_sleep_opts o = {.chunk_bytes = 4 * MiB, .backup_dir = dir, .checksum = 1};
    assert_int_equal(hbm_pool_sleep(a, mp, &o), HBM_OK);
    hbm_free(a, (void *)s[1]);
    io_calls = io_early = 0;
    assert_int_equal(hbm_pool_wake(a, mp, NULL), HBM_OK);
    assert_no_violation();
    assert_int_equal(io_calls, 2);
    assert_int_equal(io_early, 0);
    assert_true(block_is((void *)s[0], 4 * MiB, 11));
    assert_true(block_is((void *)s[2], 4 * MiB, 15));

    int fds = dir_entries("/proc/self/fd");
    io_calls = 0, io_fail_at = 2; /* the second piece's write */
    assert_int_equal(hbm_pool_sleep(a, mp, &o), HBM_ERR_BACKEND);
    assert_non_null(strstr(hbm_last_error(a), "the backup to its file stopped after 4.00 MiB of 8.00 MiB (writing "
                                              "the backup file in"));
    assert_no_violation();
    hbm_pool_info f;
    assert_int_equal(hbm_pool_info_get(a, mp, &f), HBM_OK);
    assert_int_equal(f.state, HBM_POOL_AWAKE);
    assert_int_equal(f.file_bytes, 0);
    assert_int_equal(dir_entries("/proc/self/fd"), fds); /* the file closed */
    assert_true(block_is((void *)s[0], 4 * MiB, 11) && block_is((void *)s[2], 4 * MiB, 15));

    io_calls = 0, io_fail_at = 0;
    assert_int_equal(hbm_pool_sleep(a, mp, &o), HBM_OK);
    io_calls = 0, io_fail_at = 2; /* the second piece's read */
    assert_int_equal(hbm_pool_wake(a, mp, NULL), HBM_ERR_BACKEND);
    assert_non_null(strstr(hbm_last_error(a), "pool 'weights' stays asleep: copying its backup back failed (reading "
                                              "the backup file in"));
    assert_no_violation();
    assert_int_equal(hbm_pool_info_get(a, mp, &f), HBM_OK);
    assert_int_equal(f.state, HBM_POOL_ASLEEP);
    assert_int_equal(f.reserved_bytes, 0); /* what it mapped given back */
    assert_int_equal(f.file_bytes, 8 * MiB);
    io_calls = 0, io_fail_at = 0;
    assert_int_equal(hbm_pool_wake(a, mp, NULL), HBM_OK);
    assert_no_violation();
    assert_true(block_is((void *)s[0], 4 * MiB, 11) && block_is((void *)s[2], 4 * MiB, 15));
    assert_int_equal(dir_entries("/proc/self/fd"), fds);
    assert_valid(a);
    hbm_free(a, (void *)s[0]);
    hbm_free(a, (void *)s[2]);
    hbm_destroy(a);
    assert_driver_empty();
    assert_int_equal(rmdir(dir), 0);
}

/* A kernel that touches a sleeping block finds nothing mapped there: on a GPU an illegal address (the context is
 * lost), which the fake records. hbmalloc cannot stop it; it refuses allocations into the pool and says so. */
static void a_kernel_on_a_sleeping_block_finds_nothing_mapped(void **st)
{
    (void)st;
    framework_thread_on(0);
    hbm_allocator *a = open_cuda("");
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    assert_int_equal(hbm_pool_tag(a, mp, "kv_cache", 0), HBM_OK);
    void *p = NULL;
    assert_int_equal(hbm_mempool_malloc(a, mp, 8 * MiB, 0, &p), HBM_OK);
    assert_int_equal(hbm_pool_sleep(a, mp, NULL), HBM_OK);
    assert_no_violation();
    assert_int_equal(fake_launch(NULL, (uintptr_t)p, 8 * MiB), 0);
    char first[512];
    assert_int_equal(fake_violations(first, sizeof first), 1);
    assert_non_null(strstr(first, "not allocated or mapped"));
    fake_progress(1);
    assert_int_equal(hbm_pool_wake(a, mp, NULL), HBM_OK);
    hbm_free(a, p);
    hbm_destroy(a);
}

/* Memory outside hbmalloc by process, through NVML (src/backend/nvml.c, tests/fakes/fake_nvml.c): the device is
 * found by its PCI bus id (the fake's NVML numbering differs from CUDA's), a list longer than the first array is
 * asked again, an entry NVML cannot measure is left out, and this process is told from the others by its PID. */
static void nvml_splits_memory_outside_between_this_process_and_the_others(void **st)
{
    (void)st;
    void *nv = dlopen(HBM_FAKE_NVML, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(nv);
    int (*nvml_set)(unsigned, const unsigned *, const unsigned long long *, unsigned);
    long (*nvml_asks)(void);
    *(void **)&nvml_set = dlsym(nv, "fake_nvml_set");
    *(void **)&nvml_asks = dlsym(nv, "fake_nvml_asks");
    assert_true(nvml_set && nvml_asks);
    unsigned pids[20];
    unsigned long long bytes[20];
    pids[0] = (unsigned)getpid(), bytes[0] = 600ull * MiB;
    pids[1] = 4242, bytes[1] = 1ull * GiB;
    pids[2] = 4343, bytes[2] = ~0ull; /* NVML_VALUE_NOT_AVAILABLE */
    for (int i = 3; i < 20; i++)
        pids[i] = 5000 + (unsigned)i, bytes[i] = 1ull * MiB;
    assert_int_equal(nvml_set(0x5e, pids, bytes, 20), 0); /* CUDA device 0's bus; NVML's device 1 */
    unsigned other = 99;
    unsigned long long other_bytes = 7ull * GiB;
    assert_int_equal(nvml_set(0x3b, &other, &other_bytes, 1), 0); /* NVML's device 0: not ours */
    char with_nvml[800];
    snprintf(with_nvml, sizeof with_nvml, "%s,nvml=%s", spec, HBM_FAKE_NVML);
    hbm_backend *b;
    hbm_allocator *a = open_cuda_on(&b, with_nvml, "");
    void *p = must_malloc(a, 100 * MiB, 0);
    long asks = nvml_asks();
    hbm_outside o;
    assert_int_equal(hbm_outside_get(a, &o), HBM_OK);
    assert_true(nvml_asks() - asks >= 2); /* 16 did not fit 20: asked again */
    assert_int_equal(o.reserved, 100 * MiB);
    assert_int_equal(o.nprocs, 20);
    assert_true(o.self_listed);
    assert_int_equal(o.process_bytes, 600 * MiB);
    assert_int_equal(o.process_outside, 500 * MiB);
    assert_int_equal(o.others, -1); /* one other process NVML cannot measure: their sum is unknown, not smaller */
    assert_int_equal(o.procs[0].pid, 4242);
    char text[512];
    hbm_outside_describe(&o, text, sizeof text);
    assert_non_null(strstr(text, "500.00 MiB by this process"));
    assert_non_null(strstr(text, "; the runtime cannot measure some other process's memory"));
    bytes[2] = 2ull * MiB; /* measured now: the others' sum is exact */
    assert_int_equal(nvml_set(0x5e, pids, bytes, 20), 0);
    assert_int_equal(hbm_outside_get(a, &o), HBM_OK);
    assert_int_equal(o.others, GiB + 19 * MiB);
    /* In a container with its own PID namespace NVML lists the host's PIDs: no split, and the sentence says why. */
    pids[0] = 1; /* this process under its host PID */
    assert_int_equal(nvml_set(0x5e, pids, bytes, 3), 0);
    assert_int_equal(hbm_outside_get(a, &o), HBM_OK);
    assert_int_equal(o.process_bytes, -1);
    assert_int_equal(o.others, -1);
    assert_false(o.self_listed);
    hbm_outside_describe(&o, text, sizeof text);
    assert_non_null(strstr(text, "this process is not among the 3 the runtime lists"));
    hbm_free(a, p);
    hbm_destroy(a);
    hbm_backend_close(b);
    /* nvml=off: no query at all. */
    snprintf(with_nvml, sizeof with_nvml, "%s,nvml=off", spec);
    a = open_cuda_on(&b, with_nvml, "");
    asks = nvml_asks();
    assert_int_equal(hbm_outside_get(a, &o), HBM_OK);
    assert_int_equal(nvml_asks(), asks);
    assert_int_equal(o.process_bytes, -1);
    assert_true(o.outside >= 0);
    hbm_destroy(a);
    hbm_backend_close(b);
    dlclose(nv);
}

/* The published record's refresher measures memory outside hbmalloc from a thread of the library's own (issue #40),
 * which never had the device's context: each call makes the primary context current on it first, as on any thread.
 * The fake's cuMemGetInfo needs a current context, so without it the figures stay unknown (-1). Bounded wait: 10 s. */
static void the_refresher_queries_the_device_from_its_own_thread(void **st)
{
    (void)st;
    char dir[] = "/tmp/hbm-cuda-rec-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("HBMALLOC_TOP_DIR", dir, 1);
    hbm_allocator *a = open_cuda("");
    void *p = must_malloc(a, 30 * MiB, 0);
    assert_int_equal(hbm_publish(a, 1), HBM_OK);
    hbm_record r = record_measured(dir);
    assert_true(r.outside_ns > 0);
    assert_int_equal(r.device_used_bytes, 30 * MiB); /* the fake's used memory: this segment */
    assert_int_equal(r.outside_bytes, 0);
    hbm_free(a, p);
    hbm_destroy(a);
    assert_driver_empty();
    remove_records_dir(dir);
    unsetenv("HBMALLOC_TOP_DIR");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(allocates_through_the_versioned_entry_points, reset),
        cmocka_unit_test_setup(device_memory_is_obtained_in_relaxed_capture_mode, reset),
        cmocka_unit_test_setup(out_of_memory_names_the_cuda_device, reset),
        cmocka_unit_test_setup(nvml_splits_memory_outside_between_this_process_and_the_others, reset),
        cmocka_unit_test_setup(the_refresher_queries_the_device_from_its_own_thread, reset),
        cmocka_unit_test_setup(expandable_segments_use_the_virtual_memory_api, reset),
        cmocka_unit_test_setup(no_virtual_memory_gives_the_reason_and_whole_segments, reset),
        cmocka_unit_test_setup(driver_errors_carry_the_driver_text_and_leak_nothing, reset),
        cmocka_unit_test_setup(cross_stream_frees_wait_for_cuda_events, reset),
        cmocka_unit_test_setup(segments_go_back_only_after_the_device_has_finished_with_them, reset),
        cmocka_unit_test_setup(the_callers_context_is_the_same_after_every_call, reset),
        cmocka_unit_test_setup(expandable_pages_are_accessible_to_their_device_and_the_peers_enabled_for_it, reset),
        cmocka_unit_test_setup(peers_capable_grants_every_device_that_can_reach_the_pages, reset),
        cmocka_unit_test_setup(fresh_threads_get_the_devices_context_retained_once, reset),
        cmocka_unit_test_setup(a_missing_library_is_a_clear_error, reset),
        cmocka_unit_test_setup(each_device_gets_its_own_context_and_allocator, reset),
        cmocka_unit_test_setup(a_pool_sleeps_and_wakes_within_the_drivers_contracts, reset),
        cmocka_unit_test_setup(a_backup_in_a_file_never_touches_a_buffer_under_a_copy, reset),
        cmocka_unit_test_setup(a_backup_file_survives_dropped_pieces_and_io_errors, reset),
        cmocka_unit_test_setup(a_kernel_on_a_sleeping_block_finds_nothing_mapped, reset),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
