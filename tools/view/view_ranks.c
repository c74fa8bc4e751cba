/*
 * view_ranks.c: see view_ranks.h. Owns the layout of ranks side by side: a column per rank over the same byte
 * scale (the highest peak of all sets it), reserved filled under its curve and allocated over it, each column
 * labelled by its rank and peak, the median rank's peak a dashed line across all, and the ranks that stand out by
 * trace/ranks.h's rule (the doctor's) marked. Draws what view.c replayed; replays nothing.
 */
#include "view_ranks.h"

#include "view_draw.h"

#include <stdlib.h>
#include <string.h>

#include "trace/ranks.h"
#include "util.h"

#define W 1200
#define H 580
#define PX 110 /* the plot: x from PX, PW wide; y from PY, PH high */
#define PW 1040
#define PY 96
#define PH 360
#define GAP 20 /* between columns */
#define RESV "#e4572e"
#define RESV_FILL "#f6c3b5"
#define ALLOC "#3b6fd4"

/* Bytes at pixel column px of a column w pixels wide over v[0..n): the most over the events it covers. */
static int64_t at_px(const int64_t *v, size_t n, int px, int w)
{
    size_t lo = (size_t)px * n / (size_t)w, hi = (size_t)(px + 1) * n / (size_t)w;
    if (hi <= lo)
        hi = lo + 1;
    int64_t m = 0;
    for (size_t i = lo; i < hi && i < n; i++)
        m = v[i] > m ? v[i] : m;
    return m;
}

static double y_of(int64_t v, uint64_t ymax) { return PY + PH - (double)v / (double)ymax * PH; }

static void column(FILE *f, const view_column *c, double x0, int w, uint64_t ymax)
{
    int npx = c->n < (size_t)w ? (int)c->n : w; /* fewer events than pixels: one step each */
    if (npx < 1)
        return;
    double step = (double)w / npx;
    fprintf(f, "<path class=\"reserved\" fill=\"%s\" stroke=\"%s\" stroke-width=\"1.5\" d=\"M%.1f,%d", RESV_FILL, RESV,
            x0, PY + PH);
    for (int px = 0; px < npx; px++) {
        double y = y_of(at_px(c->resv, c->n, px, npx), ymax);
        fprintf(f, " L%.1f,%.1f L%.1f,%.1f", x0 + px * step, y, x0 + (px + 1) * step, y);
    }
    fprintf(f, " L%.1f,%d Z\"/>\n", x0 + w, PY + PH);
    fprintf(f, "<polyline class=\"allocated\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"", ALLOC);
    for (int px = 0; px < npx; px++) {
        double y = y_of(at_px(c->alloc, c->n, px, npx), ymax);
        fprintf(f, "%.1f,%.1f %.1f,%.1f ", x0 + px * step, y, x0 + (px + 1) * step, y);
    }
    fputs("\"/>\n", f);
}

void view_ranks_svg(FILE *f, const view_column *c, size_t n, const char *device)
{
    int64_t top = 1;
    double *peaks = malloc((n ? n : 1) * sizeof *peaks);
    for (size_t k = 0; k < n; k++) {
        top = c[k].peak_resv > top ? c[k].peak_resv : top;
        top = c[k].peak_alloc > top ? c[k].peak_alloc : top;
        if (peaks)
            peaks[k] = (double)c[k].peak_resv;
    }
    double med = peaks ? ranks_median(peaks, n) : 0, mad = peaks ? ranks_mad(peaks, n, med) : 0;
    free(peaks);
    uint64_t ystep = view_bin_step((uint64_t)top, 6), ymax = ((uint64_t)top + ystep - 1) / ystep * ystep;
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
            "font-family=\"sans-serif\" font-size=\"12\" data-ranks=\"%zu\" data-ymax=\"%llu\" data-plot-top=\"%d\" "
            "data-plot-bottom=\"%d\">\n",
            W, H, W, H, n, (unsigned long long)ymax, PY, PY + PH);
    fprintf(f, "<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n", W, H);
    fprintf(f,
            "<text x=\"20\" y=\"28\" font-size=\"16\" font-weight=\"bold\">%zu ranks side by side, on one scale"
            "</text>\n<text x=\"20\" y=\"48\">Each column is one rank's replay, its own events left to right; the "
            "byte axis is the same for all. Replayed on ",
            n);
    view_xml_text(f, device);
    fputs(".</text>\n", f);
    /* The legend, above the plot (the median's figure in it: beside the axis it would read as a tick). */
    char m[32];
    hbm__format_size((uint64_t)med, m, sizeof m);
    fprintf(f,
            "<rect x=\"20\" y=\"62\" width=\"12\" height=\"12\" fill=\"%s\" stroke=\"%s\"/><text x=\"38\" y=\"72\">"
            "reserved</text><rect x=\"120\" y=\"62\" width=\"12\" height=\"12\" fill=\"%s\"/><text x=\"138\" "
            "y=\"72\">allocated</text><line x1=\"230\" y1=\"68\" x2=\"256\" y2=\"68\" stroke=\"#555\" "
            "stroke-dasharray=\"5,3\"/><text id=\"medianlabel\" x=\"262\" y=\"72\">the median rank's peak reserved, "
            "%s</text>\n",
            RESV_FILL, RESV, ALLOC, m);
    char tick[32];
    for (uint64_t v = 0; v <= ymax; v += ystep) {
        double y = y_of((int64_t)v, ymax);
        view_tick_label(v, ystep, tick, sizeof tick);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>\n", PX, y, PX + PW, y);
        fprintf(f, "<text class=\"ytick\" x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%s</text>\n", PX - 8, y + 4, tick);
    }
    int w = (int)((PW - GAP * (double)(n - 1)) / (double)n);
    for (size_t k = 0; k < n; k++) {
        double x0 = PX + (double)k * (w + GAP);
        int rank = ranks_from_name(c[k].name);
        const char *base = strrchr(c[k].name, '/');
        base = base ? base + 1 : c[k].name;
        fprintf(f, "<g class=\"rank\" data-rank=\"%d\" data-peak-reserved=\"%lld\" data-x0=\"%.1f\" data-x1=\"%.1f\">",
                rank, (long long)c[k].peak_resv, x0, x0 + w);
        fputs("<title>", f);
        view_xml_text(f, c[k].name);
        fputs("</title>\n", f);
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#bbb\"/>\n", x0, PY, w,
                PH);
        column(f, &c[k], x0, w, ymax);
        char name[160], peak[32];
        if (rank >= 0)
            snprintf(name, sizeof name, "rank %d", rank);
        else /* no rank in the name: the file's name, cut to the column */
            snprintf(name, sizeof name, "%.*s", (int)hbm__utf8_cut(base, (size_t)(w / 7 > 3 ? w / 7 : 3)), base);
        hbm__format_size((uint64_t)c[k].peak_resv, peak, sizeof peak);
        double mid = x0 + w / 2.0;
        fprintf(f,
                "<text class=\"ranklabel\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"14\" "
                "font-weight=\"bold\">",
                mid, PY + PH + 20);
        view_xml_text(f, name);
        fprintf(f, "</text>\n<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">peak %s</text>\n", mid, PY + PH + 37,
                peak);
        int high = n >= 2 && ranks_is_high((double)c[k].peak_resv, med, mad, RANKS_MIN_BYTES);
        if (med > 0)
            fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"%s\"%s>%.2fx the median%s</text>\n",
                    mid, PY + PH + 54, high ? "#c00000" : "#666", high ? " font-weight=\"bold\" class=\"outlier\"" : "",
                    (double)c[k].peak_resv / med, high ? ": outlier" : "");
        if (c[k].outside >= 0) { /* what the device held beside this rank's allocator when its snapshot was taken */
            char s_out[32];
            hbm__format_size((uint64_t)c[k].outside, s_out, sizeof s_out);
            fprintf(f,
                    "<text class=\"outside\" x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">outside "
                    "hbmalloc: %s</text>\n",
                    mid, PY + PH + 71, s_out);
        }
        if (c[k].oom)
            fprintf(f,
                    "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#c00000\" font-weight=\"bold\">OUT "
                    "OF MEMORY</text>\n",
                    mid, PY + 16);
        fputs("</g>\n", f);
    }
    if (med > 0)
        fprintf(f,
                "<line id=\"median\" x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#555\" "
                "stroke-dasharray=\"5,3\"/>\n",
                PX, y_of((int64_t)med, ymax), PX + PW, y_of((int64_t)med, ymax));
    fprintf(f,
            "<text x=\"20\" y=\"%d\" fill=\"#555\">An outlier: above the median rank's peak by more than 20%%, 1 GiB "
            "and three spreads (hbmalloc help DOCTOR, \"Several ranks' snapshots\"); hbmalloc doctor --snapshot "
            "says what it holds.</text>\n",
            H - 20);
    fputs("</svg>\n", f);
}
