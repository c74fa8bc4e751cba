/*
 * expandable.c: expandable segments over the backend's virtual-memory calls.
 *
 * Owns the segment reservation, mapping pages on demand, unmapping fully free
 * pages, and releasing a reservation left empty. Follows PyTorch's
 * ExpandableSegment: one reservation per (pool, stream) of 9/8 of the device
 * capacity, pages of 2 MiB (small pool) or large_segment_size (large pool),
 * growth by mapping pages at the lowest free address, all-or-nothing per map.
 * Unlike PyTorch, a failure part-way through a multi-step map is rolled back
 * (nothing mapped by the failed request stays mapped, no handle leaks), and a
 * handle whose release failed is kept and reused rather than lost.
 *
 * Blocks of an expandable segment tile the whole reservation; unmapped ranges
 * are blocks with mapped == false in pool->unmapped. Statistics: mapped bytes
 * count in reserved_bytes; expandable segments are not counted in `segment`
 * nor in inactive_split (as in PyTorch). Runs with a->lock held.
 *
 * A sleeping pool's pages (sleep.c decides when): hbm__expand_sleep gives the
 * mapped pages back and marks them asleep, blocks untouched (a live block keeps
 * its address); hbm__expand_wake maps them again. An asleep page under a free
 * block is simply forgotten by unmap_range (nothing is mapped there).
 */
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/stats.h"
#include "core/segments.h"
#include "core/history.h"
#include "core/sleep.h"
#include "core/expandable.h"
#include "core/device.h"
#include "core/pool.h"
#include "util/util.h"

static size_t round_up(size_t v, size_t unit) { return (v + unit - 1) / unit * unit; }

static size_t granularity(const hbm_allocator *a)
{
    return hbm__dev_caps(a)->vmm_granularity ? hbm__dev_caps(a)->vmm_granularity : HBM__SMALL_BUFFER;
}

static size_t page_size_for(const hbm_allocator *a, const hbm__pool *p)
{
    size_t large = a->conf.expandable_page ? a->conf.expandable_page : a->conf.large_segment_size;
    size_t page = p->is_small ? HBM__SMALL_BUFFER : large;
    return round_up(page, granularity(a));
}

/* Free and not waiting on another stream (PyTorch also requires no pending events). */
static bool allocatable(const hbm__block *b) { return b && !b->allocated && b->event_count == 0; }

/* Do the free blocks from b on hold `size` bytes? */
static bool has_space(const hbm__block *b, size_t size)
{
    size_t bytes = 0;
    while (bytes < size && allocatable(b)) {
        bytes += b->size;
        b = b->next;
    }
    return bytes >= size;
}

/* A reservation of at least `total` bytes (whole pages) in pool p: one unmapped block, in p's unmapped tree. */
static hbm_status reserve_segment(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t total, size_t page,
                                  hbm__block **out)
{
    size_t npages = (total + page - 1) / page;
    size_t size = npages * page;
    hbm__segment *seg = calloc(1, sizeof *seg);
    hbm__block *b = hbm__block_new(a);
    if (!seg || !b) {
        free(seg);
        if (b)
            hbm__block_recycle(a, b);
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        return HBM_ERR_NOMEM;
    }
    uintptr_t va;
    hbm_status rc = hbm__dev_reserve(a, size, &va);
    if (rc != HBM_OK) {
        free(seg);
        hbm__block_recycle(a, b);
        return rc;
    }
    seg->addr = va;
    seg->size = size;
    seg->stream = stream;
    seg->pool = p;
    seg->head = b;
    seg->expandable = true;
    seg->page = page;
    seg->npages = npages; /* the page table is made as pages are mapped (make_pages) */
    b->seg = seg;
    b->stream = stream;
    b->addr = va;
    b->size = size;
    b->mapped = false;
    hbm__segments_insert(a, seg);
    hbm__unmapped_insert(p, b);
    a->nexpandable++;
    *out = b;
    return HBM_OK;
}

/* 9/8 of the device: room to unmap early pages and map new ones at the end. */
static hbm_status new_segment(hbm_allocator *a, hbm__pool *p, hbm_stream stream, hbm__block **out)
{
    return reserve_segment(a, p, stream, a->device_total + a->device_total / 8, page_size_for(a, p), out);
}

/* find_expandable_block: the lowest-address chain of free and unmapped blocks
 * on this stream that can hold size, or a new segment. */
static hbm_status find_expandable(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out)
{
    for (hbm__block *c = hbm__unmapped_lower_bound(p, stream, 0); c && c->stream == stream; c = hbm__tree_next(c)) {
        hbm__block *cand = allocatable(c->prev) ? c->prev : c;
        if (has_space(cand, size)) {
            *out = cand;
            return HBM_OK;
        }
    }
    return new_segment(a, p, stream, out);
}

/* Makes the page table of seg hold pages [0, end): grown by doubling, the new entries zero. */
static hbm_status make_pages(hbm_allocator *a, hbm__segment *seg, size_t end)
{
    if (end <= seg->pages_made)
        return HBM_OK;
    size_t made = seg->pages_made < 16 ? 16 : 2 * seg->pages_made;
    made = made < end ? end : made > seg->npages ? seg->npages : made;
    hbm__page *pages = realloc(seg->pages, made * sizeof *pages);
    if (!pages) {
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        return HBM_ERR_NOMEM;
    }
    memset(&pages[seg->pages_made], 0, (made - seg->pages_made) * sizeof *pages);
    seg->pages = pages;
    seg->pages_made = made;
    return HBM_OK;
}

/* Map the pages [first, first + n) of seg, all or nothing. Handles come from
 * the page itself (kept after a failed release), then the pool's spares
 * (hbm_remap_free_pages), then new ones. */
static hbm_status map_pages(hbm_allocator *a, hbm__segment *seg, size_t first, size_t n)
{
    hbm_status rc = make_pages(a, seg, first + n);
    if (rc != HBM_OK)
        return rc;
    hbm__pool *p = seg->pool;
    size_t created = 0, mapped = 0;
    for (; created < n; created++) {
        hbm__page *pg = &seg->pages[first + created];
        if (pg->handle)
            continue;
        if (p->nspare)
            pg->handle = p->spare_handles[--p->nspare];
        else if ((rc = hbm__dev_create(a, seg->page, &pg->handle)) != HBM_OK)
            break;
    }
    for (; rc == HBM_OK && mapped < n; mapped++) {
        hbm__page *pg = &seg->pages[first + mapped];
        rc = hbm__dev_map(a, seg->addr + (first + mapped) * seg->page, seg->page, pg->handle);
        if (rc != HBM_OK)
            break;
        pg->mapped = true;
    }
    if (rc == HBM_OK)
        rc = hbm__dev_access(a, seg->addr + first * seg->page, n * seg->page);
    if (rc == HBM_OK)
        return HBM_OK;
    /* Undo this call: unmap what it mapped, release the handles (all of them:
     * a handle kept from an earlier failed release is retried here too). */
    char saved[sizeof a->err];
    memcpy(saved, a->err, sizeof saved);
    for (size_t i = 0; i < n; i++) {
        hbm__page *pg = &seg->pages[first + i];
        if (pg->mapped && hbm__dev_unmap(a, seg->addr + (first + i) * seg->page, seg->page) == HBM_OK)
            pg->mapped = false;
        if (!pg->mapped && pg->handle && hbm__dev_release(a, pg->handle) == HBM_OK)
            pg->handle = 0;
    }
    memcpy(a->err, saved, sizeof saved);
    return rc;
}

/* Map the pages [lo, hi) (page-aligned, inside c, an unmapped block): the block they make is returned in *out,
 * mapped, free and outside every tree; the unmapped rest before and after it stays in the unmapped tree. */
static hbm_status map_range(hbm_allocator *a, hbm__block *c, uintptr_t lo, uintptr_t hi, hbm__block **out)
{
    hbm__segment *seg = c->seg;
    hbm__pool *p = seg->pool;
    size_t first = (lo - seg->addr) / seg->page, n = (hi - lo) / seg->page;
    hbm_status rc = hbm__ensure_spares(a, 2);
    if (rc == HBM_OK)
        rc = map_pages(a, seg, first, n);
    if (rc != HBM_OK)
        return rc;
    hbm__unmapped_remove(p, c);
    hbm__block *m = c;
    if (lo > c->addr) {
        m = hbm__split_back(a, c, lo - c->addr);
        hbm__unmapped_insert(p, c);
    }
    if (hi < m->addr + m->size) {
        hbm__block *rest = hbm__split_back(a, m, hi - m->addr);
        rest->mapped = false;
        hbm__unmapped_insert(p, rest);
    }
    m->mapped = true;
    seg->mapped_pages += n;
    a->total_reserved += hi - lo;
    hbm__stat_arr_inc(a->stats.reserved_bytes, p, (int64_t)(hi - lo));
    a->stats.num_device_alloc++;
    hbm__trace(a, HBM_TRACE_SEGMENT_MAP, lo, hi - lo, seg->stream);
    *out = m;
    return HBM_OK;
}

/* map_block: map the front of an unmapped block (rounded up to pages), merge
 * it with free neighbours and put it in the free tree; *out is the result. */
static hbm_status map_block(hbm_allocator *a, hbm__block *b, size_t size, hbm__block **out)
{
    hbm__pool *p = b->seg->pool;
    hbm_status rc = map_range(a, b, b->addr, b->addr + round_up(size, b->seg->page), &b);
    if (rc != HBM_OK)
        return rc;
    hbm__pool_try_merge(a, p, b, b->prev);
    hbm__pool_try_merge(a, p, b, b->next);
    hbm__pool_insert(p, b);
    *out = b;
    return HBM_OK;
}

/* Keep an unmapped page's handle for the request in progress; false if there is no room. */
static bool keep_spare(hbm__pool *p, uint64_t handle)
{
    if (hbm__grow((void **)&p->spare_handles, &p->cap_spare, p->nspare + 1, sizeof *p->spare_handles))
        return false;
    p->spare_handles[p->nspare++] = handle;
    return true;
}

/* [lo, hi) narrowed to b's range. */
static void clamp_to(const hbm__block *b, uintptr_t *lo, uintptr_t *hi)
{
    if (*lo < b->addr)
        *lo = b->addr;
    if (*hi > b->addr + b->size)
        *hi = b->addr + b->size;
}

/* Unmap the pages lying wholly inside [lo, hi) ∩ b, a free mapped block; the
 * slivers before and after stay free and mapped. With keep, the handles go to
 * the pool's spares instead of back to the device. Asleep pages (a sleeping
 * pool's) have nothing mapped: they are forgotten, without a device call. */

static hbm_status unmap_range(hbm_allocator *a, hbm__block *b, uintptr_t lo, uintptr_t hi, bool keep, bool fresh)
{
    hbm__segment *seg = b->seg;
    hbm__pool *p = seg->pool;
    clamp_to(b, &lo, &hi);
    lo = seg->addr + round_up(lo - seg->addr, seg->page);
    hi = seg->addr + (hi - seg->addr) / seg->page * seg->page;
    if (lo >= hi)
        return HBM_OK;
    size_t first = (lo - seg->addr) / seg->page, n = (hi - lo) / seg->page, done = 0, real = 0;
    bool any_mapped = !seg->asleep_pages;
    for (size_t i = 0; !any_mapped && i < n; i++)
        any_mapped = hbm__seg_page(seg, first + i).mapped;
    hbm_status rc = hbm__ensure_spares(a, 2);
    /* Unmapping does not wait for the device: wait for the segment's stream (or the device, on Ascend) first;
     * pages this request mapped a moment ago (fresh) were never handed out. */
    if (rc == HBM_OK && !fresh && any_mapped)
        rc = hbm__dev_sync_unmap(a, seg->stream);
    if (rc != HBM_OK)
        return rc;
    for (; done < n; done++) {
        hbm__page *pg = &seg->pages[first + done];
        if (pg->asleep) {
            pg->asleep = false;
            seg->asleep_pages--;
            continue;
        }
        if ((rc = hbm__dev_unmap(a, seg->addr + (first + done) * seg->page, seg->page)) != HBM_OK)
            break;
        pg->mapped = false;
        real++;
        if ((keep && keep_spare(p, pg->handle)) || hbm__dev_release(a, pg->handle) == HBM_OK)
            pg->handle = 0; /* else kept, unmapped, for the next map to reuse */
    }
    if (done == 0)
        return rc;
    hi = lo + done * seg->page;
    hbm__pool_remove(p, b);
    if (lo > b->addr) {
        hbm__block *before = hbm__block_new(a);
        before->seg = seg;
        before->stream = b->stream;
        before->addr = b->addr;
        before->size = lo - b->addr;
        before->mapped = true;
        before->prev = b->prev;
        before->next = b;
        if (before->prev)
            before->prev->next = before;
        else
            seg->head = before;
        b->prev = before;
        hbm__pool_insert(p, before);
    }
    if (hi < b->addr + b->size) {
        hbm__block *after = hbm__block_new(a);
        after->seg = seg;
        after->stream = b->stream;
        after->addr = hi;
        after->size = b->addr + b->size - hi;
        after->mapped = true;
        after->prev = b;
        after->next = b->next;
        if (after->next)
            after->next->prev = after;
        b->next = after;
        hbm__pool_insert(p, after);
    }
    b->addr = lo;
    b->size = hi - lo;
    b->mapped = false;
    hbm__pool_try_merge(a, p, b, b->prev);
    hbm__pool_try_merge(a, p, b, b->next);
    hbm__unmapped_insert(p, b);
    if (real) {
        seg->mapped_pages -= real;
        a->total_reserved -= real * seg->page;
        hbm__stat_arr_dec(a->stats.reserved_bytes, p, (int64_t)(real * seg->page));
        a->stats.num_device_free++;
        hbm__trace(a, HBM_TRACE_SEGMENT_UNMAP, lo, real * seg->page, seg->stream);
        hbm__published(a);
    }
    return rc;
}

/* Release a reservation whose one block is unmapped and spans it. */
static hbm_status release_segment(hbm_allocator *a, hbm__block *b)
{
    hbm__segment *seg = b->seg;
    hbm_status rc = HBM_OK;
    /* Handles kept after a failed release go back now; the reservation follows. */
    for (size_t i = 0; i < seg->pages_made && rc == HBM_OK; i++)
        if (seg->pages[i].handle && (rc = hbm__dev_release(a, seg->pages[i].handle)) == HBM_OK)
            seg->pages[i].handle = 0;
    if (rc == HBM_OK)
        rc = hbm__dev_unreserve(a, seg->addr, seg->size);
    if (rc != HBM_OK)
        return rc;
    hbm__unmapped_remove(seg->pool, b);
    hbm__segments_remove(a, seg);
    if (seg->pool->owner && seg->pool->owner->sl) /* a sleeping pool's backup of it has nowhere to go back to */
        hbm__sleep_forget(a, seg->pool->owner, seg->addr, seg->size);
    hbm__block_recycle(a, b);
    free(seg->pages);
    free(seg);
    a->nexpandable--;
    return HBM_OK;
}

/* The block of seg that holds addr. */
static hbm__block *block_at(hbm__segment *seg, uintptr_t addr)
{
    hbm__block *b = seg->head;
    while (b && addr >= b->addr + b->size)
        b = b->next;
    return b;
}

typedef struct range {
    uintptr_t addr;
    size_t size;
} range;

/* Pages the chain from c must map to hold size bytes. */
static size_t pages_to_map(const hbm__block *c, size_t size)
{
    size_t bytes = 0, pages = 0, page = c->seg->page;
    for (const hbm__block *b = c; b && bytes < size; b = b->next) {
        size_t take = b->size < size - bytes ? b->size : size - bytes;
        if (!b->mapped)
            pages += (take + page - 1) / page;
        bytes += take;
    }
    return pages;
}

/* Unmap fully free pages of pool p (largest free blocks first, outside [lo, hi))
 * until `*bytes` of pages are unmapped; keep: their handles become p's spares. */
static void unmap_free_pages(hbm_allocator *a, hbm__pool *p, size_t *bytes, uintptr_t lo, uintptr_t hi, bool keep)
{
    hbm__block *b = hbm__pool_node(hbm__rb_last(p->free_tree));
    while (b && *bytes > 0) {
        hbm__block *prev = hbm__tree_prev(b);
        hbm__segment *seg = b->seg;
        if (seg->expandable && (b->addr >= hi || b->addr + b->size <= lo)) {
            uintptr_t first = seg->addr + round_up(b->addr - seg->addr, seg->page);
            uintptr_t end = first + round_up(*bytes, seg->page);
            if (end > b->addr + b->size)
                end = b->addr + b->size;
            size_t before = a->total_reserved;
            if (first < end && unmap_range(a, b, first, end, keep, false) != HBM_OK)
                break;
            size_t freed = before - a->total_reserved;
            *bytes = freed >= *bytes ? 0 : *bytes - freed;
        }
        b = prev;
    }
}

/* hbm_remap_free_pages: before growing, move fully free pages to where the
 * request needs them: the pool's own free pages are unmapped and their handles
 * reused; if those are too few, free pages of the other pool are returned to
 * the device first. Reserved memory then grows only when no free page is left. */
static void collect_free_pages(hbm_allocator *a, hbm__pool *p, size_t need, uintptr_t lo, uintptr_t hi)
{
    size_t page = page_size_for(a, p), bytes = need * page;
    unmap_free_pages(a, p, &bytes, lo, hi, true);
    if (bytes > 0) {
        unmap_free_pages(a, p->sibling, &bytes, 0, 0, false);
    }
}

static void release_spares(hbm_allocator *a, hbm__pool *p)
{
    while (p->nspare && hbm__dev_release(a, p->spare_handles[p->nspare - 1]) == HBM_OK)
        p->nspare--;
}

hbm_status hbm__expand_alloc(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out)
{
    hbm__block *c;
    hbm_status rc = find_expandable(a, p, stream, size, &c);
    if (rc != HBM_OK)
        return rc;
    /* Unmapping is a device free: not during a capture; with a framework's queue only while the open wait malloc
     * made before deciding still holds (engine.c; docs/CONTRACTS.md, "Waiting with the lock open"). */
    if (a->conf.remap_free_pages && !a->ncaptures && (!hbm__framework_queue(a) || hbm__dev_quiet(a))) {
        collect_free_pages(a, p, pages_to_map(c, size), c->addr, c->addr + size);
        /* Unmapping elsewhere may merge into the chain found (its unmapped neighbours
         * absorb each other): look it up again rather than hold a stale block. */
        if ((rc = find_expandable(a, p, stream, size, &c)) != HBM_OK) {
            release_spares(a, p);
            return rc;
        }
    }
    range *done = NULL;
    size_t ndone = 0, cap = 0;
    hbm__segment *seg = c->seg;
    while (rc == HBM_OK && (!c->mapped || c->size < size)) {
        /* Invariant: c is unmapped, or c is free and mapped and followed by an unmapped block. */
        hbm__block *to_map = c->mapped ? c->next : c;
        size_t want = c->mapped ? size - c->size : size;
        if (want > to_map->size)
            want = to_map->size;
        if (ndone == cap) {
            cap = cap ? cap * 2 : 4;
            range *nd = realloc(done, cap * sizeof *nd);
            if (!nd) {
                hbm__set_error(a, "out of host memory for allocator bookkeeping");
                rc = HBM_ERR_NOMEM;
                break;
            }
            done = nd;
        }
        uintptr_t at = to_map->addr;
        rc = map_block(a, to_map, want, &c);
        if (rc == HBM_OK)
            done[ndone++] = (range){at, (want + seg->page - 1) / seg->page * seg->page};
    }
    if (rc != HBM_OK) {
        /* Roll back: unmap what this request mapped, so that a failed request changes nothing. */
        char saved[sizeof a->err];
        memcpy(saved, a->err, sizeof saved);
        for (size_t i = ndone; i-- > 0;)
            unmap_range(a, block_at(seg, done[i].addr), done[i].addr, done[i].addr + done[i].size, false, true);
        if (seg->mapped_pages == 0 && !seg->head->next)
            release_segment(a, seg->head);
        release_spares(a, p);
        memcpy(a->err, saved, sizeof saved);
        free(done);
        return rc;
    }
    free(done);
    release_spares(a, p);
    hbm__pool_remove(p, c);
    *out = c;
    return HBM_OK;
}

hbm_status hbm__expand_region(hbm_allocator *a, hbm__pool *p, hbm_stream stream, size_t size, hbm__block **out)
{
    /* The device's granularity (2 MiB), not the large pool's page (20 MiB): a region is mapped once and stays
     * mapped, so its pages cost map calls once per plan, and the finer the page the closer to the plan's height. */
    return reserve_segment(a, p, stream, size, granularity(a), out);
}

hbm_status hbm__expand_touch(hbm_allocator *a, hbm__block *c, uintptr_t lo, uintptr_t hi, hbm__block **out)
{
    hbm__segment *seg = c->seg;
    clamp_to(c, &lo, &hi);
    lo = seg->addr + (lo - seg->addr) / seg->page * seg->page; /* c is page-aligned: the pages stay inside it */
    hi = seg->addr + round_up(hi - seg->addr, seg->page);
    if (a->fraction_set && a->total_reserved + (hi - lo) > a->allowed_max) {
        hbm__set_error(a, "the memory fraction leaves no room to map the region's pages");
        return HBM_ERR_OOM;
    }
    hbm_status rc = map_range(a, c, lo, hi, out);
    if (rc == HBM_OK)
        hbm__published(a);
    return rc;
}

hbm_status hbm__expand_release_free(hbm_allocator *a, hbm__block *b)
{
    hbm__segment *seg = b->seg;
    hbm_status rc = unmap_range(a, b, b->addr, b->addr + b->size, false, false);
    if (rc == HBM_OK && seg->mapped_pages == 0 && !seg->head->next && !seg->head->mapped)
        rc = release_segment(a, seg->head);
    return rc;
}

/* ---- a sleeping pool's pages ---- */

/* Pages [first, first + n) of seg changed state: the statistics and the trace follow (one entry per run). */
static void pages_moved(hbm_allocator *a, hbm__segment *seg, size_t first, size_t n, bool mapped)
{
    size_t bytes = n * seg->page;
    uintptr_t at = seg->addr + first * seg->page;
    if (mapped) {
        seg->mapped_pages += n;
        seg->asleep_pages -= n;
        a->total_reserved += bytes;
        hbm__stat_arr_inc(a->stats.reserved_bytes, seg->pool, (int64_t)bytes);
        a->stats.num_device_alloc++;
    } else {
        seg->mapped_pages -= n;
        seg->asleep_pages += n;
        a->total_reserved -= bytes;
        hbm__stat_arr_dec(a->stats.reserved_bytes, seg->pool, (int64_t)bytes);
        a->stats.num_device_free++;
    }
    hbm__sleep_trace(a, seg->pool->owner, mapped ? HBM_TRACE_WAKE : HBM_TRACE_SLEEP, at, bytes, seg->stream);
}

hbm_status hbm__expand_sleep(hbm_allocator *a, hbm__segment *seg, size_t *given)
{
    *given = 0;
    if (!seg->mapped_pages)
        return HBM_OK;
    /* As before any unmap: the segment's work, or the device's (the caller waited for the device already). */
    hbm_status rc = hbm__dev_sync_unmap(a, seg->stream);
    for (size_t i = 0; rc == HBM_OK && i < seg->pages_made;) {
        size_t run = 0;
        for (; i + run < seg->pages_made && seg->pages[i + run].mapped; run++) {
            hbm__page *pg = &seg->pages[i + run];
            if ((rc = hbm__dev_unmap(a, seg->addr + (i + run) * seg->page, seg->page)) != HBM_OK)
                break;
            pg->mapped = false;
            pg->asleep = true;
            if (hbm__dev_release(a, pg->handle) == HBM_OK)
                pg->handle = 0; /* else kept: the wake maps it again (the error stays in a->err) */
        }
        if (run) {
            pages_moved(a, seg, i, run, false);
            *given += run * seg->page;
        }
        i += run + (rc == HBM_OK);
    }
    return rc;
}

hbm_status hbm__expand_wake(hbm_allocator *a, hbm__segment *seg, size_t *mapped)
{
    *mapped = 0;
    hbm_status rc = HBM_OK;
    for (size_t i = 0; rc == HBM_OK && seg->asleep_pages && i < seg->pages_made;) {
        size_t run = 0;
        while (i + run < seg->pages_made && seg->pages[i + run].asleep)
            run++;
        if (!run) {
            i++;
            continue;
        }
        if ((rc = map_pages(a, seg, i, run)) != HBM_OK)
            break;
        for (size_t k = i; k < i + run; k++)
            seg->pages[k].asleep = false;
        pages_moved(a, seg, i, run, true);
        *mapped += run * seg->page;
        i += run;
    }
    return rc;
}

void hbm__expand_unwake(hbm_allocator *a, hbm__segment *seg, const bool *was_asleep, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t run = 0;
        while (i + run < n && was_asleep[i + run] && seg->pages[i + run].mapped) {
            hbm__page *pg = &seg->pages[i + run];
            if (hbm__dev_unmap(a, seg->addr + (i + run) * seg->page, seg->page) != HBM_OK)
                break; /* stays mapped: held, counted in reserved, given back by the next sleep */
            pg->mapped = false;
            pg->asleep = true;
            if (hbm__dev_release(a, pg->handle) == HBM_OK)
                pg->handle = 0;
            run++;
        }
        if (run)
            pages_moved(a, seg, i, run, false);
        i += run ? run : 1;
    }
}

hbm_status hbm__expand_release_pool(hbm_allocator *a, hbm__pool *p)
{
    size_t n = 0;
    for (hbm__block *b = hbm__pool_first(p); b; b = hbm__tree_next(b))
        n += b->seg->expandable;
    if (n == 0)
        return HBM_OK;
    hbm__block **todo = malloc(n * sizeof *todo);
    if (!todo) {
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        return HBM_ERR_NOMEM;
    }
    n = 0;
    for (hbm__block *b = hbm__pool_first(p); b; b = hbm__tree_next(b))
        if (b->seg->expandable)
            todo[n++] = b;
    /* Unmapping merges only unmapped blocks, never the mapped ones gathered here. */
    hbm_status first_error = HBM_OK;
    for (size_t i = 0; i < n; i++) {
        hbm_status rc = hbm__expand_release_free(a, todo[i]);
        if (rc != HBM_OK && first_error == HBM_OK)
            first_error = rc;
    }
    free(todo);
    return first_error;
}

void hbm__expand_teardown(hbm_allocator *a, hbm__segment *seg)
{
    for (size_t i = 0; i < seg->pages_made; i++) {
        hbm__page *pg = &seg->pages[i];
        if (pg->mapped)
            hbm__dev_unmap(a, seg->addr + i * seg->page, seg->page);
        if (pg->handle)
            hbm__dev_release(a, pg->handle);
    }
    hbm__dev_unreserve(a, seg->addr, seg->size);
    free(seg->pages);
}

void hbm__expand_teardown_pool(hbm_allocator *a, hbm__pool *p)
{
    for (size_t i = 0; i < p->nspare; i++)
        hbm__dev_release(a, p->spare_handles[i]);
    free(p->spare_handles);
    p->spare_handles = NULL;
    p->nspare = p->cap_spare = 0;
}
