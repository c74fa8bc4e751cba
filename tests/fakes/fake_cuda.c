/*
 * fake_cuda.c: a stand-in libcuda.so for testing the CUDA backend without a
 * GPU. The same entry points (ABI as cuda.h declares them), backed by host
 * memory for cuMemAlloc and by bookkeeping for virtual memory, with modes a
 * test sets through fake_cuda_set(): device memory, device count, driver
 * version, whether virtual memory is supported, which cuGetProcAddress the
 * library offers, and "fail the Nth call" fault injection. fake_cuda_outstanding()
 * says what is still allocated, reserved, created, mapped or alive.
 *
 * What can bite an allocator is modelled from cuda.h (CUDA 13; docs/CONTRACTS.md):
 *   - the current context is per thread (cuCtxGetCurrent / cuCtxSetCurrent),
 *     primary contexts are retained per device and counted;
 *   - device work (fake_work.h): fake_cuda_launch queues work that completes
 *     later, in stream order, at cuStreamSynchronize / cuCtxSynchronize /
 *     cuEventSynchronize; events complete with the work before them;
 *     cuMemUnmap does not wait for it, and cuMemFree "may perform implicit
 *     synchronization": by default it does not here (the contract's worst
 *     case; free_syncs=1 makes it wait, as drivers commonly do);
 *   - access: a mapping has none until cuMemSetAccess, per device; peer devices
 *     (cuDeviceCanAccessPeer) need their own descriptor, and one for a device
 *     that cannot reach the page's owner is refused (the real driver refuses
 *     it too; which code it gives is not modelled);
 *   - pinned host memory (cuMemHostAlloc, cuMemFreeHost, which does not wait:
 *     cuda.h:8823 has no synchronization note) and asynchronous copies
 *     (cuMemcpyDtoHAsync_v2, cuMemcpyHtoDAsync_v2, \note_async) that are work on
 *     their stream (fake_work.h); a physical page has bytes (its handle's), so a
 *     copy moves real contents, which fake_cuda_poke / fake_cuda_peek (a kernel
 *     writing or reading) see. A copy of pageable memory is refused (hbmalloc
 *     passes pinned memory only; the real driver would make it synchronous).
 *
 * It also exports the plain legacy name cuMemAlloc with the CUDA 2.0 ABI
 * (32-bit size): a loader that took it instead of cuMemAlloc_v2 fails loudly.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake_work.h"

#define API __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum {
    OK = 0,
    INVALID_VALUE = 1,
    OOM = 2,
    NOT_INITIALIZED = 3,
    INVALID_DEVICE = 101,
    PEER_ACCESS_UNSUPPORTED = 217,
    NOT_FOUND = 500,
    NOT_READY = 600,
    NOT_SUPPORTED = 801,
    INJECTED = 999
};

#define MAX 4096

static struct {
    long memory, devices, version, vmm, getproc, fail_nth, fail_code, free_syncs, peers;
    long calls, used, access_calls, access_descriptors; /* cuMemSetAccess: calls, descriptors in them */
    int initialised;
    struct {
        void *p;
        size_t size;
    } allocs[MAX];
    struct {
        CUdeviceptr va;
        size_t size;
    } resv[MAX];
    struct {
        size_t size;
        int live, mapped, device; /* device: the owner (the prop's location) */
        unsigned char *mem;
    } handles[MAX];
    struct {
        void *p;
        size_t size;
    } hosts[MAX];
    long nhandles;
    struct {
        CUdeviceptr va;
        size_t size;
        unsigned long long h;
        unsigned access;
    } maps[MAX]; /* access: by device */
    struct {
        int live, recorded, device;
        void *stream;
        unsigned long seq;
    } events[MAX];
    long nevents;
    CUdeviceptr next_va;
    int ctx_retained[8], ctx_created[8];
    long allocs_relaxed, allocs_not_relaxed; /* cuMemAlloc / cuMemCreate by the thread's capture mode */
} F;

#define FM_HANDLE(h) ((h)-1)
#include "fake_memory.h"

static __thread int capture_mode; /* CUstreamCaptureMode of the calling thread; 2 = relaxed */
static __thread int current = -1; /* the device whose primary context is current on this thread; -1: none */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

API void fake_cuda_reset(void);
API void fake_cuda_set(const char *key, long value);
API void fake_cuda_outstanding(long out[5]);
API long fake_cuda_get(const char *key);
API CUresult fake_cuda_launch(void *stream, CUdeviceptr ptr, size_t size);
API CUresult fake_cuda_first_use(void *stream, CUdeviceptr ptr, size_t size);
API void fake_cuda_progress(long n);
API long fake_cuda_violations(char *buf, size_t len);
API long fake_cuda_contexts(int device);
API int fake_cuda_current(void);
API int fake_cuda_can_access(int device, CUdeviceptr ptr, size_t size);

API long fake_cuda_get(const char *key)
{
    if (!strcmp(key, "allocs_relaxed"))
        return F.allocs_relaxed;
    if (!strcmp(key, "allocs_not_relaxed"))
        return F.allocs_not_relaxed;
    if (!strcmp(key, "capture_mode"))
        return capture_mode;
    if (!strcmp(key, "launched"))
        return W.launched;
    if (!strcmp(key, "access_calls"))
        return F.access_calls;
    if (!strcmp(key, "access_descriptors"))
        return F.access_descriptors;
    if (!strcmp(key, "retained")) { /* primary-context references held, all devices */
        long n = 0;
        pthread_mutex_lock(&lock);
        for (int i = 0; i < 8; i++)
            n += F.ctx_retained[i];
        pthread_mutex_unlock(&lock);
        return n;
    }
    if (!strcmp(key, "hosts")) { /* pinned host allocations not freed */
        long n = 0;
        for (int i = 0; i < MAX; i++)
            n += F.hosts[i].p != NULL;
        return n;
    }
    return -1;
}

API int fake_cuda_poke(CUdeviceptr va, const void *src, size_t n);
API const char *fake_cuda_log(void);
API int fake_cuda_peek(CUdeviceptr va, void *dst, size_t n);

API void fake_cuda_reset(void)
{
    for (long i = 0; i < F.nhandles; i++)
        handle_bytes_free(F.handles[i].mem, F.handles[i].size);
    for (int i = 0; i < MAX; i++)
        free(F.hosts[i].p);
    memset(&F, 0, sizeof F);
    F.memory = 1L << 30;
    F.devices = 1;
    F.version = 12040;
    F.vmm = 1;
    F.getproc = 2;
    F.fail_code = INJECTED;
    F.next_va = 0x7e0000000000ull;
    F.peers = 1;
    current = -1;
    fw_reset();
}

API void fake_cuda_set(const char *key, long value)
{
    if (!F.memory)
        fake_cuda_reset();
    if (!strcmp(key, "memory"))
        F.memory = value;
    else if (!strcmp(key, "devices"))
        F.devices = value;
    else if (!strcmp(key, "version"))
        F.version = value;
    else if (!strcmp(key, "vmm"))
        F.vmm = value;
    else if (!strcmp(key, "getproc"))
        F.getproc = value;
    else if (!strcmp(key, "fail_nth")) {
        F.fail_nth = value;
        F.calls = 0;
    } else if (!strcmp(key, "fail_code"))
        F.fail_code = value;
    else if (!strcmp(key, "free_syncs"))
        F.free_syncs = value;
    else if (!strcmp(key, "peers"))
        F.peers = value; /* 1: every device can access every other's memory */
    else if (!strcmp(key, "log")) {
        L.on = (int)value;
        L.n = 0;
        L.text[0] = 0;
    } /* fake_cuda_log: the calls */
}

API void fake_cuda_outstanding(long out[5])
{
    long a = 0, r = 0, h = 0, m = 0, e = 0;
    for (int i = 0; i < MAX; i++) {
        a += F.allocs[i].p != NULL;
        r += F.resv[i].size != 0;
        m += F.maps[i].size != 0;
    }
    for (long i = 0; i < F.nhandles; i++)
        h += F.handles[i].live;
    for (long i = 0; i < F.nevents; i++)
        e += F.events[i].live;
    out[0] = a, out[1] = r, out[2] = h, out[3] = m, out[4] = e;
}

/* Every call counts; the Nth fails with fail_code. */
static int fault(void)
{
    if (!F.memory)
        fake_cuda_reset();
    return F.fail_nth && ++F.calls == F.fail_nth ? (int)F.fail_code : 0;
}

#define CHECK()                     \
    do {                            \
        int f_ = fault();           \
        if (f_)                     \
            return f_;              \
        if (!F.initialised)         \
            return NOT_INITIALIZED; \
    } while (0)

API CUresult cuInit(unsigned flags)
{
    if (!F.memory)
        fake_cuda_reset();
    if (flags)
        return INVALID_VALUE;
    F.initialised = 1;
    return OK;
}

API CUresult cuDriverGetVersion(int *v)
{
    *v = (int)(F.memory ? F.version : 12040);
    return OK;
}
API CUresult cuDeviceGetCount(int *n)
{
    CHECK();
    *n = (int)F.devices;
    return OK;
}
API CUresult cuDeviceGet(int *d, int ordinal)
{
    CHECK();
    if (ordinal < 0 || ordinal >= F.devices)
        return INVALID_DEVICE;
    *d = ordinal;
    return OK;
}
/* cuDeviceGetPCIBusId (cuda.h: "[domain]:[bus]:[device].[function]", NUL-terminated, at most len bytes): buses in an
 * order unlike CUDA's numbering, as NVML's own numbering may be (tests/fakes/fake_nvml.c numbers them 3b, 5e, 86,
 * af): a caller that took a CUDA ordinal for an NVML index would read another device. */
API CUresult cuDeviceGetPCIBusId(char *id, int len, int dev)
{
    static const unsigned bus[] = {0x5e, 0x3b, 0xaf, 0x86};
    CHECK();
    if (!id || len <= 0)
        return INVALID_VALUE;
    if (dev < 0 || dev >= F.devices || dev >= 4)
        return INVALID_DEVICE;
    char s[32];
    snprintf(s, sizeof s, "%04X:%02X:00.0", 0u, bus[dev]); /* "0000:5E:00.0" */
    if ((int)strlen(s) >= len)
        return INVALID_VALUE;
    memcpy(id, s, strlen(s) + 1);
    return OK;
}
API CUresult cuDeviceGetAttribute(int *v, int attr, int dev)
{
    CHECK();
    if (dev < 0 || dev >= F.devices)
        return INVALID_DEVICE;
    *v = attr == 102 ? (int)F.vmm : 0;
    return OK;
}
/* Primary contexts are named 0x1000 + device; retaining the first reference creates one. */
API CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
    CHECK();
    if (dev < 0 || dev >= F.devices || dev >= 8)
        return INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    if (F.ctx_retained[dev]++ == 0)
        F.ctx_created[dev]++;
    pthread_mutex_unlock(&lock);
    *ctx = (void *)(uintptr_t)(0x1000 + dev);
    return OK;
}

API CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
    if (dev < 0 || dev >= 8 || F.ctx_retained[dev] <= 0)
        return INVALID_DEVICE;
    pthread_mutex_lock(&lock);
    if (--F.ctx_retained[dev] == 0)
        fw_complete_device(dev);
    pthread_mutex_unlock(&lock);
    return OK;
}

/* NULL unbinds the thread's context. */
API CUresult cuCtxSetCurrent(void *ctx)
{
    CHECK();
    if (!ctx) {
        current = -1;
        return OK;
    }
    long d = (long)(uintptr_t)ctx - 0x1000;
    if (d < 0 || d >= 8 || !F.ctx_retained[d])
        return 201; /* CUDA_ERROR_INVALID_CONTEXT */
    current = (int)d;
    return OK;
}

API CUresult cuCtxGetCurrent(void **ctx)
{
    CHECK();
    *ctx = current >= 0 ? (void *)(uintptr_t)(0x1000 + current) : NULL;
    return OK;
}

/* Context calls need one current (CUDA_ERROR_INVALID_CONTEXT otherwise). */
#define NEED_CONTEXT()                               \
    do {                                             \
        if (current < 0 || !F.ctx_retained[current]) \
            return 201;                              \
    } while (0)

API CUresult cuCtxSynchronize(void)
{
    CHECK();
    fw_note("cuCtxSynchronize");
    NEED_CONTEXT();
    fw_complete_device(current);
    return OK;
}

API CUresult cuDeviceCanAccessPeer(int *can, int dev, int peer)
{
    CHECK();
    if (dev < 0 || dev >= F.devices || peer < 0 || peer >= F.devices)
        return INVALID_DEVICE;
    *can = dev != peer && F.peers;
    return OK;
}

API CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
    CHECK();
    NEED_CONTEXT();
    *total = (size_t)F.memory;
    *free_b = (size_t)(F.memory - F.used);
    return OK;
}

API CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
    CHECK();
    NEED_CONTEXT();
    *(capture_mode == 2 ? &F.allocs_relaxed : &F.allocs_not_relaxed) += 1;
    if (size == 0)
        return INVALID_VALUE;
    if ((long)size > F.memory - F.used)
        return OOM;
    for (int i = 0; i < MAX; i++)
        if (!F.allocs[i].p) {
            F.allocs[i].p = malloc(size);
            if (!F.allocs[i].p)
                return OOM;
            F.allocs[i].size = size;
            F.used += (long)size;
            *p = (CUdeviceptr)(uintptr_t)F.allocs[i].p;
            return OK;
        }
    return OOM;
}

/* "For all other pointers, this API may perform implicit synchronization" (cuda.h): may, so by default not. */
API CUresult cuMemFree_v2(CUdeviceptr p)
{
    CHECK();
    NEED_CONTEXT();
    if (F.free_syncs)
        fw_complete_device(current);
    for (int i = 0; i < MAX; i++)
        if (F.allocs[i].p && (CUdeviceptr)(uintptr_t)F.allocs[i].p == p) {
            if (fw_busy((uintptr_t)p, (uintptr_t)p + F.allocs[i].size, 0, NULL, 0))
                fw_violation("cuMemFree(0x%llx, %zu bytes) while queued work still uses it", p, F.allocs[i].size);
            free(F.allocs[i].p);
            F.allocs[i].p = NULL;
            F.used -= (long)F.allocs[i].size;
            return OK;
        }
    return INVALID_VALUE;
}

/* The CUDA 2.0 ABI under the plain names: never to be used by a 64-bit loader. */
API CUresult cuMemAlloc(unsigned int *p, unsigned int size)
{
    (void)p;
    (void)size;
    return NOT_SUPPORTED;
}
API CUresult cuMemFree(unsigned int p)
{
    (void)p;
    return NOT_SUPPORTED;
}
API CUresult cuMemGetInfo(unsigned int *f, unsigned int *t)
{
    (void)f;
    (void)t;
    return NOT_SUPPORTED;
}

API CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align, CUdeviceptr addr, unsigned long long fl)
{
    CHECK();
    (void)align;
    (void)addr;
    if (fl || !size || size % (2 << 20))
        return INVALID_VALUE;
    for (int i = 0; i < MAX; i++)
        if (!F.resv[i].size) {
            F.resv[i].va = F.next_va;
            F.resv[i].size = size;
            F.next_va += size + (2 << 20);
            *p = F.resv[i].va;
            return OK;
        }
    return OOM;
}

API CUresult cuMemAddressFree(CUdeviceptr p, size_t size)
{
    CHECK();
    for (int i = 0; i < MAX; i++)
        if (F.resv[i].size && F.resv[i].va == p) {
            if (F.resv[i].size != size)
                return INVALID_VALUE;
            for (int k = 0; k < MAX; k++)
                if (F.maps[k].size && F.maps[k].va >= p && F.maps[k].va < p + size)
                    return INVALID_VALUE; /* still mapped */
            F.resv[i].size = 0;
            return OK;
        }
    return INVALID_VALUE;
}

typedef struct {
    int type, handles;
    struct {
        int type, id;
    } loc;
    void *w;
    unsigned char flags[8];
} prop_t;

API CUresult cuThreadExchangeStreamCaptureMode(int *mode)
{
    if (*mode < 0 || *mode > 2)
        return INVALID_VALUE;
    int prev = capture_mode;
    capture_mode = *mode;
    *mode = prev;
    return OK;
}

API CUresult cuMemCreate(unsigned long long *h, size_t size, const prop_t *prop, unsigned long long fl)
{
    CHECK();
    fw_note("cuMemCreate");
    *(capture_mode == 2 ? &F.allocs_relaxed : &F.allocs_not_relaxed) += 1;
    if (fl || prop->type != 1 || prop->loc.type != 1 || prop->loc.id < 0 || prop->loc.id >= F.devices ||
        size % (2 << 20))
        return INVALID_VALUE;
    if ((long)size > F.memory - F.used)
        return OOM;
    if (F.nhandles == MAX)
        return OOM;
    unsigned char *mem = handle_bytes(size); /* the page's bytes (untouched: no host memory until written) */
    if (!mem)
        return OOM;
    F.handles[F.nhandles].size = size;
    F.handles[F.nhandles].live = 1;
    F.handles[F.nhandles].device = prop->loc.id;
    F.handles[F.nhandles].mem = mem;
    F.used += (long)size;
    *h = (unsigned long long)++F.nhandles;
    return OK;
}

API CUresult cuMemRelease(unsigned long long h)
{
    CHECK();
    fw_note("cuMemRelease");
    if (!h || (long)h > F.nhandles || !F.handles[h - 1].live)
        return INVALID_VALUE;
    F.handles[h - 1].live = 0;
    handle_bytes_free(F.handles[h - 1].mem, F.handles[h - 1].size);
    F.handles[h - 1].mem = NULL;
    F.used -= (long)F.handles[h - 1].size;
    return OK;
}

API CUresult cuMemMap(CUdeviceptr va, size_t size, size_t off, unsigned long long h, unsigned long long fl)
{
    CHECK();
    fw_note("cuMemMap");
    if (off || fl || !h || (long)h > F.nhandles || !F.handles[h - 1].live || F.handles[h - 1].size != size)
        return INVALID_VALUE;
    int in_resv = 0;
    for (int i = 0; i < MAX; i++)
        in_resv |= F.resv[i].size && va >= F.resv[i].va && va + size <= F.resv[i].va + F.resv[i].size;
    if (!in_resv)
        return INVALID_VALUE;
    for (int i = 0; i < MAX; i++)
        if (F.maps[i].size && va < F.maps[i].va + F.maps[i].size && F.maps[i].va < va + size)
            return 208; /* CUDA_ERROR_ALREADY_MAPPED */
    for (int i = 0; i < MAX; i++)
        if (!F.maps[i].size) {
            F.maps[i].va = va;
            F.maps[i].size = size;
            F.maps[i].h = h;
            F.maps[i].access = 0;
            return OK;
        }
    return OOM;
}

/* No synchronization: queued work on the range is a use-after-free. */
API CUresult cuMemUnmap(CUdeviceptr va, size_t size)
{
    CHECK();
    fw_note("cuMemUnmap");
    for (int i = 0; i < MAX; i++)
        if (F.maps[i].size && F.maps[i].va == va) {
            if (F.maps[i].size != size)
                return INVALID_VALUE; /* must be the whole range of one cuMemMap */
            if (fw_busy(va, va + size, 0, NULL, 0))
                fw_violation("cuMemUnmap(0x%llx, %zu bytes) while queued work still uses it", va, size);
            F.maps[i].size = 0;
            return OK;
        }
    return 211; /* CUDA_ERROR_NOT_MAPPED */
}


/* Per-device access, one descriptor each (type DEVICE, flags PROT_READWRITE = 3). */
API CUresult cuMemSetAccess(CUdeviceptr va, size_t size, const void *desc, size_t count)
{
    CHECK();
    fw_note("cuMemSetAccess");
    const struct {
        int type, id, flags;
    } *d = desc;
    if (!desc || !count)
        return INVALID_VALUE;
    unsigned mask = 0;
    for (size_t k = 0; k < count; k++) {
        if (d[k].type != 1 || d[k].id < 0 || d[k].id >= F.devices || d[k].flags != 3)
            return INVALID_VALUE;
        mask |= 1u << d[k].id;
    }
    size_t covered = 0;
    for (int i = 0; i < MAX; i++)
        if (F.maps[i].size && F.maps[i].va >= va && F.maps[i].va + F.maps[i].size <= va + size) {
            covered += F.maps[i].size;
            if (!F.peers && mask & ~(1u << F.handles[FM_HANDLE(F.maps[i].h)].device))
                return PEER_ACCESS_UNSUPPORTED; /* a device that cannot reach the owner */
        }
    if (covered != size)
        return INVALID_VALUE; /* the range must be fully mapped */
    F.access_calls++;
    F.access_descriptors += (long)count;
    for (int i = 0; i < MAX; i++)
        if (F.maps[i].size && F.maps[i].va >= va && F.maps[i].va + F.maps[i].size <= va + size)
            F.maps[i].access |= mask;
    return OK;
}

API CUresult cuMemGetAllocationGranularity(size_t *g, const prop_t *prop, int option)
{
    CHECK();
    (void)prop;
    (void)option;
    *g = 2 << 20;
    return OK;
}

API CUresult cuStreamSynchronize(void *stream)
{
    CHECK();
    fw_note("cuStreamSynchronize");
    NEED_CONTEXT();
    fw_complete_stream(current, stream, ~0ul);
    return OK;
}

API CUresult cuEventCreate(void **ev, unsigned flags)
{
    CHECK();
    if (flags != 2 || F.nevents == MAX) /* hbmalloc asks for timing disabled, as PyTorch does */
        return INVALID_VALUE;
    F.events[F.nevents].live = 1;
    *ev = (void *)(uintptr_t)++F.nevents;
    return OK;
}

static int ev_ok(void *ev)
{
    long i = (long)(uintptr_t)ev;
    return i > 0 && i <= F.nevents && F.events[i - 1].live;
}

/* The event completes with the work queued on the stream before it. */
API CUresult cuEventRecord(void *ev, void *stream)
{
    CHECK();
    NEED_CONTEXT();
    if (!ev_ok(ev))
        return 400; /* CUDA_ERROR_INVALID_HANDLE */
    long i = (long)(uintptr_t)ev - 1;
    F.events[i].recorded = 1;
    F.events[i].device = current;
    F.events[i].stream = stream;
    F.events[i].seq = fw_last_seq(current, stream);
    return OK;
}

/* A never-recorded event is complete (cuEventQuery: "no work" has been recorded). */
API CUresult cuEventQuery(void *ev)
{
    CHECK();
    if (!ev_ok(ev))
        return 400;
    long i = (long)(uintptr_t)ev - 1;
    return !F.events[i].recorded || !fw_pending(F.events[i].device, F.events[i].stream, F.events[i].seq) ? OK
                                                                                                         : NOT_READY;
}

API CUresult cuEventSynchronize(void *ev)
{
    CHECK();
    if (!ev_ok(ev))
        return 400;
    long i = (long)(uintptr_t)ev - 1;
    if (F.events[i].recorded)
        fw_complete_stream(F.events[i].device, F.events[i].stream, F.events[i].seq);
    return OK;
}

/* ---- pinned host memory and copies ---- */

API CUresult cuMemHostAlloc(void **pp, size_t size, unsigned flags)
{
    CHECK();
    fw_note("cuMemHostAlloc");
    NEED_CONTEXT();
    if (!size || flags > 0xf)
        return INVALID_VALUE;
    for (int i = 0; i < MAX; i++)
        if (!F.hosts[i].p) {
            if (!(F.hosts[i].p = malloc(size)))
                return OOM;
            F.hosts[i].size = size;
            *pp = F.hosts[i].p;
            return OK;
        }
    return OOM;
}

API CUresult cuMemFreeHost(void *p)
{
    CHECK();
    fw_note("cuMemFreeHost");
    NEED_CONTEXT();
    long i = host_slot((uintptr_t)p, 1);
    if (i < 0 || F.hosts[i].p != p)
        return INVALID_VALUE;
    if (fw_host_queued((uintptr_t)p, (uintptr_t)p + F.hosts[i].size))
        fw_violation("cuMemFreeHost(%p) while a queued copy still uses it", p);
    free(p);
    F.hosts[i].p = NULL;
    return OK;
}

/* A copy is work on `stream` of the current device: its device range must be allocated or mapped with access, no
 * other stream's work may still be queued on it (the copy would read or overwrite what that work uses), and its host
 * buffer must be pinned. */
static CUresult copy_async(CUdeviceptr dev, void *host, size_t n, void *stream, int to_host)
{
    CHECK();
    fw_note(to_host ? "cuMemcpyDtoHAsync_v2" : "cuMemcpyHtoDAsync_v2");
    NEED_CONTEXT();
    if (!n || host_slot((uintptr_t)host, n) < 0)
        return INVALID_VALUE;
    if (!allocated(dev, dev + n) || !fake_cuda_can_access(current, dev, n)) {
        fw_violation("copy %s [0x%llx, +%zu) on device %d, which is not mapped or not accessible",
                     to_host ? "from" : "to", dev, n, current);
        return INVALID_VALUE;
    }
    if (fw_busy(dev, dev + n, current, stream, 1))
        fw_violation("copy %s [0x%llx, +%zu) on stream %p while another stream's work on it is still queued",
                     to_host ? "from" : "to", dev, n, stream);
    device_bytes(dev, host, n, to_host);
    return fw_launch_copy(current, stream, dev, n, (uintptr_t)host) ? OOM : OK;
}

API CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, void *stream)
{
    return copy_async(src, dst, n, stream, 1);
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, void *stream)
{
    return copy_async(dst, (void *)src, n, stream, 0);
}

/* The CUDA 2.0 ABI (32-bit sizes) under the plain names. */
API CUresult cuMemcpyDtoHAsync(void *d, unsigned int s, unsigned int n, void *st)
{
    (void)d, (void)s, (void)n, (void)st;
    return NOT_SUPPORTED;
}
API CUresult cuMemcpyHtoDAsync(unsigned int d, const void *s, unsigned int n, void *st)
{
    (void)d, (void)s, (void)n, (void)st;
    return NOT_SUPPORTED;
}

/* Whether a queued copy still uses host memory [p, p + n): the CPU must not touch it (tests). */
API int fake_cuda_host_queued(uintptr_t p, size_t n);
API int fake_cuda_host_queued(uintptr_t p, size_t n) { return fw_host_queued(p, p + n); }

/* A kernel writing or reading device memory (tests): 0, or -1 when it is not mapped. */
API int fake_cuda_poke(CUdeviceptr va, const void *src, size_t n)
{
    return device_bytes(va, (unsigned char *)src, n, 0);
}

API int fake_cuda_peek(CUdeviceptr va, void *dst, size_t n) { return device_bytes(va, dst, n, 1); }

/* The virtual-memory, copy, host and synchronize calls since fake_cuda_set("log", 1), in order. */
API const char *fake_cuda_log(void) { return L.text; }

/* ---- the tests' side: work on the device, access, contexts ---- */

/* A kernel touching [ptr, ptr + size) queued on `stream` of the current context's device. */
API CUresult fake_cuda_launch(void *stream, CUdeviceptr ptr, size_t size)
{
    CHECK();
    NEED_CONTEXT();
    if (!allocated(ptr, ptr + size))
        fw_violation("work launched on [0x%llx, +%zu) on device %d, which is not allocated or mapped", ptr, size,
                     current);
    else if (!fake_cuda_can_access(current, ptr, size))
        fw_violation("work on device %d touches [0x%llx, +%zu), which it has no access to (cuMemSetAccess)", current,
                     ptr, size);
    return fw_launch(current, stream, ptr, size) ? OOM : OK;
}

/* A new owner's first use of a block, on its stream: another stream's queued work there is a reuse too early. */
API CUresult fake_cuda_first_use(void *stream, CUdeviceptr ptr, size_t size)
{
    CHECK();
    NEED_CONTEXT();
    if (fw_busy(ptr, ptr + size, current, stream, 1))
        fw_violation("block [0x%llx, +%zu) handed to stream %p while another stream's work on it is still queued", ptr,
                     size, stream);
    return fake_cuda_launch(stream, ptr, size);
}

/* Whether `device` may touch [ptr, ptr + size): memory from cuMemAlloc is its own device's (all, here); mapped
 * pages need an access descriptor for it. */
API int fake_cuda_can_access(int device, CUdeviceptr ptr, size_t size)
{
    for (int i = 0; i < MAX; i++) {
        uintptr_t p = (uintptr_t)F.allocs[i].p;
        if (p && ptr >= p && ptr + size <= p + F.allocs[i].size)
            return 1;
    }
    for (CUdeviceptr at = ptr; at < ptr + size;) {
        int hit = 0;
        for (int i = 0; i < MAX && !hit; i++)
            if (F.maps[i].size && at >= F.maps[i].va && at < F.maps[i].va + F.maps[i].size) {
                if (!(F.maps[i].access >> device & 1))
                    return 0;
                at = F.maps[i].va + F.maps[i].size;
                hit = 1;
            }
        if (!hit)
            return 0;
    }
    return 1;
}

API void fake_cuda_progress(long n) { fw_progress(n); }
API long fake_cuda_violations(char *buf, size_t len) { return fw_violations(buf, len); }
API long fake_cuda_contexts(int device) { return device >= 0 && device < 8 ? F.ctx_created[device] : -1; }
API int fake_cuda_current(void) { return current; }

API CUresult cuEventDestroy_v2(void *ev)
{
    CHECK();
    if (!ev_ok(ev))
        return 400;
    F.events[(long)(uintptr_t)ev - 1].live = 0;
    return OK;
}

API CUresult cuGetErrorName(CUresult e, const char **s)
{
    switch (e) {
    case OK: *s = "CUDA_SUCCESS"; return OK;
    case INVALID_VALUE: *s = "CUDA_ERROR_INVALID_VALUE"; return OK;
    case OOM: *s = "CUDA_ERROR_OUT_OF_MEMORY"; return OK;
    case NOT_INITIALIZED: *s = "CUDA_ERROR_NOT_INITIALIZED"; return OK;
    case NOT_READY: *s = "CUDA_ERROR_NOT_READY"; return OK;
    case PEER_ACCESS_UNSUPPORTED: *s = "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"; return OK;
    case INJECTED: *s = "CUDA_ERROR_UNKNOWN"; return OK;
    default: *s = NULL; return INVALID_VALUE;
    }
}

API CUresult cuGetErrorString(CUresult e, const char **s)
{
    switch (e) {
    case INVALID_VALUE: *s = "invalid argument"; return OK;
    case OOM: *s = "out of memory"; return OK;
    case PEER_ACCESS_UNSUPPORTED: *s = "peer access is not supported across the given devices"; return OK;
    case INJECTED: *s = "unknown error (injected by the fake driver)"; return OK;
    default: *s = NULL; return INVALID_VALUE;
    }
}

/* ---- cuGetProcAddress: base name -> the newest ABI at or before the version asked ---- */
typedef struct {
    const char *name;
    void *fn;
    int since;
} entry;

static void *lookup(const char *name, int version)
{
    static const entry table[] = {
        {"cuInit", (void *)cuInit, 2000},
        {"cuDriverGetVersion", (void *)cuDriverGetVersion, 2020},
        {"cuDeviceGet", (void *)cuDeviceGet, 2000},
        {"cuDeviceGetCount", (void *)cuDeviceGetCount, 2000},
        {"cuDeviceGetAttribute", (void *)cuDeviceGetAttribute, 2000},
        {"cuDeviceGetPCIBusId", (void *)cuDeviceGetPCIBusId, 4010},
        {"cuDevicePrimaryCtxRetain", (void *)cuDevicePrimaryCtxRetain, 7000},
        {"cuDevicePrimaryCtxRelease", (void *)cuDevicePrimaryCtxRelease_v2, 11000},
        {"cuCtxSetCurrent", (void *)cuCtxSetCurrent, 4000},
        {"cuMemGetInfo", (void *)cuMemGetInfo_v2, 3020},
        {"cuCtxGetCurrent", (void *)cuCtxGetCurrent, 4000},
        {"cuCtxSynchronize", (void *)cuCtxSynchronize, 2000},
        {"cuDeviceCanAccessPeer", (void *)cuDeviceCanAccessPeer, 4000},
        {"cuMemAlloc", (void *)cuMemAlloc_v2, 3020},
        {"cuMemFree", (void *)cuMemFree_v2, 3020},
        {"cuMemAddressReserve", (void *)cuMemAddressReserve, 10020},
        {"cuMemAddressFree", (void *)cuMemAddressFree, 10020},
        {"cuMemCreate", (void *)cuMemCreate, 10020},
        {"cuMemRelease", (void *)cuMemRelease, 10020},
        {"cuMemMap", (void *)cuMemMap, 10020},
        {"cuMemUnmap", (void *)cuMemUnmap, 10020},
        {"cuMemSetAccess", (void *)cuMemSetAccess, 10020},
        {"cuMemGetAllocationGranularity", (void *)cuMemGetAllocationGranularity, 10020},
        {"cuStreamSynchronize", (void *)cuStreamSynchronize, 2000},
        {"cuEventCreate", (void *)cuEventCreate, 2000},
        {"cuThreadExchangeStreamCaptureMode", (void *)cuThreadExchangeStreamCaptureMode, 10010},
        {"cuEventRecord", (void *)cuEventRecord, 2000},
        {"cuEventQuery", (void *)cuEventQuery, 2000},
        {"cuEventSynchronize", (void *)cuEventSynchronize, 2000},
        {"cuEventDestroy", (void *)cuEventDestroy_v2, 4000},
        {"cuGetErrorName", (void *)cuGetErrorName, 6000},
        {"cuGetErrorString", (void *)cuGetErrorString, 6000},
        {"cuMemHostAlloc", (void *)cuMemHostAlloc, 2020},
        {"cuMemFreeHost", (void *)cuMemFreeHost, 2000},
        {"cuMemcpyDtoHAsync", (void *)cuMemcpyDtoHAsync_v2, 3020},
        {"cuMemcpyHtoDAsync", (void *)cuMemcpyHtoDAsync_v2, 3020},
    };
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (!strcmp(table[i].name, name)) {
            /* The 64-bit memory ABI appeared in 3.2: asking for less gets nothing here. */
            if (version < table[i].since)
                return NULL;
            if (!F.vmm && table[i].since == 10020 && F.version < 10020)
                return NULL;
            return table[i].fn;
        }
    return NULL;
}

API CUresult cuGetProcAddress_v2(const char *name, void **fn, int version, unsigned long long flags, int *status)
{
    if (!F.memory)
        fake_cuda_reset();
    (void)flags;
    if (F.getproc != 2)
        return NOT_FOUND; /* behave as a driver without it: the loader must fall back */
    if (version > F.version)
        return INVALID_VALUE;
    *fn = lookup(name, version);
    if (status)
        *status = *fn ? 0 : 1;
    return OK;
}

API CUresult cuGetProcAddress(const char *name, void **fn, int version, unsigned long long flags)
{
    if (!F.memory)
        fake_cuda_reset();
    (void)flags;
    if (F.getproc < 1)
        return NOT_FOUND;
    *fn = lookup(name, version);
    return OK;
}
