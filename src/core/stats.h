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

static inline void hbm__stat_dec(hbm_stat *s, int64_t n)
{
    s->current -= n;
    s->freed += n;
}

/* Apply to the "all" entry and to the pool's own entry, as PyTorch's stat_types do. */
static inline void hbm__stat_arr_inc(hbm_stat *arr, const hbm__pool *p, int64_t n)
{
    hbm__stat_inc(&arr[HBM_POOL_ALL], n);
    hbm__stat_inc(&arr[p->is_small ? HBM_POOL_SMALL : HBM_POOL_LARGE], n);
}

static inline void hbm__stat_arr_dec(hbm_stat *arr, const hbm__pool *p, int64_t n)
{
    hbm__stat_dec(&arr[HBM_POOL_ALL], n);
    hbm__stat_dec(&arr[p->is_small ? HBM_POOL_SMALL : HBM_POOL_LARGE], n);
}

void hbm__stats_reset_peak(hbm_stats *s);
void hbm__stats_reset_accumulated(hbm_stats *s);

#endif
