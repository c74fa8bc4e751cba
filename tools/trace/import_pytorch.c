/*
 * import_pytorch.c: PyTorch memory snapshots (torch.cuda.memory._dump_snapshot;
 * the pickle, or the same as JSON) into the event list. Owns the snapshot's
 * meaning: which events to replay, what the allocator ran with, the state the
 * recording began in, and what the recording allocator itself reserved.
 *
 * Replayed: `alloc` (size = the caller's request) and `free_completed`, and a
 * `free_requested` that its `free_completed` does not follow at once (a block
 * with record_stream uses) as a pending free. hbmalloc's `sleep` and `wake`
 * entries (a sleeping pool's runs of pages) become one event per sleep or
 * wake, with its tag and backup, of no pool: the history does not say which
 * pool an allocation went to, so they are drawn, not replayed.
 * The state at the start is worked back from the snapshot's segments at the
 * end through the history: a `segment_free` means the segment existed
 * before it, a `segment_alloc` that it did not, a `free_completed` that the
 * block was live before it, an `alloc` that it was not. The blocks live at
 * the start (also those the recording saw freed) are the first events, in
 * address order; when the start state is complete (every live block inside
 * a segment, no expandable segment, the segments summing to the reserved
 * memory the segment events imply) it is kept so that a replay can begin
 * from it (hbm_seed_segment), and otherwise the reason is noted.
 * Settings: the parsed fields the snapshot holds (max_split_size,
 * garbage_collection_threshold, expandable_segments, roundup_power2_divisions),
 * which say what ran even when the raw PYTORCH_CUDA_ALLOC_CONF string is empty.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickle.h"
#include "trace.h"
#include "u64map.h"
#include "util.h"

#define SMALL_SEGMENT (2ull << 20) /* kSmallBuffer: the small pool's segments */
#define MAX_BYTES TRACE_MAX_BYTES
/* Bytes of file per event or live block, at least: an entry PyTorch or hbmalloc writes takes 25 bytes and more (91
 * on average in a snapshot hbmalloc wrote, 164 in a real one), one repeated by a memo reference 2. Each costs 24 to
 * 80 bytes of memory, which stays under the readers' 16 per byte of file (docs/RELIABILITY.md). */
#define PER_RECORD 8

/* acc += v, or -1 when the sum leaves int64 (sizes from a file are checked, never trusted). */
static int add_checked(int64_t *acc, int64_t v) { return __builtin_add_overflow(*acc, v, acc) ? -1 : 0; }

static int fail(char *err, size_t errlen, const char *name, const char *msg)
{
    snprintf(err, errlen, "%s: %s", name, msg);
    return -1;
}

static void copy_str(const pv *v, char *out, size_t n)
{
    size_t len = v && v->type == PV_STR ? v->u.str.len : 0;
    if (len >= n)
        len = n - 1;
    if (len)
        memcpy(out, v->u.str.s, len);
    out[len] = 0;
}

/* A trace entry's action and numbers (0 where absent). */
static void event_fields(const pv *e, const pv **action, int64_t *addr, int64_t *size, int64_t *stream)
{
    *action = pv_get(e, "action");
    *addr = *size = *stream = 0;
    pv_int(pv_get(e, "addr"), addr);
    pv_int(pv_get(e, "size"), size);
    pv_int(pv_get(e, "stream"), stream);
}

/* Allocations' stacks. A text is built once per frames list (a list reached through memo references is one node:
 * its mark keeps the stack), and once per sequence of frames (PyTorch pickles a fresh list for most events, of
 * frame dicts it shares: a snapshot of 20,000 events has some 12,000 lists and under 200 distinct stacks). Built
 * text is bounded by the file: past STACK_BYTES_PER_BYTE characters per byte (charged at least STACK_MIN_CHARGE a
 * build), later allocations keep no stack and are counted (trace_meta.dropped). Real snapshots build at most 1.8
 * characters per byte (docs/RELIABILITY.md). */
#define STACK_TEXT 16384       /* an allocation's frames as text: frames past it are left out */
#define STACK_BYTES_PER_BYTE 2 /* characters of stack text built per byte of the file, above STACK_FLOOR */
#define STACK_FLOOR (1u << 20)
#define STACK_MIN_CHARGE 64 /* a build costs at least this: the sequences kept stay few */

typedef struct stacks {
    u64map seqs;          /* a sequence of frame nodes' hash -> the first list (its node) with that sequence */
    size_t built, budget; /* characters built so far, and the bound */
    char text[STACK_TEXT];
} stacks;

/* Appends s[0..n) at *at; -1 when it does not fit. */
static int put(char *out, size_t *at, const char *s, size_t n)
{
    if (n >= STACK_TEXT - *at)
        return -1;
    memcpy(out + *at, s, n);
    *at += n;
    return 0;
}

/* A string value, controls (tab and newline separate frames) as spaces. */
static int put_str(char *out, size_t *at, const pv *v)
{
    size_t n = v && v->type == PV_STR ? v->u.str.len : 0, from = *at;
    if (put(out, at, n ? v->u.str.s : "", n))
        return -1;
    for (size_t k = from; k < *at; k++)
        if ((unsigned char)out[k] < 0x20)
            out[k] = ' ';
    return 0;
}

/* The frames as a stack text ("name\tfile\tline" each, innermost first, joined by '\n'; frames that would pass
 * STACK_TEXT - 1 characters left out, with the rest). Its length. Linear in what it writes. */
static size_t stack_text(const pv *frames, char *out)
{
    size_t at = 0;
    for (uint32_t k = 0, n = pv_len(frames); k < n; k++) {
        const pv *f = pv_at(frames, k);
        size_t mark = at;
        int64_t line = 0;
        pv_int(pv_get(f, "line"), &line);
        char num[24];
        int nl = snprintf(num, sizeof num, "\t%lld", (long long)line);
        if ((k && put(out, &at, "\n", 1)) || put_str(out, &at, pv_get(f, "name")) || put(out, &at, "\t", 1) ||
            put_str(out, &at, pv_get(f, "filename")) || put(out, &at, num, (size_t)nl) || at + 1 >= STACK_TEXT) {
            at = mark; /* this frame did not fit: the stack ends before it */
            break;
        }
    }
    out[at] = 0;
    return at;
}

static uint64_t frames_hash(const pv *frames)
{
    uint32_t n = pv_len(frames);
    uint64_t h = n;
    for (uint32_t k = 0; k < n; k++)
        h = hbm__mix64(h ^ (uint64_t)(uintptr_t)pv_at(frames, k));
    return h;
}

static int same_frames(const pv *a, const pv *b)
{
    uint32_t n = pv_len(a);
    if (pv_len(b) != n)
        return 0;
    for (uint32_t k = 0; k < n; k++)
        if (pv_at(a, k) != pv_at(b, k))
            return 0;
    return 1;
}

/* The stack of an allocation whose entry has these frames: an index in t->meta.texts, 0 for none; -1 when host
 * memory ran out. */
static int64_t stack_of(stacks *sk, trace *t, const pv *frames)
{
    if (!pv_len(frames))
        return 0;
    if (frames->mark) /* this list's stack is known (index + 1) */
        return frames->mark - 1;
    uint64_t h = frames_hash(frames);
    size_t i;
    for (;; h++) { /* the next key on a collision of different sequences */
        i = u64map_find(&sk->seqs, h);
        if (!sk->seqs.used[i])
            break;
        const pv *first = (const pv *)(uintptr_t)sk->seqs.vals[i];
        if (same_frames(first, frames)) {
            pv_set_mark(frames, first->mark);
            return first->mark - 1;
        }
    }
    uint32_t k = 0;
    if (sk->built < sk->budget) {
        size_t n = stack_text(frames, sk->text);
        sk->built += n > STACK_MIN_CHARGE ? n : STACK_MIN_CHARGE;
        if (n && !(k = trace_meta_intern(t, sk->text)))
            return -1;
    } else {
        t->meta.dropped++; /* the bound is spent: no stack (the list is marked, the next reference costs nothing) */
    }
    if (k >= UINT32_MAX - 1 || u64map_put_at(&sk->seqs, i, h, (uint64_t)(uintptr_t)frames))
        return -1;
    pv_set_mark(frames, k + 1);
    return k;
}

/* The settings the snapshot's allocator ran with, from its parsed fields. 0 when there are none. */
static int recorded_settings(const pv *settings, char *out, size_t len)
{
    int64_t max_split = -1;
    double gc = 0;
    const pv *v;
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, len);
    int any = 0;
    if ((v = pv_get(settings, "max_split_size")) && !pv_int(v, &max_split)) {
        any = 1;
        if (max_split > 0 && max_split != INT64_MAX)
            hbm__sb_printf(&sb, "%smax_split_size_mb:%lld", sb.len ? "," : "", (long long)(max_split >> 20));
    }
    if ((v = pv_get(settings, "garbage_collection_threshold")) && v->type == PV_FLOAT) {
        any = 1;
        gc = v->u.f;
        if (gc > 0)
            hbm__sb_printf(&sb, "%sgarbage_collection_threshold:%g", sb.len ? "," : "", gc);
    }
    int64_t e = 0;
    if ((v = pv_get(settings, "expandable_segments")) && !pv_int(v, &e)) {
        any = 1;
        if (e)
            hbm__sb_printf(&sb, "%sexpandable_segments:True", sb.len ? "," : "");
    }
    if ((v = pv_get(settings, "roundup_power2_divisions")) && v->type == PV_DICT) {
        /* {"1": d0, "2": d1, ..., "32768": d15}: interval start in MiB -> divisions */
        any = 1;
        char list[400];
        hbm__sbuf lb;
        hbm__sb_init(&lb, list, sizeof list);
        int nonzero = 0;
        for (int k = 0; k < 16; k++) {
            char key[8];
            snprintf(key, sizeof key, "%u", 1u << k);
            int64_t d = 0;
            pv_int(pv_get(v, key), &d);
            nonzero |= d != 0;
            hbm__sb_printf(&lb, "%s%u:%lld", k ? "," : "", 1u << k, (long long)d);
        }
        if (nonzero)
            hbm__sb_printf(&sb, "%sroundup_power2_divisions:[%s]", sb.len ? "," : "", list);
    }
    return any;
}

/* The recorded PYTORCH_CUDA_ALLOC_CONF string as a replay may apply it: a snapshot is a file anyone may hand over,
 * and settings read from a file never name files. hbmalloc's keys pass only when they are policies
 * (hbm_plan_file names a file to open, hbm_publish writes them, a key added later is left out until it is listed
 * here); PyTorch's keys name no files. The entries left out go to `dropped`, for the report. */
static void settings_from_file(const char *raw, char *out, size_t len, char *dropped, size_t dlen)
{
    static const char *const policies[] = {"hbm_remap_free_pages", "hbm_expandable_page_mb", "hbm_arena_mb",
                                           "hbm_arena_fraction", "hbm_step_plan"};
    hbm__sbuf sb, db;
    hbm__sb_init(&sb, out, len);
    hbm__sb_init(&db, dropped, dlen);
    for (const char *p = raw; *p;) {
        const char *e = p;
        for (int depth = 0; *e && (*e != ',' || depth); e++) /* roundup_power2_divisions:[1:4,2:8] is one entry */
            depth += *e == '[' ? 1 : *e == ']' && depth ? -1 : 0;
        const char *k = p;
        while (k < e && (*k == ' ' || *k == '\t'))
            k++;
        size_t klen = 0;
        while (k + klen < e && k[klen] != ':' && k[klen] != ' ' && k[klen] != '\t')
            klen++;
        int keep = klen < 4 || strncmp(k, "hbm_", 4);
        for (size_t i = 0; !keep && i < sizeof policies / sizeof policies[0]; i++)
            keep = strlen(policies[i]) == klen && !strncmp(k, policies[i], klen);
        if (e > p)
            hbm__sb_printf(keep ? &sb : &db, "%s%.*s", (keep ? sb.len : db.len) ? "," : "", (int)(e - p), p);
        p = *e ? e + 1 : e;
    }
}

typedef struct seg_rec {
    uint64_t addr, size;
    int64_t stream;
    int small, alive;
} seg_rec;

typedef struct blk_rec {
    uint64_t addr, size, requested; /* size 0: not known (a block the recording saw freed) */
    int64_t stream;
    int alive, freed_in_recording;
} blk_rec;

/* Arrays of records found by address (an index in a u64map: addresses come from the file, any 64-bit value). */
typedef struct recs {
    void *v;
    size_t n, cap, each;
    u64map map;
} recs;

static void *rec_find(recs *r, uint64_t addr)
{
    size_t i = u64map_find(&r->map, addr);
    return r->map.used[i] ? (char *)r->v + r->map.vals[i] * r->each : NULL;
}

static void *rec_add(recs *r, uint64_t addr)
{
    size_t i = u64map_find(&r->map, addr);
    if (r->map.used[i])
        return (char *)r->v + r->map.vals[i] * r->each;
    if (hbm__grow(&r->v, &r->cap, r->n + 1, r->each) || u64map_put_at(&r->map, i, addr, r->n))
        return NULL;
    void *e = (char *)r->v + r->n++ * r->each;
    memset(e, 0, r->each);
    return e;
}

static int by_addr_seg(const void *x, const void *y)
{
    const seg_rec *a = x, *b = y;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

static int by_addr_blk(const void *x, const void *y)
{
    const blk_rec *a = x, *b = y;
    return a->addr < b->addr ? -1 : a->addr > b->addr;
}

/* The recording's segments while the history runs, by address, with how many live blocks each holds: a run of
 * segment frees that leaves no segment without a live block released every cached segment, which a replay does
 * with an empty_cache (the program's own call, or PyTorch's release before an out-of-memory retry). */
typedef struct occ {
    uint64_t addr, size;
    int64_t live;
} occ;

typedef struct occupancy {
    occ *v;
    size_t n, cap;
    size_t empty; /* segments with no live block */
} occupancy;

static size_t occ_find(const occupancy *o, uint64_t addr) /* the last segment starting at or before addr */
{
    size_t lo = 0, hi = o->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (o->v[mid].addr <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo; /* index + 1, 0: none */
}

static int occ_insert(occupancy *o, uint64_t addr, uint64_t size)
{
    if (hbm__grow((void **)&o->v, &o->cap, o->n + 1, sizeof *o->v))
        return -1;
    size_t at = occ_find(o, addr);
    memmove(o->v + at + 1, o->v + at, (o->n - at) * sizeof *o->v);
    o->v[at] = (occ){addr, size, 0};
    o->n++;
    o->empty++;
    return 0;
}

static void occ_remove(occupancy *o, uint64_t addr)
{
    size_t at = occ_find(o, addr);
    if (!at || o->v[at - 1].addr != addr)
        return;
    at--;
    o->empty -= o->v[at].live == 0;
    memmove(o->v + at, o->v + at + 1, (o->n - at - 1) * sizeof *o->v);
    o->n--;
}

static void occ_block(occupancy *o, uint64_t addr, int delta)
{
    size_t at = occ_find(o, addr);
    if (!at || addr >= o->v[at - 1].addr + o->v[at - 1].size)
        return;
    occ *g = &o->v[at - 1];
    o->empty -= g->live == 0;
    g->live += delta;
    o->empty += g->live == 0;
}

/* Sleep and wake entries (hbmalloc's snapshots: a sleeping pool's pages given back and mapped again, one entry per
 * run of pages) are, for the reserved memory worked out here, what segment_unmap and segment_map are. */
static int is_unmap(const pv *act) { return pv_is_str(act, "segment_unmap") || pv_is_str(act, "sleep"); }
static int is_map(const pv *act) { return pv_is_str(act, "segment_map") || pv_is_str(act, "wake"); }

/* A sleep or wake entry: the runs of one pool's sleep (or wake) follow one another, each an entry with the pool's
 * tag and whether it keeps a backup; they make one event, of their bytes together. *last: the entry that made the
 * last such event. 0 or -2. */
static int nap_entry(trace *t, trace_builder *b, const pv *e, const pv *act, int64_t size, uint32_t i, int64_t *last)
{
    char tag[64];
    int64_t backup = 0;
    copy_str(pv_get(e, "tag"), tag, sizeof tag);
    pv_int(pv_get(e, "backup"), &backup);
    uint32_t k = tag[0] ? trace_meta_intern(t, tag) : 0;
    if (tag[0] && !k)
        return -2;
    int wake = pv_is_str(act, "wake");
    trace_event *prev = t->n ? &t->ev[t->n - 1] : NULL;
    if (prev && *last + 1 == (int64_t)i && prev->kind == (wake ? EV_WAKE : EV_SLEEP) && prev->slot == k &&
        prev->pended == (backup != 0)) {
        prev->size += (uint64_t)size;
        *last = i;
        return 0;
    }
    *last = i;
    return tb_nap(b, wake, 0, (uint64_t)size, k, backup != 0, i + 1);
}

/* One snapshot being read: what its phases share. */
typedef struct snap_read {
    const char *name;
    char *err;
    size_t errlen, len; /* len: the file's, which bounds what it may describe */
    int device;
    trace *t;
    trace_builder *b;
    recs segs, blks;     /* every segment and block seen, live at the end or worked back */
    seg_rec *start_segs; /* those live at the start, by address */
    blk_rec *start_blks;
    size_t ns, nb;
    occupancy oc;
    stacks *sk;
    const pv *segments, *traces, *events;
    uint32_t nev;
    int64_t end_reserved, start, seeded_bytes;
    int expandable;
    uint64_t lost;
} snap_read;

/* A phase's outcome: done, or failed with its message written (SR_FAIL), or the message is the caller's. */
enum { SR_OK = 0, SR_FAIL = -1, SR_NOMEM = -2, SR_OVERFLOW = -3 };

static int sr_fail(snap_read *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sr_fail(snap_read *r, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fail(r->err, r->errlen, r->name, msg);
    return SR_FAIL;
}

/* The devices a snapshot holds, a bit each (0-63): those its segments name and those with a history. */
static uint64_t snapshot_devices(const pv *segments, const pv *traces)
{
    uint64_t seen = 0;
    for (uint32_t i = 0; i < pv_len(segments); i++) {
        int64_t dev = 0;
        pv_int(pv_get(pv_at(segments, i), "device"), &dev);
        if (dev >= 0 && dev < 64)
            seen |= 1ull << dev;
    }
    for (uint32_t d = 0; traces && d < pv_len(traces) && d < 64; d++)
        if (pv_len(pv_at(traces, d)))
            seen |= 1ull << d;
    return seen;
}

/* "0, 1, 3": the devices of a mask. */
static void device_list(uint64_t seen, char *buf, size_t len)
{
    buf[0] = 0;
    for (int d = 0; d < 64; d++)
        if (seen >> d & 1)
            snprintf(buf + strlen(buf), len - strlen(buf), "%s%d", buf[0] ? ", " : "", d);
}

/* The end: segments and the blocks live in them. */
static int read_end(snap_read *r)
{
    uint32_t nseg = pv_len(r->segments);
    uint64_t devices_seen = 0, blocks_walked = 0;
    for (uint32_t i = 0; i < nseg; i++) {
        const pv *seg = pv_at(r->segments, i);
        int64_t dev = 0, addr, total, stream = 0, e = 0;
        pv_int(pv_get(seg, "device"), &dev);
        if (dev >= 0 && dev < 64)
            devices_seen |= 1ull << dev;
        if (dev != r->device)
            continue;
        if (pv_int(pv_get(seg, "address"), &addr) || pv_int(pv_get(seg, "total_size"), &total) || total < 0)
            return sr_fail(r, "a segment lacks address or total_size");
        if (total > MAX_BYTES || addr < 0)
            return sr_fail(r, "a segment's size or address is out of range (sizes up to 2^48 bytes)");
        pv_int(pv_get(seg, "stream"), &stream);
        if (!pv_int(pv_get(seg, "is_expandable"), &e) && e)
            r->expandable = 1;
        int64_t asleep = 0; /* hbmalloc's key: a sleeping pool's run, its pages given back (not reserved) */
        if ((pv_int(pv_get(seg, "is_asleep"), &asleep) || !asleep) && add_checked(&r->end_reserved, total))
            return SR_OVERFLOW;
        r->t->rec.segments_end++;
        seg_rec *sr = rec_add(&r->segs, (uint64_t)addr);
        if (!sr)
            return SR_NOMEM;
        const pv *type = pv_get(seg, "segment_type");
        *sr = (seg_rec){(uint64_t)addr, (uint64_t)total, stream,
                        type ? pv_is_str(type, "small") : (uint64_t)total == SMALL_SEGMENT, 1};
        const pv *blocks = pv_get(seg, "blocks");
        int64_t at = addr;
        /* The walk's work is bounded by the file: a list is as long as its bytes allow, but
         * memo references can repeat a segment, each repeat bringing its blocks again. */
        blocks_walked += pv_len(blocks);
        if (blocks_walked > r->len)
            return sr_fail(r,
                           "the segments hold more blocks than a file of %zu bytes can describe (memo references "
                           "repeat them); refusing at over one block per byte",
                           r->len);
        for (uint32_t k = 0; k < pv_len(blocks); k++) {
            const pv *blk = pv_at(blocks, k);
            int64_t size = 0, req = 0;
            pv_int(pv_get(blk, "size"), &size);
            if (size < 0 || size > MAX_BYTES)
                return sr_fail(r, "a block's size is out of range (0 to 2^48 bytes)");
            if (pv_int(pv_get(blk, "requested_size"), &req) || req <= 0)
                req = size;
            if (pv_is_str(pv_get(blk, "state"), "active_allocated")) {
                blk_rec *br = rec_add(&r->blks, (uint64_t)at);
                if (!br)
                    return SR_NOMEM;
                if (r->blks.n > r->len / PER_RECORD) /* each costs some 80 bytes of memory: bounded by the file */
                    return sr_fail(r,
                                   "the segments hold more live blocks than a file of %zu bytes can describe "
                                   "(memo references repeat them); refusing at over one per %d bytes",
                                   r->len, PER_RECORD);
                *br = (blk_rec){(uint64_t)at, (uint64_t)size, (uint64_t)req, stream, 1, 0};
            }
            if (add_checked(&at, size))
                return SR_OVERFLOW;
        }
    }
    for (uint32_t d = 0; r->traces && d < pv_len(r->traces) && d < 64; d++)
        if (pv_len(pv_at(r->traces, d)))
            devices_seen |= 1ull << d;
    if (r->nev > r->len / PER_RECORD) /* an event costs 24 bytes and more: memo references must not multiply them */
        return sr_fail(r,
                       "the history holds more events (%u) than a file of %zu bytes can describe (memo references "
                       "repeat them); refusing at over one per %d bytes",
                       r->nev, r->len, PER_RECORD);
    if (!(devices_seen >> r->device & 1) && r->nev == 0 && devices_seen) {
        char list[200];
        device_list(devices_seen, list, sizeof list);
        return sr_fail(r,
                       "device %d has no segments or history in this snapshot (devices: %.100s); choose one with "
                       "--device",
                       r->device, list);
    }
    return SR_OK;
}

/* Back through the history to the start: what was live before each entry, the reserved memory at the start. */
static int walk_back(snap_read *r)
{
    int64_t seg_delta = 0;
    for (uint32_t i = r->nev; i-- > 0;) {
        const pv *act;
        int64_t addr, size, stream;
        event_fields(pv_at(r->events, i), &act, &addr, &size, &stream);
        if (size > MAX_BYTES || size < 0)
            return sr_fail(r, "event %u: %s of %lld bytes (sizes are 0 to 2^48)", i,
                           size < 0 ? "a negative size" : "a size", (long long)size);
        if (pv_is_str(act, "alloc")) {
            blk_rec *br = rec_find(&r->blks, (uint64_t)addr);
            if (br && br->alive)
                br->alive = 0;
            else
                r->lost++; /* allocated and never freed nor live at the end: the history lost its free */
        } else if (pv_is_str(act, "free_completed")) {
            blk_rec *br = rec_add(&r->blks, (uint64_t)addr);
            if (!br)
                return SR_NOMEM;
            if (br->alive)
                r->lost++;
            *br = (blk_rec){(uint64_t)addr, 0, size > 0 ? (uint64_t)size : 0, stream, 1, 1};
        } else if (pv_is_str(act, "segment_alloc")) {
            if (add_checked(&seg_delta, size))
                return SR_OVERFLOW;
            seg_rec *sr = rec_find(&r->segs, (uint64_t)addr);
            if (sr && sr->alive)
                sr->alive = 0;
            else
                r->lost++;
        } else if (pv_is_str(act, "segment_free")) {
            if (add_checked(&seg_delta, -size))
                return SR_OVERFLOW;
            seg_rec *sr = rec_add(&r->segs, (uint64_t)addr);
            if (!sr)
                return SR_NOMEM;
            if (sr->alive)
                r->lost++;
            *sr = (seg_rec){(uint64_t)addr, (uint64_t)size, stream, (uint64_t)size == SMALL_SEGMENT, 1};
        } else if (is_map(act) || is_unmap(act)) {
            if (add_checked(&seg_delta, is_map(act) ? size : -size))
                return SR_OVERFLOW;
            r->expandable = 1;
        }
    }
    if (__builtin_sub_overflow(r->end_reserved, seg_delta, &r->start))
        return SR_OVERFLOW;
    r->t->rec.end_reserved = r->end_reserved;
    r->t->rec.start_reserved = r->start;
    return SR_OK;
}

/* The start state, in address order: each live block in a segment, its size where the end does not give it (the
 * request in 512-byte units, up to the next block or the segment's end); whether a replay can begin from it, and
 * why not. */
static int start_state(snap_read *r)
{
    trace *t = r->t;
    r->start_segs = malloc((r->segs.n ? r->segs.n : 1) * sizeof *r->start_segs);
    r->start_blks = malloc((r->blks.n ? r->blks.n : 1) * sizeof *r->start_blks);
    if (!r->start_segs || !r->start_blks)
        return SR_NOMEM;
    for (size_t i = 0; i < r->segs.n; i++)
        if (((seg_rec *)r->segs.v)[i].alive) {
            r->start_segs[r->ns++] = ((seg_rec *)r->segs.v)[i];
            if (add_checked(&r->seeded_bytes, (int64_t)((seg_rec *)r->segs.v)[i].size))
                return SR_OVERFLOW;
        }
    for (size_t i = 0; i < r->blks.n; i++)
        if (((blk_rec *)r->blks.v)[i].alive)
            r->start_blks[r->nb++] = ((blk_rec *)r->blks.v)[i];
    qsort(r->start_segs, r->ns, sizeof *r->start_segs, by_addr_seg);
    qsort(r->start_blks, r->nb, sizeof *r->start_blks, by_addr_blk);

    int segment_events = 0;
    for (uint32_t i = 0; i < r->nev && !segment_events; i++) {
        const pv *act = pv_get(pv_at(r->events, i), "action");
        segment_events = pv_is_str(act, "segment_alloc") || pv_is_str(act, "segment_free") || is_map(act) ||
                         is_unmap(act);
    }
    int blind = r->nev > 0 && !segment_events; /* allocations recorded, segments not: the start is unknown */
    int seedable = !blind && !r->expandable && !r->lost && r->seeded_bytes == r->start;
    t->rec.blind = blind;
    size_t outside = 0, ns = r->ns, nb = r->nb;
    seg_rec *start_segs = r->start_segs;
    blk_rec *start_blks = r->start_blks;
    t->rec.seed_segments = calloc(ns ? ns : 1, sizeof *t->rec.seed_segments);
    t->rec.seed_blocks = calloc(nb ? nb : 1, sizeof *t->rec.seed_blocks);
    if (!t->rec.seed_segments || !t->rec.seed_blocks)
        return SR_NOMEM;
    size_t si = 0;
    for (size_t k = 0; k < nb; k++) {
        blk_rec *br = &start_blks[k];
        while (si < ns && start_segs[si].addr + start_segs[si].size <= br->addr)
            si++;
        if (si == ns || br->addr < start_segs[si].addr) {
            outside++;
            continue;
        }
        uint64_t seg_end = start_segs[si].addr + start_segs[si].size;
        uint64_t limit = k + 1 < nb && start_blks[k + 1].addr < seg_end ? start_blks[k + 1].addr : seg_end;
        if (!br->size)
            br->size = (br->requested + 511) / 512 * 512;
        if (!br->size)
            br->size = 512;
        if (br->addr + br->size > limit)
            br->size = limit - br->addr;
        if (br->requested > br->size)
            br->requested = br->size;
        if (!br->size || br->size % 512 || br->addr % 512)
            outside++;
    }
    if (outside)
        seedable = 0;
    if (blind)
        snprintf(t->rec.start_note, sizeof t->rec.start_note, "its history records allocations but no segment events");
    else if (r->expandable)
        snprintf(t->rec.start_note, sizeof t->rec.start_note, "the recording's expandable segments cannot be rebuilt");
    else if (r->lost)
        snprintf(t->rec.start_note, sizeof t->rec.start_note,
                 "the history lost %llu events (an alloc without its free "
                 "or a segment freed twice): its start cannot be worked out",
                 (unsigned long long)r->lost);
    else if (r->seeded_bytes != r->start)
        snprintf(t->rec.start_note, sizeof t->rec.start_note,
                 "the segments worked back (%lld bytes) do not sum to the "
                 "reserved memory the segment events imply (%lld bytes)",
                 (long long)r->seeded_bytes, (long long)r->start);
    else if (outside)
        snprintf(t->rec.start_note, sizeof t->rec.start_note, "%zu blocks live at the start lie in no segment",
                 outside);
    t->rec.seedable = seedable; /* the seed itself is made by seed_start() */
    return SR_OK;
}

/* The blocks live at the start come first (address order); their slots go to the seed. */
static int seed_start(snap_read *r)
{
    trace *t = r->t;
    for (size_t k = 0; k < r->nb; k++) {
        const blk_rec *br = &r->start_blks[k];
        if (tb_alloc(r->b, br->addr, br->requested ? br->requested : br->size, (hbm_stream)br->stream, 0, NULL) == -2)
            return SR_NOMEM;
        t->rec.preexisting++;
        t->rec.freed_preexisting += br->freed_in_recording;
    }
    if (t->rec.seedable) {
        size_t bi = 0;
        for (size_t s = 0; s < r->ns; s++) {
            const seg_rec *sg = &r->start_segs[s];
            trace_seed_segment *ss = &t->rec.seed_segments[t->rec.nseed_segments++];
            *ss = (trace_seed_segment){sg->size, (hbm_stream)sg->stream, sg->small, (uint32_t)t->rec.nseed_blocks, 0};
            for (; bi < r->nb && r->start_blks[bi].addr < sg->addr + sg->size; bi++) {
                trace_seed_block *sb = &t->rec.seed_blocks[t->rec.nseed_blocks++];
                *sb = (trace_seed_block){r->start_blks[bi].addr - sg->addr, r->start_blks[bi].size,
                                         r->start_blks[bi].requested, t->ev[bi].slot};
                ss->n++;
            }
        }
    }
    return SR_OK;
}

/* The history, and the recording allocator's reserved memory along it. */
static int read_history(snap_read *r)
{
    trace *t = r->t;
    trace_builder *b = r->b;
    const pv *events = r->events;
    uint32_t nev = r->nev;
    int64_t cur = r->start, peak = r->start;
    if (!(r->sk = malloc(sizeof *r->sk)) || u64map_init(&r->sk->seqs)) {
        free(r->sk);
        r->sk = NULL;
        return SR_NOMEM;
    }
    r->sk->built = 0;
    r->sk->budget = STACK_BYTES_PER_BYTE * r->len + STACK_FLOOR;
    int track = t->rec.seedable; /* the full releases can be told only from a known start */
    int64_t last_nap = -1;       /* the last sleep or wake entry (nap_entry) */
    for (size_t k = 0; track && k < r->ns; k++)
        if (occ_insert(&r->oc, r->start_segs[k].addr, r->start_segs[k].size))
            return SR_NOMEM;
    for (size_t k = 0; track && k < r->nb; k++)
        occ_block(&r->oc, r->start_blks[k].addr, +1);
    for (uint32_t i = 0; i < nev; i++) {
        const pv *act;
        int64_t addr, size, stream;
        event_fields(pv_at(events, i), &act, &addr, &size, &stream);
        int res = 0;
        size_t pushed = t->n; /* the events this entry makes get its time (and an allocation its stack) */
        if (pv_is_str(act, "alloc")) {
            if (size < 0)
                return sr_fail(r, "event %u: alloc of a negative size", i);
            if (tb_is_live(b, (uint64_t)addr))
                return sr_fail(r, "event %u: alloc at 0x%llx, which is already live", i, (unsigned long long)addr);
            res = tb_alloc(b, (uint64_t)addr, (uint64_t)size, (hbm_stream)stream, i + 1, NULL);
            if (track)
                occ_block(&r->oc, (uint64_t)addr, +1);
        } else if (pv_is_str(act, "free_completed")) {
            res = tb_free(b, (uint64_t)addr, i + 1);
            if (res == -1) {
                t->rec.skipped_frees++;
                res = 0;
            } else if (track) {
                occ_block(&r->oc, (uint64_t)addr, -1);
            }
        } else if (pv_is_str(act, "free_requested")) {
            /* Not followed by its free_completed: the block had record_stream uses (PyTorch's free() records
             * FREE_REQUESTED, then FREE_COMPLETED at once unless it inserts events on the use streams): a pending
             * free until its free_completed. */
            const pv *next = i + 1 < nev ? pv_at(events, i + 1) : NULL;
            const pv *nact;
            int64_t naddr = -1, nsize, nstream;
            if (next)
                event_fields(next, &nact, &naddr, &nsize, &nstream);
            if (!next || !pv_is_str(nact, "free_completed") || naddr != addr) {
                res = tb_pending(b, (uint64_t)addr, i + 1);
                res = res == -2 ? -2 : 0; /* a block the history cannot place: its free_completed is skipped too */
            }
        } else if (pv_is_str(act, "segment_alloc") || is_map(act)) {
            t->rec.present = 1;
            if (add_checked(&cur, size))
                return SR_OVERFLOW;
            if (cur > peak)
                peak = cur;
            if (pv_is_str(act, "wake"))
                res = nap_entry(t, b, pv_at(events, i), act, size, i, &last_nap);
            if (track && occ_insert(&r->oc, (uint64_t)addr, (uint64_t)size))
                return SR_NOMEM;
        } else if (pv_is_str(act, "segment_free") || is_unmap(act)) {
            t->rec.present = 1;
            if (add_checked(&cur, -size))
                return SR_OVERFLOW;
            if (pv_is_str(act, "sleep"))
                res = nap_entry(t, b, pv_at(events, i), act, size, i, &last_nap);
            if (track && pv_is_str(act, "segment_free")) {
                occ_remove(&r->oc, (uint64_t)addr);
                const pv *next = i + 1 < nev ? pv_get(pv_at(events, i + 1), "action") : NULL;
                if (r->oc.empty == 0 && !pv_is_str(next, "segment_free")) {
                    res = tb_empty_cache(b, i + 1);
                    t->rec.releases++;
                }
            }
        } else if (pv_is_str(act, "oom")) {
            t->rec.oom_events++;
        }
        if (res == -2)
            return SR_NOMEM;
        for (int64_t us = 0; pushed < t->n; pushed++) {
            const pv *e = pv_at(events, i);
            pv_int(pv_get(e, "time_us"), &us);
            int64_t stack = t->ev[pushed].kind == EV_ALLOC ? stack_of(r->sk, t, pv_get(e, "frames")) : 0;
            if (stack < 0 ||
                ((us || stack) && trace_meta_set_index(t, pushed, us > 0 ? (uint64_t)us : 0, (uint32_t)stack)))
                return SR_NOMEM;
        }
    }
    t->rec.peak_reserved = peak;
    return SR_OK;
}

/* The snapshot's values (pickle or JSON: the same tree) into t; frees doc. */
static int read_snapshot(const char *name, pv *root, pickle_doc *doc, size_t len, int device, trace *t, char *err,
                         size_t errlen)
{
    t->format = "pytorch-snapshot";
    snap_read r = {.name = name,
                   .err = err,
                   .errlen = errlen,
                   .len = len,
                   .device = device,
                   .t = t,
                   .segs = {NULL, 0, 0, sizeof(seg_rec), {0}},
                   .blks = {NULL, 0, 0, sizeof(blk_rec), {0}},
                   .segments = root};
    const pv *settings = NULL;
    int rc = SR_NOMEM;
    if (u64map_init(&r.segs.map) || u64map_init(&r.blks.map))
        goto done;
    if (root->type == PV_DICT) { /* PyTorch 2.x; 1.x dumped a bare list of segments */
        r.segments = pv_get(root, "segments");
        r.traces = pv_get(root, "device_traces");
        settings = pv_get(root, "allocator_settings");
    }
    if (!r.segments || r.segments->type != PV_LIST) {
        rc = sr_fail(&r, "not a PyTorch memory snapshot (no list of segments)");
        goto done;
    }
    if (r.traces && r.traces->type != PV_LIST) {
        rc = sr_fail(&r, "device_traces is not a list");
        goto done;
    }
    if (device < 0) { /* none named: the snapshot's only device (0 when it holds none) */
        uint64_t seen = snapshot_devices(r.segments, r.traces);
        if (seen & (seen - 1)) {
            char list[200];
            device_list(seen, list, sizeof list);
            rc = sr_fail(&r, "this snapshot holds more than one device (devices: %.100s); choose one with --device",
                         list);
            goto done;
        }
        device = 0;
        while (seen && !(seen >> device & 1))
            device++;
        r.device = device;
    }
    t->rec.device = device;
    r.events = r.traces ? pv_at(r.traces, (uint32_t)device) : NULL;
    r.nev = pv_len(r.events);
    if (settings && settings->type == PV_DICT) {
        copy_str(pv_get(settings, "PYTORCH_CUDA_ALLOC_CONF"), t->rec.settings_raw, sizeof t->rec.settings_raw);
        t->rec.has_settings = recorded_settings(settings, t->rec.settings, sizeof t->rec.settings);
        if (!t->rec.has_settings && t->rec.settings_raw[0]) { /* only the string: use it, as a file may */
            settings_from_file(t->rec.settings_raw, t->rec.settings, sizeof t->rec.settings, t->rec.settings_dropped,
                               sizeof t->rec.settings_dropped);
            t->rec.has_settings = 1;
        }
    }
    if (root->type == PV_DICT && pv_get(root, "outside_bytes")) { /* an hbmalloc snapshot's keys */
        int64_t *to[] = {&t->rec.device_used, &t->rec.outside, &t->rec.outside_process, &t->rec.outside_others};
        const char *key[] = {"device_used_bytes", "outside_bytes", "outside_process_bytes", "outside_others_bytes"};
        for (int k = 0; k < 4; k++)
            if (pv_int(pv_get(root, key[k]), to[k]))
                *to[k] = -1;
        t->rec.has_outside = 1;
    }
    if (!(r.b = tb_new(t)))
        goto done;
    if ((rc = read_end(&r)) == SR_OK && (rc = walk_back(&r)) == SR_OK && (rc = start_state(&r)) == SR_OK &&
        (rc = seed_start(&r)) == SR_OK)
        rc = read_history(&r);
done:
    if (rc == SR_OVERFLOW)
        fail(err, errlen, name, "the sizes in the snapshot sum past 2^63 bytes");
    else if (rc == SR_NOMEM)
        fail(err, errlen, name, "out of host memory");
    if (r.b)
        tb_finish(r.b);
    free(r.segs.v);
    free(r.blks.v);
    u64map_free(&r.segs.map);
    u64map_free(&r.blks.map);
    free(r.start_segs);
    free(r.start_blks);
    free(r.oc.v);
    if (r.sk)
        u64map_free(&r.sk->seqs);
    free(r.sk);
    pickle_free(doc);
    if (rc)
        trace_free(t);
    return rc ? -1 : 0;
}

/* A snapshot's file parsed by parse (pickle or JSON) and read. */
static int read_parsed(pv *(*parse)(const unsigned char *, size_t, pickle_doc **, char *, size_t), const char *name,
                       const unsigned char *data, size_t len, int device, trace *t, char *err, size_t errlen)
{
    char perr_msg[256];
    pickle_doc *doc;
    trace_init(t);
    pv *root = parse(data, len, &doc, perr_msg, sizeof perr_msg);
    if (!root)
        return fail(err, errlen, name, perr_msg);
    return read_snapshot(name, root, doc, len, device, t, err, errlen);
}

int trace_read_pickle_mem(const char *name, const unsigned char *data, size_t len, int device, trace *t, char *err,
                          size_t errlen)
{
    return read_parsed(pickle_parse, name, data, len, device, t, err, errlen);
}

int trace_read_json_mem(const char *name, const unsigned char *data, size_t len, int device, trace *t, char *err,
                        size_t errlen)
{
    return read_parsed(json_parse, name, data, len, device, t, err, errlen);
}
