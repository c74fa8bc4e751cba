/*
 * lifetime_sweep.c: the step plan's planner (lifetime_sweep.h). The buffers are placed in the order they are
 * allocated, each at the lowest offset free among the buffers live at that moment (first fit over a set of free
 * ranges, util/ranges.c: O(log n) per buffer), and given back when freed. It is lifetime_planner.c's greedy
 * placement in start order with first fit, which scans every placed buffer for each one (O(n^2)); here the scan is a
 * descent. What it gives up against the search: the other seven orders and the improvement moves (on the shared
 * traces' steps the heights compare in docs/PERFORMANCE.md, "The step plan's planning").
 *
 * A step is a cycle. It is cut where the fewest bytes are live: the buffers live at that moment (what is kept
 * across it) are stacked at the bottom for the whole cycle, and the others are swept from the cut round to the cut
 * again, above them. Cut at the step boundary instead, every tensor carried over the boundary would be stacked at
 * the bottom, live or not. Time and memory O(m log m + period).
 */
#include <stdint.h>
#include <stdlib.h>

#include "policy/lifetime_sweep.h"
#include "util/ranges.h"

#define MAX_TOTAL ((uint64_t)1 << 62)

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
    hbm__ranges free_ranges = {0};
    hbm_status rc = HBM_ERR_NOMEM;
    if (cut < 0 || !s || !e || !swept || !by_start || !by_end)
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
    if (sort_by_time(swept, n, s, period, by_start) || sort_by_time(swept, n, e, period, by_end) ||
        (n && hbm__ranges_give(&free_ranges, 0, (uintptr_t)total)))
        goto done;
    /* First fit never reaches above the sum of the sizes placed so far, so [0, total) always has room. */
    uint64_t top = 0;
    for (size_t j = 0, ended = 0; j < n; j++) {
        hbm_lifetime *x = &b[by_start[j]];
        for (; ended < j && e[by_end[ended]] <= s[by_start[j]]; ended++) { /* freed before this allocation */
            const hbm_lifetime *y = &b[by_end[ended]];
            if (hbm__ranges_give(&free_ranges, (uintptr_t)y->offset, (uintptr_t)(y->offset + y->size)))
                goto done;
        }
        uintptr_t at;
        if (hbm__ranges_take(&free_ranges, (size_t)x->size, &at)) {
            rc = HBM_ERR_INVALID; /* cannot happen (above); said rather than placed wrong */
            goto done;
        }
        x->offset = at;
        if (at + x->size > top)
            top = at + x->size;
    }
    for (size_t j = 0; j < n; j++)
        b[swept[j]].offset += base;
    *height = base + top;
    rc = HBM_OK;
done:
    hbm__ranges_clear(&free_ranges);
    free(s);
    free(e);
    free(swept);
    free(by_start);
    free(by_end);
    return rc;
}
