/*
 * import_rmm.c: RMM's logging_resource_adaptor CSV logs
 * (Thread,Time,Action,Pointer,Size,Stream) into the event list. The stream
 * column is kept (RMM's own replay tool drops it). Actions: allocate, free;
 * "allocate failure" rows are counted and skipped. A malformed row, or a free
 * of a pointer the log never allocated, is rejected with its line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"

static int field(const char **p, const char *end, const char **start, size_t *n)
{
    *start = *p;
    while (*p < end && **p != ',' && **p != '\n' && **p != '\r')
        (*p)++;
    *n = (size_t)(*p - *start);
    if (*p < end && **p == ',') {
        (*p)++;
        return 1; /* more fields follow */
    }
    return 0;
}

static int parse_num(const char *s, size_t n, uint64_t *out)
{
    uint64_t v = 0;
    int base = 10;
    if (n > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
        base = 16;
        s += 2;
        n -= 2;
    }
    if (n == 0 || n > 20)
        return -1;
    for (size_t i = 0; i < n; i++) {
        int d;
        char c = s[i];
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (base == 16 && c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (base == 16 && c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return -1;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base)
            return -1;
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = v;
    return 0;
}

int trace_read_rmm_mem(const char *name, const char *data, size_t len, trace *t, char *err, size_t errlen)
{
    const char *p = data, *end = data + len;
    trace_init(t);
    t->format = "rmm-csv";
    trace_builder *b = tb_new(t);
    if (!b) {
        snprintf(err, errlen, "%s: out of host memory", name);
        return -1;
    }
    uint32_t line = 0;
    int rc = -1;
    while (p < end) {
        line++;
        const char *ls = p;
        const char *f[6];
        size_t n[6];
        int k = 0, more = 1;
        while (more && k < 6) {
            more = field(&p, end, &f[k], &n[k]);
            k++;
        }
        p = trace_next_line(p, end); /* a CR alone ends the row too: the next row is never dropped with it */
        if (line == 1)
            continue; /* the header */
        if (k == 1 && n[0] == 0)
            continue; /* blank line */
        if (k < 5 || more) {
            snprintf(err, errlen, "%s:%u:1: expected Thread,Time,Action,Pointer,Size[,Stream]", name, line);
            goto out;
        }
        uint64_t ptr, size = 0, stream = 0;
        const char *act = f[2];
        size_t alen = n[2];
        if (parse_num(f[3], n[3], &ptr) || parse_num(f[4], n[4], &size) ||
            (k == 6 && n[5] && parse_num(f[5], n[5], &stream))) {
            snprintf(err, errlen, "%s:%u:%zu: bad pointer, size or stream", name, line, (size_t)(f[3] - ls) + 1);
            goto out;
        }
        int res;
        if (alen == 8 && !memcmp(act, "allocate", 8)) {
            uint32_t at = 0;
            res = tb_alloc(b, ptr, size, stream, line, &at);
            if (res == -1) {
                snprintf(err, errlen, "%s:%u:%zu: allocate of 0x%llx, which is live since line %u", name, line,
                         (size_t)(f[3] - ls) + 1, (unsigned long long)ptr, at);
                goto out;
            }
        } else if (alen == 4 && !memcmp(act, "free", 4)) {
            res = tb_free(b, ptr, line);
            if (res == -1) {
                snprintf(err, errlen, "%s:%u:%zu: free of 0x%llx, which the log never allocated", name, line,
                         (size_t)(f[3] - ls) + 1, (unsigned long long)ptr);
                goto out;
            }
        } else if (alen == 16 && !memcmp(act, "allocate failure", 16)) {
            t->rec.oom_events++;
            res = 0;
        } else {
            snprintf(err, errlen, "%s:%u:%zu: unknown action '%.*s' (allocate, free, allocate failure)", name, line,
                     (size_t)(act - ls) + 1, (int)(alen > 40 ? 40 : alen), act);
            goto out;
        }
        if (res == -2) {
            snprintf(err, errlen, "%s: out of host memory", name);
            goto out;
        }
    }
    rc = 0;
out:
    tb_finish(b);
    if (rc)
        trace_free(t);
    return rc;
}
