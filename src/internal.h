/*
 * internal.h: the engine's data structures, shared by engine.c (policy),
 * pool.c (free-block index), stats.c, device.c and check.c (validator).
 * Nothing outside src/ includes this, except the tests.
 */
#ifndef HBM_INTERNAL_H
#define HBM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rb.h"
#include "backend/backend.h"
#include "conf.h"
#include "fork.h"
#include "hbmalloc.h"
#include "ptrmap.h"

/* PyTorch's constants (c10/cuda/CUDACachingAllocator.cpp), in bytes. */
#define HBM__MIN_BLOCK ((size_t)512)               /* kMinBlockSize: every size is a multiple */
#define HBM__SMALL_SIZE ((size_t)1048576)          /* kSmallSize: <= 1 MiB goes to the small pool */
#define HBM__SMALL_BUFFER ((size_t)2097152)        /* kSmallBuffer: every small segment is 2 MiB */
#define HBM__MIN_LARGE_ALLOC ((size_t)10485760)    /* kMinLargeAlloc: below, a whole large segment */
#define HBM__ROUND_LARGE ((size_t)2097152)         /* kRoundLarge: larger segments round to 2 MiB */
#define HBM__HUGE_PAGE ((size_t)1073741824)        /* torch_npu page_size:1g segment unit */
#define HBM__MAX_REQUEST ((size_t)1 << 60)         /* PyTorch refuses >= 1 EiB outright */

typedef struct hbm__segment hbm__segment;
typedef struct hbm__pool hbm__pool;
typedef struct hbm__mempool hbm__mempool;

typedef struct hbm__block {
    hbm__rb node;                   /* in pool->free_tree while free */
    struct hbm__block *prev, *next; /* neighbours inside the segment, address order */
    hbm__segment *seg;
    hbm_stream stream; /* the segment's stream, kept here for the comparator */
    uintptr_t addr;
    size_t size;
    size_t requested; /* the caller's size while allocated */
    uint64_t gc_base; /* pool->search_count when the block entered the free tree */
    bool allocated;
    bool in_tree;     /* in pool->free_tree (free and mapped) or pool->unmapped (unmapped) */
    bool loose;       /* free in a lazy pool, outside its tree, not coalesced: on pool->loose (lazy.c) */
    bool mapped;      /* false only for unmapped ranges of expandable segments */
    int event_count;  /* events still to complete before a freed block is reusable */
    hbm_stream *uses; /* other streams that used the block (record_stream) */
    uint32_t nuses, cap_uses;
    hbm_label label;  /* call-site label of the allocation (context_when_allocated); read only while the
                         block is allocated or pending, so never reset */
    uint32_t rec_step, rec_k; /* hbm_step_plan: recorded as allocation rec_k of step rec_step - 1 (0: not);
                                 cleared when freed, so free blocks have 0 */
} hbm__block;

/* Interned label texts (labels.c): text[id - 1]; slot is an open-addressing table of ids. */
typedef struct hbm__labels {
    char **text;
    uint32_t n, cap;
    uint32_t *slot;
    uint32_t nslot; /* a power of two, or 0 */
    size_t bytes;   /* of text kept, bounded by HBM_LABELS_MAX_BYTES */
    int full;       /* the last refusal was the bound, not host memory */
} hbm__labels;

/* One history entry as the ring keeps it: the label as an id (snapshots resolve it). */
typedef struct hbm__trace_rec {
    uint64_t addr, size, time_us;
    hbm_stream stream;
    uint32_t action;  /* hbm_trace_action; a sleep or wake entry of a pool that keeps a backup adds HBM__TRACE_BACKUP */
    hbm_label label;  /* a sleep or wake entry: its pool's tag */
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
    size_t page;        /* page size: 2 MiB small pool, large_segment_size large pool */
    size_t npages;
    size_t mapped_pages;
    size_t asleep_pages; /* pages asleep (sleep.c): unmapped, blocks still cover them as if mapped */
    hbm__page *pages;
};

struct hbm__pool {
    hbm__rb *free_tree;    /* free mapped blocks ordered by (stream, size, address) */
    size_t nfree;          /* blocks in free_tree */
    hbm__rb *unmapped;     /* unmapped ranges of expandable segments, by (stream, address) */
    size_t nunmapped;
    uint64_t *spare_handles; /* hbm_remap_free_pages: handles unmapped for a request in progress */
    size_t nspare, cap_spare;
    uint64_t search_count; /* get_free_blocks_call_count: the GC age clock */
    bool is_small;
    bool is_arena;         /* the arena's pool (arena.c): counted as large, split to 512 bytes, never released */
    uint8_t lazy;          /* the arena's pool while a plan is served (lazy.c): a freed block is left loose;
                              HBM__LAZY_PAGES when its region is made of pages (uncounted in inactive_split) */
    hbm__block *loose;     /* its loose blocks, linked through their tree nodes (node.r next, node.l previous) */
    size_t nloose;
    hbm__pool *sibling;    /* the other pool (small <-> large) of the same owner */
    hbm__mempool *owner;   /* NULL for the default pools */
};

/* A private pool (MemPool / graph pool): its own small and large pools. */
struct hbm__mempool {
    hbm_mempool id;
    hbm__pool small, large;
    int use_count; /* the creator's hold plus active routings */
    uint8_t sleep_state; /* hbm_pool_state: allocations into it are refused unless HBM_POOL_AWAKE (0) */
    struct hbm__sleep *sl; /* a tagged pool's sleep (sleep.c); NULL: untagged, it never sleeps */
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
        uint64_t event;
        hbm__block *block;
    } *items;
    size_t head, n, cap; /* ring buffer */
} hbm__event_queue;

/*
 * One allocator per device. `lock` guards every field below it; every public
 * entry point takes it for its whole duration (device calls included, as
 * PyTorch does without release_lock_on_cudamalloc).
 */
struct hbm_allocator {
    pthread_mutex_t lock;
    bool single_thread; /* set once at creation by hbm__set_single_thread: no lock is taken */
    /* When the device's work was last waited for (hbm__dev_quiesce) and a framework's launch queue last flushed
     * (hbm__dev_flush_open), as the free stamp then (hbm__free_stamp; 0: never). A wait holds while no block has been
     * freed since: a block can only carry work launched before the wait if it was freed after it. Nothing on the fast
     * path maintains it: the stamp is the statistics' count of frees. */
    uint64_t quiet_stamp, flush_stamp;
    uint64_t stat_resets; /* hbm_reset_accumulated_stats calls, part of the free stamp */
    /* The highest peaks before the last reset of the peaks (hbm_reset_peak_stats): the job's peaks are these or the
     * statistics' own, whichever is higher; kept off the fast path (a peak is only lost at a reset). */
    int64_t peak_allocated_before_reset, peak_reserved_before_reset;
    uint64_t locked_framework_syncs; /* a framework's queue waited for with the lock held: a missed safe point */
    hbm_backend *backend;
    bool owns_backend;
    int device;
    hbm__conf conf;
    hbm__pool small, large;
    hbm__rb *segments; /* every segment, by address */
    size_t nsegments;
    hbm__ptrmap live; /* allocated blocks by address */
    hbm__block *spare_blocks; /* recycled block objects, linked through next */
    size_t nspare_blocks;
    struct hbm__slab *slabs;  /* where every block object lives (engine.c) */
    hbm_stats stats;
    size_t total_reserved; /* bytes held from the device (total_allocated_memory) */
    size_t device_total;   /* device capacity, read at create */
    bool fraction_set;     /* a fraction < 1 is in force */
    size_t allowed_max;    /* allowed_memory_maximum when fraction_set */
    size_t reserved_when_limited; /* reserved when the fraction was last set: it may stay above a lowered limit
                                     (as in PyTorch), and cannot grow while above it */
    double fraction;
    size_t request_pad;    /* the backend's pad, copied here for the malloc path */
    bool roundup;          /* some roundup_power2_divisions entry is > 1 */
    bool expandable;       /* expandable segments in force (asked for, and the device can) */
    int vmm;               /* virtual memory on this device: 1 yes, 0 no (vmm_why says why), -1 not probed */
    char vmm_why[256];
    size_t nexpandable;    /* expandable segments (reservations) held */
    /* hbm_arena_mb / hbm_arena_fraction (arena.c): one region reserved at the first allocation, its stream's
     * requests of every size served from it best fit before segments are made. */
    hbm__pool arena;
    bool arena_wanted;     /* asked for, expandable segments not in force, not yet reserved or refused */
    hbm_stream arena_stream;
    hbm__segment *arena_seg; /* the arena, once reserved: arena_stream's requests look in it first */
    /* hbm_plan_file (arena.c): allocation k of the arena's stream goes to plan_off[k] in the arena when it fits
     * in plan_size[k] and that range is free; else the arena's best fit. */
    uint64_t *plan_off, *plan_size;
    uint32_t *plan_below; /* the allocation planned right below k and live when k comes (UINT32_MAX: none) */
    size_t plan_n, plan_next;
    uint64_t plan_height;
    uintptr_t plan_cursor; /* where the last planned allocation went: the walk to the next starts there if live */
    hbm__block **plan_last; /* plan_last[k]: the block last served at position k, a hint checked before use */
    size_t plan_last_cap;
    /* The region's address index (arena.c, region_block): plan_hint[c] is a block of the region found in its chunk
     * c of 2^plan_hint_shift bytes, checked before use; made for the range [plan_hint_addr, + plan_hint_size),
     * remade when the region is another range. */
    hbm__block **plan_hint;
    size_t plan_hint_n;
    unsigned plan_hint_shift;
    uintptr_t plan_hint_addr;
    size_t plan_hint_size;
    struct hbm__stepplan *sp; /* hbm_step_plan (stepplan.c): NULL when off */
    struct hbm__pub *pub;     /* hbm_publish (publish.c): the shared-memory record, NULL when not published */
    bool policy; /* an arena, plan file or step plan is asked for: engine_malloc's policy branch is taken */
    hbm__mempool *mempools;
    hbm_mempool next_mempool_id;
    hbm__route *routes;    /* searched last first, as PyTorch searches captures */
    size_t nroutes, cap_routes;
    size_t ncaptures;      /* routes of kind HBM__ROUTE_CAPTURE: capture mode while > 0 */
    hbm__block **deferred; /* freed during a capture with other streams' uses: events recorded after it */
    size_t ndeferred, cap_deferred;
    size_t nstuck;         /* freed during a capture when even `deferred` could not grow: never reused */
    hbm__event_queue *queues;
    size_t nqueues, cap_queues;
    size_t pending_events; /* events in all queues, and the deferred frees (one each) */
    uint64_t *spare_events; /* recorded-and-completed events, for reuse */
    size_t nspare_events, cap_spare_events;
    hbm__trace_rec *history; /* ring buffer, NULL when off */
    size_t history_cap, history_n, history_head;
    size_t history_max; /* entries asked for: the ring grows to it as entries come (snapshot.c) */
    hbm_label context;        /* the allocator-wide label, or the call's own during hbm_malloc_labeled */
    hbm__labels labels;       /* every label ever interned, kept until destroy */
    hbm_device_counters dev;
    hbm_oom_info last_oom; /* valid when has_oom */
    bool has_oom;
    char oom_msg[1536];    /* the last OOM's message (err may be overwritten since) */
    char warning[1024];    /* the capability fallback, if any (also printed once at create) */
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
        pthread_mutex_lock(&a->lock);
}

static inline void hbm__unlock(hbm_allocator *a)
{
    if (!a->single_thread)
        pthread_mutex_unlock(&a->lock);
}

/* For the replay tools only, right after hbm_open and before any other call:
 * the allocator will be used by this one thread, so no call takes the lock
 * (each replay owns a fresh allocator on the simulated device). */
void hbm__set_single_thread(hbm_allocator *a);

/* ---- pool.c: the segment index (the free-block index is pool.h) ---- */
void hbm__segments_insert(hbm_allocator *a, hbm__segment *s);
void hbm__segments_remove(hbm_allocator *a, hbm__segment *s);
/* The segment whose range holds addr, or NULL. */
hbm__segment *hbm__segment_find(hbm_allocator *a, uintptr_t addr);
hbm__segment *hbm__segments_first(hbm_allocator *a);
hbm__segment *hbm__segments_last(hbm_allocator *a);
hbm__segment *hbm__segments_next(const hbm__segment *s);
/* The largest block of a pool's free tree, and of the default pools and the arena (0: none). */
size_t hbm__pool_largest(hbm__pool *p);
size_t hbm__largest_free(hbm_allocator *a);

/* ---- stats.c ---- */
static inline void hbm__stat_inc(hbm_stat *s, int64_t n)
{
    s->current += n;
    if (s->current > s->peak)
        s->peak = s->current;
    s->allocated += n;
}

static inline void hbm__stat_dec(hbm_stat *s, int64_t n)
{
    s->current -= n;
    s->freed += n;
}

/* Apply to the "all" entry and to the pool's own entry, as PyTorch's stat_types do. */
static inline void hbm__stat_arr_inc(hbm_stat *arr, const hbm__pool *p, int64_t n)
{
    hbm__stat_inc(&arr[HBM_POOL_ALL], n);
    hbm__stat_inc(&arr[p->is_small ? HBM_POOL_SMALL : HBM_POOL_LARGE], n);
}

static inline void hbm__stat_arr_dec(hbm_stat *arr, const hbm__pool *p, int64_t n)
{
    hbm__stat_dec(&arr[HBM_POOL_ALL], n);
    hbm__stat_dec(&arr[p->is_small ? HBM_POOL_SMALL : HBM_POOL_LARGE], n);
}

void hbm__stats_reset_peak(hbm_stats *s);
void hbm__stats_reset_accumulated(hbm_stats *s);

/* ---- device.c: the one caller of the backend ---- */
hbm_status hbm__dev_malloc(hbm_allocator *a, size_t size, uintptr_t *out);
int hbm__dev_malloc_raw(hbm_allocator *a, size_t size, uintptr_t *out, uint64_t *t0);
hbm_status hbm__dev_malloc_done(hbm_allocator *a, size_t size, int rc, uint64_t t0);
hbm_status hbm__dev_free(hbm_allocator *a, uintptr_t ptr, size_t size);
hbm_status hbm__dev_info(hbm_allocator *a, size_t *free_bytes, size_t *total_bytes);
hbm_status hbm__dev_reserve(hbm_allocator *a, size_t size, uintptr_t *va);
hbm_status hbm__dev_unreserve(hbm_allocator *a, uintptr_t va, size_t size);
hbm_status hbm__dev_create(hbm_allocator *a, size_t size, uint64_t *handle);
hbm_status hbm__dev_release(hbm_allocator *a, uint64_t handle);
hbm_status hbm__dev_map(hbm_allocator *a, uintptr_t va, size_t size, uint64_t handle);
hbm_status hbm__dev_unmap(hbm_allocator *a, uintptr_t va, size_t size);
hbm_status hbm__dev_access(hbm_allocator *a, uintptr_t va, size_t size);
hbm_status hbm__dev_sync(hbm_allocator *a, hbm_stream stream);
/* Wait for all the device's work before memory goes back to it (once per locked operation; hbm__unlock forgets). */
hbm_status hbm__dev_quiesce(hbm_allocator *a);
/* The same at a safe point (no state read across it): a framework's queue is waited for with the lock released. */
hbm_status hbm__dev_quiesce_open(hbm_allocator *a);
/* A framework's queue flushed at a safe point, lock released (before events are recorded for a freed block). */
hbm_status hbm__dev_flush_open(hbm_allocator *a);
/* Changes whenever a block is freed (never 0): every hbm_free counts in allocation[ALL].freed, which only
 * hbm_reset_accumulated_stats sets back, and that counts in stat_resets. */
static inline uint64_t hbm__free_stamp(const hbm_allocator *a)
{
    return ((uint64_t)a->stats.allocation[HBM_POOL_ALL].freed ^ (a->stat_resets << 40)) + 1;
}

/* A framework's launch queue sits in front of the device (hbm_backend_set_host_queue). */
static inline bool hbm__framework_queue(const hbm_allocator *a)
{
    return a->backend->queue.flush || a->backend->queue.sync_device;
}
/* A sleeping pool's backup (sleep.c): whether the backend has pinned host memory and copies; the calls. */
int hbm__dev_can_copy(const hbm_allocator *a);
hbm_status hbm__dev_host_alloc(hbm_allocator *a, size_t size, void **out);
hbm_status hbm__dev_host_free(hbm_allocator *a, void *p, size_t size);
hbm_status hbm__dev_copy_d2h(hbm_allocator *a, void *dst, uintptr_t src, size_t size, hbm_stream stream);
hbm_status hbm__dev_copy_h2d(hbm_allocator *a, uintptr_t dst, const void *src, size_t size, hbm_stream stream);
/* Before unmapping pages of a segment on `stream`: that stream, or the device where the runtime needs it. */
hbm_status hbm__dev_sync_unmap(hbm_allocator *a, hbm_stream stream);
/* Whether expandable segments work on a's device; 0 with the reason. */
int hbm__dev_vmm(hbm_allocator *a, char *why, size_t whylen);
hbm_status hbm__dev_event_create(hbm_allocator *a, uint64_t *ev);
hbm_status hbm__dev_event_destroy(hbm_allocator *a, uint64_t ev);
hbm_status hbm__dev_event_record(hbm_allocator *a, uint64_t ev, hbm_stream stream);
hbm_status hbm__dev_event_sync(hbm_allocator *a, uint64_t ev);
int hbm__dev_event_done(hbm_allocator *a, uint64_t ev);
hbm_status hbm__dev_stream_check(hbm_allocator *a, hbm_stream stream);

/* Where hbm_malloc / hbm_free copy a failure's message for the calling thread, under the allocator's lock
 * (devices.c sets it around its calls); NULL: nowhere. */
extern __thread char *hbm__err_sink;
extern __thread size_t hbm__err_sink_len;

/* ---- shared by engine.c, expand.c and seed.c ---- */
/* A new whole segment of `size` bytes on the device: one free block, in no tree. */
hbm_status hbm__segment_new(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out);
hbm__block *hbm__block_new(hbm_allocator *a);
void hbm__block_recycle(hbm_allocator *a, hbm__block *b);
/* Cuts the first `size` bytes of b into a new block, linked in before it; b keeps the rest. Trees and statistics
 * are the caller's; a spare block object must be in hand (hbm__ensure_spares). */
static inline hbm__block *hbm__split_front(hbm_allocator *a, hbm__block *b, size_t size)
{
    hbm__block *f = hbm__block_new(a);
    f->seg = b->seg;
    f->stream = b->stream;
    f->addr = b->addr;
    f->size = size;
    f->prev = b->prev;
    if (f->prev)
        f->prev->next = f;
    else
        b->seg->head = f;
    f->next = b;
    b->prev = f;
    b->addr += size;
    b->size -= size;
    return f;
}
/* Cuts b at `at` bytes from its start: b keeps the front, a new block (returned, linked in after it) the rest.
 * Trees and statistics are the caller's; a spare block object must be in hand (hbm__ensure_spares). */
static inline hbm__block *hbm__split_back(hbm_allocator *a, hbm__block *b, size_t at)
{
    hbm__block *back = hbm__block_new(a);
    back->seg = b->seg;
    back->stream = b->stream;
    back->addr = b->addr + at;
    back->size = b->size - at;
    back->prev = b;
    back->next = b->next;
    if (back->next)
        back->next->prev = back;
    b->next = back;
    b->size = at;
    return back;
}
/* Keep n block objects in hand so a split cannot fail half-way. */
hbm_status hbm__ensure_spares(hbm_allocator *a, int n);
/* Merge src into dst when src is a free neighbour in the same mapped state; returns bytes absorbed. */
size_t hbm__try_merge(hbm_allocator *a, hbm__pool *p, hbm__block *dst, hbm__block *src);

/* ---- snapshot.c: history; labels.c: label texts ---- */
void hbm__record(hbm_allocator *a, uint32_t action, uint64_t addr, uint64_t size, hbm_stream stream,
                 hbm_label label);
static inline void hbm__trace(hbm_allocator *a, hbm_trace_action action, uint64_t addr, uint64_t size,
                              hbm_stream stream)
{
    if (a->history)
        hbm__record(a, action, addr, size, stream, a->context);
}
/* An entry about a block carries the label of its allocation. */
static inline void hbm__trace_block(hbm_allocator *a, hbm_trace_action action, const hbm__block *b, uint64_t size)
{
    if (a->history)
        hbm__record(a, action, b->addr, size, b->stream, b->label);
}
/* ---- period.c: repeating sequences ---- */
/* The longest end of key[0..n) that repeats at least twice with one period: the period (0: none, or no host
 * memory), its length in *len. */
size_t hbm__period(const uint64_t *key, size_t n, size_t *len);
/* splitmix64's finalizer: a well-mixed 64-bit hash of z. */
uint64_t hbm__mix64(uint64_t z);
enum { HBM__BY_SIZE = 1, HBM__BY_FREES = 2 };
/* The repeating step of n allocations: size[k] the k-th's size, freed[k] how many allocations had been made when it
 * was freed (> n: not freed). Each allocation's key is its size and how many allocations back each block freed just
 * before it was made, or either alone (*by: HBM__BY_* bits); the longest repeating end (at least min_len, of a
 * period of at least min_period) under any of them. The period (0: none, or no host memory), its end's length. */
size_t hbm__step_period(const uint64_t *size, const uint32_t *freed, size_t n, size_t min_len, size_t min_period,
                        size_t *len, int *by);
/* Whether the live bytes at the same point of the last three periods rise or fall steadily: a repeat inside a step
 * (the layers of a forward pass keep their activations, of a backward pass free them), not a step, which comes back
 * to the live bytes it began with (a step of another length, too, rises and falls). size and freed as for
 * hbm__step_period (freed >= n: live at the end). */
bool hbm__period_accumulates(const uint64_t *size, const uint32_t *freed, size_t n, size_t period);
#define HBM__MIN_STEP 4 /* allocations: a shorter repeat is not taken for a step */

/* ---- stepplan.c: the hbm_step_plan policy ---- */
hbm_status hbm__stepplan_init(hbm_allocator *a);
void hbm__stepplan_free(hbm_allocator *a);
/* engine_malloc, when the step plan is on: records the request (*tag, for hbm__step_allocated; 0 when not
 * recorded) and returns the planned arena block for it, or NULL for the caching policy's path. */
hbm__block *hbm__step_block(hbm_allocator *a, hbm_stream stream, size_t size, uint64_t *tag);
/* After engine_malloc allocated b for a recorded request: marks b so that its free is recorded. */
static inline void hbm__step_allocated(hbm__block *b, uint64_t tag)
{
    b->rec_step = (uint32_t)(tag >> 32);
    b->rec_k = (uint32_t)tag;
}
/* hbm_free of a recorded block (b->rec_step != 0). */
void hbm__step_freed(hbm_allocator *a, hbm__block *b);
/* Whole free segments of the default pools back to the device, no device sync (engine.c): the step plan's region
 * takes their place. */
void hbm__release_cached(hbm_allocator *a);
/* A plan needs a larger region (engine.c): the arena is given back when no block of it is in use, else it becomes
 * an ordinary large-pool segment, released once free; either way a->arena_seg is NULL after. */
void hbm__arena_retire(hbm_allocator *a);
/* Plan neighbours (arena.c) for plan_off/plan_size and these lifetimes: 0, or -1 out of host memory. */
int hbm__plan_neighbours(hbm_allocator *a, const uint32_t *start, const uint32_t *end);

/* ---- arena.c: the hbm_arena policy ---- */
/* Reserves the arena for `stream` at the first allocation; when it cannot, says why in hbm_warning and gives up. */
void hbm__arena_create(hbm_allocator *a, hbm_stream stream);
/* Appends text to hbm_warning's (after "; " when there is one already). */
void hbm__warning_add(hbm_allocator *a, const char *text);

/* ---- publish.c: statistics for hbmalloc top ---- */
void hbm__publish_update(hbm_allocator *a); /* the lock is held */
/* At a segment change or an OOM: the record, if any, follows (a device call was just made: the copy is free). */
static inline void hbm__published(hbm_allocator *a)
{
    if (__builtin_expect(a->pub != NULL, 0))
        hbm__publish_update(a);
}
/* Frees the plan a->plan_* holds (a plan file's) and zeroes them. */
void hbm__plan_clear(hbm_allocator *a);
/* Reads conf.plan_file (a->lock not needed: at create). HBM_OK, or HBM_ERR_CONF with "FILE:LINE: what" in err. */
hbm_status hbm__plan_load(hbm_allocator *a, char *err, size_t errlen);
/* The free arena block that allocation plan_next's range lies in, cut to begin at that range (a block split off in
 * front when needed), for a rounded request of size; NULL (a miss, counted) when the plan cannot serve it. */
void hbm__plan_hints_free(hbm_allocator *a); /* the region's address index (arena.c) */
hbm__block *hbm__plan_block(hbm_allocator *a, size_t size);
/* The block of the region that planned position k's range begins at (at): after the allocation planned right below
 * it when that one is live (O(1)), else through the region's address index (a hint, then a short walk). */
hbm__block *hbm__region_find(hbm_allocator *a, size_t k, uintptr_t at);

/* ---- lazy.c: the region kept loose while a plan is served ---- */
#define HBM__LAZY 1       /* pool.lazy: a plan is served from the region */
#define HBM__LAZY_PAGES 2 /* the same, the region made of pages: its free blocks not counted in inactive_split */
/* hbm__free_block in a lazy pool: b, free and outside every tree, left loose where it is (counted as free). */
void hbm__loose_add(hbm_allocator *a, hbm__pool *p, hbm__block *b);
/* The same in a region made of pages: not counted in inactive_split. */
void hbm__loose_put(hbm__pool *p, hbm__block *b);
/* The region just made or retired (a->arena_seg): the pool's lazy state follows (made of pages or not). */
void hbm__lazy_region(hbm_allocator *a);
/* The free block for planned range [at, at + size) of the region, made of b (free, holding at) and the free blocks
 * after it: counted as free, outside the tree and the loose list, exactly the range (what is cut off before and
 * after it is left loose). NULL when a block of the range is in use or the region ends first; nothing changed. */
hbm__block *hbm__lazy_take(hbm_allocator *a, hbm__block *b, uintptr_t at, size_t size);
/* The same in a region made of pages (HBM__LAZY_PAGES): the unmapped pages under the range mapped first (a miss,
 * NULL, when the device gives none). */
hbm__block *hbm__lazy_take_pages(hbm_allocator *a, hbm__block *b, uintptr_t at, size_t size);
/* Every loose block of the arena's pool coalesced into its tree (the region's best fit, a retired region). */
void hbm__lazy_flush(hbm_allocator *a);
/* After the plan in force changed (a->plan_n positions, 0: none): the pool is lazy while there is one (flushed when
 * it stops), and plan_last has room for it. */
void hbm__lazy_plan(hbm_allocator *a);
/* A free block outside every tree, counted as free (a loose one, unlinked), coalesced into its pool's tree
 * (engine.c): the block that holds its range. */
hbm__block *hbm__settle_free(hbm_allocator *a, hbm__block *b);
/* Splices src, a neighbour outside every tree, into dst; returns the bytes absorbed (engine.c). */
size_t hbm__absorb(hbm_allocator *a, hbm__block *dst, hbm__block *src);
hbm_status hbm__label_intern(hbm__labels *l, const char *text, hbm_label *out);
/* The same for a's table, with a's error message set when refused (a->lock held). */
hbm_status hbm__label_intern_a(hbm_allocator *a, const char *text, hbm_label *out);
const char *hbm__label_text(const hbm__labels *l, hbm_label id);
void hbm__labels_destroy(hbm__labels *l);

/* ---- stream.c: event-deferred frees and private pools ---- */
/* The pool a request of `size` (rounded) on `stream` goes to. */
hbm__pool *hbm__route_pool(hbm_allocator *a, size_t size, hbm_stream stream);
/* Record events for a freed block's other streams; the block is freed when all complete. */
hbm_status hbm__insert_events(hbm_allocator *a, hbm__block *b);
/* Free a block whose other streams' uses need events (hbm_free), or defer it during a capture. */
hbm_status hbm__free_with_uses(hbm_allocator *a, hbm__block *b);
/* Record the deferred frees' events, then free the blocks whose events have completed (start of
 * every malloc that is not in a capture). */
void hbm__process_events(hbm_allocator *a);
/* Wait for every pending event and free the blocks (empty_cache, the OOM retry). */
hbm_status hbm__sync_events(hbm_allocator *a);
/* empty_cache for released private pools; deletes those left with no segment. */
hbm_status hbm__release_mempools(hbm_allocator *a);
void hbm__stream_teardown(hbm_allocator *a);
/* Release a pool's cached segments (engine.c). */
hbm_status hbm__release_pool(hbm_allocator *a, hbm__pool *p);
/* Free a block whose free was requested and whose events completed (engine.c). */
void hbm__free_block(hbm_allocator *a, hbm__block *b);

/* ---- sleep.c: pools that sleep ---- */
/* A block asked of a sleeping pool (engine_malloc): HBM_ERR_ASLEEP, with the pool's tag in the message. */
hbm_status hbm__sleep_refuse(hbm_allocator *a, const hbm__mempool *m);
/* A pool's sleep state freed (its pinned host memory back), when the pool goes (stream.c). */
void hbm__sleep_free(hbm_allocator *a, hbm__mempool *m);
/* The validator's part: every tagged pool's state, backup and counts agree; each broken rule goes to fail(ck). */
void hbm__sleep_check(hbm_allocator *a, void (*fail)(void *ck, const char *what), void *ck);
/* A reservation of pool m is given back (expand.c): its backup runs, if any, are dropped (the addresses may be
 * reserved again by another pool before the wake). */
void hbm__sleep_forget(hbm_allocator *a, hbm__mempool *m, uintptr_t addr, size_t size);
/* The published record's: asleep and backup bytes, and per tag "tag size, ..." (publish.c). */
void hbm__sleep_record(hbm_allocator *a, int64_t *asleep, int64_t *backup, char *tags, size_t len);
/* A history entry of m's pages put to sleep or mapped again (action HBM_TRACE_SLEEP or WAKE): with its tag and
 * whether it keeps a backup, which snapshots write beside the run of pages. */
void hbm__sleep_trace(hbm_allocator *a, const hbm__mempool *m, hbm_trace_action action, uint64_t addr, uint64_t size,
                      hbm_stream stream);
/* hbm_get_stats: the asleep figures. */
void hbm__sleep_stats(hbm_allocator *a, hbm_stats *st);
/* The pool with id, or NULL (stream.c). */
hbm__mempool *hbm__mempool_find(hbm_allocator *a, hbm_mempool id);

/* ---- expand.c: expandable segments ---- */
/* Map pages for a request of `size` (rounded) on stream; the block returned is out of the free tree. */
hbm_status hbm__expand_alloc(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out);
/* Unmap every fully free page of the pool's expandable segments; release segments left empty. */
hbm_status hbm__expand_release_pool(hbm_allocator *a, hbm__pool *p);
/* A plan's region beside expandable segments (arena.c): a reservation of `size` bytes rounded up to the device's
 * granularity in pool p, *out its one unmapped block (in p's unmapped tree); its pages are mapped as the plan's
 * allocations touch them (hbm__expand_touch). */
hbm_status hbm__expand_region(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out);
/* c, an unmapped block of such a region: the pages under [lo, hi) inside it mapped; *out the mapped block they
 * make, free and outside every tree and list (the caller puts it on the loose list), its unmapped rest beside it.
 * On failure nothing is changed. */
hbm_status hbm__expand_touch(hbm_allocator *a, hbm__block *c, uintptr_t lo, uintptr_t hi, hbm__block **out);
/* b, a free mapped block of an expandable segment in its pool's free tree: its whole pages unmapped, the
 * reservation released when nothing of it is left mapped or in use. */
hbm_status hbm__expand_release_free(hbm_allocator *a, hbm__block *b);
/* A sleeping pool's pages (sleep.c). Unmap and release the mapped pages of seg, each marked asleep; stops at the
 * first failure (the rest stays mapped). *given: bytes given back. */
hbm_status hbm__expand_sleep(hbm_allocator *a, hbm__segment *seg, size_t *given);
/* Map the asleep pages of seg again, a run of adjacent pages at a time (a run all or nothing); stops at the first
 * failure. *mapped: bytes mapped. */
hbm_status hbm__expand_wake(hbm_allocator *a, hbm__segment *seg, size_t *mapped);
/* Unmap the pages of seg mapped since `since` (a wake that failed part-way: fresh pages, nothing to wait for),
 * each marked asleep again. */
void hbm__expand_unwake(hbm_allocator *a, hbm__segment *seg, const bool *was_asleep);
/* Return a segment's pages and reservation at destroy (whatever their state). */
void hbm__expand_teardown(hbm_allocator *a, hbm__segment *seg);
void hbm__expand_teardown_pool(hbm_allocator *a, hbm__pool *p);

/* ---- engine.c ---- */
/* Round a request as PyTorch's round_size does. */
size_t hbm__round_size(const hbm__conf *c, size_t size);
/* Size of a new segment for a rounded request (get_allocation_size). */
size_t hbm__allocation_size(const hbm__conf *c, size_t size);
/* Apply a memory fraction (0..1) with the lock held. */
hbm_status hbm__set_fraction_locked(hbm_allocator *a, double fraction);
/* Return every segment to the device and free all bookkeeping (hbm_destroy). */
void hbm__engine_teardown(hbm_allocator *a);
/* release_cached_blocks: pending frees waited for, the whole free segments and pages of the default pools and of
 * released private pools back to the device (empty_cache; the OOM retry; a wake that found the device full). */
hbm_status hbm__release_cached_blocks(hbm_allocator *a);
/* Set the last error text (printf-style). */
void hbm__set_error(hbm_allocator *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
