/*
 * lifetime_planner.c: offsets for known lifetimes (hbm_plan_lifetimes). Given every
 * buffer's size and the span of allocations it lives over, place each at an
 * offset in one region so that no two buffers live at the same time overlap,
 * as low as possible: the region's height is the device memory a step needs
 * with no virtual memory and no caching policy (STAlloc's and MindSpore
 * SOMAS's problem; exact solvers such as MiniMalloc give the optimum on small
 * instances). `hbmalloc plan` uses it on whole traces, the step plan
 * (step_plan.c) on one recorded training step, cyclically: a buffer allocated
 * late in the step and freed early in the next also lives over [0, wrap).
 *
 * Method: greedy placement (each buffer at the best- or first-fitting gap among
 * the placed buffers that overlap it in time, else on top) in eight orders
 * (size, size x lifetime, lifetime, start; best and first fit), then a bounded
 * improvement search from the best: buffers that reach the top are moved
 * earlier in the order, and random orders are tried while the evaluation budget
 * lasts (deterministic for a given seed). One evaluation is O(n^2) at worst.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbmalloc.h"
#include "policy/lifetime_sweep.h"
#include "util/util.h"

typedef struct search {
    const hbm_lifetime *b;
    size_t n;
    uint32_t *byoff; /* placed buffers by offset */
    uint64_t *off;   /* offsets of the evaluation under way */
    uint64_t *best;  /* offsets of the best evaluation so far */
    uint64_t height; /* of best */
    uint64_t evaluations;
} search;

enum { BEST_FIT = 0, FIRST_FIT = 1 };

/* Live at one allocation together: the main spans meet, or a wrapped one's [0, wrap) meets the other. */
static int overlap(const hbm_lifetime *x, const hbm_lifetime *y)
{
    return (x->start < y->end && y->start < x->end) || (x->wrap && (y->wrap || y->start < x->wrap)) ||
           (y->wrap && x->start < y->wrap);
}

/* Places the buffers in `order`, each at the best- or first-fitting gap among the placed buffers that live at
 * the same time as it, else above them all. Returns the height; s->off has the offsets. */
static uint64_t greedy(search *s, const uint32_t *order, int fit, uint64_t give_up)
{
    size_t m = 0;
    uint64_t height = 0;
    for (size_t i = 0; i < s->n; i++) {
        uint32_t k = order[i];
        const hbm_lifetime *x = &s->b[k];
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
            return height;     /* already no better than the best: stop early */
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

static uint64_t lifetime(const hbm_lifetime *x) { return (uint64_t)(x->end - x->start) + x->wrap; }

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
        const hbm_lifetime *x = &s->b[i];
        uint64_t k = which == 0   ? x->size
                     : which == 1 ? x->size * lifetime(x)
                     : which == 2 ? lifetime(x)
                                  : UINT32_MAX - x->start;
        keys[i] = (order_key){k, x->size, x->start, (uint32_t)i};
    }
    qsort(keys, s->n, sizeof *keys, cmp_order);
    for (size_t i = 0; i < s->n; i++)
        out[i] = keys[i].k;
}

static const char *const order_names[4] = {"size", "size*lifetime", "lifetime", "start"};

static uint64_t rng(uint64_t *state) { return hbm__mix64(*state += 0x9e3779b97f4a7c15ull); /* splitmix64 */ }

/* Moves order[from] to position `to` (< from), shifting the ones between down. */
static void move_earlier(uint32_t *order, size_t from, size_t to)
{
    uint32_t k = order[from];
    memmove(order + to + 1, order + to, (from - to) * sizeof *order);
    order[to] = k;
}

/* ---- the lower bound: the most bytes live at one allocation ---- */

typedef struct change {
    uint32_t at;
    int64_t bytes; /* added there (negative: removed) */
} change;

static int by_at(const void *pa, const void *pb)
{
    const change *x = pa, *y = pb;
    if (x->at != y->at)
        return x->at < y->at ? -1 : 1;
    return (x->bytes > y->bytes) - (x->bytes < y->bytes); /* removals first: [start, end) */
}

static int peak_live(const hbm_lifetime *b, size_t n, uint64_t *out)
{
    change *c = malloc((4 * n + 1) * sizeof *c);
    if (!c)
        return -1;
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        c[m++] = (change){b[i].start, (int64_t)b[i].size};
        c[m++] = (change){b[i].end, -(int64_t)b[i].size};
        if (b[i].wrap) {
            c[m++] = (change){0, (int64_t)b[i].size};
            c[m++] = (change){b[i].wrap, -(int64_t)b[i].size};
        }
    }
    qsort(c, m, sizeof *c, by_at);
    int64_t live = 0, peak = 0;
    for (size_t i = 0; i < m; i++)
        if ((live += c[i].bytes) > peak)
            peak = live;
    free(c);
    *out = (uint64_t)peak;
    return 0;
}

hbm_status hbm_plan_lifetimes(hbm_lifetime *b, size_t n, uint64_t budget, uint64_t seed, hbm_plan_info *info)
{
    if ((!b && n) || !info)
        return HBM_ERR_INVALID;
    memset(info, 0, sizeof *info);
    if (n >= UINT32_MAX)
        return HBM_ERR_INVALID;
    uint64_t total = 0;
    for (size_t i = 0; i < n; i++) /* every offset and height is at most the sum: nothing below can overflow */
        if (!b[i].size || b[i].size > ((uint64_t)1 << 62) || (total += b[i].size) > ((uint64_t)1 << 62) ||
            b[i].start >= b[i].end)
            return HBM_ERR_INVALID;
    if (!n)
        return HBM_OK;
    search s = {.b = b, .n = n, .height = UINT64_MAX};
    uint32_t *order = NULL, *work = NULL;
    order_key *keys = NULL;
    hbm_status rc = HBM_ERR_NOMEM;
    s.byoff = malloc(n * sizeof *s.byoff);
    s.off = malloc(n * sizeof *s.off);
    s.best = calloc(n, sizeof *s.best);
    order = malloc(n * sizeof *order);
    work = malloc(n * sizeof *work);
    keys = malloc(n * sizeof *keys);
    if (!s.byoff || !s.off || !s.best || !order || !work || !keys || peak_live(b, n, &info->peak_live))
        goto done;
    /* The eight greedy orders; the best one seeds the search. */
    int best_fit = BEST_FIT;
    for (int key = 0; key < 4; key++) {
        sort_by(&s, key, keys, work); /* once for both fits */
        for (int fit = BEST_FIT; fit <= FIRST_FIT; fit++) {
            uint64_t before = s.height;
            if (evaluate(&s, work, fit) && s.height < before) {
                memcpy(order, work, n * sizeof *order);
                best_fit = fit;
                snprintf(info->greedy_order, sizeof info->greedy_order, "%s %s", order_names[key],
                         fit == BEST_FIT ? "best fit" : "first fit");
            }
        }
    }
    info->greedy_height = s.height;
    /* Improvement: move a buffer that reaches the top earlier in the order (it then finds a lower gap before
     * the space fills), or, for small problems, try a random order; keep what is no worse. */
    uint64_t pairs = (uint64_t)n * n;
    if (!budget)
        budget = 4000000000ull / pairs;
    if (budget > 100000)
        budget = 100000;
    uint64_t state = seed ? seed : 1;
    for (uint64_t it = 0; it < budget && s.height > info->peak_live && n > 1; it++) {
        memcpy(work, order, n * sizeof *work);
        if (n <= 64 && it % 2) { /* small: random orders reach what local moves cannot */
            for (size_t i = n - 1; i > 0; i--) {
                size_t j = rng(&state) % (i + 1);
                uint32_t tmp = work[i];
                work[i] = work[j], work[j] = tmp;
            }
        } else {
            size_t tops[64], ntops = 0; /* positions in the order of buffers at the top */
            for (size_t i = 0; i < n && ntops < 64; i++)
                if (s.best[work[i]] + b[work[i]].size == s.height)
                    tops[ntops++] = i;
            size_t from = tops[rng(&state) % (ntops ? ntops : 1)];
            if (!ntops || from == 0)
                continue;
            move_earlier(work, from, rng(&state) % from);
        }
        int fit = rng(&state) % 4 ? best_fit : !best_fit;
        if (evaluate(&s, work, fit)) {
            memcpy(order, work, n * sizeof *order);
            best_fit = fit;
        }
    }
    info->evaluations = s.evaluations;
    info->height = s.height;
    for (size_t i = 0; i < n; i++)
        b[i].offset = s.best[i];
    rc = HBM_OK;
done:
    free(s.byoff);
    free(s.off);
    free(s.best);
    free(order);
    free(work);
    free(keys);
    return rc;
}

hbm_status hbm__plan_by_size(hbm_lifetime *b, size_t n, uint64_t pairs, uint64_t *height)
{
    *height = UINT64_MAX;
    if (n < 2 || n >= UINT32_MAX || (uint64_t)n * n / 2 > pairs)
        return HBM_OK;
    search s = {.b = b, .n = n, .height = UINT64_MAX};
    uint32_t *order = malloc(n * sizeof *order);
    order_key *keys = malloc(n * sizeof *keys);
    s.byoff = malloc(n * sizeof *s.byoff);
    s.off = malloc(n * sizeof *s.off);
    s.best = malloc(n * sizeof *s.best);
    hbm_status rc = HBM_ERR_NOMEM;
    if (order && keys && s.byoff && s.off && s.best) {
        sort_by(&s, 0, keys, order);
        /* First fit, then best fit while the pairs last (each evaluation tests at most n^2 / 2 pairs). */
        for (int fit = FIRST_FIT; fit >= BEST_FIT && (uint64_t)(FIRST_FIT - fit + 1) * n * n / 2 <= pairs; fit--)
            evaluate(&s, order, fit);
        for (size_t i = 0; i < n; i++)
            b[i].offset = s.best[i];
        *height = s.height;
        rc = HBM_OK;
    }
    free(order);
    free(keys);
    free(s.byoff);
    free(s.off);
    free(s.best);
    return rc;
}
