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
 * Owns the arena's creation and sizing. The engine serves from it (engine.c:
 * the arena pool is searched first, should_split and whole_segment know it);
 * blocks, stats, snapshots and the validator treat it as a large-pool segment.
 * Other streams' requests do not use it: a block freed on one stream may still
 * be in use by that stream's queued work, and the caching policy reuses memory
 * across streams only through events (record_stream).
 */
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "pool.h"
#include "util.h"

#define ARENA_UNIT (2 * HBM__MiB) /* a fraction-sized arena is rounded down to this */

static void give_up(hbm_allocator *a, const char *why)
{
    size_t n = strlen(a->warning);
    snprintf(a->warning + n, sizeof a->warning - n, "%s%s: allocations use segments instead", n ? "; " : "", why);
    a->arena_wanted = false;
}

void hbm__arena_create(hbm_allocator *a, hbm_stream stream)
{
    a->arena_wanted = false;
    size_t size = a->conf.arena_bytes;
    if (!size) {
        size_t dev_free = 0, total = 0;
        if (hbm__dev_info(a, &dev_free, &total) != HBM_OK) {
            give_up(a, "hbm_arena_fraction: the device's free memory could not be read");
            return;
        }
        size = (size_t)((double)dev_free * a->conf.arena_fraction) / ARENA_UNIT * ARENA_UNIT;
    }
    char s_size[32];
    hbm__format_size(size, s_size, sizeof s_size);
    char why[200];
    if (size < ARENA_UNIT) {
        snprintf(why, sizeof why, "hbm_arena: an arena of %s is too small", s_size);
        give_up(a, why);
        return;
    }
    if (a->fraction_set && a->total_reserved + size > a->allowed_max) {
        snprintf(why, sizeof why, "hbm_arena: an arena of %s exceeds the memory fraction's limit", s_size);
        give_up(a, why);
        return;
    }
    hbm__block *b;
    hbm_status rc = hbm__segment_new(a, &a->arena, stream, size, &b);
    if (rc != HBM_OK) {
        snprintf(why, sizeof why, "hbm_arena: the device could not give an arena of %s (%s)", s_size,
                 hbm_status_name(rc));
        give_up(a, why);
        a->err[0] = 0; /* not this call's error: the allocation goes on with segments */
        return;
    }
    hbm__pool_insert(&a->arena, b);
    a->arena_on = true;
    a->arena_stream = stream;
    a->arena_size = size;
}
