/*
 * hbmalloc: a caching allocator for accelerator memory (GPU / NPU HBM).
 *
 * The one public header. All names are prefixed hbm_; handles are opaque.
 * Every function that can fail returns an hbm_status; the allocator keeps
 * the text of its last error (hbm_last_error), never a process-global one.
 * One allocator serves one device of one backend; it is thread-safe
 * (one lock per allocator).
 */
#ifndef HBMALLOC_H
#define HBMALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HBM_VERSION_MAJOR 0
#define HBM_VERSION_MINOR 1
#define HBM_VERSION_PATCH 0
#define HBM_VERSION_STRING "0.1.0"

#if defined(__GNUC__) && !defined(HBM_STATIC)
#define HBM_API __attribute__((visibility("default")))
#else
#define HBM_API
#endif

/* ---- Status codes --------------------------------------------------- */
typedef enum hbm_status {
    HBM_OK = 0,
    HBM_ERR_OOM = 1,          /* device out of memory after every retry */
    HBM_ERR_INVALID = 2,      /* a bad argument (NULL handle, bad fraction, ...) */
    HBM_ERR_CONF = 3,         /* a bad settings string: the message names key and range */
    HBM_ERR_BACKEND = 4,      /* the backend failed (driver error, cannot load, ...) */
    HBM_ERR_DOUBLE_FREE = 5,  /* pointer lies in a block that is already free */
    HBM_ERR_FOREIGN_PTR = 6,  /* pointer was not allocated by this allocator */
    HBM_ERR_INTERIOR_PTR = 7, /* pointer lies inside a live block, not at its start */
    HBM_ERR_NOMEM = 8,        /* host memory for bookkeeping ran out */
    HBM_ERR_WRONG_DEVICE = 9, /* pointer belongs to another device's allocator */
    HBM_ERR_POOL_BUSY = 10,   /* private pool released while blocks are live: kept until they are freed */
    HBM_ERR_CAPTURE = 11,     /* refused while a graph capture is under way (it would synchronize the device) */
    HBM_ERR_STALE = 12,       /* hbm_record_read: the record of a process that has exited */
    HBM_ERR_ASLEEP = 13,      /* the private pool sleeps (hbm_pool_sleep): wake it before allocating into it */
    HBM_ERR_CHECKSUM = 14     /* hbm_pool_wake: the backup changed in host memory since the sleep (a checksum) */
} hbm_status;

/* Short name of a status ("HBM_ERR_OOM"). */
HBM_API const char *hbm_status_name(hbm_status s);

/* ---- Handles ----------------------------------------------------------- */
typedef struct hbm_backend hbm_backend;     /* an opened device backend */
typedef struct hbm_allocator hbm_allocator; /* caching allocator of one device */
typedef uint64_t hbm_stream;                /* backend stream handle; 0 = default stream */
typedef enum hbm_dialect {
    HBM_DIALECT_CUDA = 0, /* PYTORCH_CUDA_ALLOC_CONF keys and rules */
    HBM_DIALECT_NPU = 1   /* PYTORCH_NPU_ALLOC_CONF keys and rules (torch_npu) */
} hbm_dialect;

/* Open a backend from a spec string: "sim" or "sim:capacity=80GiB,memory=host,...".
 * See docs/SIM.md for the simulated device's options. err receives a message on failure. */
HBM_API hbm_status hbm_backend_open(hbm_backend **out, const char *spec, char *err, size_t errlen);
/* Close a backend; every allocator created on it must be destroyed first. */
HBM_API void hbm_backend_close(hbm_backend *b);
/* Name of the backend ("sim"). */
HBM_API const char *hbm_backend_name(const hbm_backend *b);
/* The simulated device only: while held, work recorded on `stream` of a's device stays incomplete (an event recorded
 * there, such as the one a free after hbm_record_stream waits on, does not complete); released, all of it completes.
 * How hbmalloc replay plays a recorded pending free (docs/TRACE_FORMAT.md). HBM_ERR_INVALID on another backend. */
HBM_API hbm_status hbm_sim_hold_stream(hbm_allocator *a, hbm_stream stream, int hold);
/* The simulated device's test controls (docs/SIM.md), for tests of a program's error paths; HBM_ERR_INVALID (or 0, or
 * nothing) on another backend. A fault rule fails calls of one kind (call, or -1: any) whose size lies in
 * [min_size, max_size]: only the nth match counted from the rule's adding (nth 0: every match), as the device being
 * out of memory (oom 1, which the allocator's retry ladder handles) or as a device error (HBM_ERR_BACKEND). */
typedef enum hbm_sim_call {
    HBM_SIM_MALLOC,
    HBM_SIM_FREE,
    HBM_SIM_INFO,
    HBM_SIM_RESERVE,
    HBM_SIM_UNRESERVE,
    HBM_SIM_CREATE,
    HBM_SIM_RELEASE,
    HBM_SIM_MAP,
    HBM_SIM_UNMAP,
    HBM_SIM_ACCESS,
    HBM_SIM_SYNC,
    HBM_SIM_EVENT,
    HBM_SIM_QUERY,
    HBM_SIM_EVSYNC,
    HBM_SIM_DEVSYNC,
    HBM_SIM_HOST_ALLOC,
    HBM_SIM_HOST_FREE,
    HBM_SIM_COPY_D2H,
    HBM_SIM_COPY_H2D,
    HBM_SIM_CALLS
} hbm_sim_call;
typedef struct hbm_sim_fault {
    int call; /* hbm_sim_call, or -1: any */
    uint64_t nth;
    size_t min_size, max_size;
    int oom;
} hbm_sim_fault;
HBM_API hbm_status hbm_sim_add_fault(hbm_backend *b, const hbm_sim_fault *f);
HBM_API void hbm_sim_clear_faults(hbm_backend *b);
/* What the simulated device still holds (all zero once every allocator on it is destroyed) and how it was called. */
typedef struct hbm_sim_state {
    uint64_t calls[HBM_SIM_CALLS]; /* every call, failed ones too */
    uint64_t injected;             /* calls failed by a fault rule */
    uint64_t live_allocations, live_reservations, live_handles, mapped_pages, live_events, live_host;
    int host_backed; /* memory=host: every byte is real host memory */
} hbm_sim_state;
HBM_API hbm_status hbm_sim_get_state(hbm_backend *b, hbm_sim_state *out);
/* The simulated device's hbm_sim_hold_stream for any device of the backend. */
HBM_API hbm_status hbm_sim_hold(hbm_backend *b, int device, hbm_stream stream, int hold);
/* A framework's host-side launch queue in front of the device (torch_npu's task queue, TASK_QUEUE_ENABLE): work
 * it launched may still wait there, not yet on the device's streams. Every call below may wait for the queue's
 * worker thread, which may itself call into hbmalloc: hbmalloc never makes one with its lock held
 * (docs/CONTRACTS.md, "Waiting with the lock open"). sync_device (when set) empties the queue and waits for the
 * current device, in place of hbmalloc's own device synchronize; flush (when sync_device is not set) pushes every
 * queued launch to the device first. event_record, event_query and event_release (all three, or none) record an
 * event on `stream` in the queue's order, after the launches queued there before it, as the framework's own
 * allocator records the events of a block freed while other streams use it (torch_npu: NPUEvent::record, through
 * the queue): then such a free waits for nothing. event_record returns 0, HBM_HOST_QUEUE_NO_STREAM when it cannot
 * record on that stream (then the block waits for the next device-wide wait instead), or another non-zero error;
 * event_query 1 when complete, 0 when not yet, < 0 on an error. may_wait (may be NULL: every thread may) returns 0
 * on a thread the queue itself runs (its worker, the thread that releases finished launches): nothing there may
 * wait for the queue or add to it, or the job hangs. Each returns 0 or a non-zero error unless said otherwise. Set
 * before the first allocation; NULL clears it. */
#define HBM_HOST_QUEUE_NO_STREAM 1
typedef struct hbm_host_queue {
    void *ctx;
    int (*flush)(void *ctx);       /* push every queued launch to the device */
    int (*sync_device)(void *ctx); /* empty the queue and wait for the current device (may be NULL) */
    int (*event_record)(void *ctx, int device, hbm_stream stream, void **event);
    int (*event_query)(void *ctx, void *event);
    void (*event_release)(void *ctx, void *event);
    int (*may_wait)(void *ctx);
} hbm_host_queue;
HBM_API hbm_status hbm_backend_set_host_queue(hbm_backend *b, const hbm_host_queue *q);
/* Whether expandable segments (virtual memory) work on `device`: 1, or 0 with the reason in why. A device may be
 * probed (on Ascend, its context made); the caller's current device is the same after. */
HBM_API int hbm_backend_vmm(hbm_backend *b, int device, char *why, size_t whylen);
/* The device count and the runtime's version text ("AscendCL 1.15.0, driver 24.1.rc3, Ascend910B3"). */
HBM_API int hbm_backend_devices(const hbm_backend *b);
HBM_API const char *hbm_backend_version(const hbm_backend *b);
/* What a backend's runtime offers, found when it was opened. */
typedef struct hbm_backend_info {
    int devices;
    hbm_dialect dialect; /* whose settings its devices read (acl, and the sim opened with dialect=npu: torch_npu's) */
    size_t vmm_granularity; /* the page of its virtual-memory mappings (0: none) */
    int host_copies;        /* pinned host memory and copies: a sleeping pool can keep a backup */
} hbm_backend_info;
HBM_API hbm_status hbm_backend_get_info(const hbm_backend *b, hbm_backend_info *out);
/* Free and total memory of `device`, asked of the device itself (no allocator needed: what a tool sizes a run by). */
HBM_API hbm_status hbm_backend_mem_info(hbm_backend *b, int device, size_t *free_bytes, size_t *total_bytes);
/* Let device `peer` read and write the expandable-segment pages of `device`: those mapped now and those mapped later
 * (PyTorch's enablePeerAccess(peer, device)). Pages are granted to their own device and to the peers enabled so, no
 * others (the CUDA backend's peers=capable option grants every peer that can reach them). Once per pair is enough;
 * HBM_ERR_BACKEND with the reason in err (may be NULL) when the driver refuses, or when `peer` cannot reach `device`
 * (cuDeviceCanAccessPeer). HBM_OK with nothing to do on a backend whose pages need no grant (sim, acl). */
HBM_API hbm_status hbm_backend_enable_peer(hbm_backend *b, int device, int peer, char *err, size_t errlen);
/* The name of a device runtime's error code ("ACL_ERROR_RT_MEMORY_ALLOCATION" for backend "acl"), or NULL when the
 * backend does not know it. */
HBM_API const char *hbm_backend_error_name(const char *backend, int code);

/* Create an allocator for device `device` of backend b. settings is a
 * PYTORCH_*_ALLOC_CONF string; NULL means: HBMALLOC_CONF, else the PyTorch
 * variable of the backend's dialect (PYTORCH_CUDA_ALLOC_CONF / PYTORCH_NPU_ALLOC_CONF). */
HBM_API hbm_status hbm_create(hbm_allocator **out, hbm_backend *b, int device, const char *settings, char *err,
                              size_t errlen);
/* Open a private backend from spec and create an allocator on it; hbm_destroy closes both. */
HBM_API hbm_status hbm_open(hbm_allocator **out, const char *backend_spec, int device, const char *settings, char *err,
                            size_t errlen);
/* Return all cached and live memory to the device and free the allocator (gone either way).
 * HBM_OK, or HBM_ERR_BACKEND when a device call failed while giving memory back (a free, unmap,
 * release, unreserve or event destroy): the device may still hold what that call held. The
 * message then says how many calls failed, how many bytes they held and the first driver error;
 * hbm_destroy_report writes it into msg (may be NULL), hbm_destroy to stderr (unless
 * HBMALLOC_QUIET is set), as no allocator is left to ask. */
HBM_API hbm_status hbm_destroy(hbm_allocator *a);
HBM_API hbm_status hbm_destroy_report(hbm_allocator *a, char *msg, size_t msglen);
/* Right after hbm_create / hbm_open, before any other call: the calling thread alone will use a, so no call takes its
 * lock (a replay, a benchmark). Stops publishing (hbm_publish), whose refresher thread would need the lock, and the
 * snapshots at an OOM that HBMALLOC_OOM_DUMP_DIR asked for (hbm_oom_dump may turn them on again). */
HBM_API void hbm_set_single_thread(hbm_allocator *a);

/* ---- Allocation ---------------------------------------------------------- */
/* Allocate size bytes for use on stream. size 0 gives *out = NULL and HBM_OK. */
HBM_API hbm_status hbm_malloc(hbm_allocator *a, size_t size, hbm_stream stream, void **out);
/* Free a pointer returned by hbm_malloc. NULL is a no-op. Misuse is reported, state kept. */
HBM_API hbm_status hbm_free(hbm_allocator *a, void *ptr);
/* Return every fully free cached segment to the device. */
HBM_API hbm_status hbm_empty_cache(hbm_allocator *a);
/* Limit reserved memory to fraction x device capacity (0..1; 1 removes the limit). */
HBM_API hbm_status hbm_set_memory_fraction(hbm_allocator *a, double fraction);
/* The memory fraction in force (1.0 when none is set). */
HBM_API double hbm_get_memory_fraction(hbm_allocator *a);
/* Size of the block behind a live pointer (the rounded size), 0 if it is not live. */
HBM_API size_t hbm_block_size(hbm_allocator *a, const void *ptr);
/* The device allocation (segment) that holds the live block at ptr, as PyTorch's
 * getBaseAllocation: its start and size. HBM_ERR_INVALID for a block of an expandable
 * segment (it has no single device allocation) or a pointer that is not a live block start. */
HBM_API hbm_status hbm_segment_of(hbm_allocator *a, const void *ptr, void **base, size_t *size);

/* ---- Streams -------------------------------------------------------------- */
/* Mark a live block as used by another stream: when it is freed, an event is
 * recorded on each such stream and the block is reused only once all have
 * completed (PyTorch's record_stream). A use on the allocating stream is ignored. */
HBM_API hbm_status hbm_record_stream(hbm_allocator *a, void *ptr, hbm_stream stream);

/* ---- Private pools (PyTorch's MemPool and CUDA-graph pools) --------------- */
typedef uint64_t hbm_mempool; /* nonzero id */
/* A new private pool, held once by the caller. */
HBM_API hbm_status hbm_mempool_create(hbm_allocator *a, hbm_mempool *out);
/* Route allocations made on `stream` into pool p until hbm_mempool_end. */
HBM_API hbm_status hbm_mempool_begin_stream(hbm_allocator *a, hbm_mempool p, hbm_stream stream);
/* Route allocations made by the calling thread into pool p until hbm_mempool_end. */
HBM_API hbm_status hbm_mempool_begin_thread(hbm_allocator *a, hbm_mempool p);
/* Stop routing into p. */
HBM_API hbm_status hbm_mempool_end(hbm_allocator *a, hbm_mempool p);
/* Drop the creator's hold on p. Its cached memory returns on the next empty_cache
 * once no block of it is live; with live blocks the answer is HBM_ERR_POOL_BUSY. */
HBM_API hbm_status hbm_mempool_release(hbm_allocator *a, hbm_mempool p);
/* Return pool p's free memory (whole free segments, free pages) to the device now, as torch's emptyCache(mempool_id):
 * the device's work is waited for first. Its live blocks stay. */
HBM_API hbm_status hbm_mempool_trim(hbm_allocator *a, hbm_mempool p);
/* Bytes reserved by pool p (0 for an unknown pool). */
HBM_API size_t hbm_mempool_reserved(hbm_allocator *a, hbm_mempool p);

/* Graph capture (PyTorch's beginAllocateToPool for CUDA and NPU graphs): route every allocation
 * whose stream `filter` accepts (it returns nonzero) into pool p until hbm_mempool_end(a, p).
 * Several captures may route to one pool. While any capture routing is in force the allocator
 * makes no event query or record, no stream or event synchronization and no device free: frees
 * that wait on other streams are deferred until no capture is under way, cached memory is not
 * released (empty_cache answers HBM_ERR_CAPTURE) and an allocation that cannot be served from
 * the device without releasing memory fails as out of memory. filter runs under the allocator's
 * lock (it must not call into the allocator) and must stay valid until hbm_mempool_end. */
typedef int (*hbm_stream_filter)(void *ctx, hbm_stream stream);
HBM_API hbm_status hbm_mempool_begin_capture(hbm_allocator *a, hbm_mempool p, hbm_stream_filter filter, void *ctx);
/* Number of capture routings in force (0: none). */
HBM_API int hbm_captures_underway(hbm_allocator *a);
/* hbm_malloc into pool p, whatever routing is in force (the pluggable allocator of a framework's MemPool, which
 * asks for whole segments of one pool). */
HBM_API hbm_status hbm_mempool_malloc(hbm_allocator *a, hbm_mempool p, size_t size, hbm_stream stream, void **out);

/* ---- Pools that sleep (docs/SLEEP.md) -------------------------------------- */
/* Name private pool p ("weights", "kv_cache", "cuda_graph"; pools may share a name) and let it sleep: its memory is
 * mapped page by page on expandable segments whatever the expandable_segments setting, so that hbm_pool_sleep can
 * give every physical page back while each block keeps its address. backup: sleeping copies the live blocks to
 * pinned host memory and waking copies them back; without it they wake with undefined contents (a KV cache).
 * backup is the default of each sleep, which may choose otherwise (hbm_sleep_opts.backup). Before the pool's first
 * allocation: once it holds memory its tag and default are fixed (the same call again is a no-op; another tag or
 * default is refused, HBM_ERR_INVALID). HBM_ERR_INVALID with the reason and the fix on a device without virtual
 * memory (no address can be kept there), or with backup where the runtime has no pinned host copies; a tag empty or
 * with a control character. */
HBM_API hbm_status hbm_pool_tag(hbm_allocator *a, hbm_mempool p, const char *tag, int backup);

typedef void (*hbm_sleep_progress)(void *ctx, uint64_t done, uint64_t total);
/* What a sleep does with the pool's contents: the tag's choice (hbm_pool_tag's backup), or this sleep's own. */
typedef enum hbm_sleep_backup {
    HBM_SLEEP_AS_TAGGED = 0, /* as the pool was tagged */
    HBM_SLEEP_BACKUP = 1,    /* copied to pinned host memory, copied back at the wake (vLLM's sleep level 1) */
    HBM_SLEEP_DISCARD = 2    /* not copied: the blocks wake with undefined contents (level 2; a KV cache) */
} hbm_sleep_backup;
typedef struct hbm_sleep_opts {
    size_t chunk_bytes;          /* the backup is copied in pieces of this size, each a pinned buffer (0: 64 MiB) */
    hbm_sleep_progress progress; /* bytes copied so far, after each piece, with the allocator's lock released */
    void *ctx;
    int release_host;        /* wake: free the pinned buffers (0: keep them for the next sleep) */
    hbm_sleep_backup backup; /* sleep: keep the contents or not, this time (0: as tagged) */
    int no_restore;          /* wake: drop the backup instead of copying it back, the blocks undefined (new contents
                                are loaded next: an RL job's weight sync); 0: restore it */
    int checksum;            /* sleep: checksum each piece of the backup once copied; its wake checks them before
                                copying anything back (HBM_ERR_CHECKSUM naming the pool and the piece, the pool left
                                asleep). Costs a read of the backup at each end; needs host memory the CPU can read */
    const char *backup_dir;  /* sleep: keep the backup in a file made in this folder, through two pinned buffers of
                                chunk_bytes, not in pinned memory (host memory short); its room is taken before the
                                first copy (a full disk refuses the sleep, the pool awake), the file unlinked at once
                                and closed by the wake. NULL: pinned host memory */
} hbm_sleep_opts;

/* Put pool p to sleep: wait for the device's work, copy its live blocks to host memory (backup pools), then unmap
 * and release every physical page of it, free cached pages too, keeping its reservations and every block's address.
 * Until hbm_pool_wake, allocations into it are refused (HBM_ERR_ASLEEP) and its blocks must not be touched by the
 * device; frees work. A failure before any page is given back leaves it awake; after, it is asleep and the message
 * says what is still held (sleep again to retry). HBM_ERR_CAPTURE during a graph capture. opts may be NULL. A pool
 * released while blocks of it are live (hbm_mempool_release: HBM_ERR_POOL_BUSY; a deleted graph whose output is
 * held) is still its tag's: it sleeps and wakes, released awake or asleep, until it is emptied and reaped. */
HBM_API hbm_status hbm_pool_sleep(hbm_allocator *a, hbm_mempool p, const hbm_sleep_opts *opts);
/* Wake pool p: new pages mapped at the same addresses under its live blocks, the backup copied back. On failure
 * (the device is full: HBM_ERR_OOM; a refused call: HBM_ERR_BACKEND) nothing is lost: the pool stays asleep, its
 * backup kept, and can be woken later. */
HBM_API hbm_status hbm_pool_wake(hbm_allocator *a, hbm_mempool p, const hbm_sleep_opts *opts);
/* Say that p's memory was handed to a collective library (NCCL/HCCL buffer registration, a symmetric-memory
 * rendezvous), which keeps pointing at its physical pages: until as many hbm_pool_unpin, hbm_pool_sleep refuses it
 * (HBM_ERR_INVALID) with `reason` ("ncclCommRegister by the training loop"; the latest one is kept, 160 bytes), since
 * the pages it gives back would leave the library with stale mappings (hangs, wrong results). docs/SLEEP.md,
 * "Collectives", says what hbmalloc detects by itself and what only the caller knows. */
HBM_API hbm_status hbm_pool_pin(hbm_allocator *a, hbm_mempool p, const char *reason);
HBM_API hbm_status hbm_pool_unpin(hbm_allocator *a, hbm_mempool p);

typedef enum hbm_pool_state {
    HBM_POOL_AWAKE = 0,
    HBM_POOL_ASLEEP = 1,
    HBM_POOL_FALLING_ASLEEP = 2, /* a sleep is under way (another thread's) */
    HBM_POOL_WAKING = 3          /* a wake is under way */
} hbm_pool_state;

typedef struct hbm_pool_info {
    hbm_mempool id;
    char tag[64]; /* "" when untagged */
    int backup;
    hbm_pool_state state;
    uint64_t live_bytes;     /* allocated blocks */
    uint64_t reserved_bytes; /* pages mapped now */
    uint64_t asleep_bytes;   /* pages the sleep gave back that the wake maps again */
    uint64_t backup_bytes;   /* live bytes held in host memory for the wake */
    uint64_t host_bytes;     /* pinned host memory held: the backup, or kept for the next sleep */
    uint64_t sleeps, wakes;
    /* The last sleep and the last wake: wall time, time in device calls (modelled on the sim), device calls. */
    uint64_t sleep_ns, sleep_device_ns, sleep_calls;
    uint64_t wake_ns, wake_device_ns, wake_calls;
    uint64_t file_bytes; /* of backup_bytes, those in a file (hbm_sleep_opts.backup_dir) */
} hbm_pool_info;
HBM_API hbm_status hbm_pool_info_get(hbm_allocator *a, hbm_mempool p, hbm_pool_info *out);
/* The ids of a's private pools, oldest first, up to cap; returns how many there are. */
HBM_API size_t hbm_pool_list(hbm_allocator *a, hbm_mempool *ids, size_t cap);

/* What holds a's device's memory while pools sleep (docs/SLEEP.md, "What still holds memory"): the device's figures
 * as its runtime reports them (mem_get_info), hbmalloc's reserved bytes by holder, and the rest, outside hbmalloc.
 * reserved = asleep_reserved + awake_reserved + graph_reserved + default_reserved. */
typedef struct hbm_resident {
    int device;
    /* The runtime's figures: total (the capacity read at create when its query fails); used = total - free, -1 when
     * unknown (the query failed); outside = used - reserved: other processes, the runtime's context, communicators'
     * buffers, another allocator of this process (0 if used < reserved; -1 when unknown). */
    int64_t device_total, device_used, outside;
    uint64_t reserved; /* hbmalloc's reserved_bytes */
    /* Tagged pools not awake: pages still mapped (0 after a whole sleep); pages given back (not reserved). */
    uint64_t asleep_reserved, asleep_bytes;
    uint64_t awake_reserved, awake_live;     /* tagged pools awake: pages mapped; allocated blocks */
    uint64_t graph_reserved, graph_live;     /* untagged private pools (graph pools, MemPools): they never sleep */
    uint64_t default_reserved, default_live; /* the default pools */
    uint64_t cache;                          /* default_reserved - default_live: reserved by hbmalloc but unallocated */
    uint64_t releasable; /* of the cache, what empty_cache gives back now (whole free segments and pages) */
    uint32_t asleep_pools, awake_pools, graph_pools;
    char awake_tags[128]; /* the awake pools' pages by tag, largest first: "kv_cache 2.00 GiB, weights 1.00 GiB" */
} hbm_resident;
/* Fill out for a's device, under its lock. A failed memory query is not an error: device_used and outside -1. */
HBM_API hbm_status hbm_resident_get(hbm_allocator *a, hbm_resident *out);
/* r as one sentence for people, its largest holder first; returns its length (cut to fit len, NUL-terminated). */
HBM_API size_t hbm_resident_describe(const hbm_resident *r, char *buf, size_t len);

/* ---- Several devices ------------------------------------------------------- */
/* One allocator per device of a backend, created on first use, addressed by index. */
typedef struct hbm_devices hbm_devices;
HBM_API hbm_status hbm_devices_open(hbm_devices **out, const char *backend_spec, const char *settings, char *err,
                                    size_t errlen);
/* Destroys every device's allocator (each failure said on stderr, as hbm_destroy) and closes the backend:
 * HBM_OK, or HBM_ERR_BACKEND when a device call failed while giving memory back. */
HBM_API hbm_status hbm_devices_close(hbm_devices *d);
HBM_API int hbm_devices_count(const hbm_devices *d);
/* The backend the set's allocators share. */
HBM_API hbm_backend *hbm_devices_backend(hbm_devices *d);
/* The allocator of a device (NULL for a bad index or a failed create: see hbm_devices_error). */
HBM_API hbm_allocator *hbm_devices_get(hbm_devices *d, int device);
/* The allocator of a device if it was created already, else NULL (never creates one). */
HBM_API hbm_allocator *hbm_devices_existing(hbm_devices *d, int device);
HBM_API hbm_status hbm_devices_malloc(hbm_devices *d, int device, size_t size, hbm_stream stream, void **out);
/* Free on a device; a pointer of another device is reported (HBM_ERR_WRONG_DEVICE), nothing changes. */
HBM_API hbm_status hbm_devices_free(hbm_devices *d, int device, void *ptr);
/* The calling thread's last error from a device set (per thread, as errno: failures on other threads do not
 * overwrite it). */
HBM_API const char *hbm_devices_error(const hbm_devices *d);

/* ---- Errors -------------------------------------------------------------- */
/* Text of the last error on this allocator ("" if none). Valid until the next call on
 * this allocator; with several threads use hbm_copy_last_error. */
HBM_API const char *hbm_last_error(const hbm_allocator *a);
/* Copy the last error text into buf (always NUL-terminated); returns its length. */
HBM_API size_t hbm_copy_last_error(hbm_allocator *a, char *buf, size_t len);

/* The figures of the last out-of-memory error, as PyTorch's OOM message gives them. */
/* Device memory hbmalloc does not hold (docs/MONITOR.md, "Memory outside the allocator"): the device's used bytes as
 * its runtime counts them (total - free: cudaMemGetInfo / aclrtGetMemInfo) less hbmalloc's reserved bytes — other
 * processes, this process's runtime context, communicators' buffers (NCCL, HCCL), another allocator beside
 * hbmalloc. Where the runtime tells memory per process (CUDA: NVML, as PyTorch's OOM message reads it; Ascend: DCMI, as npu-smi reads it),
 * split into this process's part and the other processes'. */
#define HBM_OUTSIDE_PROCS 8
typedef struct hbm_outside {
    int device;
    int64_t device_total; /* the runtime's capacity (the one read at create when its query fails) */
    int64_t device_used;  /* total - free; -1: the query failed */
    int64_t reserved;     /* hbmalloc's reserved_bytes at the query */
    int64_t outside;      /* device_used - reserved (0 if below); -1: unknown */
    /* The runtime's per-process figures (-1: it has none, it failed, or this process is not in its list, as in a
     * container with its own PID namespace, where NVML lists the host's PIDs): this process's device memory, of it
     * what is not hbmalloc's (process_bytes - reserved, 0 if below), and every other process's. outside - (
     * process_outside + others) is what no process is charged with (the driver's own). */
    int64_t process_bytes, process_outside, others;
    uint64_t ns;         /* CLOCK_REALTIME of the query, in nanoseconds (0: never measured) */
    uint32_t nprocs;     /* processes the runtime listed (0 when it has no such list) */
    int32_t self_listed; /* this process is among them (0: another PID namespace's list, or none) */
    struct {             /* the largest of them, largest first */
        int64_t pid;
        uint64_t bytes;
    } procs[HBM_OUTSIDE_PROCS];
} hbm_outside;
/* Measure now: one memory query of the device (under a's lock) and, where the backend has one, one per-process
 * query (without it). The figures also become the statistics' device_used_bytes, outside_bytes,
 * outside_process_bytes and outside_others_bytes. A failed query is not an error: its figures are -1. */
HBM_API hbm_status hbm_outside_get(hbm_allocator *a, hbm_outside *out);
/* o as one sentence for people ("2.50 GiB of the device is in use outside hbmalloc: 1.00 GiB by this process ...");
 * returns its length (cut to fit len, NUL-terminated). */
HBM_API size_t hbm_outside_describe(const hbm_outside *o, char *buf, size_t len);

typedef struct hbm_oom_info {
    uint64_t request;                     /* the caller's size */
    uint64_t alloc_size;                  /* what could not be obtained: the segment size ("Tried to allocate") */
    uint64_t device_total, device_free;   /* read after every retry */
    uint64_t allowed;                     /* the memory-fraction limit, 0 when none */
    uint64_t allocated, active, reserved; /* allocated_bytes, active_bytes, reserved_bytes (all, current) */
    int too_large;                        /* the request was 1 EiB or more */
    int during_capture;                   /* a graph capture was under way */
    hbm_outside outside;                  /* memory outside hbmalloc then (its per-process figures included) */
} hbm_oom_info;
/* The last OOM's figures and message, copied together under the allocator's lock
 * (HBM_ERR_INVALID when there was none). msg may be NULL. */
HBM_API hbm_status hbm_copy_last_oom(hbm_allocator *a, hbm_oom_info *out, char *msg, size_t msglen);

/* ---- Statistics (PyTorch memory_stats() names and meanings) ------------------ */
typedef struct hbm_stat {
    int64_t current, peak, allocated, freed;
} hbm_stat;

enum { HBM_POOL_ALL = 0, HBM_POOL_SMALL = 1, HBM_POOL_LARGE = 2, HBM_POOL_KINDS = 3 };

typedef struct hbm_stats {
    hbm_stat allocation[HBM_POOL_KINDS];
    hbm_stat segment[HBM_POOL_KINDS];
    hbm_stat active[HBM_POOL_KINDS];
    hbm_stat inactive_split[HBM_POOL_KINDS];
    hbm_stat allocated_bytes[HBM_POOL_KINDS];
    hbm_stat reserved_bytes[HBM_POOL_KINDS];
    hbm_stat active_bytes[HBM_POOL_KINDS];
    hbm_stat inactive_split_bytes[HBM_POOL_KINDS];
    hbm_stat requested_bytes[HBM_POOL_KINDS];
    hbm_stat oversize_allocations;
    hbm_stat oversize_segments;
    int64_t num_alloc_retries;
    int64_t num_ooms;
    int64_t num_sync_all_streams;
    int64_t num_device_alloc;
    int64_t num_device_free;
    int64_t max_split_size; /* -1 when unlimited, as PyTorch reports */
    /* hbmalloc extensions (not in PyTorch's memory_stats): */
    int64_t expandable_segments;     /* 1 when expandable segments are in force, else 0 */
    int64_t num_expandable_segments; /* expandable segments (virtual reservations) held now */
    int64_t arena_bytes;             /* the hbm_arena region held (0: none); in reserved_bytes too */
    int64_t plan_height;             /* hbm_plan_file or hbm_step_plan: the plan's region (0: no plan) */
    int64_t plan_hits, plan_misses;  /* allocations served at their planned offset, and not (they fell back) */
    int64_t plan_unplanned;          /* hbm_step_plan: allocations the plan has no place for (kept across steps,
                                        past the plan's end), served by the caching policy */
    int64_t plan_replans;            /* hbm_step_plan: plans made (the first one included) */
    int64_t steps;                   /* step boundaries: hbm_step calls, or found (hbm_step_plan, unmarked) */
    int64_t asleep_pools;            /* private pools asleep (hbm_pool_sleep) */
    int64_t asleep_bytes;            /* their pages given back (not in reserved_bytes), mapped again at wake */
    int64_t backup_bytes;            /* their live bytes held in host memory for the wake */
    /* Memory outside hbmalloc as last measured (hbm_outside: by hbm_outside_get, the published record's refresh
     * twice a second, an OOM); -1 until measured, or unknown: */
    int64_t device_used_bytes;     /* the device's used bytes (total - free) */
    int64_t outside_bytes;         /* of them, not hbmalloc's reserved bytes */
    int64_t outside_process_bytes; /* of those, this process's (NVML) */
    int64_t outside_others_bytes;  /* other processes' (NVML) */
} hbm_stats;

/* The device's free and total memory as its runtime reports them (cudaMemGetInfo / aclrtGetMemInfo: what
 * torch.cuda.mem_get_info() and nvidia-smi / npu-smi see), memory other processes hold included. */
HBM_API hbm_status hbm_mem_get_info(hbm_allocator *a, size_t *free_bytes, size_t *total_bytes);
/* Copy the allocator's statistics. */
HBM_API hbm_status hbm_get_stats(hbm_allocator *a, hbm_stats *out);
/* The few figures a caller follows event by event, without copying every statistic. */
typedef struct hbm_usage {
    uint64_t allocated;      /* bytes of live blocks (torch.cuda.memory_allocated) */
    uint64_t reserved;       /* bytes held from the device (torch.cuda.memory_reserved) */
    uint64_t requested;      /* bytes the live blocks' callers asked for */
    uint64_t plan_positions; /* allocations per step of the plan in force (hbm_step_plan, hbm_plan_file; 0: none) */
} hbm_usage;
HBM_API hbm_status hbm_memory_usage(hbm_allocator *a, hbm_usage *out);
/* peak = current for every stat. */
HBM_API void hbm_reset_peak_stats(hbm_allocator *a);
/* allocated = freed = 0 and the num_* counters to 0. */
HBM_API void hbm_reset_accumulated_stats(hbm_allocator *a);

/* One flattened statistic, named as torch.cuda.memory_stats() names it
 * ("allocated_bytes.all.peak", "num_ooms"). */
typedef struct hbm_stat_entry {
    char name[48];
    int64_t value;
} hbm_stat_entry;
#define HBM_STAT_ENTRIES 138
/* Fill out[0..HBM_STAT_ENTRIES) in sorted order (as memory_stats() sorts); returns the count written. */
HBM_API int hbm_stats_flatten(const hbm_stats *s, hbm_stat_entry *out, int cap);

/* Device-call counters kept by the device layer for any backend. */
typedef struct hbm_device_counters {
    uint64_t malloc_calls, free_calls, info_calls;
    uint64_t map_calls, unmap_calls; /* pages mapped / unmapped (expandable segments) */
    uint64_t vmm_calls;              /* other virtual-memory calls: reserve, create, release, access */
    uint64_t sync_calls;             /* stream and event synchronizations */
    uint64_t event_calls;            /* event create / record / query / destroy */
    uint64_t failed_calls;           /* calls that returned an error (including OOM) */
    uint64_t device_ns;              /* modelled (sim) or measured (real device) time in device calls */
    uint64_t host_calls;             /* pinned host memory allocated or freed (a sleeping pool's backup) */
    uint64_t copy_calls;             /* copies between device and host queued */
    uint64_t copy_bytes;             /* bytes they moved */
    /* With a framework's launch queue (hbm_backend_set_host_queue): */
    uint64_t device_waits;    /* device-wide waits (the queue emptied, the device synchronized), lock open */
    uint64_t queue_events;    /* events recorded in the queue's order for blocks freed while other streams used them */
    uint64_t unrecorded_uses; /* such uses that could not be recorded at the free (a thread of the queue's own, a
                                    stream the queue does not know): held until recorded later or a device-wide wait */
    uint64_t locked_queue_waits; /* waits that would have held the lock: not made, the memory stayed cached; 0
                                    unless a path broke the protocol (docs/CONTRACTS.md) */
} hbm_device_counters;
HBM_API void hbm_get_device_counters(hbm_allocator *a, hbm_device_counters *out);

/* ---- Settings ---------------------------------------------------------- */

/* Parse a settings string and write the effective settings, one "key: value" per line,
 * into out; on error returns HBM_ERR_CONF and writes the message into out. */
HBM_API hbm_status hbm_settings_check(const char *settings, hbm_dialect d, char *out, size_t outlen);
/* The same for the value of an environment variable: PYTORCH_CUDA_ALLOC_CONF, PYTORCH_NPU_ALLOC_CONF and
 * PYTORCH_ALLOC_CONF are read by the framework too, which refuses hbmalloc's own (hbm_*) keys there. */
HBM_API hbm_status hbm_settings_check_var(const char *var, const char *settings, hbm_dialect d, char *out,
                                          size_t outlen);
/* The same as one framework release decides it. var: the variable the string is set in (PYTORCH_* is read as
 * the framework reads it, leniency included, each lenient reading listed under "warnings:"; NULL or
 * HBMALLOC_CONF strictly, with hbmalloc's keys too); version: the PyTorch (CUDA dialect) or torch_npu (NPU
 * dialect) release, "2.6", "2.1.0.post6"; NULL or "" for the newest known; vmm: whether the device has
 * virtual memory (1, 0, -1 unknown), which decides torch_npu's rule on expandable segments with
 * max_split_size_mb or garbage_collection_threshold. docs/CONFIGURATION.md lists the releases and the cases. */
HBM_API hbm_status hbm_settings_check_release(const char *var, const char *settings, hbm_dialect d, const char *version,
                                              int vmm, char *out, size_t outlen);
/* What that release runs, on that device, as a strict settings string of the device-memory keys that differ
 * from the defaults ("" for the defaults): lenient readings resolved, torch_npu's expandable fallback applied,
 * host-allocator keys left out. Pass it to hbm_create or a replay to model what the framework runs. On error,
 * HBM_ERR_CONF and the message in out. */
HBM_API hbm_status hbm_settings_effective(const char *var, const char *settings, hbm_dialect d, const char *version,
                                          int vmm, char *out, size_t outlen);
/* The framework release hbmalloc reads a version as (the newest known one not after it): its name ("torch_npu
 * 2.1.0.post6 (v6.0.rc2-pytorch2.1.0)", "PyTorch 2.6") and, for torch_npu, its tag ("v6.0.rc2-pytorch2.1.0"; "" for
 * PyTorch). HBM_ERR_CONF with the reason in name for a version older than every known release, or not a version. */
HBM_API hbm_status hbm_release_describe(hbm_dialect d, const char *version, char *name, size_t namelen, char *tag,
                                        size_t taglen);
/* Every release of the dialect's framework whose parser hbmalloc reproduces, one per line, with what sets it apart
 * (`hbmalloc conf --releases`). */
HBM_API void hbm_release_list(hbm_dialect d, char *out, size_t len);
/* Every settings key hbmalloc reads, one row of its table each: name, dialects, value, default, what it does (a
 * Markdown table: `hbmalloc conf --keys`, docs/CONFIGURATION.md's key list). */
HBM_API void hbm_settings_keys(char *out, size_t len);
/* How an error names a settings string given to hbm_create as an argument: "(from " HBM_SETTINGS_ARGUMENT ")" (the
 * tool says "(from --conf)" instead). */
#define HBM_SETTINGS_ARGUMENT "the settings argument"
/* Rebuild a recorded state (a replay of a snapshot whose recording began mid-run): a whole segment of `size`
 * bytes on `stream`, in the small pool when `small`, with n blocks allocated at `offsets` (increasing, non-
 * overlapping, inside the segment, all in 512-byte units) of `sizes` bytes for requests of `requested` bytes;
 * the rest of the segment is cached free memory. The blocks' pointers go to ptrs; hbm_free frees them. */
HBM_API hbm_status hbm_seed_segment(hbm_allocator *a, size_t size, hbm_stream stream, int small, size_t n,
                                    const size_t *offsets, const size_t *sizes, const size_t *requested, void **ptrs);
/* Effective settings of a live allocator, in the same form, with any capability fallback. */
HBM_API hbm_status hbm_settings_describe(hbm_allocator *a, char *out, size_t outlen);
/* The capability warning given at create ("" if none), e.g. expandable segments unsupported. */
HBM_API const char *hbm_warning(const hbm_allocator *a);

/* ---- History and snapshots (PyTorch's _record_memory_history / _snapshot) -- */
typedef enum hbm_trace_action {
    HBM_TRACE_ALLOC = 0,
    HBM_TRACE_FREE_REQUESTED = 1,
    HBM_TRACE_FREE_COMPLETED = 2,
    HBM_TRACE_SEGMENT_ALLOC = 3,
    HBM_TRACE_SEGMENT_FREE = 4,
    HBM_TRACE_SEGMENT_MAP = 5,
    HBM_TRACE_SEGMENT_UNMAP = 6,
    HBM_TRACE_SNAPSHOT = 7,
    HBM_TRACE_OOM = 8,
    HBM_TRACE_SLEEP = 9, /* pages of a sleeping pool given back (addr, size: one run of them); "sleep" in snapshots */
    HBM_TRACE_WAKE = 10  /* mapped again by its wake; "wake" */
} hbm_trace_action;

typedef struct hbm_trace_entry {
    hbm_trace_action action;
    uint64_t addr; /* for HBM_TRACE_OOM: free device bytes, as PyTorch's device_free */
    uint64_t size; /* request for alloc/free, segment or mapped bytes, rounded request for oom */
    hbm_stream stream;
    uint64_t time_us;    /* microseconds since the Unix epoch */
    const char *context; /* the call-site label, or NULL; points into the snapshot (hbm_snapshot.labels) */
    const char *tag;     /* HBM_TRACE_SLEEP / WAKE: the pool's tag (NULL: not kept), in place of a context */
    int backup;          /* HBM_TRACE_SLEEP / WAKE: the pool keeps a backup (its live bytes copied out and back) */
} hbm_trace_entry;

/* Keep the last max_entries trace entries in a ring buffer (0 turns history off and clears it). The ring grows as
 * entries come, so any max_entries is accepted (torch's default is sys.maxsize); when host memory runs out it stops
 * growing, says so once on stderr, and keeps the newest entries it holds. */
HBM_API hbm_status hbm_history_enable(hbm_allocator *a, size_t max_entries);

/* Call-site labels. A label is one frame or several, innermost first, separated by '\n'; a frame
 * is a name, or "name\tfilename\tline" (snapshots write each as PyTorch's frame dict). */
typedef uint32_t hbm_label;              /* 0: none */
#define HBM_LABEL_MAX 65536              /* bytes of label text */
#define HBM_LABELS_MAX 1048576           /* distinct labels an allocator keeps */
#define HBM_LABELS_MAX_BYTES (64u << 20) /* bytes of distinct label text an allocator keeps */
/* The id of a label text (the same text gives the same id; copied and kept until destroy). Texts
 * are kept for the allocator's life (blocks and the history refer to them), so their number is
 * bounded: past HBM_LABELS_MAX texts or HBM_LABELS_MAX_BYTES of text, a new text is refused
 * (HBM_ERR_NOMEM, "label table full") while texts already kept still answer. Label what repeats
 * (a call site, a phase: "forward", "optimizer.step"), not what grows ("step 18231"). */
HBM_API hbm_status hbm_label_intern(hbm_allocator *a, const char *text, hbm_label *out);
/* Allocator-wide label: entries recorded from now on, by calls that carry none of their own,
 * carry this one (NULL clears it). */
HBM_API hbm_status hbm_history_context(hbm_allocator *a, const char *label);
/* hbm_malloc whose trace entries, and the block's, carry `label` (0: the allocator-wide label).
 * The frees of the block carry it too, as PyTorch's carry the context of the allocation. */
HBM_API hbm_status hbm_malloc_labeled(hbm_allocator *a, size_t size, hbm_stream stream, hbm_label label, void **out);

typedef enum hbm_block_state {
    HBM_BLOCK_INACTIVE = 0,
    HBM_BLOCK_ALLOCATED = 1,
    HBM_BLOCK_PENDING_FREE = 2
} hbm_block_state;

typedef struct hbm_snap_block {
    uint64_t addr, size, requested;
    hbm_block_state state;
    const char *context; /* label of the allocation (live and pending blocks), or NULL */
} hbm_snap_block;

typedef struct hbm_snap_segment {
    uint64_t addr, total_size, allocated_size, active_size, requested_size;
    hbm_stream stream;
    int is_small, is_expandable;
    hbm_mempool pool;                /* 0: the default pools */
    size_t first_block, nblocks;     /* into hbm_snapshot.blocks */
    uint64_t range_addr, range_size; /* an expandable segment's whole address range, of which this entry is a mapped
                                        run (the rest unmapped); otherwise the segment itself */
    int is_asleep;      /* its pool sleeps: the run's pages are given back, its blocks keep their addresses */
    uint64_t page_size; /* an expandable segment's page (what is mapped and unmapped at once); 0: a whole segment */
} hbm_snap_segment;

/* Memory state at one moment, and the history: PyTorch's snapshot structure. */
typedef struct hbm_snapshot {
    int device;
    hbm_snap_segment *segments; /* by address; an expandable segment gives one entry per mapped run */
    size_t nsegments;
    hbm_snap_block *blocks;
    size_t nblocks;
    hbm_trace_entry *trace; /* oldest first */
    size_t ntrace;
    char settings[512];  /* the settings string in force */
    char *labels;        /* the label texts the snapshot refers to (its own copy) */
    hbm_outside outside; /* memory outside hbmalloc, measured as the snapshot was taken */
} hbm_snapshot;

HBM_API hbm_status hbm_snapshot_take(hbm_allocator *a, hbm_snapshot **out);
HBM_API void hbm_snapshot_free(hbm_snapshot *s);
typedef enum hbm_snapshot_format { HBM_SNAPSHOT_PICKLE = 0, HBM_SNAPSHOT_JSON = 1 } hbm_snapshot_format;
/* Write a snapshot as PyTorch writes _dump_snapshot (pickle; opens in memory_viz) or as JSON. */
HBM_API hbm_status hbm_snapshot_save(const hbm_snapshot *s, const char *path, hbm_snapshot_format fmt, char *err,
                                     size_t errlen);

/* ---- Snapshots at an OOM (docs/API.md, "Snapshots at an OOM") ---------------------------------------------
 * At each OOM of a malloc, the allocator's snapshot (hbm_snapshot_save's pickle, with the history if it is recorded)
 * goes to dir/hbmalloc-oom-rank{RANK}-dev{DEVICE}-pid{PID}-{N}.pickle ($RANK, else $RANK_ID; "norank" without one),
 * written under a hidden name and then given its own, after the malloc gave its lock back; the malloc returns its
 * HBM_ERR_OOM as before. At most max_dumps per allocator (-1: $HBMALLOC_OOM_DUMP_MAX, else 3), and none that would
 * take the folder's hbmalloc-oom-* files past max_mb MiB (-1: $HBMALLOC_OOM_DUMP_MAX_MB, else 2048): past a bound,
 * one warning; a failed write (the folder gone, the disk full) turns them off with one warning (hbm_warning, and
 * stderr unless HBMALLOC_QUIET). hbm_create does this for $HBMALLOC_OOM_DUMP_DIR (a refusal there is a warning).
 * dir NULL or "": off. HBM_ERR_INVALID with the reason in hbm_last_error for a folder this process cannot write or a
 * bad bound (nothing changed). */
HBM_API hbm_status hbm_oom_dump(hbm_allocator *a, const char *dir, int max_dumps, long long max_mb);

/* ---- Training steps and planning (hbmalloc policies) ------------------------- */
/* A training step ends here (call it after optimizer.step(); hbmalloc_torch.step() and
 * hbmalloc_torch.hook_optimizer() do). Counted in stats.steps; with the hbm_step_plan
 * setting the allocator learns the step's allocations and serves later steps from a plan
 * (docs/CONFIGURATION.md); without any call it looks for the steps itself, and the first
 * call ends that. Cheap: O(1) unless a plan is made, which happens at a few
 * boundaries only and costs at most about 4*10^9 instructions whatever the step's
 * length (docs/POLICY.md, the step plan). */
HBM_API hbm_status hbm_step(hbm_allocator *a);

/* A buffer to place: live at the allocations numbered [start, end) and, in a cyclic plan
 * (one period of a repeating step), also over [0, wrap) of the next period (0: not). */
typedef struct hbm_lifetime {
    uint64_t size;       /* bytes, > 0 (in) */
    uint32_t start, end; /* start < end (in) */
    uint32_t wrap;       /* (in) */
    uint64_t offset;     /* where it goes in the region (out) */
} hbm_lifetime;

typedef struct hbm_plan_info {
    uint64_t height;        /* the region the offsets need: the highest offset + size */
    uint64_t peak_live;     /* the most bytes live at one allocation: no plan is lower */
    uint64_t greedy_height; /* the best of the eight greedy orders, before the search */
    uint64_t evaluations;   /* greedy placements made */
    char greedy_order[24];  /* which order that was */
} hbm_plan_info;

/* Offsets for n buffers such that no two live at the same allocation overlap, the
 * region as low as the search finds (lifetime_planner.c: eight greedy orders, then up to `budget`
 * evaluations of an improvement search, 0: automatic; deterministic for a seed).
 * HBM_ERR_INVALID for an empty lifetime, a zero size or sizes summing past 2^62. */
HBM_API hbm_status hbm_plan_lifetimes(hbm_lifetime *b, size_t n, uint64_t budget, uint64_t seed, hbm_plan_info *info);

/* The training step of a sequence of n allocations, found as the step plan finds it in a job that does not mark
 * its steps (docs/POLICY.md): size[k] the k-th allocation's size, freed[k] how many allocations had been made when
 * it was freed (>= n: not freed). Each allocation is keyed by its size and by which earlier allocations were freed
 * just before it, or by either alone; the step is the period of the longest end, of at least half of the
 * allocations and at least HBM_MIN_STEP long, that repeats under any of these keys and whose live bytes come back
 * each period. Returns that period (0: none, or no host memory); *len the repeating end's length, *by the keys
 * that repeat (HBM_STEP_BY_SIZE | HBM_STEP_BY_FREES), *layers (may be NULL) the period of a repeat refused because
 * its live bytes grow or shrink (the layers of one step, not steps; 0: none). */
#define HBM_MIN_STEP 4
enum { HBM_STEP_BY_SIZE = 1, HBM_STEP_BY_FREES = 2 };
HBM_API size_t hbm_step_period(const uint64_t *size, const uint32_t *freed, size_t n, size_t *len, int *by,
                               size_t *layers);

/* ---- Correctness ---------------------------------------------------------- */
/* Walk every segment and prove the invariants (blocks tile segments, the free index
 * holds exactly the free blocks, statistics equal recomputed sums). Returns the number
 * of violations; a description of the first ones goes into report (may be NULL). */
HBM_API int hbm_check(hbm_allocator *a, char *report, size_t len);

/* ---- Live statistics for monitors (`hbmalloc top`, docs/MONITOR.md) --------------------------------------
 * An allocator with hbm_publish:True in its settings (the PyTorch plug-ins: unless hbm_publish:False) keeps its
 * statistics in a record in shared memory: a file of hbm_record_dir(), mode 0600, named
 * hbmalloc-UID-PID-DEVICE-RANDOM (64 random bits: no other user can take the name first), locked (flock) by its
 * writer for its life, updated at every segment change and OOM and at least once a second by a thread of the
 * library, removed by hbm_destroy and at exit. Its layout is the library's own: read it with hbm_record_read. */
typedef struct hbm_record {
    int64_t pid;
    uint64_t start_time; /* the process's start (/proc/PID/stat field 22): a reused PID is not taken for it */
    int64_t device;
    int64_t rank, local_rank, world_size; /* RANK, LOCAL_RANK, WORLD_SIZE of its environment; -1 when unset */
    uint64_t updated_ns;                  /* CLOCK_REALTIME of the last update, in nanoseconds */
    /* bytes now (hbm_stats' "all" entries, current): */
    int64_t allocated_bytes, reserved_bytes, active_bytes, requested_bytes, inactive_split_bytes;
    int64_t peak_allocated_bytes, peak_reserved_bytes;
    int64_t largest_free_bytes; /* the largest cached free block: the largest request served without a device call */
    int64_t allocation, segment, active, inactive_split; /* counts now */
    int64_t num_ooms, num_alloc_retries, num_device_alloc, num_device_free;
    int64_t expandable_segments; /* 1 when in force */
    int64_t device_total;        /* the device's capacity */
    char backend[64];            /* the backend spec */
    char settings[512];          /* the settings in force, as hbmalloc conf prints them ("" for the defaults) */
    char source[32];             /* where they came from (HBMALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF, ...) */
    char command[32];            /* the process's name (/proc/PID/comm) */
    int64_t asleep_bytes;        /* pages of sleeping pools given back (docs/SLEEP.md) */
    int64_t backup_bytes;        /* their live bytes held in host memory */
    char asleep_tags[128];       /* what sleeps, per tag: "weights 4.00 GiB, kv_cache 8.00 GiB" ("" when nothing) */
    /* The peaks since the allocator was made: a reset of the peaks (reset_peak_memory_stats) does not lower them. */
    int64_t job_peak_allocated_bytes, job_peak_reserved_bytes;
    /* What held the device's memory at the last sleep or wake of a pool (hbm_resident, docs/SLEEP.md "What still
     * holds memory"): the runtime's used bytes then (-1: no sleep yet, or the query failed), when (CLOCK_REALTIME
     * ns; 0: never), and hbm_resident_describe's sentence. */
    int64_t resident_used_bytes;
    uint64_t resident_ns;
    char resident[512];
    /* Memory outside hbmalloc (hbm_outside), measured at each refresh of the record (twice a second), at an OOM and
     * by hbm_outside_get: the device's used bytes, those not hbmalloc's, of them this process's and other
     * processes' (-1: unknown, or the runtime does not tell by process), and when (CLOCK_REALTIME ns; 0: never). */
    int64_t device_used_bytes, outside_bytes, outside_process_bytes, outside_others_bytes;
    uint64_t outside_ns;
} hbm_record;

/* The folder records go in: $HBMALLOC_TOP_DIR when set, else /dev/shm (else /tmp). */
HBM_API const char *hbm_record_dir(void);
/* Start (on = 1) or stop (0) publishing this allocator's statistics; HBM_PUBLISH_UNLESS_SET_OFF: start unless its
 * settings say hbm_publish:False (what the PyTorch plug-ins do). HBM_ERR_BACKEND when the record cannot be made
 * (the reason in hbm_last_error; the allocator is unaffected). */
#define HBM_PUBLISH_UNLESS_SET_OFF 2
HBM_API hbm_status hbm_publish(hbm_allocator *a, int on);
/* Read one record. HBM_OK: a live process's record, copied consistently; HBM_ERR_STALE: its writer is gone (nobody
 * holds the record's lock, in any PID namespace); HBM_ERR_INVALID: not a record, or not safe to trust — not a regular file, not owned
 * by this user, readable or writable by others — with the reason in why. Nothing is written or removed. With HBM_OK
 * and HBM_ERR_STALE every text field of *out ends in a NUL, whatever the file held. */
HBM_API hbm_status hbm_record_read(const char *path, hbm_record *out, char *why, size_t whylen);

#ifdef __cplusplus
}
#endif
#endif /* HBMALLOC_H */
