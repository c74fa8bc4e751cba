/*
 * errors.c: an allocator's last error and its warnings, and the calling thread's copy of a failure (the ground floor
 * of core/: it calls nothing of the library).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/errors.h"

__thread char *hbm__err_sink;
__thread size_t hbm__err_sink_len;

void hbm__warning_add(hbm_allocator *a, const char *text)
{
    size_t n = strlen(a->warning);
    snprintf(a->warning + n, sizeof a->warning - n, "%s%s", n ? "; " : "", text);
}

void hbm__set_error(hbm_allocator *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(a->err, sizeof a->err, fmt, ap);
    va_end(ap);
}

hbm_status hbm__refuse(hbm_allocator *a, hbm_status rc, const char *what, const char *fmt, ...)
{
    char why[sizeof a->err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    hbm__lock(a);
    hbm__set_error(a, "%s: %s", what, why);
    hbm__unlock(a);
    return rc;
}
