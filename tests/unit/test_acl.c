/* test_acl.c: the Ascend backend against tests/fakes/fake_acl.c (CANN 8 and CANN 6 builds), through the same dlopen path. */
#include "helpers.h"

#include <dlfcn.h>
#include <pthread.h>

#include "util/util.h"

typedef struct fake {
    void *lib;
    void (*reset)(void);
    void (*set)(const char *, long);
    void (*set_str)(const char *, const char *);
    void (*outstanding)(long[7]);
    int (*init)(const char *);
    int (*finalize)(void);
    /* Device work and contexts (fake_work.h); the calls a torch_npu thread makes itself. */
    int (*launch)(void *, void *, size_t);
    int (*first_use)(void *, void *, size_t);
    void (*progress)(long);
    long (*violations)(char *, size_t);
    long (*contexts)(int);
    int (*current)(void);
    int (*set_device)(int);
    int (*reset_device)(int);
    /* A sleeping pool: a kernel's bytes, the calls made, pinned host memory, the runtime's free memory. */
    int (*poke)(void *, const void *, size_t);
    int (*peek)(void *, void *, size_t);
    const char *(*log)(void);
    long (*hosts)(void);
    int (*mem_info)(int, size_t *, size_t *);
    char spec[600];
} fake;

static fake NEW, OLD;

static int load(fake *f, const char *path)
{
    f->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!f->lib)
        return -1;
    f->reset = (void (*)(void))dlsym(f->lib, "fake_acl_reset");
    f->set = (void (*)(const char *, long))dlsym(f->lib, "fake_acl_set");
    f->set_str = (void (*)(const char *, const char *))dlsym(f->lib, "fake_acl_set_str");
    f->outstanding = (void (*)(long[7]))dlsym(f->lib, "fake_acl_outstanding");
    f->init = (int (*)(const char *))dlsym(f->lib, "aclInit");
    f->finalize = (int (*)(void))dlsym(f->lib, "aclFinalize");
    *(void **)&f->launch = dlsym(f->lib, "fake_acl_launch");
    *(void **)&f->first_use = dlsym(f->lib, "fake_acl_first_use");
    *(void **)&f->progress = dlsym(f->lib, "fake_acl_progress");
    *(void **)&f->violations = dlsym(f->lib, "fake_acl_violations");
    *(void **)&f->contexts = dlsym(f->lib, "fake_acl_contexts");
    *(void **)&f->current = dlsym(f->lib, "fake_acl_current");
    *(void **)&f->set_device = dlsym(f->lib, "aclrtSetDevice");
    *(void **)&f->reset_device = dlsym(f->lib, "aclrtResetDevice");
    *(void **)&f->poke = dlsym(f->lib, "fake_acl_poke");
    *(void **)&f->peek = dlsym(f->lib, "fake_acl_peek");
    *(void **)&f->log = dlsym(f->lib, "fake_acl_log");
    *(void **)&f->hosts = dlsym(f->lib, "fake_acl_hosts");
    *(void **)&f->mem_info = dlsym(f->lib, "aclrtGetMemInfo");
    snprintf(f->spec, sizeof f->spec, "acl:lib=%s", path);
    return f->reset && f->set && f->set_str && f->outstanding && f->init && f->finalize && f->launch && f->first_use &&
                   f->progress && f->violations && f->contexts && f->current && f->set_device && f->reset_device &&
                   f->poke && f->peek && f->log && f->hosts && f->mem_info
               ? 0
               : -1;
}

static int setup(void **st)
{
    (void)st;
    setenv("HBMALLOC_QUIET", "1", 1);
    unsetenv("PYTORCH_NPU_ALLOC_CONF");
    unsetenv("HBMALLOC_CONF");
    return load(&NEW, HBM_FAKE_ACL) || load(&OLD, HBM_FAKE_ACL_OLD) ? -1 : 0;
}

static int teardown(void **st)
{
    (void)st;
    dlclose(NEW.lib);
    dlclose(OLD.lib);
    return 0;
}

static int reset(void **st)
{
    (void)st;
    NEW.reset();
    OLD.reset();
    return 0;
}

/* The device's work was never broken: nothing freed, unmapped or reused under queued work. */
static void assert_no_violation(const fake *f)
{
    char first[512];
    long n = f->violations(first, sizeof first);
    if (n)
        fail_msg("%ld device-work violations; the first: %s", n, first);
}

/* What a torch_npu thread has done before it allocates (NpuSysCtrl::Initialize, c10_npu::SetDevice): aclInit, and
 * its device set. Returns the references the framework holds, for assert_runtime_empty. */
static long framework_on(const fake *f, int device)
{
    assert_int_equal(f->init(NULL), 0);
    assert_int_equal(f->set_device(device), 0);
    return 1;
}

/* Nothing allocated, reserved, created, mapped or alive; every aclrtSetDevice of hbmalloc's reset, its aclInit
 * reference returned (init_left: the references others hold, and on CANN 6, which has no aclFinalizeReference,
 * hbmalloc's own, kept to the end of the process rather than end the runtime for everyone with aclFinalize). */
static void assert_runtime_empty(const fake *f, long init_left)
{
    assert_no_violation(f);
    long o[7];
    f->outstanding(o);
    if (o[0] || o[1] || o[2] || o[3] || o[4] || o[5] || o[6] != init_left)
        fail_msg("the fake runtime still holds %ld allocations, %ld reservations, %ld handles, %ld mappings, "
                 "%ld events, %ld device references, %ld aclInit references",
                 o[0], o[1], o[2], o[3], o[4], o[5], o[6]);
}

static hbm_allocator *open_acl(const fake *f, const char *settings)
{
    hbm_allocator *a = NULL;
    char err[600];
    if (hbm_open(&a, f->spec, 0, settings, err, sizeof err) != HBM_OK)
        fail_msg("%s", err);
    return a;
}

static void allocates_in_whole_segments_with_the_npu_rules(void **st)
{
    (void)st;
    hbm_allocator *a = open_acl(&NEW, "");
    void *p = must_malloc(a, 5 * MiB, 0);
    memset(p, 0x5a, 5 * MiB); /* aclrtMalloc is host memory in the fake */
    /* torch_npu's 32-byte pad on SoCs before Ascend950: 5 MiB + 32 rounds to 5 MiB + 512. */
    assert_int_equal(hbm_block_size(a, p), 5 * MiB + 512);
    hbm_free(a, p);
    assert_ptr_equal(must_malloc(a, 5 * MiB, 0), p);
    char out[2048];
    hbm_settings_describe(a, out, sizeof out);
    assert_non_null(strstr(out, "acl 0 (AscendCL 1.15.0, driver 24.1.rc3, Ascend910B3; virtual memory: yes)"));
    assert_valid(a);
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 0);
    /* Ascend950 takes no pad. */
    NEW.set_str("soc", "Ascend950PR");
    a = open_acl(&NEW, "");
    p = must_malloc(a, 5 * MiB, 0);
    assert_int_equal(hbm_block_size(a, p), 5 * MiB);
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 0);
}

static void settings_come_from_the_npu_variable(void **st)
{
    (void)st;
    setenv("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:64", 1);
    setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512", 1);
    hbm_allocator *a = open_acl(&NEW, NULL);
    assert_int_equal(stats_of(a).max_split_size, 64 * MiB);
    hbm_destroy(a);
    /* A CUDA-only key is refused in the NPU dialect, with the key named. */
    char err[600];
    assert_int_equal(hbm_open(&a, NEW.spec, 0, "pinned_use_cuda_host_register:True", err, sizeof err), HBM_ERR_CONF);
    assert_non_null(strstr(err, "pinned_use_cuda_host_register"));
    unsetenv("PYTORCH_NPU_ALLOC_CONF");
    unsetenv("PYTORCH_CUDA_ALLOC_CONF");
    assert_runtime_empty(&NEW, 0);
}

static void out_of_memory_names_the_npu(void **st)
{
    (void)st;
    NEW.set("memory", 256L << 20);
    hbm_allocator *a = open_acl(&NEW, "");
    void *p;
    assert_int_equal(hbm_malloc(a, 300 * MiB, 0, &p), HBM_ERR_OOM); /* 207001 is out of memory, not an error */
    assert_non_null(strstr(hbm_last_error(a), "out of memory on acl device 0"));
    assert_non_null(strstr(hbm_last_error(a), "total capacity of 256.00 MiB"));
    must_malloc(a, 100 * MiB, 0);
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 0);
}

static void expandable_segments_map_one_handle_per_page(void **st)
{
    (void)st;
    hbm_allocator *a = open_acl(&NEW, "expandable_segments:True");
    assert_string_equal(hbm_warning(a), "");
    assert_true(stats_of(a).expandable_segments);
    void *p = must_malloc(a, 30 * MiB, 0);
    void *s = must_malloc(a, 4096, 0);
    assert_int_equal(stats_of(a).num_expandable_segments, 2);
    long o[7];
    NEW.outstanding(o);
    assert_int_equal(o[1], 2); /* one reservation per pool */
    assert_int_equal(o[2], 3); /* two 20 MiB handles + one 2 MiB */
    assert_int_equal(o[3], 3); /* mapped one by one; the fake refuses partial or unaligned maps */
    hbm_free(a, p);
    hbm_free(a, s);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    NEW.outstanding(o);
    assert_int_equal(o[2] + o[3], 0); /* unmapped by start address, handles freed */
    assert_valid(a);
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 0);
}

/* The field report: driver/firmware mismatch, the probe answers 207000. */
static void a_failed_probe_falls_back_and_says_why(void **st)
{
    (void)st;
    NEW.set("vmm", 0);
    NEW.set_str("driver", "24.1.rc2");
    hbm_allocator *a = open_acl(&NEW, "expandable_segments:True");
    const char *w = hbm_warning(a);
    assert_non_null(strstr(w, "not supported by the acl backend on device 0"));
    assert_non_null(strstr(w, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT (207000)"));
    assert_non_null(strstr(w, "driver (HDK 24.1.rc2) and firmware packages likely do not match"));
    assert_non_null(strstr(w, "Using expandable_segments:False"));
    assert_null(strstr(w, "supportted"));
    assert_false(stats_of(a).expandable_segments);
    must_malloc(a, 30 * MiB, 0);
    assert_int_equal(stats_of(a).segment[HBM_POOL_ALL].current, 1);
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 0);
    /* An HDK older than 23.0.0 is named as the cause. */
    NEW.reset();
    NEW.set("vmm", 0);
    NEW.set_str("driver", "22.0.3");
    a = open_acl(&NEW, "expandable_segments:True");
    assert_non_null(strstr(hbm_warning(a), "the Ascend driver (HDK 22.0.3) is older than 23.0.0"));
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 0);
}

/* CANN 6: no virtual-memory functions, the deprecated event query (inverted status), aclInit once per process, no
 * aclFinalizeReference. Work queued on stream 2 keeps a block from stream 1 until its event completes. */
static void an_old_cann_runtime_works_without_virtual_memory(void **st)
{
    (void)st;
    hbm_allocator *a = open_acl(&OLD, "expandable_segments:True");
    assert_non_null(strstr(hbm_warning(a), "lacks aclrtReserveMemAddress"));
    assert_non_null(strstr(hbm_warning(a), "CANN 7.0.0"));
    void *p = must_malloc(a, 4096, 1);
    assert_int_equal(OLD.current(), 0); /* the thread had no device: it keeps the one hbmalloc set */
    assert_int_equal(OLD.first_use((void *)1, p, 4096), 0);
    assert_int_equal(hbm_record_stream(a, p, 2), HBM_OK);
    assert_int_equal(OLD.launch((void *)2, p, 4096), 0); /* stream 2 still reads it */
    hbm_free(a, p);
    void *q = must_malloc(a, 4096, 1);
    assert_ptr_not_equal(q, p); /* aclrtQueryEvent says NOT_READY (1): the block waits */
    assert_int_equal(OLD.first_use((void *)1, q, 4096), 0);
    hbm_free(a, q);
    assert_int_equal(hbm_empty_cache(a), HBM_OK); /* synchronizes the event, then the device */
    assert_int_equal(stats_of(a).num_sync_all_streams, 1);
    p = must_malloc(a, 4096, 1);
    assert_int_equal(OLD.first_use((void *)1, p, 4096), 0);
    assert_int_equal(hbm_record_stream(a, p, 2), HBM_OK);
    OLD.progress(10); /* everything done before the free: the event completes at once */
    hbm_free(a, p);
    assert_ptr_equal(must_malloc(a, 4096, 1), p); /* COMPLETE (0): reused at once */
    assert_valid(a);
    hbm_destroy(a);
    assert_runtime_empty(&OLD, 1); /* hbmalloc's aclInit: CANN 6 cannot drop one reference, and aclFinalize would end
                                      the runtime for every user */
    /* Inside torch_npu the runtime is initialised already: 100002 is accepted, and aclFinalize is left to its owner. */
    OLD.reset();
    assert_int_equal(OLD.init(NULL), 0);
    a = open_acl(&OLD, "");
    must_malloc(a, MiB, 0);
    hbm_destroy(a);
    assert_runtime_empty(&OLD, 1);
    assert_int_equal(OLD.finalize(), 0);
}

/* The field report's device: CANN 6 (no virtual memory). hbm_arena runs on the AscendCL backend as on the sim: one
 * aclrtMalloc for the arena, every size of its stream inside it, and nothing left in the runtime after destroy. */
static void the_arena_runs_on_a_runtime_without_virtual_memory(void **st)
{
    (void)st;
    hbm_allocator *a = open_acl(&OLD, "hbm_arena_mb:256");
    void *p = must_malloc(a, 4096, 0), *q = must_malloc(a, 30 * MiB, 0), *r = must_malloc(a, 700 * 1024, 0);
    long o[7];
    OLD.outstanding(o);
    assert_int_equal(o[0], 1); /* one device allocation: the arena */
    assert_int_equal(stats_of(a).arena_bytes, 256 * MiB);
    assert_int_equal((char *)q - (char *)p, 4608); /* back to back: 4096 + torch_npu's 32-byte pad, to 512 */
    hbm_free(a, q);
    hbm_free(a, p);
    hbm_free(a, r);
    assert_valid(a);
    assert_int_equal(hbm_destroy(a), HBM_OK);
    assert_runtime_empty(&OLD, 1);
}

/* The step plan on the same runtime: after two steps the step's allocations come from one more aclrtMalloc (the
 * region) at their planned offsets; nothing left after destroy. */
static void the_step_plan_runs_on_a_runtime_without_virtual_memory(void **st)
{
    (void)st;
    hbm_allocator *a = open_acl(&OLD, "hbm_step_plan:True");
    void *weights = must_malloc(a, 40 * MiB, 0);
    for (int step = 0; step < 5; step++) {
        void *act[4];
        for (int i = 0; i < 4; i++)
            act[i] = must_malloc(a, (size_t)(i + 1) * 3 * MiB, 0);
        for (int i = 4; i-- > 0;)
            hbm_free(a, act[i]);
        assert_int_equal(hbm_step(a), HBM_OK);
        assert_valid(a);
    }
    hbm_stats s = stats_of(a);
    assert_int_equal(s.plan_hits, 3 * 4); /* steps 2-4, every activation */
    assert_int_equal(s.plan_misses, 0);
    assert_true(s.arena_bytes >= s.plan_height && s.plan_height >= (int64_t)(10 * 3 * MiB));
    hbm_free(a, weights);
    assert_int_equal(hbm_destroy(a), HBM_OK);
    assert_runtime_empty(&OLD, 1);
}

static void runtime_errors_carry_the_acl_name_and_message_and_leak_nothing(void **st)
{
    (void)st;
    int total_errors = 0;
    for (int expandable = 0; expandable < 2; expandable++)
        for (long k = 1; k <= 45; k++) {
            NEW.reset();
            hbm_allocator *a = open_acl(&NEW, expandable ? "expandable_segments:True" : "");
            NEW.set("fail_nth", k);
            void *live[6] = {0};
            int errors = fault_workload(a, "ACL_ERROR_RT_DRV_INTERNAL_ERROR (507899): EE9999: injected failure", live);
            NEW.set("fail_nth", 0);
            for (int i = 0; i < 6; i++)
                if (live[i])
                    assert_int_equal(hbm_free(a, live[i]), HBM_OK);
            hbm_destroy(a);
            assert_runtime_empty(&NEW, 0);
            total_errors += errors;
        }
    assert_true(total_errors > 20);
}

/* A physical allocation that runs out part-way (207001) rolls back: OOM, nothing left mapped. */
static void out_of_memory_while_growing_rolls_back(void **st)
{
    (void)st;
    NEW.set("memory", 64L << 20);
    hbm_allocator *a = open_acl(&NEW, "expandable_segments:True");
    void *p = must_malloc(a, 30 * MiB, 0);
    void *q;
    assert_int_equal(hbm_malloc(a, 50 * MiB, 0, &q), HBM_ERR_OOM);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 40 * MiB);
    assert_valid(a);
    hbm_free(a, p);
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 0);
}

static void *other_thread(void *arg)
{
    hbm_allocator *a = arg;
    void *p = NULL;
    if (hbm_malloc(a, 3 * MiB, 0, &p) != HBM_OK || hbm_free(a, p) != HBM_OK)
        return NULL;
    return p;
}

/* A thread that never called aclrtSetDevice still allocates: the backend makes the device current. */
static void a_fresh_thread_gets_the_device_set(void **st)
{
    (void)st;
    NEW.set("devices", 2);
    hbm_allocator *a = NULL;
    char err[600];
    assert_int_equal(hbm_open(&a, NEW.spec, 1, "", err, sizeof err), HBM_OK);
    pthread_t t;
    void *r = NULL;
    assert_int_equal(pthread_create(&t, NULL, other_thread, a), 0);
    pthread_join(t, &r);
    assert_non_null(r);
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 0);
}

/* aclrtFree does no implicit device or stream synchronization (CANN aclrtFree page): a kernel still running on a
 * block its owner freed must be waited for before the segment goes back, at empty_cache, at the OOM retry and at
 * destroy; pages of an expandable segment are unmapped after the device has finished (torch_npu's unmapHandles). */
static void segments_go_back_only_after_the_device_has_finished_with_them(void **st)
{
    (void)st;
    long fw = framework_on(&NEW, 0);
    NEW.set("memory", 64L << 20);
    hbm_allocator *a = open_acl(&NEW, "");
    void *p = must_malloc(a, 30 * MiB, 0);
    assert_int_equal(NEW.first_use(NULL, p, 30 * MiB), 0); /* a kernel on the default stream */
    hbm_free(a, p);                                        /* freed while it runs, as torch_npu does */
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_no_violation(&NEW);
    p = must_malloc(a, 30 * MiB, 0);
    assert_int_equal(NEW.first_use(NULL, p, 30 * MiB), 0);
    hbm_free(a, p);
    void *big = must_malloc(a, 50 * MiB, 0); /* the cached segment is freed before the retry */
    assert_int_equal(stats_of(a).num_alloc_retries, 1);
    assert_no_violation(&NEW);
    assert_int_equal(NEW.first_use(NULL, big, 50 * MiB), 0);
    hbm_destroy(a); /* live blocks go back too */
    assert_int_equal(NEW.reset_device(0), 0);
    assert_runtime_empty(&NEW, fw);
    NEW.reset();
    fw = framework_on(&NEW, 0);
    a = open_acl(&NEW, "expandable_segments:True");
    p = must_malloc(a, 30 * MiB, 5);
    assert_int_equal(NEW.first_use((void *)5, p, 30 * MiB), 0);
    hbm_free(a, p);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_no_violation(&NEW);
    p = must_malloc(a, 30 * MiB, 5);
    assert_int_equal(NEW.first_use((void *)5, p, 30 * MiB), 0);
    hbm_destroy(a);
    assert_int_equal(NEW.reset_device(0), 0);
    assert_runtime_empty(&NEW, fw);
}

/* A rank serving card 3: opening the backend sets no device, virtual memory is probed on card 3 alone, and after
 * every call the thread is still on card 3 (torch_npu caches its device per thread and would run its next work on
 * whatever card was left current). A thread on card 1 using card 0's allocator stays on card 1. */
static void the_callers_device_is_the_same_after_every_call(void **st)
{
    (void)st;
    NEW.set("devices", 4);
    long fw = framework_on(&NEW, 3);
    hbm_devices *d;
    char err[600];
    assert_int_equal(hbm_devices_open(&d, NEW.spec, "expandable_segments:True", err, sizeof err), HBM_OK);
    assert_int_equal(NEW.current(), 3);
    void *p;
    assert_int_equal(hbm_devices_malloc(d, 3, 30 * MiB, 0, &p), HBM_OK);
    assert_true(stats_of(hbm_devices_get(d, 3)).expandable_segments);
    assert_int_equal(NEW.current(), 3);
    assert_int_equal(hbm_record_stream(hbm_devices_get(d, 3), p, 9), HBM_OK);
    assert_int_equal(hbm_devices_free(d, 3, p), HBM_OK);
    assert_int_equal(NEW.current(), 3);
    assert_int_equal(hbm_empty_cache(hbm_devices_get(d, 3)), HBM_OK);
    assert_int_equal(NEW.current(), 3);
    for (int dev = 0; dev < 3; dev++)
        assert_int_equal(NEW.contexts(dev), 0);
    /* Another thread of the framework, on card 1, uses card 0's allocator. */
    assert_int_equal(NEW.set_device(1), 0);
    assert_int_equal(hbm_devices_malloc(d, 0, MiB, 0, &p), HBM_OK);
    assert_int_equal(NEW.current(), 1);
    assert_int_equal(hbm_devices_free(d, 0, p), HBM_OK);
    assert_int_equal(hbm_empty_cache(hbm_devices_get(d, 0)), HBM_OK);
    assert_int_equal(NEW.current(), 1);
    hbm_devices_close(d);
    assert_int_equal(NEW.reset_device(1), 0);
    assert_int_equal(NEW.reset_device(3), 0);
    assert_runtime_empty(&NEW, fw);
}

/* Segments as torch_npu makes them: aclrtMallocAlign32, which takes exactly the size asked; aclrtMalloc would align
 * it to 32 bytes and add 32 more (the runtime's memory.cpp), on every segment. */
static void segments_take_no_runtime_padding(void **st)
{
    (void)st;
    hbm_allocator *a = open_acl(&NEW, "");
    must_malloc(a, 5 * MiB, 0);
    must_malloc(a, 30 * MiB, 0);
    size_t free_b = 0, total = 0;
    hbm_device_counters c;
    hbm_get_device_counters(a, &c);
    int (*meminfo)(int, size_t *, size_t *) = (int (*)(int, size_t *, size_t *))dlsym(NEW.lib, "aclrtGetMemInfo");
    assert_int_equal(meminfo(1, &free_b, &total), 0);
    assert_int_equal(total - free_b, stats_of(a).reserved_bytes[HBM_POOL_ALL].current);
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 0);
}

/* aclInit takes a reference each time (100002 after the first, CANN 8.5+); aclFinalize would end the runtime for
 * every user. hbmalloc gives back its own reference and no more, whoever initialised first. */
static void the_runtime_stays_initialised_for_its_other_users(void **st)
{
    (void)st;
    assert_int_equal(NEW.init(NULL), 0); /* torch_npu first */
    hbm_allocator *a = open_acl(&NEW, "");
    must_malloc(a, MiB, 0);
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 1); /* torch_npu's reference */
    NEW.reset();
    a = open_acl(&NEW, ""); /* hbmalloc first (hbmalloc doctor, a C program), then torch_npu */
    assert_int_equal(NEW.init(NULL), 100002);
    must_malloc(a, MiB, 0);
    hbm_destroy(a);
    assert_runtime_empty(&NEW, 1); /* torch_npu's runtime is still up */
}

static void a_missing_library_is_a_clear_error(void **st)
{
    (void)st;
    hbm_allocator *a;
    char err[600];
    assert_int_equal(hbm_open(&a, "acl:lib=/nonexistent/libascendcl.so", 0, "", err, sizeof err), HBM_ERR_BACKEND);
    assert_non_null(strstr(err, "cannot load /nonexistent/libascendcl.so"));
    assert_int_equal(hbm_open(&a, "npu:bogus=1", 0, "", err, sizeof err), HBM_ERR_INVALID);
    assert_non_null(strstr(err, "acl: unknown option"));
    NEW.set("devices", 0);
    assert_int_equal(hbm_open(&a, NEW.spec, 0, "", err, sizeof err), HBM_ERR_BACKEND);
    assert_non_null(strstr(err, "reports no NPU"));
    assert_runtime_empty(&NEW, 0);
}

/* A pool's sleep and wake as AscendCL sees them (docs/SLEEP.md, docs/CONTRACTS.md): aclrtSynchronizeDevice first (as
 * torch_npu before it unmaps: a kernel on another stream still reads the block), the backup copied with
 * aclrtMemcpyAsync (DEVICE_TO_HOST) on the pool's stream and aclrtSynchronizeStream'd, then aclrtUnmapMem and
 * aclrtFreePhysical page by page; the wake aclrtMallocPhysical and aclrtMapMem (no access step on Ascend), then the
 * copies back (HOST_TO_DEVICE), waited for. The fake records any unmap, copy or host free under queued work. */
static void a_pool_sleeps_and_wakes_within_the_runtimes_contracts(void **st)
{
    (void)st;
    long fw = framework_on(&NEW, 0);
    hbm_allocator *a = open_acl(&NEW, "");
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    assert_int_equal(hbm_pool_tag(a, mp, "weights", 1), HBM_OK);
    void *p = NULL;
    assert_int_equal(hbm_mempool_malloc(a, mp, 30 * MiB, 5, &p), HBM_OK);
    unsigned char *pat = malloc(30 * MiB), *back = malloc(30 * MiB);
    for (size_t i = 0; i < 30 * MiB; i++)
        pat[i] = (unsigned char)(i * 13 + (i >> 16));
    assert_int_equal(NEW.poke(p, pat, 30 * MiB), 0);
    assert_int_equal(NEW.first_use((void *)5, p, 30 * MiB), 0);
    assert_int_equal(NEW.launch((void *)6, p, 30 * MiB), 0); /* another stream, never recorded */
    size_t free0, total;
    assert_int_equal(NEW.mem_info(1, &free0, &total), 0);
    NEW.set("log", 1);
    assert_int_equal(hbm_pool_sleep(a, mp, NULL), HBM_OK);
    assert_no_violation(&NEW);
    const char *log = NEW.log();
    assert_true(log_at(log, "aclrtSynchronizeDevice", 0) >= 0);
    assert_true(log_at(log, "aclrtSynchronizeDevice", 0) < log_at(log, "aclrtMemcpyAsync", 0));
    assert_true(log_at(log, "aclrtMemcpyAsync", 1) < log_at(log, "aclrtSynchronizeStream", 0));
    assert_true(log_at(log, "aclrtSynchronizeStream", 0) < log_at(log, "aclrtUnmapMem", 0));
    assert_int_equal(log_count(log, "aclrtUnmapMem"), 2);
    assert_int_equal(log_count(log, "aclrtFreePhysical"), 2);
    size_t free1;
    assert_int_equal(NEW.mem_info(1, &free1, &total), 0);
    assert_int_equal(free1, free0 + 40 * MiB); /* npu-smi and the other phase see the pages back */
    assert_int_equal(NEW.peek(p, back, 4096), -1);
    NEW.set("log", 1);
    assert_int_equal(hbm_pool_wake(a, mp, NULL), HBM_OK);
    assert_no_violation(&NEW);
    log = NEW.log();
    assert_int_equal(log_count(log, "aclrtMallocPhysical"), 2);
    assert_int_equal(log_count(log, "aclrtMapMem"), 2);
    assert_true(log_at(log, "aclrtMapMem", 1) < log_at(log, "aclrtMemcpyAsync", 0));
    assert_true(log_at(log, "aclrtMemcpyAsync", 1) < log_at(log, "aclrtSynchronizeStream", 1));
    assert_int_equal(NEW.peek(p, back, 30 * MiB), 0);
    assert_memory_equal(back, pat, 30 * MiB);
    assert_valid(a);
    hbm_free(a, p);
    hbm_destroy(a);
    assert_int_equal(NEW.hosts(), 0);
    assert_int_equal(NEW.reset_device(0), 0);
    assert_runtime_empty(&NEW, fw);
    free(pat);
    free(back);
}

/* CANN 6 has no virtual memory: a pool cannot sleep there, and the refusal says why and what to install. */
static void a_runtime_without_virtual_memory_refuses_to_let_a_pool_sleep(void **st)
{
    (void)st;
    hbm_allocator *a = open_acl(&OLD, "");
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    assert_int_equal(hbm_pool_tag(a, mp, "weights", 1), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "cannot sleep"));
    assert_non_null(strstr(hbm_last_error(a), "HDK"));
    hbm_destroy(a);
}

/* Memory outside hbmalloc by process on an NPU, through DCMI (src/backend/dcmi.c, tests/fakes/fake_dcmi.c): the NPU is
 * found by its logical id — the runtime's aclrtGetLogicDevIdByUserDevId on CANN 8, ASCEND_RT_VISIBLE_DEVICES read as
 * the runtime reads it on CANN 6 — and the logical id by DCMI's (card, chip); this process is told from the others by
 * its PID; a refusal leaves the split unknown; dcmi=off asks nothing. */
static void dcmi_splits_memory_outside_between_this_process_and_the_others(void **st)
{
    (void)st;
    void *dc = dlopen(HBM_FAKE_DCMI, RTLD_NOW | RTLD_LOCAL);
    assert_non_null(dc);
    int (*dcmi_set)(int, const int *, const unsigned long *, int);
    long (*dcmi_asks)(void);
    *(void **)&dcmi_set = dlsym(dc, "fake_dcmi_set");
    *(void **)&dcmi_asks = dlsym(dc, "fake_dcmi_asks");
    assert_true(dcmi_set && dcmi_asks);
    int pids[2] = {(int)getpid(), 5151}, wrong = 9999;
    unsigned long bytes[2] = {700ul * MiB, 2ul * GiB}, wrong_bytes = 5ul * GiB;
    assert_int_equal(dcmi_set(3, pids, bytes, 2), 0);          /* logical id 3: card 1, chip 1 */
    assert_int_equal(dcmi_set(0, &wrong, &wrong_bytes, 1), 0); /* the user's device 0 is not logical 0 */
    setenv("ASCEND_RT_VISIBLE_DEVICES", "3", 1);
    for (int old = 0; old < 2; old++) { /* CANN 8 asks the runtime, CANN 6 reads the variable */
        fake *f = old ? &OLD : &NEW;
        f->reset();
        char spec[800];
        snprintf(spec, sizeof spec, "%s,dcmi=%s", f->spec, HBM_FAKE_DCMI);
        hbm_allocator *a = NULL;
        char err[600];
        if (hbm_open(&a, spec, 0, "", err, sizeof err) != HBM_OK)
            fail_msg("%s", err);
        void *p = must_malloc(a, 100 * MiB, 0);
        hbm_outside o;
        assert_int_equal(hbm_outside_get(a, &o), HBM_OK);
        assert_int_equal(o.nprocs, 2);
        assert_true(o.self_listed);
        assert_int_equal(o.process_bytes, 700 * MiB);
        assert_true(o.reserved >= (int64_t)(100 * MiB)); /* the NPU's segment: the request padded and rounded */
        assert_int_equal(o.process_outside, (int64_t)(700 * MiB) - o.reserved);
        assert_int_equal(o.others, 2 * GiB);
        char text[512];
        hbm_outside_describe(&o, text, sizeof text);
        char mine[64];
        hbm__format_size((uint64_t)o.process_outside, mine, sizeof mine);
        assert_non_null(strstr(text, mine));
        assert_non_null(strstr(text, " by this process"));
        assert_non_null(strstr(text, "2.00 GiB by other processes (process 5151 2.00 GiB)"));
        hbm_free(a, p);
        hbm_destroy(a);
    }
    /* Refused (some products and users): the split is unknown, and said so. */
    assert_int_equal(dcmi_set(3, NULL, NULL, -1), 0);
    hbm_allocator *a = NULL;
    char spec[800], err[600];
    snprintf(spec, sizeof spec, "%s,dcmi=%s", NEW.spec, HBM_FAKE_DCMI);
    NEW.reset();
    assert_int_equal(hbm_open(&a, spec, 0, "", err, sizeof err), HBM_OK);
    hbm_outside o;
    assert_int_equal(hbm_outside_get(a, &o), HBM_OK);
    assert_int_equal(o.process_outside, -1);
    assert_int_equal(o.others, -1);
    hbm_destroy(a);
    /* dcmi=off: not asked. */
    snprintf(spec, sizeof spec, "%s,dcmi=off", NEW.spec);
    NEW.reset();
    assert_int_equal(hbm_open(&a, spec, 0, "", err, sizeof err), HBM_OK);
    long asks = dcmi_asks();
    assert_int_equal(hbm_outside_get(a, &o), HBM_OK);
    assert_int_equal(dcmi_asks(), asks);
    assert_int_equal(o.process_bytes, -1);
    hbm_destroy(a);
    assert_int_equal(hbm_open(&a, "acl:lib=/x,pool=1", 0, "", err, sizeof err), HBM_ERR_INVALID);
    assert_non_null(strstr(err, "unknown option 'pool=1' (known: lib=PATH, dcmi=PATH|off)"));
    unsetenv("ASCEND_RT_VISIBLE_DEVICES");
    dlclose(dc);
}

/* The published record's refresher measures memory outside hbmalloc from a thread of the library's own (issue #40):
 * AscendCL's current context is per thread, and the fake's aclrtGetMemInfo needs a device set on the calling thread,
 * so without the backend making the device's context current there the figures stay unknown (-1). Bounded wait: 10 s. */
static void the_refresher_queries_the_npu_from_its_own_thread(void **st)
{
    (void)st;
    char dir[] = "/tmp/hbm-acl-rec-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("HBMALLOC_TOP_DIR", dir, 1);
    hbm_allocator *a = open_acl(&NEW, "");
    void *p = must_malloc(a, 30 * MiB, 0);
    assert_int_equal(hbm_publish(a, 1), HBM_OK);
    hbm_record r = record_measured(dir);
    assert_true(r.outside_ns > 0);
    assert_true(r.device_used_bytes >= r.reserved_bytes && r.reserved_bytes >= (int64_t)(30 * MiB));
    assert_int_equal(r.outside_bytes, r.device_used_bytes - r.reserved_bytes);
    hbm_free(a, p);
    hbm_destroy(a);
    remove_records_dir(dir);
    unsetenv("HBMALLOC_TOP_DIR");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(allocates_in_whole_segments_with_the_npu_rules, reset),
        cmocka_unit_test_setup(settings_come_from_the_npu_variable, reset),
        cmocka_unit_test_setup(out_of_memory_names_the_npu, reset),
        cmocka_unit_test_setup(dcmi_splits_memory_outside_between_this_process_and_the_others, reset),
        cmocka_unit_test_setup(the_refresher_queries_the_npu_from_its_own_thread, reset),
        cmocka_unit_test_setup(expandable_segments_map_one_handle_per_page, reset),
        cmocka_unit_test_setup(a_failed_probe_falls_back_and_says_why, reset),
        cmocka_unit_test_setup(an_old_cann_runtime_works_without_virtual_memory, reset),
        cmocka_unit_test_setup(the_arena_runs_on_a_runtime_without_virtual_memory, reset),
        cmocka_unit_test_setup(the_step_plan_runs_on_a_runtime_without_virtual_memory, reset),
        cmocka_unit_test_setup(runtime_errors_carry_the_acl_name_and_message_and_leak_nothing, reset),
        cmocka_unit_test_setup(out_of_memory_while_growing_rolls_back, reset),
        cmocka_unit_test_setup(a_fresh_thread_gets_the_device_set, reset),
        cmocka_unit_test_setup(segments_go_back_only_after_the_device_has_finished_with_them, reset),
        cmocka_unit_test_setup(the_callers_device_is_the_same_after_every_call, reset),
        cmocka_unit_test_setup(segments_take_no_runtime_padding, reset),
        cmocka_unit_test_setup(the_runtime_stays_initialised_for_its_other_users, reset),
        cmocka_unit_test_setup(a_missing_library_is_a_clear_error, reset),
        cmocka_unit_test_setup(a_pool_sleeps_and_wakes_within_the_runtimes_contracts, reset),
        cmocka_unit_test_setup(a_runtime_without_virtual_memory_refuses_to_let_a_pool_sleep, reset),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
