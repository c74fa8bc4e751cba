/*
 * steps.c: see steps.h. Owns the keys of a trace's allocations and the
 * insertion of the step events; the period search is the library's
 * (src/period.c), which the step plan uses on a running job.
 */
#include "steps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/internal.h"

enum { BY_SIZE_AND_FREES = 3, BY_SIZE = 1, BY_FREES = 2 };

/* One key per allocation: its size (BY_SIZE) and, for each block freed since the allocation before it, how many
 * allocations back that block was made (BY_FREES). Equal keys repeating with a period are a repeating step. */
static int keys_of(const trace *t, int by, uint64_t *key, size_t nalloc)
{
    uint32_t *made = malloc((t->nslots ? t->nslots : 1) * sizeof *made);
    if (!made)
        return -1;
    size_t k = 0;
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (size_t i = 0; i < t->n && k < nalloc; i++) {
        const trace_event *e = &t->ev[i];
        if (e->kind == EV_FREE && (by & BY_FREES)) {
            h = hbm__mix64(h ^ (k - made[e->slot] + 1));
        } else if (e->kind == EV_ALLOC) {
            key[k] = hbm__mix64(h ^ (by & BY_SIZE ? hbm__mix64(e->size + 0x51ed) : 0));
            made[e->slot] = (uint32_t)k++;
            h = 0x9e3779b97f4a7c15ull;
        }
    }
    free(made);
    return 0;
}

int trace_mark_steps(trace *t, const char *how, char *msg, size_t msglen)
{
    for (size_t i = 0; i < t->n; i++)
        if (t->ev[i].kind == EV_STEP) {
            snprintf(msg, msglen, "the trace marks its steps already (line %u): --steps is for traces that do not",
                     t->ev[i].line);
            return -1;
        }
    size_t nalloc = (size_t)t->allocs, period = 0, from = 0;
    const char *by = "";
    if (!strcmp(how, "auto")) {
        /* The longest repeating end under each key, the more exact key on a tie: sizes and frees; sizes alone (a
         * step that frees a tensor of the warm-up differs only there); frees alone (sizes change every step). */
        static const int modes[3] = {BY_SIZE_AND_FREES, BY_SIZE, BY_FREES};
        static const char *const said[3] = {"sizes and frees repeat", "sizes repeat", "frees repeat, sizes change"};
        uint64_t *key = malloc((nalloc ? nalloc : 1) * sizeof *key);
        size_t best_len = 0;
        for (int m = 0; m < 3; m++) {
            size_t len = 0, p;
            if (!key || keys_of(t, modes[m], key, nalloc)) {
                free(key);
                snprintf(msg, msglen, "out of host memory looking for the step");
                return -1;
            }
            if ((p = hbm__period(key, nalloc, &len)) && len > best_len) {
                best_len = len;
                period = p;
                by = said[m];
            }
        }
        free(key);
        if (!period) {
            snprintf(msg, msglen, "no repeating step found: no end of the trace's %zu allocations repeats twice "
                                  "(mark the steps with 's' lines, or give --steps N)", nalloc);
            return -1;
        }
        from = nalloc - best_len;
    } else {
        char *end;
        unsigned long long v = strtoull(how, &end, 10);
        if (*how < '0' || *how > '9' || *end || !v || v > UINT32_MAX) {
            snprintf(msg, msglen, "--steps takes 'auto' or a whole number of allocations per step, not '%.60s'", how);
            return -1;
        }
        period = (size_t)v;
    }
    /* A step event before allocation `from`, from + period, ... (none before the first allocation). */
    size_t marks = 0;
    for (size_t k = from ? from : period; k < nalloc; k += period)
        marks++;
    trace_event *ev = malloc((t->n + marks + 1) * sizeof *ev);
    if (!ev) {
        snprintf(msg, msglen, "out of host memory");
        return -1;
    }
    size_t m = 0, k = 0, next = from ? from : period;
    for (size_t i = 0; i < t->n; i++) {
        if (t->ev[i].kind == EV_ALLOC) {
            if (k == next && k < nalloc) {
                ev[m++] = (trace_event){.kind = EV_STEP, .line = t->ev[i].line};
                next += period;
            }
            k++;
        }
        ev[m++] = t->ev[i];
    }
    free(t->ev);
    t->ev = ev;
    t->n = m;
    t->cap = t->n + marks + 1;
    if (*by)
        snprintf(msg, msglen, "%zu step boundaries every %zu allocations, the first before allocation %zu (found: "
                              "%s over the last %zu allocations)", marks, period, from ? from : period, by,
                 nalloc - from);
    else
        snprintf(msg, msglen, "%zu step boundaries every %zu allocations", marks, period);
    return 0;
}
