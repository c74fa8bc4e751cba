/*
 * view.c: a self-contained picture of a replay: allocated and reserved bytes
 * over the trace (one point per event, thinned to the width), and the segment
 * map at the moment of peak reserved memory with blocks coloured by state.
 * SVG with no external references; ".png" is that SVG rendered by librsvg's
 * rsvg-convert (refused, with what to install, when it is not on PATH: never
 * an SVG in a file named .png); ".html" is the interactive page of
 * view_html.c, fed from the same replay. Owns drawing only: every number
 * comes from the public API.
 */
#include "view.h"

#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#include "util.h"
#include "view_html.h"
#include "view_draw.h"
#include "view_ranks.h"

#define W 1200
#define H 860
#define PLOT_X 110
#define PLOT_W 1040
#define PLOT_Y 86
#define PLOT_H 314
#define MAP_Y 496
#define MAP_ROWS 16
#define MAP_ROW_H 19

typedef struct series {
    int64_t *alloc, *resv;
    int64_t *asleep; /* of alloc, the blocks of sleeping pools (NULL: the trace has no sleep or wake) */
    size_t n;
} series;

/* The SVG helpers this picture shares with view_ranks.c (view_draw.c), by their names here. */
static void xml_text(FILE *f, const char *s) { view_xml_text(f, s); }
static uint64_t bin_step(uint64_t max, uint64_t most) { return view_bin_step(max, most); }

/* An event axis's step: 1, 2 or 5 times a power of ten (the page's decStep), the smallest giving at most `most`
 * intervals up to max. */
static uint64_t dec_step(uint64_t max, uint64_t most)
{
    for (uint64_t s = 1;; s *= 10)
        for (uint64_t m = 1; m <= 5; m += m == 2 ? 3 : 1)
            if (max <= most * s * m)
                return s * m;
}

static void tick_label(uint64_t v, uint64_t step, char *out, size_t len) { view_tick_label(v, step, out, len); }

/* Where the picture has ink that a label must not cover: per pixel column of the plot, the heights each curve
 * passes through there (a step to the next point included), and the markers' boxes. */
#define INK_CURVES 3
#define INK_MARKS 64
typedef struct ink_box {
    double x0, y0, x1, y1;
} ink_box;
typedef struct ink {
    float lo[INK_CURVES][PLOT_W], hi[INK_CURVES][PLOT_W];
    int ncurves;
    ink_box mark[INK_MARKS];
    int nmarks;
} ink;

/* v as a curve (one point per pixel column: the maximum over the events it covers, so peaks stay visible), dashed
 * when `dash` is not NULL; its columns noted in k. */
static void polyline(FILE *f, const int64_t *v, size_t n, int64_t ymax, const char *colour, const char *id,
                     const char *dash, ink *k)
{
    fprintf(f, "<polyline id=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s%s%s points=\"", id, colour,
            dash ? " stroke-dasharray=\"" : "", dash ? dash : "", dash ? "\"" : "");
    int c = k->ncurves < INK_CURVES ? k->ncurves++ : INK_CURVES - 1;
    double prev = 0;
    for (int px = 0; px < PLOT_W; px++) { /* (nothing drawn: no ink) */
        k->lo[c][px] = (float)(PLOT_Y + PLOT_H + 100);
        k->hi[c][px] = (float)(PLOT_Y - 100);
    }
    for (int px = 0; px < PLOT_W && n; px++) {
        size_t lo = (size_t)px * n / PLOT_W, hi = (size_t)(px + 1) * n / PLOT_W;
        if (hi <= lo)
            hi = lo + 1;
        if (lo >= n)
            break;
        int64_t m = v[lo];
        for (size_t i = lo; i < hi && i < n; i++)
            if (v[i] > m)
                m = v[i];
        double y = PLOT_Y + PLOT_H - (double)m / (double)ymax * PLOT_H, from = px ? prev : y;
        fprintf(f, "%d,%.1f ", PLOT_X + px, y);
        k->lo[c][px] = (float)((from < y ? from : y) - 1.0); /* the stroke's half width, and a little */
        k->hi[c][px] = (float)((from > y ? from : y) + 1.0);
        prev = y;
    }
    fputs("\"/>\n", f);
}

/* Whether the box x0..x1, y0..y1 has no ink. */
static int ink_free(const ink *k, double x0, double y0, double x1, double y1)
{
    for (int m = 0; m < k->nmarks; m++)
        if (x0 < k->mark[m].x1 && k->mark[m].x0 < x1 && y0 < k->mark[m].y1 && k->mark[m].y0 < y1)
            return 0;
    int a = (int)(x0 - PLOT_X) - 1, b = (int)(x1 - PLOT_X) + 1;
    for (int px = a < 0 ? 0 : a; px <= b && px < PLOT_W; px++)
        for (int c = 0; c < k->ncurves; c++)
            if (k->hi[c][px] >= y0 && k->lo[c][px] <= y1)
                return 0;
    return 1;
}

/* A text's width at 12 pixels, at most (7 pixels a character: DejaVu Sans and Helvetica draw digits 6.7-7.6 pixels
 * wide, lower-case letters less, a space 3.8), for placing it clear of the curves. */
static double text_w(const char *s)
{
    double n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return 7.0 * n;
}

/* A label `w` pixels wide for the line at height `line`: where no curve or marker is, as near as can be to `want` (its
 * left edge): on the line (the text just above it, or just under it) anywhere along it, else a line of text further
 * up or down at a time. Its left edge and baseline; 0 if no place in the plot is free (then beside `want`). */
static int place_label(const ink *k, double w, double want, double line, double *x, double *base)
{
    for (int j = 0; j < PLOT_H / 15; j++)
        for (int d = 0; d <= PLOT_W; d += 4)
            for (int side = 0; side < 4; side++) {
                double x0 = want + (side & 1 ? -d : d), b = side & 2 ? line + 16 + 15 * j : line - 5 - 15 * j;
                if ((d == 0 && side & 1) || x0 < PLOT_X + 2 || x0 + w > PLOT_X + PLOT_W - 2)
                    continue;
                if (b - 12 >= PLOT_Y && b + 4 <= PLOT_Y + PLOT_H && ink_free(k, x0, b - 12, x0 + w, b + 4)) {
                    *x = x0;
                    *base = b;
                    return 1;
                }
            }
    *x = want < PLOT_X + 2 ? PLOT_X + 2 : want;
    *base = line - 5;
    return 0;
}

static const char *state_colour(hbm_block_state st)
{
    return st == HBM_BLOCK_ALLOCATED ? "#3b6fd4" : st == HBM_BLOCK_PENDING_FREE ? "#e8a33d" : "#d9d9d9";
}

/* The segment map: segments one after another over MAP_ROWS rows, sizes to scale, a ruler above the first row. The
 * runs of a sleeping pool are left out: their pages were given back (map_title counts them apart). */
static void segment_map(FILE *f, const hbm_snapshot *s)
{
    uint64_t total = 0;
    for (size_t i = 0; i < s->nsegments; i++)
        total += s->segments[i].is_asleep ? 0 : s->segments[i].total_size;
    if (!total)
        return;
    double per_row = (double)total / MAP_ROWS, scale = PLOT_W / per_row;
    uint64_t step = bin_step((uint64_t)per_row, 8);
    char tick[32], row[32], every[32];
    for (uint64_t v = 0; (double)v <= per_row; v += step) {
        double x = PLOT_X + (double)v * scale;
        tick_label(v, step, tick, sizeof tick);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#222\"/>\n", x, MAP_Y - 6, x, MAP_Y - 1);
        fprintf(f, "<text class=\"mtick\" x=\"%.1f\" y=\"%d\" font-size=\"11\" text-anchor=\"middle\">%s</text>\n", x,
                MAP_Y - 8, tick);
    }
    hbm__format_size((uint64_t)per_row, row, sizeof row);
    tick_label(step, step, every, sizeof every);
    fprintf(f,
            "<text x=\"20\" y=\"%d\" fill=\"#555\">Every segment end to end over %d rows, to scale: a row is %s, "
            "ticks every %s.</text>\n",
            MAP_Y - 26, MAP_ROWS, row, every);
    double pos = 0; /* bytes laid out so far */
    for (size_t i = 0; i < s->nsegments; i++) {
        const hbm_snap_segment *g = &s->segments[i];
        if (g->is_asleep)
            continue;
        double seg_start = pos;
        for (size_t k = 0; k < g->nblocks; k++) {
            const hbm_snap_block *b = &s->blocks[g->first_block + k];
            double start = pos, end = pos + (double)b->size;
            while (start < end) { /* a block may wrap onto the next row */
                int r = (int)(start / per_row);
                if (r >= MAP_ROWS)
                    r = MAP_ROWS - 1;
                double row_end = (r + 1) * per_row, stop = end < row_end ? end : row_end;
                double x = PLOT_X + (start - r * per_row) * scale, w = (stop - start) * scale;
                if (w >= 0.2)
                    fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"/>\n", x,
                            MAP_Y + r * (MAP_ROW_H + 2), w, MAP_ROW_H, state_colour(b->state));
                if (stop <= start)
                    break;
                start = stop;
            }
            pos = end;
        }
        /* A thin line where each segment starts. */
        int r = (int)(seg_start / per_row);
        if (r >= MAP_ROWS)
            r = MAP_ROWS - 1;
        fprintf(f, "<rect x=\"%.2f\" y=\"%d\" width=\"0.8\" height=\"%d\" fill=\"#222\"/>\n",
                PLOT_X + (seg_start - r * per_row) * scale, MAP_Y + r * (MAP_ROW_H + 2), MAP_ROW_H);
    }
}

/* The map's figures (docs/TOOL.md, "Terms"): unallocated = reserved - allocated (pending frees are not
 * allocated), fragmentation = 1 - largest cached free block / cached free bytes. */
static void map_title(FILE *f, const hbm_snapshot *s)
{
    uint64_t reserved = 0, allocated = 0, free_b = 0, largest = 0, asleep = 0;
    size_t nseg = s ? s->nsegments : 0, nasleep = 0;
    for (size_t i = 0; i < nseg; i++) {
        const hbm_snap_segment *g = &s->segments[i];
        if (g->is_asleep) { /* a sleeping pool's run: no memory, its blocks kept at their addresses */
            asleep += g->total_size;
            nasleep++;
            continue;
        }
        reserved += g->total_size;
        for (size_t k = 0; k < g->nblocks; k++) {
            const hbm_snap_block *b = &s->blocks[g->first_block + k];
            allocated += b->state == HBM_BLOCK_ALLOCATED ? b->size : 0;
            if (b->state == HBM_BLOCK_INACTIVE) {
                free_b += b->size;
                largest = b->size > largest ? b->size : largest;
            }
        }
    }
    char total[32], unalloc[32], big[32], cached[32];
    hbm__format_size(reserved, total, sizeof total);
    hbm__format_size(reserved - allocated, unalloc, sizeof unalloc);
    hbm__format_size(largest, big, sizeof big);
    hbm__format_size(free_b, cached, sizeof cached);
    fprintf(f,
            "<text id=\"maptitle\" x=\"20\" y=\"%d\"><tspan font-size=\"14\" font-weight=\"bold\">Segments at peak "
            "reserved</tspan>: %zu segment%s, %s; unallocated %s (%.1f%% of reserved); fragmentation %.1f%% (largest "
            "free block %s of %s cached free)</text>\n",
            MAP_Y - 44, nseg - nasleep, nseg - nasleep == 1 ? "" : "s", total, unalloc,
            reserved ? 100.0 * (double)(reserved - allocated) / (double)reserved : 0.0,
            free_b ? 100.0 * (1.0 - (double)largest / (double)free_b) : 0.0, big, cached);
    if (nasleep) { /* at the right of the scale's line: the title has no room left */
        char a[32];
        hbm__format_size(asleep, a, sizeof a);
        fprintf(f,
                "<text id=\"mapasleep\" x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#6a3d9a\">%s of pages asleep "
                "(a sleeping pool's: not reserved, not drawn)</text>\n",
                W - 20, MAP_Y - 26, a);
    }
}

/* Event e's x: point j of the curves is drawn at PLOT_X + j * PLOT_W / n; point 0 is after event `first`, or the
 * seeded start before it. */
static double event_x(size_t e, size_t first, int seeded, size_t n)
{
    return PLOT_X + (double)(e - first + (size_t)seeded) * PLOT_W / (double)n;
}

/* A pool's sleeps and wakes over the curves (as the page draws them): a dashed line at each and a triangle at the
 * plot's top, pointing down for a sleep, up for a wake, hollow when not replayed (a pool the trace does not place);
 * its title says which pool, the bytes and the backup. Whether there were any. */
static int draw_naps(FILE *f, const trace *t, size_t first, int seeded, size_t n, ink *k)
{
    static const char *const colour[2] = {"#6a3d9a", "#1b9e77"};
    size_t done = n > (size_t)seeded ? first + n - (size_t)seeded : first; /* events replayed */
    int any = 0;
    for (size_t i = first; i < done && i < t->n; i++) {
        const trace_event *e = &t->ev[i];
        if (e->kind != EV_SLEEP && e->kind != EV_WAKE)
            continue;
        int wake = e->kind == EV_WAKE;
        double x = event_x(i, first, seeded, n);
        char bytes[32];
        hbm__format_size(e->size, bytes, sizeof bytes);
        fprintf(f, "<g class=\"nap\" data-event=\"%zu\" data-kind=\"%s\"><title>%s of ", i, wake ? "wake" : "sleep",
                wake ? "wake" : "sleep");
        if (e->slot) {
            fputs("pool '", f);
            xml_text(f, trace_tag(t, e));
            fprintf(f, "' (%s)", e->pended ? "backup" : "discard");
        } else {
            fputs(e->pended ? "a pool (backup)" : "a pool", f);
        }
        fprintf(f, " at event %zu", i);
        if (e->size)
            fprintf(f, "; %s %s in the recording", bytes, wake ? "mapped again" : "given back");
        fprintf(f, "%s</title>\n", e->stream ? "" : "; drawn, not replayed (the trace does not say which pool)");
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"%s\" stroke-dasharray=\"3,3\"/>\n", x,
                PLOT_Y, x, PLOT_Y + PLOT_H, colour[wake]);
        fprintf(f, "<path d=\"M%.1f,%d L%.1f,%d L%.1f,%d Z\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\"/></g>\n",
                x - 5, PLOT_Y + (wake ? 8 : 0), x + 5, PLOT_Y + (wake ? 8 : 0), x, PLOT_Y + (wake ? 0 : 8),
                e->stream ? colour[wake] : "white", colour[wake]);
        if (k->nmarks < INK_MARKS) /* (a label keeps clear of the triangle; the dashed line may run behind it) */
            k->mark[k->nmarks++] = (ink_box){x - 6, PLOT_Y - 1, x + 6, PLOT_Y + 10};
        any = 1;
    }
    return any;
}

/* A key of the legend at *x (a square, or a triangle pointing down or up), its text after it; *x moves past it. */
static void legend_key(FILE *f, int *x, int y, int shape, const char *colour, const char *text)
{
    if (shape == 0)
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/>", *x, y - 10, colour);
    else if (shape == 1) /* a dashed line */
        fprintf(f,
                "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\" "
                "stroke-dasharray=\"4,2\"/>",
                *x, y - 4, *x + 12, y - 4, colour);
    else
        fprintf(f, "<path d=\"M%d,%d L%d,%d L%d,%d Z\" fill=\"%s\"/>", *x, y - (shape == 2 ? 9 : 0), *x + 12,
                y - (shape == 2 ? 9 : 0), *x + 6, y - (shape == 2 ? 0 : 9), colour);
    fprintf(f, "<text x=\"%d\" y=\"%d\">", *x + 18, y);
    xml_text(f, text);
    fputs("</text>\n", f);
    *x += 18 + (int)text_w(text) + 10;
}

/* The highest of v[0..n). */
static int64_t highest(const int64_t *v, size_t n)
{
    int64_t m = 0;
    for (size_t j = 0; j < n; j++)
        m = v[j] > m ? v[j] : m;
    return m;
}

static void draw(FILE *f, const trace *t, const series *sr, size_t first, int seeded, const hbm_snapshot *peak,
                 const hbm_stats *st, const char *name, const replay_opts *o, const replay_result *r)
{
    int64_t pa = st->allocated_bytes[0].peak, pr = st->reserved_bytes[0].peak;
    /* While a pool sleeps its blocks stay allocated on pages given back (not reserved): the allocated curve is then
     * what is in memory, and the sleeping blocks a curve of their own (allocated = in memory + asleep). */
    int64_t *mem = NULL, pm = pa, pz = 0, za = 0;
    if (sr->asleep && (pz = highest(sr->asleep, sr->n)) > 0 && (mem = malloc((sr->n ? sr->n : 1) * sizeof *mem))) {
        for (size_t j = 0; j < sr->n; j++)
            mem[j] = sr->alloc[j] - sr->asleep[j];
        pm = highest(mem, sr->n);
        for (size_t j = 0; j < sr->n; j++) /* the sleeping blocks when allocated peaked */
            if (sr->alloc[j] == pa) {
                za = sr->asleep[j];
                break;
            }
    }
    /* The byte axis: round ticks, the top the first tick at or above the highest curve. */
    int64_t hi = pr > pm ? pr : pm;
    hi = pz > hi ? pz : hi;
    uint64_t top = hi > 0 ? (uint64_t)hi : 1, ystep = bin_step(top, 6), ytop = (top + ystep - 1) / ystep * ystep;
    int64_t ymax = (int64_t)ytop;
    char s_pa[32], s_pr[32], s_pm[32], s_pz[32], s_za[32], tick[32];
    hbm__format_size((uint64_t)pa, s_pa, sizeof s_pa);
    hbm__format_size((uint64_t)pr, s_pr, sizeof s_pr);
    hbm__format_size((uint64_t)pm, s_pm, sizeof s_pm);
    hbm__format_size((uint64_t)pz, s_pz, sizeof s_pz);
    hbm__format_size((uint64_t)za, s_za, sizeof s_za);
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\" data-peak-allocated=\"%lld\" data-peak-reserved=\"%lld\" "
            "data-peak-in-memory=\"%lld\" data-peak-asleep=\"%lld\">\n",
            W, H, W, H, (long long)pa, (long long)pr, (long long)pm, (long long)pz);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fputs("<text x=\"20\" y=\"28\" font-size=\"16\" font-weight=\"bold\">", f);
    xml_text(f, name);
    fputs("</text>\n<text x=\"20\" y=\"48\">settings: ", f);
    char line[700], dev[300];
    snprintf(line, sizeof line, "%.*s", (int)strcspn(r->settings, "\n"), r->settings);
    xml_text(f, line);
    replay_device_line(o->backend_spec, dev, sizeof dev);
    fputs("; device ", f);
    xml_text(f, dev);
    fprintf(f, "; peak allocated %s", s_pa);
    if (mem)
        fprintf(f, " (%s of it asleep)", s_za);
    fprintf(f, ", peak reserved %s%s</text>\n", s_pr,
            r->start_unfit ? "; NOT REPLAYED"
            : r->oom       ? "; OUT OF MEMORY"
                           : "");
    if (t->rec.has_outside && t->rec.outside >= 0) { /* an hbmalloc snapshot: what was not hbmalloc's then */
        char s_out[32], s_me[32], s_oth[32];
        hbm__format_size((uint64_t)t->rec.outside, s_out, sizeof s_out);
        fprintf(f,
                "<text id=\"outside\" x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#555\">when recorded, %s of the "
                "device was in use outside hbmalloc",
                W - 20, 28, s_out);
        if (t->rec.outside_process >= 0 && t->rec.outside_others >= 0) {
            hbm__format_size((uint64_t)t->rec.outside_process, s_me, sizeof s_me);
            hbm__format_size((uint64_t)t->rec.outside_others, s_oth, sizeof s_oth);
            fprintf(f, ": %s by its process, %s by others", s_me, s_oth);
        }
        fputs("</text>\n", f);
    }
    /* axes */
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", PLOT_X, PLOT_Y, PLOT_X,
            PLOT_Y + PLOT_H);
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"black\"/>\n", PLOT_X, PLOT_Y + PLOT_H,
            PLOT_X + PLOT_W, PLOT_Y + PLOT_H);
    for (uint64_t v = 0; v <= ytop; v += ystep) {
        double y = PLOT_Y + PLOT_H - (double)v / (double)ytop * PLOT_H;
        tick_label(v, ystep, tick, sizeof tick);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#eee\"/>\n", PLOT_X + 1, y,
                PLOT_X + PLOT_W, y);
        fprintf(f, "<text class=\"ytick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", PLOT_X - 6, y + 4,
                tick);
    }
    /* The event axis: round event numbers (the points are events, after a seeded start point). */
    size_t nev = sr->n > (size_t)seeded ? sr->n - (size_t)seeded : 0, xstep = dec_step(nev ? nev : 1, 8);
    for (size_t e = (first + xstep - 1) / xstep * xstep; nev && e < first + nev; e += xstep)
        fprintf(f, "<text class=\"xtick\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">%zu</text>\n",
                event_x(e, first, seeded, sr->n), PLOT_Y + PLOT_H + 18, e);
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\">event</text>\n", PLOT_X + PLOT_W / 2,
            PLOT_Y + PLOT_H + 36);
    ink *k = calloc(1, sizeof *k);
    ink none = {.ncurves = 0}; /* (no host memory for the curves' columns: labels as before) */
    ink *kk = k ? k : &none;
    polyline(f, sr->resv, sr->n, ymax, "#e4572e", "reserved", NULL, kk);
    polyline(f, mem ? mem : sr->alloc, sr->n, ymax, "#3b6fd4", "allocated", NULL, kk);
    if (mem)
        polyline(f, sr->asleep, sr->n, ymax, "#6a3d9a", "asleep", "5,3", kk);
    int naps = draw_naps(f, t, first, seeded, sr->n, kk);
    /* The peak on the axis: a dashed line at peak reserved, its value beside the peak where no curve is. */
    size_t jp = 0;
    for (size_t j = 1; j < sr->n; j++)
        jp = sr->resv[j] > sr->resv[jp] ? j : jp;
    double yp = PLOT_Y + PLOT_H - (double)pr / (double)ymax * PLOT_H;
    double xp = PLOT_X + (double)jp * PLOT_W / (double)(sr->n ? sr->n : 1);
    char peak_text[64];
    snprintf(peak_text, sizeof peak_text, "peak reserved %s", s_pr);
    double w = text_w(peak_text), lx, lb;
    place_label(kk, w, xp < PLOT_X + PLOT_W / 2 ? xp + 8 : xp - 8 - w, yp, &lx, &lb);
    fprintf(f,
            "<line id=\"peak\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e4572e\" "
            "stroke-dasharray=\"4,3\"/>\n",
            PLOT_X, yp, PLOT_X + PLOT_W, yp);
    fprintf(f,
            "<text id=\"peaklabel\" x=\"%.1f\" y=\"%.1f\" xml:space=\"preserve\"><tspan fill=\"#e4572e\">peak "
            "reserved </tspan>%s</text>\n",
            lx, lb, s_pr);
    free(k);
    if (r->oom) { /* the failed request ends the curves: a red line there, and what failed */
        int x = PLOT_X + PLOT_W;
        fprintf(f,
                "<line id=\"oom\" x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#c00000\" stroke-width=\"3\" "
                "stroke-dasharray=\"6,3\"/>\n",
                x, PLOT_Y, x, PLOT_Y + PLOT_H);
        fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\" fill=\"#c00000\" font-weight=\"bold\">", x - 6,
                PLOT_Y + PLOT_H - 10);
        if (r->start_unfit)
            fputs("NOT REPLAYED: the recorded start does not fit the device</text>\n", f);
        else
            fprintf(f, "OUT OF MEMORY at event %zu</text>\n", r->oom_event);
    }
    /* The legend, above the plot (inside it, it would cover the curves). */
    char key[96];
    int lxk = 20;
    snprintf(key, sizeof key, "reserved (peak %s)", s_pr);
    legend_key(f, &lxk, PLOT_Y - 12, 0, "#e4572e", key);
    snprintf(key, sizeof key, mem ? "allocated in memory (peak %s)" : "allocated (peak %s)", mem ? s_pm : s_pa);
    legend_key(f, &lxk, PLOT_Y - 12, 0, "#3b6fd4", key);
    if (mem) {
        snprintf(key, sizeof key, "asleep (peak %s)", s_pz);
        legend_key(f, &lxk, PLOT_Y - 12, 1, "#6a3d9a", key);
    }
    if (naps) {
        legend_key(f, &lxk, PLOT_Y - 12, 2, "#6a3d9a", "a pool put to sleep");
        legend_key(f, &lxk, PLOT_Y - 12, 3, "#1b9e77", "woken (hollow: not replayed)");
    }
    free(mem);
    /* segment map */
    map_title(f, peak);
    if (peak)
        segment_map(f, peak);
    int ly = MAP_Y + MAP_ROWS * (MAP_ROW_H + 2) + 12;
    const char *labels[3] = {"allocated", "free (cached)", "freed, waiting on another stream"};
    const hbm_block_state states[3] = {HBM_BLOCK_ALLOCATED, HBM_BLOCK_INACTIVE, HBM_BLOCK_PENDING_FREE};
    for (int c = 0; c < 3; c++)
        fprintf(f,
                "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">%s</text>\n",
                PLOT_X + 240 * c, ly, state_colour(states[c]), PLOT_X + 240 * c + 18, ly + 10, labels[c]);
    fputs("</svg>\n", f);
}

enum { OUT_SVG, OUT_HTML, OUT_PNG };

static int ends_with(const char *s, const char *tail)
{
    size_t n = strlen(s), m = strlen(tail);
    return n > m && !strcmp(s + n - m, tail);
}

/* rsvg-convert -f png -o png svg: 0, or -1 with err set (png removed). */
static int render_png(const char *svg, const char *png, char *err, size_t errlen)
{
    char *argv[] = {"rsvg-convert", "-f", "png", "-o", (char *)png, (char *)svg, NULL};
    pid_t pid;
    int st = 0, rc = posix_spawnp(&pid, "rsvg-convert", NULL, NULL, argv, environ);
    if (rc == 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return 0;
    snprintf(err, errlen, "%s: rsvg-convert %s", png, rc ? strerror(rc) : WIFEXITED(st) ? "failed" : "was killed");
    unlink(png);
    return -1;
}

/* One replay and what the pictures need from it (the allocator is gone when it returns). */
typedef struct view_run {
    series sr;
    hbm_snapshot *peak; /* the layout at peak reserved (the SVG's map) */
    replay_result r;
    view_rec *vr; /* the page's data (HTML only) */
    size_t first; /* the first event replayed */
    int seeded;   /* the curves' first point is the seeded start state */
    hbm_device_counters dc;
    char device[300];
    char conf[600]; /* the settings string in force, alone ("": the defaults): the page's short name for the run */
    char oom_message[2048];
} view_run;

static void run_free(view_run *v)
{
    hbm_snapshot_free(v->peak);
    view_rec_free(v->vr);
    free(v->sr.alloc);
    free(v->sr.resv);
    free(v->sr.asleep);
}

/* A point of the curves: allocated and reserved bytes now, and the blocks of sleeping pools among them. */
static void add_point(series *sr, hbm_allocator *a, replay_asleep *z, const trace_event *e, hbm_status st)
{
    hbm_stats s;
    hbm_get_stats(a, &s);
    if (e)
        replay_asleep_note(z, e, st, s.allocated_bytes[0].current);
    sr->alloc[sr->n] = s.allocated_bytes[0].current;
    if (sr->asleep)
        sr->asleep[sr->n] = (int64_t)z->bytes;
    sr->resv[sr->n++] = s.reserved_bytes[0].current;
}

/* The settings string a runs under, without where it came from: the describe's "string:" line, unquoted. */
static void settings_string(hbm_allocator *a, const replay_opts *o, char *out, size_t len)
{
    char *desc = o->settings_from_trace ? NULL : malloc(8192);
    const char *p = desc && hbm_settings_describe(a, desc, 8192) == HBM_OK ? strstr(desc, "\nstring: ") : NULL;
    if (o->settings_from_trace) {
        snprintf(out, len, "%s", o->settings);
    } else if (p) {
        p += strlen("\nstring: ");
        size_t n = strcspn(p, "\n");
        if (n >= 2 && p[0] == '"' && p[n - 1] == '"') /* describe quotes it */
            snprintf(out, len, "%.*s", (int)(n - 2), p + 1);
        else
            snprintf(out, len, "%.*s", (int)n, p);
    } else {
        out[0] = 0;
    }
    free(desc);
}

/* Replays t under o into v: 0, 1 (OOM: v->r says where) or 2 (err says why). */
static int run_one(view_run *v, const trace *t, const replay_opts *o, int html, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    hbm_allocator *a;
    if (hbm_open(&a, o->backend_spec, 0, o->settings, err, errlen) != HBM_OK)
        return 2;
    hbm_oom_dump(a, NULL, -1, -1); /* a replay's OOMs are the picture's, not the job's: no snapshot at them */
    series *sr = &v->sr;
    replay_result *r = &v->r;
    sr->alloc = calloc(t->n + 1, sizeof(int64_t));
    sr->resv = calloc(t->n + 1, sizeof(int64_t));
    sr->asleep = t->sleeps || t->wakes ? calloc(t->n + 1, sizeof(int64_t)) : NULL;
    void **slot = calloc(t->nslots + 1, sizeof *slot);
    replay_asleep z = {0};
    if (o->settings_from_trace)
        snprintf(r->settings, sizeof r->settings, "%s%.600s%s (what the snapshot's allocator ran)",
                 o->settings[0] ? "'" : "", o->settings[0] ? o->settings : "the defaults", o->settings[0] ? "'" : "");
    else
        replay_settings_line(a, r->settings, sizeof r->settings);
    replay_device_line(o->backend_spec, v->device, sizeof v->device);
    settings_string(a, o, v->conf, sizeof v->conf);
    int rc = 0;
    v->vr = html ? view_rec_new(t) : NULL;
    if (!sr->alloc || !sr->resv || !slot || (html && !v->vr) || ((t->sleeps || t->wakes) && !sr->asleep)) {
        snprintf(err, errlen, "out of host memory");
        rc = 2;
    }
    int64_t best = -1;
    replay_pools pools = {0};
    if (rc == 0 && replay_pools_open(a, t, &pools, err, errlen))
        rc = 2;
    if (rc == 0 && o->seed && t->rec.seedable) { /* begin where the recording began, as replay does */
        rc = replay_seed(a, t, slot, r);
        if (rc)
            snprintf(err, errlen, "%s", r->message);
        v->first = t->rec.preexisting;
        v->seeded = 1;
        add_point(sr, a, &z, NULL, HBM_OK); /* the state the recording began in is the curves' first point */
    }
    /* The recorded start did not fit: no event runs; the picture says why, with the part of that state that fitted. */
    int unfit = rc == 1 && r->start_unfit;
    if (unfit) {
        rc = 0;
        r->oom_event = v->first;
        snprintf(v->oom_message, sizeof v->oom_message, "%s", r->message);
        if (!html) /* the map: the segments that fitted */
            hbm_snapshot_take(a, &v->peak);
    }
    if (rc == 0 && replay_asleep_open(&z, t, sr->n ? sr->alloc[0] : 0)) {
        snprintf(err, errlen, "out of host memory");
        rc = 2;
    }
    if (rc == 0 && v->vr && view_rec_begin(v->vr, a, t, slot, v->first)) {
        snprintf(err, errlen, "out of host memory");
        rc = 2;
    }
    for (size_t i = v->first; rc == 0 && !unfit && i < t->n; i++) {
        const trace_event *e = &t->ev[i];
        if (v->vr && view_rec_before(v->vr, a, e, slot, err, errlen)) {
            rc = 2;
            break;
        }
        hbm_status st = replay_event(a, e, slot, &pools);
        if (v->vr && view_rec_after(v->vr, a, e, i, slot, st, err, errlen)) {
            rc = 2;
            break;
        }
        if (st == HBM_ERR_OOM) {
            r->oom = 1;
            r->oom_event = i;
            snprintf(v->oom_message, sizeof v->oom_message, "%s", hbm_last_error(a));
            break;
        }
        if (st != HBM_OK) {
            snprintf(err, errlen, "event %zu: %s", i, hbm_last_error(a));
            rc = 2;
            break;
        }
        add_point(sr, a, &z, e, st);
        if (!html && sr->resv[sr->n - 1] > best) { /* the layout at each new peak: the last one is kept */
            best = sr->resv[sr->n - 1];
            hbm_snapshot_free(v->peak);
            v->peak = NULL;
            hbm_snapshot_take(a, &v->peak);
        }
    }
    if (rc == 0 && v->vr && view_rec_end(v->vr, a, err, errlen))
        rc = 2;
    hbm_get_stats(a, &r->stats);
    hbm_get_device_counters(a, &v->dc);
    free(slot);
    replay_asleep_close(&z);
    replay_pools_close(&pools);
    hbm_destroy(a);
    return rc ? rc : r->oom;
}

static size_t argmax(const int64_t *v, size_t n) /* the first of the highest */
{
    size_t m = 0;
    for (size_t j = 1; j < n; j++)
        m = v[j] > v[m] ? j : m;
    return m;
}

static void page_info(const view_run *v, const trace *t, const replay_opts *o, const char *name, view_page_info *pi)
{
    const char *c = strstr(o->backend_spec, "capacity=");
    *pi = (view_page_info){.name = name,
                           .settings = v->r.settings,
                           .conf = v->conf,
                           .device = v->device,
                           .events = t->n,
                           .first = v->first,
                           .seeded = v->seeded,
                           .alloc = v->sr.alloc,
                           .resv = v->sr.resv,
                           .asleep = v->sr.asleep,
                           .n = v->sr.n,
                           .peak_j = argmax(v->sr.resv, v->sr.n),
                           .peak_alloc_j = argmax(v->sr.alloc, v->sr.n),
                           .stats = &v->r.stats,
                           .dev = &v->dc,
                           .capacity = c ? strtoull(c + 9, NULL, 10) : 0,
                           .oom = v->r.oom,
                           .unfit = v->r.start_unfit,
                           .oom_event = v->r.oom_event,
                           .oom_message = v->oom_message};
}

static int out_kind(const char *path, char *err, size_t errlen)
{
    int kind = ends_with(path, ".svg")    ? OUT_SVG
               : ends_with(path, ".html") ? OUT_HTML
               : ends_with(path, ".png")  ? OUT_PNG
                                          : -1;
    if (kind < 0)
        snprintf(err, errlen, "%s: the picture is written as .svg, .html or .png; name the file so", path);
    if (kind == OUT_PNG && !hbm__on_path("rsvg-convert")) {
        snprintf(err, errlen,
                 "%s: a PNG is rendered from the SVG by librsvg's rsvg-convert, which is not on PATH "
                 "(Debian: apt install librsvg2-bin); or write %.*s.svg",
                 path, (int)(strlen(path) - 4), path);
        kind = -1;
    }
    return kind;
}

/* Writes the picture or page to path (a PNG: the SVG beside it first, then rendered). 0, or 2 with err set. */
static int write_out(int kind, const char *path, const view_run *v, const trace *const *t, const replay_opts *o,
                     const char *const *names, const char *const *labels, size_t n, size_t detail, char *err,
                     size_t errlen)
{
    char svg[4200];
    snprintf(svg, sizeof svg, kind == OUT_PNG ? "%s.svg.tmp" : "%s", path);
    FILE *f = fopen(svg, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot write: %s", svg, strerror(errno));
        return 2;
    }
    int rc = 0;
    if (kind == OUT_HTML) {
        view_page_info pi[VIEW_RUNS_MAX];
        const view_rec *vr[VIEW_RUNS_MAX];
        for (size_t k = 0; k < n; k++) {
            page_info(&v[k], t[k], &o[k], names[k], &pi[k]);
            pi[k].label = labels ? labels[k] : NULL;
            pi[k].detail = detail;
            vr[k] = v[k].vr;
        }
        rc = view_html_write(f, vr, pi, n) ? 2 : 0;
    } else if (n > 1) { /* several traces: ranks side by side (view_ranks.c) */
        view_column c[VIEW_RUNS_MAX];
        for (size_t k = 0; k < n; k++)
            c[k] = (view_column){names[k],
                                 v[k].sr.alloc,
                                 v[k].sr.resv,
                                 v[k].sr.n,
                                 v[k].r.stats.allocated_bytes[0].peak,
                                 v[k].r.stats.reserved_bytes[0].peak,
                                 v[k].r.oom || v[k].r.start_unfit,
                                 t[k]->rec.has_outside ? t[k]->rec.outside : -1};
        view_ranks_svg(f, c, n, v[0].device);
    } else {
        draw(f, t[0], &v->sr, v->first, v->seeded, v->peak, &v->r.stats, names[0], o, &v->r);
    }
    if (fclose(f) != 0 || rc) {
        snprintf(err, errlen, "%s: write failed", svg);
        rc = 2;
    }
    if (kind == OUT_PNG) {
        if (rc == 0 && render_png(svg, path, err, errlen))
            rc = 2;
        unlink(svg);
    }
    return rc;
}

int view_write_runs(const trace *const *t, const replay_opts *o, const char *const *names, const char *const *labels,
                    size_t n, size_t detail, const char *path, char *err, size_t errlen)
{
    int kind = out_kind(path, err, errlen);
    if (kind < 0)
        return 2;
    int same = n > 1; /* one trace under several settings: a page; several traces (ranks) are drawn as columns too */
    for (size_t k = 1; k < n; k++)
        same &= !strcmp(names[k], names[0]);
    if (same && kind != OUT_HTML) {
        snprintf(err, errlen, "%s: one trace under several --conf is drawn as a page, side by side: name it .html",
                 path);
        return 2;
    }
    if (n < 1 || n > VIEW_RUNS_MAX) {
        snprintf(err, errlen, "at most %d runs side by side", VIEW_RUNS_MAX);
        return 2;
    }
    view_run *v = calloc(n, sizeof *v);
    if (!v) {
        snprintf(err, errlen, "out of host memory");
        return 2;
    }
    int rc = 0, oom = 0;
    size_t oom_run = 0;
    for (size_t k = 0; k < n && rc != 2; k++) {
        rc = run_one(&v[k], t[k], &o[k], kind == OUT_HTML, err, errlen);
        if (rc == 1 && !oom) {
            oom = 1;
            oom_run = k;
        }
    }
    if (rc != 2)
        rc = write_out(kind, path, v, t, o, names, labels, n, detail ? detail : VIEW_DETAIL, err, errlen);
    if (rc == 0 && oom) {
        const view_run *w = &v[oom_run];
        const char *which = n == 1 ? "" : same ? w->r.settings : names[oom_run]; /* settings apart, or ranks */
        if (w->r.start_unfit) /* replay_seed said why, with both figures */
            snprintf(err, errlen, "%s%s%s; the picture shows the part of that state that fitted, marked", which,
                     n > 1 ? ": " : "", w->r.message);
        else
            snprintf(err, errlen, "%s%sout of memory at event %zu (trace line %u): %s; the picture stops there, marked",
                     which, n > 1 ? ": " : "", w->r.oom_event, t[oom_run]->ev[w->r.oom_event].line, w->oom_message);
        rc = 1;
    }
    for (size_t k = 0; k < n; k++)
        run_free(&v[k]);
    free(v);
    return rc;
}

int view_write(const trace *t, const replay_opts *o, const char *name, const char *path, char *err, size_t errlen)
{
    return view_write_runs(&t, o, &name, NULL, 1, 0, path, err, errlen);
}
