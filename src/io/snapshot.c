/*
 * snapshot.c: memory snapshots. Owns the snapshot of segments and blocks with the history (core/history.c's ring),
 * and writing both as PyTorch's _dump_snapshot pickle (which torch.cuda._memory_viz and the memory_viz page open) or
 * as JSON. Reads allocator state under its lock; changes none of it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/segments.h"
#include "core/history.h"
#include "core/labels.h"
#include "io/pickle_out.h"
#include "io/snapshot.h"
#include "util/util.h"

/* ---- taking a snapshot ---- */

typedef struct growing {
    void *p;
    size_t n, cap, elem;
} growing;

static void *grow_one(growing *g)
{
    if (hbm__grow(&g->p, &g->cap, g->n + 1, g->elem))
        return NULL;
    return (char *)g->p + g->elem * g->n++;
}

static hbm_block_state state_of(const hbm__block *b)
{
    return b->allocated ? HBM_BLOCK_ALLOCATED : b->event_count > 0 ? HBM_BLOCK_PENDING_FREE : HBM_BLOCK_INACTIVE;
}

/* The snapshot's own copy of the label texts it refers to, so that it outlives the allocator.
 * ids[k] are the labels of blocks and entries in order (0: none); ctx[k] receives the text. */
static hbm_status copy_labels(const hbm__labels *l, const hbm_label *ids, size_t n, const char ***ctx, char **store)
{
    size_t *off = calloc((size_t)l->n + 1, sizeof *off); /* offset + 1 of a label in *store, 0: not yet */
    if (!off)
        return HBM_ERR_NOMEM;
    size_t total = 0;
    for (size_t k = 0; k < n; k++)
        if (ids[k] && !off[ids[k]]) {
            off[ids[k]] = total + 1;
            total += strlen(hbm__label_text(l, ids[k])) + 1;
        }
    char *buf = total ? malloc(total) : NULL;
    if (total && !buf) {
        free(off);
        return HBM_ERR_NOMEM;
    }
    for (hbm_label id = 1; id <= l->n; id++)
        if (off[id])
            strcpy(buf + off[id] - 1, hbm__label_text(l, id));
    for (size_t k = 0; k < n; k++)
        *ctx[k] = ids[k] ? buf + off[ids[k]] - 1 : NULL;
    free(off);
    *store = buf;
    return HBM_OK;
}

hbm_status hbm_snapshot_take(hbm_allocator *a, hbm_snapshot **out)
{
    if (!a || !out)
        return HBM_ERR_INVALID;
    hbm_snapshot *s = calloc(1, sizeof *s);
    if (!s)
        return HBM_ERR_NOMEM;
    growing segs = {NULL, 0, 0, sizeof(hbm_snap_segment)}, blks = {NULL, 0, 0, sizeof(hbm_snap_block)};
    hbm_status rc = HBM_OK;
    hbm_outside_get(a, &s->outside); /* before the lock: it takes it, and asks for the processes without it */
    hbm__lock(a);
    s->device = a->device;
    snprintf(s->settings, sizeof s->settings, "%s", a->conf.text);
    for (hbm__segment *seg = hbm__segments_first(a); seg && rc == HBM_OK; seg = hbm__segments_next(seg)) {
        hbm_snap_segment *cur = NULL;
        for (hbm__block *b = seg->head; b; b = b->next) {
            if (!b->mapped) {
                cur = NULL; /* an expandable segment: one entry per mapped run, as PyTorch emits */
                continue;
            }
            if (!cur) {
                size_t first = blks.n;
                if (!(cur = grow_one(&segs))) {
                    rc = HBM_ERR_NOMEM;
                    break;
                }
                *cur = (hbm_snap_segment){.addr = b->addr,
                                          .stream = seg->stream,
                                          .is_small = seg->pool->is_small,
                                          .is_expandable = seg->expandable,
                                          .pool = seg->pool->owner ? seg->pool->owner->id : 0,
                                          .first_block = first,
                                          .range_addr = seg->addr,
                                          .range_size = seg->size,
                                          .is_asleep = seg->pool->owner && seg->pool->owner->sleep_state,
                                          .page_size = seg->expandable ? seg->page : 0};
            }
            hbm_snap_block *sb = grow_one(&blks);
            if (!sb) {
                rc = HBM_ERR_NOMEM;
                break;
            }
            hbm_block_state st = state_of(b);
            /* The label travels through the pointer until copy_labels() gives it its text. */
            *sb = (hbm_snap_block){b->addr, b->size, st != HBM_BLOCK_INACTIVE ? b->requested : 0, st,
                                   (const char *)(uintptr_t)(st != HBM_BLOCK_INACTIVE ? b->label : 0)};
            cur->nblocks++;
            cur->total_size += b->size;
            if (b->allocated)
                cur->allocated_size += b->size;
            if (sb->state != HBM_BLOCK_INACTIVE) {
                cur->active_size += b->size;
                cur->requested_size += b->requested;
            }
        }
    }
    if (rc == HBM_OK && a->history_n) {
        s->trace = malloc(a->history_n * sizeof *s->trace);
        if (!s->trace)
            rc = HBM_ERR_NOMEM;
        for (size_t i = 0; s->trace && i < a->history_n; i++) {
            const hbm__trace_rec *r = &a->history[(a->history_head + i) % a->history_cap];
            hbm_trace_action act = (hbm_trace_action)(r->action & ~HBM__TRACE_BACKUP);
            s->trace[i] = (hbm_trace_entry){act,        r->addr,
                                            r->size,    r->stream,
                                            r->time_us, (const char *)(uintptr_t)r->label,
                                            NULL,       (r->action & HBM__TRACE_BACKUP) != 0};
            if (act == HBM_TRACE_SLEEP || act == HBM_TRACE_WAKE) { /* the label is the pool's tag */
                s->trace[i].tag = s->trace[i].context;
                s->trace[i].context = NULL;
            }
        }
        s->ntrace = s->trace ? a->history_n : 0;
    }
    s->segments = segs.p;
    s->nsegments = segs.n;
    s->blocks = blks.p;
    s->nblocks = blks.n;
    if (rc == HBM_OK) {
        size_t n = s->nblocks + s->ntrace;
        hbm_label *ids = malloc((n ? n : 1) * sizeof *ids);
        const char ***ctx = malloc((n ? n : 1) * sizeof *ctx);
        if (!ids || !ctx)
            rc = HBM_ERR_NOMEM;
        for (size_t k = 0; rc == HBM_OK && k < n; k++) {
            hbm_trace_entry *t = k < s->nblocks ? NULL : &s->trace[k - s->nblocks];
            ctx[k] = !t ? &s->blocks[k].context : t->tag ? &t->tag : &t->context;
            ids[k] = (hbm_label)(uintptr_t)*ctx[k];
        }
        if (rc == HBM_OK)
            rc = copy_labels(&a->labels, ids, n, ctx, &s->labels);
        free(ids);
        free(ctx);
    }
    hbm__unlock(a);
    if (rc != HBM_OK) { /* the contexts may still hold ids: clear them before anyone reads them */
        for (size_t k = 0; k < s->nblocks; k++)
            s->blocks[k].context = NULL;
        for (size_t k = 0; k < s->ntrace; k++)
            s->trace[k].context = s->trace[k].tag = NULL;
    }
    if (rc != HBM_OK) {
        hbm_snapshot_free(s);
        return rc;
    }
    *out = s;
    return HBM_OK;
}

void hbm_snapshot_free(hbm_snapshot *s)
{
    if (!s)
        return;
    free(s->segments);
    free(s->blocks);
    free(s->trace);
    free(s->labels);
    free(s);
}

/* ---- writing it ---- */

static const char *action_name(hbm_trace_action a)
{
    static const char *names[] = {"alloc",       "free_requested", "free_completed", "segment_alloc", "segment_free",
                                  "segment_map", "segment_unmap",  "snapshot",       "oom",           "sleep",
                                  "wake"};
    return (unsigned)a < sizeof names / sizeof names[0] ? names[a] : "unknown";
}

static const char *state_name(hbm_block_state st)
{
    /* PyTorch emits "active_pending_free" (its docstring says "active_awaiting_free"). */
    return st == HBM_BLOCK_ALLOCATED      ? "active_allocated"
           : st == HBM_BLOCK_PENDING_FREE ? "active_pending_free"
                                          : "inactive";
}

/* One emitter for both formats: the same tree, two encodings. */
typedef struct emit {
    hbm__pickle_out *pk; /* pickle, or */
    FILE *js;            /* JSON */
    int depth;
    int count[16]; /* JSON: items written so far at each depth (a dict's keys and values both count) */
    int in_dict[16];
} emit;

/* JSON: the separator before the next item: ',' between items, ':' between a key and its value. */
static void j_sep(emit *e)
{
    if (e->depth == 0)
        return;
    int n = e->count[e->depth]++;
    if (e->in_dict[e->depth] && n % 2 == 1)
        fputc(':', e->js);
    else if (n > 0)
        fputc(',', e->js);
}

static void e_open(emit *e, int dict)
{
    if (e->pk) {
        dict ? hbm__pw_dict(e->pk) : hbm__pw_list(e->pk);
        return;
    }
    j_sep(e);
    fputc(dict ? '{' : '[', e->js);
    e->depth++;
    e->count[e->depth] = 0;
    e->in_dict[e->depth] = dict;
}

static void e_close(emit *e)
{
    if (e->pk) {
        hbm__pw_end(e->pk);
        return;
    }
    fputc(e->in_dict[e->depth] ? '}' : ']', e->js);
    e->depth--;
}

static void e_str(emit *e, const char *s)
{
    if (e->pk) {
        hbm__pw_str(e->pk, s);
        return;
    }
    j_sep(e);
    hbm__json_str(e->js, s);
}

static void e_int(emit *e, int64_t v)
{
    if (e->pk) {
        hbm__pw_int(e->pk, v);
        return;
    }
    j_sep(e);
    fprintf(e->js, "%lld", (long long)v);
}

static void e_bool(emit *e, int v)
{
    if (e->pk) {
        hbm__pw_bool(e->pk, v);
        return;
    }
    j_sep(e);
    fputs(v ? "true" : "false", e->js);
}

static void e_pool_id(emit *e, int64_t id)
{
    if (e->pk) {
        hbm__pw_pair(e->pk, 0, id);
        return;
    }
    j_sep(e);
    fprintf(e->js, "[0,%lld]", (long long)id);
}

static void e_kv_int(emit *e, const char *k, int64_t v)
{
    e_str(e, k);
    e_int(e, v);
}

static void e_kv_str(emit *e, const char *k, const char *v)
{
    e_str(e, k);
    e_str(e, v);
}

/* "frames": PyTorch's frame dicts (name, filename, line), one per line of a label, innermost first.
 * A line is a name, or "name<TAB>filename<TAB>line". */
static void emit_frames(emit *e, const char *label)
{
    e_str(e, "frames");
    e_open(e, 0);
    for (const char *p = label; p && *p;) {
        const char *eol = strchr(p, '\n');
        size_t len = eol ? (size_t)(eol - p) : strlen(p);
        char line[HBM_LABEL_MAX + 1];
        memcpy(line, p, len);
        line[len] = 0;
        char *file = strchr(line, '\t'), *lineno = file ? strchr(file + 1, '\t') : NULL;
        if (file)
            *file++ = 0;
        if (lineno)
            *lineno++ = 0;
        e_open(e, 1);
        e_kv_str(e, "name", line);
        e_kv_str(e, "filename", file ? file : "");
        e_kv_int(e, "line", lineno ? strtoll(lineno, NULL, 10) : 0);
        e_close(e);
        p = eol ? eol + 1 : p + len;
    }
    e_close(e);
}

static void emit_snapshot(emit *e, const hbm_snapshot *s)
{
    e_open(e, 1);
    e_str(e, "segments");
    e_open(e, 0);
    for (size_t i = 0; i < s->nsegments; i++) {
        const hbm_snap_segment *g = &s->segments[i];
        e_open(e, 1);
        e_kv_int(e, "device", s->device);
        e_kv_int(e, "address", (int64_t)g->addr);
        e_kv_int(e, "total_size", (int64_t)g->total_size);
        e_kv_int(e, "allocated_size", (int64_t)g->allocated_size);
        e_kv_int(e, "active_size", (int64_t)g->active_size);
        e_kv_int(e, "requested_size", (int64_t)g->requested_size);
        e_kv_int(e, "stream", (int64_t)g->stream);
        e_kv_str(e, "segment_type", g->is_small ? "small" : "large");
        e_str(e, "segment_pool_id");
        e_pool_id(e, (int64_t)g->pool);
        e_str(e, "is_expandable");
        e_bool(e, g->is_expandable);
        if (g->is_asleep) { /* hbmalloc's own key (a sleeping pool, docs/SLEEP.md); readers of torch's ignore it */
            e_str(e, "is_asleep");
            e_bool(e, 1);
        }
        e_str(e, "frames");
        e_open(e, 0);
        e_close(e);
        e_str(e, "blocks");
        e_open(e, 0);
        for (size_t k = 0; k < g->nblocks; k++) {
            const hbm_snap_block *b = &s->blocks[g->first_block + k];
            e_open(e, 1);
            e_kv_int(e, "address", (int64_t)b->addr);
            e_kv_int(e, "size", (int64_t)b->size);
            e_kv_int(e, "requested_size", (int64_t)b->requested);
            e_kv_str(e, "state", state_name(b->state));
            emit_frames(e, b->context);
            e_close(e);
        }
        e_close(e);
        e_close(e);
    }
    e_close(e);
    e_str(e, "device_traces");
    e_open(e, 0);
    for (int d = 0; d <= s->device; d++) {
        e_open(e, 0);
        for (size_t i = 0; d == s->device && i < s->ntrace; i++) {
            const hbm_trace_entry *t = &s->trace[i];
            e_open(e, 1);
            e_kv_str(e, "action", action_name(t->action));
            e_kv_int(e, t->action == HBM_TRACE_OOM ? "device_free" : "addr", (int64_t)t->addr);
            e_kv_int(e, "size", (int64_t)t->size);
            e_kv_int(e, "stream", (int64_t)t->stream);
            e_kv_int(e, "time_us", (int64_t)t->time_us);
            emit_frames(e, t->context);
            if (t->action == HBM_TRACE_SLEEP || t->action == HBM_TRACE_WAKE) {
                /* hbmalloc's own keys (docs/SLEEP.md): the pool's tag and whether its contents were copied out (a
                 * sleep) or back (a wake); torch's readers ignore them, hbmalloc's draw the sleep from them. */
                if (t->tag)
                    e_kv_str(e, "tag", t->tag);
                e_str(e, "backup");
                e_bool(e, t->backup);
            }
            e_close(e);
        }
        e_close(e);
    }
    e_close(e);
    e_str(e, "allocator_settings");
    e_open(e, 1);
    e_kv_str(e, "PYTORCH_CUDA_ALLOC_CONF", s->settings);
    e_close(e);
    /* hbmalloc's keys beside torch's (memory_viz and torch's readers take the keys they know): memory outside
     * hbmalloc as the snapshot was taken (hbm_outside; -1: unknown), for `hbmalloc view` and the doctor. */
    const hbm_outside *o = &s->outside;
    e_kv_int(e, "device_total_bytes", o->ns ? o->device_total : -1);
    e_kv_int(e, "device_used_bytes", o->ns ? o->device_used : -1);
    e_kv_int(e, "outside_bytes", o->ns ? o->outside : -1);
    e_kv_int(e, "outside_process_bytes", o->ns ? o->process_outside : -1);
    e_kv_int(e, "outside_others_bytes", o->ns ? o->others : -1);
    e_close(e);
}

int hbm__snapshot_pickle(const hbm_snapshot *s, unsigned char **data, size_t *len)
{
    emit e;
    memset(&e, 0, sizeof e);
    if (!(e.pk = hbm__pw_new()))
        return -1;
    emit_snapshot(&e, s);
    return hbm__pw_finish(e.pk, data, len) ? -1 : 0;
}

hbm_status hbm_snapshot_save(const hbm_snapshot *s, const char *path, hbm_snapshot_format fmt, char *err, size_t errlen)
{
    if (!s || !path)
        return HBM_ERR_INVALID;
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot write", path);
        return HBM_ERR_INVALID;
    }
    emit e;
    memset(&e, 0, sizeof e);
    hbm_status rc = HBM_OK;
    if (fmt == HBM_SNAPSHOT_JSON) {
        e.js = f;
        emit_snapshot(&e, s);
        fputc('\n', f);
    } else {
        unsigned char *data = NULL;
        size_t len = 0;
        if (hbm__snapshot_pickle(s, &data, &len))
            rc = HBM_ERR_NOMEM;
        else if (fwrite(data, 1, len, f) != len)
            rc = HBM_ERR_INVALID;
        free(data);
    }
    if (fclose(f) != 0 && rc == HBM_OK)
        rc = HBM_ERR_INVALID;
    if (rc != HBM_OK)
        snprintf(err, errlen, "%s: %s", path, rc == HBM_ERR_NOMEM ? "out of host memory" : "write failed");
    return rc;
}
