/*
 * stats.c: PyTorch's memory_stats() counters: resets and the flat names
 * ("allocated_bytes.all.peak"). The engine updates the counters where
 * PyTorch does (see core/stats.h); this file must not change them
 * otherwise.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/stats.h"

/* The statistics that are arrays (all, small pool, large pool), one X(name) each. */
// clang-format off
#define ARRAYS(X) \
    X(allocation) X(segment) X(active) X(inactive_split) X(allocated_bytes) X(reserved_bytes) X(active_bytes) \
    X(inactive_split_bytes) X(requested_bytes)
// clang-format on

static void each_stat(hbm_stats *s, void (*fn)(hbm_stat *))
{
#define ARR(name)                            \
    for (int k = 0; k < HBM_POOL_KINDS; k++) \
        fn(&s->name[k]);
    ARRAYS(ARR)
#undef ARR
    fn(&s->oversize_allocations);
    fn(&s->oversize_segments);
}

static void reset_peak(hbm_stat *st) { st->peak = st->current; }
static void reset_acc(hbm_stat *st)
{
    st->allocated = 0;
    st->freed = st->current; /* the base of the freed count (core/stats.h) */
}

void hbm__stats_reset_peak(hbm_allocator *a)
{
    each_stat(&a->stats, reset_peak);
    for (int k = 0; k < HBM_POOL_KINDS; k++) { /* active's peak is its current value now */
        a->pend.peak_n[k] = a->stats.allocation[k].current + a->pend.n[k];
        a->pend.peak_bytes[k] = a->stats.allocated_bytes[k].current + a->pend.bytes[k];
    }
}

void hbm__pend_peaks(hbm_allocator *a, const hbm__pool *p)
{
    int kinds[2] = {HBM_POOL_ALL, p->is_small ? HBM_POOL_SMALL : HBM_POOL_LARGE};
    for (int i = 0; i < 2; i++) {
        int k = kinds[i];
        int64_t n = a->stats.allocation[k].current + a->pend.n[k];
        int64_t bytes = a->stats.allocated_bytes[k].current + a->pend.bytes[k];
        if (n > a->pend.peak_n[k])
            a->pend.peak_n[k] = n;
        if (bytes > a->pend.peak_bytes[k])
            a->pend.peak_bytes[k] = bytes;
    }
}

void hbm__stats_view(const hbm_allocator *a, hbm_stats *out)
{
    const hbm_stats *s = &a->stats;
    *out = *s;
#define SUM(name)                                                                                              \
    for (int k = HBM_POOL_SMALL; k <= HBM_POOL_LARGE; k++)                                                     \
        out->name[k].freed = hbm__stat_freed(&s->name[k]);                                                     \
    out->name[HBM_POOL_ALL].allocated = s->name[HBM_POOL_SMALL].allocated + s->name[HBM_POOL_LARGE].allocated; \
    out->name[HBM_POOL_ALL].freed = out->name[HBM_POOL_SMALL].freed + out->name[HBM_POOL_LARGE].freed;
    ARRAYS(SUM)
#undef SUM
    out->oversize_allocations.freed = hbm__stat_freed(&s->oversize_allocations);
    out->oversize_segments.freed = hbm__stat_freed(&s->oversize_segments);
    /* active = allocation + the pending blocks (what hbm_free gave up and events still hold). */
    for (int k = 0; k < HBM_POOL_KINDS; k++) {
        const hbm_stat *n = &out->allocation[k], *b = &out->allocated_bytes[k];
        int64_t pn = a->pend.n[k], pb = a->pend.bytes[k];
        out->active[k] = (hbm_stat){.current = n->current + pn,
                                    .peak = n->peak > a->pend.peak_n[k] ? n->peak : a->pend.peak_n[k],
                                    .allocated = n->allocated,
                                    .freed = n->freed - pn + a->pend.at_reset_n[k]};
        out->active_bytes[k] = (hbm_stat){.current = b->current + pb,
                                          .peak = b->peak > a->pend.peak_bytes[k] ? b->peak : a->pend.peak_bytes[k],
                                          .allocated = b->allocated,
                                          .freed = b->freed - pb + a->pend.at_reset_bytes[k]};
    }
}

void hbm__stats_reset_accumulated(hbm_allocator *a)
{
    hbm_stats *s = &a->stats;
    each_stat(s, reset_acc);
    for (int k = 0; k < HBM_POOL_KINDS; k++) { /* their completions from now on count in active.freed */
        a->pend.at_reset_n[k] = a->pend.n[k];
        a->pend.at_reset_bytes[k] = a->pend.bytes[k];
    }
    s->num_alloc_retries = 0;
    s->num_ooms = 0;
    s->num_sync_all_streams = 0;
    s->num_device_alloc = 0;
    s->num_device_free = 0;
}

static int entry_cmp(const void *x, const void *y)
{
    return strcmp(((const hbm_stat_entry *)x)->name, ((const hbm_stat_entry *)y)->name);
}

/* "a.b" into dst. The longest name, "inactive_split_bytes.large_pool.allocated", has 41 bytes of the 47
 * (spelled out rather than snprintf'd: GCC's -Wformat-truncation cannot see that bound). */
static void join(char *dst, size_t cap, const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    assert(la + 1 + lb < cap);
    if (la + 1 + lb >= cap)
        la = lb = 0;
    memcpy(dst, a, la);
    dst[la] = '.';
    memcpy(dst + la + 1, b, lb);
    dst[la + 1 + lb] = 0;
}

static int put_stat(hbm_stat_entry *out, int n, int cap, const char *prefix, const hbm_stat *st)
{
    static const char *field[4] = {"current", "peak", "allocated", "freed"};
    const int64_t v[4] = {st->current, st->peak, st->allocated, st->freed};
    for (int f = 0; f < 4; f++, n++)
        if (n < cap) {
            join(out[n].name, sizeof out[n].name, prefix, field[f]);
            out[n].value = v[f];
        }
    return n;
}

int hbm_stats_flatten(const hbm_stats *s, hbm_stat_entry *out, int cap)
{
    static const char *pool[HBM_POOL_KINDS] = {"all", "small_pool", "large_pool"};
    char prefix[48];
    int n = 0;
    if (!s || !out || cap <= 0)
        return 0;
#define ARR(name)                                       \
    for (int k = 0; k < HBM_POOL_KINDS; k++) {          \
        join(prefix, sizeof prefix, #name, pool[k]);    \
        n = put_stat(out, n, cap, prefix, &s->name[k]); \
    }
    ARRAYS(ARR)
#undef ARR
    n = put_stat(out, n, cap, "oversize_allocations", &s->oversize_allocations);
    n = put_stat(out, n, cap, "oversize_segments", &s->oversize_segments);
    const struct {
        const char *name;
        int64_t v;
    } scalars[] = {
        {"num_alloc_retries", s->num_alloc_retries},
        {"num_ooms", s->num_ooms},
        {"num_sync_all_streams", s->num_sync_all_streams},
        {"num_device_alloc", s->num_device_alloc},
        {"num_device_free", s->num_device_free},
        {"max_split_size", s->max_split_size},
        /* hbmalloc extensions */
        {"expandable_segments", s->expandable_segments},
        {"num_expandable_segments", s->num_expandable_segments},
        {"arena_bytes", s->arena_bytes},
        {"plan_height", s->plan_height},
        {"plan_hits", s->plan_hits},
        {"plan_misses", s->plan_misses},
        {"plan_unplanned", s->plan_unplanned},
        {"plan_replans", s->plan_replans},
        {"steps", s->steps},
        {"asleep_pools", s->asleep_pools},
        {"asleep_bytes", s->asleep_bytes},
        {"backup_bytes", s->backup_bytes},
        {"device_used_bytes", s->device_used_bytes},
        {"outside_bytes", s->outside_bytes},
        {"outside_process_bytes", s->outside_process_bytes},
        {"outside_others_bytes", s->outside_others_bytes},
    };
    for (size_t i = 0; i < sizeof scalars / sizeof scalars[0]; i++, n++)
        if (n < cap) {
            snprintf(out[n].name, sizeof out[n].name, "%s", scalars[i].name);
            out[n].value = scalars[i].v;
        }
    if (n > cap)
        n = cap;
    qsort(out, (size_t)n, sizeof *out, entry_cmp);
    return n;
}
