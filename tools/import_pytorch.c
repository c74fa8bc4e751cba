/*
 * import_pytorch.c: PyTorch memory snapshots (torch.cuda.memory._dump_snapshot)
 * into the event list. Owns the snapshot's meaning: which events to replay,
 * which blocks were live before recording began, and what the recording
 * allocator itself reserved.
 *
 * Replayed: `alloc` (size = the caller's request) and `free_completed`.
 * Blocks live at the end in the snapshot's segments but never allocated in the
 * history were allocated before recording began: they come first. A free of a
 * block allocated before recording (and freed during it) cannot be replayed
 * and is counted. PyTorch's own reserved memory follows from the segment
 * events and the segments at the end.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pickle.h"
#include "trace.h"
#include "../src/util.h"

static int fail(char *err, size_t errlen, const char *name, const char *msg)
{
    snprintf(err, errlen, "%s: %s", name, msg);
    return -1;
}

static void copy_str(const pv *v, char *out, size_t n)
{
    size_t len = v && v->type == PV_STR ? v->u.str.len : 0;
    if (len >= n)
        len = n - 1;
    if (len)
        memcpy(out, v->u.str.s, len);
    out[len] = 0;
}

/* A trace entry's action and numbers (0 where absent). */
static void event_fields(const pv *e, const pv **action, int64_t *addr, int64_t *size, int64_t *stream)
{
    *action = pv_get(e, "action");
    *addr = *size = *stream = 0;
    pv_int(pv_get(e, "addr"), addr);
    pv_int(pv_get(e, "size"), size);
    pv_int(pv_get(e, "stream"), stream);
}

/* Sum of segment sizes on the device, and the pre-existing blocks (addr, size, stream). */
typedef struct pre {
    uint64_t addr, size;
    hbm_stream stream;
} pre;

int trace_read_pickle_mem(const char *name, const unsigned char *data, size_t len, int device, trace *t, char *err,
                          size_t errlen)
{
    char perr_msg[256];
    pickle_doc *doc;
    trace_init(t);
    t->format = "pytorch-snapshot";
    pv *root = pickle_parse(data, len, &doc, perr_msg, sizeof perr_msg);
    if (!root)
        return fail(err, errlen, name, perr_msg);
    int rc = -1;
    pre *pres = NULL;
    trace_builder *b = NULL;
    const pv *segments = root, *traces = NULL, *settings = NULL;
    if (root->type == PV_DICT) { /* PyTorch 2.x; 1.x dumped a bare list of segments */
        segments = pv_get(root, "segments");
        traces = pv_get(root, "device_traces");
        settings = pv_get(root, "allocator_settings");
    }
    if (!segments || segments->type != PV_LIST) {
        fail(err, errlen, name, "not a PyTorch memory snapshot (no list of segments)");
        goto done;
    }
    const pv *events = traces ? pv_at(traces, (uint32_t)device) : NULL;
    if (traces && traces->type != PV_LIST) {
        fail(err, errlen, name, "device_traces is not a list");
        goto done;
    }
    if (settings) {
        const pv *s = pv_get(settings, "PYTORCH_CUDA_ALLOC_CONF");
        if (s && s->type == PV_STR) {
            t->rec.has_settings = 1;
            copy_str(s, t->rec.settings, sizeof t->rec.settings);
        }
    }
    if (!(b = tb_new(t)))
        goto nomem;

    /* Which addresses the history leaves live at the end. */
    trace scratch;
    trace_init(&scratch);
    trace_builder *live = tb_new(&scratch);
    if (!live)
        goto nomem;
    uint32_t nev = pv_len(events);
    for (uint32_t i = 0; i < nev; i++) {
        const pv *e = pv_at(events, i), *act = pv_get(e, "action");
        int64_t addr;
        if (pv_int(pv_get(e, "addr"), &addr))
            continue;
        if (pv_is_str(act, "alloc")) {
            tb_free(live, (uint64_t)addr, 0);
            tb_alloc(live, (uint64_t)addr, 0, 0, 0, NULL);
        } else if (pv_is_str(act, "free_completed")) {
            tb_free(live, (uint64_t)addr, 0);
        }
    }

    /* Segments at the end: reserved bytes, and blocks live since before recording. */
    size_t npre = 0, cap_pre = 0;
    int64_t end_reserved = 0;
    uint32_t nseg = pv_len(segments);
    uint64_t devices_seen = 0;
    for (uint32_t i = 0; i < nseg; i++) {
        const pv *seg = pv_at(segments, i);
        int64_t dev = 0, addr, total, stream = 0;
        pv_int(pv_get(seg, "device"), &dev);
        if (dev >= 0 && dev < 64)
            devices_seen |= 1ull << dev;
        if (dev != device)
            continue;
        if (pv_int(pv_get(seg, "address"), &addr) || pv_int(pv_get(seg, "total_size"), &total)) {
            tb_finish(live);
            trace_free(&scratch);
            fail(err, errlen, name, "a segment lacks address or total_size");
            goto done;
        }
        pv_int(pv_get(seg, "stream"), &stream);
        end_reserved += total;
        t->rec.segments_end++;
        const pv *blocks = pv_get(seg, "blocks");
        int64_t at = addr;
        for (uint32_t k = 0; k < pv_len(blocks); k++) {
            const pv *blk = pv_at(blocks, k);
            int64_t size = 0, req = 0;
            pv_int(pv_get(blk, "size"), &size);
            if (pv_int(pv_get(blk, "requested_size"), &req) || req <= 0)
                req = size;
            if (pv_is_str(pv_get(blk, "state"), "active_allocated") && !tb_is_live(live, (uint64_t)at)) {
                if (hbm__grow((void **)&pres, &cap_pre, npre + 1, sizeof *pres)) {
                    tb_finish(live);
                    trace_free(&scratch);
                    goto nomem;
                }
                pres[npre++] = (pre){(uint64_t)at, (uint64_t)req, (hbm_stream)stream};
            }
            at += size;
        }
    }
    tb_finish(live);
    trace_free(&scratch);
    for (uint32_t d = 0; traces && d < pv_len(traces) && d < 64; d++)
        if (pv_len(pv_at(traces, d)))
            devices_seen |= 1ull << d;
    if (!(devices_seen >> device & 1) && nev == 0 && devices_seen) {
        char list[200] = "";
        for (int d = 0; d < 64; d++)
            if (devices_seen >> d & 1)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", list[0] ? ", " : "", d);
        snprintf(perr_msg, sizeof perr_msg, "device %d has no segments or history in this snapshot (devices: %.100s); "
                                            "choose one with --device", device, list);
        fail(err, errlen, name, perr_msg);
        goto done;
    }
    t->rec.end_reserved = end_reserved;
    t->rec.preexisting = npre;
    for (size_t i = 0; i < npre; i++)
        if (tb_alloc(b, pres[i].addr, pres[i].size, pres[i].stream, 0, NULL) == -2)
            goto nomem;

    /* The history, and the recording allocator's reserved memory along it. */
    int64_t seg_delta = 0, cur = 0, peak = 0;
    for (uint32_t i = 0; i < nev; i++) {
        const pv *act;
        int64_t addr, size, stream;
        event_fields(pv_at(events, i), &act, &addr, &size, &stream);
        if (pv_is_str(act, "segment_alloc") || pv_is_str(act, "segment_map"))
            seg_delta += size;
        else if (pv_is_str(act, "segment_free") || pv_is_str(act, "segment_unmap"))
            seg_delta -= size;
    }
    int64_t start = end_reserved - seg_delta;
    cur = peak = start;
    for (uint32_t i = 0; i < nev; i++) {
        const pv *act;
        int64_t addr, size, stream;
        event_fields(pv_at(events, i), &act, &addr, &size, &stream);
        int res = 0;
        if (pv_is_str(act, "alloc")) {
            if (size < 0) {
                snprintf(perr_msg, sizeof perr_msg, "event %u: alloc of a negative size", i);
                fail(err, errlen, name, perr_msg);
                goto done;
            }
            if (tb_is_live(b, (uint64_t)addr)) {
                snprintf(perr_msg, sizeof perr_msg, "event %u: alloc at 0x%llx, which is already live", i,
                         (unsigned long long)addr);
                fail(err, errlen, name, perr_msg);
                goto done;
            }
            res = tb_alloc(b, (uint64_t)addr, (uint64_t)size, (hbm_stream)stream, i + 1, NULL);
        } else if (pv_is_str(act, "free_completed")) {
            res = tb_free(b, (uint64_t)addr, i + 1);
            if (res == -1) {
                t->rec.skipped_frees++;
                res = 0;
            }
        } else if (pv_is_str(act, "segment_alloc") || pv_is_str(act, "segment_map")) {
            t->rec.present = 1;
            cur += size;
            if (cur > peak)
                peak = cur;
        } else if (pv_is_str(act, "segment_free") || pv_is_str(act, "segment_unmap")) {
            t->rec.present = 1;
            cur -= size;
        } else if (pv_is_str(act, "oom")) {
            t->rec.oom_events++;
        }
        if (res == -2)
            goto nomem;
    }
    t->rec.peak_reserved = peak;
    rc = 0;
    goto done;
nomem:
    fail(err, errlen, name, "out of host memory");
done:
    if (b)
        tb_finish(b);
    free(pres);
    pickle_free(doc);
    if (rc)
        trace_free(t);
    return rc;
}
