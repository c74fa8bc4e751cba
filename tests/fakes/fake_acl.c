/*
 * fake_acl.c: a stand-in libascendcl.so for testing the Ascend backend
 * without an NPU. The AscendCL entry points the backend uses (ABI as acl_rt.h
 * declares them), backed by host memory for aclrtMalloc and by bookkeeping for
 * virtual memory, with the runtime's rules enforced so a wrong call fails as it
 * would on a device (sources in docs/CONTRACTS.md):
 *   - contexts: aclrtSetDevice creates the device's default context on its
 *     first call (counted per device: a rank must create none on another card)
 *     and takes a reference that aclrtResetDevice returns; the current context
 *     is per thread (aclrtGetCurrentContext / aclrtSetCurrentContext, which
 *     takes no reference); memory calls need one;
 *   - aclInit takes a reference each time, answering 100002
 *     (ACL_ERROR_REPEAT_INITIALIZE) after the first; aclFinalize drops every
 *     reference at once, for every user; aclFinalizeReference drops one;
 *   - aclrtMalloc aligns to 32 bytes and adds 32; aclrtMallocAlign32 does not pad;
 *   - device work (fake_work.h): fake_acl_launch queues work that completes
 *     later; aclrtFree and aclrtUnmapMem do not wait for it (the CANN aclrtFree
 *     page: no implicit device or stream synchronization), so freeing or
 *     unmapping memory queued work still touches is a violation;
 *     aclrtSynchronizeStream/Device/Event complete it; events complete with the
 *     work before them on their stream, and a never-recorded event reports not
 *     ready;
 *   - physical props checked field by field (memAttr, location id then type),
 *     maps of one whole handle at a 2 MiB-aligned address inside a
 *     reservation, unmap and release by start address only, release only when
 *     nothing is mapped;
 *   - pinned host memory (aclrtMallocHost, aclrtFreeHost) and aclrtMemcpyAsync
 *     (kinds HOST_TO_DEVICE = 1, DEVICE_TO_HOST = 2: acl_rt.h:76-80), a copy
 *     being work on its stream that "aclrtSynchronizeStream" completes
 *     (acl_rt.h:903-924); a physical page has bytes, so copies move real
 *     contents (fake_acl_poke / fake_acl_peek: a kernel writing or reading);
 *     freeing a host buffer a queued copy uses is a violation, and so is a copy
 *     of memory another stream's queued work uses.
 *
 * Built twice: libfakeacl.so (CANN 8: everything) and, with FAKE_ACL_CANN6,
 * libfakeacl_old.so (no virtual-memory functions, no aclrtQueryEventStatus,
 * no aclsysGetCANNVersion, no aclFinalizeReference, aclInit callable once per
 * process).
 *
 * Modes, from fake_acl_set() or from the environment at first use
 * (FAKE_ACL_MEMORY bytes, FAKE_ACL_DEVICES, FAKE_ACL_VMM, FAKE_ACL_DRIVER,
 * FAKE_ACL_SOC): vmm=0 makes the reserve probe fail with 207000 and the
 * recent-error text of a driver/firmware mismatch (the field report);
 * fail_nth/fail_code inject a failure at the Nth call. fake_acl_outstanding()
 * says what is still allocated, reserved, created, mapped, alive, set or
 * initialised; fake_acl_violations() what device work was broken.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_work.h"

#define API __attribute__((visibility("default")))

typedef int aclError;

enum {
    OK = 0,
    INVALID_PARAM = 100000,
    UNINITIALIZE = 100001,
    REPEAT_INITIALIZE = 100002,
    RT_PARAM_INVALID = 107000,
    INVALID_DEVICEID = 107001,
    CONTEXT_NULL = 107002,
    INVALID_HANDLE = 107017,
    FEATURE_NOT_SUPPORT = 207000,
    MEMORY_ALLOCATION = 207001,
    DRV_INTERNAL = 507899
};

#define MAX 4096
#define PAGE ((size_t)2 << 20)

typedef struct prop {
    int handleType, allocationType, memAttr;
    unsigned id;
    int type;
    unsigned long long reserve;
} prop;

typedef struct cannver {
    char version[128];
    char parts[4][64];
    char reserved[128];
} cannver;

static struct {
    long memory, devices, vmm, fail_nth, fail_code;
    long calls, used;
    int init;            /* aclInit references */
    long set_refs[8];    /* aclrtSetDevice minus aclrtResetDevice, per device: its default context lives while > 0 */
    long ctx_created[8]; /* default contexts created, per device */
    char driver[64], soc[64];
    struct {
        void *p;
        size_t size;
    } allocs[MAX];
    struct {
        uintptr_t va;
        size_t size;
        int huge;
    } resv[MAX];
    struct {
        size_t size;
        int live, mapped;
        unsigned char *mem;
    } handles[MAX];
    struct {
        void *p;
        size_t size;
    } hosts[MAX];
    struct {
        uintptr_t va;
        size_t size;
        long h;
    } maps[MAX];
    struct {
        int live, recorded, device;
        void *stream;
        unsigned long seq;
    } events[MAX];
    long nhandles, nevents;
    uintptr_t next_va;
    int ready;
} F;

#define FM_HANDLE(h) (h)
#include "fake_memory.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int current = -1; /* the device of the thread's current context; -1: none */
static __thread char recent[256];

API void fake_acl_reset(void);
API void fake_acl_set(const char *key, long value);
API void fake_acl_set_str(const char *key, const char *value);
API void fake_acl_outstanding(long out[7]);
API aclError fake_acl_launch(void *stream, void *ptr, size_t size);
API aclError fake_acl_first_use(void *stream, void *ptr, size_t size);
API void fake_acl_progress(long n);
API long fake_acl_violations(char *buf, size_t len);
API long fake_acl_contexts(int device);
API int fake_acl_current(void);
API void fake_acl_set_host_busy(int (*busy)(uintptr_t, uintptr_t, int, void *, int));
API long fake_acl_device_syncs(void);

static long env_long(const char *name, long dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtol(v, NULL, 10) : dflt;
}

API int fake_acl_poke(void *va, const void *src, size_t n);
API int fake_acl_peek(void *va, void *dst, size_t n);
API long fake_acl_hosts(void);
API const char *fake_acl_log(void);

API void fake_acl_reset(void)
{
    for (long i = 0; i < F.nhandles; i++)
        handle_bytes_free(F.handles[i].mem, F.handles[i].size);
    for (int i = 0; i < MAX; i++)
        free(F.hosts[i].p);
    memset(&F, 0, sizeof F);
    F.memory = env_long("FAKE_ACL_MEMORY", 1L << 30);
    F.devices = env_long("FAKE_ACL_DEVICES", 1);
    F.vmm = env_long("FAKE_ACL_VMM", 1);
    F.fail_code = DRV_INTERNAL;
    const char *d = getenv("FAKE_ACL_DRIVER"), *s = getenv("FAKE_ACL_SOC");
    snprintf(F.driver, sizeof F.driver, "%s", d && *d ? d : "24.1.rc3");
    snprintf(F.soc, sizeof F.soc, "%s", s && *s ? s : "Ascend910B3");
    F.next_va = 0x12c000000000ull;
    F.ready = 1;
    current = -1;
    fw_reset();
}

API void fake_acl_set(const char *key, long value)
{
    if (!F.ready)
        fake_acl_reset();
    if (!strcmp(key, "memory"))
        F.memory = value;
    else if (!strcmp(key, "devices"))
        F.devices = value;
    else if (!strcmp(key, "vmm"))
        F.vmm = value;
    else if (!strcmp(key, "fail_nth")) {
        F.fail_nth = value;
        F.calls = 0;
    } else if (!strcmp(key, "fail_code"))
        F.fail_code = value;
    else if (!strcmp(key, "log")) {
        L.on = (int)value;
        L.n = 0;
        L.text[0] = 0;
    } /* fake_acl_log: the calls */
}

API void fake_acl_set_str(const char *key, const char *value)
{
    if (!F.ready)
        fake_acl_reset();
    if (!strcmp(key, "driver"))
        snprintf(F.driver, sizeof F.driver, "%s", value);
    else if (!strcmp(key, "soc"))
        snprintf(F.soc, sizeof F.soc, "%s", value);
}

API void fake_acl_outstanding(long out[7])
{
    long a = 0, r = 0, h = 0, m = 0, e = 0, s = 0;
    for (int i = 0; i < MAX; i++) {
        a += F.allocs[i].p != NULL;
        r += F.resv[i].size != 0;
        m += F.maps[i].size != 0;
    }
    for (long i = 0; i < F.nhandles; i++)
        h += F.handles[i].live;
    for (long i = 0; i < F.nevents; i++)
        e += F.events[i].live;
    for (int i = 0; i < 8; i++)
        s += F.set_refs[i];
    out[0] = a, out[1] = r, out[2] = h, out[3] = m, out[4] = e, out[5] = s, out[6] = F.init;
}

static aclError fail(aclError rc, const char *msg)
{
    snprintf(recent, sizeof recent, "%s", msg);
    return rc;
}

/* The references aclrtSetDevice took on device d, read under the lock: the runtime's context calls are thread-safe,
 * and any thread (a library's own, such as hbmalloc's refresher) may make them while another sets a device. */
static long set_refs(int d)
{
    pthread_mutex_lock(&lock);
    long n = F.set_refs[d];
    pthread_mutex_unlock(&lock);
    return n;
}

/* Every runtime call counts; the Nth fails with fail_code. Memory calls need a current device. */
static aclError enter(int need_device)
{
    if (!F.ready)
        fake_acl_reset();
    if (F.fail_nth && ++F.calls == F.fail_nth)
        return fail((aclError)F.fail_code, "EE9999: injected failure");
    if (!F.init)
        return fail(UNINITIALIZE, "EH0001: aclInit has not been called");
    if (need_device && (current < 0 || !set_refs(current)))
        return fail(CONTEXT_NULL, "EE1001: no device is set on this thread (aclrtSetDevice)");
    return OK;
}

#define ENTER(need)                \
    do {                           \
        aclError e_ = enter(need); \
        if (e_)                    \
            return e_;             \
    } while (0)

/* acl_rt.h (ACL 1.15) and the runtime's acl.cpp: every aclInit takes a reference; the repeated ones answer
 * ACL_ERROR_REPEAT_INITIALIZE. CANN 6: "can be called only once in a process". */
API aclError aclInit(const char *config)
{
    (void)config;
    if (!F.ready)
        fake_acl_reset();
#ifdef FAKE_ACL_CANN6
    if (F.init)
        return fail(REPEAT_INITIALIZE, "EH0002: repeated initialisation");
    F.init = 1;
    return OK;
#else
    return F.init++ ? fail(REPEAT_INITIALIZE, "EH0002: repeated initialisation") : OK;
#endif
}

/* aclFinalize ends the runtime for every user of the process, whatever the count. */
API aclError aclFinalize(void)
{
    if (F.init <= 0)
        return fail(UNINITIALIZE, "EH0001: aclFinalize without aclInit");
    F.init = 0;
    return OK;
}

#ifndef FAKE_ACL_CANN6
/* aclFinalizeReference(uint64_t *refCount): drops one reference, says how many are left. */
API aclError aclFinalizeReference(uint64_t *left)
{
    if (F.init <= 0)
        return fail(UNINITIALIZE, "EH0001: aclFinalizeReference without aclInit");
    F.init--;
    if (left)
        *left = (uint64_t)F.init;
    return OK;
}
#endif

API aclError aclrtGetDeviceCount(unsigned *n)
{
    ENTER(0);
    *n = (unsigned)F.devices;
    return OK;
}

API aclError aclrtSetDevice(int d)
{
    ENTER(0);
    if (d < 0 || d >= F.devices || d >= 8)
        return fail(INVALID_DEVICEID, "EE1001: device id out of range");
    pthread_mutex_lock(&lock);
    if (F.set_refs[d]++ == 0) /* its default context and stream come to life */
        F.ctx_created[d]++;
    pthread_mutex_unlock(&lock);
    current = d;
    return OK;
}

API aclError aclrtResetDevice(int d)
{
    ENTER(0);
    if (d < 0 || d >= F.devices || d >= 8 || set_refs(d) <= 0)
        return fail(INVALID_DEVICEID, "EE1001: reset of a device that was not set");
    pthread_mutex_lock(&lock);
    if (--F.set_refs[d] == 0) {
        fw_complete_device(d); /* resetting the device ends its work */
        if (current == d)
            current = -1;
    }
    pthread_mutex_unlock(&lock);
    return OK;
}

/* Contexts are named by their device: 0x1000 + device (the default context is the only one modelled). */
API aclError aclrtGetCurrentContext(void **ctx)
{
    ENTER(0);
    if (current < 0 || !set_refs(current))
        return fail(CONTEXT_NULL, "EE1001: the thread has no current context");
    *ctx = (void *)(uintptr_t)(0x1000 + current);
    return OK;
}

API aclError aclrtSetCurrentContext(void *ctx)
{
    ENTER(0);
    long d = (long)(uintptr_t)ctx - 0x1000;
    if (d < 0 || d >= 8 || !set_refs((int)d))
        return fail(CONTEXT_NULL, "EE1001: aclrtSetCurrentContext of a context that does not exist");
    current = (int)d;
    return OK;
}

API aclError aclrtGetDevice(int *d)
{
    ENTER(0);
    if (current < 0 || !set_refs(current))
        return fail(CONTEXT_NULL, "EE1001: no device is set on this thread");
    *d = current;
    return OK;
}

static aclError device_malloc(void **p, size_t size, int policy, size_t real)
{
    ENTER(1);
    if (!size || policy < 0 || policy > 7)
        return fail(INVALID_PARAM, "EE1003: invalid size or policy");
    pthread_mutex_lock(&lock);
    aclError rc = OK;
    int slot = -1;
    for (int i = 0; i < MAX && slot < 0; i++)
        if (!F.allocs[i].p)
            slot = i;
    if (F.used + (long)real > F.memory || slot < 0)
        rc = fail(MEMORY_ALLOCATION, "EL0004: Failed to allocate memory.");
    else if (!(*p = malloc(real)))
        rc = fail(MEMORY_ALLOCATION, "EL0004: host malloc failed");
    else {
        F.allocs[slot].p = *p, F.allocs[slot].size = real;
        F.used += (long)real;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The runtime's memory.cpp: aclrtMalloc aligns the size to 32 bytes and adds 32. */
API aclError aclrtMalloc(void **p, size_t size, int policy)
{
    return device_malloc(p, size, policy, (size + 63) / 32 * 32);
}

/* torch_npu's segments: no pad (the size must be what the caller asked). */
API aclError aclrtMallocAlign32(void **p, size_t size, int policy)
{
    return device_malloc(p, size, policy, (size + 31) / 32 * 32);
}

/* No implicit device or stream synchronization: queued work on the memory is a use-after-free. */
API aclError aclrtFree(void *p)
{
    ENTER(1);
    pthread_mutex_lock(&lock);
    aclError rc = fail(RT_PARAM_INVALID, "EE1003: aclrtFree of an unknown pointer");
    for (int i = 0; i < MAX; i++)
        if (p && F.allocs[i].p == p) {
            if (fw_busy((uintptr_t)p, (uintptr_t)p + F.allocs[i].size, 0, NULL, 0))
                fw_violation("aclrtFree(%p, %zu bytes) while queued work still uses it: aclrtFree does not wait "
                             "for the device",
                             p, F.allocs[i].size);
            F.used -= (long)F.allocs[i].size;
            free(p);
            F.allocs[i].p = NULL;
            rc = OK;
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

API aclError aclrtGetMemInfo(int attr, size_t *free_bytes, size_t *total)
{
    ENTER(1);
    if (attr != 1) /* ACL_HBM_MEM, as torch_npu asks */
        return fail(INVALID_PARAM, "EE1003: memory attribute is not ACL_HBM_MEM");
    *free_bytes = (size_t)(F.memory - F.used);
    *total = (size_t)F.memory;
    return OK;
}

/* ---- events ---- */
static long event_index(void *ev) { return (long)(uintptr_t)ev - 1; }

static aclError new_event(void **ev)
{
    ENTER(1);
    pthread_mutex_lock(&lock);
    aclError rc = OK;
    if (F.nevents >= MAX)
        rc = fail(MEMORY_ALLOCATION, "EE1005: too many events");
    else {
        F.events[F.nevents].live = 1;
        *ev = (void *)(uintptr_t)++F.nevents;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static int event_ok(void *ev)
{
    long i = event_index(ev);
    return i >= 0 && i < F.nevents && F.events[i].live;
}

API aclError aclrtCreateEvent(void **ev) { return new_event(ev); }

#ifndef FAKE_ACL_CANN6
API aclError aclrtCreateEventExWithFlag(void **ev, unsigned flag)
{
    if (flag & ~0x6fu)
        return fail(INVALID_PARAM, "EE1003: unknown event flag");
    return new_event(ev);
}
#endif

/* The event completes with the work queued on the stream before it. */
API aclError aclrtRecordEvent(void *ev, void *stream)
{
    ENTER(1);
    if (!event_ok(ev))
        return fail(INVALID_HANDLE, "EE1003: record of an unknown event");
    long i = event_index(ev);
    F.events[i].recorded = 1;
    F.events[i].device = current;
    F.events[i].stream = stream;
    F.events[i].seq = fw_last_seq(current, stream);
    return OK;
}

static int event_done(long i)
{
    return F.events[i].recorded && !fw_pending(F.events[i].device, F.events[i].stream, F.events[i].seq);
}

#ifndef FAKE_ACL_CANN6
API aclError aclrtQueryEventStatus(void *ev, int *status)
{
    ENTER(1);
    if (!event_ok(ev))
        return fail(INVALID_HANDLE, "EE1003: query of an unknown event");
    long i = event_index(ev);
    *status = event_done(i); /* ACL_EVENT_RECORDED_STATUS_COMPLETE = 1; never recorded: not ready */
    return OK;
}
#endif

API aclError aclrtQueryEvent(void *ev, int *status)
{
    ENTER(1);
    if (!event_ok(ev))
        return fail(INVALID_HANDLE, "EE1003: query of an unknown event");
    long i = event_index(ev);
    *status = event_done(i) ? 0 : 1; /* deprecated: ACL_EVENT_STATUS_COMPLETE = 0, NOT_READY = 1 */
    return OK;
}

API aclError aclrtSynchronizeEvent(void *ev)
{
    ENTER(1);
    if (!event_ok(ev))
        return fail(INVALID_HANDLE, "EE1003: synchronize of an unknown event");
    long i = event_index(ev);
    if (F.events[i].recorded)
        fw_complete_stream(F.events[i].device, F.events[i].stream, F.events[i].seq);
    return OK;
}

API aclError aclrtDestroyEvent(void *ev)
{
    ENTER(1);
    if (!event_ok(ev))
        return fail(INVALID_HANDLE, "EE1003: destroy of an unknown event");
    F.events[event_index(ev)].live = 0;
    return OK;
}

API aclError aclrtSynchronizeStream(void *stream)
{
    ENTER(1);
    fw_note("aclrtSynchronizeStream");
    fw_complete_stream(current, stream, ~0ul);
    return OK;
}

static long device_syncs; /* aclrtSynchronizeDevice calls: device-wide waits (fake_acl_device_syncs) */

/* The current device's work, every stream. */
API aclError aclrtSynchronizeDevice(void)
{
    ENTER(1);
    fw_note("aclrtSynchronizeDevice");
    __atomic_add_fetch(&device_syncs, 1, __ATOMIC_RELAXED);
    fw_complete_device(current);
    return OK;
}

/* ---- pinned host memory and copies ---- */

API aclError aclrtMallocHost(void **p, size_t size)
{
    ENTER(1);
    fw_note("aclrtMallocHost");
    if (!p || !size)
        return fail(INVALID_PARAM, "EE1003: aclrtMallocHost: size 0");
    pthread_mutex_lock(&lock);
    aclError rc = fail(MEMORY_ALLOCATION, "EL0004: host memory allocation failed");
    for (int i = 0; i < MAX; i++)
        if (!F.hosts[i].p) {
            if ((F.hosts[i].p = malloc(size))) {
                F.hosts[i].size = size;
                *p = F.hosts[i].p;
                rc = OK;
            }
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

API aclError aclrtFreeHost(void *p)
{
    ENTER(1);
    fw_note("aclrtFreeHost");
    pthread_mutex_lock(&lock);
    long i = host_slot((uintptr_t)p, 1);
    aclError rc = OK;
    if (i < 0 || F.hosts[i].p != p) {
        rc = fail(RT_PARAM_INVALID, "EE1003: aclrtFreeHost of memory aclrtMallocHost did not give");
    } else {
        if (fw_host_queued((uintptr_t)p, (uintptr_t)p + F.hosts[i].size))
            fw_violation("aclrtFreeHost(%p) while a queued copy still uses it", p);
        free(p);
        F.hosts[i].p = NULL;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Between pinned host memory and allocated or mapped device memory, queued on `stream` of the current device. */
API aclError aclrtMemcpyAsync(void *dst, size_t destMax, const void *src, size_t count, int kind, void *stream)
{
    ENTER(1);
    fw_note("aclrtMemcpyAsync");
    if (kind != 1 && kind != 2)
        return fail(INVALID_PARAM, "EE1003: aclrtMemcpyAsync: only HOST_TO_DEVICE (1) and DEVICE_TO_HOST (2) here");
    if (!count || count > destMax)
        return fail(INVALID_PARAM, "EE1003: aclrtMemcpyAsync: count 0 or larger than destMax");
    uintptr_t dev = (uintptr_t)(kind == 2 ? src : dst);
    void *host = kind == 2 ? dst : (void *)src;
    pthread_mutex_lock(&lock);
    aclError rc = OK;
    if (host_slot((uintptr_t)host, count) < 0) {
        rc = fail(INVALID_PARAM, "EE1003: aclrtMemcpyAsync: the host side is not memory aclrtMallocHost gave");
    } else if (!allocated(dev, dev + count)) {
        fw_violation("copy %s [%p, +%zu) on device %d, which is not allocated or mapped", kind == 2 ? "from" : "to",
                     (void *)dev, count, current);
        rc = fail(RT_PARAM_INVALID, "EE1003: aclrtMemcpyAsync: device memory not allocated or mapped");
    } else {
        if (fw_busy(dev, dev + count, current, stream, 1))
            fw_violation("copy %s [%p, +%zu) on stream %p while another stream's work on it is still queued",
                         kind == 2 ? "from" : "to", (void *)dev, count, stream);
        device_bytes(dev, host, count, kind == 2);
        if (fw_launch_copy(current, stream, dev, count, (uintptr_t)host))
            rc = fail(MEMORY_ALLOCATION, "EE1005: too much queued work");
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

API int fake_acl_poke(void *va, const void *src, size_t n)
{
    return device_bytes((uintptr_t)va, (unsigned char *)src, n, 0);
}

API int fake_acl_peek(void *va, void *dst, size_t n) { return device_bytes((uintptr_t)va, dst, n, 1); }

/* The virtual-memory, copy, host and synchronize calls since fake_acl_set("log", 1), in order. */
API const char *fake_acl_log(void) { return L.text; }

API long fake_acl_hosts(void)
{
    long n = 0;
    for (int i = 0; i < MAX; i++)
        n += F.hosts[i].p != NULL;
    return n;
}

/* ---- the tests' side: work on the device, and what it saw ---- */

/* A kernel touching [ptr, ptr + size) queued on `stream` of the current device. */
API aclError fake_acl_launch(void *stream, void *ptr, size_t size)
{
    ENTER(1);
    pthread_mutex_lock(&lock);
    if (!allocated((uintptr_t)ptr, (uintptr_t)ptr + size))
        fw_violation("work launched on [%p, +%zu) on device %d, which is not allocated or mapped", ptr, size, current);
    int rc = fw_launch(current, stream, (uintptr_t)ptr, size);
    pthread_mutex_unlock(&lock);
    return rc ? fail(MEMORY_ALLOCATION, "EE1005: too much queued work") : OK;
}

/* A new owner's first use of a block it was just given, on its stream: another stream's queued work on the
 * memory means the allocator handed it out too early. */
API aclError fake_acl_first_use(void *stream, void *ptr, size_t size)
{
    ENTER(1);
    if (fw_busy((uintptr_t)ptr, (uintptr_t)ptr + size, current, stream, 1))
        fw_violation("block [%p, +%zu) handed to stream %p while another stream's work on it is still queued", ptr,
                     size, stream);
    return fake_acl_launch(stream, ptr, size);
}

API void fake_acl_progress(long n) { fw_progress(n); }
API long fake_acl_device_syncs(void) { return __atomic_load_n(&device_syncs, __ATOMIC_RELAXED); }
API long fake_acl_violations(char *buf, size_t len) { return fw_violations(buf, len); }
API long fake_acl_contexts(int device) { return device >= 0 && device < 8 ? F.ctx_created[device] : -1; }
API int fake_acl_current(void) { return current >= 0 && set_refs(current) ? current : -1; }
API void fake_acl_set_host_busy(int (*busy)(uintptr_t, uintptr_t, int, void *, int)) { W.host_busy = busy; }

API const char *aclGetRecentErrMsg(void) { return recent[0] ? recent : NULL; }
API aclError aclrtGetVersion(int *a, int *b, int *c)
{
    *a = 1, *b = 15, *c = 0;
    return OK;
}
API const char *aclrtGetSocName(void) { return F.ready ? F.soc : "Ascend910B3"; }

#ifndef FAKE_ACL_CANN6
/* CANN 8.x's aclrtGetLogicDevIdByUserDevId (the CANN 6 build lacks it): the user id's logical id, the userDevid-th
 * entry of ASCEND_RT_VISIBLE_DEVICES, the same id without it (its CANN page, "用户设备ID、逻辑设备ID、物理设备ID之间的
 * 关系"). */
API aclError aclrtGetLogicDevIdByUserDevId(const int userDevid, int *const logicDevId)
{
    if (!logicDevId || userDevid < 0 || userDevid >= F.devices)
        return fail(INVALID_PARAM, "EE1003: no such user device id");
    const char *v = getenv("ASCEND_RT_VISIBLE_DEVICES");
    int id = userDevid;
    for (int k = 0; v && *v; k++) {
        char *end;
        long x = strtol(v, &end, 10);
        if (end == v)
            return fail(INVALID_PARAM, "EE1003: ASCEND_RT_VISIBLE_DEVICES is not a list of ids");
        if (k == userDevid) {
            id = (int)x;
            break;
        }
        v = *end ? end + 1 : end;
    }
    *logicDevId = id;
    return OK;
}

API aclError aclsysGetCANNVersion(int name, cannver *v)
{
    if (name != 7)
        return fail(INVALID_PARAM, "EE1003: only the driver package is known here");
    memset(v, 0, sizeof *v);
    snprintf(v->version, sizeof v->version, "%s", F.ready ? F.driver : "24.1.rc3");
    return OK;
}

/* ---- virtual memory (CANN 7.0.0 and later) ---- */
static int find_resv(uintptr_t va)
{
    for (int i = 0; i < MAX; i++)
        if (F.resv[i].size && va >= F.resv[i].va && va < F.resv[i].va + F.resv[i].size)
            return i;
    return -1;
}

API aclError aclrtReserveMemAddress(void **va, size_t size, size_t alignment, void *expect, unsigned long long flags)
{
    ENTER(1);
    if (!F.vmm) /* old firmware, or firmware outside the driver's compatible range */
        return fail(FEATURE_NOT_SUPPORT, "EE1005: Feature is not supported and the possible cause is that driver "
                                         "and firmware packages do not match.");
    if (!size || alignment || expect || flags > 1)
        return fail(INVALID_PARAM, "EE1003: reserve: size 0, or alignment/expectPtr not 0, or flags not 0/1");
    pthread_mutex_lock(&lock);
    aclError rc = fail(MEMORY_ALLOCATION, "EE1005: no reservation slot");
    for (int i = 0; i < MAX; i++)
        if (!F.resv[i].size) {
            size_t rounded = (size + PAGE - 1) / PAGE * PAGE;
            F.resv[i].va = F.next_va, F.resv[i].size = rounded, F.resv[i].huge = (int)flags;
            F.next_va += rounded + PAGE; /* a gap between reservations */
            *va = (void *)F.resv[i].va;
            rc = OK;
            break;
        }
    pthread_mutex_unlock(&lock);
    return rc;
}

API aclError aclrtReleaseMemAddress(void *va)
{
    ENTER(1);
    int r = find_resv((uintptr_t)va);
    if (r < 0 || F.resv[r].va != (uintptr_t)va)
        return fail(RT_PARAM_INVALID, "EE1003: release of an address that does not start a reservation");
    for (int i = 0; i < MAX; i++)
        if (F.maps[i].size && find_resv(F.maps[i].va) == r)
            return fail(RT_PARAM_INVALID, "EE1003: release of a reservation that still has mappings");
    F.resv[r].size = 0;
    return OK;
}

API aclError aclrtMallocPhysical(void **h, size_t size, const prop *p, unsigned long long flags)
{
    ENTER(1);
    fw_note("aclrtMallocPhysical");
    if (!size || size % PAGE || flags || !p)
        return fail(INVALID_PARAM, "EE1003: physical size not a multiple of 2 MiB, or flags not 0");
    if (p->handleType != 0 || p->allocationType != 0 || (p->memAttr != 4 && p->memAttr != 5) || p->type != 1 ||
        (int)p->id != current || p->reserve)
        return fail(INVALID_PARAM, "EE1003: aclrtPhysicalMemProp: bad handle type, allocation type, memAttr or "
                                   "location (id, then type DEVICE, must name the current device)");
    pthread_mutex_lock(&lock);
    aclError rc = OK;
    unsigned char *mem = NULL;
    if (F.used + (long)size > F.memory || F.nhandles >= MAX || !(mem = handle_bytes(size)))
        rc = fail(MEMORY_ALLOCATION, "EL0004: Failed to allocate memory.");
    else {
        F.handles[F.nhandles].size = size, F.handles[F.nhandles].live = 1, F.handles[F.nhandles].mem = mem;
        *h = (void *)(uintptr_t)++F.nhandles;
        F.used += (long)size;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static long handle_index(void *h) { return (long)(uintptr_t)h - 1; }

API aclError aclrtFreePhysical(void *h)
{
    ENTER(1);
    fw_note("aclrtFreePhysical");
    long i = handle_index(h);
    if (i < 0 || i >= F.nhandles || !F.handles[i].live)
        return fail(INVALID_HANDLE, "EE1003: free of an unknown physical handle");
    if (F.handles[i].mapped)
        return fail(RT_PARAM_INVALID, "EE1003: free of a physical handle that is still mapped");
    F.handles[i].live = 0;
    handle_bytes_free(F.handles[i].mem, F.handles[i].size);
    F.handles[i].mem = NULL;
    F.used -= (long)F.handles[i].size;
    return OK;
}

API aclError aclrtMapMem(void *va, size_t size, size_t offset, void *h, unsigned long long flags)
{
    ENTER(1);
    fw_note("aclrtMapMem");
    uintptr_t v = (uintptr_t)va;
    long hi = handle_index(h);
    int r = find_resv(v);
    if (hi < 0 || hi >= F.nhandles || !F.handles[hi].live || F.handles[hi].mapped)
        return fail(INVALID_HANDLE, "EE1003: map of an unknown or already mapped handle");
    if (v % PAGE || offset || flags || size != F.handles[hi].size)
        return fail(INVALID_PARAM, "EE1003: map: address not 2 MiB aligned, offset/flags not 0, or size is not "
                                   "the physical size");
    if (r < 0 || v + size > F.resv[r].va + F.resv[r].size || !F.resv[r].huge)
        return fail(RT_PARAM_INVALID, "EE1003: map outside a huge-page reservation");
    int slot = -1;
    for (int i = 0; i < MAX; i++) {
        if (F.maps[i].size && v < F.maps[i].va + F.maps[i].size && F.maps[i].va < v + size)
            return fail(RT_PARAM_INVALID, "EE1003: map over an existing mapping");
        if (!F.maps[i].size && slot < 0)
            slot = i;
    }
    if (slot < 0)
        return fail(MEMORY_ALLOCATION, "EE1005: no mapping slot");
    F.maps[slot].va = v, F.maps[slot].size = size, F.maps[slot].h = hi;
    F.handles[hi].mapped = 1;
    return OK;
}

/* No synchronization either: queued work on the pages is a use-after-free. */
API aclError aclrtUnmapMem(void *va)
{
    ENTER(1);
    fw_note("aclrtUnmapMem");
    for (int i = 0; i < MAX; i++)
        if (F.maps[i].size && F.maps[i].va == (uintptr_t)va) {
            if (fw_busy(F.maps[i].va, F.maps[i].va + F.maps[i].size, 0, NULL, 0))
                fw_violation("aclrtUnmapMem(%p, %zu bytes) while queued work still uses it", va, F.maps[i].size);
            F.handles[F.maps[i].h].mapped = 0;
            F.maps[i].size = 0;
            return OK;
        }
    return fail(RT_PARAM_INVALID, "EE1003: unmap of an address that does not start a mapping");
}

API aclError aclrtMemGetAllocationGranularity(prop *p, int option, size_t *g)
{
    ENTER(1);
    if (!p || (option != 0 && option != 1))
        return fail(INVALID_PARAM, "EE1003: granularity: bad prop or option");
    *g = PAGE;
    return OK;
}
#endif
