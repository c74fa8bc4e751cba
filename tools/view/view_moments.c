/*
 * view_moments.c: the segment map of a run too large for the page to hold
 * every allocation (view_html.c decides). At a few hundred moments chosen
 * here (evenly spaced, plus the peak and the last before an out-of-memory)
 * the map is laid out as the page lays it out -- every reserved range end to
 * end, by address, over MAP_ROWS rows of MAP_W pixels -- and drawn to pixels:
 * the page gets run-length codes and the moment's figures, not the blocks.
 *
 * One sweep over the moments in order: an allocation or a range joins the
 * live set when its start is reached (records are in the order made) and
 * leaves it at its end; each moment sorts its live set by address. Work:
 * O(records + moments x (live log live + pixels)).
 */
#include "view_moments.h"

#include <stdlib.h>
#include <string.h>

#define MOMENTS 400 /* evenly spaced moments, besides the ones asked for */
#define PIXELS (MAP_ROWS * MAP_W)

typedef struct by_addr {
    uint64_t addr;
    uint32_t i;
} by_addr;

static int cmp_addr(const void *x, const void *y)
{
    const by_addr *a = x, *b = y;
    return a->addr != b->addr ? (a->addr < b->addr ? -1 : 1) : (a->i > b->i) - (a->i < b->i);
}

static int cmp_u32(const void *x, const void *y)
{
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return (a > b) - (a < b);
}

/* A list of pixel indices (boundaries, segment starts), kept short: a boundary narrower than 3 pixels is not
 * drawn. */
typedef struct marks {
    uint32_t *v;
    size_t n, cap;
} marks;

static int mark(marks *m, uint32_t px)
{
    if (m->n && m->v[m->n - 1] == px)
        return 0;
    if (m->n == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 256;
        uint32_t *v = realloc(m->v, cap * sizeof *v);
        if (!v)
            return -1;
        m->v = v;
        m->cap = cap;
    }
    m->v[m->n++] = px;
    return 0;
}

typedef struct canvas {
    double alloc[PIXELS];      /* allocated bytes in each pixel */
    double pend[PIXELS];       /* bytes of pending frees in each pixel */
    double bpp;                /* bytes per pixel */
    double pos;                /* bytes laid out so far */
    marks bounds, segs, holes; /* holes: unmapped pages between mapped runs of one segment */
} canvas;

enum { FREE, ALLOCATED, PENDING }; /* a piece's state */

/* Lays out the next piece: size bytes in that state; a boundary at its start when it is 3 pixels wide. */
static int piece(canvas *c, uint64_t size, int state, int seg_start)
{
    double a = c->pos, b = c->pos + (double)size;
    c->pos = b;
    uint32_t first = (uint32_t)(a / c->bpp);
    if (first >= PIXELS)
        first = PIXELS - 1;
    if ((seg_start && mark(&c->segs, first)) || ((double)size >= 3 * c->bpp && mark(&c->bounds, first)))
        return -1;
    if (state == FREE)
        return 0;
    double *to = state == ALLOCATED ? c->alloc : c->pend;
    for (uint32_t px = first; px < PIXELS && (double)px * c->bpp < b; px++) {
        double lo = (double)px * c->bpp, hi = lo + c->bpp;
        to[px] += (b < hi ? b : hi) - (a > lo ? a : lo);
    }
    return 0;
}

/* A pixel's colour for the page: 0 free, 1 allocated, 2 mixed (allocated or pending with free), 3 pending. */
static int pixel_code(const canvas *c, size_t px)
{
    double fa = c->alloc[px] / c->bpp, fp = c->pend[px] / c->bpp;
    return fa + fp < 0.02 ? 0 : fa > 0.98 ? 1 : fp > 0.98 ? 3 : 2;
}

static void write_marks(FILE *f, const char *name, const marks *m)
{
    fprintf(f, ",\"%s\":[", name);
    for (size_t k = 0; k < m->n; k++)
        fprintf(f, k ? ",%u" : "%u", m->v[k]);
    fputc(']', f);
}

/* Whether addr lies in pages of a sleeping pool at p (its block keeps its address there: not outside the map, not
 * in it either: asleep). */
static int asleep_at(const v_run *z, size_t nz, uint32_t p, uint64_t addr)
{
    for (size_t k = 0; k < nz; k++)
        if (z[k].start <= p && (z[k].end == OPEN || z[k].end > p) && addr >= z[k].addr && addr < z[k].addr + z[k].size)
            return 1;
    return 0;
}

int view_moments_write(FILE *f, const v_alloc *al, size_t nal, const v_run *run, size_t nrun, const v_run *asleep,
                       size_t nasleep, uint32_t x0, uint32_t last, const int64_t *alloc, const int64_t *resv,
                       const uint32_t *must, size_t nmust)
{
    size_t nm = 0;
    uint32_t *pos = malloc((MOMENTS + nmust) * sizeof *pos);
    uint32_t *live = malloc((nal ? nal : 1) * sizeof *live), *rlive = malloc((nrun ? nrun : 1) * sizeof *rlive);
    by_addr *blk = malloc((nal ? nal : 1) * sizeof *blk), *rng = malloc((nrun ? nrun : 1) * sizeof *rng);
    canvas *c = calloc(1, sizeof *c);
    int rc = pos && live && rlive && blk && rng && c ? 0 : -1;
    for (size_t k = 0; rc == 0 && k < MOMENTS; k++)
        pos[nm++] = x0 + (uint32_t)((uint64_t)(last - x0) * k / (MOMENTS - 1));
    for (size_t k = 0; rc == 0 && k < nmust; k++)
        if (must[k] >= x0 && must[k] <= last)
            pos[nm++] = must[k];
    if (rc == 0)
        qsort(pos, nm, sizeof *pos, cmp_u32);
    size_t nlive = 0, nrlive = 0, ka = 0, kr = 0;
    fputs(",\"map_rows\":" /* the page's layout, for a check */, f);
    fprintf(f, "%d,\"map_width\":%d,\"moments\":[", MAP_ROWS, MAP_W);
    for (size_t m = 0; rc == 0 && m < nm; m++) {
        uint32_t p = pos[m];
        if (m && p == pos[m - 1])
            continue;
        /* The live set at p. */
        for (; ka < nal && al[ka].start <= p; ka++)
            live[nlive++] = (uint32_t)ka;
        for (; kr < nrun && run[kr].start <= p; kr++)
            rlive[nrlive++] = (uint32_t)kr;
        size_t n = 0;
        for (size_t k = 0; k < nlive; k++)
            if (al[live[k]].end == OPEN || al[live[k]].end > p)
                live[n++] = live[k];
        nlive = n;
        n = 0;
        for (size_t k = 0; k < nrlive; k++)
            if (run[rlive[k]].end == OPEN || run[rlive[k]].end > p)
                rlive[n++] = rlive[k];
        nrlive = n;
        for (size_t k = 0; k < nlive; k++)
            blk[k] = (by_addr){al[live[k]].addr, live[k]};
        for (size_t k = 0; k < nrlive; k++)
            rng[k] = (by_addr){run[rlive[k]].addr, rlive[k]};
        qsort(blk, nlive, sizeof *blk, cmp_addr);
        qsort(rng, nrlive, sizeof *rng, cmp_addr);
        uint64_t reserved = 0;
        for (size_t k = 0; k < nrlive; k++)
            reserved += run[rng[k].i].size;
        memset(c->alloc, 0, sizeof c->alloc);
        memset(c->pend, 0, sizeof c->pend);
        c->bpp = reserved ? (double)reserved / PIXELS : 1;
        c->pos = 0;
        c->bounds.n = c->segs.n = c->holes.n = 0;
        /* The pieces, as the page's stateAt makes them: allocated blocks and the free gaps between them. */
        uint64_t unmapped = 0, allocated = 0, pending = 0, free_b = 0, largest = 0, nfree = 0, outside = 0;
        uint64_t covered = 0, segments = 0, asleep_b = 0, asleep_alloc = 0;
        for (size_t k = 0; k < nasleep; k++)
            if (asleep[k].start <= p && (asleep[k].end == OPEN || asleep[k].end > p))
                asleep_b += asleep[k].size;
#define STRAY(x) /* a block before the next range: asleep, or outside every range */ \
    do {                                                                             \
        if (asleep_at(asleep, nasleep, p, (x)->addr))                                \
            asleep_alloc += (x)->size;                                               \
        else                                                                         \
            outside++;                                                               \
    } while (0)
        size_t b = 0;
        const v_run *prev = NULL;
        for (size_t k = 0; rc == 0 && k < nrlive; k++) {
            const v_run *r = &run[rng[k].i];
            uint64_t lo = r->addr, hi = r->addr + r->size;
            /* Mapped pages right after mapped pages are one segment (a block may span them), and so are mapped runs of
             * one expandable segment's range with unmapped pages between them (a hole: a mark, no bytes). */
            int same_range = prev && r->mapped && prev->mapped && r->range >= 0 && r->range == prev->range;
            int cont = (r->mapped && prev && prev->mapped && covered >= lo) || same_range;
            int seg_start = !cont;
            segments += !cont;
            if (same_range && lo > covered) {
                unmapped += lo - covered;
                uint32_t px = (uint32_t)(c->pos / c->bpp);
                rc = mark(&c->holes, px < PIXELS ? px : PIXELS - 1);
            }
            uint64_t at = lo > covered ? lo : covered;
            for (; b < nlive && blk[b].addr < lo; b++)
                STRAY(&al[blk[b].i]);
            for (; rc == 0 && b < nlive && blk[b].addr < hi; b++) {
                const v_alloc *x = &al[blk[b].i];
                if (x->addr > at) {
                    uint64_t g = x->addr - at;
                    free_b += g;
                    nfree++;
                    largest = g > largest ? g : largest;
                    rc = piece(c, g, FREE, seg_start);
                    seg_start = 0;
                }
                int pend = x->freed && x->freed <= p;
                *(pend ? &pending : &allocated) += x->size;
                rc = rc ? rc : piece(c, x->size, pend ? PENDING : ALLOCATED, seg_start);
                seg_start = 0;
                at = x->addr + x->size;
            }
            if (rc == 0 && at < hi) {
                uint64_t g = hi - at;
                free_b += g;
                nfree++;
                largest = g > largest ? g : largest;
                rc = piece(c, g, FREE, seg_start);
            }
            covered = at > hi ? at : hi;
            prev = r;
        }
        for (; b < nlive; b++)
            STRAY(&al[blk[b].i]);
#undef STRAY
        size_t j = p - x0;
        fprintf(f,
                "%s{\"p\":%u,\"reserved\":%llu,\"allocated\":%llu,\"pending\":%llu,\"unmapped\":%llu,\"free\":%llu,"
                "\"largest\":%llu,\"nfree\":%llu,\"segments\":%llu,\"live\":%zu,\"runs\":%zu,\"outside\":%llu,"
                "\"stats_reserved\":%lld,\"stats_allocated\":%lld,",
                m ? ",\n" : "", p, (unsigned long long)reserved, (unsigned long long)allocated,
                (unsigned long long)pending, (unsigned long long)unmapped, (unsigned long long)free_b,
                (unsigned long long)largest, (unsigned long long)nfree, (unsigned long long)segments, nlive, nrlive,
                (unsigned long long)outside, (long long)resv[j], (long long)alloc[j]);
        if (nasleep) /* pages of sleeping pools: their bytes, and the live blocks in them (allocated, not mapped) */
            fprintf(f, "\"asleep\":%llu,\"asleep_allocated\":%llu,", (unsigned long long)asleep_b,
                    (unsigned long long)asleep_alloc);
        fputs("\"rle\":[", f);
        for (size_t px = 0, k = 0; reserved && px < PIXELS; px = k) {
            int code = pixel_code(c, px);
            for (k = px + 1; k < PIXELS && pixel_code(c, k) == code; k++)
                ;
            fprintf(f, px ? ",%d,%zu" : "%d,%zu", code, k - px);
        }
        fputc(']', f);
        write_marks(f, "bounds", &c->bounds);
        write_marks(f, "segs", &c->segs);
        write_marks(f, "holes", &c->holes);
        fputc('}', f);
    }
    fputs("]", f);
    if (c) {
        free(c->bounds.v);
        free(c->segs.v);
        free(c->holes.v);
    }
    free(c);
    free(pos);
    free(live);
    free(rlive);
    free(blk);
    free(rng);
    return rc;
}
