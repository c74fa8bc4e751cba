/*
 * step_plan.c: the hbm_step_plan policy, for devices without virtual memory.
 * A training step allocates the same tensors in the same order every time
 * (STAlloc, EuroSys'26, measured it on Megatron; the shared CPU trace repeats
 * with a period of 1000 allocations). So, with the user marking the steps
 * (hbm_step after optimizer.step), the allocator records each step's
 * allocations of one stream (size, and the span of allocations each lives
 * over) while the caching policy serves them, plans offsets for one step in
 * one region (plan_offsets, at a bounded cost: no two buffers that live at the
 * same time overlap), reserves that region in one device allocation and
 * serves allocation k of each later step at its planned offset when it fits
 * and that range is free. Everything else falls back to the caching policy:
 * allocations the plan has no place for (kept across steps), sizes past the
 * planned one, ranges still in use (a late free, record_stream's events).
 *
 * The plans, in the order they come:
 * - at the end of step 1 (the first after the warm-up step 0): step 1's
 *   allocations freed within it; those alive at the boundary are not planned
 *   (kept for good, or freed in the next step: not known yet);
 * - at the end of step 2, when it had as many allocations as step 1: step 1
 *   again, cyclically: a tensor allocated late in a step and freed early in
 *   the next (the loss, a gradient bucket) lives over [start, end of step) and
 *   [0, wrap) of the next, and gets a place; sizes are the largest seen at
 *   each position over the steps of that length (the envelope, for
 *   variable-length batches);
 * - later, whenever a step's misses pass 1/32 of its allocations: again, from
 *   the last two steps (with a back-off while re-planning does not help).
 * Plans are kept per step shape (the steps with as many allocations, up to
 * four: a training step, an evaluation step, ...); the next step is served
 * with the plan of the shape the last one had, and a step whose first
 * allocations are another kept shape's changes to that shape's plan. A step
 * within a few allocations of a kept shape (one skipped or added) uses that
 * shape's plan and changes nothing of it. A plan higher than the region gets a
 * new one: the old is given back, or, while blocks of it are in use, becomes
 * an ordinary segment of the caching policy, released once they are freed.
 *
 * A job that never calls hbm_step has its steps found: at 1024, 2048, 4096,
 * ... allocations the allocator looks for the period of its allocation
 * sequence (step_period.c, the keys of `hbmalloc replay --steps auto`); once found,
 * a boundary falls every period. The first hbm_step call ends that.
 *
 * Owns the recording, the choice of plan and the serving order (the lookahead);
 * the region is arena.c's, the cut at a planned offset hbm__plan_block's.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/device.h"
#include "core/segments.h"
#include "policy/step_period.h"
#include "policy/arena.h"
#include "policy/lifetime_sweep.h"
#include "util/util.h"

#define LIVE UINT32_MAX       /* not freed yet */
#define NEXT (UINT32_MAX - 1) /* freed during the next step, at its allocation `wrap` */
#define MAX_STEP_ALLOCS (1u << 22)
#define LOOKAHEAD 4             /* planned positions searched past the expected one for an exact size, */
#define LOOKBACK 2              /* and before it */
#define PLAN_PAIRS 400000000ull /* pair tests the greedy placements may make at one boundary (plan_offsets) */
#define SHAPES 4                /* step shapes kept with their plans */
#define PREFIX 8                /* first allocations by which a step under way picks another shape's plan */
#define DETECT_FROM 1024        /* unmarked steps: the period is looked for at 1024, 2048, 4096, ... allocations */
#define QUIET_AFTER 2           /* clean steps before recording stops (the steady state) */

typedef struct step_rec {
    uint64_t size;
    uint32_t end;  /* allocations of its step made when it was freed, or LIVE, or NEXT */
    uint32_t wrap; /* NEXT: allocations of the next step made when it was freed */
} step_rec;

/* A step shape (the steps with n allocations: a training step, an evaluation step, ...) and its plan. */
typedef struct shape {
    size_t n;                /* 0: the slot is free */
    uint64_t prefix[PREFIX]; /* the first sizes of its last step: how a step under way is recognised */
    uint64_t *env;           /* the largest size seen at each position */
    uint64_t *off, *size;    /* its plan (off NULL: none yet); size 0: a position not planned */
    uint32_t *below;         /* plan_below for it */
    uint64_t height;
    bool cyclic;            /* the plan covers the tensors alive across a boundary */
    uint32_t used;          /* the step it last ended, for eviction */
    uint32_t backoff, wait; /* steps of this shape to wait before the next re-plan (on misses, or after a plan
                               refused as larger than the cache: never_above_the_cache) */
    size_t cache_reserved;  /* what was reserved when its last plan that was not cyclic was made */
} shape;

typedef struct hbm__stepplan {
    hbm__region_policy rp; /* the interface, the region asked for, the plan in force (a shape's) */
    hbm_stream stream;     /* the stream of the first allocation: the only one recorded and served */
    bool have_stream;
    uint32_t step;    /* hbm_step calls so far: the number of the step under way */
    step_rec *rec[2]; /* by step parity: the step under way and the one before */
    size_t n[2], cap[2];
    bool overflow[2]; /* more than MAX_STEP_ALLOCS allocations: not planned */
    shape shapes[SHAPES];
    int serving;           /* the shape whose plan is in force (the plan, rp.plan, shows it), -1: none */
    size_t auto_period;    /* not marked: the period found in the allocations (0: none yet), a boundary every one */
    size_t check_at;       /* not marked: allocations of the step at which a boundary falls or the period is looked
                             for; SIZE_MAX once hbm_step was called (the job marks its steps) */
    bool planned;          /* some shape has a plan */
    int64_t misses_before; /* plan_misses when the step began */
    uint32_t settle;       /* boundaries after a new plan at which cached segments are still released */
    /* The steady state: after QUIET_AFTER whole recorded steps that a cyclic plan served without a miss, steps are
     * no longer recorded (only counted: sp->n), until a step misses; then the next one is recorded again, and a
     * re-plan, if one is due, comes from it. */
    bool quiet;        /* the step under way is not recorded */
    uint32_t clean;    /* recorded steps in a row of one shape served without a miss by its cyclic plan */
    int last_served;   /* the shape served in the step before */
    size_t inexact;    /* allocations of this step not of their planned size (a step of other lengths) */
    bool said_refused; /* a plan refused (never_above_the_cache): said once in hbm_warning */
} hbm__stepplan;

#define SP(a) ((hbm__stepplan *)(a)->pol)
#define PL(a) (&SP(a)->rp.plan)

static void step_plan_teardown(hbm_allocator *a)
{
    hbm__stepplan *sp = SP(a);
    free(sp->rec[0]);
    free(sp->rec[1]);
    for (int i = 0; i < SHAPES; i++) {
        shape *h = &sp->shapes[i];
        free(h->env);
        free(h->off);
        free(h->size);
        free(h->below);
    }
    hbm__plan_indexes_free(&sp->rp.plan); /* the plan itself showed a shape's arrays, freed above */
    free(sp);
    a->pol = NULL;
}

/* The step plan's note on a block (record): the step it was allocated in, + 1 (0: not recorded), and its index. */
static inline uint32_t note_step(const hbm__block *b) { return (uint32_t)(b->note >> 32); }
static inline uint32_t note_k(const hbm__block *b) { return (uint32_t)b->note; }

/* Records the request as this step's next allocation: its tag for the block's note (0: not recorded), the step + 1
 * in the high 32 bits and the allocation's index in the step in the low ones (note_step, note_k). */
static uint64_t record(hbm__stepplan *sp, size_t size)
{
    int cur = sp->step & 1;
    size_t k = sp->n[cur];
    if (__builtin_expect(k >= sp->cap[cur], 0)) { /* room already: no call (this is every allocation's path) */
        if (sp->overflow[cur] || k >= MAX_STEP_ALLOCS ||
            hbm__grow((void **)&sp->rec[cur], &sp->cap[cur], k + 1, sizeof(step_rec))) {
            sp->overflow[cur] = true; /* no plan from this step; the allocation itself goes on */
            return 0;
        }
        if (sp->cap[cur] > MAX_STEP_ALLOCS) /* grown past the bound: the test above stops there all the same */
            sp->cap[cur] = MAX_STEP_ALLOCS;
    }
    sp->rec[cur][k] = (step_rec){size, LIVE, 0};
    sp->n[cur] = k + 1;
    return ((uint64_t)(sp->step + 1) << 32) | k;
}

static void serve(hbm_allocator *a, int i);
static int shape_for_prefix(hbm__stepplan *sp, size_t k);
static hbm_status boundary(hbm_allocator *a);

/* A job that does not mark its steps: the period of its allocations so far (all in step 0), as --steps auto finds
 * it (hbm_step_period). Found (at least twice over, over half of the allocations so far, of HBM_MIN_STEP allocations
 * or more): a boundary now, and one every period from here. */
static void detect(hbm_allocator *a)
{
    hbm__stepplan *sp = SP(a);
    const step_rec *r = sp->rec[0];
    size_t n = sp->n[0], len;
    int by;
    uint64_t *size = malloc(n * sizeof *size);
    uint32_t *freed = malloc(n * sizeof *freed);
    size_t period = 0;
    if (size && freed) { /* else looked for again at the next power of two */
        for (size_t k = 0; k < n; k++)
            size[k] = r[k].size, freed[k] = r[k].end;
        /* None, or the layers of one step (their live bytes grow or shrink): looked for again at the next power
         * of two. */
        period = hbm_step_period(size, freed, n, &len, &by, NULL);
    }
    free(size);
    free(freed);
    if (period) {
        sp->auto_period = period;
        sp->check_at = period;
        a->stats.steps++;
        (void)boundary(a); /* out of host memory is said in hbm_last_error; allocation goes on */
    }
}

/* Whether position j's planned range holds no live block now (the live map at its start says; a block beginning
 * below it and reaching in is found by hbm__plan_block's own check). */
static bool planned_range_free(hbm_allocator *a, size_t j)
{
    return !hbm__ptrmap_get(&a->live, a->region_seg->addr + PL(a)->off[j]);
}

static hbm__block *step_plan_serve(hbm_allocator *a, hbm_stream stream, size_t size, uint64_t *tag)
{
    hbm__stepplan *sp = SP(a);
    if (__builtin_expect(!sp->have_stream, 0)) {
        sp->stream = stream;
        sp->have_stream = true;
    }
    if (stream != sp->stream)
        return NULL;
    size_t *n = &sp->n[sp->step & 1];
    if (__builtin_expect(*n >= sp->check_at, 0)) { /* steps found, not marked: a boundary, or the period looked for */
        if (sp->auto_period) {
            a->stats.steps++;
            (void)boundary(a);
        } else {
            detect(a);
            if (!sp->auto_period)
                sp->check_at = 2 * *n; /* looked for again at the next power of two */
        }
        n = &sp->n[sp->step & 1];
    }
    if (sp->quiet && *n >= PREFIX) /* the steady state: counted, not recorded (but for the first allocations, by
                                      which a step's shape is recognised) */
        ++*n;
    else
        *tag = record(sp, size);
    size_t k = PL(a)->next;
    if (__builtin_expect(k < PL(a)->n && size == PL(a)->size[k] && k >= PREFIX && a->region_seg, 1)) {
        PL(a)->next = k + 1; /* the steady state: the size planned at the position expected */
        return hbm__plan_take(a, PL(a), k, size);
    }
    if (!sp->planned)
        return NULL;
    if (SP(a)->rp.wanted)
        hbm__region_make(a, stream);
    if (k < PREFIX && (k >= PL(a)->n || size != PL(a)->size[k])) { /* the step begins unlike this shape */
        int other = shape_for_prefix(sp, k);
        if (other >= 0)
            serve(a, other);
    }
    if (k >= PL(a)->n || !PL(a)->size[k]) {
        PL(a)->next++;
        a->stats.plan_unplanned++;
        return NULL;
    }
    if (!a->region_seg) { /* the device could not give the region (hbm_warning says so) */
        PL(a)->next++;
        a->stats.plan_misses++;
        return NULL;
    }
    if (size != PL(a)->size[k]) { /* not the size planned here: a position skipped or one inserted before? */
        sp->inexact++;
        size_t lo = k >= LOOKBACK ? k - LOOKBACK : 0;
        for (size_t j = lo; j < PL(a)->n && j <= k + LOOKAHEAD; j++)
            if (j != k && PL(a)->size[j] == size && planned_range_free(a, j)) {
                k = j; /* served there, and the step's count follows from there */
                break;
            }
        if (size > PL(a)->size[k]) {
            PL(a)->next = k + 1;
            a->stats.plan_misses++;
            return NULL;
        }
    }
    PL(a)->next = k + 1;
    return hbm__plan_take(a, PL(a), k, size); /* counts the hit or the miss */
}

static void step_plan_freed(hbm_allocator *a, hbm__block *b)
{
    hbm__stepplan *sp = SP(a);
    uint32_t s = note_step(b) - 1, k = note_k(b); /* the engine clears the note after */
    int cur = sp->step & 1;
    if (s == sp->step && k < sp->n[cur]) {
        sp->rec[cur][k].end = (uint32_t)sp->n[cur];
    } else if (s + 1 == sp->step && k < sp->n[!cur] && sp->rec[!cur][k].end == LIVE) {
        sp->rec[!cur][k].end = NEXT;
        sp->rec[!cur][k].wrap = (uint32_t)sp->n[cur];
    }
}

/* Shows shape i's plan as the one in force (rp.plan, which hbm__plan_take serves). */
static void serve(hbm_allocator *a, int i)
{
    shape *h = &SP(a)->shapes[i];
    SP(a)->serving = i;
    PL(a)->off = h->off;
    PL(a)->size = h->size;
    PL(a)->below = h->below;
    PL(a)->n = h->off ? h->n : 0;
    hbm__plan_lazy(a, PL(a)); /* plan_last's hints were the other plan's */
}

/* Frees shape h's plan (off NULL: none). */
static void shape_plan_free(shape *h)
{
    free(h->off);
    free(h->size);
    free(h->below);
    h->off = NULL, h->size = NULL, h->below = NULL;
}

static void shape_clear(shape *h)
{
    free(h->env);
    shape_plan_free(h);
    memset(h, 0, sizeof *h);
}

/* No plan in force: the region is coalesced. */
static void stop_serving(hbm_allocator *a)
{
    SP(a)->serving = -1, PL(a)->n = 0, PL(a)->off = PL(a)->size = NULL, PL(a)->below = NULL;
    hbm__plan_lazy(a, PL(a));
}

/* The region's height: the highest plan kept. Returns whether any is. */
static bool region_height(hbm_allocator *a)
{
    bool any = false;
    PL(a)->height = 0;
    for (int i = 0; i < SHAPES; i++)
        if (SP(a)->shapes[i].off) {
            any = true;
            if (SP(a)->shapes[i].height > PL(a)->height)
                PL(a)->height = SP(a)->shapes[i].height;
        }
    return any;
}

/* The shape of the step `src`: the one with as many allocations (*exact), else one within a few of it (a step
 * with an allocation skipped or added: *exact false, nothing updated), else a new one (in a free slot, or the least
 * recently used one's). The exact or new one's envelope and prefix take in the step. NULL: out of host memory. */
static shape *shape_of(hbm_allocator *a, int src, bool *exact)
{
    hbm__stepplan *sp = SP(a);
    size_t n = sp->n[src], near = n / 64 > 2 ? n / 64 : 2;
    int at = -1, close = -1;
    for (int i = 0; i < SHAPES && at < 0; i++) {
        size_t m = sp->shapes[i].n;
        if (m == n)
            at = i;
        else if (m && (m > n ? m - n : n - m) <= near && sp->shapes[i].off)
            close = i;
    }
    *exact = at >= 0 || close < 0;
    if (at < 0 && close >= 0) {
        sp->shapes[close].used = sp->step;
        return &sp->shapes[close];
    }
    if (at < 0) {
        at = 0;
        for (int i = 1; i < SHAPES; i++)
            if (!sp->shapes[i].n || (sp->shapes[at].n && sp->shapes[i].used < sp->shapes[at].used))
                at = sp->shapes[at].n ? i : at;
        if (sp->serving == at)
            stop_serving(a);
        shape_clear(&sp->shapes[at]);
        shape *h = &sp->shapes[at];
        if (!(h->env = calloc(n ? n : 1, sizeof *h->env)))
            return NULL;
        h->n = n;
    }
    shape *h = &sp->shapes[at];
    for (size_t k = 0; k < n; k++)
        if (sp->rec[src][k].size > h->env[k])
            h->env[k] = sp->rec[src][k].size;
    for (size_t k = 0; k < PREFIX; k++)
        h->prefix[k] = k < n ? sp->rec[src][k].size : 0;
    h->used = sp->step;
    return h;
}

/* A step under way whose first allocations are not its expected shape's: another shape whose last step began
 * with exactly these sizes (the k + 1 recorded so far), or -1. */
static int shape_for_prefix(hbm__stepplan *sp, size_t k)
{
    const step_rec *r = sp->rec[sp->step & 1];
    for (int i = 0; i < SHAPES; i++) {
        const shape *h = &sp->shapes[i];
        if (i == sp->serving || !h->off || h->n <= k)
            continue;
        size_t j = 0;
        while (j <= k && h->prefix[j] == r[j].size)
            j++;
        if (j > k)
            return i;
    }
    return -1;
}

/* The device memory the steps would hold with a plan of `height` that places the positions where size[k] is not 0:
 * the region, and the segments that keep a block the plan does not place (the parameters', the optimizer's: what is
 * live at this boundary, but for the tensors of this step the plan places, carried over it). With expandable
 * segments, their pages under such blocks only. The segments that hold nothing else are given back at the next
 * boundaries (want_region). */
static uint64_t footprint_with(hbm_allocator *a, uint64_t height, const uint64_t *size, size_t n)
{
    uint32_t step = SP(a)->step + 1; /* the tag of a block allocated in the step just ended */
    uint64_t bytes = height;
    for (const hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg)) {
        if (seg == a->region_seg)
            continue;
        uintptr_t counted = seg->addr; /* expandable: the pages below this are counted */
        for (const hbm__block *b = seg->head; b; b = b->next) {
            bool held = b->allocated || b->event_count > 0;
            if (!held || (note_step(b) == step && note_k(b) < n && size[note_k(b)]))
                continue;
            if (!seg->expandable) {
                bytes += seg->size;
                break;
            }
            uintptr_t lo = seg->addr + (b->addr - seg->addr) / seg->page * seg->page;
            uintptr_t hi = seg->addr + (b->addr + b->size - seg->addr + seg->page - 1) / seg->page * seg->page;
            if (lo < counted)
                lo = counted;
            if (hi > lo)
                bytes += hi - lo, counted = hi;
        }
    }
    return bytes;
}

/* Never above the cache: a plan whose steps would hold more than the caching policy does is not used. The bar: for
 * the cyclic plan that follows a plan that is not (made before the tensors carried over a boundary are known, not
 * judged, and replaced a step later), what was reserved when that one was made (the first: the caching policy's
 * footprint); for a later one (the steps changed), that or what is reserved now, whichever is more (the misses grew
 * the cache as they would have without a plan). A plan in force that is not cyclic is dropped with its successor: its region drains, and the cached segments are given back at
 * the next boundaries so that the cache grows again as it would have. Tried again after 1, 2, 4, ... 64 steps
 * (boundary); said once. */
static bool never_above_the_cache(hbm_allocator *a, shape *h, uint64_t height, const uint64_t *size, size_t n)
{
    hbm__stepplan *sp = SP(a);
    uint64_t with = footprint_with(a, height, size, n), bar = h->cache_reserved;
    if (!(h->off && !h->cyclic) && a->total_reserved > bar)
        bar = a->total_reserved;
    if (with <= bar)
        return true;
    h->wait = h->backoff;
    h->backoff = h->backoff ? (h->backoff < 64 ? h->backoff * 2 : 64) : 1;
    if (!sp->said_refused) {
        char need[32], have[32], text[300];
        hbm__format_size(with, need, sizeof need);
        hbm__format_size(bar, have, sizeof have);
        snprintf(text, sizeof text,
                 "hbm_step_plan: with a plan, steps of %zu allocations would hold %s, more than the %s the caching "
                 "policy held: the caching policy serves them",
                 n, need, have);
        hbm__warning_add(a, text);
        sp->said_refused = true;
    }
    if (h->off && !h->cyclic) { /* the first plan, in force: dropped */
        shape_plan_free(h);
        if (sp->serving == (int)(h - sp->shapes))
            stop_serving(a);
        sp->planned = region_height(a);
        if (!sp->planned && a->region_seg)
            hbm__region_retire(a), PL(a)->cursor = 0;
        sp->settle = 3;
    }
    return false;
}

/* Offsets for the m lifetimes of a step of n allocations, at a cost bounded by PLAN_PAIRS pair tests whatever m:
 * the sweep (lifetime_sweep.c, O(m log m)) always; the offline search's eight greedy orders (and, up to 64
 * allocations, its improvement search) while they fit in PLAN_PAIRS (steps of up to about 9,400 allocations);
 * beyond, its greedy placement by size while that fits (up to about 28,000). The lowest plan wins: the sweep is
 * cheap but fragments where sizes vary from layer to layer (PERFORMANCE.md, the step plan's planning). */
static hbm_status plan_offsets(hbm_lifetime *l, size_t m, uint32_t n, uint64_t *height)
{
    hbm_status rc = hbm__plan_sweep(l, m, n, height);
    uint64_t pairs = (uint64_t)m * m / 2; /* at most, per greedy evaluation */
    hbm_lifetime *l2 = rc == HBM_OK && m >= 2 && pairs <= PLAN_PAIRS ? malloc(m * sizeof *l2) : NULL;
    if (!l2) /* out of host memory for the greedy: the sweep's plan stands */
        return rc;
    memcpy(l2, l, m * sizeof *l2);
    uint64_t h = UINT64_MAX;
    hbm_plan_info info;
    if (9 * pairs <= PLAN_PAIRS) {
        if (hbm_plan_lifetimes(l2, m, m <= 64 ? PLAN_PAIRS / pairs - 8 : 1, 1, &info) == HBM_OK)
            h = info.height;
    } else if (hbm__plan_by_size(l2, m, PLAN_PAIRS, &h) != HBM_OK) {
        h = UINT64_MAX;
    }
    if (h < *height) {
        memcpy(l, l2, m * sizeof *l);
        *height = h;
    }
    free(l2);
    return HBM_OK;
}

/* Plans the step `src`: its allocations freed within it and, when cyclic (src is the step before the one just
 * ended), those freed early in the next. Replaces the plan in force; HBM_ERR_NOMEM leaves it. */
static hbm_status make_plan(hbm_allocator *a, shape *h, int src, bool cyclic)
{
    hbm__stepplan *sp = SP(a);
    size_t n = sp->n[src];
    const step_rec *r = sp->rec[src];
    hbm_lifetime *l = malloc((n ? n : 1) * sizeof *l);
    uint32_t *pos = malloc((n ? n : 1) * sizeof *pos);
    uint32_t *start = calloc(n ? n : 1, sizeof *start), *end = calloc(n ? n : 1, sizeof *end);
    uint64_t *off = calloc(n ? n : 1, sizeof *off), *size = calloc(n ? n : 1, sizeof *size);
    hbm_status rc = HBM_ERR_NOMEM;
    size_t m = 0;
    if (!l || !pos || !start || !end || !off || !size)
        goto done;
    for (size_t k = 0; k < n; k++) {
        uint32_t e = r[k].end, wrap = 0;
        if (e == NEXT && cyclic && r[k].wrap <= k) {
            e = (uint32_t)n;
            wrap = r[k].wrap;
        } else if (e == NEXT || e == LIVE) {
            continue; /* kept across steps (or, not cyclic, not known yet): the caching policy's */
        }
        uint64_t sz = h->env[k] > r[k].size ? h->env[k] : r[k].size;
        l[m] = (hbm_lifetime){.size = sz, .start = (uint32_t)k, .end = e, .wrap = wrap};
        pos[m++] = (uint32_t)k;
    }
    uint64_t height;
    if (!cyclic) /* the bar for the cyclic plan that follows (never_above_the_cache) */
        h->cache_reserved = a->total_reserved;
    if ((rc = plan_offsets(l, m, (uint32_t)n, &height)) != HBM_OK)
        goto done;
    for (size_t i = 0; i < m; i++)
        size[pos[i]] = l[i].size;
    if ((cyclic || h->off) && !never_above_the_cache(a, h, height, size, n))
        goto done; /* rc HBM_OK */
    for (size_t i = 0; i < m; i++) {
        off[pos[i]] = l[i].offset;
        size[pos[i]] = l[i].size;
        start[pos[i]] = l[i].start;
        end[pos[i]] = l[i].wrap ? (uint32_t)n : l[i].end;
    }
    PL(a)->off = off; /* for hbm__plan_neighbours, which writes PL(a)->below */
    PL(a)->size = size;
    PL(a)->n = n;
    PL(a)->below = NULL;
    if (hbm__plan_neighbours(PL(a), start, end)) {
        rc = HBM_ERR_NOMEM;
        free(PL(a)->below); /* made when only its scratch could not be */
        PL(a)->below = NULL;
        int i = sp->serving;
        sp->serving = -1;
        if (i >= 0)
            serve(a, i);
        else
            PL(a)->off = PL(a)->size = NULL, PL(a)->n = 0;
        goto done;
    }
    shape_plan_free(h);
    h->off = off;
    h->size = size;
    h->below = PL(a)->below;
    h->height = height;
    h->cyclic = cyclic;
    off = size = NULL;
    serve(a, (int)(h - sp->shapes));
    (void)region_height(a);
    sp->planned = m > 0 || sp->planned;
    a->stats.plan_replans++;
    rc = HBM_OK;
done:
    free(l);
    free(pos);
    free(start);
    free(end);
    free(off);
    free(size);
    return rc;
}

/* The region for the plan in force: reserved at the next allocation, in place of the cached segments; a larger
 * one than the region held replaces it once no block of it is in use. */
static void want_region(hbm_allocator *a, bool new_plan)
{
    if (!SP(a)->planned) {
        if (SP(a)->settle) { /* a plan dropped (never_above_the_cache): the cache grows again as without it */
            SP(a)->settle--;
            hbm__release_cached(a);
        }
        return;
    }
    if (a->region_seg && a->region_seg->size < PL(a)->height)
        hbm__region_retire(a), PL(a)->cursor = 0;
    /* What the old plan missed, and the tensors carried over the boundary before the new plan placed them, were
     * served from segments: once freed they are cached for nothing. Released at the new plan's first two
     * boundaries; later, a segment freed and made again every step would cost device calls the cache saves. */
    if (new_plan)
        SP(a)->settle = 3;
    if (SP(a)->settle) {
        SP(a)->settle--;
        hbm__release_cached(a);
    }
    if (!a->region_seg)
        SP(a)->rp.wanted = true;
}

static hbm_status boundary(hbm_allocator *a)
{
    hbm__stepplan *sp = SP(a);
    int cur = sp->step & 1, prev = !cur;
    size_t n = sp->n[cur];
    hbm_status rc = HBM_OK;
    int64_t misses = a->stats.plan_misses - sp->misses_before, replans = a->stats.plan_replans;
    bool same = sp->step >= 2 && !sp->overflow[prev] && sp->n[prev] == n;
    shape *h;
    bool exact;
    bool recorded = !sp->quiet;
    if (sp->quiet) {
        sp->overflow[cur] = true; /* no records: never the step a plan is made from */
        if ((uint64_t)misses > 0) /* it missed: the next step is recorded, and a re-plan (if due) made from it */
            sp->quiet = false, sp->clean = 0;
    } else if (sp->step >= 1 && !sp->overflow[cur] && n) {
        if (!(h = shape_of(a, cur, &exact))) {
            rc = HBM_ERR_NOMEM;
        } else if (!exact) { /* a known shape with an allocation more or less: its plan stays */
            if (sp->serving != (int)(h - sp->shapes))
                serve(a, (int)(h - sp->shapes));
        } else if ((!h->off || (!h->cyclic && same)) && h->wait) {
            h->wait--; /* a plan refused lately (never_above_the_cache): not made again yet */
        } else if (!h->off || (!h->cyclic && same)) {
            rc = make_plan(a, h, same ? prev : cur, same);
        } else if (sp->serving != (int)(h - sp->shapes)) {
            serve(a, (int)(h - sp->shapes)); /* the next step is likely of the shape this one had */
        } else if ((uint64_t)misses > n / 32 + 1) {
            if (h->wait == 0) {
                rc = make_plan(a, h, same ? prev : cur, same);
                h->wait = h->backoff;
                h->backoff = h->backoff ? (h->backoff < 64 ? h->backoff * 2 : 64) : 1;
            } else {
                h->wait--;
            }
        } else {
            h->backoff = 0;
            h->wait = 0;
        }
    }
    if (recorded) { /* steady: a cyclic plan in force served this whole step without a miss */
        bool steady = rc == HBM_OK && misses == 0 && !sp->inexact && sp->serving >= 0 &&
                      sp->serving == sp->last_served && sp->shapes[sp->serving].cyclic &&
                      sp->shapes[sp->serving].n == n &&
                      a->stats.plan_replans == replans; /* (steps of changing lengths are recorded all along) */
        sp->clean = steady ? sp->clean + 1 : 0;
        sp->quiet = sp->clean >= QUIET_AFTER;
    }
    sp->last_served = sp->serving;
    sp->inexact = 0;
    if (rc != HBM_OK)
        hbm__set_error(a,
                       "hbm_step: out of host memory recording or planning step %u (%zu allocations); the plan "
                       "in force, if any, stays",
                       sp->step, n);
    want_region(a, a->stats.plan_replans != replans);
    /* The next step: its records overwrite the step before this one. */
    sp->step++;
    sp->n[prev] = 0;
    sp->overflow[prev] = false;
    PL(a)->next = 0;
    sp->misses_before = a->stats.plan_misses;
    return rc;
}

/* hbm_step (a->lock held; counted in steps by the caller). */
static hbm_status step_plan_step(hbm_allocator *a)
{
    hbm__stepplan *sp = SP(a);
    if (sp->check_at != SIZE_MAX) { /* marked from now on: the period found, if any, is dropped */
        sp->auto_period = 0;
        sp->check_at = SIZE_MAX;
    }
    /* A boundary may give segments back (a retired region, cached misses). Under a framework's launch queue the wait
     * for the device must be made here, with the lock open (hbm__dev_quiesce_open); elsewhere the release waits
     * itself, only when it happens. */
    if (hbm__framework_queue(a))
        hbm__dev_quiesce_open(a);
    return boundary(a);
}

/* The step plan missed and the device is full: the plan's region has room (best fit), not an OOM. */
static hbm__block *step_plan_rescue(hbm_allocator *a, hbm_stream stream, size_t size)
{
    return a->region_seg && stream == a->region_stream ? hbm__region_best_fit(a, stream, size) : NULL;
}

static const hbm__policy_ops step_plan_ops = {
    .name = "hbm_step_plan",
    .serve = step_plan_serve,
    .freed = step_plan_freed,
    .rescue = step_plan_rescue,
    .step = step_plan_step,
    .stats = hbm__region_policy_stats,
    .validate = hbm__region_policy_validate,
    .teardown = step_plan_teardown,
};

hbm_status hbm__step_plan_policy_create(hbm_allocator *a, char *err, size_t errlen)
{
    hbm__stepplan *sp = (hbm__stepplan *)hbm__region_policy_new(a, &step_plan_ops, sizeof *sp);
    if (!sp) {
        snprintf(err, errlen, "out of host memory");
        return HBM_ERR_NOMEM;
    }
    sp->rp.steps = true;
    sp->serving = -1;
    sp->check_at = DETECT_FROM;
    return HBM_OK;
}
