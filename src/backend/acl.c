/*
 * acl.c: the Ascend NPU backend over AscendCL (CANN), loaded at run time.
 *
 * Owns loading libascendcl.so (or the file named by the spec's lib= or by
 * HBMALLOC_LIBASCENDCL), resolving each entry point by name as torch_npu
 * does (a missing optional symbol is NULL, never a crash), its own aclInit
 * reference, the device guard (each call makes the device's context current
 * and gives the caller's back: torch_npu caches the current device per
 * thread), probing virtual-memory support the way torch_npu probes it, on
 * the device served only, and turning aclError codes into names plus the
 * runtime's own recent error message. The contracts it keeps, with their
 * sources: docs/CONTRACTS.md. Declares the few ACL types it needs itself (layouts
 * from the CANN headers, checked below): no CANN header is needed to build.
 * Knows nothing of pools or policy.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "dcmi.h"
#include "util/env.h"

/* ---- AscendCL types and constants (acl_base.h / acl_rt.h, ACL 1.15) ---- */
typedef int aclError;
typedef void *aclrtStream, *aclrtEvent, *aclrtDrvMemHandle, *aclrtContext;

enum {
    ACL_SUCCESS = 0,
    ACL_ERROR_REPEAT_INITIALIZE = 100002,
    ACL_ERROR_BAD_ALLOC = 200000,
    ACL_ERROR_RT_FEATURE_NOT_SUPPORT = 207000,
    ACL_ERROR_RT_MEMORY_ALLOCATION = 207001,
    ACL_ERROR_RT_DEVICE_OOM = 207018,
    ACL_MEM_MALLOC_HUGE_FIRST = 0,
    ACL_HBM_MEM = 1,
    ACL_HBM_MEM_HUGE = 4,
    ACL_MEM_LOCATION_TYPE_DEVICE = 1,
    ACL_MEM_ALLOCATION_TYPE_PINNED = 0,
    ACL_MEM_HANDLE_TYPE_NONE = 0,
    ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    ACL_EVENT_CAPTURE_STREAM_PROGRESS = 0x2,
    ACL_EVENT_RECORDED_STATUS_COMPLETE = 1, /* aclrtQueryEventStatus */
    ACL_EVENT_STATUS_COMPLETE = 0,          /* the deprecated aclrtQueryEvent: the other way round */
    ACL_PKG_NAME_DRIVER = 7,
    ACL_MEMCPY_HOST_TO_DEVICE = 1, /* aclrtMemcpyKind (TNPU v7.0.0 third_party/acl/inc/acl/acl_rt.h:76-80) */
    ACL_MEMCPY_DEVICE_TO_HOST = 2,
};

typedef struct aclrtMemLocation {
    unsigned id; /* id first, then type: the reverse of CUDA's CUmemLocation */
    int type;
} aclrtMemLocation;

typedef struct aclrtPhysicalMemProp {
    int handleType;
    int allocationType;
    int memAttr;
    aclrtMemLocation location;
    unsigned long long reserve;
} aclrtPhysicalMemProp;

typedef struct aclCANNPackageVersion {
    char version[128];
    char majorVersion[64], minorVersion[64], releaseVersion[64], patchVersion[64];
    char reserved[128];
} aclCANNPackageVersion;

_Static_assert(sizeof(aclrtPhysicalMemProp) == 32, "aclrtPhysicalMemProp layout");
_Static_assert(offsetof(aclrtPhysicalMemProp, location) == 12, "aclrtPhysicalMemProp.location offset");
_Static_assert(offsetof(aclrtPhysicalMemProp, reserve) == 24, "aclrtPhysicalMemProp.reserve offset");
_Static_assert(sizeof(aclCANNPackageVersion) == 512, "aclCANNPackageVersion layout");

/* ---- entry points ---- */
typedef struct acl_fns {
    aclError (*Init)(const char *);
    aclError (*Finalize)(void);
    aclError (*FinalizeReference)(uint64_t *);
    aclError (*SetDevice)(int);
    aclError (*ResetDevice)(int);
    aclError (*GetCurrentContext)(aclrtContext *);
    aclError (*SetCurrentContext)(aclrtContext);
    aclError (*GetDeviceCount)(unsigned *);
    aclError (*Malloc)(void **, size_t, int);
    aclError (*MallocAlign32)(void **, size_t, int);
    aclError (*Free)(void *);
    aclError (*GetMemInfo)(int, size_t *, size_t *);
    aclError (*SynchronizeStream)(aclrtStream);
    aclError (*SynchronizeDevice)(void);
    aclError (*CreateEvent)(aclrtEvent *);
    aclError (*CreateEventExWithFlag)(aclrtEvent *, unsigned);
    aclError (*RecordEvent)(aclrtEvent, aclrtStream);
    aclError (*QueryEventStatus)(aclrtEvent, int *);
    aclError (*QueryEvent)(aclrtEvent, int *);
    aclError (*SynchronizeEvent)(aclrtEvent);
    aclError (*DestroyEvent)(aclrtEvent);
    aclError (*ReserveMemAddress)(void **, size_t, size_t, void *, unsigned long long);
    aclError (*ReleaseMemAddress)(void *);
    aclError (*MallocPhysical)(aclrtDrvMemHandle *, size_t, const aclrtPhysicalMemProp *, unsigned long long);
    aclError (*FreePhysical)(aclrtDrvMemHandle);
    aclError (*MapMem)(void *, size_t, size_t, aclrtDrvMemHandle, unsigned long long);
    aclError (*UnmapMem)(void *);
    aclError (*MemGetAllocationGranularity)(aclrtPhysicalMemProp *, int, size_t *);
    const char *(*GetRecentErrMsg)(void);
    aclError (*GetVersion)(int *, int *, int *);
    aclError (*GetCANNVersion)(int, aclCANNPackageVersion *);
    const char *(*GetSocName)(void);
    aclError (*GetLogicDevIdByUserDevId)(int32_t, int32_t *); /* the NPU's logical id, for DCMI (proc_mem) */
    /* A sleeping pool's backup (acl_rt.h:845, 861, 926 of the CANN headers TNPU v7.0.0 vendored). */
    aclError (*MallocHost)(void **, size_t);
    aclError (*FreeHost)(void *);
    aclError (*MemcpyAsync)(void *, size_t, const void *, size_t, int, aclrtStream);
} acl_fns;

typedef struct sym {
    const char *name;
    size_t offset;
    int required;
} sym;

#define F(field) offsetof(acl_fns, field)
static const sym syms[] = {
    {"aclInit", F(Init), 1},
    {"aclFinalize", F(Finalize), 1},
    {"aclFinalizeReference", F(FinalizeReference), 0},
    {"aclrtSetDevice", F(SetDevice), 1},
    {"aclrtResetDevice", F(ResetDevice), 1},
    {"aclrtGetCurrentContext", F(GetCurrentContext), 1},
    {"aclrtSetCurrentContext", F(SetCurrentContext), 1},
    {"aclrtGetDeviceCount", F(GetDeviceCount), 1},
    {"aclrtMalloc", F(Malloc), 1},
    {"aclrtMallocAlign32", F(MallocAlign32), 0},
    {"aclrtFree", F(Free), 1},
    {"aclrtGetMemInfo", F(GetMemInfo), 1},
    {"aclrtSynchronizeStream", F(SynchronizeStream), 1},
    {"aclrtSynchronizeDevice", F(SynchronizeDevice), 1},
    {"aclrtCreateEvent", F(CreateEvent), 1},
    {"aclrtCreateEventExWithFlag", F(CreateEventExWithFlag), 0},
    {"aclrtRecordEvent", F(RecordEvent), 1},
    {"aclrtQueryEventStatus", F(QueryEventStatus), 0},
    {"aclrtQueryEvent", F(QueryEvent), 0},
    {"aclrtSynchronizeEvent", F(SynchronizeEvent), 1},
    {"aclrtDestroyEvent", F(DestroyEvent), 1},
    {"aclrtReserveMemAddress", F(ReserveMemAddress), 0},
    {"aclrtReleaseMemAddress", F(ReleaseMemAddress), 0},
    {"aclrtMallocPhysical", F(MallocPhysical), 0},
    {"aclrtFreePhysical", F(FreePhysical), 0},
    {"aclrtMapMem", F(MapMem), 0},
    {"aclrtUnmapMem", F(UnmapMem), 0},
    {"aclrtMemGetAllocationGranularity", F(MemGetAllocationGranularity), 0},
    {"aclGetRecentErrMsg", F(GetRecentErrMsg), 0},
    {"aclrtGetVersion", F(GetVersion), 0},
    {"aclsysGetCANNVersion", F(GetCANNVersion), 0},
    {"aclrtGetSocName", F(GetSocName), 0},
    {"aclrtGetLogicDevIdByUserDevId", F(GetLogicDevIdByUserDevId), 0},
    {"aclrtMallocHost", F(MallocHost), 0},
    {"aclrtFreeHost", F(FreeHost), 0},
    {"aclrtMemcpyAsync", F(MemcpyAsync), 0},
};
#undef F

#define ACL_MAX_DEVICES 64

typedef struct acl {
    void *lib;
    acl_fns fn;
    int ndev;
    int referenced;       /* our aclInit took a reference (0, or 100002 from CANN 8.5): aclFinalizeReference at close */
    pthread_mutex_t lock; /* guards ctx[] being made */
    _Atomic(aclrtContext) ctx[ACL_MAX_DEVICES]; /* each device's default context, once we made it current: our one
                                                  aclrtSetDevice on it, returned by aclrtResetDevice at close */
    /* Virtual memory per device: 0 not probed, 1 works, -1 does not (vmm_why[d] says why). */
    atomic_int vmm[ACL_MAX_DEVICES];
    char vmm_why[ACL_MAX_DEVICES][256];
    char driver[64];
    char dcmi[512]; /* the DCMI library (proc_mem): "" to look for libdcmi.so, "off" for none */
} acl;

/* aclError names (acl_base.h, rt_error_codes.h). */
static const struct {
    int code;
    const char *name;
} names[] = {
    {100000, "ACL_ERROR_INVALID_PARAM"},
    {100001, "ACL_ERROR_UNINITIALIZE"},
    {100002, "ACL_ERROR_REPEAT_INITIALIZE"},
    {200000, "ACL_ERROR_BAD_ALLOC"},
    {200001, "ACL_ERROR_API_NOT_SUPPORT"},
    {200002, "ACL_ERROR_INVALID_DEVICE"},
    {200003, "ACL_ERROR_MEMORY_ADDRESS_UNALIGNED"},
    {200006, "ACL_ERROR_FEATURE_UNSUPPORTED"},
    {300000, "ACL_ERROR_STORAGE_OVER_LIMIT"},
    {500000, "ACL_ERROR_INTERNAL_ERROR"},
    {500001, "ACL_ERROR_FAILURE"},
    {500003, "ACL_ERROR_RT_FAILURE"},
    {500004, "ACL_ERROR_DRV_FAILURE"},
    {107000, "ACL_ERROR_RT_PARAM_INVALID"},
    {107001, "ACL_ERROR_RT_INVALID_DEVICEID"},
    {107002, "ACL_ERROR_RT_CONTEXT_NULL"},
    {107003, "ACL_ERROR_RT_STREAM_CONTEXT"},
    {107008, "ACL_ERROR_RT_ADDR_UNALIGNED"},
    {107016, "ACL_ERROR_RT_INVALID_MEMORY_TYPE"},
    {107017, "ACL_ERROR_RT_INVALID_HANDLE"},
    {107018, "ACL_ERROR_RT_INVALID_MALLOC_TYPE"},
    {107019, "ACL_ERROR_RT_WAIT_TIMEOUT"},
    {107022, "ACL_ERROR_RT_DEVICE_TASK_ABORT"},
    {207000, "ACL_ERROR_RT_FEATURE_NOT_SUPPORT"},
    {207001, "ACL_ERROR_RT_MEMORY_ALLOCATION"},
    {207002, "ACL_ERROR_RT_MEMORY_FREE"},
    {207004, "ACL_ERROR_RT_NO_DEVICE"},
    {207005, "ACL_ERROR_RT_RESOURCE_ALLOC_FAIL"},
    {207006, "ACL_ERROR_RT_NO_PERMISSION"},
    {207018, "ACL_ERROR_RT_DEVICE_OOM"},
    {507000, "ACL_ERROR_RT_INTERNAL_ERROR"},
    {507011, "ACL_ERROR_RT_MODEL_EXECUTE"},
    {507015, "ACL_ERROR_RT_AICORE_EXCEPTION"},
    {507018, "ACL_ERROR_RT_AICPU_EXCEPTION"},
    {507033, "ACL_ERROR_RT_DEV_SETUP_ERROR"},
    {507053, "ACL_ERROR_RT_DEVICE_MEM_ERROR"},
    {507054, "ACL_ERROR_RT_HBM_MULTI_BIT_ECC_ERROR"},
    {507899, "ACL_ERROR_RT_DRV_INTERNAL_ERROR"},
    {507901, "ACL_ERROR_RT_SOCKET_CLOSE"},
};

const char *hbm__acl_error_name(int code)
{
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (names[i].code == code)
            return names[i].name;
    return NULL;
}

static int resolve(acl *c, const char *lib, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
        void *p = dlsym(c->lib, syms[i].name);
        if (!p && syms[i].required) {
            snprintf(err, errlen, "acl: %.200s lacks %s: not an AscendCL runtime, or too old", lib, syms[i].name);
            return -1;
        }
        memcpy((char *)&c->fn + syms[i].offset, &p, sizeof p);
    }
    if (!c->fn.QueryEventStatus && !c->fn.QueryEvent) {
        snprintf(err, errlen, "acl: %.200s has neither aclrtQueryEventStatus nor aclrtQueryEvent", lib);
        return -1;
    }
    return 0;
}

/* The device guard: the device's context current for one call, the caller's back after it. As torch_npu's own
 * SetDevice does, the first use of a device in the process is aclrtSetDevice (it creates the default context and
 * takes a reference, returned at close); later switches are aclrtSetCurrentContext, which takes none (repeated
 * aclrtSetDevice calls would each take one). A thread with no context keeps the one set here: AscendCL has no
 * way to unset it short of aclrtResetDevice, which would drop the reference (docs/CONTRACTS.md). */
typedef struct guard {
    aclrtContext saved; /* the caller's context, to restore; NULL: nothing to restore */
} guard;

static aclError enter(acl *c, int device, guard *g)
{
    g->saved = NULL;
    if (device < 0 || device >= c->ndev)
        return 107001; /* ACL_ERROR_RT_INVALID_DEVICEID */
    aclrtContext cur = NULL, want = atomic_load(&c->ctx[device]);
    if (c->fn.GetCurrentContext(&cur) != ACL_SUCCESS)
        cur = NULL;
    if (want && cur == want)
        return ACL_SUCCESS;
    aclError rc = ACL_SUCCESS;
    if (!want) {
        pthread_mutex_lock(&c->lock);
        if (!(want = atomic_load(&c->ctx[device]))) {
            rc = c->fn.SetDevice(device);
            if (rc == ACL_SUCCESS && (rc = c->fn.GetCurrentContext(&want)) == ACL_SUCCESS && want)
                atomic_store(&c->ctx[device], want);
            else if (rc == ACL_SUCCESS)
                rc = 107002; /* ACL_ERROR_RT_CONTEXT_NULL */
        } else {
            rc = c->fn.SetCurrentContext(want);
        }
        pthread_mutex_unlock(&c->lock);
    } else {
        rc = c->fn.SetCurrentContext(want);
    }
    g->saved = cur;
    return rc;
}

static void leave(acl *c, guard *g)
{
    if (g->saved)
        c->fn.SetCurrentContext(g->saved);
}

static int code(aclError rc)
{
    return rc == ACL_ERROR_RT_MEMORY_ALLOCATION || rc == ACL_ERROR_RT_DEVICE_OOM || rc == ACL_ERROR_BAD_ALLOC
               ? HBM__BE_OOM
               : rc;
}

/* `expr` with the device current, the caller's context restored after. */
#define ON_DEVICE(c, device, expr)                \
    do {                                          \
        guard g_;                                 \
        aclError rc_ = enter((c), (device), &g_); \
        if (rc_ == ACL_SUCCESS)                   \
            rc_ = (expr);                         \
        leave((c), &g_);                          \
        return code(rc_);                         \
    } while (0)

/* Segments as torch_npu allocates them: aclrtMallocAlign32, huge pages first. aclrtMalloc (runtimes without it)
 * aligns to 32 bytes and adds 32 more, which a segment does not need. */
static aclError device_malloc(acl *c, void **p, size_t size)
{
    return c->fn.MallocAlign32 ? c->fn.MallocAlign32(p, size, ACL_MEM_MALLOC_HUGE_FIRST)
                               : c->fn.Malloc(p, size, ACL_MEM_MALLOC_HUGE_FIRST);
}

static int acl_alloc(void *ctx, int device, size_t size, uintptr_t *out)
{
    acl *c = ctx;
    void *p = NULL;
    guard g;
    aclError rc = enter(c, device, &g);
    if (rc == ACL_SUCCESS)
        rc = device_malloc(c, &p, size);
    leave(c, &g);
    *out = (uintptr_t)p;
    return code(rc);
}

static int acl_free(void *ctx, int device, uintptr_t ptr, size_t size)
{
    acl *c = ctx;
    (void)size;
    ON_DEVICE(c, device, c->fn.Free((void *)ptr));
}

static int acl_info(void *ctx, int device, size_t *free_bytes, size_t *total_bytes)
{
    acl *c = ctx;
    ON_DEVICE(c, device, c->fn.GetMemInfo(ACL_HBM_MEM, free_bytes, total_bytes));
}

/* "NAME (code): the runtime's recent error message". */
static const char *acl_strerror(void *ctx, int rc)
{
    acl *c = ctx;
    static __thread char buf[512]; /* one message per thread, read at once by device.c */
    int r = rc == HBM__BE_OOM ? ACL_ERROR_RT_MEMORY_ALLOCATION : rc;
    const char *name = hbm__acl_error_name(r);
    const char *msg = c->fn.GetRecentErrMsg ? c->fn.GetRecentErrMsg() : NULL;
    snprintf(buf, sizeof buf, "%s (%d): %.380s", name ? name : "unknown aclError", r,
             msg && *msg ? msg : "no message from the runtime");
    return buf;
}

static void prop_for(aclrtPhysicalMemProp *p, int device)
{
    memset(p, 0, sizeof *p);
    p->handleType = ACL_MEM_HANDLE_TYPE_NONE;
    p->allocationType = ACL_MEM_ALLOCATION_TYPE_PINNED;
    p->memAttr = ACL_HBM_MEM_HUGE; /* must match the huge-page reservation (flags 1) */
    p->location.id = (unsigned)device;
    p->location.type = ACL_MEM_LOCATION_TYPE_DEVICE;
}

static int acl_reserve(void *ctx, int device, size_t size, uintptr_t *va)
{
    acl *c = ctx;
    void *p = NULL;
    guard g;
    aclError rc = enter(c, device, &g);
    if (rc == ACL_SUCCESS)
        rc = c->fn.ReserveMemAddress(&p, size, 0, NULL, 1); /* alignment 0, no fixed address, huge pages */
    leave(c, &g);
    *va = (uintptr_t)p;
    return code(rc);
}

static int acl_unreserve(void *ctx, int device, uintptr_t va, size_t size)
{
    acl *c = ctx;
    (void)size; /* aclrtReleaseMemAddress takes the start only */
    ON_DEVICE(c, device, c->fn.ReleaseMemAddress((void *)va));
}

static int acl_create(void *ctx, int device, size_t size, uint64_t *handle)
{
    acl *c = ctx;
    aclrtPhysicalMemProp prop;
    prop_for(&prop, device);
    aclrtDrvMemHandle h = NULL;
    guard g;
    aclError rc = enter(c, device, &g);
    if (rc == ACL_SUCCESS)
        rc = c->fn.MallocPhysical(&h, size, &prop, 0);
    leave(c, &g);
    *handle = (uint64_t)(uintptr_t)h;
    return code(rc);
}

static int acl_release(void *ctx, int device, uint64_t handle)
{
    acl *c = ctx;
    ON_DEVICE(c, device, c->fn.FreePhysical((aclrtDrvMemHandle)(uintptr_t)handle));
}

static int acl_map(void *ctx, int device, uintptr_t va, size_t size, uint64_t handle)
{
    acl *c = ctx;
    /* One whole handle per call, offset 0: the engine maps page by page. No access step follows. */
    ON_DEVICE(c, device, c->fn.MapMem((void *)va, size, 0, (aclrtDrvMemHandle)(uintptr_t)handle, 0));
}

static int acl_unmap(void *ctx, int device, uintptr_t va, size_t size)
{
    acl *c = ctx;
    (void)size; /* one unmap per map, by start address */
    ON_DEVICE(c, device, c->fn.UnmapMem((void *)va));
}

static int acl_sync(void *ctx, int device, hbm_stream stream)
{
    acl *c = ctx;
    ON_DEVICE(c, device, c->fn.SynchronizeStream((aclrtStream)(uintptr_t)stream));
}

static int acl_event_create(void *ctx, int device, uint64_t *ev)
{
    acl *c = ctx;
    aclrtEvent e = NULL;
    guard g;
    aclError rc = enter(c, device, &g);
    if (rc == ACL_SUCCESS) /* reusable events, as torch_npu's event pool; plain events on older CANN */
        rc = c->fn.CreateEventExWithFlag ? c->fn.CreateEventExWithFlag(&e, ACL_EVENT_CAPTURE_STREAM_PROGRESS)
                                         : c->fn.CreateEvent(&e);
    leave(c, &g);
    *ev = (uint64_t)(uintptr_t)e;
    return code(rc);
}

static int acl_event_destroy(void *ctx, int device, uint64_t ev)
{
    acl *c = ctx;
    ON_DEVICE(c, device, c->fn.DestroyEvent((aclrtEvent)(uintptr_t)ev));
}

static int acl_event_record(void *ctx, int device, uint64_t ev, hbm_stream stream)
{
    acl *c = ctx;
    ON_DEVICE(c, device, c->fn.RecordEvent((aclrtEvent)(uintptr_t)ev, (aclrtStream)(uintptr_t)stream));
}

static int acl_event_query(void *ctx, int device, uint64_t ev)
{
    acl *c = ctx;
    int status = -1, done = 0;
    guard g;
    aclError rc = enter(c, device, &g);
    if (rc == ACL_SUCCESS && c->fn.QueryEventStatus) {
        rc = c->fn.QueryEventStatus((aclrtEvent)(uintptr_t)ev, &status);
        done = status == ACL_EVENT_RECORDED_STATUS_COMPLETE;
    } else if (rc == ACL_SUCCESS) {
        rc = c->fn.QueryEvent((aclrtEvent)(uintptr_t)ev, &status);
        done = status == ACL_EVENT_STATUS_COMPLETE;
    }
    leave(c, &g);
    if (rc != ACL_SUCCESS)
        return code(rc);
    return done ? 0 : HBM__BE_NOT_READY;
}

static int acl_event_sync(void *ctx, int device, uint64_t ev)
{
    acl *c = ctx;
    ON_DEVICE(c, device, c->fn.SynchronizeEvent((aclrtEvent)(uintptr_t)ev));
}

/* ---- a sleeping pool's backup ---- */

static int acl_host_alloc(void *ctx, int device, size_t size, void **out)
{
    acl *c = ctx;
    *out = NULL;
    ON_DEVICE(c, device, c->fn.MallocHost(out, size));
}

static int acl_host_free(void *ctx, int device, void *p)
{
    acl *c = ctx;
    ON_DEVICE(c, device, c->fn.FreeHost(p));
}

/* "After calling this interface, be sure to call aclrtSynchronizeStream to ensure that the task of memory replication
 * has been completed" (acl_rt.h:903-924): work on the stream, waited for by the caller. */
static int acl_copy_d2h(void *ctx, int device, void *dst, uintptr_t src, size_t size, hbm_stream stream)
{
    acl *c = ctx;
    ON_DEVICE(c, device,
              c->fn.MemcpyAsync(dst, size, (const void *)src, size, ACL_MEMCPY_DEVICE_TO_HOST,
                                (aclrtStream)(uintptr_t)stream));
}

static int acl_copy_h2d(void *ctx, int device, uintptr_t dst, const void *src, size_t size, hbm_stream stream)
{
    acl *c = ctx;
    ON_DEVICE(
        c, device,
        c->fn.MemcpyAsync((void *)dst, size, src, size, ACL_MEMCPY_HOST_TO_DEVICE, (aclrtStream)(uintptr_t)stream));
}

/* The whole device's work, every stream: aclrtSynchronizeDevice, or the framework's own entry (`via`). */
static int acl_device_sync(void *ctx, int device, int (*via)(void *), void *via_ctx)
{
    acl *c = ctx;
    ON_DEVICE(c, device,
              via ? (via(via_ctx) ? 500003 /* ACL_ERROR_RT_FAILURE */ : ACL_SUCCESS) : c->fn.SynchronizeDevice());
}

/* Our references back: one aclrtResetDevice per device we set, and our aclInit reference. aclFinalize would end
 * the runtime for every user of the process (torch_npu's included), so it is never called: without
 * aclFinalizeReference (before CANN 8.5) the reference stays until the process ends. */
static void acl_close(void *ctx)
{
    acl *c = ctx;
    for (int d = 0; d < c->ndev; d++)
        if (atomic_load(&c->ctx[d]))
            c->fn.ResetDevice(d);
    uint64_t left = 0;
    if (c->referenced && c->fn.FinalizeReference)
        c->fn.FinalizeReference(&left);
    pthread_mutex_destroy(&c->lock);
    dlclose(c->lib);
    free(c);
}

static int acl_vmm_probe(void *ctx, int device, char *why, size_t whylen);

/* The logical id of the device this process numbers `device` (CANN's "user device id"): aclrtGetLogicDevIdByUserDevId
 * where the runtime has it (CANN 8.x), else the device-th id ASCEND_RT_VISIBLE_DEVICES lists, as the runtime maps it
 * (CANN's aclrtGetLogicDevIdByUserDevId page: "without ASCEND_RT_VISIBLE_DEVICES the logical id is the user id");
 * -1 when neither tells. */
static int logic_id(acl *c, int device)
{
    int32_t id = -1;
    if (c->fn.GetLogicDevIdByUserDevId && c->fn.GetLogicDevIdByUserDevId(device, &id) == ACL_SUCCESS && id >= 0)
        return id;
    const char *v = getenv("ASCEND_RT_VISIBLE_DEVICES");
    if (!v || !*v)
        return device;
    for (int k = 0; *v; k++) {
        char *end;
        long x = strtol(v, &end, 10);
        if (end == v || x < 0 || x > INT32_MAX || (*end && *end != ','))
            return -1; /* not a list of ids: the runtime would refuse it too */
        if (k == device)
            return (int)x;
        v = *end ? end + 1 : end;
    }
    return -1;
}

/* Device memory by process: DCMI, the device named by its logical id (dcmi.c). Not a runtime call: no context. */
static int acl_proc_mem(void *ctx, int device, hbm__proc_use *out, size_t cap, size_t *n)
{
    acl *c = ctx;
    if (!strcmp(c->dcmi, "off") || device < 0 || device >= c->ndev)
        return -1;
    return hbm__dcmi_proc_mem(c->dcmi, logic_id(c, device), out, cap, n);
}

static const hbm__backend_ops acl_ops = {
    .name = "acl",
    .mem_alloc = acl_alloc,
    .mem_free = acl_free,
    .mem_info = acl_info,
    .strerror = acl_strerror,
    .cost_ns = NULL,
    .close = acl_close,
    .vmm_reserve = acl_reserve,
    .vmm_unreserve = acl_unreserve,
    .vmm_create = acl_create,
    .vmm_release = acl_release,
    .vmm_map = acl_map,
    .vmm_unmap = acl_unmap,
    .vmm_access = NULL, /* Ascend maps with access granted */
    .stream_sync = acl_sync,
    .event_create = acl_event_create,
    .event_destroy = acl_event_destroy,
    .event_record = acl_event_record,
    .event_query = acl_event_query,
    .event_sync = acl_event_sync,
    .stream_check = NULL,
    .device_sync = acl_device_sync,
    .vmm_probe = acl_vmm_probe,
    .host_alloc = acl_host_alloc,
    .host_free = acl_host_free,
    .copy_d2h = acl_copy_d2h,
    .copy_h2d = acl_copy_h2d,
    .proc_mem = acl_proc_mem,
};

/* Parse "major.minor[.release...]" of a driver (HDK) version: 24.1.rc2, 23.0.RC3, 22.0.3. */
static int hdk_major(const char *v) { return v && *v >= '0' && *v <= '9' ? atoi(v) : -1; }

/* The entry points virtual memory needs (CANN 7.0.0+): decided at open, without touching a device. */
static void detect_vmm(acl *c, hbm__backend_caps *caps)
{
    const acl_fns *f = &c->fn;
    caps->has_vmm = f->ReserveMemAddress && f->ReleaseMemAddress && f->MallocPhysical && f->FreePhysical && f->MapMem &&
                    f->UnmapMem;
    caps->vmm_granularity = (size_t)2 << 20; /* "currently fixed at 2M" (aclrtMallocPhysical); checked per device */
    if (!caps->has_vmm)
        snprintf(caps->vmm_why_not, sizeof caps->vmm_why_not,
                 "the CANN runtime lacks aclrtReserveMemAddress and the other virtual-memory functions "
                 "(they arrived in CANN 7.0.0)");
}

/* Why the probe failed, in words a user can act on. */
static void probe_failed(acl *c, int device, aclError rc, char *why, size_t whylen)
{
    const char *name = hbm__acl_error_name(rc);
    const char *dv = c->driver[0] ? c->driver : "version unknown";
    int major = hdk_major(c->driver);
    char tail[160] = "";
    if (major >= 0 && major < 23)
        snprintf(tail, sizeof tail,
                 "; the Ascend driver (HDK %s) is older than 23.0.0, which expandable "
                 "segments need",
                 dv);
    else if (rc == ACL_ERROR_RT_FEATURE_NOT_SUPPORT)
        snprintf(tail, sizeof tail,
                 "; the driver (HDK %s) and firmware packages likely do not match "
                 "(run hbmalloc doctor)",
                 dv);
    char where[32] = ""; /* which device, when there is more than one */
    if (c->ndev > 1)
        snprintf(where, sizeof where, " on device %d", device);
    snprintf(why, whylen, "the probe aclrtReserveMemAddress(512 bytes)%s returned %s (%d)%s", where,
             name ? name : "an error", rc, tail);
}

/* Virtual memory as torch_npu decides it, on the device served only (each device probed makes its context):
 * the probe aclrtReserveMemAddress(&p, 512, 0, NULL, 1) must succeed; then the page size must be the 2 MiB the
 * engine maps. Once per device; the caller's context is restored. */
static int acl_vmm_probe(void *ctx, int device, char *why, size_t whylen)
{
    acl *c = ctx;
    if (device < 0 || device >= c->ndev)
        return 0;
    int known = atomic_load(&c->vmm[device]);
    if (!known) {
        const acl_fns *f = &c->fn;
        char text[256] = "";
        void *p = NULL;
        size_t gran = 0;
        aclrtPhysicalMemProp prop;
        prop_for(&prop, device);
        guard g;
        aclError rc = enter(c, device, &g);
        if (rc == ACL_SUCCESS)
            rc = f->ReserveMemAddress(&p, 512, 0, NULL, 1);
        if (rc == ACL_SUCCESS && p)
            f->ReleaseMemAddress(p);
        if (rc == ACL_SUCCESS && p && f->MemGetAllocationGranularity &&
            (f->MemGetAllocationGranularity(&prop, ACL_RT_MEM_ALLOC_GRANULARITY_MINIMUM, &gran) != ACL_SUCCESS ||
             !gran))
            gran = 0; /* the query is absent before CANN 8.0: the documented 2 MiB stands */
        leave(c, &g);
        if (rc != ACL_SUCCESS || !p)
            probe_failed(c, device, rc != ACL_SUCCESS ? rc : 500003, text, sizeof text);
        else if (gran && ((size_t)2 << 20) % gran)
            snprintf(text, sizeof text,
                     "device %d maps pages of %zu bytes, which do not divide the 2 MiB pages "
                     "hbmalloc maps",
                     device, gran);
        pthread_mutex_lock(&c->lock);
        if (!atomic_load(&c->vmm[device])) {
            snprintf(c->vmm_why[device], sizeof c->vmm_why[device], "%s", text);
            atomic_store(&c->vmm[device], text[0] ? -1 : 1);
        }
        pthread_mutex_unlock(&c->lock);
        known = atomic_load(&c->vmm[device]);
    }
    if (known < 0)
        snprintf(why, whylen, "%s", c->vmm_why[device]);
    return known > 0;
}

int hbm__acl_open(struct hbm_backend *b, const char *opts, char *err, size_t errlen)
{
    char lib[512], dcmi[512] = "";
    const char *env = hbm__env(HBM__ENV_LIBASCENDCL);
    snprintf(lib, sizeof lib, "%s", env && *env ? env : "libascendcl.so");
    for (const char *o = opts; o && *o; o += *o == ',') {
        size_t len = strcspn(o, ",");
        if (len > 4 && !strncmp(o, "lib=", 4)) {
            snprintf(lib, sizeof lib, "%.*s", (int)(len - 4), o + 4);
        } else if (len > 5 && !strncmp(o, "dcmi=", 5)) {
            snprintf(dcmi, sizeof dcmi, "%.*s", (int)(len - 5), o + 5);
        } else {
            snprintf(err, errlen, "acl: unknown option '%.*s' (known: lib=PATH, dcmi=PATH|off)",
                     (int)(len < 200 ? len : 200), o);
            return HBM_ERR_INVALID;
        }
        o += len;
    }
    acl *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "acl: out of host memory");
        return HBM_ERR_NOMEM;
    }
    memcpy(c->dcmi, dcmi, sizeof dcmi);
    c->lib = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!c->lib) {
        snprintf(err, errlen,
                 "acl: cannot load %.200s: %.200s (no CANN toolkit here? source set_env.sh, or "
                 "HBMALLOC_LIBASCENDCL names another file)",
                 lib, dlerror());
        free(c);
        return HBM_ERR_BACKEND;
    }
    err[0] = 0;
    aclError rc = ACL_SUCCESS;
    unsigned count = 0;
    if (resolve(c, lib, err, errlen) == 0) {
        rc = c->fn.Init(NULL);
        /* Inside torch_npu the runtime is initialised already: the call answers 100002, and from the runtimes
         * that have aclFinalizeReference on it still takes a reference (acl_rt.h; the runtime's acl.cpp). */
        c->referenced = rc == ACL_SUCCESS || (rc == ACL_ERROR_REPEAT_INITIALIZE && c->fn.FinalizeReference);
        if (rc == ACL_ERROR_REPEAT_INITIALIZE)
            rc = ACL_SUCCESS;
        if (rc == ACL_SUCCESS)
            rc = c->fn.GetDeviceCount(&count);
        if (rc != ACL_SUCCESS || count < 1) {
            const char *name = hbm__acl_error_name(rc);
            const char *msg = c->fn.GetRecentErrMsg ? c->fn.GetRecentErrMsg() : NULL;
            if (rc == ACL_SUCCESS)
                snprintf(err, errlen, "acl: %.200s reports no NPU", lib);
            else
                snprintf(err, errlen, "acl: initialising the runtime failed: %s (%d): %.200s", name ? name : "?", rc,
                         msg && *msg ? msg : "no message from the runtime");
            uint64_t left;
            if (c->referenced && c->fn.FinalizeReference)
                c->fn.FinalizeReference(&left);
        }
    }
    if (err[0]) {
        dlclose(c->lib);
        free(c);
        return HBM_ERR_BACKEND;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->ndev = count < ACL_MAX_DEVICES ? (int)count : ACL_MAX_DEVICES;
    char soc[64] = "";
    aclCANNPackageVersion v;
    memset(&v, 0, sizeof v);
    if (c->fn.GetCANNVersion && c->fn.GetCANNVersion(ACL_PKG_NAME_DRIVER, &v) == ACL_SUCCESS)
        snprintf(c->driver, sizeof c->driver, "%.60s", v.version);
    const char *s = c->fn.GetSocName ? c->fn.GetSocName() : NULL;
    if (s)
        snprintf(soc, sizeof soc, "%.60s", s);
    int maj = 0, min = 0, pat = 0;
    if (!c->fn.GetVersion || c->fn.GetVersion(&maj, &min, &pat) != ACL_SUCCESS)
        maj = min = pat = -1;
    b->ops = &acl_ops;
    b->ctx = c;
    b->caps.device_count = c->ndev;
    b->caps.dialect = HBM_DIALECT_NPU;
    /* torch_npu adds 32 bytes to every request, except on Ascend950. */
    b->caps.request_pad = strncmp(soc, "Ascend950", 9) == 0 ? 0 : 32;
    b->caps.modelled_cost = 0;
    snprintf(b->caps.version, sizeof b->caps.version, "AscendCL %d.%d.%d, driver %.20s, %.20s", maj, min, pat,
             c->driver[0] ? c->driver : "unknown", soc[0] ? soc : "SoC unknown");
    b->caps.device_work = 1;
    b->caps.unmap_syncs_device = 1; /* torch_npu's ExpandableSegment::unmapHandles: npuSynchronizeDevice */
    detect_vmm(c, &b->caps);
    b->caps.host_copies = c->fn.MallocHost && c->fn.FreeHost && c->fn.MemcpyAsync;
    b->caps.host_readable = b->caps.host_copies; /* aclrtMallocHost: page-locked host memory */
    return HBM_OK;
}
