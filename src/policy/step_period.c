/*
 * step_period.c: the period of a repeating sequence, for step detection (the
 * step plan's, step_plan.c, and the tools' --steps auto). Given one key per
 * allocation, the longest end of the sequence that repeats at least twice
 * with one period: the prefix function of the keys read from the end, O(n)
 * time and n words of memory. It also owns the keys steps are compared by.
 */
#include <stdlib.h>

#include "policy/step_period.h"
#include "util/util.h"

size_t hbm__period(const uint64_t *key, size_t n, size_t *len)
{
    *len = 0;
    uint32_t *pi = malloc((n ? n : 1) * sizeof *pi);
    if (!pi || n >= UINT32_MAX) {
        free(pi);
        return 0;
    }
    size_t best = 0;
    if (n)
        pi[0] = 0;
    for (size_t i = 1; i < n; i++) { /* over the keys read from the end */
        uint32_t j = pi[i - 1];
        while (j && key[n - 1 - i] != key[n - 1 - j])
            j = pi[j - 1];
        pi[i] = j + (key[n - 1 - i] == key[n - 1 - j]);
    }
    for (size_t l = n; l >= 2; l--) {
        size_t p = l - pi[l - 1];
        if (l >= 2 * p) {
            *len = l;
            best = p;
            break;
        }
    }
    free(pi);
    return best;
}


size_t hbm__step_period(const uint64_t *size, const uint32_t *freed, size_t n, size_t min_len, size_t min_period,
                        size_t *len, int *by)
{
    /* Tried in this order, the longest end winning, the earlier on a tie: sizes and frees; sizes alone (a step that
     * frees a tensor of the warm-up differs only there); frees alone (sizes change from step to step). */
    static const int modes[3] = {HBM_STEP_BY_SIZE | HBM_STEP_BY_FREES, HBM_STEP_BY_SIZE, HBM_STEP_BY_FREES};
    *len = 0;
    *by = 0;
    uint64_t *key = malloc((n ? n : 1) * sizeof *key), *frees = calloc(n + 1, sizeof *frees);
    size_t period = 0;
    if (!key || !frees)
        goto done;
    for (size_t j = 0; j < n; j++)
        if (freed[j] <= n) /* freed before allocation freed[j]: part of that one's key */
            frees[freed[j]] += hbm__mix64(freed[j] - j);
    for (int m = 0; m < 3; m++) {
        for (size_t k = 0; k < n; k++)
            key[k] = hbm__mix64((modes[m] & HBM_STEP_BY_SIZE ? hbm__mix64(size[k] + 0x51ed) : 0) +
                                (modes[m] & HBM_STEP_BY_FREES ? frees[k] : 0));
        size_t l, p = hbm__period(key, n, &l);
        if (p >= min_period && l >= min_len && l > *len) {
            *len = l;
            *by = modes[m];
            period = p;
        }
    }
done:
    free(key);
    free(frees);
    return period;
}

bool hbm__period_accumulates(const uint64_t *size, const uint32_t *freed, size_t n, size_t period)
{
    if (n < 2 * period)
        return false;
    uint64_t at2 = 0, at1 = 0, at0 = 0; /* live bytes before allocations n - 2P, n - P and n */
    for (size_t k = 0; k < n; k++) {
        uint64_t end = freed[k] >= n ? UINT64_MAX : freed[k];
        at2 += k < n - 2 * period && end >= n - 2 * period ? size[k] : 0;
        at1 += k < n - period && end >= n - period ? size[k] : 0;
        at0 += end >= n ? size[k] : 0;
    }
    return (at2 < at1 && at1 < at0) || (at2 > at1 && at1 > at0);
}

size_t hbm_step_period(const uint64_t *size, const uint32_t *freed, size_t n, size_t *len, int *by, size_t *layers)
{
    size_t l = 0;
    int b = 0;
    /* At least half of what was seen: a repeat inside a step (its layers) is shorter. */
    size_t period = hbm__step_period(size, freed, n, n / 2, HBM_MIN_STEP, &l, &b);
    if (layers)
        *layers = 0;
    if (period && hbm__period_accumulates(size, freed, n, period)) {
        if (layers)
            *layers = period;
        period = 0;
    }
    if (len)
        *len = l;
    if (by)
        *by = b;
    return period;
}
