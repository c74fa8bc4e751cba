/*
 * arena.c: the hbm_arena policy (hbm_arena_mb, hbm_arena_fraction), for
 * devices without virtual memory. As JAX, TensorFlow's BFC and MindSpore do,
 * one large device allocation is made up front and sub-allocated: every
 * request of the stream that allocated first, small or large, is served best
 * fit from it, split down to 512 bytes and coalesced across the whole region,
 * with none of the caching policy's rounding to 2 or 20 MiB segments and no
 * small/large separation. What does not fit goes to ordinary segments, which
 * empty_cache, garbage collection and the OOM retry release as before; the
 * arena itself is kept until hbm_destroy (its memory is the job's budget, as a
 * preallocating framework's is).
 *
 * Owns the arena's sizing and creation, for every policy with a region (the plan file's and the step plan's are
 * at least their plan's height), and the arena policy's row of the interface. The region's mechanics are core's
 * (core/region.c: reserve, best fit, retire); blocks, stats, snapshots and the validator treat it as a large-pool
 * segment. Other streams' requests do not use it: a block freed on one stream may still be in use by that
 * stream's queued work, and the caching policy reuses memory across streams only through events (record_stream).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/device.h"
#include "policy/arena.h"
#include "util/util.h"

#define ARENA_UNIT (2 * HBM__MiB) /* a fraction-sized arena is rounded down to this */

static void give_up(hbm_allocator *a, const char *why)
{
    char text[300];
    snprintf(text, sizeof text, "%s: allocations use segments instead", why);
    hbm__warning_add(a, text);
    hbm__rp(a)->wanted = false;
}

void hbm__region_make(hbm_allocator *a, hbm_stream stream)
{
    hbm__region_policy *rp = hbm__rp(a);
    rp->wanted = false;
    size_t size = a->conf.arena_bytes;
    if (!size && a->conf.arena_fraction > 0) {
        size_t dev_free = 0, total = 0;
        if (hbm__dev_info(a, &dev_free, &total) != HBM_OK) {
            give_up(a, "hbm_arena_fraction: the device's free memory could not be read");
            return;
        }
        size = (size_t)((double)dev_free * a->conf.arena_fraction) / ARENA_UNIT * ARENA_UNIT;
    }
    if (size < rp->plan.height) /* a plan: the arena is at least its height */
        size = (size_t)rp->plan.height;
    char s_size[32];
    hbm__format_size(size, s_size, sizeof s_size);
    char why[200];
    if (size < ARENA_UNIT && !rp->plan.height) {
        snprintf(why, sizeof why, "hbm_arena: an arena of %s is too small", s_size);
        give_up(a, why);
        return;
    }
    if (a->fraction_set && a->total_reserved + size > a->allowed_max) {
        snprintf(why, sizeof why, "hbm_arena: an arena of %s exceeds the memory fraction's limit", s_size);
        give_up(a, why);
        return;
    }
    /* Beside expandable segments a plan's region (the plan file's, the step plan's) is address space whose pages
     * are mapped as its planned allocations touch them (core/region.c), and when a higher plan retires it, its free
     * pages are unmapped as it drains, as any expandable segment's. An arena alone stays one device allocation of
     * the size asked for, kept to the end. */
    hbm_status rc = hbm__region_reserve(a, stream, size, a->expandable && (rp->steps || rp->plan.n));
    if (rc != HBM_OK) {
        snprintf(why, sizeof why, "hbm_arena: the device could not give an arena of %s (%s)", s_size,
                 hbm_status_name(rc));
        give_up(a, why);
        a->err[0] = 0; /* not this call's error: the allocation goes on with segments */
    }
}

hbm__block *hbm__arena_serve(hbm_allocator *a, hbm_stream stream, size_t size, uint64_t *note)
{
    (void)note;
    if (__builtin_expect(!a->region_seg, 0) && hbm__rp(a)->wanted)
        hbm__region_make(a, stream);
    return a->region_seg && stream == a->region_stream ? hbm__region_best_fit(a, stream, size) : NULL;
}

void hbm__region_policy_stats(hbm_allocator *a, hbm_stats *st, size_t *positions)
{
    const hbm__plan *pl = hbm__plan_of(a);
    st->plan_height = (int64_t)pl->height;
    *positions = pl->n;
}

void hbm__region_policy_validate(hbm_allocator *a, void (*fail)(void *ck, const char *what), void *ck)
{
    hbm__plan_check(a, hbm__plan_of(a), fail, ck);
}

void hbm__region_policy_teardown(hbm_allocator *a)
{
    hbm__plan *pl = hbm__plan_of(a);
    hbm__plan_clear(pl);
    hbm__plan_indexes_free(pl);
    free(a->pol);
    a->pol = NULL;
}

static const hbm__policy_ops arena_ops = {
    .name = "hbm_arena",
    .serve = hbm__arena_serve,
    .stats = hbm__region_policy_stats,
    .validate = hbm__region_policy_validate,
    .teardown = hbm__region_policy_teardown,
};

hbm__region_policy *hbm__region_policy_new(hbm_allocator *a, const hbm__policy_ops *ops, size_t size)
{
    hbm__region_policy *rp = calloc(1, size);
    if (!rp)
        return NULL;
    rp->base.ops = ops;
    rp->wanted = a->conf.arena_bytes || a->conf.arena_fraction > 0 || a->conf.plan_file[0];
    a->pol = &rp->base;
    return rp;
}

hbm_status hbm__arena_policy_create(hbm_allocator *a, char *err, size_t errlen)
{
    if (hbm__region_policy_new(a, &arena_ops, sizeof(hbm__region_policy)))
        return HBM_OK;
    snprintf(err, errlen, "out of host memory");
    return HBM_ERR_NOMEM;
}
