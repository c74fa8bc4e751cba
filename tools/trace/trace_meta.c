/*
 * trace_meta.c: what a recording says about its events besides what a replay
 * needs -- when each happened (PyTorch snapshots' time_us) and the stack of
 * each allocation (their frames) -- kept beside the events for the view. The
 * stacks are interned: a training step repeats the same few thousand, so a
 * snapshot of millions of allocations keeps each text once (an index per
 * event). Owns these arrays only; the readers fill them (import_pytorch.c).
 */
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "trace.h"

/* FNV-1a: the stack's key in the index (texts that share a key are compared, and kept apart if they differ). */
static uint64_t text_hash(const char *s, size_t *len)
{
    uint64_t h = 1469598103934665603ull;
    const char *p = s;
    for (; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    *len = (size_t)(p - s);
    return h;
}

uint32_t trace_meta_intern(trace *t, const char *text)
{
    trace_meta *m = &t->meta;
    if (!m->index.keys && u64map_init(&m->index))
        return 0;
    size_t len;
    uint64_t h = text_hash(text, &len);
    m->scanned += len;
    size_t i;
    for (;; h++) { /* the next key on a collision of different texts */
        i = u64map_find(&m->index, h);
        if (!m->index.used[i])
            break;
        m->scanned += len;
        if (!strcmp(m->texts[m->index.vals[i]], text))
            return (uint32_t)m->index.vals[i];
    }
    size_t k = m->ntexts ? m->ntexts : 1; /* texts[0]: none */
    char *copy = malloc(len + 1);
    if (!copy || k >= UINT32_MAX || hbm__grow((void **)&m->texts, &m->cap_texts, k + 1, sizeof *m->texts) ||
        u64map_put_at(&m->index, i, h, k)) {
        free(copy);
        return 0;
    }
    memcpy(copy, text, len + 1);
    m->texts[0] = NULL;
    m->texts[k] = copy;
    m->ntexts = k + 1;
    return (uint32_t)k;
}

int trace_meta_set_index(trace *t, size_t i, uint64_t time_us, uint32_t stack)
{
    trace_meta *m = &t->meta;
    if (i >= m->cap) { /* both arrays cover events 0 .. cap-1 */
        size_t old = m->cap, cap = old;
        if (hbm__grow((void **)&m->time_us, &cap, i + 1, sizeof *m->time_us))
            return -1;
        cap = old;
        if (hbm__grow((void **)&m->stack, &cap, i + 1, sizeof *m->stack))
            return -1;
        m->cap = cap;
    }
    if (i >= m->n) { /* events n .. i-1 said nothing; what lies past i is not touched (nor resident) */
        memset(m->time_us + m->n, 0, (i - m->n) * sizeof *m->time_us);
        memset(m->stack + m->n, 0, (i - m->n) * sizeof *m->stack);
        m->n = i + 1;
    }
    m->time_us[i] = time_us;
    m->any_time |= time_us != 0;
    m->stack[i] = stack;
    m->any_stack |= stack != 0;
    return 0;
}

int trace_meta_set(trace *t, size_t i, uint64_t time_us, const char *stack)
{
    uint32_t k = 0;
    if (stack && *stack && !(k = trace_meta_intern(t, stack)))
        return -1;
    return trace_meta_set_index(t, i, time_us, k);
}

uint64_t trace_time(const trace *t, size_t i) { return i < t->meta.n ? t->meta.time_us[i] : 0; }

const char *trace_tag(const trace *t, const trace_event *e)
{
    return e->slot && e->slot < t->meta.ntexts ? t->meta.texts[e->slot] : "";
}

const char *trace_stack(const trace *t, size_t i)
{
    return i < t->meta.n && t->meta.stack[i] ? t->meta.texts[t->meta.stack[i]] : NULL;
}

void trace_meta_free(trace_meta *m)
{
    for (size_t k = 1; k < m->ntexts; k++)
        free(m->texts[k]);
    free(m->texts);
    free(m->time_us);
    free(m->stack);
    u64map_free(&m->index);
    memset(m, 0, sizeof *m);
}
