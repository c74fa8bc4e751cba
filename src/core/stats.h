/* stats.h: PyTorch's memory_stats() counters, updated where PyTorch updates them (inline: the malloc path), and
 * their resets (stats.c). */
#ifndef HBM_CORE_STATS_H
#define HBM_CORE_STATS_H

#include "core/types.h"

static inline void hbm__stat_inc(hbm_stat *s, int64_t n)
{
    s->current += n;
    if (s->current > s->peak)
        s->peak = s->current;
    s->allocated += n;
}

/* A counter's `freed` is not moved here: a->stats keeps in it the counter's current value when the accumulated counts
 * were last reset (0 before), and the count is made when read (hbm__stat_freed, hbm__stats_view): every decrement
 * since the reset is what was added since, less what the current value gained (issue #38 item 1). */
static inline void hbm__stat_dec(hbm_stat *s, int64_t n) { s->current -= n; }

/* The freed count of a counter of a->stats, as read. */
static inline int64_t hbm__stat_freed(const hbm_stat *s) { return s->allocated - (s->current - s->freed); }

/* Apply to the pool's own entry and to the "all" entry, as PyTorch's stat_types do. The "all" entry's cumulative
 * counts (allocated, freed) are the pools' sums, made when the statistics are read (hbm__stats_view): the fast
 * path moves only its current value and peak. */
/* The statistics' index of a pool's own entry. */
static inline int hbm__pool_kind(const hbm__pool *p) { return p->is_small ? HBM_POOL_SMALL : HBM_POOL_LARGE; }

/* The same, by the pool's index k (hbm__pool_kind: found once where a path moves several counters). */
static inline void hbm__stat_k_inc(hbm_stat *arr, int k, int64_t n)
{
    hbm__stat_inc(&arr[k], n);
    hbm_stat *all = &arr[HBM_POOL_ALL];
    all->current += n;
    if (all->current > all->peak)
        all->peak = all->current;
}

static inline void hbm__stat_k_dec(hbm_stat *arr, int k, int64_t n)
{
    hbm__stat_dec(&arr[k], n);
    arr[HBM_POOL_ALL].current -= n;
}

static inline void hbm__stat_arr_inc(hbm_stat *arr, const hbm__pool *p, int64_t n)
{
    hbm__stat_k_inc(arr, hbm__pool_kind(p), n);
}

static inline void hbm__stat_arr_dec(hbm_stat *arr, const hbm__pool *p, int64_t n)
{
    hbm__stat_k_dec(arr, hbm__pool_kind(p), n);
}

/* The statistics as they are read (hbm_get_stats, the published record, the validator): a->stats with the "all"
 * entries' cumulative counts and active / active_bytes made. */
void hbm__stats_view(const hbm_allocator *a, hbm_stats *out);

/* A block of pool p, `size` bytes, freed while other streams use it: active until its events complete. */
static inline void hbm__pend_add(hbm_allocator *a, const hbm__pool *p, int64_t size, int sign)
{
    int k = p->is_small ? HBM_POOL_SMALL : HBM_POOL_LARGE;
    a->pend.n[k] += sign;
    a->pend.bytes[k] += sign * size;
    a->pend.n[HBM_POOL_ALL] += sign;
    a->pend.bytes[HBM_POOL_ALL] += sign * size;
}
/* A malloc while blocks are pending: active's peaks, which are then above allocation's (stats.c). */
void hbm__pend_peaks(hbm_allocator *a, const hbm__pool *p);
/* A block of pool p allocated: `size` bytes for a request of `requested` (the engine's malloc, a seeded segment). */
static inline void hbm__stats_on_alloc(hbm_allocator *a, const hbm__pool *p, size_t size, size_t requested)
{
    hbm_stats *st = &a->stats;
    int k = hbm__pool_kind(p);
    hbm__stat_k_inc(st->allocation, k, 1);
    hbm__stat_k_inc(st->allocated_bytes, k, (int64_t)size);
    hbm__stat_k_inc(st->requested_bytes, k, (int64_t)requested);
    if (__builtin_expect(a->pend.n[HBM_POOL_ALL] != 0, 0)) /* active is above allocation: its peaks */
        hbm__pend_peaks(a, p);
    if (size >= a->conf.max_split_size)
        hbm__stat_inc(&st->oversize_allocations, 1);
}
/* Every block freed so far, by hbm_free (the "all" entry's allocation.freed). */
static inline int64_t hbm__stats_frees(const hbm_stats *s)
{
    return hbm__stat_freed(&s->allocation[HBM_POOL_SMALL]) + hbm__stat_freed(&s->allocation[HBM_POOL_LARGE]);
}

/* hbm_reset_peak_stats, hbm_reset_accumulated_stats (a->lock held). */
void hbm__stats_reset_peak(hbm_allocator *a);
void hbm__stats_reset_accumulated(hbm_allocator *a);

#endif
