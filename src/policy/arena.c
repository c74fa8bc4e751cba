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
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/engine.h"
#include "core/expandable.h"
#include "core/device.h"
#include "policy/arena.h"
#include "policy/plan_region.h"
#include "core/pool.h"
#include "util/util.h"

#define ARENA_UNIT (2 * HBM__MiB) /* a fraction-sized arena is rounded down to this */

static void give_up(hbm_allocator *a, const char *why)
{
    char text[300];
    snprintf(text, sizeof text, "%s: allocations use segments instead", why);
    hbm__warning_add(a, text);
    a->arena_wanted = false;
}

void hbm__arena_create(hbm_allocator *a, hbm_stream stream)
{
    a->arena_wanted = false;
    size_t size = a->conf.arena_bytes;
    if (!size && a->conf.arena_fraction > 0) {
        size_t dev_free = 0, total = 0;
        if (hbm__dev_info(a, &dev_free, &total) != HBM_OK) {
            give_up(a, "hbm_arena_fraction: the device's free memory could not be read");
            return;
        }
        size = (size_t)((double)dev_free * a->conf.arena_fraction) / ARENA_UNIT * ARENA_UNIT;
    }
    if (size < a->plan_height) /* a plan: the arena is at least its height */
        size = (size_t)a->plan_height;
    char s_size[32];
    hbm__format_size(size, s_size, sizeof s_size);
    char why[200];
    if (size < ARENA_UNIT && !a->plan_height) {
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
    /* Beside expandable segments a plan's region (the plan file's, the step plan's) is address space whose pages
     * are mapped as its planned allocations touch them (plan_region.c), and when a higher plan retires it, its free pages
     * are unmapped as it drains, as any expandable segment's. An arena alone stays one device allocation of the
     * size asked for, kept to the end. */
    hbm_status rc = a->expandable && (a->sp || a->plan_n) ? hbm__expand_region(a, &a->arena, stream, size, &b)
                                                          : hbm__segment_new(a, &a->arena, stream, size, &b);
    if (rc != HBM_OK) {
        snprintf(why, sizeof why, "hbm_arena: the device could not give an arena of %s (%s)", s_size,
                 hbm_status_name(rc));
        give_up(a, why);
        a->err[0] = 0; /* not this call's error: the allocation goes on with segments */
        return;
    }
    if (!b->in_tree)
        hbm__pool_insert(&a->arena, b);
    a->arena_seg = b->seg;
    hbm__lazy_region(a);
    a->arena_stream = stream;
    hbm__published(a); /* the region is reserved (the allocation after it is a cache hit in it) */
}

/* ---- hbm_plan_file: a plan (hbmalloc plan -o) served from the arena ---- */

typedef struct plan_end {
    uint64_t end; /* offset + size */
    uint32_t start, k;
} plan_end;

static int by_end(const void *x, const void *y)
{
    const plan_end *a = x, *b = y;
    return a->end != b->end ? (a->end < b->end ? -1 : 1) : (a->start > b->start) - (a->start < b->start);
}

/* For each allocation, the one planned right below it (its range ends where k's begins) that is live when k is
 * allocated, the latest such: when that one is live at serving time, k's range lies in the block after it, found
 * in O(1) through the live map instead of a walk. At most 64 candidates are looked at per allocation. */
int hbm__plan_neighbours(hbm_allocator *a, const uint32_t *start, const uint32_t *end)
{
    size_t n = a->plan_n;
    plan_end *e = malloc((n ? n : 1) * sizeof *e);
    a->plan_below = malloc((n ? n : 1) * sizeof *a->plan_below);
    if (!e || !a->plan_below) {
        free(e);
        return -1;
    }
    for (size_t k = 0; k < n; k++)
        e[k] = (plan_end){a->plan_off[k] + a->plan_size[k], start[k], (uint32_t)k};
    qsort(e, n, sizeof *e, by_end);
    for (size_t k = 0; k < n; k++) {
        a->plan_below[k] = UINT32_MAX;
        size_t lo = 0, hi = n; /* first entry ending at or above off[k] */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (e[mid].end < a->plan_off[k])
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t i = lo, seen = 0; i < n && e[i].end == a->plan_off[k] && seen < 64; i++, seen++)
            if (e[i].start <= start[k] && start[k] < end[e[i].k])
                a->plan_below[k] = e[i].k; /* sorted by start: the last one found is the latest */
    }
    free(e);
    return 0;
}

void hbm__plan_clear(hbm_allocator *a)
{
    free(a->plan_off);
    free(a->plan_size);
    free(a->plan_below);
    a->plan_below = NULL;
    a->plan_off = a->plan_size = NULL;
    a->plan_n = 0;
    a->plan_height = 0;
}

hbm_status hbm__plan_load(hbm_allocator *a, char *err, size_t errlen)
{
    const char *path = a->conf.plan_file;
    /* Opened without blocking (a FIFO blocks in open() until a writer comes, maybe never) and read only when it is
     * a regular file (a device or a pipe could block or never end). */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    int regular = fd >= 0 && !fstat(fd, &st) && S_ISREG(st.st_mode);
    FILE *f = regular ? fdopen(fd, "r") : NULL;
    if (!f) {
        snprintf(err, errlen, "hbm_plan_file: cannot open %.200s%s", path,
                 fd >= 0 && !regular ? " (not a regular file)" : "");
        if (fd >= 0)
            close(fd);
        return HBM_ERR_CONF;
    }
    char line[256];
    size_t lineno = 0, cap[4] = {0};           /* of plan_off, plan_size, start_at, end_at */
    uint32_t *start_at = NULL, *end_at = NULL; /* lifetimes, for plan_neighbours */
    int header = 0;
    hbm_status rc = HBM_OK;
    const char *why = NULL;
    while (!why && fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            why = "line too long";
            break;
        }
        if (line[0] == '#' || line[0] == '\n')
            continue;
        unsigned long long k, off, size, start, end;
        char extra;
        if (!header) {
            if (strcmp(line, "hbmplan 1\n") && strcmp(line, "hbmplan 1"))
                why = "not a plan file (its first line must be 'hbmplan 1')";
            header = 1;
        } else if (!a->plan_height) {
            if (sscanf(line, "height %llu %c", &size, &extra) != 1 || !size || size > (1ull << 56))
                why = "expected 'height BYTES' (1 to 2^56)";
            else
                a->plan_height = size;
        } else if (sscanf(line, "%llu %llu %llu %llu %llu %c", &k, &off, &size, &start, &end, &extra) != 5) {
            why = "expected 'alloc offset size start end'";
        } else if (k != a->plan_n) {
            why = "allocations must be numbered 0, 1, 2, ... in order";
        } else if (!size || size % 512 || off % 512 || off > a->plan_height || size > a->plan_height - off) {
            why = "offset and size must be multiples of 512 inside the height";
        } else if (start >= end || end > UINT32_MAX) {
            why = "the lifetime [start, end) must be a non-empty range of event numbers";
        } else {
            size_t need = a->plan_n + 1;
            if (hbm__grow((void **)&a->plan_off, &cap[0], need, sizeof *a->plan_off) ||
                hbm__grow((void **)&a->plan_size, &cap[1], need, sizeof *a->plan_size) ||
                hbm__grow((void **)&start_at, &cap[2], need, sizeof *start_at) ||
                hbm__grow((void **)&end_at, &cap[3], need, sizeof *end_at)) {
                rc = HBM_ERR_NOMEM;
                why = "out of host memory";
                break;
            }
            a->plan_off[a->plan_n] = off;
            start_at[a->plan_n] = (uint32_t)start;
            end_at[a->plan_n] = (uint32_t)end;
            a->plan_size[a->plan_n++] = size;
        }
    }
    if (!why && ferror(f))
        why = "read error";
    if (!why && !a->plan_height)
        why = "no height line";
    fclose(f);
    if (!why && hbm__plan_neighbours(a, start_at, end_at)) {
        rc = HBM_ERR_NOMEM;
        why = "out of host memory";
    }
    free(start_at);
    free(end_at);
    if (why) {
        snprintf(err, errlen, "hbm_plan_file: %.200s:%zu: %s", path, lineno, why);
        hbm__plan_clear(a);
        return rc != HBM_OK ? rc : HBM_ERR_CONF;
    }
    hbm__lazy_plan(a); /* the region is served lazily while the plan is in force */
    return HBM_OK;
}

/* The region's address index: one hint per chunk of the region, about one chunk per planned allocation. A hint is
 * a block object of the region seen in that chunk; block objects are recycled when blocks merge, so a hint is used
 * only while it still describes a block of this region (allocated, or free in the tree): a stale hint costs a
 * walk, never a wrong answer. Remade (cleared) whenever the region is another range (by address and size: a new
 * region's segment object may have an old one's address). */
static void hints_for(hbm_allocator *a, const hbm__segment *seg)
{
    size_t want = 1;
    while (want < a->plan_n && want < ((size_t)1 << 20))
        want <<= 1;
    unsigned shift = 9; /* chunks of 512 bytes at least: the smallest block */
    while (((size_t)1 << shift) * want < seg->size)
        shift++;
    size_t n = (seg->size >> shift) + 1;
    if (n > a->plan_hint_n) {
        hbm__block **h = realloc(a->plan_hint, n * sizeof *h);
        if (!h) { /* no index: the walks alone */
            free(a->plan_hint);
            a->plan_hint = NULL;
            a->plan_hint_n = 0;
            a->plan_hint_addr = seg->addr;
            a->plan_hint_size = seg->size;
            return;
        }
        a->plan_hint = h;
    }
    a->plan_hint_n = n;
    a->plan_hint_shift = shift;
    memset(a->plan_hint, 0, n * sizeof *a->plan_hint);
    a->plan_hint_addr = seg->addr;
    a->plan_hint_size = seg->size;
}

void hbm__plan_hints_free(hbm_allocator *a)
{
    free(a->plan_hint);
    a->plan_hint = NULL;
    a->plan_hint_n = 0;
    a->plan_hint_size = 0;
}

/* The block of the region that holds address `at`. */
static hbm__block *region_block(hbm_allocator *a, uintptr_t at)
{
    const hbm__segment *seg = a->arena_seg;
    if (at - seg->addr >= seg->size) /* a plan taller than the region in force (a new one not yet reserved) */
        return NULL;
    if (a->plan_hint_addr != seg->addr || a->plan_hint_size != seg->size)
        hints_for(a, seg);
    hbm__block **hint = a->plan_hint ? &a->plan_hint[(at - seg->addr) >> a->plan_hint_shift] : NULL;
    hbm__block *b = hint ? *hint : NULL;
    if (!b || b->seg != seg || !(b->allocated || b->in_tree || b->loose)) {
        b = a->plan_cursor ? hbm__ptrmap_get(&a->live, a->plan_cursor) : NULL;
        if (!b || b->seg != seg)
            b = seg->head;
    }
    while (b && b->addr > at)
        b = b->prev;
    while (b && b->addr + b->size <= at)
        b = b->next;
    if (hint)
        *hint = b;
    return b;
}

hbm__block *hbm__region_find(hbm_allocator *a, size_t k, uintptr_t at)
{
    uint32_t j = a->plan_below[k];
    hbm__block *b = j != UINT32_MAX ? hbm__ptrmap_get(&a->live, a->arena_seg->addr + a->plan_off[j]) : NULL;
    b = b && b->seg == a->arena_seg ? b->next : !a->plan_off[k] ? a->arena_seg->head : NULL;
    if (!b || b->addr > at || b->addr + b->size <= at)
        b = region_block(a, at);
    return b;
}

hbm__block *hbm__plan_block(hbm_allocator *a, size_t size)
{
    size_t k = a->plan_next++;
    if (k >= a->plan_n || size > a->plan_size[k]) {
        a->stats.plan_misses++;
        return NULL;
    }
    return hbm__plan_take(a, k, size);
}
