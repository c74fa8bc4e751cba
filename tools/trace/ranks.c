/*
 * ranks.c: see ranks.h. Owns the file-name grammar of ranks and the outlier rule; reads no file.
 */
#include "ranks.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Digits at s (1 to 7 of them) not followed by another digit: their value, *len their count; -1 when none. */
static int digits(const char *s, size_t *len)
{
    size_t n = 0;
    int v = 0;
    while (isdigit((unsigned char)s[n]) && n < 8)
        v = v * 10 + (s[n++] - '0');
    *len = n;
    return n == 0 || n > 7 ? -1 : v;
}

static int is_sep(char c) { return c == '-' || c == '_' || c == '.'; }

int ranks_from_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    int rank = -1;
    for (const char *p = base; *p; p++) {
        size_t n;
        int v;
        if (!strncasecmp(p, "rank", 4)) {
            const char *q = p + 4;
            if (*q == '_' || *q == '-' || *q == '.' || *q == '=')
                q++;
            if ((v = digits(q, &n)) >= 0)
                rank = v;
        } else if ((p == base || is_sep(p[-1])) && (*p == 'r' || *p == 'R')) {
            if ((v = digits(p + 1, &n)) >= 0 && (p[1 + n] == 0 || is_sep(p[1 + n])))
                rank = v;
        }
    }
    return rank;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double ranks_median(const double *v, size_t n)
{
    if (n == 0)
        return 0;
    double *s = malloc(n * sizeof *s);
    if (!s) /* no memory for a copy: the first value stands in (a figure, never a crash) */
        return v[0];
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, by_value);
    double m = s[(n - 1) / 2];
    free(s);
    return m;
}

double ranks_mad(const double *v, size_t n, double m)
{
    if (n == 0)
        return 0;
    double *d = malloc(n * sizeof *d);
    if (!d)
        return 0;
    for (size_t i = 0; i < n; i++)
        d[i] = v[i] > m ? v[i] - m : m - v[i];
    double mad = ranks_median(d, n);
    free(d);
    return mad;
}

int ranks_is_high(double x, double m, double mad, double floor)
{
    double excess = x - m;
    return excess > (RANKS_RATIO - 1) * m && excess > floor && excess > RANKS_MAD_K * mad;
}
