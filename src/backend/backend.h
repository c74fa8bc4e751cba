/*
 * backend.h: the only door from the engine to a device.
 *
 * A backend is a table of functions over an opaque context. The contract,
 * after mimalloc's prim layer:
 *   - sizes passed in are already rounded by the engine (segment sizes);
 *   - outputs are non-NULL pointers;
 *   - every function returns 0 on success, HBM__BE_OOM when the device is out
 *     of memory, or another non-zero code of the backend's own (a driver code)
 *     whose text strerror() gives;
 *   - a backend never logs, never allocates on behalf of the engine's policy,
 *     and knows nothing of pools, blocks or settings.
 *   - a call that needs a device makes it current for the call only: the
 *     calling thread's current device or context is the same after the call
 *     (frameworks cache it per thread and run their next work there).
 * src/core/device.c is the one caller: it counts, times and turns codes into messages.
 */
#ifndef HBM_BACKEND_H
#define HBM_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "hbmalloc.h"

#define HBM__BE_OOM (-1)

/* Kinds of device call, for counters, the cost model and fault injection. */
typedef enum hbm__op {
    HBM__OP_MALLOC = 0,
    HBM__OP_FREE = 1,
    HBM__OP_INFO = 2,
    HBM__OP_RESERVE = 3,     /* reserve a virtual address range */
    HBM__OP_UNRESERVE = 4,   /* free it */
    HBM__OP_CREATE = 5,      /* create a physical page handle */
    HBM__OP_RELEASE = 6,     /* release it */
    HBM__OP_MAP = 7,         /* map a handle at an address */
    HBM__OP_UNMAP = 8,       /* unmap an address range */
    HBM__OP_ACCESS = 9,      /* make a mapping readable and writable by the device */
    HBM__OP_SYNC = 10,       /* wait for a stream's work (before an unmap) */
    HBM__OP_EVENT = 11,      /* create, record or destroy an event */
    HBM__OP_QUERY = 12,      /* ask whether an event has completed */
    HBM__OP_EVSYNC = 13,     /* wait for an event */
    HBM__OP_DEVSYNC = 14,    /* wait for all of the device's work (before memory goes back to it) */
    HBM__OP_HOST_ALLOC = 15, /* pinned host memory (a sleeping pool's backup) */
    HBM__OP_HOST_FREE = 16,
    HBM__OP_COPY_D2H = 17, /* a device-to-host copy queued on a stream */
    HBM__OP_COPY_H2D = 18, /* a host-to-device copy queued on a stream */
    HBM__OP_KINDS = 19
} hbm__op;

#define HBM__BE_NOT_READY (-2) /* event_query: the event has not completed */

/* Filled once when the backend is opened. */
typedef struct hbm__backend_caps {
    int device_count;
    hbm_dialect dialect; /* whose allocator rules this device follows (CUDA or NPU) */
    size_t request_pad;  /* bytes added to every request (torch_npu pads 32 bytes) */
    int modelled_cost;   /* 1: cost_ns() gives modelled time; 0: device.c measures wall time */
    /* Virtual memory (expandable segments). */
    int has_vmm;            /* the vmm_* functions work on this device */
    char vmm_why_not[256];  /* when !has_vmm: why, in words a user can act on */
    size_t vmm_granularity; /* page sizes must be multiples of this */
    char version[96];       /* driver / firmware versions, for messages */
    /* Work launched on the device runs after the launch returns, and neither mem_free nor vmm_unmap waits for it
     * (aclrtFree: no implicit synchronization; cuMemFree: "may" synchronize; cuMemUnmap, aclrtUnmapMem: none).
     * The engine then waits with device_sync before a whole segment goes back, and before pages are unmapped it
     * waits for the segment's stream (PyTorch's ExpandableSegment) or, with unmap_syncs_device, for the whole
     * device (torch_npu's). 0 on the simulated device, which runs no work. */
    int device_work;
    int unmap_syncs_device;
    int host_copies;   /* host_alloc, host_free and the copies work (a sleeping pool's backup) */
    int host_readable; /* and host_alloc's memory is memory the CPU reads (the sim's address-only tokens are not) */
} hbm__backend_caps;

/* One process's device memory as the runtime counts it per process (NVML's nvmlProcessInfo_v1_t: pid,
 * usedGpuMemory). */
typedef struct hbm__proc_use {
    int64_t pid;
    uint64_t bytes; /* HBM__PROC_UNKNOWN: the runtime lists the process but cannot measure it */
} hbm__proc_use;
#define HBM__PROC_UNKNOWN UINT64_MAX

typedef struct hbm__backend_ops {
    const char *name;
    int (*mem_alloc)(void *ctx, int device, size_t size, uintptr_t *out);
    int (*mem_free)(void *ctx, int device, uintptr_t ptr, size_t size);
    int (*mem_info)(void *ctx, int device, size_t *free_bytes, size_t *total_bytes);
    const char *(*strerror)(void *ctx, int code);
    uint64_t (*cost_ns)(void *ctx, hbm__op op, size_t size); /* may be NULL */
    void (*close)(void *ctx);
    /* Virtual memory, present when caps.has_vmm (NULL otherwise). Reservations
     * and mappings are page-aligned; unmap and unreserve take the exact range
     * that was mapped or reserved. vmm_access may be NULL (Ascend needs none). */
    int (*vmm_reserve)(void *ctx, int device, size_t size, uintptr_t *va);
    int (*vmm_unreserve)(void *ctx, int device, uintptr_t va, size_t size);
    int (*vmm_create)(void *ctx, int device, size_t size, uint64_t *handle);
    int (*vmm_release)(void *ctx, int device, uint64_t handle);
    int (*vmm_map)(void *ctx, int device, uintptr_t va, size_t size, uint64_t handle);
    int (*vmm_unmap)(void *ctx, int device, uintptr_t va, size_t size);
    int (*vmm_access)(void *ctx, int device, uintptr_t va, size_t size);
    /* Let device `peer` read and write what is mapped on `device`, now and at every later vmm_access (PyTorch's
     * enablePeerAccess for expandable segments). May be NULL: the backend grants no per-device access. */
    int (*vmm_peer)(void *ctx, int device, int peer);
    int (*stream_sync)(void *ctx, int device, hbm_stream stream);
    /* Events (cross-stream frees). event_query returns 0 when complete,
     * HBM__BE_NOT_READY when not. stream_check (may be NULL) says whether a
     * stream handle is known to the device. */
    int (*event_create)(void *ctx, int device, uint64_t *event);
    int (*event_destroy)(void *ctx, int device, uint64_t event);
    int (*event_record)(void *ctx, int device, uint64_t event, hbm_stream stream);
    int (*event_query)(void *ctx, int device, uint64_t event);
    int (*event_sync)(void *ctx, int device, uint64_t event);
    int (*stream_check)(void *ctx, int device, hbm_stream stream);
    /* Exchange the calling thread's graph-capture mode (CUDA's cuThreadExchangeStreamCaptureMode,
     * AscendCL's aclmdlRICaptureThreadExchangeMode): *mode in, the previous mode out. May be NULL. */
    int (*capture_mode)(void *ctx, int device, int *mode);
    /* Wait for every stream of the device (NULL when caps.device_work is 0). With `via`, the wait is via(via_ctx),
     * a framework's own entry that empties its host-side queue first (torch_npu's npuSynchronizeDevice); either
     * runs with the device current, and the caller's device is current again after. */
    int (*device_sync)(void *ctx, int device, int (*via)(void *), void *via_ctx);
    /* Whether virtual memory works on this device (caps.has_vmm says the entry points exist). May be NULL: caps
     * alone decide. Probes once per device, with the caller's device restored; 0 with why (a user's words). */
    int (*vmm_probe)(void *ctx, int device, char *why, size_t whylen);
    /* Pinned host memory and copies between it and the device (a sleeping pool's backup, docs/SLEEP.md). NULL
     * where the runtime lacks them (backup is then refused, with the reason). A copy is device work queued on
     * `stream`: it runs after the call returns, in that stream's order; neither its device range nor its host
     * buffer may be unmapped, freed or read before the stream is synchronized. host_free takes what host_alloc
     * gave. */
    int (*host_alloc)(void *ctx, int device, size_t size, void **out);
    int (*host_free)(void *ctx, int device, void *p);
    int (*copy_d2h)(void *ctx, int device, void *dst, uintptr_t src, size_t size, hbm_stream stream);
    int (*copy_h2d)(void *ctx, int device, uintptr_t dst, const void *src, size_t size, hbm_stream stream);
    /* The processes that hold memory on the device, as the runtime counts them (CUDA: NVML's
     * nvmlDeviceGetComputeRunningProcesses, as c10/cuda/CUDACachingAllocator.cpp reportProcessMemoryInfo reads it):
     * up to cap into out, *n how many there are (may exceed cap). Callable from any thread without the allocator's
     * lock, and during a capture (it is not a stream or device call). NULL where the runtime has no such query
     * (the sim with processes=off); nonzero when the query fails (no NVML or DCMI, no permission). The acl backend
     * asks DCMI (dcmi.c): AscendCL's aclrtGetMemInfo is device-wide only. */
    int (*proc_mem)(void *ctx, int device, hbm__proc_use *out, size_t cap, size_t *n);
} hbm__backend_ops;

/* Capture modes, numbered as CUstreamCaptureMode and aclmdlRICaptureMode number them. */
enum { HBM__CAPTURE_MODE_GLOBAL = 0, HBM__CAPTURE_MODE_THREAD_LOCAL = 1, HBM__CAPTURE_MODE_RELAXED = 2 };

struct hbm_backend {
    const hbm__backend_ops *ops;
    void *ctx;
    hbm__backend_caps caps;
    char spec[256];       /* as opened, for messages */
    hbm_host_queue queue; /* a framework's launch queue in front of the device (all NULL: none) */
};

/* Constructors, one per backend file. spec_opts is the text after "name:" (may be ""). */
int hbm__sim_open(struct hbm_backend *b, const char *spec_opts, char *err, size_t errlen);
int hbm__cuda_open(struct hbm_backend *b, const char *spec_opts, char *err, size_t errlen);
int hbm__acl_open(struct hbm_backend *b, const char *spec_opts, char *err, size_t errlen);
/* The name of an AscendCL error code (ACL_ERROR_RT_FEATURE_NOT_SUPPORT), or NULL. */
const char *hbm__acl_error_name(int code);

#endif /* HBM_BACKEND_H */
