/*
 * lifetime_sweep.c: the step plan's O(n log n) planner (lifetime_sweep.h). The buffers are placed in the order they
 * are allocated, each at the lowest offset free among the buffers live at that moment (first fit over a set of free
 * ranges, util/ranges.c), and again each at the smallest free range that holds it (best fit, the sets below), and
 * given back when freed: O(log n) per buffer; the lower of the two wins. It is lifetime_planner.c's greedy placement
 * in start order, which scans every placed buffer for each one (O(n^2)); here the scan is a descent. What it gives
 * up against the search: the other orders (by size, which packs better where sizes vary from layer to layer) and the
 * improvement moves; step_plan.c runs those too where they fit its bound (docs/PERFORMANCE.md, "The step plan's
 * planning").
 *
 * A step is a cycle. It is cut where the fewest bytes are live: the buffers live at that moment (what is kept
 * across it) are stacked at the bottom for the whole cycle, and the others are swept from the cut round to the cut
 * again, above them. Cut at the step boundary instead, every tensor carried over the boundary would be stacked at
 * the bottom, live or not. Time and memory O(m log m + period).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "policy/lifetime_sweep.h"
#include "util/rb.h"
#include "util/ranges.h"

#define MAX_TOTAL ((uint64_t)1 << 62)

/* ---- best fit: the free ranges by address (to merge) and by (length, address) (to choose) ---- */

typedef struct range {
    hbm__rb by_addr, by_len;
    uint64_t start, end;
} range;

typedef struct best_set {
    hbm__rb *addr, *len;
    range *spare; /* free nodes, chained through by_addr.r */
} best_set;

#define OF_ADDR(n) ((range *)(void *)((char *)(n)-offsetof(range, by_addr)))
#define OF_LEN(n) ((range *)(void *)((char *)(n)-offsetof(range, by_len)))

static bool addr_less(const hbm__rb *a, const hbm__rb *b) { return OF_ADDR(a)->start < OF_ADDR(b)->start; }

static bool len_less(const hbm__rb *a, const hbm__rb *b)
{
    const range *x = OF_LEN(a), *y = OF_LEN(b);
    uint64_t lx = x->end - x->start, ly = y->end - y->start;
    return lx != ly ? lx < ly : x->start < y->start;
}

static range *node(best_set *bs, uint64_t start, uint64_t end)
{
    range *r = bs->spare;
    bs->spare = (range *)(void *)r->by_addr.r;
    r->start = start, r->end = end;
    hbm__rb_insert(&bs->addr, &r->by_addr, addr_less);
    hbm__rb_insert(&bs->len, &r->by_len, len_less);
    return r;
}

static void drop(best_set *bs, range *r)
{
    hbm__rb_remove(&bs->addr, &r->by_addr);
    hbm__rb_remove(&bs->len, &r->by_len);
    r->by_addr.r = (hbm__rb *)(void *)bs->spare;
    bs->spare = r;
}

/* The smallest range that holds size (the lowest of equal ones), from its start. -1: none does. */
static int best_take(best_set *bs, uint64_t size, uint64_t *out)
{
    range key = {.start = 0, .end = size};
    hbm__rb *n = hbm__rb_lower_bound(bs->len, &key.by_len, len_less);
    if (!n)
        return -1;
    range *r = OF_LEN(n);
    *out = r->start;
    hbm__rb_remove(&bs->len, &r->by_len);
    r->start += size;
    if (r->start == r->end) {
        hbm__rb_remove(&bs->addr, &r->by_addr);
        r->by_addr.r = (hbm__rb *)(void *)bs->spare;
        bs->spare = r;
    } else {
        hbm__rb_insert(&bs->len, &r->by_len, len_less); /* its place by address is the same */
    }
    return 0;
}

/* [start, end) free again, merged with the ranges it touches. */
static void best_give(best_set *bs, uint64_t start, uint64_t end)
{
    range key = {.start = start};
    hbm__rb *nn = hbm__rb_lower_bound(bs->addr, &key.by_addr, addr_less);
    hbm__rb *pn = nn ? hbm__rb_prev(nn) : hbm__rb_last(bs->addr);
    range *prev = pn ? OF_ADDR(pn) : NULL, *next = nn ? OF_ADDR(nn) : NULL;
    bool with_prev = prev && prev->end == start, with_next = next && next->start == end;
    if (with_prev && with_next) {
        uint64_t to = next->end;
        drop(bs, next);
        hbm__rb_remove(&bs->len, &prev->by_len);
        prev->end = to;
        hbm__rb_insert(&bs->len, &prev->by_len, len_less);
    } else if (with_prev) {
        hbm__rb_remove(&bs->len, &prev->by_len);
        prev->end = end;
        hbm__rb_insert(&bs->len, &prev->by_len, len_less);
    } else if (with_next) {
        hbm__rb_remove(&bs->len, &next->by_len);
        next->start = start; /* nothing lies between prev's end and start: the order by address holds */
        hbm__rb_insert(&bs->len, &next->by_len, len_less);
    } else {
        node(bs, start, end);
    }
}

/* The allocation at which the fewest bytes are live, over the cycle [0, period). NULL-safe: -1 out of memory. */
static int64_t quietest(const hbm_lifetime *b, size_t m, uint32_t period)
{
    int64_t *d = calloc((size_t)period + 1, sizeof *d);
    if (!d)
        return -1;
    for (size_t i = 0; i < m; i++) {
        d[b[i].start] += (int64_t)b[i].size;
        d[b[i].end] -= (int64_t)b[i].size;
        if (b[i].wrap) {
            d[0] += (int64_t)b[i].size;
            d[b[i].wrap] -= (int64_t)b[i].size;
        }
    }
    int64_t live = 0, least = INT64_MAX, at = 0;
    for (uint32_t t = 0; t < period; t++)
        if ((live += d[t]) < least)
            least = live, at = t;
    free(d);
    return at;
}

/* Sorts the indexes in `idx` (n of them) by key[idx] < period + 1, stably (counting sort), into out. */
static int sort_by_time(const uint32_t *idx, size_t n, const uint32_t *key, uint32_t period, uint32_t *out)
{
    size_t *count = calloc((size_t)period + 2, sizeof *count);
    if (!count)
        return -1;
    for (size_t j = 0; j < n; j++)
        count[key[idx[j]] + 1]++;
    for (uint32_t t = 0; t <= period; t++)
        count[t + 1] += count[t];
    for (size_t j = 0; j < n; j++)
        out[count[key[idx[j]]]++] = idx[j];
    free(count);
    return 0;
}

/* One sweep over the n buffers swept (by_start, by_end: their indexes in order of s and e, the times from the cut):
 * each at the lowest (FIRST) or the smallest (BEST) free range that holds it, offsets from 0 into off[]. Returns the
 * height, or UINT64_MAX out of host memory. */
enum { FIRST, BEST };

static uint64_t sweep(const hbm_lifetime *b, size_t n, const uint32_t *by_start, const uint32_t *by_end,
                      const uint32_t *s, const uint32_t *e, uint64_t total, int fit, uint64_t *off)
{
    hbm__ranges first = {0};
    best_set best = {0};
    range *pool = NULL;
    uint64_t top = 0;
    if (fit == BEST) {
        if (!(pool = malloc((n + 2) * sizeof *pool)))
            return UINT64_MAX;
        for (size_t i = 0; i < n + 2; i++) /* at most one range more than the buffers live */
            pool[i].by_addr.r = i + 1 < n + 2 ? &pool[i + 1].by_addr : NULL;
        best.spare = pool;
        node(&best, 0, total);
    } else if (hbm__ranges_give(&first, 0, (uintptr_t)total)) {
        return UINT64_MAX;
    }
    /* First fit never reaches above the sum of the sizes placed so far, and best fit takes a range only where one
     * holds the buffer (the one above everything live reaches to total), so [0, total) always has room. */
    for (size_t j = 0, ended = 0; j < n; j++) {
        uint32_t k = by_start[j];
        for (; ended < j && e[by_end[ended]] <= s[k]; ended++) { /* freed before this allocation */
            uint32_t y = by_end[ended];
            if (fit == BEST) {
                best_give(&best, off[y], off[y] + b[y].size);
            } else if (hbm__ranges_give(&first, (uintptr_t)off[y], (uintptr_t)(off[y] + b[y].size))) {
                top = UINT64_MAX;
                break;
            }
        }
        uintptr_t at = 0;
        uint64_t at_best = 0;
        if (top == UINT64_MAX ||
            (fit == BEST ? best_take(&best, b[k].size, &at_best) : hbm__ranges_take(&first, (size_t)b[k].size, &at))) {
            top = UINT64_MAX; /* out of memory above; a take cannot fail (above): said rather than placed wrong */
            break;
        }
        off[k] = fit == BEST ? at_best : at;
        if (off[k] + b[k].size > top)
            top = off[k] + b[k].size;
    }
    hbm__ranges_clear(&first);
    free(pool);
    return top;
}

hbm_status hbm__plan_sweep(hbm_lifetime *b, size_t m, uint32_t period, uint64_t *height)
{
    if (!height || (!b && m))
        return HBM_ERR_INVALID;
    *height = 0;
    uint64_t total = 0;
    for (size_t i = 0; i < m; i++) {
        const hbm_lifetime *x = &b[i];
        if (!x->size || x->size > MAX_TOTAL || (total += x->size) > MAX_TOTAL || x->start >= x->end ||
            x->end > period || x->wrap > x->start)
            return HBM_ERR_INVALID;
    }
#if UINTPTR_MAX < UINT64_MAX
    if (total > UINTPTR_MAX) /* the free ranges hold addresses */
        return HBM_ERR_INVALID;
#endif
    if (!m)
        return HBM_OK;
    if (m >= UINT32_MAX)
        return HBM_ERR_INVALID;
    int64_t cut = quietest(b, m, period);
    uint32_t *s = malloc(m * sizeof *s), *e = malloc(m * sizeof *e); /* times from the cut */
    uint32_t *swept = malloc(m * sizeof *swept), *by_start = malloc(m * sizeof *by_start);
    uint32_t *by_end = malloc(m * sizeof *by_end);
    uint64_t *off[2] = {malloc(m * sizeof(uint64_t)), malloc(m * sizeof(uint64_t))};
    hbm_status rc = HBM_ERR_NOMEM;
    if (cut < 0 || !s || !e || !swept || !by_start || !by_end || !off[0] || !off[1])
        goto done;
    uint32_t t0 = (uint32_t)cut;
    uint64_t base = 0; /* the stacked buffers' height */
    size_t n = 0;
    for (size_t i = 0; i < m; i++) {
        hbm_lifetime *x = &b[i];
        if ((x->start <= t0 && t0 < x->end) || t0 < x->wrap) { /* live at the cut: stacked */
            x->offset = base;
            base += x->size;
            continue;
        }
        if (x->wrap) /* lives over [start, period) and [0, wrap), with wrap <= t0 < start */
            s[i] = x->start - t0, e[i] = period - t0 + x->wrap;
        else if (t0 < x->start)
            s[i] = x->start - t0, e[i] = x->end - t0;
        else /* x->end <= t0 */
            s[i] = period - t0 + x->start, e[i] = period - t0 + x->end;
        swept[n++] = (uint32_t)i;
    }
    if (sort_by_time(swept, n, s, period, by_start) || sort_by_time(swept, n, e, period, by_end))
        goto done;
    /* Both fits; the lower wins (first fit on a tie). */
    uint64_t h_first = sweep(b, n, by_start, by_end, s, e, total, FIRST, off[FIRST]);
    uint64_t h_best = sweep(b, n, by_start, by_end, s, e, total, BEST, off[BEST]);
    if (h_first == UINT64_MAX || h_best == UINT64_MAX)
        goto done;
    int won = h_best < h_first ? BEST : FIRST;
    for (size_t j = 0; j < n; j++)
        b[swept[j]].offset = base + off[won][swept[j]];
    *height = base + (won == BEST ? h_best : h_first);
    rc = HBM_OK;
done:
    free(s);
    free(e);
    free(swept);
    free(by_start);
    free(by_end);
    free(off[0]);
    free(off[1]);
    return rc;
}
