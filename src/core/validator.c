/*
 * validator.c: the validator. Walks every segment and proves the engine's
 * invariants; recomputes every statistic whose current value is derivable
 * from the blocks and compares. Reads allocator state only, never changes it.
 * Tests call it after every operation; it is O(blocks).
 */
#include <stdio.h>
#include <string.h>

#include "core/segments.h"
#include "core/stats.h"
#include "core/policy_ops.h"
#include "core/region.h"
#include "core/sleep.h"
#include "core/pool.h"
#include "util/util.h"

typedef struct checker {
    hbm__sbuf sb;
    int violations;
} checker;

#define FAIL(ck, ...)                               \
    do {                                            \
        if ((ck)->violations++ < 8) {               \
            hbm__sb_printf(&(ck)->sb, __VA_ARGS__); \
            hbm__sb_printf(&(ck)->sb, "\n");        \
        }                                           \
    } while (0)

/* Check the order of the nodes below t and what each holds; counts them. mapped
 * says which tree it is: the free tree (mapped blocks) or the unmapped one. */
static void check_nodes(checker *ck, hbm__rb *t, const hbm__pool *p, bool mapped, size_t *count,
                        const hbm__block **last)
{
    if (!t)
        return;
    check_nodes(ck, t->l, p, mapped, count, last);
    const hbm__block *b = HBM__BLOCK_OF(t);
    if (*last && !(mapped ? hbm__block_less(&(*last)->node, t) : hbm__unmapped_less(&(*last)->node, t)))
        FAIL(ck, "%s tree of the %s pool out of order at block %p", mapped ? "free" : "unmapped",
             p->is_small ? "small" : "large", (void *)b->addr);
    *last = b;
    (*count)++;
    if (b->allocated || !b->in_tree || b->mapped != mapped)
        FAIL(ck, "%s tree holds block %p that is allocated, not marked in a tree, or %smapped",
             mapped ? "free" : "unmapped", (void *)b->addr, mapped ? "un" : "");
    if (!b->seg || b->seg->pool != p)
        FAIL(ck, "a tree of one pool holds block %p of another pool", (void *)b->addr);
    check_nodes(ck, t->r, p, mapped, count, last);
}

static void check_tree(checker *ck, hbm__rb *t, const hbm__pool *p, bool mapped, size_t *count)
{
    const hbm__block *last = NULL;
    if (hbm__rb_verify(t, NULL) < 0)
        FAIL(ck, "%s tree of the %s pool breaks the red-black rules (colours, black height or parent links)",
             mapped ? "free" : "unmapped", p->is_small ? "small" : "large");
    check_nodes(ck, t, p, mapped, count, &last);
}

static void check_pool(checker *ck, hbm__pool *p, size_t *count, size_t *ucount)
{
    size_t c = 0, u = 0;
    check_tree(ck, p->free_tree, p, true, &c);
    check_tree(ck, p->unmapped, p, false, &u);
    if (c != p->nfree || u != p->nunmapped)
        FAIL(ck, "a pool's trees hold %zu free and %zu unmapped blocks, its counters say %zu and %zu", c, u, p->nfree,
             p->nunmapped);
    int k = p->is_small ? HBM_POOL_SMALL : HBM_POOL_LARGE;
    count[k] += c;
    ucount[k] += u;
}

typedef struct sums {
    int64_t allocation, allocated_bytes, active, active_bytes, requested_bytes;
    int64_t segment, reserved_bytes, inactive_split, inactive_split_bytes;
    size_t free_blocks, unmapped_blocks;
} sums;

/* sleep.c's checks report through this. */
static void fail_cb(void *ck, const char *what) { FAIL((checker *)ck, "%s", what); }

static void cmp_stat(checker *ck, const char *name, int k, int64_t got, int64_t want)
{
    static const char *pool[3] = {"all", "small_pool", "large_pool"};
    if (got != want)
        FAIL(ck, "stat %s.%s.current is %lld, the blocks say %lld", name, pool[k], (long long)got, (long long)want);
}

/* What the walk over the segments adds up, for the checks after it. */
typedef struct tally {
    sums s[3];
    size_t live, reserved, nseg, nexp, events, nloose;
    int64_t oversize_alloc, oversize_seg;
} tally;

/* One block of seg: its links, its mapping, its state, and what it counts for. */
static void check_block(checker *ck, hbm_allocator *a, hbm__segment *seg, hbm__block *b, bool split, int k,
                        uintptr_t *expect, size_t *mapped_bytes, tally *t)
{
    sums *s = t->s;
    if (b->seg != seg || b->stream != seg->stream)
        FAIL(ck, "block %p points at the wrong segment or stream", (void *)b->addr);
    if (b->addr != *expect)
        FAIL(ck, "block %p does not start where its predecessor ends (%p): gap or overlap", (void *)b->addr,
             (void *)*expect);
    if (b->size == 0 || b->size % HBM__MIN_BLOCK)
        FAIL(ck, "block %p has size %zu, not a positive multiple of 512", (void *)b->addr, b->size);
    if (b->next && b->next->prev != b)
        FAIL(ck, "block %p: next->prev does not point back", (void *)b->addr);
    *expect = b->addr + b->size;
    if (seg->expandable) {
        size_t first = (b->addr - seg->addr) / seg->page;
        size_t last = (b->addr + b->size - 1 - seg->addr) / seg->page;
        if (!b->mapped && ((b->addr - seg->addr) % seg->page || b->size % seg->page))
            FAIL(ck, "unmapped block %p is not page-aligned", (void *)b->addr);
        /* An asleep page is unmapped while its blocks stay as they were (mapped). */
        for (size_t i = first; i <= last && i < seg->npages; i++) {
            hbm__page pg = hbm__seg_page(seg, i);
            if ((pg.mapped || pg.asleep) != b->mapped) {
                FAIL(ck, "block %p is %smapped but page %zu of its segment is %s", (void *)b->addr,
                     b->mapped ? "" : "un", i,
                     pg.mapped   ? "mapped"
                     : pg.asleep ? "asleep"
                                 : "unmapped");
                break;
            }
        }
        if (b->mapped)
            *mapped_bytes += b->size;
    } else if (!b->mapped) {
        FAIL(ck, "block %p of a plain segment is marked unmapped", (void *)b->addr);
    }
    if (b->allocated && !b->mapped)
        FAIL(ck, "live block %p is unmapped", (void *)b->addr);
    if (b->event_count < 0 || (b->event_count > 0 && b->allocated))
        FAIL(ck, "block %p has %d pending events while %s", (void *)b->addr, b->event_count,
             b->allocated ? "allocated" : "free");
    t->events += (size_t)(b->event_count > 0 ? b->event_count : 0);
    if (!b->allocated && b->event_count > 0) {
        /* Freed, waiting on other streams: still active, not yet reusable. */
        s[k].active++;
        s[k].active_bytes += (int64_t)b->size;
        s[k].requested_bytes += (int64_t)b->requested;
        if (b->in_tree || hbm__ptrmap_get(&a->live, b->addr))
            FAIL(ck, "pending block %p is in a free tree or still in the pointer map", (void *)b->addr);
        return;
    }
    if (b->allocated) {
        s[k].allocation++;
        s[k].allocated_bytes += (int64_t)b->size;
        s[k].active++;
        s[k].active_bytes += (int64_t)b->size;
        s[k].requested_bytes += (int64_t)b->requested;
        t->live++;
        if (b->size >= a->conf.max_split_size)
            t->oversize_alloc++;
        if (hbm__ptrmap_get(&a->live, b->addr) != b)
            FAIL(ck, "live block %p is missing from the pointer map", (void *)b->addr);
        if (b->in_tree)
            FAIL(ck, "live block %p is in the free tree", (void *)b->addr);
        return;
    }
    if (b->loose) { /* region.c: outside the tree, on its pool's list */
        t->nloose++;
        if (b->in_tree || !seg->pool->lazy)
            FAIL(ck, "loose block %p is %s", (void *)b->addr,
                 b->in_tree ? "in the free tree too" : "in a pool that is not lazy");
    } else {
        if (b->mapped)
            s[k].free_blocks++;
        else
            s[k].unmapped_blocks++;
        if (!b->in_tree)
            FAIL(ck, "free block %p is not in the free or unmapped tree", (void *)b->addr);
    }
    if (split) {
        s[k].inactive_split++;
        s[k].inactive_split_bytes += (int64_t)b->size;
    }
    if (b->next && !b->next->allocated && b->next->event_count == 0 && b->next->mapped == b->mapped && !b->loose &&
        !b->next->loose)
        FAIL(ck, "free blocks %p and %p are adjacent but not coalesced", (void *)b->addr, (void *)b->next->addr);
}

/* One segment: its pool, its place among the others, its pages, its blocks tiling it. */
static void check_segment(checker *ck, hbm_allocator *a, hbm__segment *seg, uintptr_t *prev_end, tally *t)
{
    sums *s = t->s;
    t->nseg++;
    int k = seg->pool->is_small ? HBM_POOL_SMALL : HBM_POOL_LARGE;
    bool known = seg->pool == &a->small || seg->pool == &a->large || seg->pool == &a->region;
    for (hbm__mempool *m = a->mempools; m && !known; m = m->next)
        known = seg->pool == &m->small || seg->pool == &m->large;
    if (!known)
        FAIL(ck, "segment %p belongs to no pool", (void *)seg->addr);
    if (seg->pool == &a->region && (seg != a->region_seg || seg->stream != a->region_stream))
        FAIL(ck,
             "segment %p is in the region's pool but is not the region, or not on its stream (the region's "
             "order, hbm__region_less, leaves the stream out)",
             (void *)seg->addr);
    if (seg->addr < *prev_end)
        FAIL(ck, "segment %p overlaps the previous one", (void *)seg->addr);
    *prev_end = seg->addr + seg->size;
    const hbm__mempool *owner = seg->pool->owner;
    if (seg->expandable) {
        t->nexp++;
        if (!a->expandable && !(owner && owner->sl)) /* a tagged pool is made of pages whatever the setting */
            FAIL(ck, "expandable segment %p exists while expandable segments are off", (void *)seg->addr);
    } else {
        s[k].segment++;
        s[k].reserved_bytes += (int64_t)seg->size;
        t->reserved += seg->size;
        if (seg->size >= a->conf.max_split_size)
            t->oversize_seg++;
    }
    size_t mapped_bytes = 0, pages_mapped = 0, pages_asleep = 0;
    if (seg->pages_made > seg->npages)
        FAIL(ck, "segment %p has a table of %zu pages for %zu", (void *)seg->addr, seg->pages_made, seg->npages);
    for (size_t i = 0; seg->expandable && i < seg->pages_made; i++) {
        pages_mapped += seg->pages[i].mapped;
        pages_asleep += seg->pages[i].asleep;
        if (seg->pages[i].mapped && seg->pages[i].asleep)
            FAIL(ck, "page %zu of segment %p is both mapped and asleep", i, (void *)seg->addr);
    }
    if (pages_asleep != seg->asleep_pages || (pages_asleep && (!owner || !owner->sleep_state)))
        FAIL(ck, "segment %p has %zu pages asleep, its count says %zu, in a pool that is %s", (void *)seg->addr,
             pages_asleep, seg->asleep_pages, owner && owner->sleep_state ? "asleep" : "awake");
    if (!seg->head || seg->head->prev)
        FAIL(ck, "segment %p has no head block, or its head has a predecessor", (void *)seg->addr);
    uintptr_t expect = seg->addr;
    bool split = !seg->expandable && seg->head && seg->head->next;
    for (hbm__block *b = seg->head; b; b = b->next)
        check_block(ck, a, seg, b, split, k, &expect, &mapped_bytes, t);
    if (seg->expandable) {
        if (mapped_bytes != (pages_mapped + pages_asleep) * seg->page || pages_mapped != seg->mapped_pages)
            FAIL(ck,
                 "expandable segment %p: blocks map %zu bytes, %zu pages are mapped and %zu asleep, the count "
                 "says %zu mapped",
                 (void *)seg->addr, mapped_bytes, pages_mapped, pages_asleep, seg->mapped_pages);
        s[k].reserved_bytes += (int64_t)(pages_mapped * seg->page); /* asleep pages are given back */
        t->reserved += pages_mapped * seg->page;
    }
    if (expect != seg->addr + seg->size)
        FAIL(ck, "blocks of segment %p cover %zu bytes, the segment has %zu", (void *)seg->addr,
             (size_t)(expect - seg->addr), seg->size);
}

/* The region a plan is served from: its loose list, and its lazy state against the plan in force. */
static void check_region(checker *ck, hbm_allocator *a, size_t nloose)
{
    size_t listed = 0;
    for (const hbm__block *b = a->region.loose; b && listed <= nloose; b = (const hbm__block *)b->node.r, listed++)
        if (!b->loose || (b->node.l && ((const hbm__block *)b->node.l)->node.r != &b->node))
            FAIL(ck, "the loose list holds block %p, %s", (void *)b->addr,
                 !b->loose ? "which is not loose" : "whose previous entry does not point back");
    bool pages = a->region_seg && a->region_seg->expandable;
    if (a->region.lazy && (a->region.lazy == HBM__LAZY_PAGES) != pages)
        FAIL(ck, "the region's pool is in lazy state %d, its region is%s made of pages", a->region.lazy,
             pages ? "" : " not");
    if (a->pol) /* the policy's part: when the region is lazy */
        a->pol->ops->validate(a, fail_cb, ck);
    else if (a->region.lazy) /* without a policy, never */
        FAIL(ck, "the region's pool is lazy while no plan is in force");
    if (listed != nloose || a->region.nloose != nloose)
        FAIL(ck, "%zu loose blocks in the segments, %zu on the list, the count says %zu", nloose, listed,
             a->region.nloose);
}

/* The allocator's counts against the walk: segments, live blocks, reserved bytes, pending events. */
static void check_counts(checker *ck, hbm_allocator *a, const tally *t)
{
    if (t->nseg != a->nsegments)
        FAIL(ck, "segment count %zu, the segment tree holds %zu", a->nsegments, t->nseg);
    if (hbm__rb_verify(a->segments, NULL) < 0)
        FAIL(ck, "the segment tree breaks the red-black rules (colours, black height or parent links)");
    if (t->nexp != a->nexpandable)
        FAIL(ck, "%zu expandable segments, the count says %zu", t->nexp, a->nexpandable);
    if (t->live != a->live.n)
        FAIL(ck, "%zu live blocks, the pointer map holds %zu", t->live, a->live.n);
    if (t->reserved != a->total_reserved)
        FAIL(ck, "total_reserved %zu, the segments add up to %zu", a->total_reserved, t->reserved);
    size_t queued = 0;
    for (size_t i = 0; i < a->nqueues; i++)
        queued += a->queues[i].n;
    /* A block freed during a capture holds one placeholder event until the capture ends. */
    for (size_t i = 0; i < a->ndeferred; i++)
        if (a->deferred[i]->event_count != 1 || a->deferred[i]->allocated || !a->deferred[i]->uses)
            FAIL(ck, "block %p deferred until the capture ends has %d events, %u stream uses and is %s",
                 (void *)a->deferred[i]->addr, a->deferred[i]->event_count,
                 a->deferred[i]->uses ? a->deferred[i]->uses->n : 0, a->deferred[i]->allocated ? "allocated" : "free");
    for (size_t i = 0; i < a->nunrec; i++)
        if (a->unrec[i].block->allocated || a->unrec[i].block->event_count < 1)
            FAIL(ck, "block %p held for an unrecorded stream use is %s with %d events", (void *)a->unrec[i].block->addr,
                 a->unrec[i].block->allocated ? "allocated" : "free", a->unrec[i].block->event_count);
    if (t->events != a->pending_events + a->nstuck || queued + a->ndeferred + a->nunrec != a->pending_events)
        FAIL(ck,
             "blocks wait on %zu events, the queues hold %zu, %zu frees are deferred and %zu uses unrecorded, the "
             "count says %zu",
             t->events, queued, a->ndeferred, a->nunrec, a->pending_events);
}

/* Every pool's trees, default and private; counts add up per pool kind. */
static void check_pools(checker *ck, hbm_allocator *a, const tally *t)
{
    size_t count[3] = {0}, ucount[3] = {0};
    check_pool(ck, &a->small, count, ucount);
    check_pool(ck, &a->large, count, ucount);
    check_pool(ck, &a->region, count, ucount);
    for (hbm__mempool *m = a->mempools; m; m = m->next) {
        check_pool(ck, &m->small, count, ucount);
        check_pool(ck, &m->large, count, ucount);
    }
    for (int k = 1; k < 3; k++)
        if (count[k] != t->s[k].free_blocks || ucount[k] != t->s[k].unmapped_blocks)
            FAIL(ck, "%s pools: trees hold %zu free and %zu unmapped blocks, the segments have %zu and %zu",
                 k == HBM_POOL_SMALL ? "small" : "large", count[k], ucount[k], t->s[k].free_blocks,
                 t->s[k].unmapped_blocks);
}

/* Aggregate = small + large, then every derivable current value of the statistics against the walk's sums. */
static void check_stats(checker *ck, hbm_allocator *a, tally *t)
{
    sums *s = t->s;
    hbm_stats view; /* as read: active made from allocation and the pending blocks */
    hbm__stats_view(a, &view);
    for (int f = 0; f < (int)(offsetof(sums, free_blocks) / sizeof(int64_t)); f++)
        ((int64_t *)&s[0])[f] = ((int64_t *)&s[1])[f] + ((int64_t *)&s[2])[f];
    const hbm_stats *st = &view;
    for (int k = 0; k < 3; k++) {
        cmp_stat(ck, "allocation", k, st->allocation[k].current, s[k].allocation);
        cmp_stat(ck, "allocated_bytes", k, st->allocated_bytes[k].current, s[k].allocated_bytes);
        cmp_stat(ck, "active", k, st->active[k].current, s[k].active);
        cmp_stat(ck, "active_bytes", k, st->active_bytes[k].current, s[k].active_bytes);
        cmp_stat(ck, "requested_bytes", k, st->requested_bytes[k].current, s[k].requested_bytes);
        cmp_stat(ck, "segment", k, st->segment[k].current, s[k].segment);
        cmp_stat(ck, "reserved_bytes", k, st->reserved_bytes[k].current, s[k].reserved_bytes);
        cmp_stat(ck, "inactive_split", k, st->inactive_split[k].current, s[k].inactive_split);
        cmp_stat(ck, "inactive_split_bytes", k, st->inactive_split_bytes[k].current, s[k].inactive_split_bytes);
        if (st->allocated_bytes[k].peak < st->allocated_bytes[k].current ||
            st->reserved_bytes[k].peak < st->reserved_bytes[k].current)
            FAIL(ck, "a peak is below its current value (pool %d)", k);
    }
    if (st->oversize_allocations.current != t->oversize_alloc)
        FAIL(ck, "oversize_allocations.current is %lld, the blocks say %lld",
             (long long)st->oversize_allocations.current, (long long)t->oversize_alloc);
    if (st->oversize_segments.current != t->oversize_seg)
        FAIL(ck, "oversize_segments.current is %lld, the segments say %lld", (long long)st->oversize_segments.current,
             (long long)t->oversize_seg);
    /* A fraction lowered below what is reserved is allowed (PyTorch: the limit applies to new segments); reserved
     * memory above the limit can only be what was there when it was set. */
    if (a->fraction_set && a->total_reserved > a->allowed_max && a->total_reserved > a->reserved_when_limited)
        FAIL(ck, "reserved %zu exceeds the memory-fraction limit %zu and what was reserved when it was set (%zu)",
             a->total_reserved, a->allowed_max, a->reserved_when_limited);
}

int hbm_check(hbm_allocator *a, char *report, size_t len)
{
    checker ck;
    hbm__sb_init(&ck.sb, report, len);
    ck.violations = 0;
    if (!a) {
        FAIL(&ck, "NULL allocator");
        return ck.violations;
    }
    hbm__lock(a);
    tally t;
    memset(&t, 0, sizeof t);
    uintptr_t prev_end = 0;
    for (hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg))
        check_segment(&ck, a, seg, &prev_end, &t);
    check_region(&ck, a, t.nloose);
    check_counts(&ck, a, &t);
    hbm__sleep_check(a, fail_cb, &ck);
    check_pools(&ck, a, &t);
    check_stats(&ck, a, &t);
    hbm__unlock(a);
    if (ck.violations > 8)
        hbm__sb_printf(&ck.sb, "... %d violations in all\n", ck.violations);
    return ck.violations;
}
