/*
 * resident.c: what holds a device's memory while the job thinks it sleeps (hbm_resident_get, docs/SLEEP.md, "What
 * still holds memory"), in figures and in one sentence.
 *
 * The complaint most filed against vLLM's sleep mode and torch_memory_saver is "sleep did not free the memory":
 * nvidia-smi / npu-smi still show the device nearly full after a sleep. The answer is almost always one of four
 * holders, and this file tells them apart: pools that were not put to sleep (awake tags), pools that cannot sleep
 * (graph pools and other untagged private pools), the caching allocator's own cache (empty_cache gives it back), and
 * memory hbmalloc does not hold at all (device used - hbmalloc reserved: other processes, the runtime's context,
 * NCCL / HCCL buffers, torch's own allocator beside hbmalloc).
 *
 * Reads only: one walk over the segments under the allocator's lock and one memory query through the device door
 * (hbm__dev_info). It never changes a pool, a block or a statistic.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/device.h"
#include "core/outside.h"
#include "core/resident.h"
#include "core/segments.h"
#include "core/sleep.h"
#include "core/types.h"
#include "util/util.h"

#define TAGS 64 /* tags summed apart (as the published record's); past them, the text ends with "and more" */

typedef struct tag_sum {
    const char *tag;
    uint64_t bytes;
} tag_sum;

typedef struct tag_table {
    tag_sum t[TAGS];
    size_t n;
    bool full; /* a tag did not fit the table (its bytes are in the figures all the same) */
} tag_table;

static void tag_add(tag_table *tt, const char *tag, uint64_t bytes)
{
    for (size_t i = 0; i < tt->n; i++)
        if (!strcmp(tt->t[i].tag, tag)) {
            tt->t[i].bytes += bytes;
            return;
        }
    if (tt->n < TAGS)
        tt->t[tt->n++] = (tag_sum){tag, bytes};
    else
        tt->full = true;
}

/* "kv_cache 2.00 GiB, weights 1.00 GiB", the largest first; what does not fit is counted at the end. */
static void tag_text(tag_table *tt, char *out, size_t len)
{
    for (size_t i = 1; i < tt->n; i++) /* insertion sort: at most TAGS entries */
        for (size_t j = i; j > 0 && tt->t[j].bytes > tt->t[j - 1].bytes; j--) {
            tag_sum x = tt->t[j];
            tt->t[j] = tt->t[j - 1];
            tt->t[j - 1] = x;
        }
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, len);
    out[0] = 0;
    size_t shown = 0;
    for (size_t i = 0; i < tt->n; i++) {
        if (!tt->t[i].bytes)
            continue;
        char size[32], item[96];
        hbm__format_size(tt->t[i].bytes, size, sizeof size);
        int w = snprintf(item, sizeof item, "%s%s %s", shown ? ", " : "", tt->t[i].tag, size);
        if (w < 0 || sb.len + (size_t)w + sizeof ", and 99 more" > len)
            break;
        hbm__sb_printf(&sb, "%s", item);
        shown++;
    }
    size_t left = 0;
    for (size_t i = 0; i < tt->n; i++)
        left += tt->t[i].bytes != 0;
    left -= shown;
    if (tt->full)
        hbm__sb_printf(&sb, "%sand more", shown ? ", " : "");
    else if (left)
        hbm__sb_printf(&sb, "%sand %zu more", shown ? ", " : "", left);
}

/* Mapped bytes of seg (a sleeping pool's pages given back are not). */
static uint64_t seg_reserved(const hbm__segment *seg)
{
    return seg->expandable ? (uint64_t)seg->mapped_pages * seg->page : seg->size;
}

/* What empty_cache would give back of one free block of a default pool now: the segment when the block is all of it
 * (hbm__release_pool's whole_segment), else the mapped pages wholly inside the block (hbm__expand_release_free). A
 * block still used by another stream is not in the free tree yet; the policy's region is never released. */
static uint64_t releasable(const hbm__block *b)
{
    const hbm__segment *seg = b->seg;
    if (b->allocated || !b->in_tree || !b->mapped || seg->pool->is_region)
        return 0;
    if (!seg->expandable)
        return !b->prev && !b->next ? seg->size : 0;
    size_t first = (b->addr - seg->addr + seg->page - 1) / seg->page, end = (b->addr + b->size - seg->addr) / seg->page;
    uint64_t n = 0;
    for (size_t i = first; i < end && i < seg->pages_made; i++)
        n += seg->pages[i].mapped;
    return n * seg->page;
}

static void walk(hbm_allocator *a, hbm_resident *r, tag_table *tt)
{
    for (hbm__mempool *m = a->mempools; m; m = m->next) {
        if (!m->sl)
            r->graph_pools++;
        else if (m->sleep_state != HBM_POOL_AWAKE) /* falling asleep or being woken count as asleep */
            r->asleep_pools++;
        else
            r->awake_pools++;
    }
    for (hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg)) {
        uint64_t res = seg_reserved(seg), live = 0, free_back = 0;
        const hbm__mempool *m = seg->pool->owner;
        for (const hbm__block *b = seg->head; b; b = b->next) {
            live += b->allocated ? b->size : 0;
            free_back += m ? 0 : releasable(b);
        }
        r->asleep_bytes += (uint64_t)seg->asleep_pages * seg->page;
        if (!m) {
            r->default_reserved += res;
            r->default_live += live;
            r->releasable += free_back;
        } else if (!m->sl) {
            r->graph_reserved += res;
            r->graph_live += live;
        } else if (m->sleep_state != HBM_POOL_AWAKE) {
            r->asleep_reserved += res;
        } else {
            r->awake_reserved += res;
            r->awake_live += live;
            if (res)
                tag_add(tt, m->tag, res);
        }
    }
    r->reserved = r->asleep_reserved + r->awake_reserved + r->graph_reserved + r->default_reserved;
    r->cache = r->default_reserved > r->default_live ? r->default_reserved - r->default_live : 0;
}

/* The figures, with a->lock held; od (may be NULL): the memory query's, as outside.c makes it. A failed query is an
 * unknown figure, not a failure of this call: the last error stays the caller's. */
static void resident_locked(hbm_allocator *a, hbm_resident *out, hbm_outside *od)
{
    memset(out, 0, sizeof *out);
    tag_table tt = {.n = 0};
    out->device = a->device;
    hbm_outside o;
    hbm__outside_device(a, &o);
    walk(a, out, &tt);
    tag_text(&tt, out->awake_tags, sizeof out->awake_tags); /* the tags point into the pools: under the lock */
    out->device_total = o.device_total;
    out->device_used = o.device_used;
    out->outside = o.outside; /* of the statistics' reserved, which the walk's equals */
    if (od)
        *od = o;
}

hbm_status hbm_resident_get(hbm_allocator *a, hbm_resident *out)
{
    if (!a || !out)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    resident_locked(a, out, NULL);
    hbm__unlock(a);
    return HBM_OK;
}

void hbm__resident_note(hbm_allocator *a)
{
    if (!a->pub)
        return;
    hbm_resident r;
    hbm_outside o; /* the same query measured memory outside hbmalloc: noted too */
    resident_locked(a, &r, &o);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    a->res_used = r.device_used;
    hbm__outside_processes(a, &o);
    hbm__outside_note(a, &o);
    a->res_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    hbm_resident_describe(&r, a->res_text, sizeof a->res_text);
}

/* ---- the sentence ---- */

typedef struct holder {
    uint64_t bytes;
    int kind;
} holder;

enum { H_OUTSIDE, H_AWAKE, H_GRAPH, H_LIVE, H_CACHE, H_ASLEEP_MAPPED, H_KINDS };

static const char *plural(uint32_t n) { return n == 1 ? "" : "s"; }

static void say_holder(hbm__sbuf *sb, const hbm_resident *r, const holder *h)
{
    char size[32], back[32];
    hbm__format_size(h->bytes, size, sizeof size);
    switch (h->kind) {
    case H_OUTSIDE:
        hbm__sb_printf(sb,
                       "%s outside hbmalloc (other processes, the runtime's context, communicators' buffers, "
                       "other allocators)",
                       size);
        break;
    case H_AWAKE:
        hbm__sb_printf(sb, "%s in %u awake pool%s", size, r->awake_pools, plural(r->awake_pools));
        if (r->awake_tags[0])
            hbm__sb_printf(sb, " (%s)", r->awake_tags);
        break;
    case H_GRAPH:
        hbm__sb_printf(sb, "%s in %u untagged private pool%s (graph pools: they do not sleep)", size, r->graph_pools,
                       plural(r->graph_pools));
        break;
    case H_LIVE: hbm__sb_printf(sb, "%s in tensors of the default pools", size); break;
    case H_CACHE:
        hbm__format_size(r->releasable, back, sizeof back);
        if (r->releasable >= r->cache)
            hbm__sb_printf(sb, "%s cached by hbmalloc (empty_cache() gives it back)", size);
        else if (!r->releasable)
            hbm__sb_printf(
                sb, "%s cached by hbmalloc (free space in segments in use: empty_cache() cannot give it back)", size);
        else
            hbm__sb_printf(sb, "%s cached by hbmalloc (empty_cache() gives back %s of it)", size, back);
        break;
    default:
        hbm__sb_printf(sb,
                       "%s still mapped in %u pool%s being put to sleep, woken, or whose sleep stopped part-way "
                       "(sleep again)",
                       size, r->asleep_pools, plural(r->asleep_pools));
    }
}

size_t hbm_resident_describe(const hbm_resident *r, char *buf, size_t len)
{
    if (!buf || !len)
        return 0;
    buf[0] = 0;
    if (!r)
        return 0;
    char used[32], total[32], held[32];
    hbm__format_size(r->device_total > 0 ? (uint64_t)r->device_total : 0, total, sizeof total);
    hbm__format_size(r->reserved, held, sizeof held);
    hbm__sbuf sb;
    hbm__sb_init(&sb, buf, len);
    if (r->device_used >= 0) {
        hbm__format_size((uint64_t)r->device_used, used, sizeof used);
        hbm__sb_printf(&sb, "device %d: %s used of %s, hbmalloc holds %s; ", r->device, used, total, held);
    } else {
        hbm__sb_printf(&sb, "device %d: used memory unknown (the runtime's query failed), hbmalloc holds %s; ",
                       r->device, held);
    }
    holder h[H_KINDS] = {
        {r->outside > 0 ? (uint64_t)r->outside : 0, H_OUTSIDE},
        {r->awake_reserved, H_AWAKE},
        {r->graph_reserved, H_GRAPH},
        {r->default_live, H_LIVE},
        {r->cache, H_CACHE},
        {r->asleep_reserved, H_ASLEEP_MAPPED},
    };
    for (int i = 1; i < H_KINDS; i++) /* the largest holder first; ties keep this order */
        for (int j = i; j > 0 && h[j].bytes > h[j - 1].bytes; j--) {
            holder x = h[j];
            h[j] = h[j - 1];
            h[j - 1] = x;
        }
    int said = 0;
    for (int i = 0; i < H_KINDS && h[i].bytes; i++) {
        hbm__sb_printf(&sb, "%s", said++ ? ", " : "largest first: ");
        say_holder(&sb, r, &h[i]);
    }
    if (!said)
        hbm__sb_printf(&sb, "nothing holds memory");
    char asleep[32];
    hbm__format_size(r->asleep_bytes, asleep, sizeof asleep);
    if (r->asleep_pools)
        hbm__sb_printf(&sb, "; %u pool%s asleep gave back %s", r->asleep_pools, plural(r->asleep_pools), asleep);
    else
        hbm__sb_printf(&sb, "; no pool is asleep");
    return sb.len;
}
