/*
 * cuda.c: the CUDA driver API backend, loaded at run time.
 *
 * Owns loading libcuda.so.1 (or the file named by the spec's lib= or by
 * HBMALLOC_LIBCUDA), resolving each entry point with its own ABI version
 * (cuGetProcAddress_v2, then cuGetProcAddress, then the explicit versioned
 * exports of drivers older than 11.3: a plain dlsym("cuMemAlloc") would give
 * the 32-bit CUDA 2.0 ABI), primary contexts (each call makes the device's
 * current and gives the caller's context back), access to the pages it maps
 * (the owning device, and the peers enabled for it: it keeps the list of its
 * mappings for that), and turning CUresult codes into text. Contracts and
 * sources: docs/CONTRACTS.md. Declares the few driver types it needs itself: no CUDA header is
 * needed to build. Knows nothing of pools or policy.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"
#include "util/env.h"
#include "backend.h"
#include "nvml.h"

/* ---- the driver's types and constants (cuda.h, CUDA 13; layouts checked below) ---- */
typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef void *CUcontext, *CUstream, *CUevent;
typedef unsigned long long CUmemGenericAllocationHandle;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_NOT_SUPPORTED = 801,
    CUDA_ERROR_NOT_READY = 600,
    CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 102,
    CU_EVENT_DISABLE_TIMING = 2,
    CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    CUDA_ERROR_INVALID_DEVICE = 101,
    CUDA_ERROR_PEER_ACCESS_UNSUPPORTED = 217,
    CU_GET_PROC_ADDRESS_LEGACY_STREAM = 1,
    CU_MEMHOSTALLOC_PORTABLE = 0x01, /* pinned for every context, not only the current one (cuda.h:3247) */
};

typedef struct CUmemLocation {
    int type; /* CUmemLocationType: type first, then id (Ascend has them the other way round) */
    int id;
} CUmemLocation;

typedef struct CUmemAllocationProp {
    int type;
    int requestedHandleTypes;
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType, gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;

typedef struct CUmemAccessDesc {
    CUmemLocation location;
    int flags;
} CUmemAccessDesc;

_Static_assert(sizeof(CUmemAllocationProp) == 32, "CUmemAllocationProp layout");
_Static_assert(sizeof(CUmemAccessDesc) == 12, "CUmemAccessDesc layout");

/* ---- entry points ---- */
typedef struct cu_fns {
    CUresult (*Init)(unsigned);
    CUresult (*DriverGetVersion)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
    CUresult (*DeviceGetPCIBusId)(char *, int, CUdevice); /* NVML's name of the device (proc_mem) */
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxSetCurrent)(CUcontext);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxSynchronize)(void);
    CUresult (*DeviceCanAccessPeer)(int *, CUdevice, CUdevice);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*MemAddressFree)(CUdeviceptr, size_t);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*MemUnmap)(CUdeviceptr, size_t);
    CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*MemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*ThreadExchangeStreamCaptureMode)(int *); /* CUstreamCaptureMode */
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventQuery)(CUevent);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
    /* A sleeping pool's backup (optional: without them backup is refused). */
    CUresult (*MemHostAlloc)(void **, size_t, unsigned);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void *, size_t, CUstream);
} cu_fns;

/* Base name, the ABI version to ask cuGetProcAddress for, the export to dlsym on
 * drivers without it, where it goes, and whether the backend needs it at all. */
typedef struct sym {
    const char *name;
    int version;
    const char *export_name;
    size_t offset;
    int required;
} sym;

#define F(field) offsetof(cu_fns, field)
static const sym syms[] = {
    {"cuInit", 2000, "cuInit", F(Init), 1},
    {"cuDriverGetVersion", 2020, "cuDriverGetVersion", F(DriverGetVersion), 1},
    {"cuDeviceGet", 2000, "cuDeviceGet", F(DeviceGet), 1},
    {"cuDeviceGetCount", 2000, "cuDeviceGetCount", F(DeviceGetCount), 1},
    {"cuDeviceGetAttribute", 2000, "cuDeviceGetAttribute", F(DeviceGetAttribute), 1},
    {"cuDeviceGetPCIBusId", 4010, "cuDeviceGetPCIBusId", F(DeviceGetPCIBusId), 0},
    {"cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain", F(DevicePrimaryCtxRetain), 1},
    {"cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2", F(DevicePrimaryCtxRelease), 1},
    {"cuCtxSetCurrent", 4000, "cuCtxSetCurrent", F(CtxSetCurrent), 1},
    {"cuCtxGetCurrent", 4000, "cuCtxGetCurrent", F(CtxGetCurrent), 1},
    {"cuCtxSynchronize", 2000, "cuCtxSynchronize", F(CtxSynchronize), 1},
    {"cuDeviceCanAccessPeer", 4000, "cuDeviceCanAccessPeer", F(DeviceCanAccessPeer), 0},
    {"cuMemGetInfo", 3020, "cuMemGetInfo_v2", F(MemGetInfo), 1},
    {"cuMemAlloc", 3020, "cuMemAlloc_v2", F(MemAlloc), 1},
    {"cuMemFree", 3020, "cuMemFree_v2", F(MemFree), 1},
    {"cuMemAddressReserve", 10020, "cuMemAddressReserve", F(MemAddressReserve), 0},
    {"cuMemAddressFree", 10020, "cuMemAddressFree", F(MemAddressFree), 0},
    {"cuMemCreate", 10020, "cuMemCreate", F(MemCreate), 0},
    {"cuMemRelease", 10020, "cuMemRelease", F(MemRelease), 0},
    {"cuMemMap", 10020, "cuMemMap", F(MemMap), 0},
    {"cuMemUnmap", 10020, "cuMemUnmap", F(MemUnmap), 0},
    {"cuMemSetAccess", 10020, "cuMemSetAccess", F(MemSetAccess), 0},
    {"cuMemGetAllocationGranularity", 10020, "cuMemGetAllocationGranularity", F(MemGetAllocationGranularity), 0},
    {"cuStreamSynchronize", 2000, "cuStreamSynchronize", F(StreamSynchronize), 1},
    {"cuThreadExchangeStreamCaptureMode", 10010, "cuThreadExchangeStreamCaptureMode",
     F(ThreadExchangeStreamCaptureMode), 0},
    {"cuEventCreate", 2000, "cuEventCreate", F(EventCreate), 1},
    {"cuEventRecord", 2000, "cuEventRecord", F(EventRecord), 1},
    {"cuEventQuery", 2000, "cuEventQuery", F(EventQuery), 1},
    {"cuEventSynchronize", 2000, "cuEventSynchronize", F(EventSynchronize), 1},
    {"cuEventDestroy", 4000, "cuEventDestroy_v2", F(EventDestroy), 1},
    {"cuGetErrorName", 6000, "cuGetErrorName", F(GetErrorName), 1},
    {"cuGetErrorString", 6000, "cuGetErrorString", F(GetErrorString), 1},
    {"cuMemHostAlloc", 2020, "cuMemHostAlloc", F(MemHostAlloc), 0},
    {"cuMemFreeHost", 2000, "cuMemFreeHost", F(MemFreeHost), 0},
    {"cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2", F(MemcpyDtoHAsync), 0},
    {"cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2", F(MemcpyHtoDAsync), 0},
};
#undef F

#define CUDA_MAX_DEVICES 64

/* One cuMemMap: unmapped whole, as mapped. */
typedef struct cuda_map {
    CUdeviceptr va;
    size_t size;
} cuda_map;

/* The pages mapped on one device: a peer enabled later is granted every one of them (PyTorch's addPeer). Its lock is
 * held across the driver's map, unmap and access calls of that device only (never the allocator's lock). */
typedef struct cuda_maps {
    pthread_mutex_t lock; /* guards the list, and orders a peer's enabling against the device's maps and unmaps */
    cuda_map *at;
    size_t n, cap;
} cuda_maps;

typedef struct cuda {
    void *lib;
    cu_fns fn;
    int driver_version;
    int ndev;
    pthread_mutex_t lock; /* guards retaining a device's primary context (once per device) */
    /* Each device's primary context once retained: published with release, read with acquire and no lock. */
    _Atomic(CUcontext) ctx[CUDA_MAX_DEVICES];
    /* capable[d][p]: p can access d's memory (cuDeviceCanAccessPeer, asked at open). peer[d][p]: p was enabled for
     * d's pages (cu_peer; all capable ones with the spec's peers=capable), granted with d at every map. PyTorch grants
     * the owner and the peers its enablePeerAccess added, no others: cudaDeviceEnablePeerAccess does not cover
     * cuMemMap'd memory, and each peer is one more mapping the driver makes for every page. */
    unsigned char capable[CUDA_MAX_DEVICES][CUDA_MAX_DEVICES];
    atomic_uchar peer[CUDA_MAX_DEVICES][CUDA_MAX_DEVICES];
    cuda_maps maps[CUDA_MAX_DEVICES];
    char nvml[512]; /* the NVML library (proc_mem): "" for libnvidia-ml.so.1, "off" for none */
} cuda;

typedef CUresult (*getproc_v2_t)(const char *, void **, int, unsigned long long, int *);
typedef CUresult (*getproc_v1_t)(const char *, void **, int, unsigned long long);

static int resolve(cuda *c, char *err, size_t errlen)
{
    getproc_v2_t gp2 = (getproc_v2_t)dlsym(c->lib, "cuGetProcAddress_v2");
    getproc_v1_t gp1 = gp2 ? NULL : (getproc_v1_t)dlsym(c->lib, "cuGetProcAddress");
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        const sym *s = &syms[i];
        void *p = NULL;
        if (gp2) {
            int status = 0;
            if (gp2(s->name, &p, s->version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status) != CUDA_SUCCESS)
                p = NULL;
        } else if (gp1) {
            if (gp1(s->name, &p, s->version, CU_GET_PROC_ADDRESS_LEGACY_STREAM) != CUDA_SUCCESS)
                p = NULL;
        }
        if (!p) /* drivers before 11.3, or a symbol cuGetProcAddress did not give */
            p = dlsym(c->lib, s->export_name);
        if (!p && s->required) {
            snprintf(err, errlen, "cuda: the driver library lacks %s (ABI %d): too old or not a CUDA driver",
                     s->export_name, s->version);
            return -1;
        }
        memcpy((char *)&c->fn + s->offset, &p, sizeof p);
    }
    return 0;
}

/* The device guard: the device's primary context current for one call, the caller's (possibly none) back after
 * it. PyTorch's device guard does the same; a framework thread left on another context would run its next work
 * there. The primary context is retained once, released at close. */
typedef struct guard {
    CUcontext saved;
    int restore;
} guard;

/* The first call on a device: its primary context retained under the lock, then published. The release store
 * pairs with enter's acquire load, so a thread that finds the context also sees the retain that made it. */
static CUresult __attribute__((noinline)) retain(cuda *c, int device, CUcontext *out)
{
    pthread_mutex_lock(&c->lock);
    CUcontext ctx = atomic_load_explicit(&c->ctx[device], memory_order_relaxed);
    CUresult rc = CUDA_SUCCESS;
    if (!ctx) {
        CUdevice d;
        rc = c->fn.DeviceGet(&d, device);
        if (rc == CUDA_SUCCESS && (rc = c->fn.DevicePrimaryCtxRetain(&ctx, d)) == CUDA_SUCCESS)
            atomic_store_explicit(&c->ctx[device], ctx, memory_order_release);
    }
    pthread_mutex_unlock(&c->lock);
    *out = ctx;
    return rc;
}

/* Every later call reads the retained context without the lock (shared by all devices), as acl.c does. */
static CUresult enter(cuda *c, int device, guard *g)
{
    g->restore = 0;
    if (device < 0 || device >= c->ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    CUcontext want = atomic_load_explicit(&c->ctx[device], memory_order_acquire);
    CUresult rc;
    if (!want && (rc = retain(c, device, &want)) != CUDA_SUCCESS)
        return rc;
    CUcontext cur = NULL;
    if ((rc = c->fn.CtxGetCurrent(&cur)) != CUDA_SUCCESS || cur == want)
        return rc;
    g->saved = cur;
    g->restore = 1;
    return c->fn.CtxSetCurrent(want);
}

static void leave(cuda *c, guard *g)
{
    if (g->restore)
        c->fn.CtxSetCurrent(g->saved); /* NULL too: the thread had no context */
}

static int code(CUresult rc) { return rc == CUDA_ERROR_OUT_OF_MEMORY ? HBM__BE_OOM : rc; }

/* `expr` with the device's context current, the caller's restored after. */
#define ON_DEVICE(c, device, expr)                \
    do {                                          \
        guard g_;                                 \
        CUresult rc_ = enter((c), (device), &g_); \
        if (rc_ == CUDA_SUCCESS)                  \
            rc_ = (expr);                         \
        leave((c), &g_);                          \
        return code(rc_);                         \
    } while (0)

static int cu_alloc(void *ctx, int device, size_t size, uintptr_t *out)
{
    cuda *c = ctx;
    CUdeviceptr p = 0;
    guard g;
    CUresult rc = enter(c, device, &g);
    if (rc == CUDA_SUCCESS)
        rc = c->fn.MemAlloc(&p, size);
    leave(c, &g);
    *out = (uintptr_t)p;
    return code(rc);
}

static int cu_free(void *ctx, int device, uintptr_t ptr, size_t size)
{
    cuda *c = ctx;
    (void)size;
    ON_DEVICE(c, device, c->fn.MemFree((CUdeviceptr)ptr));
}

static int cu_info(void *ctx, int device, size_t *free_bytes, size_t *total_bytes)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, c->fn.MemGetInfo(free_bytes, total_bytes));
}

static const char *cu_strerror(void *ctx, int rc)
{
    cuda *c = ctx;
    static __thread char buf[256]; /* one message per thread, read at once by device.c */
    const char *name = NULL, *text = NULL;
    CUresult r = rc == HBM__BE_OOM ? CUDA_ERROR_OUT_OF_MEMORY : rc;
    if (c->fn.GetErrorName(r, &name) != CUDA_SUCCESS || !name)
        name = "unknown CUresult";
    if (c->fn.GetErrorString(r, &text) != CUDA_SUCCESS || !text)
        text = "no description from the driver";
    snprintf(buf, sizeof buf, "%s (%d): %s", name, r, text);
    return buf;
}

static void prop_for(CUmemAllocationProp *p, int device)
{
    memset(p, 0, sizeof *p);
    p->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p->location.id = device;
}

static int cu_reserve(void *ctx, int device, size_t size, uintptr_t *va)
{
    cuda *c = ctx;
    CUdeviceptr p = 0;
    guard g;
    CUresult rc = enter(c, device, &g);
    if (rc == CUDA_SUCCESS)
        rc = c->fn.MemAddressReserve(&p, size, 0, 0, 0);
    leave(c, &g);
    *va = (uintptr_t)p;
    return code(rc);
}

static int cu_unreserve(void *ctx, int device, uintptr_t va, size_t size)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, c->fn.MemAddressFree((CUdeviceptr)va, size));
}

static int cu_create(void *ctx, int device, size_t size, uint64_t *handle)
{
    cuda *c = ctx;
    CUmemAllocationProp prop;
    prop_for(&prop, device);
    CUmemGenericAllocationHandle h = 0;
    guard g;
    CUresult rc = enter(c, device, &g);
    if (rc == CUDA_SUCCESS)
        rc = c->fn.MemCreate(&h, size, &prop, 0);
    leave(c, &g);
    *handle = h;
    return code(rc);
}

static int cu_release(void *ctx, int device, uint64_t handle)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, c->fn.MemRelease(handle));
}

/* Room for one more mapping in the device's list (under its lock): 0, or -1 when host memory ran out. */
static int maps_room(cuda_maps *m)
{
    if (m->n < m->cap)
        return 0;
    size_t cap = m->cap ? 2 * m->cap : 64;
    cuda_map *at = realloc(m->at, cap * sizeof *at);
    if (!at)
        return -1;
    m->at = at;
    m->cap = cap;
    return 0;
}

/* Mapped and listed under the device's list lock, so that a peer being enabled either finds the page in the list
 * or has set its flag before cu_access reads it. A list that cannot grow refuses the map (as out of memory) rather
 * than keep a page a later peer would not be granted. */
static int cu_map(void *ctx, int device, uintptr_t va, size_t size, uint64_t handle)
{
    cuda *c = ctx;
    if (device < 0 || device >= c->ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    cuda_maps *m = &c->maps[device];
    guard g = {0};
    pthread_mutex_lock(&m->lock);
    CUresult rc = maps_room(m) ? CUDA_ERROR_OUT_OF_MEMORY : enter(c, device, &g);
    if (rc == CUDA_SUCCESS && (rc = c->fn.MemMap((CUdeviceptr)va, size, 0, handle, 0)) == CUDA_SUCCESS)
        m->at[m->n++] = (cuda_map){(CUdeviceptr)va, size};
    leave(c, &g);
    pthread_mutex_unlock(&m->lock);
    return code(rc);
}

/* cuMemUnmap takes the whole range of one cuMemMap (cuda.h), so the list finds it by its start. */
static int cu_unmap(void *ctx, int device, uintptr_t va, size_t size)
{
    cuda *c = ctx;
    if (device < 0 || device >= c->ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    cuda_maps *m = &c->maps[device];
    guard g;
    pthread_mutex_lock(&m->lock);
    CUresult rc = enter(c, device, &g);
    if (rc == CUDA_SUCCESS && (rc = c->fn.MemUnmap((CUdeviceptr)va, size)) == CUDA_SUCCESS)
        for (size_t i = m->n; i-- > 0;)
            if (m->at[i].va == (CUdeviceptr)va) {
                m->at[i] = m->at[--m->n];
                break;
            }
    leave(c, &g);
    pthread_mutex_unlock(&m->lock);
    return code(rc);
}

/* A new mapping is not accessible until cuMemSetAccess (cuda.h: cuMemMap): the owning device and the peers enabled
 * for it, in one call, as PyTorch's ExpandableSegment::mapAndSetAccess (CUDACachingAllocator.cpp v2.6.0:564-570).
 * The flags need no stronger order: a peer enabled before this page was listed was flagged under the list's lock,
 * which cu_map took after; one enabled after found the page in the list. */
static int cu_access(void *ctx, int device, uintptr_t va, size_t size)
{
    cuda *c = ctx;
    CUmemAccessDesc d[CUDA_MAX_DEVICES];
    size_t n = 0;
    d[n++] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, device}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    for (int p = 0; device >= 0 && device < c->ndev && p < c->ndev; p++)
        if (p != device && atomic_load_explicit(&c->peer[device][p], memory_order_relaxed))
            d[n++] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, p}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    ON_DEVICE(c, device, c->fn.MemSetAccess((CUdeviceptr)va, size, d, n));
}

/* Device `peer` may read and write `device`'s pages from now on: every page mapped there now gets its descriptor,
 * and every page mapped later (PyTorch's addPeerAccess and ExpandableSegment::addPeer, CUDACachingAllocator.cpp
 * v2.6.0:2144-2156, 533-537). Once per pair; a peer cuDeviceCanAccessPeer refuses would make every later map fail,
 * so it is refused here. No context is made on a device with nothing mapped. */
static int cu_peer(void *ctx, int device, int peer)
{
    cuda *c = ctx;
    if (device < 0 || device >= c->ndev || peer < 0 || peer >= c->ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    if (peer == device || atomic_load_explicit(&c->peer[device][peer], memory_order_relaxed))
        return CUDA_SUCCESS;
    if (!c->capable[device][peer])
        return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
    cuda_maps *m = &c->maps[device];
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&m->lock);
    if (m->n) {
        guard g;
        CUmemAccessDesc d = {{CU_MEM_LOCATION_TYPE_DEVICE, peer}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        rc = enter(c, device, &g);
        for (size_t i = 0; rc == CUDA_SUCCESS && i < m->n; i++)
            rc = c->fn.MemSetAccess(m->at[i].va, m->at[i].size, &d, 1);
        leave(c, &g);
    }
    if (rc == CUDA_SUCCESS) /* a failure leaves it unflagged: enabling it again grants every page again */
        atomic_store_explicit(&c->peer[device][peer], 1, memory_order_relaxed);
    pthread_mutex_unlock(&m->lock);
    return code(rc);
}

/* Every stream of the device: cuCtxSynchronize on its context (`via` is for a framework's queue; CUDA has none). */
static int cu_device_sync(void *ctx, int device, int (*via)(void *), void *via_ctx)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, via ? (via(via_ctx) ? 999 /* CUDA_ERROR_UNKNOWN */ : CUDA_SUCCESS) : c->fn.CtxSynchronize());
}

static int cu_sync(void *ctx, int device, hbm_stream stream)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, c->fn.StreamSynchronize((CUstream)(uintptr_t)stream));
}

static int cu_event_create(void *ctx, int device, uint64_t *ev)
{
    cuda *c = ctx;
    CUevent e = NULL;
    guard g;
    CUresult rc = enter(c, device, &g);
    if (rc == CUDA_SUCCESS)
        rc = c->fn.EventCreate(&e, CU_EVENT_DISABLE_TIMING); /* as PyTorch's event pool */
    leave(c, &g);
    *ev = (uint64_t)(uintptr_t)e;
    return code(rc);
}

static int cu_event_destroy(void *ctx, int device, uint64_t ev)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, c->fn.EventDestroy((CUevent)(uintptr_t)ev));
}

static int cu_event_record(void *ctx, int device, uint64_t ev, hbm_stream stream)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, c->fn.EventRecord((CUevent)(uintptr_t)ev, (CUstream)(uintptr_t)stream));
}

static int cu_event_query(void *ctx, int device, uint64_t ev)
{
    cuda *c = ctx;
    guard g;
    CUresult rc = enter(c, device, &g);
    if (rc == CUDA_SUCCESS)
        rc = c->fn.EventQuery((CUevent)(uintptr_t)ev);
    leave(c, &g);
    return rc == CUDA_ERROR_NOT_READY ? HBM__BE_NOT_READY : code(rc);
}

static int cu_event_sync(void *ctx, int device, uint64_t ev)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, c->fn.EventSynchronize((CUevent)(uintptr_t)ev));
}

/* ---- a sleeping pool's backup ---- */

/* Page-locked, for every context (PORTABLE): the copies run in the device's context, whatever was current. */
static int cu_host_alloc(void *ctx, int device, size_t size, void **out)
{
    cuda *c = ctx;
    *out = NULL;
    ON_DEVICE(c, device, c->fn.MemHostAlloc(out, size, CU_MEMHOSTALLOC_PORTABLE));
}

/* cuMemFreeHost has no synchronization note (cuda.h:8823): the copies that used the buffer were waited for. */
static int cu_host_free(void *ctx, int device, void *p)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, c->fn.MemFreeHost(p));
}

/* Asynchronous (\note_async, cuda.h:10571, 10612): device work on the stream, waited for by the caller. */
static int cu_copy_d2h(void *ctx, int device, void *dst, uintptr_t src, size_t size, hbm_stream stream)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, c->fn.MemcpyDtoHAsync(dst, (CUdeviceptr)src, size, (CUstream)(uintptr_t)stream));
}

static int cu_copy_h2d(void *ctx, int device, uintptr_t dst, const void *src, size_t size, hbm_stream stream)
{
    cuda *c = ctx;
    ON_DEVICE(c, device, c->fn.MemcpyHtoDAsync((CUdeviceptr)dst, src, size, (CUstream)(uintptr_t)stream));
}

/* Per thread, no context needed; CUstreamCaptureMode numbers modes as backend.h does. */
static int cu_capture_mode(void *ctx, int device, int *mode)
{
    cuda *c = ctx;
    (void)device;
    if (!c->fn.ThreadExchangeStreamCaptureMode)
        return code(CUDA_ERROR_NOT_SUPPORTED);
    return code(c->fn.ThreadExchangeStreamCaptureMode(mode));
}

static void cu_close(void *ctx)
{
    cuda *c = ctx;
    for (int d = 0; d < c->ndev; d++) {
        if (atomic_load_explicit(&c->ctx[d], memory_order_acquire)) {
            CUdevice dev;
            if (c->fn.DeviceGet(&dev, d) == CUDA_SUCCESS)
                c->fn.DevicePrimaryCtxRelease(dev);
        }
        free(c->maps[d].at);
        pthread_mutex_destroy(&c->maps[d].lock);
    }
    pthread_mutex_destroy(&c->lock);
    dlclose(c->lib);
    free(c);
}

/* Device memory by process: NVML, the device named by its PCI bus id (nvml.c). */
static int cu_proc_mem(void *ctx, int device, hbm__proc_use *out, size_t cap, size_t *n)
{
    cuda *c = ctx;
    char bus[32];
    CUdevice dev;
    if (!strcmp(c->nvml, "off") || !c->fn.DeviceGetPCIBusId || device < 0 || device >= c->ndev ||
        c->fn.DeviceGet(&dev, device) != CUDA_SUCCESS ||
        c->fn.DeviceGetPCIBusId(bus, (int)sizeof bus, dev) != CUDA_SUCCESS)
        return -1;
    bus[sizeof bus - 1] = 0;
    return hbm__nvml_proc_mem(c->nvml, bus, out, cap, n);
}

static const hbm__backend_ops cuda_ops = {
    .name = "cuda",
    .mem_alloc = cu_alloc,
    .mem_free = cu_free,
    .mem_info = cu_info,
    .strerror = cu_strerror,
    .cost_ns = NULL,
    .close = cu_close,
    .vmm_reserve = cu_reserve,
    .vmm_unreserve = cu_unreserve,
    .vmm_create = cu_create,
    .vmm_release = cu_release,
    .vmm_map = cu_map,
    .vmm_unmap = cu_unmap,
    .vmm_access = cu_access,
    .vmm_peer = cu_peer,
    .stream_sync = cu_sync,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .event_record = cu_event_record,
    .event_query = cu_event_query,
    .event_sync = cu_event_sync,
    .stream_check = NULL,
    .capture_mode = cu_capture_mode,
    .device_sync = cu_device_sync,
    .host_alloc = cu_host_alloc,
    .host_free = cu_host_free,
    .copy_d2h = cu_copy_d2h,
    .copy_h2d = cu_copy_h2d,
    .proc_mem = cu_proc_mem,
};

/* Virtual memory needs the 10.2 driver API, the entry points, and the device's own attribute. */
static void detect_vmm(cuda *c, hbm__backend_caps *caps)
{
    caps->has_vmm = 0;
    if (c->driver_version < 10020) {
        snprintf(caps->vmm_why_not, sizeof caps->vmm_why_not,
                 "CUDA driver %d.%d predates virtual memory management (10.2 is needed)", c->driver_version / 1000,
                 c->driver_version % 1000 / 10);
        return;
    }
    if (!c->fn.MemAddressReserve || !c->fn.MemAddressFree || !c->fn.MemCreate || !c->fn.MemRelease || !c->fn.MemMap ||
        !c->fn.MemUnmap || !c->fn.MemSetAccess || !c->fn.MemGetAllocationGranularity) {
        snprintf(caps->vmm_why_not, sizeof caps->vmm_why_not,
                 "the driver library does not export the cuMem* virtual-memory functions");
        return;
    }
    size_t gran = 0;
    for (int d = 0; d < c->ndev; d++) {
        int supported = 0;
        CUdevice dev;
        CUmemAllocationProp prop;
        prop_for(&prop, d);
        size_t g = 0;
        if (c->fn.DeviceGet(&dev, d) != CUDA_SUCCESS ||
            c->fn.DeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
                CUDA_SUCCESS ||
            !supported) {
            snprintf(caps->vmm_why_not, sizeof caps->vmm_why_not,
                     "device %d reports CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0", d);
            return;
        }
        if (c->fn.MemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || !g) {
            snprintf(caps->vmm_why_not, sizeof caps->vmm_why_not, "cuMemGetAllocationGranularity failed on device %d",
                     d);
            return;
        }
        if (g > gran)
            gran = g;
    }
    caps->has_vmm = 1;
    caps->vmm_granularity = gran;
    /* Peers, asked without a context (cuDeviceCanAccessPeer needs none). */
    for (int d = 0; c->fn.DeviceCanAccessPeer && d < c->ndev; d++)
        for (int p = 0; p < c->ndev; p++) {
            int can = 0;
            CUdevice dd, pd;
            if (p != d && c->fn.DeviceGet(&dd, d) == CUDA_SUCCESS && c->fn.DeviceGet(&pd, p) == CUDA_SUCCESS &&
                c->fn.DeviceCanAccessPeer(&can, pd, dd) == CUDA_SUCCESS && can) {
                c->capable[d][p] = 1;
            }
        }
}

/* A spec option: exactly `name`, `len` bytes at o. */
static int opt_is(const char *o, size_t len, const char *name) { return len == strlen(name) && !strncmp(o, name, len); }

/* The spec's options, comma-separated: lib=PATH (the driver library), peers=enabled (the default: the owning device
 * and the peers enabled with hbm_backend_enable_peer get access to a page) or peers=capable (every device
 * cuDeviceCanAccessPeer reports: for a framework that cannot say which peers it enables). */
static int parse_opts(const char *opts, char *lib, size_t liblen, char *nvml, size_t nvmllen, int *all_peers, char *err,
                      size_t errlen)
{
    for (const char *o = opts; o && *o; o += *o == ',') {
        size_t len = strcspn(o, ",");
        if (len > 4 && !strncmp(o, "lib=", 4))
            snprintf(lib, liblen, "%.*s", (int)(len - 4), o + 4);
        else if (len > 5 && !strncmp(o, "nvml=", 5))
            snprintf(nvml, nvmllen, "%.*s", (int)(len - 5), o + 5);
        else if (opt_is(o, len, "peers=enabled") || opt_is(o, len, "peers=capable"))
            *all_peers = o[6] == 'c';
        else {
            snprintf(err, errlen,
                     "cuda: unknown option '%.*s' (known: lib=PATH, nvml=PATH|off, peers=enabled, peers=capable)",
                     (int)(len < 200 ? len : 200), o);
            return -1;
        }
        o += len;
    }
    return 0;
}

int hbm__cuda_open(struct hbm_backend *b, const char *opts, char *err, size_t errlen)
{
    char lib[512] = "";
    const char *env = hbm__env(HBM__ENV_LIBCUDA);
    snprintf(lib, sizeof lib, "%s", env && *env ? env : "libcuda.so.1");
    int all_peers = 0;
    char nvml[512] = "";
    if (parse_opts(opts, lib, sizeof lib, nvml, sizeof nvml, &all_peers, err, errlen))
        return HBM_ERR_INVALID;
    cuda *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "cuda: out of host memory");
        return HBM_ERR_NOMEM;
    }
    memcpy(c->nvml, nvml, sizeof nvml);
    pthread_mutex_init(&c->lock, NULL);
    c->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!c->lib) {
        snprintf(err, errlen,
                 "cuda: cannot load %.200s: %.200s (no NVIDIA driver here? HBMALLOC_LIBCUDA names another file)", lib,
                 dlerror());
        pthread_mutex_destroy(&c->lock);
        free(c);
        return HBM_ERR_BACKEND;
    }
    CUresult rc = CUDA_SUCCESS;
    int count = 0;
    err[0] = 0;
    if (resolve(c, err, errlen) || (rc = c->fn.Init(0)) != CUDA_SUCCESS ||
        (rc = c->fn.DriverGetVersion(&c->driver_version)) != CUDA_SUCCESS ||
        (rc = c->fn.DeviceGetCount(&count)) != CUDA_SUCCESS || count < 1) {
        if (!err[0] || strncmp(err, "cuda:", 5) != 0) {
            const char *name = NULL;
            if (c->fn.GetErrorName && c->fn.GetErrorName(rc, &name) != CUDA_SUCCESS)
                name = NULL;
            if (count < 1 && rc == CUDA_SUCCESS)
                snprintf(err, errlen, "cuda: %.200s reports no CUDA device", lib);
            else
                snprintf(err, errlen, "cuda: initialising the driver failed: %s (%d)", name ? name : "?", rc);
        }
        dlclose(c->lib);
        pthread_mutex_destroy(&c->lock);
        free(c);
        return HBM_ERR_BACKEND;
    }
    c->ndev = count < CUDA_MAX_DEVICES ? count : CUDA_MAX_DEVICES;
    for (int d = 0; d < c->ndev; d++)
        pthread_mutex_init(&c->maps[d].lock, NULL);
    b->ops = &cuda_ops;
    b->ctx = c;
    b->caps.device_count = c->ndev;
    b->caps.dialect = HBM_DIALECT_CUDA;
    b->caps.request_pad = 0;
    b->caps.modelled_cost = 0;
    b->caps.device_work = 1; /* cuMemFree "may" synchronize, cuMemUnmap does not: the engine waits itself */
    snprintf(b->caps.version, sizeof b->caps.version, "CUDA driver API %d.%d (%d), %.40s", c->driver_version / 1000,
             c->driver_version % 1000 / 10, c->driver_version, lib);
    detect_vmm(c, &b->caps);
    for (int d = 0; all_peers && d < c->ndev; d++)
        for (int p = 0; p < c->ndev; p++)
            atomic_store_explicit(&c->peer[d][p], c->capable[d][p], memory_order_relaxed);
    b->caps.host_copies = c->fn.MemHostAlloc && c->fn.MemFreeHost && c->fn.MemcpyDtoHAsync && c->fn.MemcpyHtoDAsync;
    b->caps.host_readable = b->caps.host_copies; /* cuMemHostAlloc: page-locked host memory */
    return HBM_OK;
}
