/*
 * engine.c: the caching engine, PyTorch's policy and the default. Owns the malloc and free paths (the fast path:
 * engine_malloc, hbm_free), splitting, coalescing, segment allocation and release, garbage collection, the OOM
 * retry ladder and its message, empty_cache and the memory fraction. Another policy (core/policy_ops.h) is called
 * through a->pol at three points: serving a request first, rescuing one at the OOM, hearing of a noted free.
 *
 * The rules are PyTorch's CUDACachingAllocator (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp, v2.6 to main;
 * docs/POLICY.md cites each rule):
 * the same rounding, pools, best fit, split and oversize rules and the same
 * statistics at the same points, so that a replay predicts what PyTorch
 * would reserve. It reaches the device only through device.c, and the free
 * index only through segments.c. Every function here runs with a->lock held.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/policy_ops.h"
#include "core/region.h"
#include "core/stats.h"
#include "core/segments.h"
#include "core/history.h"
#include "core/labels.h"
#include "core/events.h"
#include "core/mempools.h"
#include "core/sleep.h"
#include "core/expandable.h"
#include "core/device.h"
#include "core/outside.h"
#include "core/pool.h"
#include "util/util.h"

/* ---- size rules ---- */

static int floor_log2(size_t v) { return 63 - __builtin_clzll((unsigned long long)v); }

/* roundup_power2_divisions interval of a size: floor(log2 s) - 20, clamped to 0..15. */
static uint64_t divisions_for(const hbm__conf *c, size_t size)
{
    int idx = floor_log2(size) - 20;
    if (idx < 0)
        idx = 0;
    if (idx > HBM__ROUNDUP_INTERVALS - 1)
        idx = HBM__ROUNDUP_INTERVALS - 1;
    return c->roundup_divisions[idx];
}

static size_t next_division(size_t size, uint64_t divisions)
{
    if ((size & (size - 1)) == 0)
        return size;
    size_t floor2 = (size_t)1 << floor_log2(size);
    size_t step = floor2 >> floor_log2(divisions);
    if (step == 0)
        return floor2 << 1;
    size_t down = size & ~(step - 1);
    return down == size ? size : down + step;
}

static inline size_t round_size(const hbm__conf *c, size_t size)
{
    if (size < HBM__MIN_BLOCK)
        return HBM__MIN_BLOCK;
    uint64_t div = divisions_for(c, size);
    /* size_t arithmetic as PyTorch's: 512 x divisions wraps for divisions >= 2^55 (then every size rounds). */
    if (div > 1 && size > (size_t)(HBM__MIN_BLOCK * div))
        return next_division(size, div);
    return (size + HBM__MIN_BLOCK - 1) / HBM__MIN_BLOCK * HBM__MIN_BLOCK;
}

size_t hbm__round_size(const hbm__conf *c, size_t size) { return round_size(c, size); }

static size_t round_up(size_t v, size_t unit) { return (v + unit - 1) / unit * unit; }

size_t hbm__allocation_size(const hbm__conf *c, size_t size)
{
    if (size <= HBM__SMALL_SIZE)
        return HBM__SMALL_BUFFER;
    if (c->page_size_1g)
        return round_up(size, HBM__HUGE_PAGE); /* torch_npu: large pool in 1 GiB units */
    if (size < HBM__MIN_LARGE_ALLOC)
        return c->large_segment_size;
    return round_up(size, HBM__ROUND_LARGE);
}

/* ---- errors ---- */

/* A failed call's message to the calling thread's sink, if it set one (hbm_devices), while the lock is held: the
 * allocator's own buffer is shared, and another thread's failure may overwrite it the moment the lock is dropped. */
static inline void to_sink(const hbm_allocator *a, hbm_status rc)
{
    if (rc != HBM_OK && hbm__err_sink)
        snprintf(hbm__err_sink, hbm__err_sink_len, "%s", a->err);
}

static bool gc_active(const hbm_allocator *a) { return a->gc_on; }

static bool block_is_split(const hbm__block *b) { return b->prev || b->next; }

/* A free block that is its whole (non-expandable) segment: what cudaFree can return (the region never is). */
static bool whole_segment(const hbm__block *b)
{
    return !b->prev && !b->next && !b->seg->expandable && !b->seg->pool->is_region;
}

static size_t expandable_size(const hbm__block *b)
{
    return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
}

/* ---- the best-fit search (get_free_block) ---- */

#define HBM__FAST static inline __attribute__((always_inline))

HBM__FAST hbm__block *get_free_block(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size)
{
    size_t ms = a->conf.max_split_size;
    if (gc_active(a))
        p->search_count++;
    hbm__block *b = hbm__pool_lower_bound(p, stream, size);
    if (!b || b->stream != stream)
        return NULL;
    if (b->seg->expandable) {
        /* For best fit, a block at the mapped frontier counts as the size it
         * can grow to (its unmapped successor included): prefer a block that
         * fits without growing, as PyTorch does. */
        for (hbm__block *n = hbm__tree_next(b);
             n && n->stream == stream && n->seg->expandable && expandable_size(n) < expandable_size(b);
             n = hbm__tree_next(b))
            b = n;
    }
    /* Oversize blocks (>= max_split_size) serve only oversize requests, and
     * only within max_non_split_rounding of their size; PyTorch stops the
     * search here rather than looking further, as every later block is larger. */
    if (size < ms && b->size >= ms)
        return NULL;
    if (size >= ms && b->size >= size + a->conf.max_non_split_rounding)
        return NULL;
    return b; /* still in the free tree: alloc_found_block takes it out, or leaves its remainder there */
}

static bool should_split(const hbm_allocator *a, const hbm__pool *p, const hbm__block *b, size_t size)
{
    size_t remaining = b->size - size;
    if (p->is_small || p->is_region || b->seg->expandable)
        return remaining >= HBM__MIN_BLOCK;
    /* Large pool: keep up to 1 MiB of slack inside the block rather than
     * leave a sliver, and never split an oversize block. */
    return size < a->conf.max_split_size && remaining > HBM__SMALL_SIZE;
}

/* Allocate b (found in the free tree, or new and outside it) for a rounded request of size. */
HBM__FAST hbm__block *alloc_found_block(hbm_allocator *a, hbm__pool *p, hbm__block *b, size_t size, size_t orig)
{
    hbm_stats *st = &a->stats;
    int k = hbm__pool_kind(p);
    bool already_split = block_is_split(b);
    if (should_split(a, p, b, size)) {
        /* The front becomes the caller's block; the old object keeps the remainder. */
        hbm__block *rem = b;
        b = hbm__split_front(a, rem, size); /* hbm__ensure_spares() guaranteed a block object */
        if (rem->in_tree)
            hbm__pool_rekey(p, rem, false);
        else
            hbm__pool_insert(p, rem);
        /* Expandable segments stay out of inactive_split: their free pages can always be returned. */
        if (b->seg->expandable) {
        } else if (already_split) {
            hbm__stat_k_dec(st->inactive_split_bytes, k, (int64_t)size);
        } else {
            hbm__stat_k_inc(st->inactive_split_bytes, k, (int64_t)rem->size);
            hbm__stat_k_inc(st->inactive_split, k, 1);
        }
    } else {
        if (b->in_tree)
            hbm__pool_remove(p, b);
        if (already_split && !b->seg->expandable) {
            hbm__stat_k_dec(st->inactive_split_bytes, k, (int64_t)b->size);
            hbm__stat_k_dec(st->inactive_split, k, 1);
        }
    }
    b->allocated = true; /* held: the held side's fields from here */
    b->requested = orig;
    b->uses = NULL;
    b->label = a->context;
    b->note = 0;
    hbm__trace(a, HBM_TRACE_ALLOC, b->addr, orig, b->stream);
    hbm__ptrmap_insert(&a->live, b); /* room reserved by the caller */
    hbm__stats_on_alloc(a, p, b->size, orig);
    return b;
}

/* ---- segments ---- */

/* A new whole segment of `size` bytes: one free block, outside every tree. */
hbm_status hbm__segment_new(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out)
{
    hbm_stats *st = &a->stats;
    hbm__segment *seg = malloc(sizeof *seg);
    hbm__block *b = seg ? hbm__block_new(a) : NULL;
    if (!b) {
        free(seg);
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        return HBM_ERR_NOMEM;
    }
    uintptr_t addr;
    hbm_status rc;
    /* A capture keeps the lock (see relax()), and so does a framework's launch queue: an open window here would
     * come after malloc's decisions (docs/CONTRACTS.md, "Waiting with the lock open"). */
    if (a->conf.release_lock_on_malloc && !a->ncaptures && !hbm__framework_queue(a)) {
        /* release_lock_on_cudamalloc: other threads may use the allocator while
         * the device allocates; seg and b are ours alone meanwhile. */
        uint64_t t0;
        hbm__unlock(a);
        int code = hbm__dev_malloc_raw(a, size, &addr, &t0);
        hbm__lock(a);
        rc = hbm__dev_malloc_done(a, size, code, t0);
    } else {
        rc = hbm__dev_malloc(a, size, &addr);
    }
    if (rc != HBM_OK) {
        free(seg);
        hbm__block_recycle(a, b);
        return rc;
    }
    memset(seg, 0, sizeof *seg);
    seg->addr = addr;
    seg->size = size;
    seg->stream = stream;
    seg->pool = p;
    seg->head = b;
    b->seg = seg;
    b->stream = stream;
    b->addr = addr;
    b->size = size;
    hbm__segments_insert(a, seg);
    a->total_reserved += size;
    hbm__stat_arr_inc(st->segment, p, 1);
    hbm__stat_arr_inc(st->reserved_bytes, p, (int64_t)size);
    if (size >= a->conf.max_split_size)
        hbm__stat_inc(&st->oversize_segments, 1);
    st->num_device_alloc++;
    hbm__trace(a, HBM_TRACE_SEGMENT_ALLOC, addr, size, stream);
    *out = b;
    return HBM_OK;
}

/* Whether `bytes` more from the device leave hbm_headroom_mb of it free, as the runtime counts free memory (what
 * other processes, communicators and contexts hold included). A failed query allows it: the device's own answer
 * then decides, and the headroom never stops a job it cannot measure. */
static __attribute__((noinline, cold)) bool headroom_allows(hbm_allocator *a, size_t bytes)
{
    size_t dev_free, dev_total;
    if (hbm__dev_info(a, &dev_free, &dev_total) != HBM_OK) {
        a->err[0] = 0;
        return true;
    }
    return dev_free >= bytes && dev_free - bytes >= a->conf.headroom_bytes;
}

/* A new segment of `size` bytes for a rounded request of `request` bytes
 * (with expandable segments: pages mapped to cover the request). */
static hbm_status alloc_block(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t request, size_t size,
                              bool is_retry, hbm__block **out)
{
    if (is_retry)
        a->stats.num_alloc_retries++;
    /* The fraction limit counts as a device OOM, before any device call. */
    if (a->fraction_set && a->total_reserved + size > a->allowed_max)
        return HBM_ERR_OOM;
    /* So does crossing hbm_headroom_mb, before the device is asked: the retry ladder then gives cached memory back
     * first, and the OOM message names the headroom. Pages map what the request needs; a segment is whole. */
    if (__builtin_expect(a->conf.headroom_bytes != 0, 0) &&
        !headroom_allows(a, a->expandable || (p->owner && p->owner->sl) ? request : size))
        return HBM_ERR_OOM;
    /* A tagged pool is made of pages whatever the setting: its pages can sleep, its blocks keep their addresses. */
    if (a->expandable || (p->owner && p->owner->sl))
        return hbm__expand_alloc(a, p, stream, request, out);
    return hbm__segment_new(a, p, stream, size, out);
}

/* Return a whole-segment free block to the device. On a device error the
 * block stays cached and the error is returned. */
hbm_status hbm__release_block(hbm_allocator *a, hbm__block *b)
{
    hbm__segment *seg = b->seg;
    hbm__pool *p = seg->pool;
    hbm_status rc = hbm__dev_free(a, seg->addr, seg->size);
    if (rc != HBM_OK)
        return rc;
    hbm__pool_remove(p, b);
    a->total_reserved -= seg->size;
    hbm__stat_arr_dec(a->stats.segment, p, 1);
    hbm__stat_arr_dec(a->stats.reserved_bytes, p, (int64_t)seg->size);
    if (seg->size >= a->conf.max_split_size)
        hbm__stat_dec(&a->stats.oversize_segments, 1);
    a->stats.num_device_free++;
    hbm__trace(a, HBM_TRACE_SEGMENT_FREE, seg->addr, seg->size, seg->stream);
    hbm__published(a);
    hbm__segments_remove(a, seg);
    free(seg);
    hbm__block_recycle(a, b);
    return HBM_OK;
}

/* Release every whole free segment of a pool (release_blocks). */
hbm_status hbm__release_pool(hbm_allocator *a, hbm__pool *p)
{
    hbm_status first_error = HBM_OK;
    for (hbm__block *b = hbm__pool_first(p), *next; b; b = next) {
        next = hbm__tree_next(b);
        if (whole_segment(b)) {
            hbm_status rc = hbm__release_block(a, b);
            if (rc != HBM_OK && first_error == HBM_OK)
                first_error = rc;
        }
    }
    hbm_status rc = hbm__expand_release_pool(a, p);
    return first_error != HBM_OK ? first_error : rc;
}

/* empty_cache: wait for pending frees, then return every whole free segment
 * of the default pools and of released private pools. */
hbm_status hbm__release_cached_blocks(hbm_allocator *a)
{
    hbm_status re = hbm__sync_events(a);
    hbm_status rl = hbm__release_pool(a, &a->large);
    hbm_status rs = hbm__release_pool(a, &a->small);
    hbm_status rm = hbm__release_mempools(a);
    return re != HBM_OK ? re : rl != HBM_OK ? rl : rs != HBM_OK ? rs : rm;
}

void hbm__release_cached(hbm_allocator *a)
{
    /* Whole free segments only, without waiting for the device (blocks still read by other streams stay); a device
     * error keeps a segment cached. */
    (void)hbm__release_pool(a, &a->large);
    (void)hbm__release_pool(a, &a->small);
}

/* release_available_cached_blocks: free oversize cached blocks on this stream
 * until a request of `size` could fit; false when that is not reached. */
static bool release_available(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size)
{
    size_t ms = a->conf.max_split_size;
    if (ms == SIZE_MAX)
        return false;
    size_t key = size < ms ? ms : size;
    hbm__block *b = hbm__pool_lower_bound(p, stream, key);
    if (b && b->stream == stream && whole_segment(b))
        return hbm__release_block(a, b) == HBM_OK;
    /* No single block is large enough: free oversize blocks from the largest down. */
    size_t released = 0;
    hbm__block *cur = hbm__pool_before(p, stream, key);
    while (cur && released < key && cur->size >= ms && cur->stream == stream) {
        hbm__block *prev = hbm__tree_prev(cur);
        size_t sz = cur->size;
        if (whole_segment(cur) && hbm__release_block(a, cur) == HBM_OK)
            released += sz;
        cur = prev;
    }
    return released >= key;
}

/* garbage_collection_threshold: free whole cached large segments, oldest
 * first by the mean-age rule, until reserved drops under the threshold. */
static size_t gc_threshold(const hbm_allocator *a) { return (size_t)(a->conf.gc_threshold * (double)a->allowed_max); }

/* Whether a collection would look for anything to free. */
static bool gc_due(const hbm_allocator *a) { return a->total_reserved > gc_threshold(a); }

static void garbage_collect(hbm_allocator *a)
{
    hbm__pool *p = &a->large;
    size_t threshold = gc_threshold(a);
    if (a->total_reserved <= threshold)
        return;
    size_t target = a->total_reserved - threshold, reclaimed = 0;
    double total_age = 0;
    size_t count = 0;
    for (hbm__block *b = hbm__pool_first(p); b; b = hbm__tree_next(b))
        if (whole_segment(b)) {
            total_age += (double)(p->search_count - b->gc_base);
            count++;
        }
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
        double age_threshold = total_age / (double)count;
        freed = false;
        /* A pass frees every block at or above the mean age, even past the
         * target: PyTorch does so to keep GC from running too often. */
        for (hbm__block *b = hbm__pool_first(p), *next; b; b = next) {
            next = hbm__tree_next(b);
            double age = (double)(p->search_count - b->gc_base);
            if (!whole_segment(b) || age < age_threshold)
                continue;
            size_t sz = b->size;
            if (hbm__release_block(a, b) != HBM_OK)
                continue;
            freed = true;
            reclaimed += sz;
            total_age -= age;
            count--;
        }
    }
}

/* ---- the OOM message ---- */

static void oom_message(hbm_allocator *a, size_t orig, size_t alloc_size, hbm_stream stream)
{
    hbm_outside out; /* the device's figures, and what holds the rest, by process where the runtime tells */
    hbm__outside_device(a, &out);
    size_t dev_total = (size_t)out.device_total;
    size_t dev_free = out.device_used >= 0 ? dev_total - (size_t)out.device_used : 0;
    hbm__trace(a, HBM_TRACE_OOM, dev_free, alloc_size, 0);
    int64_t allocated = a->stats.allocated_bytes[HBM_POOL_ALL].current;
    int64_t reserved = a->stats.reserved_bytes[HBM_POOL_ALL].current;
    a->last_oom = (hbm_oom_info){.request = orig,
                                 .alloc_size = alloc_size,
                                 .device_total = dev_total,
                                 .device_free = dev_free,
                                 .allowed = a->fraction_set ? a->allowed_max : 0,
                                 .allocated = (uint64_t)allocated,
                                 .active = (uint64_t)(allocated + a->pend.bytes[HBM_POOL_ALL]),
                                 .reserved = (uint64_t)reserved,
                                 .during_capture = a->ncaptures > 0};
    a->has_oom = true;
    size_t cached = (size_t)(reserved - allocated);
    size_t largest = hbm__largest_free(a);
    size_t outside = out.outside > 0 ? (size_t)out.outside : 0;
    hbm__outside_processes(a, &out);
    hbm__outside_note(a, &out);
    a->last_oom.outside = out;
    char s_alloc[32], s_orig[32], s_total[32], s_free[32], s_allocated[32], s_cached[32], s_largest[32], s_x[32];
    hbm__format_size(alloc_size, s_alloc, sizeof s_alloc);
    hbm__format_size(orig, s_orig, sizeof s_orig);
    hbm__format_size(dev_total, s_total, sizeof s_total);
    hbm__format_size(dev_free, s_free, sizeof s_free);
    hbm__format_size((uint64_t)allocated, s_allocated, sizeof s_allocated);
    hbm__format_size(cached, s_cached, sizeof s_cached);
    hbm__format_size(largest, s_largest, sizeof s_largest);

    hbm__sbuf sb;
    hbm__sb_init(&sb, a->err, sizeof a->err);
    hbm__sb_printf(&sb,
                   "out of memory on %s device %d. Tried to allocate %s (a request of %s). Device %d has a total "
                   "capacity of %s of which %s is free. ",
                   hbm__dev_name(a), a->device, s_alloc, s_orig, a->device, s_total, s_free);
    if (a->fraction_set) {
        hbm__format_size(a->allowed_max, s_x, sizeof s_x);
        hbm__sb_printf(&sb, "%s allowed (per_process_memory_fraction %g). ", s_x, a->fraction);
    }
    if (a->conf.headroom_bytes) {
        char s_keep[32];
        hbm__format_size(a->conf.headroom_bytes, s_keep, sizeof s_keep);
        hbm__format_size(dev_free > alloc_size ? dev_free - alloc_size : 0, s_x, sizeof s_x);
        hbm__sb_printf(&sb,
                       "hbm_headroom_mb keeps %s of the device free for memory outside hbmalloc (communicators' "
                       "buffers, other processes): this allocation would leave %s. ",
                       s_keep, s_x);
    }
    hbm__sb_printf(&sb,
                   "Of the allocated memory %s is allocated by hbmalloc, and %s is reserved but unallocated; the "
                   "largest free cached block is %s. ",
                   s_allocated, s_cached, s_largest);
    if (outside > 0) {
        char said[512];
        hbm_outside_describe(&out, said, sizeof said);
        hbm__sb_printf(&sb, "%s. ", said);
    }
    if (a->region_seg) { /* the region's share of what is reserved, and how it is cut up; named by its policy */
        size_t region_free = 0, region_largest = 0;
        for (hbm__block *b = hbm__pool_first(&a->region); b; b = hbm__tree_next(b)) {
            region_free += b->size;
            if (b->size > region_largest)
                region_largest = b->size;
        }
        char s_region[32], s_rfree[32];
        hbm__format_size(a->region_seg->size, s_region, sizeof s_region);
        hbm__format_size(region_free, s_rfree, sizeof s_rfree);
        hbm__format_size(region_largest, s_x, sizeof s_x);
        hbm__sb_printf(&sb, "The region of %s that %s serves from holds %s free, the largest piece %s%s. ", s_region,
                       a->pol ? a->pol->ops->name : "a policy", s_rfree, s_x,
                       stream == a->region_stream ? "" : " (it serves only the stream of the first allocation)");
    }

    /* Advice that fits the state, never a setting already in force. */
    if (a->ncaptures) {
        hbm__sb_printf(&sb,
                       "A graph capture is under way on this device: cached memory is not returned to the "
                       "device during capture (that synchronizes the device and would invalidate the "
                       "capture), so %s of cached memory could not be used. Call empty_cache() "
                       "(torch.cuda.empty_cache() / torch.npu.empty_cache()) before the capture begins, or "
                       "capture less at once.",
                       s_cached);
    } else if (a->fraction_set && a->total_reserved + alloc_size > a->allowed_max && dev_free >= alloc_size) {
        hbm__sb_printf(&sb, "The memory-fraction limit was reached while the device still has room: raise "
                            "per_process_memory_fraction or reduce memory use.");
    } else if (cached + dev_free >= alloc_size && largest < round_size(&a->conf, orig)) {
        /* Enough bytes exist, but cached ones are split between live blocks. */
        if (!a->conf.expandable_segments)
            hbm__sb_printf(&sb, "Reserved but unallocated memory is fragmented: try expandable_segments:True, "
                                "which lets freed memory be remapped instead of staying pinned between live blocks.");
        else
            hbm__sb_printf(&sb, "Memory is fragmented between live blocks even with expandable segments: free "
                                "long-lived tensors earlier or allocate them before short-lived ones.");
        if (a->conf.max_split_size == SIZE_MAX && orig > HBM__MIN_LARGE_ALLOC && !a->conf.expandable_segments)
            hbm__sb_printf(&sb, " For many large requests of varying size, max_split_size_mb can also help.");
    } else {
        size_t need = (size_t)allocated + alloc_size;
        size_t have = dev_total > outside ? dev_total - outside : 0;
        hbm__format_size(need > have ? need - have : alloc_size, s_x, sizeof s_x);
        hbm__sb_printf(&sb,
                       "The live data does not fit: about %s more than the device can hold is needed. Reduce "
                       "batch size or sequence length, use activation checkpointing, or use a larger device.",
                       s_x);
    }
}

/* ---- malloc ---- */

/* Open waits one request may make before it gives up giving memory back (frees keep coming meanwhile). */
#define HBM__OPEN_WAITS 4

/* Whether memory may go back now, inside malloc's decisions: without a framework's queue the wait for the device is
 * made here (the lock held, as PyTorch does); with one, only an open wait made before them may hold. Out of line, as
 * the wait it stands for (hbm__dev_quiesce_open) was: only a collection or an OOM reaches it. */
static __attribute__((noinline)) bool may_give_back(hbm_allocator *a)
{
    return hbm__framework_queue(a) ? hbm__dev_quiet(a) : hbm__dev_quiesce(a) == HBM_OK;
}

/* Whether a request about to give memory back first waits with the lock open (hbm__dev_quiesce_open) and is then
 * looked at anew: a framework's launch queue, a wait left (`waits`: those the request made already), and the device
 * not quiet or uses held unrecorded that the wait settles. Asked only where memory would go back, after the settings
 * that say so: a miss that gives nothing back (every replayed one) pays no test of the queue (issue #35). */
static inline bool open_wait_due(const hbm_allocator *a, unsigned waits)
{
    return waits < HBM__OPEN_WAITS && hbm__framework_queue(a) && (!hbm__dev_quiet(a) || a->nunrec);
}

/* Room in the live map for one more block (hbm__ptrmap_reserve), its growth out of line and given the allocator:
 * while the map's address was the growth's argument at both of engine_malloc's reserves (before the cache lookup and
 * after the device was asked), GCC computed it once ahead of both and kept it on the stack across every malloc, cache
 * hits included: 2 instructions a request (bench_instr, callgrind). */
static __attribute__((noinline, cold)) int live_grow(hbm_allocator *a) { return hbm__ptrmap_reserve(&a->live, 1); }
static inline int live_room(hbm_allocator *a) { return hbm__ptrmap_fits(&a->live, 1) ? 0 : live_grow(a); }


/* `in`: the private pool asked for (hbm_mempool_malloc), else NULL; `pol`: a->pol is set. Both constants where
 * inlined: the caching engine alone pays no test for a policy (hbm_malloc takes one branch on a->pol). */
static hbm_status malloc_again(hbm_allocator *a, size_t orig, hbm_stream stream, hbm__mempool *in, void **out, bool pol,
                               unsigned waits);

/* The waits a release needs, when they open the lock (a framework's launch queue: docs/CONTRACTS.md, "Waiting with
 * the lock open"), are made before anything they could invalidate is decided, and the request is then looked at anew
 * (malloc_again: the pool may have been put to sleep, a block freed, a capture begun), whether the wait succeeded or
 * not: a failed one may have opened the lock too. */
#define WAIT_THEN_AGAIN()                                              \
    do {                                                               \
        (void)hbm__dev_quiesce_open(a);                                \
        return malloc_again(a, orig, stream, in, out, pol, waits + 1); \
    } while (0)

/* The miss: no cached block fits. PyTorch's sequence (CUDACachingAllocator.cpp malloc, after get_free_block), one
 * step a line; nothing is given back to the device during a graph capture (a free synchronizes it). Inlined where
 * engine_malloc is (out of line, the replays that make a segment every other event paid 1.7% more per event). */
HBM__FAST hbm_status malloc_miss(hbm_allocator *a, hbm__pool *p, size_t orig, size_t size, hbm_stream stream,
                                 hbm__mempool *in, void **out, const bool pol, unsigned waits, uint64_t note)
{
    size_t alloc_size = hbm__allocation_size(&a->conf, size);
    bool may_release = a->ncaptures == 0;
    hbm__block *b = NULL;
    /* 1. The wait that garbage collection or remapping free pages would make, first. */
    if (may_release && ((gc_active(a) && gc_due(a)) || (a->expandable && a->conf.remap_free_pages)) &&
        open_wait_due(a, waits))
        WAIT_THEN_AGAIN();
    /* 2. garbage_collection_threshold: old cached segments back, when reserved is above it. */
    if (gc_active(a) && may_release && gc_due(a) && may_give_back(a))
        garbage_collect(a);
    /* 3. A new segment (or pages) from the device. */
    hbm_status rc = alloc_block(a, p, stream, size, alloc_size, false, &b);
    /* 4. Out of memory: the wait a release needs, if not made yet (with a queue the lock stayed held in step 3). */
    if (rc == HBM_ERR_OOM && may_release && open_wait_due(a, waits))
        WAIT_THEN_AGAIN();
    /* 5. release_available_cached_blocks: oversize cached blocks of this stream back, and try again. */
    if (rc == HBM_ERR_OOM && may_release && a->conf.max_split_size != SIZE_MAX && may_give_back(a) &&
        release_available(a, p, stream, size))
        rc = alloc_block(a, p, stream, size, alloc_size, false, &b);
    /* 6. release_cached_blocks: every cached block back (pending frees waited for), and the last try (a retry). */
    if (rc == HBM_ERR_OOM && may_release) {
        if (may_give_back(a))
            hbm__release_cached_blocks(a);
        rc = alloc_block(a, p, stream, size, alloc_size, true, &b);
    }
    /* 7. A policy's region with room for what the device could not give: not an OOM. */
    bool rescued = false;
    if (pol && rc == HBM_ERR_OOM && a->pol->ops->rescue && (b = a->pol->ops->rescue(a, stream, size))) {
        rescued = true;
        rc = HBM_OK;
        a->err[0] = 0;
        p = &a->region;
    }
    /* 8. Out of memory after all: counted, PyTorch's message made, the published record told. */
    if (rc != HBM_OK) {
        if (rc == HBM_ERR_OOM) {
            a->stats.num_ooms++;
            oom_message(a, orig, alloc_size, stream);
            memcpy(a->oom_msg, a->err, sizeof a->oom_msg);
            hbm__published(a);
        }
        return rc;
    }
    /* 9. The block taken as a hit's would be. Again first: with release_lock_on_malloc another thread may have used
     * the spares meanwhile; without them the new segment stays cached and nothing is lost. */
    if ((rc = hbm__ensure_spares(a, 1)) != HBM_OK || live_room(a)) {
        if (!rescued)
            hbm__pool_insert(p, b);
        if (rc == HBM_OK) {
            hbm__set_error(a, "out of host memory for allocator bookkeeping");
            rc = HBM_ERR_NOMEM;
        }
        return rc;
    }
    b = alloc_found_block(a, p, b, size, orig);
    if (pol && note)
        b->note = note; /* a policy's note (core/policy_ops.h), carried until the block is freed */
    hbm__published(a);  /* a device call was just made: the record follows, here so that a hit pays no test */
    *out = (void *)b->addr;
    return HBM_OK;
}
#undef WAIT_THEN_AGAIN

/* `waits`: the open waits this request made already (malloc_again; 0 from the entry points). */
HBM__FAST hbm_status engine_malloc(hbm_allocator *a, size_t orig, hbm_stream stream, hbm__mempool *in, void **out,
                                   const bool pol, unsigned waits)
{
    if (orig >= HBM__MAX_REQUEST - a->request_pad) {
        a->stats.num_ooms++;
        a->last_oom = (hbm_oom_info){.request = orig,
                                     .too_large = 1,
                                     .outside = {.device = a->device, /* not asked: unknown, not 0 */
                                                 .device_used = -1,
                                                 .outside = -1,
                                                 .process_bytes = -1,
                                                 .process_outside = -1,
                                                 .others = -1}};
        a->has_oom = true;
        hbm__set_error(a, "out of memory on %s device %d. Tried to allocate more than 1EB memory.", hbm__dev_name(a),
                       a->device);
        memcpy(a->oom_msg, a->err, sizeof a->oom_msg);
        return HBM_ERR_OOM;
    }
    hbm_status rc;
    if (!a->nspare_blocks && (rc = hbm__ensure_spares(a, 1)) != HBM_OK)
        return rc;
    if (live_room(a)) {
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        return HBM_ERR_NOMEM;
    }
    if (a->pending_events)
        hbm__process_events(a); /* returns at once during a capture */
    size_t padded = orig + a->request_pad;
    size_t size = a->roundup                ? round_size(&a->conf, padded)
                  : padded < HBM__MIN_BLOCK ? HBM__MIN_BLOCK
                                            : (padded + HBM__MIN_BLOCK - 1) & ~(HBM__MIN_BLOCK - 1);
    hbm__pool *p;
    if (in || a->nroutes) {
        p = in ? (size <= HBM__SMALL_SIZE ? &in->small : &in->large) : hbm__route_pool(a, size, stream);
        if (__builtin_expect(p->owner && p->owner->sleep_state, 0))
            return hbm__sleep_refuse(a, p->owner);
    } else {
        p = size <= HBM__SMALL_SIZE ? &a->small : &a->large;
    }
    hbm__block *b = NULL;
    uint64_t note = 0; /* the policy's note of this request */
    if (pol && !p->owner && (b = a->pol->ops->serve(a, stream, size, &note)))
        p = &a->region; /* the region's block */
    if (!b)
        b = get_free_block(a, p, stream, size);
    if (__builtin_expect(!b, 0))
        return malloc_miss(a, p, orig, size, stream, in, out, pol, waits, note);
    b = alloc_found_block(a, p, b, size, orig);
    if (pol && note)
        b->note = note; /* a policy's note (core/policy_ops.h), carried until the block is freed */
    *out = (void *)b->addr;
    return HBM_OK;
}

/* A request looked at anew after an open wait (engine_malloc): everything it read may have changed. Out of line, so
 * that the fast path pays nothing for it. */
static __attribute__((noinline)) hbm_status malloc_again(hbm_allocator *a, size_t orig, hbm_stream stream,
                                                         hbm__mempool *in, void **out, bool pol, unsigned waits)
{
    return engine_malloc(a, orig, stream, in, out, pol, waits);
}

/* engine_malloc with a policy: out of line, so that the caching engine's own path stays small. */
static __attribute__((noinline)) hbm_status policy_malloc(hbm_allocator *a, size_t orig, hbm_stream stream,
                                                          hbm__mempool *in, void **out)
{
    return engine_malloc(a, orig, stream, in, out, true, 0);
}

/* engine_malloc and its fast-path helpers are inlined into both mallocs (HBM__FAST): with two call sites GCC
 * would otherwise keep them out of line and the fast path would pay the calls (bench_instr: +10 instructions
 * per replayed event). */
/* The public mallocs' start: HBM_ERR_INVALID without an allocator or a place for the pointer, HBM_OK for 0 bytes
 * (*out NULL, as PyTorch hands out), else on with the lock taken (malloc_end gives it back). A macro, as it returns
 * from its caller: the same code as written out in each (an inline function that returned a code to test moved the
 * register allocation of the inlined miss path, +1.2% per event where a segment is made every other event). */
#define MALLOC_BEGIN(a, size, out)  \
    do {                            \
        if (!(a) || !(out))         \
            return HBM_ERR_INVALID; \
        *(out) = NULL;              \
        if ((size) == 0)            \
            return HBM_OK;          \
        hbm__lock(a);               \
    } while (0)

/* Their end: a failure's message to the calling thread's sink, the lock given back; after an OOM, the snapshot asked
 * for at one (io/oom_dump.c), with the lock open. */
static __attribute__((noinline, cold)) hbm_status malloc_failed(hbm_allocator *a, hbm_status rc)
{
    to_sink(a, rc);
    hbm__unlock(a);
    if (rc == HBM_ERR_OOM)
        hbm__oom_dumped(a);
    return rc;
}

HBM__FAST hbm_status malloc_end(hbm_allocator *a, hbm_status rc)
{
    if (__builtin_expect(rc != HBM_OK, 0)) /* the hit path tests once */
        return malloc_failed(a, rc);
    hbm__unlock(a);
    return rc;
}

hbm_status hbm_malloc(hbm_allocator *a, size_t size, hbm_stream stream, void **out)
{
    MALLOC_BEGIN(a, size, out);
    hbm_status rc = __builtin_expect(a->pol != NULL, 0) ? policy_malloc(a, size, stream, NULL, out)
                                                        : engine_malloc(a, size, stream, NULL, out, false, 0);
    return malloc_end(a, rc);
}

hbm_status hbm_mempool_malloc(hbm_allocator *a, hbm_mempool p, size_t size, hbm_stream stream, void **out)
{
    MALLOC_BEGIN(a, size, out);
    hbm_status rc;
    hbm__mempool *m = hbm__mempool_find(a, p);
    if (!m || m->use_count == 0) {
        hbm__set_error(a, "hbm_mempool_malloc: private pool %llu does not exist (or was released already)",
                       (unsigned long long)p);
        rc = HBM_ERR_INVALID;
    } else {
        m->use_count++; /* not deleted while a wait opens the lock */
        rc = a->pol ? policy_malloc(a, size, stream, m, out) : engine_malloc(a, size, stream, m, out, false, 0);
        m->use_count--;
    }
    return malloc_end(a, rc);
}

hbm_status hbm_malloc_labeled(hbm_allocator *a, size_t size, hbm_stream stream, hbm_label label, void **out)
{
    MALLOC_BEGIN(a, size, out);
    hbm_status rc;
    if (label > a->labels.n) {
        hbm__set_error(a, "hbm_malloc_labeled: label %u was not given by hbm_label_intern", label);
        rc = HBM_ERR_INVALID;
    } else {
        hbm_label saved = a->context;
        if (label)
            a->context = label;
        rc = a->pol ? policy_malloc(a, size, stream, NULL, out) : engine_malloc(a, size, stream, NULL, out, false, 0);
        a->context = saved;
    }
    return malloc_end(a, rc);
}

/* ---- free ---- */


/* b, free and outside every tree, coalesced with its free neighbours into p's tree; the inactive_split counts
 * follow (b was not counted as free). Returns the block that holds b's range. */
HBM__FAST hbm__block *settle_by(hbm_allocator *a, hbm__pool *p, hbm__block *b, hbm__rb_less less)
{
    hbm_stats *st = &a->stats;
    int k = hbm__pool_kind(p);
    /* Coalesce with the free neighbours (both in the free tree): the larger one
     * takes in the rest, and often keeps its place in the tree. */
    bool mp = hbm__pool_can_merge(b, b->prev), mn = hbm__pool_can_merge(b, b->next);
    int64_t net_blocks = -(int64_t)mp - (int64_t)mn;
    int64_t net_bytes = -(int64_t)((mp ? b->prev->size : 0) + (mn ? b->next->size : 0));
    if (!mp && !mn) {
        hbm__pool_insert_by(p, b, less);
    } else {
        hbm__block *keep = !mp ? b->next : !mn ? b->prev : b->prev->size >= b->next->size ? b->prev : b->next;
        if (mp && mn) /* the other one comes in first */
            hbm__pool_merge(a, p, b, keep == b->prev ? b->next : b->prev);
        hbm__absorb(a, keep, b);
        b = keep;
        hbm__pool_rekey_by(p, b, true, less);
    }
    if (block_is_split(b)) {
        net_blocks += 1;
        net_bytes += (int64_t)b->size;
    }
    if (b->seg->expandable)
        net_blocks = net_bytes = 0; /* not counted in inactive_split, as in PyTorch */
    if (net_blocks > 0)
        hbm__stat_k_inc(st->inactive_split, k, net_blocks);
    else if (net_blocks < 0)
        hbm__stat_k_dec(st->inactive_split, k, -net_blocks);
    if (net_bytes > 0)
        hbm__stat_k_inc(st->inactive_split_bytes, k, net_bytes);
    else if (net_bytes < 0)
        hbm__stat_k_dec(st->inactive_split_bytes, k, -net_bytes);
    return b;
}

HBM__FAST hbm__block *settle(hbm_allocator *a, hbm__pool *p, hbm__block *b)
{
    return settle_by(a, p, b, hbm__block_less);
}

/* hbm__free_block, inlined into hbm_free (the fast path) and out of line for the streams' completions. */
HBM__FAST void free_block(hbm_allocator *a, hbm__block *b)
{
    hbm__pool *p = b->seg->pool;
    hbm_stats *st = &a->stats;
    size_t requested = b->requested;
    hbm__trace_block(a, HBM_TRACE_FREE_COMPLETED, b, requested);
    if (__builtin_expect(!p->is_region, 1))
        settle(a, p, b);
    else if (p->lazy == HBM__LAZY) /* only the region is ever lazy (region.c) */
        hbm__loose_add(a, p, b);   /* a plan is served from this region: left where it is */
    else if (p->lazy)
        hbm__loose_put(p, b); /* the same, the region made of pages */
    else
        settle_by(a, p, b, hbm__region_less);
    hbm__stat_k_dec(st->requested_bytes, hbm__pool_kind(p),
                    (int64_t)requested); /* active follows allocation (stats.c) */
}

void hbm__free_block(hbm_allocator *a, hbm__block *b) { free_block(a, b); }

hbm__block *hbm__settle_free(hbm_allocator *a, hbm__block *b)
{
    hbm__pool *p = b->seg->pool;
    if (block_is_split(b) && !b->seg->expandable) { /* its count as free, which settle makes again */
        hbm__stat_arr_dec(a->stats.inactive_split, p, 1);
        hbm__stat_arr_dec(a->stats.inactive_split_bytes, p, (int64_t)b->size);
    }
    return settle(a, p, b);
}

/* Slow path: say what a pointer that is not a live block start is. */
static hbm_status diagnose_pointer(hbm_allocator *a, uintptr_t ptr, const char *op)
{
    hbm__segment *seg = hbm__segment_find(a, ptr);
    if (!seg) {
        hbm__set_error(a,
                       "%s(%p): pointer was not allocated by this allocator (%s device %d), or its segment "
                       "was already returned to the device; nothing was changed",
                       op, (void *)ptr, hbm__dev_name(a), a->device);
        return HBM_ERR_FOREIGN_PTR;
    }
    hbm__block *b = seg->head;
    while (b && !(ptr >= b->addr && ptr < b->addr + b->size))
        b = b->next;
    if (b && b->allocated) {
        hbm__set_error(a,
                       "%s(%p): pointer lies %zu bytes inside a live block at %p of %zu bytes, not at its "
                       "start; nothing was changed",
                       op, (void *)ptr, (size_t)(ptr - b->addr), (void *)b->addr, b->size);
        return HBM_ERR_INTERIOR_PTR;
    }
    hbm__set_error(a,
                   "%s(%p): pointer lies in a free block of the segment at %p: already freed (double free); "
                   "nothing was changed",
                   op, (void *)ptr, (void *)seg->addr);
    return HBM_ERR_DOUBLE_FREE;
}

hbm_status hbm_free(hbm_allocator *a, void *ptr)
{
    if (!a)
        return HBM_ERR_INVALID;
    if (!ptr)
        return HBM_OK;
    hbm__lock(a);
    hbm_status rc = HBM_OK;
    hbm__block *b = hbm__ptrmap_del(&a->live, (uintptr_t)ptr);
    if (!b) {
        rc = diagnose_pointer(a, (uintptr_t)ptr, "hbm_free");
    } else {
        if (__builtin_expect(b->note != 0, 0)) { /* a policy noted it (core/policy_ops.h) */
            a->pol->ops->freed(a, b);
            b->note = 0;
        }
        hbm__pool *p = b->seg->pool;
        b->allocated = false;
        hbm__trace_block(a, HBM_TRACE_FREE_REQUESTED, b, b->requested);
        int k = hbm__pool_kind(p);
        hbm__stat_k_dec(a->stats.allocation, k, 1);
        hbm__stat_k_dec(a->stats.allocated_bytes, k, (int64_t)b->size);
        if (b->size >= a->conf.max_split_size)
            hbm__stat_dec(&a->stats.oversize_allocations, 1);
        if (b->uses) {
            hbm__pend_add(a, p, (int64_t)b->size, +1); /* active until its events complete */
            rc = hbm__free_with_uses(a, b);
        } else {
            free_block(a, b);
        }
    }
    to_sink(a, rc);
    hbm__unlock(a);
    return rc;
}

double hbm_get_memory_fraction(hbm_allocator *a)
{
    if (!a)
        return 1.0;
    hbm__lock(a);
    double f = a->fraction_set ? a->fraction : 1.0;
    hbm__unlock(a);
    return f;
}

hbm_status hbm_segment_of(hbm_allocator *a, const void *ptr, void **base, size_t *size)
{
    if (!a || !base || !size)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc = HBM_OK;
    hbm__block *b = ptr ? hbm__ptrmap_get(&a->live, (uintptr_t)ptr) : NULL;
    if (!b) {
        hbm__set_error(a, "getBaseAllocation(%p): not the start of a live block of %s device %d", ptr, hbm__dev_name(a),
                       a->device);
        rc = HBM_ERR_INVALID;
    } else if (b->seg->expandable) {
        /* PyTorch's own refusal (getBaseAllocation in CUDACachingAllocator.cpp), in its words. */
        hbm__set_error(a, "Tensors allocated with expandable_segments=True cannot be shared between processes. "
                          "Consider using expandable_segments=False in data loading workers via "
                          "torch.cuda.memory._set_allocator_settings('expandable_segments:False')");
        rc = HBM_ERR_INVALID;
    } else {
        *base = (void *)b->seg->addr;
        *size = b->seg->size;
    }
    hbm__unlock(a);
    return rc;
}

size_t hbm_block_size(hbm_allocator *a, const void *ptr)
{
    if (!a || !ptr)
        return 0;
    hbm__lock(a);
    hbm__block *b = hbm__ptrmap_get(&a->live, (uintptr_t)ptr);
    size_t n = b ? b->size : 0;
    hbm__unlock(a);
    return n;
}

/* ---- cache control ---- */

hbm_status hbm_empty_cache(hbm_allocator *a)
{
    if (!a)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc;
    if (a->ncaptures) {
        hbm__set_error(a,
                       "empty_cache on %s device %d during a graph capture: nothing was released (returning "
                       "memory synchronizes the device, which would invalidate the capture); call it before "
                       "the capture begins or after it ends",
                       hbm__dev_name(a), a->device);
        rc = HBM_ERR_CAPTURE;
    } else if ((rc = hbm__dev_quiesce_open(a)) == HBM_OK) {
        /* The wait opened the lock: a capture may have begun meanwhile (nothing else read before it matters). */
        rc = a->ncaptures ? HBM_ERR_CAPTURE : hbm__release_cached_blocks(a);
        if (rc == HBM_ERR_CAPTURE)
            hbm__set_error(a,
                           "empty_cache on %s device %d: a graph capture began while it waited for the device: "
                           "nothing was released",
                           hbm__dev_name(a), a->device);
    }
    hbm__unlock(a);
    return rc;
}

hbm_status hbm__set_fraction_locked(hbm_allocator *a, double fraction)
{
    if (!(fraction >= 0.0 && fraction <= 1.0)) {
        hbm__set_error(a, "invalid fraction:%g. Please set within [0, 1].", fraction);
        return HBM_ERR_INVALID;
    }
    a->fraction = fraction;
    /* PyTorch 2.8+: a fraction of 1 removes the limit (and with it GC). */
    a->fraction_set = fraction < 1.0;
    a->gc_on = a->fraction_set && a->conf.gc_threshold > 0.0;
    a->allowed_max = a->fraction_set ? (size_t)(fraction * (double)a->device_total) : SIZE_MAX;
    a->reserved_when_limited = a->total_reserved;
    return HBM_OK;
}

hbm_status hbm_set_memory_fraction(hbm_allocator *a, double fraction)
{
    if (!a)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc = hbm__set_fraction_locked(a, fraction);
    hbm__unlock(a);
    return rc;
}

/* Destroy: free live blocks, release every segment, whatever the pools. */
void hbm__engine_teardown(hbm_allocator *a)
{
    /* Highest address first: a device that keeps its allocations sorted frees from the end, cheaply. */
    for (hbm__segment *s; (s = hbm__segments_last(a));) {
        hbm__segments_remove(a, s);
        if (s->expandable)
            hbm__expand_teardown(a, s);
        else
            hbm__dev_free(a, s->addr, s->size);
        for (hbm__block *b = s->head; b; b = b->next)
            if (hbm__block_held(b))
                free(b->uses);
        free(s);
    }
    a->segments = NULL;
    if (a->pol)
        a->pol->ops->teardown(a);
    hbm__events_teardown(a);
    hbm__mempools_teardown(a);
    free(a->history);
    a->history = NULL;
    hbm__labels_destroy(&a->labels);
    a->context = 0;
    hbm__expand_teardown_pool(a, &a->small);
    hbm__expand_teardown_pool(a, &a->large);
    hbm__blocks_teardown(a);
}
