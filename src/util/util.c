/*
 * util.c: size parsing and formatting, bounded string building.
 * Owns no state; must not touch allocator or backend structures.
 */
#include "util/util.h"
#include "util/env.h"

#include "hbmalloc.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

int hbm__parse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || !*s)
        return -1;
    for (; *s; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    return 0;
}

int hbm__parse_size(const char *s, size_t *out)
{
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {
        {"", 1},
        {"b", 1},
        {"k", 1024.0},
        {"kb", 1024.0},
        {"kib", 1024.0},
        {"m", 1048576.0},
        {"mb", 1048576.0},
        {"mib", 1048576.0},
        {"g", 1073741824.0},
        {"gb", 1073741824.0},
        {"gib", 1073741824.0},
        {"t", 1099511627776.0},
        {"tb", 1099511627776.0},
        {"tib", 1099511627776.0},
    };
    if (!s || !*s)
        return -1;
    const char *p = s;
    while (isdigit((unsigned char)*p) || *p == '.')
        p++;
    if (p == s)
        return -1;
    char num[64];
    size_t n = (size_t)(p - s);
    if (n >= sizeof num)
        return -1;
    memcpy(num, s, n);
    num[n] = 0;
    char *end;
    errno = 0;
    double v = strtod(num, &end);
    if (*end || errno || !isfinite(v))
        return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(p, units[i].suffix) == 0) {
            double bytes = v * units[i].mult;
            if (bytes >= 18446744073709551615.0)
                return -1;
            /* A plain byte count must be whole. */
            if (units[i].mult == 1 && strchr(num, '.'))
                return -1;
            *out = (size_t)bytes;
            return 0;
        }
    }
    return -1;
}

int hbm__grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

void hbm__format_size(uint64_t n, char *buf, size_t len)
{
    /* Same thresholds as PyTorch's format_size (<= 1024 bytes, <= 1 MiB, <= 1 GiB). */
    if (n <= 1024)
        snprintf(buf, len, "%llu bytes", (unsigned long long)n);
    else if (n <= 1048576)
        snprintf(buf, len, "%.2f KiB", (double)n / 1024.0);
    else if (n <= 1073741824)
        snprintf(buf, len, "%.2f MiB", (double)n / 1048576.0);
    else
        snprintf(buf, len, "%.2f GiB", (double)n / 1073741824.0);
}

void hbm__sb_init(hbm__sbuf *sb, char *buf, size_t cap)
{
    sb->buf = buf;
    sb->cap = cap;
    sb->len = 0;
    if (buf && cap)
        buf[0] = 0;
}

void hbm__sb_printf(hbm__sbuf *sb, const char *fmt, ...)
{
    if (!sb->buf || sb->cap == 0 || sb->len >= sb->cap - 1)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(sb->buf + sb->len, sb->cap - sb->len, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    sb->len += (size_t)n;
    if (sb->len > sb->cap - 1) {
        sb->len = hbm__utf8_cut(sb->buf, sb->cap - 1);
        sb->buf[sb->len] = 0;
    }
}

size_t hbm__utf8_char(const unsigned char *s, size_t n)
{
    if (!n)
        return 0;
    unsigned c = s[0];
    size_t len = c < 0x80                 ? 1
                 : c >= 0xc2 && c <= 0xdf ? 2
                 : c >= 0xe0 && c <= 0xef ? 3
                 : c >= 0xf0 && c <= 0xf4 ? 4
                                          : 0;
    if (!len || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && s[1] < 0xa0) || (c == 0xed && s[1] > 0x9f) || /* overlong; surrogates */
        (c == 0xf0 && s[1] < 0x90) || (c == 0xf4 && s[1] > 0x8f))   /* overlong; above U+10FFFF */
        return 0;
    return len;
}

size_t hbm__utf8_cut(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t m = n;
    /* Back over at most three continuation bytes to the character's lead byte. */
    while (m > 0 && n - m < 3 && (u[m - 1] & 0xc0) == 0x80)
        m--;
    if (m == 0 || u[m - 1] < 0xc0)
        return n; /* ends on ASCII or on stray continuation bytes: nothing is split */
    size_t want = u[m - 1] >= 0xf0 ? 4 : u[m - 1] >= 0xe0 ? 3 : 2;
    return n - (m - 1) >= want ? n : m - 1; /* the lead's character is whole, or it is cut: drop it */
}

void hbm__shell_quote(const char *s, char *out, size_t len)
{
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, len);
    hbm__sb_printf(&sb, "'");
    for (const char *p = s; *p; p++)
        hbm__sb_printf(&sb, *p == '\'' ? "'\\''" : "%c", *p);
    hbm__sb_printf(&sb, "'");
}

static void json_str(FILE *out, const char *s, int html)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    fputc('"', out);
    for (size_t i = 0; i < n;) {
        size_t k = hbm__utf8_char(p + i, n - i);
        if (!k) {
            fputs("\\ufffd", out);
            i++;
            continue;
        }
        unsigned char c = p[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c < 0x20 || (html && (c == '<' || c == '>' || c == '&')))
            fprintf(out, "\\u%04x", c);
        else
            fwrite(p + i, 1, k, out);
        i += k;
    }
    fputc('"', out);
}

void hbm__json_str(FILE *out, const char *s) { json_str(out, s, 0); }

void hbm__json_str_html(FILE *out, const char *s) { json_str(out, s, 1); }

#define NEAREST_MAX_LEN 128 /* words longer are never near (conf.c's longest token) */

/* Optimal string alignment distance (an adjacent swap is one edit), or cap + 1 when it is more than cap. */
static size_t edits(const char *a, const char *b, size_t cap)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > NEAREST_MAX_LEN || m > NEAREST_MAX_LEN || (n > m ? n - m : m - n) > cap)
        return cap + 1;
    size_t row[3][NEAREST_MAX_LEN + 1]; /* rows i-2, i-1 and i, in turn */
    for (size_t j = 0; j <= m; j++)
        row[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        size_t *cur = row[i % 3], *up = row[(i + 2) % 3], *up2 = row[(i + 1) % 3], best = cur[0] = i;
        for (size_t j = 1; j <= m; j++) {
            size_t d = up[j - 1] + (a[i - 1] != b[j - 1]);
            if (up[j] + 1 < d)
                d = up[j] + 1;
            if (cur[j - 1] + 1 < d)
                d = cur[j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] && up2[j - 2] + 1 < d)
                d = up2[j - 2] + 1;
            cur[j] = d;
            if (d < best)
                best = d;
        }
        if (best > cap)
            return cap + 1;
    }
    return row[n % 3][m];
}

const char *hbm__nearest(const char *word, const char *const *names, size_t n)
{
    const char *best = NULL;
    size_t best_d = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(names[i]), cap = len / 4 > 2 ? len / 4 : 2;
        size_t d = edits(word, names[i], cap);
        if (d <= cap && d < best_d && d < len) {
            best = names[i];
            best_d = d;
        }
    }
    return best;
}

int hbm__on_path(const char *prog)
{
    const char *path = hbm__env(HBM__ENV_PATH);
    if (!path)
        return 0;
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        char full[1024];
        snprintf(full, sizeof full, "%.*s/%s", (int)n, p, prog);
        if (n && access(full, X_OK) == 0)
            return 1;
        p += n + (p[n] == ':');
    }
    return 0;
}

const char *hbm_status_name(hbm_status s)
{
    switch (s) {
    case HBM_OK: return "HBM_OK";
    case HBM_ERR_OOM: return "HBM_ERR_OOM";
    case HBM_ERR_INVALID: return "HBM_ERR_INVALID";
    case HBM_ERR_CONF: return "HBM_ERR_CONF";
    case HBM_ERR_BACKEND: return "HBM_ERR_BACKEND";
    case HBM_ERR_DOUBLE_FREE: return "HBM_ERR_DOUBLE_FREE";
    case HBM_ERR_FOREIGN_PTR: return "HBM_ERR_FOREIGN_PTR";
    case HBM_ERR_INTERIOR_PTR: return "HBM_ERR_INTERIOR_PTR";
    case HBM_ERR_NOMEM: return "HBM_ERR_NOMEM";
    case HBM_ERR_WRONG_DEVICE: return "HBM_ERR_WRONG_DEVICE";
    case HBM_ERR_POOL_BUSY: return "HBM_ERR_POOL_BUSY";
    case HBM_ERR_CAPTURE: return "HBM_ERR_CAPTURE";
    case HBM_ERR_STALE: return "HBM_ERR_STALE";
    case HBM_ERR_ASLEEP: return "HBM_ERR_ASLEEP";
    case HBM_ERR_CHECKSUM: return "HBM_ERR_CHECKSUM";
    }
    return "HBM_ERR_UNKNOWN";
}

const char *hbm__tag_invalid(const char *tag)
{
    if (!tag || !*tag)
        return "an empty tag names nothing: give the pool a name (\"weights\", \"kv_cache\")";
    for (const unsigned char *c = (const unsigned char *)tag; *c; c++)
        if (*c < 0x20 || *c == 0x7f)
            return "a tag holds no control characters (a tab, a newline): it is printed in tables and "
                   "tab-separated lines";
    return NULL;
}

static _Atomic uint64_t random_counter; /* for names when the kernel has no random bytes to give */

uint64_t hbm__random_bits(void)
{
    uint64_t x;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) == (ssize_t)sizeof x)
        return x;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ ((uint64_t)getpid() << 40) ^
        atomic_fetch_add(&random_counter, 0x9e3779b97f4a7c15ull);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull; /* splitmix64's finalizer */
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}
