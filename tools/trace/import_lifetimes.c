/*
 * import_lifetimes.c: tensor-lifetime CSVs (a header naming id, lower, upper and size, other columns such as
 * offset ignored; one tensor per row), the static memory-planning problems of MindSpore SOMAS, IREE and
 * MiniMalloc, into the event list. Each tensor is allocated at `lower` and freed at `upper`, taken as exclusive
 * ([lower, upper); upper <= lower is read as lower + 1); at equal times frees come before allocations, and ties
 * keep file order. Rows of size 0 are skipped (no memory). The same reading as tools/trace/lifetimes2trace.py.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

/* The rows as columns (28 bytes a row) and two orders of them: the allocations by (lower, row), the frees by
 * (upper, row). Merged, frees first at equal times, they are the events; a row is never copied into a record per
 * event (a line ",0,1,1" is 7 bytes: the reader stays within 16 bytes of memory per byte, docs/RELIABILITY.md). */
typedef struct rows {
    int64_t *lower, *upper;
    uint64_t *size;
    uint32_t *line;
    size_t n, cap;
} rows;

/* idx (row numbers in file order) sorted by key[row], stably: rows of equal keys keep file order. A bottom-up
 * merge sort (qsort is not stable, and has no argument for the key). tmp has room for n. */
static void sort_rows(uint32_t *idx, uint32_t *tmp, size_t n, const int64_t *key)
{
    uint32_t *from = idx, *to = tmp;
    for (size_t w = 1; w < n; w *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                to[k++] = key[from[j]] < key[from[i]] ? from[j++] : from[i++];
            while (i < mid)
                to[k++] = from[i++];
            while (j < hi)
                to[k++] = from[j++];
        }
        uint32_t *swap = from;
        from = to, to = swap;
    }
    if (from != idx)
        memcpy(idx, from, n * sizeof *idx);
}

static int rows_add(rows *r, int64_t lower, int64_t upper, uint64_t size, uint32_t line)
{
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 1024;
        int64_t *lo = realloc(r->lower, cap * sizeof *lo);
        if (lo)
            r->lower = lo;
        int64_t *up = lo ? realloc(r->upper, cap * sizeof *up) : NULL;
        if (up)
            r->upper = up;
        uint64_t *sz = up ? realloc(r->size, cap * sizeof *sz) : NULL;
        if (sz)
            r->size = sz;
        uint32_t *ln = sz ? realloc(r->line, cap * sizeof *ln) : NULL;
        if (!ln || cap > UINT32_MAX)
            return -1;
        r->line = ln;
        r->cap = cap;
    }
    r->lower[r->n] = lower, r->upper[r->n] = upper, r->size[r->n] = size, r->line[r->n] = line;
    r->n++;
    return 0;
}

static void rows_free(rows *r) { free(r->lower), free(r->upper), free(r->size), free(r->line); }

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
    p = trace_next_line(p, end);
    rows r = {0};
    uint32_t *alloc_order = NULL, *free_order = NULL;
    uint32_t line = 1;
    int rc = -1;
    for (; p < end; p = trace_next_line(p, end)) { /* LF, CRLF or a CR alone end a row */
        line++;
        const char *ls = p;
        int64_t v[4] = {0};
        int seen = 0;
        for (int c = 0; p < end && *p != '\n' && *p != '\r'; c++) {
            const char *s = p;
            while (p < end && *p != ',' && *p != '\n' && *p != '\r')
                p++;
            for (int k = 1; k < 4; k++)
                if (c == col[k]) {
                    if (parse_int(s, (size_t)(p - s), &v[k])) {
                        snprintf(err, errlen, "%s:%u:%d: '%.*s' is not a whole number (column %s)", name, line,
                                 (int)(s - ls) + 1, (int)((p - s) > 40 ? 40 : (p - s)), s,
                                 k == 1   ? "lower"
                                 : k == 2 ? "upper"
                                          : "size");
                        goto out;
                    }
                    seen |= 1 << k;
                }
            if (p < end && *p == ',')
                p++;
        }
        if (p == ls)
            continue; /* an empty line */
        if (seen != 0xe) {
            snprintf(err, errlen, "%s:%u: the row lacks %s", name, line,
                     !(seen & 2)   ? "lower"
                     : !(seen & 4) ? "upper"
                                   : "size");
            goto out;
        }
        if (v[3] <= 0)
            continue;
        if (v[2] <= v[1])
            v[2] = v[1] + 1;
        if (rows_add(&r, v[1], v[2], (uint64_t)v[3], line)) {
            snprintf(err, errlen, "%s: out of host memory", name);
            goto out;
        }
    }
    alloc_order = malloc((r.n ? r.n : 1) * sizeof *alloc_order);
    free_order = malloc((r.n ? r.n : 1) * sizeof *free_order);
    uint32_t *tmp = malloc((r.n ? r.n : 1) * sizeof *tmp);
    int sorted = alloc_order && free_order && tmp;
    if (sorted) {
        for (size_t i = 0; i < r.n; i++)
            alloc_order[i] = free_order[i] = (uint32_t)i;
        sort_rows(alloc_order, tmp, r.n, r.lower);
        sort_rows(free_order, tmp, r.n, r.upper);
    }
    free(tmp);
    trace_builder *b = sorted ? tb_new_dense(t, r.n) : NULL; /* keys: row numbers */
    if (!b) {
        snprintf(err, errlen, "%s: out of host memory", name);
        goto out;
    }
    for (size_t a = 0, f = 0; f < r.n;) {
        int res;
        if (a < r.n && r.lower[alloc_order[a]] < r.upper[free_order[f]]) { /* at equal times the frees first */
            uint32_t k = alloc_order[a++];
            uint32_t live_line;
            res = tb_alloc(b, k, r.size[k], 0, r.line[k], &live_line);
        } else {
            uint32_t k = free_order[f++];
            res = tb_free(b, k, r.line[k]);
        }
        if (res) {
            snprintf(err, errlen, "%s: out of host memory", name);
            tb_finish(b);
            goto out;
        }
    }
    tb_finish(b);
    rc = 0;
out:
    rows_free(&r);
    free(alloc_order);
    free(free_order);
    if (rc)
        trace_free(t);
    return rc;
}
