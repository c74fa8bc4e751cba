/*
 * plan.c: see plan.h. Owns the placement search; knows traces only as a list
 * of sized lifetimes and writes plans as text.
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

typedef struct search {
    const plan_buf *b;
    size_t n;
    uint32_t *byoff;  /* placed buffers by offset */
    uint64_t *off;    /* offsets of the evaluation under way */
    uint64_t *best;   /* offsets of the best evaluation so far */
    uint64_t height;  /* of best */
    uint64_t evaluations;
} search;

enum { BEST_FIT = 0, FIRST_FIT = 1 };

static int overlap(const plan_buf *x, const plan_buf *y) { return x->start < y->end && y->start < x->end; }

/* Places the buffers in `order`, each at the best- or first-fitting gap among the placed buffers that live at
 * the same time as it, else above them all. Returns the height; s->off has the offsets. */
static uint64_t greedy(search *s, const uint32_t *order, int fit, uint64_t give_up)
{
    size_t m = 0;
    uint64_t height = 0;
    for (size_t i = 0; i < s->n; i++) {
        uint32_t k = order[i];
        const plan_buf *x = &s->b[k];
        uint64_t cur = 0, at = UINT64_MAX, gap_best = UINT64_MAX;
        for (size_t j = 0; j < m; j++) {
            uint32_t p = s->byoff[j];
            if (!overlap(x, &s->b[p]))
                continue;
            if (s->off[p] > cur && s->off[p] - cur >= x->size) {
                uint64_t gap = s->off[p] - cur;
                if (fit == FIRST_FIT) {
                    at = cur;
                    break;
                }
                if (gap < gap_best)
                    gap_best = gap, at = cur;
            }
            uint64_t top = s->off[p] + s->b[p].size;
            if (top > cur)
                cur = top;
        }
        if (at == UINT64_MAX)
            at = cur;
        s->off[k] = at;
        if (at + x->size > height && (height = at + x->size) >= give_up)
            return height; /* already no better than the best: stop early */
        size_t lo = 0, hi = m; /* insert by offset */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (s->off[s->byoff[mid]] <= at)
                lo = mid + 1;
            else
                hi = mid;
        }
        memmove(s->byoff + lo + 1, s->byoff + lo, (m - lo) * sizeof *s->byoff);
        s->byoff[lo] = k;
        m++;
    }
    return height;
}

/* One evaluation: keeps the offsets when the height is the best so far (ties kept too, to move along plateaus). */
static int evaluate(search *s, const uint32_t *order, int fit)
{
    s->evaluations++;
    uint64_t h = greedy(s, order, fit, s->height == UINT64_MAX ? UINT64_MAX : s->height + 1);
    if (h > s->height)
        return 0;
    s->height = h;
    memcpy(s->best, s->off, s->n * sizeof *s->off);
    return 1;
}

/* ---- the eight orders ---- */

typedef struct order_key {
    uint64_t key, size;
    uint32_t start, k;
} order_key;

static uint64_t lifetime(const plan_buf *x) { return (uint64_t)(x->end - x->start); }

static int cmp_order(const void *pa, const void *pb)
{
    const order_key *x = pa, *y = pb;
    if (x->key != y->key)
        return x->key > y->key ? -1 : 1; /* larger first */
    if (x->size != y->size)
        return x->size > y->size ? -1 : 1;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* The buffers in one of the four orders. */
static void sort_by(const search *s, int which, order_key *keys, uint32_t *out)
{
    for (size_t i = 0; i < s->n; i++) {
        const plan_buf *x = &s->b[i];
        uint64_t k = which == 0 ? x->size : which == 1 ? x->size * lifetime(x) : which == 2 ? lifetime(x)
                                                                               : UINT32_MAX - x->start;
        keys[i] = (order_key){k, x->size, x->start, (uint32_t)i};
    }
    qsort(keys, s->n, sizeof *keys, cmp_order);
    for (size_t i = 0; i < s->n; i++)
        out[i] = keys[i].k;
}

static const char *const order_names[4] = {"size", "size*lifetime", "lifetime", "start"};

static uint64_t rng(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Moves order[from] to position `to` (< from), shifting the ones between down. */
static void move_earlier(uint32_t *order, size_t from, size_t to)
{
    uint32_t k = order[from];
    memmove(order + to + 1, order + to, (from - to) * sizeof *order);
    order[to] = k;
}

/* 0; -1 out of host memory; -2 sizes no plan can hold (their sum passes 2^62: every offset and height is at most
 * that sum, so nothing after this check can overflow). */
static int build_buffers(const trace *t, plan *p)
{
    uint32_t *of_slot = malloc((t->nslots ? t->nslots : 1) * sizeof *of_slot);
    p->b = calloc(t->allocs ? t->allocs : 1, sizeof *p->b);
    if (!of_slot || !p->b || t->n >= UINT32_MAX) {
        free(of_slot);
        return -1;
    }
    uint64_t live = 0, live_rounded = 0, total = 0;
    const uint64_t limit = (uint64_t)1 << 62;
    for (size_t e = 0; e < t->n; e++) {
        const trace_event *ev = &t->ev[e];
        if (ev->kind == EV_ALLOC) {
            if (ev->size > limit || (total += (ev->size + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN) > limit) {
                free(of_slot);
                return -2;
            }
            plan_buf *x = &p->b[p->n];
            x->requested = ev->size;
            x->size = (ev->size + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
            if (!x->size)
                x->size = PLAN_ALIGN;
            x->start = (uint32_t)e;
            x->end = (uint32_t)t->n;
            x->alloc = (uint32_t)p->n;
            of_slot[ev->slot] = (uint32_t)p->n++;
            live += x->requested;
            live_rounded += x->size;
        } else if (ev->kind == EV_FREE) {
            plan_buf *x = &p->b[of_slot[ev->slot]];
            x->end = (uint32_t)e;
            live -= x->requested;
            live_rounded -= x->size;
        }
        if (live > p->peak_live)
            p->peak_live = live;
        if (live_rounded > p->peak_live_rounded)
            p->peak_live_rounded = live_rounded;
    }
    free(of_slot);
    return 0;
}

int plan_build(const trace *t, const plan_opts *o, plan *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    search s = {0};
    uint32_t *order = NULL, *work = NULL;
    order_key *keys = NULL;
    int rc = -1;
    int built = build_buffers(t, out);
    if (built == -2) {
        plan_free(out);
        snprintf(err, errlen, "the allocations' sizes sum past 2^62 bytes: no device holds that, nothing to plan");
        return -1;
    }
    if (built)
        goto done;
    s.b = out->b;
    s.n = out->n;
    s.height = UINT64_MAX;
    size_t n = s.n ? s.n : 1;
    s.byoff = malloc(n * sizeof *s.byoff);
    s.off = malloc(n * sizeof *s.off);
    s.best = calloc(n, sizeof *s.best);
    order = malloc(n * sizeof *order);
    work = malloc(n * sizeof *work);
    keys = malloc(n * sizeof *keys);
    if (!s.byoff || !s.off || !s.best || !order || !work || !keys)
        goto done;
    /* The eight greedy orders; the best one seeds the search. */
    int best_fit = BEST_FIT;
    for (int key = 0; key < 4; key++)
        for (int fit = BEST_FIT; fit <= FIRST_FIT; fit++) {
            sort_by(&s, key, keys, work);
            uint64_t before = s.height;
            if (evaluate(&s, work, fit) && s.height < before) {
                memcpy(order, work, s.n * sizeof *order);
                best_fit = fit;
                snprintf(out->greedy_order, sizeof out->greedy_order, "%s %s", order_names[key],
                         fit == BEST_FIT ? "best fit" : "first fit");
            }
        }
    out->greedy_height = s.height;
    /* Improvement: move a buffer that reaches the top earlier in the order (it then finds a lower gap before
     * the space fills), or, for small problems, try a random order; keep what is no worse. */
    uint64_t pairs = (uint64_t)n * n;
    uint64_t budget = o && o->budget ? o->budget : pairs ? 4000000000ull / pairs : 100000;
    if (budget > 100000)
        budget = 100000;
    uint64_t state = o && o->seed ? o->seed : 1;
    for (uint64_t it = 0; it < budget && s.height > out->peak_live_rounded && s.n > 1; it++) {
        memcpy(work, order, s.n * sizeof *work);
        if (s.n <= 64 && it % 2) { /* small: random orders reach what local moves cannot */
            for (size_t i = s.n - 1; i > 0; i--) {
                size_t j = rng(&state) % (i + 1);
                uint32_t tmp = work[i];
                work[i] = work[j], work[j] = tmp;
            }
        } else {
            size_t tops[64], ntops = 0; /* positions in the order of buffers at the top */
            for (size_t i = 0; i < s.n && ntops < 64; i++)
                if (s.best[work[i]] + s.b[work[i]].size == s.height)
                    tops[ntops++] = i;
            size_t from = tops[rng(&state) % (ntops ? ntops : 1)];
            if (!ntops || from == 0)
                continue;
            move_earlier(work, from, rng(&state) % from);
        }
        int fit = rng(&state) % 4 ? best_fit : !best_fit;
        if (evaluate(&s, work, fit)) {
            memcpy(order, work, s.n * sizeof *order);
            best_fit = fit;
        }
    }
    out->evaluations = s.evaluations;
    out->height = s.n ? s.height : 0;
    for (size_t i = 0; i < s.n; i++)
        out->b[i].offset = s.best[i];
    rc = 0;
done:
    free(s.byoff);
    free(s.off);
    free(s.best);
    free(order);
    free(work);
    free(keys);
    if (rc) {
        plan_free(out);
        snprintf(err, errlen, "out of host memory planning %llu allocations", (unsigned long long)t->allocs);
    }
    return rc;
}

void plan_free(plan *p)
{
    free(p->b);
    memset(p, 0, sizeof *p);
}

int plan_check(const plan *p, char *err, size_t errlen)
{
    /* Sweep the events in time order: at each allocation, its range must not meet a live buffer's. Sorting
     * live buffers is not needed for a check run on test-sized plans: O(n * live). */
    for (size_t i = 0; i < p->n; i++) {
        const plan_buf *x = &p->b[i];
        if (x->offset % PLAN_ALIGN || x->offset + x->size > p->height) {
            snprintf(err, errlen, "allocation %u at %llu (+%llu) is misaligned or above the height %llu", x->alloc,
                     (unsigned long long)x->offset, (unsigned long long)x->size, (unsigned long long)p->height);
            return -1;
        }
        for (size_t j = i + 1; j < p->n; j++) {
            const plan_buf *y = &p->b[j];
            if (overlap(x, y) && x->offset < y->offset + y->size && y->offset < x->offset + x->size) {
                snprintf(err, errlen, "allocations %u and %u live at the same time and overlap", x->alloc, y->alloc);
                return -1;
            }
        }
    }
    return 0;
}

int plan_write(const plan *p, const char *source, FILE *f)
{
    fprintf(f, "hbmplan 1\n# source: %s\n", source);
    fprintf(f, "# %zu allocations; peak live %llu bytes (%llu rounded to %d); greedy (%s) %llu; after %llu "
               "evaluations %llu\n",
            p->n, (unsigned long long)p->peak_live, (unsigned long long)p->peak_live_rounded, PLAN_ALIGN,
            p->greedy_order, (unsigned long long)p->greedy_height, (unsigned long long)p->evaluations,
            (unsigned long long)p->height);
    fprintf(f, "height %llu\n# alloc offset size start end\n", (unsigned long long)p->height);
    for (size_t i = 0; i < p->n; i++)
        fprintf(f, "%u %llu %llu %u %u\n", p->b[i].alloc, (unsigned long long)p->b[i].offset,
                (unsigned long long)p->b[i].size, p->b[i].start, p->b[i].end);
    return ferror(f) ? -1 : 0;
}
