/*
 * torch_plugin.c: the PyTorch plug-in's device set and its C entry points,
 * built twice: libhbmalloc_torch.so for torch.cuda.memory.CUDAPluggableAllocator
 * (default backend "cuda") and libhbmalloc_torch_npu.so for torch_npu's
 * NPUPluggableAllocator (default backend "acl", HBM_PLUGIN_NPU).
 *
 * Two kinds of entry point:
 *   - hooks, with the exact C types the frameworks call them with (their
 *     pluggable-allocator classes, read in docs/PYTORCH.md): free, init
 *     (a device count), reset (empty_cache), memory fraction, record_stream
 *     (CUDA), device stats and reset-peak (torch_npu). alloc, base_alloc and
 *     the graph-pool hooks have C++ types or must throw: torch_hooks.cpp;
 *   - the Python helper's entry points (hbmalloc_torch.py, through ctypes):
 *     statistics, history, snapshots, labels, the memory-fraction getter.
 * They never throw and never return NULL into a tensor (that is hbm_torch_alloc's
 * job, which throws); errors go to the helper as status codes and to stderr
 * from hooks that have no way to report them.
 *
 * One allocator per device, created on first use, on the backend named by
 * HBMALLOC_BACKEND (else the build's default); settings from HBMALLOC_CONF,
 * else the framework's variable (PYTORCH_CUDA_ALLOC_CONF / PYTORCH_NPU_ALLOC_CONF).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "torch_plugin.h"
#include "util.h"

/* Inside torch, peers=capable: torch tells a pluggable allocator nothing when a copy first crosses two devices
 * (CUDAPluggableAllocator::enablePeerAccess only calls cudaDeviceEnablePeerAccess, CUDAPluggableAllocator.cpp
 * v2.6.0:338-349), so expandable pages are granted to every device that can reach them, or such a copy would fault.
 * HBMALLOC_BACKEND=cuda with hbm.enable_peer() grants only the peers named (docs/CONTRACTS.md, "torch (the CUDA
 * plug-in and python/hbmalloc/torch.py)"). */
#ifndef HBM_PLUGIN_BACKEND
#define HBM_PLUGIN_BACKEND "cuda"
#endif
#ifndef HBM_PLUGIN_SPEC /* the build's spec (CMakeLists.txt: cuda:peers=capable for the CUDA plug-ins) */
#define HBM_PLUGIN_SPEC HBM_PLUGIN_BACKEND
#endif
#define MAX_DEVICES 64

static pthread_once_t once = PTHREAD_ONCE_INIT;
static hbm_devices *devices; /* the plug-in's one process-wide state: the frameworks call plain functions */
static char open_error[1024];

/* History as the helper asked for it, applied to every device's allocator, also to those created later. */
static pthread_mutex_t history_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic long history_entries = -1; /* -1: never asked */
static bool history_applied[MAX_DEVICES]; /* under history_lock */
/* Tried on that device (applied or refused) since the helper last asked: read without a lock on every allocation,
 * so that a malloc takes the allocator's lock only (issue #39 item 3: it took the history's on every call). */
static _Atomic bool history_settled[MAX_DEVICES];

#ifdef HBM_PLUGIN_NPU
/* torch_npu's task queue (TASK_QUEUE_ENABLE, default 1: OptionsManager.cpp): operators wait in a host queue before
 * its worker launches them, so a wait or an event on the ACL stream alone misses them. The one exported entry that
 * empties the queue is c10_npu::npuSynchronizeDevice(bool) (NPUStream.h, C10_NPU_API; emptyAllNPUStream and
 * LaunchRecordEventTask are hidden): it drains every queue, then waits for the current device. hbmalloc calls it
 * before memory goes back to the device and before it records events for a freed block (docs/CONTRACTS.md). */
static void *npu_sync_entry;

static int npu_sync(void *ctx)
{
    (void)ctx;
    return hbm_torch__call_bool_fn(npu_sync_entry);
}

/* torch_npu's own threads: the task queue's consumer ("acl_thread"; "ACL_thread" in v2.1.0-6.0.rc1) and the thread
 * that releases finished launches' parameters, tensors included ("release_thread"; "Release_thread"), named with
 * prctl(PR_SET_NAME) (NPUAffinityController.cpp SetThreadType, NPUQueue.cpp StartConsume / StartRelease). A free
 * runs there when a launch held a tensor's last reference (OpParamMaker.cpp v26.1.0:614-617): nothing there may
 * wait for the queue or add to it, or the job hangs (docs/CONTRACTS.md). */
static int npu_may_wait(void *ctx)
{
    (void)ctx;
    static __thread int known = -1;
    if (known < 0) {
        char name[17] = "";
        if (prctl(PR_GET_NAME, name, 0, 0, 0) != 0)
            name[0] = 0;
        known = strcasecmp(name, "acl_thread") != 0 && strcasecmp(name, "release_thread") != 0;
    }
    return known;
}

static bool queue_disabled(void)
{
    const char *v = getenv("TASK_QUEUE_ENABLE"), *b = getenv("ASCEND_LAUNCH_BLOCKING");
    return (b && !strcmp(b, "1")) || (v && *v && strtol(v, NULL, 10) == 0);
}

static void use_task_queue(void)
{
    void *lib = dlopen("libtorch_npu.so", RTLD_LAZY | RTLD_NOLOAD); /* only if torch_npu loaded it */
    if (!lib)
        return; /* not inside torch_npu: no task queue */
    npu_sync_entry = dlsym(lib, "_ZN7c10_npu20npuSynchronizeDeviceEb");
    int events = hbm_torch__npu_events_init(lib);
    dlclose(lib); /* NOLOAD took a reference; torch_npu keeps its own */
    if (npu_sync_entry) {
        hbm_host_queue q = {.flush = npu_sync, .sync_device = npu_sync, .may_wait = npu_may_wait};
        if (events) {
            q.event_record = hbm_torch__npu_event_record;
            q.event_query = hbm_torch__npu_event_query;
            q.event_release = hbm_torch__npu_event_release;
        }
        hbm_backend_set_host_queue(hbm_devices_backend(devices), &q);
    } else if (!queue_disabled()) {
        fprintf(stderr, "hbmalloc: warning: torch_npu's c10_npu::npuSynchronizeDevice was not found in "
                        "libtorch_npu.so: launches still waiting in torch_npu's task queue are not waited for before "
                        "memory goes back to the device or is reused by another stream. Run with "
                        "TASK_QUEUE_ENABLE=0 (operators launched at once) to be safe\n");
    }
}
#endif

static void open_devices(void)
{
    const char *spec = getenv("HBMALLOC_BACKEND");
    if (hbm_devices_open(&devices, spec && *spec ? spec : HBM_PLUGIN_SPEC, NULL, open_error, sizeof open_error) !=
        HBM_OK) {
        devices = NULL;
        return;
    }
#ifdef HBM_PLUGIN_NPU
    if (!queue_disabled())
        use_task_queue();
#endif
}

/* The history asked for, on device's allocator, once: false when it was refused this time. */
static bool apply_history(hbm_allocator *a, int device)
{
    bool refused = false;
    pthread_mutex_lock(&history_lock);
    if (history_entries >= 0 && device >= 0 && device < MAX_DEVICES && !history_settled[device]) {
        history_applied[device] = hbm_history_enable(a, (size_t)history_entries) == HBM_OK;
        refused = !history_applied[device];
        history_settled[device] = true;
    }
    pthread_mutex_unlock(&history_lock);
    return !refused;
}

/* Statistics for `hbmalloc top`: published unless the settings say hbm_publish:False (the C API's default is
 * off; a plug-in user expects the monitor to see the job). Decided once per device. */
static _Atomic bool publish_decided[MAX_DEVICES]; /* read without the lock on every allocation */

static void apply_publish(hbm_allocator *a, int device)
{
    pthread_mutex_lock(&history_lock);
    bool first = device >= 0 && device < MAX_DEVICES && !publish_decided[device];
    if (first)
        publish_decided[device] = true;
    pthread_mutex_unlock(&history_lock);
    if (first && hbm_publish(a, HBM_PUBLISH_UNLESS_SET_OFF) != HBM_OK && !getenv("HBMALLOC_QUIET"))
        fprintf(stderr, "hbmalloc: warning: %s\n", hbm_last_error(a));
}

hbm_allocator *hbm_torch__allocator(int device)
{
    pthread_once(&once, open_devices);
    if (!devices) {
        fprintf(stderr, "hbmalloc: %s\n", open_error);
        return NULL;
    }
    hbm_allocator *a = hbm_devices_get(devices, device);
    if (!a) {
        fprintf(stderr, "hbmalloc: %s\n", hbm_devices_error(devices));
        return NULL;
    }
    if (history_entries >= 0 && device >= 0 && device < MAX_DEVICES &&
        !atomic_load_explicit(&history_settled[device], memory_order_acquire) && !apply_history(a, device) &&
        !getenv("HBMALLOC_QUIET")) /* an allocator made after the helper asked: said once, the job goes on */
        fprintf(stderr, "hbmalloc: warning: memory history on device %d: %s\n", device, hbm_last_error(a));
    if (device >= 0 && device < MAX_DEVICES && !atomic_load_explicit(&publish_decided[device], memory_order_relaxed))
        apply_publish(a, device);
    return a;
}

/* An allocator that exists already (statistics must not create one, and with it a device context). */
static hbm_allocator *existing(int device)
{
    pthread_once(&once, open_devices);
    return devices ? hbm_devices_existing(devices, device) : NULL;
}

/* ---- the framework's own OOM message, then hbmalloc's diagnosis ---- */

static void framework_oom(hbm_allocator *a, int device, char *msg, size_t len)
{
    hbm_oom_info o;
    char diag[1536];
    if (hbm_copy_last_oom(a, &o, diag, sizeof diag) != HBM_OK) {
        snprintf(msg, len, "%s out of memory.\nhbmalloc: %s", HBM_TORCH_DEV, hbm_last_error(a));
        return;
    }
    hbm__sbuf sb;
    hbm__sb_init(&sb, msg, len);
    if (o.too_large) {
        hbm__sb_printf(&sb, "%s out of memory. Tried to allocate more than 1EB memory.", HBM_TORCH_DEV);
    } else {
        char s_alloc[32], s_total[32], s_free[32], s_allocated[32], s_unalloc[32], s_allowed[48] = "", s_x[32];
        hbm__format_size(o.alloc_size, s_alloc, sizeof s_alloc);
        hbm__format_size(o.device_total, s_total, sizeof s_total);
        hbm__format_size(o.device_free, s_free, sizeof s_free);
        hbm__format_size(o.allocated, s_allocated, sizeof s_allocated);
        hbm__format_size(o.reserved - o.allocated, s_unalloc, sizeof s_unalloc);
        if (o.allowed) {
            hbm__format_size(o.allowed, s_x, sizeof s_x);
            snprintf(s_allowed, sizeof s_allowed, "%s allowed; ", s_x);
        }
#ifdef HBM_PLUGIN_NPU
        /* torch_npu's NPUCachingAllocator.cpp wording, byte for byte (no space after ")."). */
        char s_active[32], s_reserved[32];
        hbm__format_size(o.active, s_active, sizeof s_active);
        hbm__format_size(o.reserved, s_reserved, sizeof s_reserved);
        hbm__sb_printf(&sb,
                       "NPU out of memory. Tried to allocate %s (NPU %d; %s total capacity; %s already allocated; %s "
                       "current active; %s free; %s%s reserved in total by PyTorch).If reserved memory is >> "
                       "allocated memory try setting max_split_size_mb to avoid fragmentation.",
                       s_alloc, device, s_total, s_allocated, s_active, s_free, s_allowed, s_reserved);
#else
        /* c10/cuda/CUDACachingAllocator.cpp's wording (two spaces after "fragmentation." and before "("), with
         * reportProcessMemoryInfo's line per process NVML lists (largest first here, NVML's order there). */
        char procs[HBM_OUTSIDE_PROCS * 80] = "";
        hbm__sbuf ps;
        hbm__sb_init(&ps, procs, sizeof procs);
        for (uint32_t i = 0; i < o.outside.nprocs && i < HBM_OUTSIDE_PROCS; i++) {
            hbm__format_size(o.outside.procs[i].bytes, s_x, sizeof s_x);
            if (o.outside.procs[i].pid == (int64_t)getpid())
                hbm__sb_printf(&ps, "Including non-PyTorch memory, this process has %s memory in use. ", s_x);
            else
                hbm__sb_printf(&ps, "Process %lld has %s memory in use. ", (long long)o.outside.procs[i].pid, s_x);
        }
        hbm__sb_printf(&sb,
                       "CUDA out of memory. Tried to allocate %s. GPU %d has a total capacity of %s of which %s is "
                       "free. %s%sOf the allocated memory %s is allocated by PyTorch, and %s is reserved by PyTorch "
                       "but unallocated. If reserved but unallocated memory is large try setting "
                       "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
                       "for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html"
                       "#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)",
                       s_alloc, device, s_total, s_free, procs, s_allowed, s_allocated, s_unalloc);
#endif
    }
    hbm__sb_printf(&sb, "\nhbmalloc: %s", diag);
}

int hbm_torch__malloc(size_t size, int device, void *stream, void **out, char *msg, size_t msglen)
{
    *out = NULL;
    hbm_allocator *a = hbm_torch__allocator(device);
    if (!a) {
        snprintf(msg, msglen, "hbmalloc: %s", devices ? hbm_devices_error(devices) : open_error);
        return 2;
    }
    hbm_label label = hbm_torch__call_label(a, device);
    hbm_status rc = hbm_malloc_labeled(a, size, (hbm_stream)(uintptr_t)stream, label, out);
    if (rc == HBM_OK)
        return 0;
    if (rc == HBM_ERR_OOM) {
        framework_oom(a, device, msg, msglen);
        return 1;
    }
    char e[1536];
    hbm_copy_last_error(a, e, sizeof e);
    snprintf(msg, msglen, "hbmalloc: %s", e);
    return 2;
}

/* The allocator whose live block starts at ptr, or NULL. */
static hbm_allocator *owner_of(const void *ptr, int *device)
{
    pthread_once(&once, open_devices);
    for (int d = 0; devices && d < hbm_devices_count(devices); d++) {
        hbm_allocator *a = hbm_devices_existing(devices, d);
        if (a && hbm_block_size(a, ptr)) {
            *device = d;
            return a;
        }
    }
    return NULL;
}

int hbm_torch__base(void *ptr, void **base, size_t *size, char *msg, size_t msglen)
{
    int device;
    hbm_allocator *a = owner_of(ptr, &device);
    if (!a) {
        snprintf(msg, msglen, "hbmalloc: getBaseAllocation(%p): not a live block of this allocator", ptr);
        return -1;
    }
    if (hbm_segment_of(a, ptr, base, size) != HBM_OK) {
        hbm_copy_last_error(a, msg, msglen);
        return -1;
    }
    return 0;
}

/* ---- graph pools: torch's pool ids -> hbmalloc's private pools ---- */

typedef struct pool_map {
    int device;
    uint64_t id0, id1;
    hbm_mempool pool;
    int uses;    /* torch's use_count: begin increments, release decrements */
    void **ctxs; /* the filter contexts of its capture routings, oldest first (hbm_mempool_end ends the newest) */
    size_t nctx, cap_ctx;
} pool_map;

static pthread_mutex_t pools_lock = PTHREAD_MUTEX_INITIALIZER;
static pool_map *pools;
static size_t npools, cap_pools;

static pool_map *pool_find(int device, uint64_t id0, uint64_t id1)
{
    for (size_t i = 0; i < npools; i++)
        if (pools[i].device == device && pools[i].id0 == id0 && pools[i].id1 == id1)
            return &pools[i];
    return NULL;
}

int hbm_torch__pool_begin(int device, uint64_t id0, uint64_t id1, hbm_stream_filter filter, void *ctx, char *msg,
                          size_t msglen)
{
    hbm_allocator *a = hbm_torch__allocator(device);
    if (!a) {
        snprintf(msg, msglen, "hbmalloc: beginAllocateToPool: device %d has no allocator", device);
        return -1;
    }
    pthread_mutex_lock(&pools_lock);
    int rc = 0;
    pool_map *m = pool_find(device, id0, id1);
    bool created = false;
    if (!m) {
        hbm_mempool id;
        if (hbm__grow((void **)&pools, &cap_pools, npools + 1, sizeof *pools) || hbm_mempool_create(a, &id) != HBM_OK) {
            snprintf(msg, msglen, "hbmalloc: beginAllocateToPool: out of host memory");
            rc = -1;
        } else {
            m = &pools[npools++];
            *m = (pool_map){device, id0, id1, id, 0, NULL, 0, 0};
            created = true;
        }
    }
    if (rc == 0 && hbm__grow((void **)&m->ctxs, &m->cap_ctx, m->nctx + 1, sizeof *m->ctxs)) {
        snprintf(msg, msglen, "hbmalloc: beginAllocateToPool: out of host memory");
        rc = -1;
    } else if (rc == 0 && hbm_mempool_begin_capture(a, m->pool, filter, ctx) != HBM_OK) {
        snprintf(msg, msglen, "hbmalloc: beginAllocateToPool(%llu, %llu): %s", (unsigned long long)id0,
                 (unsigned long long)id1, hbm_last_error(a));
        rc = -1;
    } else if (rc == 0) {
        m->ctxs[m->nctx++] = ctx;
        m->uses++;
        void (*made)(hbm_allocator *, hbm_mempool) = __atomic_load_n(&hbm_torch__graph_pool_made, __ATOMIC_ACQUIRE);
        if (created && made)
            made(a, m->pool); /* captured inside hbmalloc.torch.pool(tag): it sleeps too */
    }
    if (rc != 0 && created) {
        hbm_mempool_release(a, m->pool);
        free(m->ctxs);
        npools--;
    }
    pthread_mutex_unlock(&pools_lock);
    return rc;
}

/* Torch's last use of a pool is gone and no capture routes into it: drop the creator's hold. Live
 * blocks keep the pool (HBM_ERR_POOL_BUSY) until they are freed, as PyTorch's graph_pools_freeable. */
static int pool_drop(hbm_allocator *a, pool_map *m, char *msg, size_t msglen)
{
    int rc = 0;
    hbm_status st = hbm_mempool_release(a, m->pool);
    if (st != HBM_OK && st != HBM_ERR_POOL_BUSY) {
        snprintf(msg, msglen, "hbmalloc: releasePool: %s", hbm_last_error(a));
        rc = -1;
    }
    free(m->ctxs);
    *m = pools[--npools];
    return rc;
}

int hbm_torch__pool_end(int device, uint64_t id0, uint64_t id1, void **ctx, char *msg, size_t msglen)
{
    *ctx = NULL;
    hbm_allocator *a = hbm_torch__allocator(device);
    pthread_mutex_lock(&pools_lock);
    pool_map *m = pool_find(device, id0, id1);
    int rc = -1;
    if (!a || !m || m->nctx == 0) {
        snprintf(msg, msglen, "hbmalloc: endAllocateToPool: not currently recording to mempool (%llu, %llu)",
                 (unsigned long long)id0, (unsigned long long)id1);
    } else if (hbm_mempool_end(a, m->pool) == HBM_OK) {
        *ctx = m->ctxs[--m->nctx]; /* hbm_mempool_end ended the newest routing into the pool */
        rc = m->uses == 0 && m->nctx == 0 ? pool_drop(a, m, msg, msglen) : 0;
    } else {
        snprintf(msg, msglen, "hbmalloc: endAllocateToPool: %s", hbm_last_error(a));
    }
    pthread_mutex_unlock(&pools_lock);
    return rc;
}

int hbm_torch__pool_release(int device, uint64_t id0, uint64_t id1, char *msg, size_t msglen)
{
    hbm_allocator *a = hbm_torch__allocator(device);
    pthread_mutex_lock(&pools_lock);
    pool_map *m = pool_find(device, id0, id1);
    int rc = 0;
    if (!a || !m) {
        snprintf(msg, msglen, "hbmalloc: releasePool: unknown mempool (%llu, %llu)", (unsigned long long)id0,
                 (unsigned long long)id1);
        rc = -1;
    } else if (m->uses <= 0) {
        snprintf(msg, msglen, "hbmalloc: releasePool: mempool (%llu, %llu) was released already",
                 (unsigned long long)id0, (unsigned long long)id1);
        rc = -1;
    } else if (--m->uses == 0 && m->nctx == 0) {
        rc = pool_drop(a, m, msg, msglen); /* else the end of the last capture into it drops it */
    }
    pthread_mutex_unlock(&pools_lock);
    return rc;
}

/* ---- hooks with C types ---- */

HBM_TORCH_EXPORT void hbm_torch_free(void *ptr, size_t size, int device, void *stream);
HBM_TORCH_EXPORT void hbm_torch_init(int device_count);
HBM_TORCH_EXPORT void hbm_torch_reset(bool check_error);
HBM_TORCH_EXPORT void hbm_torch_cuda_reset(void);
HBM_TORCH_EXPORT void hbm_torch_memory_fraction(double fraction, int device);
HBM_TORCH_EXPORT void hbm_torch_record_stream_fn(void *ptr, void *stream);
HBM_TORCH_EXPORT void hbm_torch_reset_peak(int device);

/* alloc's partner: size and stream as the framework recorded them at alloc (unused: hbmalloc knows). */
HBM_TORCH_EXPORT void hbm_torch_free(void *ptr, size_t size, int device, void *stream)
{
    (void)size;
    (void)stream;
    pthread_once(&once, open_devices);
    if (devices && hbm_devices_free(devices, device, ptr) != HBM_OK)
        fprintf(stderr, "hbmalloc: %s\n", hbm_devices_error(devices));
}

/* set_init_fn: both frameworks pass the number of devices (CUDACachingAllocator::init(device_count);
 * torch_npu NpuSysCtrl::Initialize -> init(aclrtGetDeviceCount)). Allocators stay lazy: creating
 * one would create a context on every device. */
HBM_TORCH_EXPORT void hbm_torch_init(int device_count)
{
    pthread_once(&once, open_devices);
    if (!devices) {
        fprintf(stderr, "hbmalloc: %s\n", open_error);
        return;
    }
    int have = hbm_devices_count(devices);
    if (device_count > have)
        fprintf(stderr,
                "hbmalloc: warning: the framework sees %d devices, the %s backend %d: devices %d to %d "
                "cannot allocate\n",
                device_count, HBM_PLUGIN_BACKEND, have, have, device_count - 1);
}

static void empty_all(bool report)
{
    pthread_once(&once, open_devices);
    for (int d = 0; devices && d < hbm_devices_count(devices); d++) {
        hbm_allocator *a = hbm_devices_existing(devices, d);
        if (a && hbm_empty_cache(a) != HBM_OK && report)
            fprintf(stderr, "hbmalloc: empty_cache: %s\n", hbm_last_error(a));
    }
}

/* torch_npu's set_reset_fn: emptyCache(check_error). */
HBM_TORCH_EXPORT void hbm_torch_reset(bool check_error) { empty_all(check_error); }

/* CUDA's set_reset_fn (void()): torch.cuda.empty_cache(). */
HBM_TORCH_EXPORT void hbm_torch_cuda_reset(void) { empty_all(true); }

/* set_memory_fraction_fn: no status to return, so a refusal is said on stderr. */
HBM_TORCH_EXPORT void hbm_torch_memory_fraction(double fraction, int device)
{
    hbm_allocator *a = hbm_torch__allocator(device);
    if (a && hbm_set_memory_fraction(a, fraction) != HBM_OK)
        fprintf(stderr, "hbmalloc: %s\n", hbm_last_error(a));
}

/* CUDA's set_record_stream_fn: void(void *ptr, cudaStream_t), no device: the owning allocator is found. */
HBM_TORCH_EXPORT void hbm_torch_record_stream_fn(void *ptr, void *stream)
{
    if (!ptr)
        return; /* PyTorch ignores null data pointers */
    int device;
    hbm_allocator *a = owner_of(ptr, &device);
    if (!a) {
        fprintf(stderr, "hbmalloc: record_stream(%p): not a live block of this allocator; nothing was changed\n", ptr);
        return;
    }
    if (hbm_record_stream(a, ptr, (hbm_stream)(uintptr_t)stream) != HBM_OK)
        fprintf(stderr, "hbmalloc: %s\n", hbm_last_error(a));
}

/* torch_npu's set_reset_peak_status_fn: void(int) up to 2.12, void(c10::DeviceIndex) (int8) in newer
 * releases: only the low byte is read, which both agree on. */
HBM_TORCH_EXPORT void hbm_torch_reset_peak(int device)
{
    hbm_allocator *a = existing((int8_t)device);
    if (a)
        hbm_reset_peak_stats(a);
}

/* torch_npu's set_get_device_stats_fn: DeviceStats(int), returned by value. The layout of
 * torch_npu/csrc/core/npu/NPUCachingAllocator.h `struct DeviceStats`, the same in every release
 * from v6.0.rc1 (2.1.0 line) to v26.2.0 (2.12.0 line) that has the hook (92 tags compared);
 * newer releases use c10::CachingDeviceAllocator::DeviceStats, whose layout depends on the torch
 * version, and get no hook (hbmalloc_torch.use() says so). */
typedef struct hbm_torch_stat {
    int64_t current, peak, allocated, freed;
} hbm_torch_stat;

typedef struct hbm_torch_npu_stats_v1 {
    hbm_torch_stat allocation[3], segment[3], active[3], inactive_split[3];
    hbm_torch_stat allocated_bytes[3], reserved_bytes[3], active_bytes[3], inactive_split_bytes[3];
    hbm_torch_stat requested_bytes[3];
    int64_t num_alloc_retries, num_ooms;
    hbm_torch_stat oversize_allocations, oversize_segments;
    int64_t max_split_size;
} hbm_torch_npu_stats_v1;

_Static_assert(sizeof(hbm_torch_npu_stats_v1) == 27 * 32 + 2 * 8 + 2 * 32 + 8, "torch_npu DeviceStats layout");
_Static_assert(offsetof(hbm_torch_npu_stats_v1, num_alloc_retries) == 864, "torch_npu DeviceStats layout");

HBM_TORCH_EXPORT hbm_torch_npu_stats_v1 hbm_torch_npu_device_stats(int device);

static void put_stat(hbm_torch_stat *d, const hbm_stat *s)
{
    *d = (hbm_torch_stat){s->current, s->peak, s->allocated, s->freed};
}

HBM_TORCH_EXPORT hbm_torch_npu_stats_v1 hbm_torch_npu_device_stats(int device)
{
    hbm_torch_npu_stats_v1 out;
    memset(&out, 0, sizeof out);
    hbm_stats s;
    hbm_allocator *a = existing((int8_t)device);
    if (!a || hbm_get_stats(a, &s) != HBM_OK) {
        out.max_split_size = -1; /* a device never used: PyTorch's zeros, max_split_size unlimited */
        return out;
    }
    for (int k = 0; k < 3; k++) {
        put_stat(&out.allocation[k], &s.allocation[k]);
        put_stat(&out.segment[k], &s.segment[k]);
        put_stat(&out.active[k], &s.active[k]);
        put_stat(&out.inactive_split[k], &s.inactive_split[k]);
        put_stat(&out.allocated_bytes[k], &s.allocated_bytes[k]);
        put_stat(&out.reserved_bytes[k], &s.reserved_bytes[k]);
        put_stat(&out.active_bytes[k], &s.active_bytes[k]);
        put_stat(&out.inactive_split_bytes[k], &s.inactive_split_bytes[k]);
        put_stat(&out.requested_bytes[k], &s.requested_bytes[k]);
    }
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    put_stat(&out.oversize_allocations, &s.oversize_allocations);
    put_stat(&out.oversize_segments, &s.oversize_segments);
    out.max_split_size = s.max_split_size;
    return out;
}

/* ---- the Python helper's entry points (ctypes; status codes, never an exception) ---- */

HBM_TORCH_EXPORT void *hbm_torch_raw_alloc(size_t size, int device, void *stream);
HBM_TORCH_EXPORT int hbm_torch_empty_cache(void);
HBM_TORCH_EXPORT int hbm_torch_step(void);
HBM_TORCH_EXPORT int hbm_torch_record_stream(void *ptr, int device, void *stream);
#ifdef HBM_PLUGIN_NPU
HBM_TORCH_EXPORT int hbm_torch_record_stream_npu(void *ptr, int device, long long stream_id, int device_index,
                                                 int device_type);
#endif

HBM_TORCH_EXPORT int hbm_torch_set_memory_fraction(double fraction, int device);
HBM_TORCH_EXPORT double hbm_torch_get_memory_fraction(int device);
HBM_TORCH_EXPORT long hbm_torch_stats(int device, char *buf, long len);
HBM_TORCH_EXPORT long hbm_torch_outside(int device, char *buf, long len);
HBM_TORCH_EXPORT int hbm_torch_reset_peak_stats(int device);
HBM_TORCH_EXPORT int hbm_torch_device_counters(int device, hbm_device_counters *out);
HBM_TORCH_EXPORT int hbm_torch_reset_accumulated_stats(int device);
HBM_TORCH_EXPORT int hbm_torch_record_history(long max_entries, int stacks);
HBM_TORCH_EXPORT int hbm_torch_snapshot(int device, const char *path);
HBM_TORCH_EXPORT int hbm_torch_device_count(void);
HBM_TORCH_EXPORT int hbm_torch_enable_peer(int device, int peer);
HBM_TORCH_EXPORT int hbm_torch_device_used(int device);
HBM_TORCH_EXPORT long hbm_torch_pool_ids(int device, uint64_t *out, long cap);
HBM_TORCH_EXPORT int hbm_torch_captures_underway(int device);
HBM_TORCH_EXPORT const char *hbm_torch_error(void);
HBM_TORCH_EXPORT const char *hbm_torch_npu_release(const char *version);

void (*hbm_torch__graph_pool_made)(hbm_allocator *a, hbm_mempool pool);

/* alloc without the exception (tests, benchmarks, the helper): NULL and hbm_torch_error() on failure. */
HBM_TORCH_EXPORT void *hbm_torch_raw_alloc(size_t size, int device, void *stream)
{
    void *p;
    if (hbm_torch__malloc(size, device, stream, &p, hbm_torch__helper_error, sizeof hbm_torch__helper_error) != 0)
        return NULL;
    return p;
}

/* fn on every device in use: 0, or -1 with the last failure's text in hbm_torch__helper_error. */
static int each_device(hbm_status (*fn)(hbm_allocator *))
{
    pthread_once(&once, open_devices);
    int rc = 0;
    for (int d = 0; devices && d < hbm_devices_count(devices); d++) {
        hbm_allocator *a = hbm_devices_existing(devices, d);
        if (a && fn(a) != HBM_OK) {
            hbm_copy_last_error(a, hbm_torch__helper_error, sizeof hbm_torch__helper_error);
            rc = -1;
        }
    }
    return rc;
}

HBM_TORCH_EXPORT int hbm_torch_empty_cache(void) { return each_device(hbm_empty_cache); }

/* A training step ended (hbmalloc_torch.step, or the optimizer hook): hbm_step on every device in use. */
HBM_TORCH_EXPORT int hbm_torch_step(void) { return each_device(hbm_step); }

/* Tensor.record_stream routed from Python (torch_npu). A pointer hbmalloc did not allocate is skipped, as torch_npu's
 * own recordStream skips a tensor its allocator does not own (NPUCachingAllocator.cpp, recordStream: "If a tensor is
 * not allocated by this instance, simply skip"; PyTorch's the same). */
HBM_TORCH_EXPORT int hbm_torch_record_stream(void *ptr, int device, void *stream)
{
    hbm_allocator *a = hbm_torch__allocator(device);
    if (!a)
        return -1;
    if (!ptr || !hbm_block_size(a, ptr))
        return 0;
    if (hbm_record_stream(a, ptr, (hbm_stream)(uintptr_t)stream) != HBM_OK) {
        hbm_copy_last_error(a, hbm_torch__helper_error, sizeof hbm_torch__helper_error);
        return -1;
    }
    return 0;
}

#ifdef HBM_PLUGIN_NPU
/* Tensor.record_stream routed from Python with the torch.npu.Stream's parts (stream_id, device_index, device_type):
 * its aclrtStream is found without emptying the task queue (stream.npu_stream empties it), and the stream is known
 * for recording events through the queue when the block is freed. -2: this torch_npu does not export what that
 * needs (the caller passes stream.npu_stream to hbm_torch_record_stream instead). */
HBM_TORCH_EXPORT int hbm_torch_record_stream_npu(void *ptr, int device, long long stream_id, int device_index,
                                                 int device_type)
{
    void *acl = NULL;
    int rc = hbm_torch__npu_stream_of((int64_t)stream_id, device_index, device_type, &acl);
    if (rc == -1)
        hbm_torch__set_error("hbmalloc: torch_npu could not name the stream (id %lld, device %d) for record_stream",
                             stream_id, device_index);
    return rc != 0 ? rc : hbm_torch_record_stream(ptr, device, acl);
}
#endif

HBM_TORCH_EXPORT int hbm_torch_set_memory_fraction(double fraction, int device)
{
    hbm_allocator *a = hbm_torch__allocator(device);
    if (!a)
        return -1;
    if (hbm_set_memory_fraction(a, fraction) != HBM_OK) {
        hbm_copy_last_error(a, hbm_torch__helper_error, sizeof hbm_torch__helper_error);
        return -1;
    }
    return 0;
}

/* A device never used has no allocator yet: its fraction is the one its settings will give. */
HBM_TORCH_EXPORT double hbm_torch_get_memory_fraction(int device)
{
    hbm_allocator *a = existing(device);
    if (!a && !(a = hbm_torch__allocator(device)))
        return -1.0;
    return hbm_get_memory_fraction(a);
}

/* "name value" lines under memory_stats() names; returns the length (or the length needed).
 * A device that has not allocated yet answers zeros, as PyTorch's does, without creating anything. */
HBM_TORCH_EXPORT long hbm_torch_stats(int device, char *buf, long len)
{
    pthread_once(&once, open_devices);
    if (!devices || device < 0 || device >= hbm_devices_count(devices)) {
        snprintf(hbm_torch__helper_error, sizeof hbm_torch__helper_error, "device %d does not exist (%d devices)",
                 device, hbm_devices_count(devices));
        return -1;
    }
    hbm_stats s;
    memset(&s, 0, sizeof s);
    s.max_split_size = -1;
    s.device_used_bytes = s.outside_bytes = s.outside_process_bytes = s.outside_others_bytes = -1; /* unmeasured */
    hbm_allocator *a = existing(device);
    if (a)
        hbm_get_stats(a, &s);
    hbm_stat_entry e[HBM_STAT_ENTRIES];
    int n = hbm_stats_flatten(&s, e, HBM_STAT_ENTRIES);
    long need = 0;
    for (int i = 0; i < n; i++) {
        int w = snprintf(buf && need < len ? buf + need : NULL, buf && need < len ? (size_t)(len - need) : 0,
                         "%s %lld\n", e[i].name, (long long)e[i].value);
        need += w;
    }
    return need;
}

/* Memory outside hbmalloc measured now (hbm_outside_get) on each device in use (or `device` alone), one line each:
 * device, device_total, device_used, reserved, outside, process_bytes, process_outside, others (-1: unknown), the
 * sentence; tab-separated. Returns the length (or the length needed). */
HBM_TORCH_EXPORT long hbm_torch_outside(int device, char *buf, long len)
{
    long need = 0;
    int n = hbm_torch_device_count();
    for (int d = device < 0 ? 0 : device; d < (device < 0 ? n : device + 1) && d < n; d++) {
        hbm_allocator *a = hbm_torch_device_used(d) ? existing(d) : NULL;
        hbm_outside o;
        if (!a || hbm_outside_get(a, &o) != HBM_OK)
            continue;
        char say[1024];
        hbm_outside_describe(&o, say, sizeof say);
        need += snprintf(buf && need < len ? buf + need : NULL, buf && need < len ? (size_t)(len - need) : 0,
                         "%d\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%lld\t%s\n", d, (long long)o.device_total,
                         (long long)o.device_used, (long long)o.reserved, (long long)o.outside,
                         (long long)o.process_bytes, (long long)o.process_outside, (long long)o.others, say);
    }
    return need;
}

/* The device calls of a device's allocator (hbm_get_device_counters): 0, or -1 when none was made yet. */
HBM_TORCH_EXPORT int hbm_torch_device_counters(int device, hbm_device_counters *out)
{
    hbm_allocator *a = existing(device);
    if (!a || !out)
        return -1;
    hbm_get_device_counters(a, out);
    return 0;
}

HBM_TORCH_EXPORT int hbm_torch_reset_peak_stats(int device)
{
    hbm_allocator *a = existing(device);
    if (a)
        hbm_reset_peak_stats(a);
    return 0;
}

HBM_TORCH_EXPORT int hbm_torch_reset_accumulated_stats(int device)
{
    hbm_allocator *a = existing(device);
    if (a)
        hbm_reset_accumulated_stats(a);
    return 0;
}

/* _record_memory_history: max_entries 0 turns the ring off (and clears it); stacks: 1 labels every
 * allocation with its Python stack, 0 with the helper's label() alone. Every device, now and later. */
HBM_TORCH_EXPORT int hbm_torch_record_history(long max_entries, int stacks)
{
    if (max_entries < 0) {
        snprintf(hbm_torch__helper_error, sizeof hbm_torch__helper_error, "memory history: max_entries %ld is negative",
                 max_entries);
        return -1;
    }
    pthread_once(&once, open_devices);
    pthread_mutex_lock(&history_lock);
    history_entries = max_entries;
    memset(history_applied, 0, sizeof history_applied);
    for (int d = 0; d < MAX_DEVICES; d++)
        history_settled[d] = false;
    pthread_mutex_unlock(&history_lock);
    int rc = 0;
    for (int d = 0; devices && d < hbm_devices_count(devices) && d < MAX_DEVICES; d++) {
        hbm_allocator *a = hbm_devices_existing(devices, d);
        if (a) {
            if (!apply_history(a, d)) {
                char e[1200];
                hbm_copy_last_error(a, e, sizeof e);
                snprintf(hbm_torch__helper_error, sizeof hbm_torch__helper_error, "memory history on device %d: %s", d,
                         e[0] ? e : "refused");
                rc = -1;
            }
        }
    }
    hbm_torch__stacks_enable(stacks);
    return rc;
}

HBM_TORCH_EXPORT int hbm_torch_snapshot(int device, const char *path)
{
    hbm_allocator *a = existing(device);
    if (!a && !(a = hbm_torch__allocator(device)))
        return -1;
    if (!path)
        return -1;
    hbm_snapshot *s;
    if (hbm_snapshot_take(a, &s) != HBM_OK) {
        snprintf(hbm_torch__helper_error, sizeof hbm_torch__helper_error, "out of host memory taking a snapshot");
        return -1;
    }
    size_t n = strlen(path);
    hbm_status rc = hbm_snapshot_save(s, path,
                                      n > 5 && !strcmp(path + n - 5, ".json") ? HBM_SNAPSHOT_JSON : HBM_SNAPSHOT_PICKLE,
                                      hbm_torch__helper_error, sizeof hbm_torch__helper_error);
    hbm_snapshot_free(s);
    return rc == HBM_OK ? 0 : -1;
}

HBM_TORCH_EXPORT int hbm_torch_device_count(void)
{
    pthread_once(&once, open_devices);
    return devices ? hbm_devices_count(devices) : -1;
}

/* `peer` may read and write `device`'s expandable pages (hbm_backend_enable_peer). PyTorch's own allocator does it
 * when a copy first crosses from peer to device (PeerToPeerAccess.cpp get_p2p_access -> enablePeerAccess ->
 * addPeerAccess, v2.6.0:55, CUDACachingAllocator.cpp v2.6.0:3746-3764); CUDAPluggableAllocator::enablePeerAccess
 * only calls cudaDeviceEnablePeerAccess (CUDAPluggableAllocator.cpp v2.6.0:338-349), so the plug-in never hears of
 * it: the helper's enable_peer() is the way in. */
HBM_TORCH_EXPORT int hbm_torch_enable_peer(int device, int peer)
{
    pthread_once(&once, open_devices);
    if (!devices) {
        hbm_torch__set_error("%s", open_error);
        return -1;
    }
    hbm_backend *b = hbm_devices_backend(devices);
    return hbm_backend_enable_peer(b, device, peer, hbm_torch__helper_error, sizeof hbm_torch__helper_error) == HBM_OK
               ? 0
               : -1;
}

HBM_TORCH_EXPORT int hbm_torch_device_used(int device) { return existing(device) != NULL; }

/* Torch's ids of the device's graph pools: (hbmalloc id, id0, id1) triples; returns how many. */
HBM_TORCH_EXPORT long hbm_torch_pool_ids(int device, uint64_t *out, long cap)
{
    pthread_mutex_lock(&pools_lock);
    long n = 0;
    for (size_t i = 0; i < npools; i++)
        if (pools[i].device == device) {
            if (out && n < cap) {
                out[3 * n] = pools[i].pool;
                out[3 * n + 1] = pools[i].id0;
                out[3 * n + 2] = pools[i].id1;
            }
            n++;
        }
    pthread_mutex_unlock(&pools_lock);
    return n;
}

HBM_TORCH_EXPORT int hbm_torch_captures_underway(int device)
{
    hbm_allocator *a = existing(device);
    return a ? hbm_captures_underway(a) : 0;
}

HBM_TORCH_EXPORT const char *hbm_torch_error(void)
{
    pthread_once(&once, open_devices);
    if (hbm_torch__helper_error[0])
        return hbm_torch__helper_error;
    return devices ? hbm_devices_error(devices) : open_error;
}

/* The torch_npu release tag hbmalloc reads a torch_npu version as ("v6.0.rc2-pytorch2.1.0"), or NULL: use() sets the
 * C record-stream hook on the releases whose hook takes an aclrtStream. */
HBM_TORCH_EXPORT const char *hbm_torch_npu_release(const char *version)
{
    static __thread char tag[96];
    if (!version || hbm_release_describe(HBM_DIALECT_NPU, version, NULL, 0, tag, sizeof tag) != HBM_OK || !tag[0])
        return NULL;
    return tag;
}
