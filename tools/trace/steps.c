/*
 * steps.c: see steps.h. Owns the insertion of the step events; the
 * search for the step (keys and period) is the library's (src/policy/step_period.c),
 * the same the step plan uses on a running job.
 */
#include "steps.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"


/* Each allocation's size and when it was freed (the allocations made by then; UINT32_MAX: never), as
 * hbm_step_period takes them. */
static int allocations_of(const trace *t, uint64_t *size, uint32_t *freed, size_t nalloc)
{
    uint32_t *made = malloc((t->nslots ? t->nslots : 1) * sizeof *made);
    if (!made)
        return -1;
    size_t k = 0;
    for (size_t i = 0; i < t->n && k < nalloc; i++) {
        const trace_event *e = &t->ev[i];
        if (e->kind == EV_FREE) {
            freed[made[e->slot]] = (uint32_t)k;
        } else if (e->kind == EV_ALLOC) {
            size[k] = e->size;
            freed[k] = UINT32_MAX;
            made[e->slot] = (uint32_t)k++;
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
        static const char *const said[4] = {"", "sizes repeat", "frees repeat, sizes change", "sizes and frees repeat"};
        uint64_t *size = malloc((nalloc ? nalloc : 1) * sizeof *size);
        uint32_t *freed = malloc((nalloc ? nalloc : 1) * sizeof *freed);
        size_t best_len = 0;
        int which = 0;
        int bad = !size || !freed || allocations_of(t, size, freed, nalloc), layers = 0;
        /* As the step plan looks for steps in a running job (hbm_step_period): a repeat over at least half of the
         * allocations, of at least HBM_MIN_STEP, whose live bytes come back (the layers of one step repeat too,
         * keeping their activations). */
        size_t layer_period = 0;
        if (!bad)
            period = hbm_step_period(size, freed, nalloc, &best_len, &which, &layer_period);
        layers = (int)layer_period;
        free(size);
        free(freed);
        if (bad) {
            snprintf(msg, msglen, "out of host memory looking for the step");
            return -1;
        }
        if (!period && layers) {
            snprintf(msg, msglen,
                     "no repeating step found: the trace's allocations repeat every %d, but live memory "
                     "grows or shrinks from one repeat to the next (the layers of one step, not steps; "
                     "mark the steps with 's' lines, or give --steps N)",
                     layers);
            return -1;
        }
        if (!period) {
            snprintf(msg, msglen,
                     "no repeating step found: no end of the trace's %zu allocations, half of them or "
                     "more, repeats twice (mark the steps with 's' lines, or give --steps N)",
                     nalloc);
            return -1;
        }
        by = said[which];
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
    trace_meta was = t->meta; /* the events' times and stacks move with them; the texts stay as they are */
    memset(&t->meta, 0, sizeof t->meta);
    t->meta.texts = was.texts, t->meta.ntexts = was.ntexts, t->meta.cap_texts = was.cap_texts;
    t->meta.index = was.index, t->meta.scanned = was.scanned, t->meta.dropped = was.dropped;
    was.texts = NULL, was.ntexts = 0, was.index = (u64map){0};
    size_t m = 0, k = 0, next = from ? from : period;
    int rc = 0;
    for (size_t i = 0; i < t->n; i++) {
        if (t->ev[i].kind == EV_ALLOC) {
            if (k == next && k < nalloc) {
                ev[m++] = (trace_event){.kind = EV_STEP, .line = t->ev[i].line};
                next += period;
            }
            k++;
        }
        if (i < was.n && (was.time_us[i] || was.stack[i]) && !rc)
            rc = trace_meta_set_index(t, m, was.time_us[i], was.stack[i]);
        ev[m++] = t->ev[i];
    }
    trace_meta_free(&was);
    if (rc) {
        free(ev);
        snprintf(msg, msglen, "out of host memory");
        return -1;
    }
    free(t->ev);
    t->ev = ev;
    t->n = m;
    t->cap = t->n + marks + 1;
    if (*by)
        snprintf(msg, msglen,
                 "%zu step boundaries every %zu allocations, the first before allocation %zu (found: "
                 "%s over the last %zu allocations)",
                 marks, period, from ? from : period, by, nalloc - from);
    else
        snprintf(msg, msglen, "%zu step boundaries every %zu allocations", marks, period);
    return 0;
}
