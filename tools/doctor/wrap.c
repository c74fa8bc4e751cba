/*
 * wrap.c: the doctor's text for people, fitted to DOCTOR_WIDTH columns: wrapped at words, and log lines quoted up to
 * a word. Owns only the layout of text it is given; what the text says is its callers' (doctor.c prints through
 * it). Widths are counted in characters (UTF-8: logs are often Chinese, whose characters take two columns).
 */
#include <ctype.h>
#include <stdint.h>
#include <string.h>

#include "util.h"
#include "wrap.h"

/* The character at s (at most n bytes): its length in bytes, its code point (U+FFFD for a byte that starts none). */
static size_t char_at(const char *s, size_t n, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t k = hbm__utf8_char(u, n);
    if (!k) {
        *cp = 0xFFFD;
        return 1;
    }
    static const unsigned char lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t c = u[0] & lead_mask[k];
    for (size_t i = 1; i < k; i++)
        c = c << 6 | (u[i] & 0x3F);
    *cp = c;
    return k;
}

/* East Asian wide and fullwidth characters (Unicode's EastAsianWidth W and F, the main blocks): two columns, and a
 * line may break between two of them, as CJK text has no spaces. */
static int wide(uint32_t c)
{
    return (c >= 0x1100 && c <= 0x115F) || (c >= 0x2E80 && c <= 0x303E) || (c >= 0x3041 && c <= 0x33FF) ||
           (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0xA000 && c <= 0xA4CF) ||
           (c >= 0xAC00 && c <= 0xD7A3) || (c >= 0xF900 && c <= 0xFAFF) || (c >= 0xFE30 && c <= 0xFE4F) ||
           (c >= 0xFF00 && c <= 0xFF60) || (c >= 0xFFE0 && c <= 0xFFE6) || (c >= 0x20000 && c <= 0x3FFFD);
}

/* Columns of s[0..n). */
static size_t cols(const char *s, size_t n)
{
    size_t w = 0;
    uint32_t c;
    for (size_t i = 0; i < n;) {
        i += char_at(s + i, n - i, &c);
        w += wide(c) ? 2 : 1;
    }
    return w;
}

/* The longest start of word[0..n) no wider than room that ends where a long word may break: after a '/', ',' or ';'
 * (paths, URLs, lists of settings) or between two wide characters. 0 when there is none. */
static size_t break_in_word(const char *word, size_t n, size_t room)
{
    size_t best = 0, w = 0;
    uint32_t c, prev = 0;
    for (size_t i = 0; i < n;) {
        size_t k = char_at(word + i, n - i, &c);
        if (i && wide(prev) && wide(c))
            best = i; /* before c */
        w += wide(c) ? 2 : 1;
        if (w > room)
            break;
        i += k;
        if ((c == '/' || c == ',' || c == ';') && i < n)
            best = i;
        prev = c;
    }
    return best;
}

typedef struct line_out {
    FILE *out;
    int width;
    size_t col, hang; /* the column written to; the continuation lines' indent */
    int empty;        /* no word on this line yet */
    int indent_due;   /* a new line's indent, written with its first word (a line is never only spaces) */
} line_out;

static void new_line(line_out *l)
{
    fputc('\n', l->out);
    l->col = l->hang;
    l->empty = l->indent_due = 1;
}

static void put(line_out *l, const char *u, size_t n)
{
    if (l->indent_due)
        fprintf(l->out, "%*s", (int)l->hang, "");
    l->indent_due = 0;
    fwrite(u, 1, n, l->out);
}

/* A unit (a word, or two glued) onto the line, after gap spaces when the line has a word. */
static void put_unit(line_out *l, size_t ngap, const char *u, size_t n)
{
    size_t w = cols(u, n), width = (size_t)l->width, at = l->col + ngap;
    /* A word wider than a whole line is broken anyway: its first piece goes on this line when one fits. */
    int breaks_here = w > width - l->hang && at < width && !memchr(u, ' ', n) && break_in_word(u, n, width - at);
    if (!l->empty && at + w > width && !breaks_here)
        new_line(l);
    if (!l->empty) {
        fprintf(l->out, "%*s", (int)ngap, "");
        l->col += ngap;
    }
    /* Wider than what is left of a fresh line: broken where a long word may be, else written whole. */
    while (l->col + w > width) {
        size_t k = break_in_word(u, n, l->col < width ? width - l->col : 1);
        if (!k || memchr(u, ' ', n))
            break; /* two glued words ("export VAR=...", pasted) stay whole even past the width */
        put(l, u, k);
        new_line(l);
        u += k, n -= k;
        w = cols(u, n);
    }
    put(l, u, n);
    l->col += w;
    l->empty = 0;
}

/* Whether the word w[0..n) and the one after it (at next, after one space) go on one line: "export VAR=VALUE", which
 * is pasted, an option and its value ("-i 0", "--capacity 61.27GiB"), and a figure with its unit ("80.00 GiB"). */
static int glued(const char *w, size_t n, const char *next)
{
    static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "KB", "MB", "GB", "s", "ms", "%"};
    if (next[0] != ' ' || !next[1] || strchr(" \t\n", next[1]))
        return 0;
    if (n == 6 && !strncmp(w, "export", 6))
        return 1;
    if (n >= 2 && w[0] == '-' && (isalpha((unsigned char)w[1]) || (w[1] == '-' && n > 2)) && next[1] != '-' &&
        !memchr(w, '=', n) && strchr(",.;:)", w[n - 1]) == NULL)
        return 1;
    if (!n || w[n - 1] < '0' || w[n - 1] > '9')
        return 0;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t k = strlen(units[i]);
        if (!strncmp(next + 1, units[i], k) && !isalpha((unsigned char)next[1 + k]))
            return 1;
    }
    return 0;
}

/* A command of the text, a line of its own that starts with "$ " (doctor.h: DOCTOR_CMD): written as a shell takes
 * it, each argument whole (a single-quoted one with its spaces), continued with " \\" before an argument that would
 * pass the width, the continuation lines 4 columns further in. Returns the end of the command's line. */
static const char *put_command(line_out *l, const char *p, const char *end)
{
    const char *eol = memchr(p, '\n', (size_t)(end - p));
    if (!eol)
        eol = end;
    size_t hang = l->hang, width = (size_t)l->width;
    put(l, "$", 1);
    l->col += 1;
    l->empty = 0;
    l->hang = hang + 4;
    for (p++; p < eol;) {
        while (p < eol && *p == ' ')
            p++;
        const char *a = p;
        for (int quoted = 0; p < eol && (quoted || *p != ' '); p++)
            quoted ^= *p == '\'';
        if (p == a)
            break;
        size_t w = cols(a, (size_t)(p - a));
        if (l->col + 1 + w + 2 > width && l->col > l->hang + 2) { /* 2: room for the next " \\" */
            fputs(" \\", l->out);
            new_line(l);
            put(l, a, (size_t)(p - a));
            l->col += w;
        } else {
            put(l, " ", 1);
            put(l, a, (size_t)(p - a));
            l->col += 1 + w;
        }
    }
    l->hang = hang;
    return eol;
}

void doctor_wrap(FILE *out, int width, const char *prefix, const char *text)
{
    line_out l = {out, width, cols(prefix, strlen(prefix)), 0, 1, 0};
    /* A prefix wider than three quarters of the line: the further lines hang at a quarter, to leave room. */
    l.hang = l.col * 4 > (size_t)width * 3 ? (size_t)width / 4 : l.col;
    const char *p = text, *end = text + strlen(text);
    while (end > text && strchr(" \t\n", end[-1])) /* a message's final newline is the one written below */
        end--;
    size_t np = strlen(prefix);
    while (p == end && np && prefix[np - 1] == ' ') /* no text: no trailing spaces either */
        np--;
    fwrite(prefix, 1, np, out);
    while (p < end) {
        const char *gap = p;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t ngap = (size_t)(p - gap);
        if (*p == '\n') {
            new_line(&l);
            p++;
            continue;
        }
        if (!*p)
            break;
        if (p[0] == '$' && p[1] == ' ' && (p == text || p[-1] == '\n' || l.empty)) {
            if (!l.empty)
                new_line(&l);
            p = put_command(&l, p, end);
            continue;
        }
        const char *u = p;
        p += strcspn(p, " \t\n");
        if (glued(u, (size_t)(p - u), p))
            p += 1 + strcspn(p + 1, " \t\n");
        put_unit(&l, ngap, u, (size_t)(p - u)); /* a tab is written as a space: its width is the terminal's */
    }
    fputc('\n', out);
}

size_t doctor_quote_len(const char *s, size_t n, size_t max, int *cut)
{
    *cut = n > max;
    if (n <= max)
        return n;
    size_t m = hbm__utf8_cut(s, max), best = 0;
    uint32_t c, prev = 0;
    for (size_t i = 0; i <= m && i < n;) { /* the last place to cut: before a space, or between wide characters */
        size_t k = char_at(s + i, n - i, &c);
        if (c == ' ' || (i && wide(prev) && wide(c)))
            best = i;
        prev = c;
        i += k;
    }
    if (!best) /* one word longer than the quote: cut between characters, the best there is */
        best = m;
    while (best && s[best - 1] == ' ')
        best--;
    return best;
}
