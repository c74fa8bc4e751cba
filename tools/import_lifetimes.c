/*
 * import_lifetimes.c: tensor-lifetime CSVs (a header naming id, lower, upper and size, other columns such as
 * offset ignored; one tensor per row), the static memory-planning problems of MindSpore SOMAS, IREE and
 * MiniMalloc, into the event list. Each tensor is allocated at `lower` and freed at `upper`, taken as exclusive
 * ([lower, upper); upper <= lower is read as lower + 1); at equal times frees come before allocations, and ties
 * keep file order. Rows of size 0 are skipped (no memory). The same reading as scripts/lifetimes2trace.py.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

typedef struct life_ev {
    int64_t time;
    uint32_t row;  /* file order */
    uint8_t alloc; /* frees (0) before allocations (1) at equal times */
    uint32_t line;
    uint64_t size;
} life_ev;

static int ev_cmp(const void *x, const void *y)
{
    const life_ev *a = x, *b = y;
    if (a->time != b->time)
        return a->time < b->time ? -1 : 1;
    if (a->alloc != b->alloc)
        return a->alloc - b->alloc;
    return a->row < b->row ? -1 : a->row > b->row;
}

static int parse_int(const char *s, size_t n, int64_t *out)
{
    int neg = n && s[0] == '-';
    if (neg) {
        s++;
        n--;
    }
    if (n == 0 || n > 18)
        return -1;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = neg ? -v : v;
    return 0;
}

/* The column of each name in the header line, or -1. */
static void header(const char *p, const char *end, int col[4])
{
    static const char *const names[4] = {"id", "lower", "upper", "size"};
    for (int k = 0; k < 4; k++)
        col[k] = -1;
    for (int c = 0; p < end && *p != '\n' && *p != '\r'; c++) {
        const char *s = p;
        while (p < end && *p != ',' && *p != '\n' && *p != '\r')
            p++;
        for (int k = 0; k < 4; k++)
            if ((size_t)(p - s) == strlen(names[k]) && !memcmp(s, names[k], (size_t)(p - s)))
                col[k] = c;
        if (p < end && *p == ',')
            p++;
    }
}

int trace_is_lifetimes(const char *data, size_t len)
{
    int col[4];
    header(data, data + len, col);
    return col[0] == 0 && col[1] >= 0 && col[2] >= 0 && col[3] >= 0;
}

int trace_read_lifetimes_mem(const char *name, const char *data, size_t len, trace *t, char *err, size_t errlen)
{
    const char *p = data, *end = data + len;
    trace_init(t);
    t->format = "lifetimes-csv";
    int col[4];
    header(p, end, col);
    if (col[1] < 0 || col[2] < 0 || col[3] < 0) {
        snprintf(err, errlen, "%s:1: a lifetime CSV's header names id, lower, upper and size", name);
        return -1;
    }
    while (p < end && *p != '\n')
        p++;
    life_ev *ev = NULL;
    size_t n = 0, cap = 0;
    uint32_t line = 1, row = 0;
    int rc = -1;
    while (p < end) {
        p++; /* the newline */
        line++;
        if (p >= end)
            break;
        const char *ls = p;
        int64_t v[4] = {0};
        int seen = 0;
        for (int c = 0; p < end && *p != '\n'; c++) {
            const char *s = p;
            while (p < end && *p != ',' && *p != '\n' && *p != '\r')
                p++;
            for (int k = 1; k < 4; k++)
                if (c == col[k]) {
                    if (parse_int(s, (size_t)(p - s), &v[k])) {
                        snprintf(err, errlen, "%s:%u:%d: '%.*s' is not a whole number (column %s)", name, line,
                                 (int)(s - ls) + 1, (int)((p - s) > 40 ? 40 : (p - s)), s,
                                 k == 1 ? "lower" : k == 2 ? "upper" : "size");
                        goto out;
                    }
                    seen |= 1 << k;
                }
            while (p < end && *p == '\r')
                p++;
            if (p < end && *p == ',')
                p++;
        }
        if (p == ls || (p - ls == 1 && *ls == '\r'))
            continue; /* an empty line */
        if (seen != 0xe) {
            snprintf(err, errlen, "%s:%u: the row lacks %s", name, line,
                     !(seen & 2) ? "lower" : !(seen & 4) ? "upper" : "size");
            goto out;
        }
        row++;
        if (v[3] <= 0)
            continue;
        if (v[2] <= v[1])
            v[2] = v[1] + 1;
        if (n + 2 > cap) {
            size_t nc = cap ? cap * 2 : 1024;
            life_ev *g = realloc(ev, nc * sizeof *g);
            if (!g) {
                snprintf(err, errlen, "%s: out of host memory", name);
                goto out;
            }
            ev = g;
            cap = nc;
        }
        ev[n++] = (life_ev){v[1], row, 1, line, (uint64_t)v[3]};
        ev[n++] = (life_ev){v[2], row, 0, line, 0};
    }
    if (n)
        qsort(ev, n, sizeof *ev, ev_cmp);
    trace_builder *b = tb_new(t);
    if (!b) {
        snprintf(err, errlen, "%s: out of host memory", name);
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t live_line;
        int r = ev[i].alloc ? tb_alloc(b, ev[i].row, ev[i].size, 0, ev[i].line, &live_line)
                            : tb_free(b, ev[i].row, ev[i].line);
        if (r) {
            snprintf(err, errlen, "%s: out of host memory", name);
            tb_finish(b);
            goto out;
        }
    }
    tb_finish(b);
    rc = 0;
out:
    free(ev);
    if (rc)
        trace_free(t);
    return rc;
}
