/*
 * logsize.c: a size as logs print it ("12.50 MiB", "2048 bytes"): what the log readers (doctor_log.c, doctor_sleep.c)
 * share, below both.
 */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "doctor.h"

double doctor_size(const char *s, size_t *len)
{
    static const struct {
        const char *u;
        double mul;
    } units[] = {{"bytes", 1},          {"KiB", 1024.0},          {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}, {"B", 1}};
    const char *p = s;
    *len = 0;
    if (!isdigit((unsigned char)*p))
        return 0;
    char *end;
    double v = strtod(p, &end);
    p = end;
    while (*p == ' ')
        p++;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        size_t n = strlen(units[i].u);
        if (!strncmp(p, units[i].u, n) && !isalpha((unsigned char)p[n])) {
            if (!isfinite(v * units[i].mul))
                return 0; /* "1e999 GiB", 400 digits: no size, so no inf - inf = NaN downstream */
            *len = (size_t)(p + n - s);
            return v * units[i].mul;
        }
    }
    return 0;
}

void doctor_format_size(double bytes, char *buf, size_t len)
{
    if (!(bytes >= 0))
        bytes = 0;
    if (bytes > 9e18)
        snprintf(buf, len, "%.3g GiB", bytes / 1073741824.0);
    else
        hbm__format_size((uint64_t)bytes, buf, len);
}
