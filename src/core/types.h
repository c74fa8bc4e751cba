/*
 * types.h: the allocator's data structures (blocks, segments, pools, private pools, the allocator handle) and its
 * lock. Every module of the library includes it; each module's functions are declared in its own header
 * (core/engine.h, core/stats.h, core/device.h, ...). Nothing outside src/ includes it, except the tests, through
 * their declared header (tests/unit/helpers.h).
 */
#ifndef HBM_CORE_TYPES_H
#define HBM_CORE_TYPES_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "conf/conf.h"
#include "core/labels.h"
#include "core/ptrmap.h"
#include "util/hashmap.h"
#include "util/lock.h"
#include "util/rb.h"
#include "util/fork.h"
#include "hbmalloc.h"

/* PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp), in bytes. */
#define HBM__MIN_BLOCK ((size_t)512)            /* kMinBlockSize: every size is a multiple */
#define HBM__SMALL_SIZE ((size_t)1048576)       /* kSmallSize: <= 1 MiB goes to the small pool */
#define HBM__SMALL_BUFFER ((size_t)2097152)     /* kSmallBuffer: every small segment is 2 MiB */
#define HBM__MIN_LARGE_ALLOC ((size_t)10485760) /* kMinLargeAlloc: below, a whole large segment */
#define HBM__ROUND_LARGE ((size_t)2097152)      /* kRoundLarge: larger segments round to 2 MiB */
#define HBM__HUGE_PAGE ((size_t)1073741824)     /* torch_npu page_size:1g segment unit */
#define HBM__MAX_REQUEST ((size_t)1 << 60)      /* PyTorch refuses >= 1 EiB outright */

typedef struct hbm__segment hbm__segment;
typedef struct hbm__pool hbm__pool;
typedef struct hbm__mempool hbm__mempool;

/* Streams other than its own that used a block (record_stream), owned by the block while it is held (allocated, or
 * freed and waiting on its events) and given up when its events are recorded. */
typedef struct hbm__uses {
    uint32_t n, cap;
    hbm_stream s[];
} hbm__uses;

/* A block: a range of a segment, free or held (allocated, or freed and waiting on events: event_count > 0). What
 * only a free block needs and what only a held one needs share their bytes (issue #38 item 3: 88 bytes, was 136):
 * read a side only in its state (hbm__block_held). */
typedef struct hbm__block {
    union {
        struct {              /* free: in pool->free_tree or pool->unmapped, on pool->loose, or outside every tree */
            hbm__rb node;     /* in pool->free_tree (or unmapped) while in_tree; the loose list's links while loose */
            uint64_t gc_base; /* pool->search_count when the block entered the free tree */
        };
        struct {              /* held */
            size_t requested; /* the caller's size */
            hbm__uses *uses;  /* other streams that used it (record_stream), or NULL */
            hbm_label label;  /* call-site label of the allocation (context_when_allocated) */
            uint64_t note;    /* a policy's note of the allocation (core/policy_ops.h; 0: none), opaque to core */
        };
    };
    struct hbm__block *prev, *next; /* neighbours inside the segment, address order */
    hbm__segment *seg;
    hbm_stream stream; /* the segment's stream, kept here for the comparator */
    uintptr_t addr;
    size_t size;
    bool allocated;
    bool in_tree;    /* in pool->free_tree (free and mapped) or pool->unmapped (unmapped) */
    bool loose;      /* free in a lazy pool, outside its tree, not coalesced: on pool->loose (core/region.c) */
    bool mapped;     /* false only for unmapped ranges of expandable segments */
    int event_count; /* events still to complete before a freed block is reusable */
} hbm__block;

_Static_assert(sizeof(void *) != 8 || sizeof(hbm__block) == 88, "a block object is 88 bytes (docs/PERFORMANCE.md)");

/* Whether b is held (its held-side fields are its own) rather than free (its free-side fields are). */
static inline bool hbm__block_held(const hbm__block *b) { return b->allocated || b->event_count > 0; }

/* The live blocks by address (core/ptrmap.h). */
HBM__KEYSET(hbm__ptrmap, hbm__block, addr, HBM__PTRMAP_HASH, HBM__PTRMAP_MIN)


/* One history entry as the ring keeps it: the label as an id (snapshots resolve it). */
typedef struct hbm__trace_rec {
    uint64_t addr, size, time_us;
    hbm_stream stream;
    uint32_t action; /* hbm_trace_action; a sleep or wake entry of a pool that keeps a backup adds HBM__TRACE_BACKUP */
    hbm_label label; /* a sleep or wake entry: its pool's tag */
} hbm__trace_rec;
#define HBM__TRACE_BACKUP 0x100u

/* One page of an expandable segment: its physical handle (0: none) and whether it is mapped.
 * A handle whose release failed stays here, unmapped, and is reused by the next map. A page of a sleeping pool
 * (sleep.c) that blocks still cover is asleep: unmapped, its blocks kept as if mapped, mapped again at wake. */
typedef struct hbm__page {
    uint64_t handle;
    bool mapped;
    bool asleep;
} hbm__page;

struct hbm__segment {
    hbm__rb node; /* in allocator->segments, by address */
    uintptr_t addr;
    size_t size;
    hbm_stream stream;
    hbm__pool *pool;
    hbm__block *head; /* lowest-address block */
    /* Expandable segments: a virtual reservation mapped page by page. */
    bool expandable;
    size_t page;       /* page size: 2 MiB small pool, large_segment_size large pool */
    size_t npages;     /* pages in the reservation */
    size_t pages_made; /* entries of `pages`: the pages past them were never mapped (their entries all zero) */
    size_t mapped_pages;
    size_t asleep_pages; /* pages asleep (sleep.c): unmapped, blocks still cover them as if mapped */
    hbm__page *pages;    /* made as pages are first mapped (issue #38 item 4: a table for the whole reservation, 9/8
                       * of the device, was zeroed at each reservation: 9 MiB of 2 MiB pages at 1 TiB) */
};

/* Page i of an expandable segment, a page never mapped when past the ones made. */
static inline hbm__page hbm__seg_page(const hbm__segment *seg, size_t i)
{
    return i < seg->pages_made ? seg->pages[i] : (hbm__page){0, false, false};
}

struct hbm__pool {
    hbm__rb *free_tree; /* free mapped blocks ordered by (stream, size, address) */
    size_t nfree;       /* blocks in free_tree */
    hbm__rb *unmapped;  /* unmapped ranges of expandable segments, by (stream, address) */
    size_t nunmapped;
    uint64_t *spare_handles; /* hbm_remap_free_pages: handles unmapped for a request in progress */
    size_t nspare, cap_spare;
    uint64_t search_count; /* get_free_blocks_call_count: the GC age clock */
    bool is_small;
    bool is_region;    /* the region's pool (region.c): counted as large, split to 512 bytes, never released */
    uint8_t lazy;      /* the region's pool while a plan is served (core/region.c): a freed block is left loose;
                              HBM__LAZY_PAGES when its region is made of pages (uncounted in inactive_split) */
    hbm__block *loose; /* its loose blocks, linked through their tree nodes (node.r next, node.l previous) */
    size_t nloose;
    hbm__pool *sibling;  /* the other pool (small <-> large) of the same owner */
    hbm__mempool *owner; /* NULL for the default pools */
};

/* A private pool (MemPool / graph pool): its own small and large pools. */
struct hbm__mempool {
    hbm_mempool id;
    hbm__pool small, large;
    int use_count;         /* the creator's hold plus active routings */
    uint8_t sleep_state;   /* hbm_pool_state: allocations into it are refused unless HBM_POOL_AWAKE (0) */
    struct hbm__sleep *sl; /* a tagged pool's sleep (sleep.c); NULL: untagged, it never sleeps */
    char tag[64];          /* its tag (hbm_pool_tag; "" while untagged) */
    hbm__mempool *next;
};

/* Allocations made on a stream, by a thread, or on a stream a capture's filter accepts go to a private pool. */
typedef enum hbm__route_kind { HBM__ROUTE_STREAM, HBM__ROUTE_THREAD, HBM__ROUTE_CAPTURE } hbm__route_kind;

typedef struct hbm__route {
    hbm__mempool *mp;
    hbm__route_kind kind;
    hbm_stream stream;
    pthread_t thread;
    hbm_stream_filter filter; /* HBM__ROUTE_CAPTURE */
    void *filter_ctx;
} hbm__route;

/* Frees waiting on one stream's events, oldest first. */
typedef struct hbm__event_queue {
    hbm_stream stream;
    struct {
        uint64_t event; /* the backend's, or (queued) the framework queue's event_record's */
        hbm__block *block;
        bool queued;
    } * items;
    size_t head, n, cap; /* ring buffer */
} hbm__event_queue;

/*
 * One allocator per device. `lock` guards every field below it; every public
 * entry point takes it for its whole duration (device calls included, as
 * PyTorch does without release_lock_on_cudamalloc).
 */
struct hbm_allocator {
    hbm__mutex lock;    /* util/lock.h */
    bool single_thread; /* set once at creation by hbm_set_single_thread: no lock is taken */
    /* When the device's work was last waited for (hbm__dev_quiesce), as the free stamp then (hbm__free_stamp; 0:
     * never). A wait holds while no block has been freed since: a block can only carry work launched before the
     * wait if it was freed after it. Nothing on the fast path maintains it: the stamp is the statistics' count of
     * frees. */
    uint64_t quiet_stamp;
    uint64_t stat_resets; /* hbm_reset_accumulated_stats calls, part of the free stamp */
    /* The highest peaks before the last reset of the peaks (hbm_reset_peak_stats): the job's peaks are these or the
     * statistics' own, whichever is higher; kept off the fast path (a peak is only lost at a reset). */
    int64_t peak_allocated_before_reset, peak_reserved_before_reset;
    hbm_backend *backend;
    bool owns_backend;
    int device;
    hbm__conf conf;
    hbm__pool small, large;
    hbm__rb *segments; /* every segment, by address */
    size_t nsegments;
    hbm__ptrmap live;         /* allocated blocks by address */
    hbm__block *spare_blocks; /* recycled block objects, linked through next */
    size_t nspare_blocks;
    struct hbm__slab *slabs; /* where every block object lives (engine.c) */
    hbm_stats stats;         /* active and active_bytes, and the "all" entries' cumulative counts, are made when read
                        (hbm__stats_view): what the fast path does not move */
    /* Blocks freed while other streams still use them (hbm_free of a block with record_stream uses, until its
     * events complete): active but no longer allocated, per pool kind and in all ([HBM_POOL_*]). active =
     * allocation + these; its peak is allocation's unless a malloc found some of these (peak_*); at_reset_*: those
     * pending when the accumulated counts were reset, whose completions count in active.freed. */
    struct {
        int64_t n[3], bytes[3];
        int64_t peak_n[3], peak_bytes[3];
        int64_t at_reset_n[3], at_reset_bytes[3];
    } pend;
    size_t total_reserved;        /* bytes held from the device (total_allocated_memory) */
    size_t device_total;          /* device capacity, read at create */
    bool fraction_set;            /* a fraction < 1 is in force */
    bool gc_on;                   /* garbage_collection_threshold acts: a threshold and a fraction set (one test on the
                                     malloc path; hbm__set_fraction_locked keeps it) */
    size_t allowed_max;           /* allowed_memory_maximum when fraction_set */
    size_t reserved_when_limited; /* reserved when the fraction was last set: it may stay above a lowered limit
                                     (as in PyTorch), and cannot grow while above it */
    double fraction;
    size_t request_pad; /* the backend's pad, copied here for the malloc path */
    bool roundup;       /* some roundup_power2_divisions entry is > 1 */
    bool expandable;    /* expandable segments in force (asked for, and the device can) */
    int vmm;            /* virtual memory on this device: 1 yes, 0 no (vmm_why says why), -1 not probed */
    char vmm_why[256];
    size_t nexpandable; /* expandable segments (reservations) held */
    /* The region a policy serves from (core/region.c; the arena, the plan file and the step plan make it): one
     * segment of its own pool, on one stream, whose requests look in it first. */
    hbm__pool region;
    hbm_stream region_stream;
    hbm__segment *region_seg; /* NULL: none (not yet made, refused, or retired) */
    struct hbm__policy *pol;  /* the policy beside the caching engine (core/policy_ops.h), NULL: none */
    struct hbm__pub *pub;     /* hbm_publish (publish.c): the shared-memory record, NULL when not published */
    void (*pub_update)(hbm_allocator *a); /* what keeps that record current (set with pub): hbm__published */
    /* Snapshots at an OOM (io/oom_dump.c): its state, NULL when off, and what writes one (set with it), called by
     * the failed malloc once its lock is given back (hbm__oom_dumped); read there without the lock: atomically. */
    struct hbm__oomd *oomd;
    void (*oom_dump)(hbm_allocator *a);
    /* What held the device's memory at the last sleep or wake while published (resident.c hbm__resident_note): the
     * runtime's used bytes (-1: unknown), when (CLOCK_REALTIME ns, 0: never), the
     * sentence. */
    int64_t res_used;
    uint64_t res_ns;
    char res_text[512];
    hbm_outside outside_last; /* memory outside hbmalloc as last measured (core/outside.c; ns 0: never) */
    hbm__mempool *mempools;
    hbm_mempool next_mempool_id;
    hbm__route *routes; /* searched last first, as PyTorch searches captures */
    size_t nroutes, cap_routes;
    size_t ncaptures;      /* routes of kind HBM__ROUTE_CAPTURE: capture mode while > 0 */
    hbm__block **deferred; /* freed during a capture with other streams' uses: events recorded after it */
    size_t ndeferred, cap_deferred;
    size_t nstuck; /* freed during a capture when even `deferred` could not grow: never reused */
    hbm__event_queue *queues;
    size_t nqueues, cap_queues;
    size_t pending_events; /* events in all queues, the deferred frees (one each) and the unrecorded uses */
    /* Uses of freed blocks whose events could not be recorded in a framework queue's order when they were freed
     * (events.c): each holds its block (event_count) until recorded later, or until a device-wide wait that began
     * after it (seq: unrec_seq when it was added) completes. */
    struct hbm__unrecorded {
        hbm__block *block;
        hbm_stream stream;
        uint64_t seq;
        bool retry; /* held for the thread it was freed on, not for its stream: worth recording again */
    } * unrec;
    size_t nunrec, cap_unrec;
    uint64_t unrec_seq;
    /* After a device-wide wait that began at unrec_seq (device.c): the unrecorded uses it settles (events.c's
     * hbm__settle_unrecorded, set at creation: the door to the device calls nothing above it). */
    void (*device_waited)(hbm_allocator *a, uint64_t seq);
    /* A freed block whose last event completed, free again (events.c calls the engine's hbm__free_block through it,
     * set at creation). */
    void (*free_completed)(hbm_allocator *a, hbm__block *b);
    uint64_t *spare_events; /* recorded-and-completed events, for reuse */
    size_t nspare_events, cap_spare_events;
    hbm__trace_rec *history; /* ring buffer, NULL when off */
    size_t history_cap, history_n, history_head;
    size_t history_max; /* entries asked for: the ring grows to it as entries come (snapshot.c) */
    hbm_label context;  /* the allocator-wide label, or the call's own during hbm_malloc_labeled */
    hbm__labels labels; /* every label ever interned, kept until destroy */
    hbm_device_counters dev;
    hbm_oom_info last_oom; /* valid when has_oom */
    bool has_oom;
    char oom_msg[1536]; /* the last OOM's message (err may be overwritten since) */
    char warning[1024]; /* the capability fallback, if any (also printed once at create) */
    char err[1536];
    /* hbm_destroy: device calls that failed while giving memory back, the bytes they held, the first error. */
    bool tearing_down;
    uint64_t teardown_failed, teardown_bytes;
    char teardown_first[512];
};

/* Every public entry point brackets its work with these. */
static inline void hbm__lock(hbm_allocator *a)
{
    if (!a->single_thread)
        hbm__mutex_take(&a->lock);
}

static inline void hbm__unlock(hbm_allocator *a)
{
    if (!a->single_thread)
        hbm__mutex_give(&a->lock);
}

/* At a segment change or an OOM: the published record, if any, follows (a device call was just made: the copy is
 * free). Through the pointer io/publish.c sets: the engine names nothing above it. */
static inline void hbm__published(hbm_allocator *a)
{
    if (__builtin_expect(a->pub != NULL, 0))
        a->pub_update(a);
}

/* After a malloc that ran out of memory, its lock given back: a snapshot of the allocator, if one was asked for at an
 * OOM (io/oom_dump.c sets the pointer; the engine names nothing above it). Never under the lock: the snapshot takes
 * it, as PyTorch calls its OOM observers after `lock.unlock()` (CUDACachingAllocator.cpp, malloc). */
static inline void hbm__oom_dumped(hbm_allocator *a)
{
    void (*dump)(hbm_allocator *) = __atomic_load_n(&a->oom_dump, __ATOMIC_ACQUIRE);
    if (dump)
        dump(a);
}

#endif
