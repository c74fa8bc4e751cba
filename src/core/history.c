/*
 * history.c: the history ring buffer (PyTorch's _record_memory_history): the engine records trace entries at
 * PyTorch's points (core/history.h: hbm__trace, hbm__trace_block), hbm_history_enable sizes the ring, and
 * hbm_history_context sets the allocator-wide label. Snapshots read the ring (io/snapshot.c).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/device.h"
#include "core/errors.h"
#include "util/env.h"
#include "core/history.h"
#include "core/labels.h"

/* The ring is as large as the entries it holds, up to what was asked (torch's own default is sys.maxsize: keep
 * everything): doubled when full until then. When host memory runs out it stops growing, says so once, and keeps
 * the newest entries it has room for. Before it wraps, head is 0: growing keeps the order. */
static __attribute__((cold, noinline)) void grow_history(hbm_allocator *a)
{
    size_t cap = a->history_cap, max = a->history_max;
    size_t limit = SIZE_MAX / 2 / sizeof *a->history;
    size_t want = cap > limit ? max : cap * 2 < max ? cap * 2 : max;
    hbm__trace_rec *h = want > cap ? realloc(a->history, want * sizeof *h) : NULL;
    if (h) {
        a->history = h;
        a->history_cap = want;
        return;
    }
    a->history_max = cap; /* from now on a ring of cap entries */
    if (!hbm__env(HBM__ENV_QUIET))
        fprintf(stderr,
                "hbmalloc: warning: memory history on %s device %d: out of host memory growing past %zu "
                "entries; keeping the newest %zu (asked: %zu)\n",
                hbm__dev_name(a), a->device, cap, cap, max);
}

void hbm__record(hbm_allocator *a, uint32_t action, uint64_t addr, uint64_t size, hbm_stream stream, hbm_label label)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    if (a->history_n == a->history_cap && a->history_cap < a->history_max)
        grow_history(a);
    size_t at = (a->history_head + a->history_n) % a->history_cap;
    if (a->history_n == a->history_cap)
        a->history_head = (a->history_head + 1) % a->history_cap; /* overwrite the oldest */
    else
        a->history_n++;
    a->history[at] = (hbm__trace_rec){addr,   size,   (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u,
                                      stream, action, label};
}

hbm_status hbm_history_context(hbm_allocator *a, const char *label)
{
    if (!a)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_label id = 0;
    hbm_status rc = label ? hbm__label_intern_a(a, label, &id) : HBM_OK;
    if (rc == HBM_OK)
        a->context = id; /* refused: the previous label stays */
    hbm__unlock(a);
    return rc;
}

hbm_status hbm_history_enable(hbm_allocator *a, size_t max_entries)
{
    if (!a)
        return HBM_ERR_INVALID;
    size_t first = max_entries < 1024 ? max_entries : 1024; /* grown as entries come (grow_history) */
    hbm__trace_rec *h = NULL;
    if (first && !(h = malloc(first * sizeof *h))) {
        hbm__lock(a);
        hbm__set_error(a, "memory history: no host memory for its first %zu entries", first);
        hbm__unlock(a);
        return HBM_ERR_NOMEM;
    }
    hbm__lock(a);
    free(a->history);
    a->history = h;
    a->history_cap = first;
    a->history_max = max_entries;
    a->history_n = a->history_head = 0;
    hbm__unlock(a);
    return HBM_OK;
}
