/* errors.h: an allocator's last error and warnings (errors.c), the ground floor of core/. */
#ifndef HBM_CORE_ERRORS_H
#define HBM_CORE_ERRORS_H

#include <stddef.h>

#include "core/types.h"

/* Where hbm_malloc / hbm_free copy a failure's message for the calling thread, under the allocator's lock
 * (devices.c sets it around its calls); NULL: nowhere. */
extern __thread char *hbm__err_sink;
extern __thread size_t hbm__err_sink_len;

/* Set the last error text (printf-style). */
void hbm__set_error(hbm_allocator *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* An optional feature's refusal (hbm_publish, hbm_oom_dump): "what: why" as the last error, set under the allocator's
 * lock (other threads' calls set theirs under it); returns rc. */
hbm_status hbm__refuse(hbm_allocator *a, hbm_status rc, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Appends text to hbm_warning's (after "; " when there is one already). */
void hbm__warning_add(hbm_allocator *a, const char *text);

#endif
