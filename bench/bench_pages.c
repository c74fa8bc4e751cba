/*
 * bench_pages.c: where the reserved-but-unallocated memory of expandable
 * segments is at the moment of peak reserved. Replays each trace under the
 * given settings on a 1 TiB simulated device and, each time reserved memory
 * reaches a new peak, splits every pool's mapped bytes into allocated, free in
 * whole pages (which hbm_remap_free_pages can move, and empty_cache can return)
 * and free inside pages that also hold live blocks (which no remapping returns
 * without moving data). Deterministic.
 *
 * usage: bench_pages SETTINGS TRACE...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbmalloc.h"
#include "trace/trace.h"

typedef struct split {
    size_t mapped, allocated, free_whole, free_partial;
} split;

/* Bytes of [lo, hi) that whole pages of g's segment cover (pages counted from the start of its address range). */
static size_t whole_pages(const hbm_snap_segment *g, uint64_t lo, uint64_t hi)
{
    uint64_t pg = g->page_size, base = g->range_addr;
    uint64_t first = base + (lo - base + pg - 1) / pg * pg, end = base + (hi - base) / pg * pg;
    return end > first ? (size_t)(end - first) : 0;
}

/* [0] small pool, [1] large pool; whole (non-expandable) segments count as one page each. From a snapshot: one
 * entry per segment, or per mapped run of an expandable one. */
static void measure(hbm_allocator *a, split out[2])
{
    memset(out, 0, 2 * sizeof *out);
    hbm_snapshot *s;
    if (hbm_snapshot_take(a, &s) != HBM_OK) {
        fprintf(stderr, "bench_pages: out of host memory for a snapshot\n");
        exit(2);
    }
    for (size_t i = 0; i < s->nsegments; i++) {
        const hbm_snap_segment *g = &s->segments[i];
        split *k = &out[g->is_small ? 0 : 1];
        for (size_t j = g->first_block; j < g->first_block + g->nblocks; j++) {
            const hbm_snap_block *b = &s->blocks[j];
            k->mapped += b->size;
            if (b->state != HBM_BLOCK_INACTIVE) {
                k->allocated += b->size;
            } else {
                size_t whole = g->is_expandable ? whole_pages(g, b->addr, b->addr + b->size)
                                                : (g->nblocks == 1 ? b->size : 0);
                k->free_whole += whole;
                k->free_partial += b->size - whole;
            }
        }
    }
    hbm_snapshot_free(s);
}

static double mib(size_t v) { return (double)v / 1048576.0; }

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: bench_pages SETTINGS TRACE...\n");
        return 2;
    }
    printf("| trace | peak allocated | peak reserved | ratio | pool | mapped | allocated | free in whole pages | "
           "free inside pages with live blocks |\n|---|---|---|---|---|---|---|---|---|\n");
    for (int f = 2; f < argc; f++) {
        trace t;
        char err[512];
        if (trace_read_any(argv[f], 0, &t, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 2;
        }
        void **slot = calloc(t.nslots + 1, sizeof *slot);
        hbm_allocator *a;
        if (!slot || hbm_open(&a, "sim:capacity=1TiB", 0, argv[1], err, sizeof err) != HBM_OK) {
            fprintf(stderr, "%s\n", slot ? err : "out of memory");
            return 2;
        }
        size_t peak = 0;
        split at[2] = {{0}};
        for (size_t i = 0; i < t.n; i++) {
            const trace_event *e = &t.ev[i];
            hbm_status rc = e->kind == EV_ALLOC  ? hbm_malloc(a, (size_t)e->size, e->stream, &slot[e->slot])
                            : e->kind == EV_FREE ? hbm_free(a, slot[e->slot])
                                                 : hbm_empty_cache(a);
            if (rc != HBM_OK) {
                fprintf(stderr, "%s: event %zu: %s\n", argv[f], i, hbm_last_error(a));
                return 2;
            }
            hbm_usage u;
            hbm_memory_usage(a, &u);
            if (u.reserved > peak) {
                peak = u.reserved;
                measure(a, at);
            }
        }
        const char *name = strrchr(argv[f], '/') ? strrchr(argv[f], '/') + 1 : argv[f];
        hbm_stats st;
        hbm_get_stats(a, &st);
        size_t peak_alloc = (size_t)st.allocated_bytes[HBM_POOL_ALL].peak;
        for (int k = 0; k < 2; k++) {
            if (k == 0)
                printf("| %s | %.1f MiB | %.1f MiB | %.4f ", name, mib(peak_alloc), mib(peak),
                       peak_alloc ? (double)peak / (double)peak_alloc : 0.0);
            else
                printf("| | | | ");
            printf("| %s | %.1f MiB | %.1f MiB | %.1f MiB | %.1f MiB |\n", k ? "large" : "small", mib(at[k].mapped),
                   mib(at[k].allocated), mib(at[k].free_whole), mib(at[k].free_partial));
        }
        hbm_destroy(a);
        free(slot);
        trace_free(&t);
    }
    return 0;
}
