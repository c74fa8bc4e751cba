/*
 * view_draw.c: what the static pictures share (view.c's, view_ranks.c's): text escaped for SVG, and round ticks of a
 * byte axis with their labels, as the page draws them. Owns no picture.
 */
#include "view_draw.h"

#include <string.h>

#include "util.h"

/* Text in an SVG (XML 1.0): markup escaped; controls and bytes that are not well-formed UTF-8 (a
 * file name can hold any) written as U+FFFD, so that the picture always parses. */
void view_xml_text(FILE *f, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0, k; i < n; i += k ? k : 1) {
        k = hbm__utf8_char(p + i, n - i);
        if (!k || (p[i] < 0x20 && p[i] != '\t'))
            fputs("\xef\xbf\xbd", f);
        else if (p[i] == '<')
            fputs("&lt;", f);
        else if (p[i] == '>')
            fputs("&gt;", f);
        else if (p[i] == '&')
            fputs("&amp;", f);
        else if (p[i] == '"')
            fputs("&quot;", f);
        else
            fwrite(p + i, 1, k, f);
    }
}

/* Round ticks, as the page draws them (tools/view/view_page.html, binStep and decStep): a byte axis steps by 2^k
 * bytes, an event axis by 1, 2 or 5 times a power of ten; each the smallest step giving at most `most`
 * intervals up to max. */
uint64_t view_bin_step(uint64_t max, uint64_t most)
{
    uint64_t s = 1;
    while (max / s > most || (max / s == most && max % s))
        s *= 2;
    return s;
}

/* A tick of a byte axis: "0", else a whole number of the largest binary unit the step counts (a step of 2^k
 * bytes makes every tick a whole number of it): "16 GiB", "512 MiB". */
void view_tick_label(uint64_t v, uint64_t step, char *out, size_t len)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    uint64_t d = 1;
    while (u < 5 && step >= d * 1024) {
        d *= 1024;
        u++;
    }
    if (v)
        snprintf(out, len, "%llu %s", (unsigned long long)(v / d), unit[u]);
    else
        snprintf(out, len, "0");
}
