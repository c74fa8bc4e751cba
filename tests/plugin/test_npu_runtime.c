/*
 * test_npu_runtime.c: the torch_npu plug-in inside a stand-in torch_npu: the
 * fake AscendCL runtime (device work that completes later, per-thread
 * contexts) under the fake libtorch_npu.so (its task queue, its worker
 * thread, npuSynchronizeDevice), called as torch_npu calls a pluggable
 * allocator: the framework's thread has its device set, operators' launches
 * wait in the queue, frees come while they do. After every hook the thread
 * must still be on its device, and the runtime must have seen no device
 * use-after-free, no early reuse and no deadlock.
 *
 * usage: test_npu_runtime FAKE_TORCH_NPU PLUGIN MODE, MODE one of
 *   queue     the task queue on (TASK_QUEUE_ENABLE unset: torch_npu's default)
 *   noqueue   TASK_QUEUE_ENABLE=0: launches go to the device at once; no drain is needed or made
 *   noentry   a libtorch_npu.so without npuSynchronizeDevice: the plug-in says so, once
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "hbmalloc.h" /* hbm_device_counters, read through the plug-in */

#define MiB ((size_t)1 << 20)
#define DEV 1 /* the rank's card; card 0 must see nothing of this process */

static const char *mode;
static FILE *said; /* the plug-in's stderr while it opens */
static void *tnpu, *plugin, *acl;

/* the framework's runtime calls and the fakes' test entries */
static int (*acl_init)(const char *);
static int (*acl_set_device)(int);
static long (*violations)(char *, size_t);
static long (*contexts)(int);
static int (*current)(void);
static int (*first_use)(void *, void *, size_t);
static void (*progress)(long);
static void (*launch)(void *, void *, size_t);
static long (*queued)(void);
static long (*drains)(void);
static long (*deadlocks)(void);
static void (*tnpu_set)(const char *, long);
static void (*consumer_work)(void (*)(void *), void *);
static void (*launch_releasing)(void *, void *, size_t, void (*)(void *), void *);
static int (*run_consumer)(void);
static int (*release_idle)(void);
static long (*records)(void);
static long (*device_syncs)(void);
/* the plug-in's hooks, as torch_npu calls them */
static void *(*raw_alloc)(size_t, int, void *);
static void (*hook_free)(void *, size_t, int, void *);
static void (*hook_reset)(int);
static void (*hook_init)(int);
static int (*record_stream)(void *, int, void *);
static int (*record_stream_npu)(void *, int, long long, int, int);
static int (*device_counters)(int, hbm_device_counters *);
static int (*empty_cache)(void);
static const char *(*plugin_error)(void);
static int (*pool_slot)(const char *, int);
static int (*pool_sleep)(const char *, size_t, void *, void *);
static int (*pool_wake)(const char *, int, void *, void *);
static void (*pool_free)(void *, size_t, int, void *);

#define LOAD(lib, var, name)                                                  \
    do {                                                                      \
        *(void **)&(var) = dlsym((lib), (name));                              \
        if (!(var)) {                                                         \
            fprintf(stderr, "test_npu_runtime: %s lacks %s\n", #lib, (name)); \
            return -1;                                                        \
        }                                                                     \
    } while (0)

static long violations_seen; /* each test fails on its own violations only */

static void assert_clean(void)
{
    char first[512];
    long n = violations(first, sizeof first);
    if (n > violations_seen) {
        violations_seen = n;
        fail_msg("%ld device-work violations; the first of this process: %s", n, first);
    }
    if (deadlocks())
        fail_msg("%ld drains of the task queue did not finish: hbmalloc held its lock while torch_npu's worker "
                 "needed it",
                 deadlocks());
    if (current() != DEV)
        fail_msg("the framework's thread is on card %d after the call, not on its card %d", current(), DEV);
    if (contexts(0))
        fail_msg("a context was made on card 0, which this rank does not use");
    hbm_device_counters c;
    if (device_counters(DEV, &c) == 0 && c.locked_queue_waits)
        fail_msg("%llu waits for torch_npu's queue would have held hbmalloc's lock (docs/CONTRACTS.md, \"Waiting "
                 "with the lock open\")",
                 (unsigned long long)c.locked_queue_waits);
}

static void *must_alloc(size_t size, void *stream)
{
    void *p = raw_alloc(size, DEV, stream);
    if (!p)
        fail_msg("alloc(%zu) failed: %s", size, plugin_error());
    assert_clean();
    return p;
}

static void hook_free_checked(void *p)
{
    hook_free(p, 0, DEV, NULL);
    assert_clean();
}

static int setup(void **st)
{
    (void)st;
    char *path = getenv("FAKE_TORCH_NPU");
    tnpu = dlopen(path, RTLD_NOW | RTLD_LOCAL); /* as torch_npu/_C.so brings libtorch_npu.so in */
    if (!tnpu) {
        fprintf(stderr, "test_npu_runtime: %s\n", dlerror());
        return -1;
    }
    acl = dlopen(getenv("HBMALLOC_LIBASCENDCL"), RTLD_NOW | RTLD_NOLOAD);
    if (!acl)
        return -1;
    LOAD(acl, acl_init, "aclInit");
    LOAD(acl, acl_set_device, "aclrtSetDevice");
    LOAD(acl, violations, "fake_acl_violations");
    LOAD(acl, contexts, "fake_acl_contexts");
    LOAD(acl, current, "fake_acl_current");
    LOAD(acl, first_use, "fake_acl_first_use");
    LOAD(acl, progress, "fake_acl_progress");
    LOAD(tnpu, launch, "fake_tnpu_launch");
    LOAD(tnpu, queued, "fake_tnpu_queued");
    LOAD(tnpu, drains, "fake_tnpu_drains");
    LOAD(tnpu, deadlocks, "fake_tnpu_deadlocks");
    LOAD(tnpu, tnpu_set, "fake_tnpu_set");
    LOAD(tnpu, consumer_work, "fake_tnpu_set_consumer_work");
    LOAD(tnpu, launch_releasing, "fake_tnpu_launch_releasing");
    LOAD(tnpu, run_consumer, "fake_tnpu_run_consumer");
    LOAD(tnpu, release_idle, "fake_tnpu_release_idle");
    LOAD(tnpu, records, "fake_tnpu_records");
    LOAD(acl, device_syncs, "fake_acl_device_syncs");
    /* torch_npu's start: aclInit, then its device set on the thread (NpuSysCtrl::Initialize, c10_npu::SetDevice). */
    if (acl_init(NULL) != 0 || acl_set_device(DEV) != 0)
        return -1;
    plugin = dlopen(getenv("HBM_PLUGIN"), RTLD_NOW | RTLD_LOCAL);
    if (!plugin) {
        fprintf(stderr, "test_npu_runtime: %s\n", dlerror());
        return -1;
    }
    LOAD(plugin, raw_alloc, "hbm_torch_raw_alloc");
    LOAD(plugin, hook_free, "hbm_torch_free");
    LOAD(plugin, hook_reset, "hbm_torch_reset");
    LOAD(plugin, hook_init, "hbm_torch_init");
    LOAD(plugin, record_stream, "hbm_torch_record_stream");
    LOAD(plugin, record_stream_npu, "hbm_torch_record_stream_npu");
    LOAD(plugin, device_counters, "hbm_torch_device_counters");
    LOAD(plugin, empty_cache, "hbm_torch_empty_cache");
    LOAD(plugin, plugin_error, "hbm_torch_error");
    LOAD(plugin, pool_slot, "hbm_torch_pool_slot");
    LOAD(plugin, pool_sleep, "hbm_torch_sleep");
    LOAD(plugin, pool_wake, "hbm_torch_wake");
    LOAD(plugin, pool_free, "hbm_torch_pool_free");
    /* set_init_fn: the device count, from NpuSysCtrl::Initialize; the plug-in opens its backend and looks for
     * torch_npu's entry. What it says on stderr is kept, to be checked. */
    fflush(stderr);
    int saved = dup(2), fd = fileno(said);
    if (saved < 0 || fd < 0 || dup2(fd, 2) < 0)
        return -1;
    hook_init(2);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    return 0;
}

static int teardown(void **st)
{
    (void)st;
    return 0; /* the plug-in lives to the process's end, as inside torch_npu */
}

/* Without the entry (a torch_npu build the plug-in does not know), the plug-in says once what it cannot do and what
 * to set; with it, or without a queue, it says nothing. Allocations work either way. */
static void the_plugin_says_when_it_cannot_wait_for_the_queue(void **st)
{
    (void)st;
    char text[4096] = "";
    rewind(said);
    size_t n = fread(text, 1, sizeof text - 1, said);
    text[n] = 0;
    const char *w = strstr(text, "npuSynchronizeDevice was not found");
    if (strcmp(mode, "noentry") == 0) {
        assert_non_null(w);
        assert_null(strstr(w + 1, "npuSynchronizeDevice was not found")); /* once */
        assert_non_null(strstr(text, "TASK_QUEUE_ENABLE=0"));
    } else {
        assert_null(w);
    }
    hook_free_checked(must_alloc(MiB, NULL));
}

/* An operator's launch still in the queue when its tensor is freed; empty_cache then gives the segment back: the
 * queue must be emptied and the device waited for first (npuSynchronizeDevice), or aclrtFree pulls the memory from
 * under the launch. */
static void launches_in_the_queue_are_waited_for_before_memory_goes_back(void **st)
{
    (void)st;
    if (strcmp(mode, "noentry") == 0)
        skip(); /* nothing can drain the queue: said above */
    void *p = must_alloc(30 * MiB, NULL);
    launch(NULL, p, 30 * MiB); /* queued, not on the device yet */
    hook_free_checked(p);
    long before = drains();
    hook_reset(1); /* torch.npu.empty_cache() */
    assert_clean();
    if (strcmp(mode, "queue") == 0) {
        assert_true(drains() > before);
        assert_int_equal(queued(), 0);
    } else {
        assert_int_equal(drains(), before); /* no queue: aclrtSynchronizeDevice alone */
    }
}

/* record_stream: a launch of stream 2 on the block, still in the queue when the block is freed. The event recorded
 * for stream 2 must come after that launch, so the block is not handed to stream 1 until it has run. */
static void events_for_a_freed_block_cover_launches_still_in_the_queue(void **st)
{
    (void)st;
    if (strcmp(mode, "noentry") == 0)
        skip();
    void *s1 = (void *)0x51, *s2 = (void *)0x52;
    void *p = must_alloc(4096, s1);
    assert_int_equal(first_use(s1, p, 4096), 0);
    assert_int_equal(record_stream(p, DEV, s2), 0);
    launch(s2, p, 4096);
    hook_free_checked(p);
    void *q = must_alloc(4096, s1);
    assert_int_equal(first_use(s1, q, 4096), 0); /* a violation here: q is p while stream 2 still uses it */
    assert_clean();
    progress(100);
    void *r = must_alloc(4096, s1);
    assert_int_equal(first_use(s1, r, 4096), 0);
    hook_free_checked(q);
    hook_free_checked(r);
}

static void *workspace;

/* What torch_npu's worker may do while it drains: an operator's compile runs Python whose garbage collection frees
 * a tensor; under TASK_QUEUE_ENABLE=2 it takes a workspace. */
static void worker_frees_and_allocates(void *arg)
{
    hook_free(arg, 0, DEV, NULL);
    workspace = raw_alloc(MiB, DEV, NULL);
}

static void the_queue_worker_may_free_and_allocate_while_hbmalloc_waits(void **st)
{
    (void)st;
    if (strcmp(mode, "noentry") == 0)
        skip();
    void *x = must_alloc(2 * MiB, NULL);
    void *p = must_alloc(30 * MiB, NULL);
    launch(NULL, p, 30 * MiB);
    hook_free_checked(p);
    consumer_work(worker_frees_and_allocates, x); /* at the next drain */
    hook_reset(1);
    assert_clean();
    if (strcmp(mode, "queue") == 0)
        assert_non_null(workspace); /* the worker got its workspace while hbmalloc waited */
    if (workspace)
        hook_free_checked(workspace);
    workspace = NULL;
}

/* npuSynchronizeDevice may throw (a device fault): the plug-in catches it; nothing is given back, nothing crashes,
 * the next empty_cache works. */
static void a_throwing_synchronize_is_an_error_not_a_crash(void **st)
{
    (void)st;
    if (strcmp(mode, "queue") != 0)
        skip();
    void *p = must_alloc(30 * MiB, NULL);
    hook_free_checked(p);
    tnpu_set("throw", 1);
    assert_int_equal(empty_cache(), -1);
    assert_non_null(strstr(plugin_error(), "device synchronize"));
    assert_clean();
    assert_int_equal(empty_cache(), 0);
    assert_clean();
}

/* A pool put to sleep (docs/SLEEP.md) while an operator's launch on its tensor still waits in the queue: the sleep
 * drains the queue and waits for the device (npuSynchronizeDevice, the lock open: the worker may allocate
 * meanwhile) before it copies the backup and unmaps, or the copy would read, and the unmap pull, memory the launch
 * still uses. The pool's allocations come from its MemPool entry (hbm_torch_pool_alloc_SLOT), as torch_npu's
 * MemPool asks for segments. */
static void a_pool_sleeps_after_the_launches_still_in_the_queue(void **st)
{
    (void)st;
    if (strcmp(mode, "noentry") == 0)
        skip();
    int slot = pool_slot("kv_cache", 1);
    assert_true(slot >= 0);
    char name[64];
    snprintf(name, sizeof name, "hbm_torch_pool_alloc_%d", slot);
    void *(*pool_alloc)(size_t, int, void *);
    *(void **)&pool_alloc = dlsym(plugin, name);
    assert_non_null(pool_alloc);
    void *p = pool_alloc(30 * MiB, DEV, NULL);
    assert_non_null(p);
    launch(NULL, p, 30 * MiB); /* queued, not on the device yet */
    void *x = must_alloc(2 * MiB, NULL);
    consumer_work(worker_frees_and_allocates, x); /* at the next drain: the worker needs the lock */
    long before = drains();
    assert_int_equal(pool_sleep("kv_cache", 0, NULL, NULL), 1);
    assert_clean();
    if (strcmp(mode, "queue") == 0) {
        assert_true(drains() > before);
        assert_int_equal(queued(), 0);
        assert_non_null(workspace);
    }
    assert_int_equal(pool_wake("kv_cache", 0, NULL, NULL), 1);
    assert_clean();
    launch(NULL, p, 30 * MiB); /* the tensor is used again, then given back by torch_npu's empty_cache */
    pool_free(p, 30 * MiB, DEV, NULL);
    assert_clean();
    if (workspace)
        hook_free_checked(workspace);
    workspace = NULL;
}

/* torch.npu.Stream's parts as Python passes them (stream_id, device_index, device_type); the fake's stream id is its
 * aclrtStream. c10::DeviceType::PrivateUse1 is 20. */
#define NPU_TYPE 20

static long device_wide_waits(void) { return drains() + device_syncs(); }

/* Tensor.record_stream as FSDP-style prefetch and comm/compute overlap use it: every step, 50 blocks allocated on
 * stream 1, used on stream 2 (its launch still in the queue) and freed. torch_npu records their events through its
 * queue and never waits for the device for a free (NPUCachingAllocator.cpp insert_events); so must hbmalloc: in
 * steady state no device-wide wait at all (counted by the fakes: npuSynchronizeDevice and aclrtSynchronizeDevice),
 * no block reused before stream 2's launch ran (the fakes' first-use check), and no new device memory (the blocks
 * come back once their events complete). */
static void cross_stream_frees_make_no_device_wide_wait(void **st)
{
    (void)st;
    if (strcmp(mode, "queue") != 0)
        skip(); /* noqueue: events on the runtime; noentry: no queue entry at all */
    void *s1 = (void *)0x61, *s2 = (void *)0x62;
    enum { STEPS = 100, FREES = 50, WARM = 3 };
    long waits_at_warm = 0, records_before = records();
    hbm_device_counters c0, c1;
    memset(&c0, 0, sizeof c0);
    for (int step = 0; step < STEPS; step++) {
        if (step == WARM) {
            waits_at_warm = device_wide_waits();
            assert_int_equal(device_counters(DEV, &c0), 0);
        }
        void *blocks[FREES];
        for (int i = 0; i < FREES; i++) {
            blocks[i] = must_alloc(64 * 1024, s1);
            assert_int_equal(first_use(s1, blocks[i], 64 * 1024), 0);
            assert_int_equal(record_stream_npu(blocks[i], DEV, (long long)(uintptr_t)s2, DEV, NPU_TYPE), 0);
            launch(s2, blocks[i], 64 * 1024); /* queued, not on the device yet */
        }
        for (int i = 0; i < FREES; i++)
            hook_free_checked(blocks[i]);
        /* The queue's worker launches the step's work in the background; the device runs it. */
        assert_int_equal(run_consumer(), 1);
        progress(1 << 20);
    }
    assert_int_equal(device_counters(DEV, &c1), 0);
    assert_clean();
    print_message("device-wide waits: %ld in steady state (%d steps x %d cross-stream frees); events through the "
                  "queue: %ld; device mallocs in steady state: %llu\n",
                  device_wide_waits() - waits_at_warm, STEPS - WARM, FREES, records() - records_before,
                  (unsigned long long)(c1.malloc_calls - c0.malloc_calls));
    assert_int_equal(device_wide_waits() - waits_at_warm, 0);
    assert_int_equal(records() - records_before, (long)STEPS * FREES);
    assert_int_equal(c1.queue_events - c0.queue_events, (uint64_t)(STEPS - WARM) * FREES);
    assert_int_equal(c1.malloc_calls, c0.malloc_calls);
    assert_int_equal(c1.unrecorded_uses, c0.unrecorded_uses);
}

static void *released;

/* What torch_npu's release thread does when a launch held a tensor's last reference: the tensor's free. */
static void release_tensor(void *p)
{
    hook_free(p, 0, DEV, NULL);
    released = p;
}

static void release_nothing(void *p) { (void)p; }

/* A tensor used on another stream whose last reference a queued launch holds: torch_npu frees it on its release
 * thread (OpParamMaker.cpp v26.1.0:614-617), while the queue's worker may be spinning on a full release queue
 * (NPUQueue.cpp v26.1.0:843-871). A free there that waits for the queue, or adds to it, never returns: the worker
 * waits for the release thread, which waits for the worker. hbmalloc's free there records nothing and waits for
 * nothing; the block's event is recorded by the next call on another thread, and the block is reused only after
 * stream 2's launch ran. */
static void a_free_on_the_release_thread_does_not_hang(void **st)
{
    (void)st;
    if (strcmp(mode, "queue") != 0)
        skip();
    void *s1 = (void *)0x71, *s2 = (void *)0x72;
    tnpu_set("release_capacity", 1);
    hbm_device_counters c0, c1;
    void *p = must_alloc(4096, s1);
    assert_int_equal(device_counters(DEV, &c0), 0);
    assert_int_equal(first_use(s1, p, 4096), 0);
    assert_int_equal(record_stream_npu(p, DEV, (long long)(uintptr_t)s2, DEV, NPU_TYPE), 0);
    launch_releasing(s2, p, 4096, release_tensor, p); /* the launch holds the tensor's last reference */
    void *q = must_alloc(4096, s1);
    for (int i = 0; i < 3; i++) /* more launches: their parameters fill the release queue meanwhile */
        launch_releasing(s1, q, 4096, release_nothing, NULL);
    released = NULL;
    assert_int_equal(run_consumer(), 1); /* 0: the release thread waited for the worker, which waited for it */
    assert_int_equal(release_idle(), 1);
    assert_ptr_equal(released, p);
    assert_int_equal(device_counters(DEV, &c1), 0);
    assert_int_equal(c1.unrecorded_uses - c0.unrecorded_uses, 1); /* held, not recorded there */
    assert_clean();
    /* The next call on the framework's thread records the held use through the queue; p waits for it. */
    void *r = must_alloc(4096, s1);
    assert_int_equal(first_use(s1, r, 4096), 0); /* r is not p: p's event is not complete */
    assert_true(r != p);
    assert_int_equal(run_consumer(), 1);
    progress(1 << 20);
    void *t = must_alloc(4096, s1);
    assert_int_equal(first_use(s1, t, 4096), 0);
    assert_clean();
    hook_free_checked(q);
    hook_free_checked(r);
    hook_free_checked(t);
    tnpu_set("release_capacity", 8);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_npu_runtime queue|noqueue|noentry (FAKE_TORCH_NPU, HBM_PLUGIN, "
                        "HBMALLOC_LIBASCENDCL in the environment)\n");
        return 2;
    }
    mode = argv[1];
    setenv("HBMALLOC_QUIET", "1", 1);
    unsetenv("HBMALLOC_BACKEND");
    unsetenv("HBMALLOC_CONF");
    setenv("PYTORCH_NPU_ALLOC_CONF", "expandable_segments:False", 1);
    setenv("FAKE_ACL_DEVICES", "2", 1);
    if (strcmp(mode, "noqueue") == 0)
        setenv("TASK_QUEUE_ENABLE", "0", 1);
    else
        unsetenv("TASK_QUEUE_ENABLE");
    char dir[] = "/tmp/hbm-npu-runtime-XXXXXX";
    if (!mkdtemp(dir))
        return 2;
    setenv("HBMALLOC_TOP_DIR", dir, 1); /* the plug-in publishes by default: a private folder */
    said = tmpfile();
    if (!said)
        return 2;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_plugin_says_when_it_cannot_wait_for_the_queue),
        cmocka_unit_test(launches_in_the_queue_are_waited_for_before_memory_goes_back),
        cmocka_unit_test(events_for_a_freed_block_cover_launches_still_in_the_queue),
        cmocka_unit_test(the_queue_worker_may_free_and_allocate_while_hbmalloc_waits),
        cmocka_unit_test(a_throwing_synchronize_is_an_error_not_a_crash),
        cmocka_unit_test(a_pool_sleeps_after_the_launches_still_in_the_queue),
        cmocka_unit_test(cross_stream_frees_make_no_device_wide_wait),
        cmocka_unit_test(a_free_on_the_release_thread_does_not_hang),
    };
    int rc = cmocka_run_group_tests(tests, setup, teardown);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        rc = rc ? rc : 1;
    return rc;
}
