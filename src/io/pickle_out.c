/*
 * pickle_out.c: a minimal pickle emitter for snapshots: protocol 4 with only
 * the opcodes PyTorch's own snapshot pickles use (dicts, lists, 2-tuples,
 * strings, ints, floats, bools, None; no memo), so that Python's pickle and
 * the memory_viz page read it. Owns byte encoding only.
 */
#include "io/pickle_out.h"
#include "util/util.h"

#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 512


struct hbm__pickle_out {
    unsigned char *buf;
    size_t len, cap;
    int failed;
    int depth;
    unsigned char close[MAX_DEPTH]; /* SETITEMS or APPENDS, per open container */
};

static void wbytes(hbm__pickle_out *w, const void *p, size_t n)
{
    if (w->failed)
        return;
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 65536;
        while (cap < w->len + n)
            cap *= 2;
        unsigned char *b = realloc(w->buf, cap);
        if (!b) {
            w->failed = 1;
            return;
        }
        w->buf = b;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void wop(hbm__pickle_out *w, unsigned char op) { wbytes(w, &op, 1); }

/* Containers are emitted as EMPTY_DICT/EMPTY_LIST, MARK, the items, SETITEMS/APPENDS. */

hbm__pickle_out *hbm__pw_new(void)
{
    hbm__pickle_out *w = calloc(1, sizeof *w);
    if (w) {
        wop(w, 0x80);
        wop(w, 4);
    }
    return w;
}

static void open_container(hbm__pickle_out *w, unsigned char empty, unsigned char close)
{
    wop(w, empty);
    if (w->depth == MAX_DEPTH) {
        w->failed = 1;
        return;
    }
    w->close[w->depth++] = close;
    wop(w, '(');
}

void hbm__pw_dict(hbm__pickle_out *w) { open_container(w, '}', 'u'); }
void hbm__pw_list(hbm__pickle_out *w) { open_container(w, ']', 'e'); }

void hbm__pw_end(hbm__pickle_out *w)
{
    if (w->depth == 0) {
        w->failed = 1;
        return;
    }
    w->depth--;
    wop(w, w->close[w->depth]);
}

/* Python reads these as str: bytes that are not well-formed UTF-8 are written as U+FFFD, so
 * that any label or message loads (pickle.load raises on invalid UTF-8). */
void hbm__pw_str(hbm__pickle_out *w, const char *s)
{
    static const unsigned char replacement[3] = {0xef, 0xbf, 0xbd};
    const unsigned char *p = (const unsigned char *)s;
    size_t len = strlen(s), n = 0;
    for (size_t i = 0, k; i < len; i += k ? k : 1)
        n += (k = hbm__utf8_char(p + i, len - i)) ? k : sizeof replacement;
    if (n < 256) {
        unsigned char b = (unsigned char)n;
        wop(w, 0x8c);
        wbytes(w, &b, 1);
    } else {
        unsigned char b[4] = {(unsigned char)n, (unsigned char)(n >> 8), (unsigned char)(n >> 16),
                              (unsigned char)(n >> 24)};
        wop(w, 'X');
        wbytes(w, b, 4);
    }
    size_t run = 0; /* well-formed bytes not yet written */
    for (size_t i = 0, k; i < len; i += k ? k : 1) {
        if ((k = hbm__utf8_char(p + i, len - i))) {
            run += k;
            continue;
        }
        wbytes(w, p + i - run, run);
        wbytes(w, replacement, sizeof replacement);
        run = 0;
    }
    wbytes(w, p + len - run, run);
}

void hbm__pw_int(hbm__pickle_out *w, int64_t v)
{
    if (v >= 0 && v < 256) {
        unsigned char b = (unsigned char)v;
        wop(w, 'K');
        wbytes(w, &b, 1);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        uint32_t u = (uint32_t)(int32_t)v;
        unsigned char b[4] = {(unsigned char)u, (unsigned char)(u >> 8), (unsigned char)(u >> 16),
                              (unsigned char)(u >> 24)};
        wop(w, 'J');
        wbytes(w, b, 4);
    } else {
        uint64_t u = (uint64_t)v;
        unsigned char b[9];
        b[0] = 8;
        for (int i = 0; i < 8; i++)
            b[1 + i] = (unsigned char)(u >> (8 * i));
        /* Shortest form Python would accept equally: keep 8 bytes, plus a 0x00 if the sign bit is set on a positive. */
        if (v > 0 && (b[8] & 0x80)) {
            unsigned char ext[10];
            memcpy(ext, b, 9);
            ext[0] = 9;
            ext[9] = 0;
            wop(w, 0x8a);
            wbytes(w, ext, 10);
        } else {
            wop(w, 0x8a);
            wbytes(w, b, 9);
        }
    }
}

void hbm__pw_float(hbm__pickle_out *w, double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    unsigned char b[8];
    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(u >> (56 - 8 * i));
    wop(w, 'G');
    wbytes(w, b, 8);
}

void hbm__pw_bool(hbm__pickle_out *w, int v) { wop(w, v ? 0x88 : 0x89); }

void hbm__pw_none(hbm__pickle_out *w) { wop(w, 'N'); }

void hbm__pw_pair(hbm__pickle_out *w, int64_t a, int64_t b)
{
    hbm__pw_int(w, a);
    hbm__pw_int(w, b);
    wop(w, 0x86); /* TUPLE2 */
}

int hbm__pw_finish(hbm__pickle_out *w, unsigned char **data, size_t *len)
{
    wop(w, '.');
    int bad = w->failed || w->depth != 0;
    *data = bad ? NULL : w->buf;
    *len = bad ? 0 : w->len;
    if (bad)
        free(w->buf);
    free(w);
    return bad ? -1 : 0;
}
