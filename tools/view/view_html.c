/*
 * view_html.c: the interactive page of `hbmalloc view -o OUT.html`: one file,
 * no network (the script and styles are inline: tools/view/view_page.html, built
 * in), that draws allocated and reserved memory over the replay (zoomed and
 * panned on the time axis), the active memory and active cached segment
 * timelines (one band per allocation or reserved range, hover for what it
 * was), the list of events and the segment map at any event (slider, arrow
 * keys, a click on an event), from data gathered here.
 *
 * What is gathered, event by event, through the public API: each allocation's
 * place (the pointer), block size (hbm_block_size) and lifetime from the replay
 * itself; each reserved range (a segment, or a run of mapped pages of an
 * expandable segment) from the allocator's history (hbm_history_enable), read
 * every HARVEST events so that its buffer stays small. History entries carry no
 * event number: a segment entry belongs to the allocation or free whose own
 * entry follows it, or, when it carries MARK (set as the allocator-wide label
 * around empty_cache events), to that empty_cache event. A pool's sleep or
 * wake is read on its own (the history read before it and after it): every
 * entry it left is its own, its pages given back (sleep entries: ranges
 * asleep, the blocks in them kept at their addresses) or mapped again.
 *
 * Positions: the page counts events done, p = i + 1 after event i (a seeded
 * start is p = first). An allocation is live at p when start <= p < end.
 */
#include "view_html.h"

#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "run/replay.h"
#include "trace/u64map.h"
#include "view_moments.h"

#define HARVEST 65536 /* events between readings of the history */
#define MARK "hbmalloc view: empty_cache"
#define TOP 1000             /* the timelines' bands: the page draws the 1000 largest allocations (segments) */
#define SLICES 16            /* a large run sends the TOP largest of each sixteenth of it (the page zooms) */
#define LARGE_POINTS 2000000 /* points of the curves a page holds whole */
struct view_rec {
    v_alloc *al;
    size_t nal, capal;
    v_run *run;
    size_t nrun, caprun;
    v_range *range; /* every expandable segment's address range seen (hbm_snap_segment.range_*), by address once
                       view_rec_end sorted them */
    size_t nrange, caprange;
    uint32_t *slot_rec; /* the record of the allocation in each slot */
    uint8_t *emits;     /* per event: it left an allocation's or a free's entry in the
                           history (not a NULL free, a zero-byte or failed allocation) */
    int had_ptr;        /* the event under way frees a pointer */
    size_t last;        /* the last event run */
    u64map open;        /* addr -> run index of the open runs (segments and mapped runs
                           by their start) */
    const trace *t;
    size_t cursor; /* the last allocation or free event that the history's entries
                      were matched to */
    size_t since;  /* events since the history was last read */
    v_nap *nap;    /* the sleeps and wakes, in order */
    size_t nnap, capnap;
    v_run *asleep; /* pages of sleeping pools, given back: range is the sleep's nap */
    size_t nasleep, capasleep;
    size_t whole; /* the history is being read for this sleep or wake event alone (SIZE_MAX: not) */
};

view_rec *view_rec_new(const trace *t)
{
    view_rec *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->t = t;
    v->slot_rec = malloc((t->nslots + 1) * sizeof *v->slot_rec);
    v->emits = calloc(t->n + 1, 1);
    if (!v->slot_rec || !v->emits || u64map_init(&v->open)) {
        free(v->slot_rec);
        free(v->emits);
        free(v);
        return NULL;
    }
    v->cursor = SIZE_MAX;
    v->whole = SIZE_MAX;
    return v;
}

void view_rec_free(view_rec *v)
{
    if (!v)
        return;
    free(v->al);
    free(v->run);
    free(v->range);
    free(v->nap);
    free(v->asleep);
    free(v->slot_rec);
    free(v->emits);
    u64map_free(&v->open);
    free(v);
}

static int add_alloc(view_rec *v, hbm_allocator *a, void *ptr, uint64_t requested, hbm_stream stream, uint32_t p,
                     uint32_t slot)
{
    if (hbm__grow((void **)&v->al, &v->capal, v->nal + 1, sizeof *v->al))
        return -1;
    /* Its stack: that of the event that made it (p - 1; for a seeded block, a seed event: none). */
    uint32_t stack = p && p - 1 < v->t->meta.n ? v->t->meta.stack[p - 1] : 0;
    v->al[v->nal] = (v_alloc){p, OPEN, (uint64_t)(uintptr_t)ptr, hbm_block_size(a, ptr), requested, stream, stack, 0};
    v->slot_rec[slot] = (uint32_t)v->nal++;
    return 0;
}

static int open_run(view_rec *v, uint64_t addr, uint64_t size, hbm_stream stream, int mapped, uint32_t p)
{
    if (hbm__grow((void **)&v->run, &v->caprun, v->nrun + 1, sizeof *v->run))
        return -1;
    size_t i = u64map_find(&v->open, addr);
    if (v->open.used[i]) { /* a range begins where an open one does: the history
                              lost its end (cannot happen) */
        v->run[v->open.vals[i]].end = p;
        v->open.vals[i] = v->nrun;
    } else if (u64map_put_at(&v->open, i, addr, v->nrun)) {
        return -1;
    }
    v->run[v->nrun++] = (v_run){p, OPEN, addr, size, stream, mapped, -1};
    return 0;
}

/* Unmapped [lo, hi) at p: the mapped runs that overlap end there, and what of
 * them lies outside goes on. */
static int unmap(view_rec *v, uint64_t lo, uint64_t hi, uint32_t p)
{
    size_t n = v->nrun;
    for (size_t k = 0; k < n; k++) { /* runs are few (segments and mapped runs open at once): a scan */
        v_run r = v->run[k];
        if (!r.mapped || r.end != OPEN || r.addr >= hi || r.addr + r.size <= lo)
            continue;
        v->run[k].end = p;
        u64map_del_at(&v->open, u64map_find(&v->open, r.addr));
        if (r.addr < lo && open_run(v, r.addr, lo - r.addr, r.stream, 1, p))
            return -1;
        if (r.addr + r.size > hi && open_run(v, hi, r.addr + r.size - hi, r.stream, 1, p))
            return -1;
    }
    return 0;
}

/* A sleep entry: the mapped runs over [lo, hi) end at p, and the pages sleep from there (nap: the sleep's). */
static int fall_asleep(view_rec *v, uint64_t lo, uint64_t hi, uint32_t p)
{
    if (unmap(v, lo, hi, p) || hbm__grow((void **)&v->asleep, &v->capasleep, v->nasleep + 1, sizeof *v->asleep))
        return -1;
    v->asleep[v->nasleep++] = (v_run){p, OPEN, lo, hi - lo, 0, 1, v->nnap ? (int32_t)(v->nnap - 1) : -1};
    return 0;
}

/* A wake entry: the pages over [lo, hi) are mapped again at p; what of an asleep range lies outside sleeps on. */
static int wake_up(view_rec *v, uint64_t lo, uint64_t hi, hbm_stream stream, uint32_t p)
{
    for (size_t k = 0, n = v->nasleep; k < n; k++) {
        v_run z = v->asleep[k];
        if (z.end != OPEN || z.addr >= hi || z.addr + z.size <= lo)
            continue;
        v->asleep[k].end = p;
        v_run rest[2] = {z, z};
        rest[0].size = lo > z.addr ? lo - z.addr : 0;
        rest[1].addr = hi;
        rest[1].size = z.addr + z.size > hi ? z.addr + z.size - hi : 0;
        for (int r = 0; r < 2; r++) {
            if (!rest[r].size)
                continue;
            if (hbm__grow((void **)&v->asleep, &v->capasleep, v->nasleep + 1, sizeof *v->asleep))
                return -1;
            rest[r].start = p;
            v->asleep[v->nasleep++] = rest[r];
        }
    }
    return open_run(v, lo, hi - lo, stream, 1, p);
}

/* The next event after the cursor that left an allocation's or a free's entry,
 * or an empty_cache event (want_empty) before it; SIZE_MAX: none (entries of
 * the last event run, which failed). */
static size_t next_event(const view_rec *v, int want_empty)
{
    for (size_t i = v->cursor == SIZE_MAX ? 0 : v->cursor + 1; i <= v->last && i < v->t->n; i++) {
        if (want_empty && v->t->ev[i].kind == EV_EMPTY_CACHE)
            return i;
        if (v->emits[i])
            return want_empty ? SIZE_MAX : i;
    }
    return SIZE_MAX;
}

/* The address ranges of s's expandable segments, each noted once (they are few: one per pool and stream). */
static int note_ranges(view_rec *v, const hbm_snapshot *s)
{
    for (size_t i = 0; i < s->nsegments; i++) {
        const hbm_snap_segment *g = &s->segments[i];
        size_t k = 0;
        while (k < v->nrange && v->range[k].addr != g->range_addr)
            k++;
        if (!g->is_expandable || k < v->nrange)
            continue;
        if (hbm__grow((void **)&v->range, &v->caprange, v->nrange + 1, sizeof *v->range))
            return -1;
        v->range[v->nrange++] = (v_range){g->range_addr, g->range_size};
    }
    return 0;
}

static int by_range_addr(const void *x, const void *y)
{
    const v_range *a = x, *b = y;
    return (a->addr > b->addr) - (a->addr < b->addr);
}

/* Reads the history since the last reading and clears it. */
static int harvest(view_rec *v, hbm_allocator *a, char *err, size_t errlen)
{
    hbm_snapshot *s = NULL;
    if (hbm_snapshot_take(a, &s) != HBM_OK) {
        snprintf(err, errlen, "the allocator's history could not be read: %s", hbm_last_error(a));
        return -1;
    }
    int rc = note_ranges(v, s);
    for (size_t k = 0; rc == 0 && k < s->ntrace; k++) {
        const hbm_trace_entry *e = &s->trace[k];
        size_t at;
        switch (e->action) {
        case HBM_TRACE_ALLOC:
        case HBM_TRACE_FREE_REQUESTED:
            if ((at = next_event(v, 0)) != SIZE_MAX)
                v->cursor = at;
            break;
        case HBM_TRACE_SEGMENT_ALLOC:
        case HBM_TRACE_SEGMENT_MAP:
        case HBM_TRACE_SEGMENT_FREE:
        case HBM_TRACE_SEGMENT_UNMAP:
        case HBM_TRACE_SLEEP:
        case HBM_TRACE_WAKE: {
            at = v->whole != SIZE_MAX                                          ? v->whole
                 : e->context && !strcmp(e->context, MARK)                     ? next_event(v, 1)
                 : e->action == HBM_TRACE_SLEEP || e->action == HBM_TRACE_WAKE ? SIZE_MAX
                                                                               : next_event(v, 0);
            if (at == SIZE_MAX) /* the failed allocation at an OOM: its releases */
                at = v->last;
            uint32_t p = (uint32_t)at + 1;
            if (e->action == HBM_TRACE_SLEEP) {
                rc = fall_asleep(v, e->addr, e->addr + e->size, p);
            } else if (e->action == HBM_TRACE_WAKE) {
                rc = wake_up(v, e->addr, e->addr + e->size, e->stream, p);
            } else if (e->action == HBM_TRACE_SEGMENT_ALLOC || e->action == HBM_TRACE_SEGMENT_MAP) {
                rc = open_run(v, e->addr, e->size, e->stream, e->action == HBM_TRACE_SEGMENT_MAP, p);
            } else if (e->action == HBM_TRACE_SEGMENT_UNMAP) {
                rc = unmap(v, e->addr, e->addr + e->size, p);
            } else {
                size_t i = u64map_find(&v->open, e->addr);
                if (v->open.used[i]) {
                    v->run[v->open.vals[i]].end = p;
                    u64map_del_at(&v->open, i);
                }
            }
            break;
        }
        default: break;
        }
    }
    hbm_snapshot_free(s);
    if (rc == 0 && (hbm_history_enable(a, 0) != HBM_OK || hbm_history_enable(a, 4 * HARVEST + 4096) != HBM_OK)) {
        snprintf(err, errlen, "the allocator's history could not be restarted: %s", hbm_last_error(a));
        return -1;
    }
    if (rc)
        snprintf(err, errlen, "out of host memory");
    v->since = 0;
    return rc;
}

int view_rec_begin(view_rec *v, hbm_allocator *a, const trace *t, void **slot, size_t first)
{
    for (size_t i = 0; i <= t->nslots; i++)
        v->slot_rec[i] = OPEN;
    /* A seeded start: its blocks from the slots, its segments from a snapshot. */
    for (size_t i = 0; i < t->nslots; i++)
        if (slot[i] && add_alloc(v, a, slot[i], hbm_block_size(a, slot[i]), 0, (uint32_t)first, (uint32_t)i))
            return -1;
    if (first) {
        hbm_snapshot *s = NULL;
        if (hbm_snapshot_take(a, &s) != HBM_OK)
            return -1;
        int rc = note_ranges(v, s);
        for (size_t i = 0; rc == 0 && i < s->nsegments; i++) {
            const hbm_snap_segment *g = &s->segments[i];
            rc = open_run(v, g->addr, g->total_size, g->stream, g->is_expandable, (uint32_t)first);
        }
        hbm_snapshot_free(s);
        if (rc)
            return -1;
        v->cursor = first - 1;
    }
    return hbm_history_enable(a, 4 * HARVEST + 4096) == HBM_OK ? 0 : -1;
}

static int64_t reserved_now(hbm_allocator *a)
{
    hbm_stats s;
    hbm_get_stats(a, &s);
    return s.reserved_bytes[0].current;
}

int view_rec_before(view_rec *v, hbm_allocator *a, const trace_event *e, void **slot, char *err, size_t errlen)
{
    v->had_ptr = e->kind == EV_FREE && slot[e->slot] && slot[e->slot] != PENDING_MARK;
    if (e->kind == EV_EMPTY_CACHE && hbm_history_context(a, MARK) != HBM_OK) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    if (e->kind != EV_SLEEP && e->kind != EV_WAKE)
        return 0;
    /* A sleep or a wake: what came before is read now, so that every entry the next reading finds is its own. */
    if (hbm__grow((void **)&v->nap, &v->capnap, v->nnap + 1, sizeof *v->nap)) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    v->nap[v->nnap] = (v_nap){0, e->slot, e->kind == EV_WAKE, e->pended, e->stream != 0, e->size, reserved_now(a), 0};
    return e->stream ? harvest(v, a, err, errlen) : 0; /* (one not replayed leaves no entry) */
}

int view_rec_after(view_rec *v, hbm_allocator *a, const trace_event *e, size_t i, void **slot, hbm_status st, char *err,
                   size_t errlen)
{
    if (e->kind == EV_EMPTY_CACHE && hbm_history_context(a, NULL) != HBM_OK) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    v->last = i;
    /* A pending free leaves its free_requested entry when the replay freed the block (on the sim); its completion
     * (EV_FREE of a block whose slot held the mark) leaves none then: the allocator sees it at its next poll. */
    int pended = e->kind == EV_PENDING && slot[e->slot] == PENDING_MARK; /* the replay freed it just now */
    v->emits[i] = st == HBM_OK &&
                  ((e->kind == EV_ALLOC && slot[e->slot]) || (e->kind == EV_FREE && v->had_ptr) || pended);
    if (pended && v->slot_rec[e->slot] != OPEN)
        v->al[v->slot_rec[e->slot]].freed = (uint32_t)i + 1;
    if (v->emits[i] && e->kind == EV_ALLOC &&
        add_alloc(v, a, slot[e->slot], e->size, e->stream, (uint32_t)i + 1, e->slot)) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    if (st == HBM_OK && e->kind == EV_FREE && v->slot_rec[e->slot] != OPEN) {
        v->al[v->slot_rec[e->slot]].end = (uint32_t)i + 1;
        v->slot_rec[e->slot] = OPEN;
    }
    if (e->kind == EV_SLEEP || e->kind == EV_WAKE) { /* its entries, all of them its own (view_rec_before) */
        v_nap *n = &v->nap[v->nnap++];
        n->p = (uint32_t)i + 1;
        n->resv1 = reserved_now(a);
        if (!e->stream)
            return 0;
        v->whole = i;
        int rc = harvest(v, a, err, errlen);
        v->whole = SIZE_MAX;
        return rc;
    }
    if (++v->since >= HARVEST)
        return harvest(v, a, err, errlen);
    return 0;
}

int view_rec_end(view_rec *v, hbm_allocator *a, char *err, size_t errlen)
{
    if (harvest(v, a, err, errlen))
        return -1;
    /* Each mapped run's range: the last range that begins at or below it, when the run lies inside it. */
    if (v->nrange) /* (none: v->range is NULL, which qsort must not be given) */
        qsort(v->range, v->nrange, sizeof *v->range, by_range_addr);
    for (size_t k = 0; k < v->nrun; k++) {
        v_run *r = &v->run[k];
        size_t lo = 0, hi = v->nrange;
        while (lo < hi) {
            size_t m = (lo + hi) / 2;
            if (v->range[m].addr <= r->addr)
                lo = m + 1;
            else
                hi = m;
        }
        if (r->mapped && lo && r->addr + r->size <= v->range[lo - 1].addr + v->range[lo - 1].size)
            r->range = (int32_t)(lo - 1);
    }
    return 0;
}

/* ---- the page ---- */

extern const char hbm_view_page[]; /* tools/view/view_page.html, built in
                                      (view_page.c, made by CMake) */

#define COLUMN(f, name, n, expr)                                  \
    do {                                                          \
        fprintf(f, "\"%s\":[", name);                             \
        for (size_t k_ = 0; k_ < (n); k_++)                       \
            fprintf(f, k_ ? ",%lld" : "%lld", (long long)(expr)); \
        fputs("]", f);                                            \
    } while (0)

static long long end_or(uint32_t end, long long open) { return end == OPEN ? open : (long long)end; }

/* One run's object. */
/* The stacks of the allocations written (idx: those, in order; NULL: all), numbered for the page (0: none):
 * `"stack":[...]` closes the allocations' object's columns, then `"stacks":[texts]` and the times follow. */
static int write_stacks(FILE *f, const view_rec *v, const uint32_t *idx, size_t n)
{
    const trace_meta *m = &v->t->meta;
    uint32_t *page = calloc(m->ntexts ? m->ntexts : 1, sizeof *page), next = 1;
    uint32_t *order = malloc((m->ntexts ? m->ntexts : 1) * sizeof *order); /* page number -> text */
    if (!page || !order) {
        free(page);
        free(order);
        return -1;
    }
    fputs(",\"stack\":[", f);
    for (size_t k = 0; k < n; k++) {
        uint32_t s = v->al[idx ? idx[k] : k].stack;
        if (s && !page[s]) {
            order[next] = s;
            page[s] = next++;
        }
        fprintf(f, k ? ",%u" : "%u", s ? page[s] : 0);
    }
    fputs("]},\n\"stacks\":[\"\"", f);
    for (uint32_t k = 1; k < next; k++) {
        fputc(',', f);
        hbm__json_str_html(f, m->texts[order[k]]);
    }
    fputc(']', f);
    free(page);
    free(order);
    return 0;
}

/* `"allocs":{columns}` of the allocations idx[0 .. n) (idx NULL: all), then their stacks. */
static int write_allocs(FILE *f, const view_rec *v, const uint32_t *idx, size_t n, long long last)
{
#define AL(k) (v->al[idx ? idx[k] : (k)])
    fputs("\"allocs\":{", f);
    COLUMN(f, "start", n, AL(k_).start);
    fputc(',', f);
    COLUMN(f, "end", n, end_or(AL(k_).end, last));
    fputc(',', f);
    COLUMN(f, "addr", n, AL(k_).addr);
    fputc(',', f);
    COLUMN(f, "size", n, AL(k_).size);
    fputc(',', f);
    COLUMN(f, "requested", n, AL(k_).requested);
    fputc(',', f);
    COLUMN(f, "stream", n, AL(k_).stream);
    fputc(',', f);
    COLUMN(f, "freed", n, AL(k_).freed);
#undef AL
    return write_stacks(f, v, idx, n);
}

/* When each point happened (point j: after event x0 + j * stride - 1), microseconds after t0; -1: not known. */
static void write_times(FILE *f, const view_rec *v, size_t x0, size_t npoints, size_t stride)
{
    const trace *t = v->t;
    if (!t->meta.any_time)
        return;
    uint64_t t0 = 0;
    for (size_t i = 0; i < t->meta.n && !t0; i++)
        t0 = t->meta.time_us[i];
    fprintf(f, ",\n\"t0\":%llu,\"time\":[", (unsigned long long)t0);
    for (size_t j = 0; j < npoints; j++) {
        size_t p = x0 + j * stride;
        uint64_t us = p ? trace_time(t, p - 1) : 0;
        fprintf(f, j ? ",%lld" : "%lld", us >= t0 && us ? (long long)(us - t0) : -1LL);
    }
    fputc(']', f);
}

/* A record's lifetime and size, for choosing what a large run's page gets. */
typedef struct span {
    uint32_t start, end;
    uint64_t size;
} span;

/* The largest first (the earlier of equal ones). */
static const span *sort_sp;
static int by_size(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    if (sort_sp[a].size != sort_sp[b].size)
        return sort_sp[a].size > sort_sp[b].size ? -1 : 1;
    return (a > b) - (a < b);
}

/* The records of a large run that its page gets for a timeline: those among the TOP largest live in some
 * SLICES-th of positions x0 .. last, largest first, into idx (n entries); their number. Zoomed in, the page
 * re-chooses its bands among them, so a window inside one slice has that slice's largest. Taken in order of size,
 * a record is among a slice's TOP largest when fewer than TOP taken before it live there. */
static size_t largest_per_slice(const span *sp, size_t n, uint32_t x0, uint32_t last, uint32_t *idx)
{
    size_t count[SLICES] = {0}, m = 0;
    uint64_t width = (uint64_t)last - x0 + 1;
    for (size_t k = 0; k < n; k++)
        idx[k] = (uint32_t)k;
    sort_sp = sp;
    if (n)
        qsort(idx, n, sizeof *idx, by_size);
    for (size_t k = 0; k < n; k++) {
        const span *r = &sp[idx[k]];
        uint32_t lo = r->start > x0 ? r->start : x0, hi = r->end == OPEN || r->end > last ? last : r->end - 1;
        if (r->end <= r->start || lo > hi) /* (an empty lifetime: live nowhere) */
            continue;
        int take = 0;
        for (size_t s = (uint64_t)(lo - x0) * SLICES / width; s <= (uint64_t)(hi - x0) * SLICES / width; s++)
            take |= count[s]++ < TOP;
        if (take)
            idx[m++] = idx[k];
    }
    return m;
}

/* `"runs":{columns}` of the reserved ranges idx[0 .. n) (idx NULL: all). */
static void write_runs(FILE *f, const view_rec *v, const uint32_t *idx, size_t n, long long last)
{
#define RU(k) (v->run[idx ? idx[k] : (k)])
    fputs(",\n\"runs\":{", f);
    COLUMN(f, "start", n, RU(k_).start);
    fputc(',', f);
    COLUMN(f, "end", n, end_or(RU(k_).end, last));
    fputc(',', f);
    COLUMN(f, "addr", n, RU(k_).addr);
    fputc(',', f);
    COLUMN(f, "size", n, RU(k_).size);
    fputc(',', f);
    COLUMN(f, "stream", n, RU(k_).stream);
    fputc(',', f);
    COLUMN(f, "mapped", n, RU(k_).mapped);
    fputc(',', f);
    COLUMN(f, "range", n, RU(k_).range);
    fputs("}", f);
#undef RU
}

/* `"series":{...}`: allocated and reserved bytes, the highest of each `stride` points; while pools sleep also
 * `in_memory` (allocated less the sleeping pools' blocks) and `asleep` (those blocks), each thinned the same way. */
static void write_series(FILE *f, const view_page_info *p, size_t stride)
{
    size_t nb = (p->n + stride - 1) / stride;
    for (int which = 0; which < (p->asleep ? 4 : 2); which++) {
        static const char *const name[4] = {"allocated", "reserved", "in_memory", "asleep"};
        fprintf(f, "%s\"%s\":[", which ? "," : "\"series\":{", name[which]);
        for (size_t j = 0; j < nb; j++) {
            int64_t m = INT64_MIN;
            for (size_t k = j * stride; k < (j + 1) * stride && k < p->n; k++) {
                int64_t v = which == 0   ? p->alloc[k]
                            : which == 1 ? p->resv[k]
                            : which == 2 ? p->alloc[k] - p->asleep[k]
                                         : p->asleep[k];
                m = v > m ? v : m;
            }
            fprintf(f, j ? ",%lld" : "%lld", (long long)m);
        }
        fputc(']', f);
    }
    fputc('}', f);
}

/* A run with more allocations or points than the page holds whole: the series thinned (the highest point of each
 * `stride`), the TOP largest allocations and reserved ranges of each slice of the run (the timelines' bands), and
 * the map at moments (view_moments.c). */
static int run_json_large(FILE *f, const view_rec *v, const view_page_info *p, size_t x0, long long last)
{
    size_t stride = (p->n + LARGE_POINTS - 1) / LARGE_POINTS, nb = (p->n + stride - 1) / stride;
    fprintf(f, "\"stride\":%zu,\"allocs_total\":%zu,\n", stride, v->nal);
    write_series(f, p, stride);
    size_t most = v->nal > v->nrun ? v->nal : v->nrun;
    uint32_t *idx = malloc((most ? most : 1) * sizeof *idx);
    span *sp = malloc((most ? most : 1) * sizeof *sp);
    if (!idx || !sp) {
        free(idx);
        free(sp);
        return -1;
    }
    uint32_t end = (uint32_t)(x0 + p->n - 1);
    for (size_t k = 0; k < v->nal; k++)
        sp[k] = (span){v->al[k].start, v->al[k].end, v->al[k].size};
    size_t m = largest_per_slice(sp, v->nal, (uint32_t)x0, end, idx);
    fputs(",\n", f);
    int rc = write_allocs(f, v, idx, m, last);
    for (size_t k = 0; rc == 0 && k < v->nrun; k++)
        sp[k] = (span){v->run[k].start, v->run[k].end, v->run[k].size};
    if (rc == 0) {
        m = largest_per_slice(sp, v->nrun, (uint32_t)x0, end, idx);
        fprintf(f, ",\"runs_total\":%zu", v->nrun);
        write_runs(f, v, idx, m, last);
    }
    free(idx);
    free(sp);
    if (rc)
        return -1;
    write_times(f, v, x0, nb, stride);
    uint32_t must[2] = {(uint32_t)(x0 + p->peak_j), (uint32_t)(x0 + p->n - 1)}; /* the peak; the last moment */
    return view_moments_write(f, v->al, v->nal, v->run, v->nrun, v->asleep, v->nasleep, (uint32_t)x0,
                              (uint32_t)(x0 + p->n - 1), p->alloc, p->resv, must, 2);
}

/* `"naps":{columns}`: the sleeps and wakes (each event's position, tag, bytes, whether replayed) for the markers on
 * the charts' time axis, and `"asleep":{columns}`: the pages asleep (the map keeps their blocks there). */
static void write_naps(FILE *f, const view_rec *v, long long last)
{
    if (!v->nnap)
        return;
    const v_nap *n = v->nap;
    fputs(",\n\"naps\":{", f);
    COLUMN(f, "p", v->nnap, n[k_].p);
    fputc(',', f);
    COLUMN(f, "wake", v->nnap, n[k_].wake);
    fputc(',', f);
    COLUMN(f, "backup", v->nnap, n[k_].backup);
    fputc(',', f);
    COLUMN(f, "placed", v->nnap, n[k_].placed);
    fputc(',', f);
    COLUMN(f, "bytes", v->nnap, n[k_].bytes);
    fputc(',', f);
    COLUMN(f, "resv0", v->nnap, n[k_].resv0);
    fputc(',', f);
    COLUMN(f, "resv1", v->nnap, n[k_].resv1);
    fputs(",\"tag\":[", f);
    for (size_t k = 0; k < v->nnap; k++) {
        fputs(k ? "," : "", f);
        if (n[k].tag)
            hbm__json_str_html(f, v->t->meta.texts[n[k].tag]);
        else
            fputs("null", f);
    }
    fputs("]},\n\"asleep\":{", f);
    const v_run *z = v->asleep;
    COLUMN(f, "start", v->nasleep, z[k_].start);
    fputc(',', f);
    COLUMN(f, "end", v->nasleep, end_or(z[k_].end, last));
    fputc(',', f);
    COLUMN(f, "addr", v->nasleep, z[k_].addr);
    fputc(',', f);
    COLUMN(f, "size", v->nasleep, z[k_].size);
    fputc(',', f);
    COLUMN(f, "nap", v->nasleep, z[k_].range);
    fputc('}', f);
}

/* `"kinds":"..."`: what events from .. to-1 of the trace were, a letter each (a alloc, f free, p free requested
 * while another stream used the block, e empty_cache, s step, z a pool's sleep, w its wake, u allocations into a
 * pool from there), for the page's list of events. */
static void write_kinds(FILE *f, const trace *t, size_t from, size_t to)
{
    static const char letter[] = {[EV_ALLOC] = 'a',   [EV_FREE] = 'f',  [EV_EMPTY_CACHE] = 'e', [EV_STEP] = 's',
                                  [EV_PENDING] = 'p', [EV_SLEEP] = 'z', [EV_WAKE] = 'w',        [EV_POOL] = 'u'};
    fprintf(f, ",\n\"kinds_from\":%zu,\"kinds\":\"", from);
    for (size_t i = from; i < to && i < t->n; i++)
        fputc(t->ev[i].kind < sizeof letter && letter[t->ev[i].kind] ? letter[t->ev[i].kind] : '?', f);
    fputc('"', f);
}

static int run_json(FILE *f, const view_rec *v, const view_page_info *p)
{
    size_t x0 = p->seeded ? p->first : 1;    /* the position of the first point */
    long long last = (long long)(x0 + p->n); /* after the last point: "still live" */
    const hbm_stats *st = p->stats;
    fputs("{\"name\":", f);
    hbm__json_str_html(f, p->name);
    if (p->label) {
        fputs(",\"label\":", f);
        hbm__json_str_html(f, p->label);
    }
    fputs(",\"settings\":", f);
    hbm__json_str_html(f, p->settings);
    fputs(",\"conf\":", f);
    hbm__json_str_html(f, p->conf ? p->conf : "");
    fputs(",\"device\":", f);
    hbm__json_str_html(f, p->device);
    fprintf(f, ",\"last\":%zu,\"peak_at\":%zu,\"peak_allocated_at\":%zu", x0 + (p->n ? p->n - 1 : 0), x0 + p->peak_j,
            x0 + p->peak_alloc_j);
    fprintf(f,
            ",\"events\":%zu,\"x0\":%zu,\"seeded\":%d,\"capacity\":%llu,\"oom\":%lld,\"unfit\":%d,"
            "\"oom_message\":",
            p->events, x0, p->seeded, (unsigned long long)p->capacity, p->oom ? (long long)p->oom_event : -1LL,
            p->unfit);
    hbm__json_str_html(f, p->oom ? p->oom_message : "");
    fprintf(f,
            ",\"stats\":{\"peak_allocated\":%lld,\"peak_reserved\":%lld,\"device_mallocs\":%llu,"
            "\"device_frees\":%llu,\"device_maps\":%llu,\"device_unmaps\":%llu,\"ooms\":%lld,\"retries\":%lld},\n",
            (long long)st->allocated_bytes[0].peak, (long long)st->reserved_bytes[0].peak,
            (unsigned long long)p->dev->malloc_calls, (unsigned long long)p->dev->free_calls,
            (unsigned long long)p->dev->map_calls, (unsigned long long)p->dev->unmap_calls, (long long)st->num_ooms,
            (long long)st->num_alloc_retries);
    size_t pending = 0; /* recorded pending frees played as such: the page shows that state */
    for (size_t k = 0; k < v->nal; k++)
        pending += v->al[k].freed != 0;
    int expandable = 0; /* mapped runs: the page gives the unmapped gaps between them */
    for (size_t k = 0; k < v->nrun && !expandable; k++)
        expandable = v->run[k].mapped;
    fprintf(f, "\"pending\":%zu,\"expandable\":%d,", pending, expandable);
    if (p->n && (v->nal > p->detail || p->n > LARGE_POINTS)) {
        if (run_json_large(f, v, p, x0, last))
            return -1;
        write_naps(f, v, last);
        fputs("}", f);
        return 0;
    }
    write_series(f, p, 1);
    fputs(",\n", f);
    if (write_allocs(f, v, NULL, v->nal, last))
        return -1;
    write_times(f, v, x0, p->n, 1);
    write_runs(f, v, NULL, v->nrun, last);
    write_naps(f, v, last);
    write_kinds(f, v->t, p->first, p->oom ? p->oom_event + 1 : x0 + p->n - 1);
    fputs("}", f);
    return 0;
}

int view_html_write(FILE *f, const view_rec *const *v, const view_page_info *p, size_t n)
{
    const char *tpl = hbm_view_page, *at = strstr(tpl, "/*HBM_DATA*/");
    if (!at)
        return -1;
    fwrite(tpl, 1, (size_t)(at - tpl), f);
    fputs("{\"runs\":[", f);
    for (size_t k = 0; k < n; k++) {
        if (k)
            fputs(",\n", f);
        if (run_json(f, v[k], &p[k]))
            return -1;
    }
    fputs("]}", f);
    at += strlen("/*HBM_DATA*/");
    fputs(at, f);
    return ferror(f) ? -1 : 0;
}
