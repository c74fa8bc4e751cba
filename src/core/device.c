/*
 * device.c: the only caller of a backend. Opens and closes backends, counts every call, adds up the time spent in
 * device calls (the backend's cost model, or the measured wall time of a real device) and turns backend codes into
 * hbm_status values and messages; the public backend queries and the simulated device's test controls go through
 * here too. Must not make policy decisions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/device.h"
#include "backend/sim.h"
#include "core/errors.h"
#include "util/util.h"

static void put_err(char *err, size_t errlen, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
}

hbm_status hbm_backend_open(hbm_backend **out, const char *spec, char *err, size_t errlen)
{
    char local[512];
    if (!out || !spec) {
        put_err(err, errlen, "hbm_backend_open: NULL argument");
        return HBM_ERR_INVALID;
    }
    *out = NULL;
    const char *colon = strchr(spec, ':');
    size_t nlen = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *opts = colon ? colon + 1 : "";
    hbm_backend *b = calloc(1, sizeof *b);
    if (!b) {
        put_err(err, errlen, "out of host memory");
        return HBM_ERR_NOMEM;
    }
    hbm_status rc;
    local[0] = 0;
    snprintf(b->spec, sizeof b->spec, "%s", spec);
    if (nlen == 3 && !strncmp(spec, "sim", 3)) {
        rc = hbm__sim_open(b, opts, local, sizeof local);
    } else if (nlen == 4 && !strncmp(spec, "cuda", 4)) {
        rc = hbm__cuda_open(b, opts, local, sizeof local);
    } else if ((nlen == 3 && !strncmp(spec, "acl", 3)) || (nlen == 3 && !strncmp(spec, "npu", 3))) {
        rc = hbm__acl_open(b, opts, local, sizeof local);
    } else {
        snprintf(local, sizeof local, "unknown backend '%.*s' in '%s' (available: sim, cuda, acl or its alias npu)",
                 (int)nlen, spec, spec);
        rc = HBM_ERR_INVALID;
    }
    if (rc != HBM_OK) {
        put_err(err, errlen, local);
        free(b);
        return rc;
    }
    *out = b;
    return HBM_OK;
}

void hbm_backend_close(hbm_backend *b)
{
    if (!b)
        return;
    b->ops->close(b->ctx);
    free(b);
}

const char *hbm_backend_name(const hbm_backend *b) { return b ? b->ops->name : "(none)"; }

hbm_status hbm_sim_hold_stream(hbm_allocator *a, hbm_stream stream, int hold)
{
    return a ? hbm_sim_hold(a->backend, a->device, stream, hold) : HBM_ERR_INVALID;
}

_Static_assert((int)HBM_SIM_CALLS == (int)HBM__OP_KINDS, "hbm_sim_call mirrors hbm__op");

hbm_status hbm_backend_mem_info(hbm_backend *b, int device, size_t *free_bytes, size_t *total_bytes)
{
    if (!b || !free_bytes || !total_bytes || device < 0 || device >= b->caps.device_count)
        return HBM_ERR_INVALID;
    *free_bytes = *total_bytes = 0;
    return b->ops->mem_info(b->ctx, device, free_bytes, total_bytes) ? HBM_ERR_BACKEND : HBM_OK;
}

const char *hbm_backend_error_name(const char *backend, int code)
{
    return backend && (!strcmp(backend, "acl") || !strcmp(backend, "npu")) ? hbm__acl_error_name(code) : NULL;
}

/* ---- the simulated device's test controls (sim.h) ---- */

hbm_status hbm_sim_hold(hbm_backend *b, int device, hbm_stream stream, int hold)
{
    void *sim = hbm__sim_ctx(b);
    if (!sim)
        return HBM_ERR_INVALID;
    return hbm__sim_stream_hold(sim, device, stream, hold) ? HBM_ERR_NOMEM : HBM_OK;
}

hbm_status hbm_sim_add_fault(hbm_backend *b, const hbm_sim_fault *f)
{
    void *sim = hbm__sim_ctx(b);
    if (!sim || !f || f->call < -1 || f->call >= HBM_SIM_CALLS)
        return HBM_ERR_INVALID;
    hbm__sim_fault rule = {.kind = f->call,
                           .nth = f->nth,
                           .min_size = f->min_size,
                           .max_size = f->max_size,
                           .code = f->oom ? HBM__BE_OOM : HBM__SIM_ERR_INJECTED};
    return hbm__sim_add_fault(sim, &rule) ? HBM_ERR_NOMEM : HBM_OK;
}

void hbm_sim_clear_faults(hbm_backend *b)
{
    void *sim = hbm__sim_ctx(b);
    if (sim)
        hbm__sim_clear_faults(sim);
}

hbm_status hbm_sim_get_state(hbm_backend *b, hbm_sim_state *out)
{
    void *sim = hbm__sim_ctx(b);
    if (!sim || !out)
        return HBM_ERR_INVALID;
    hbm__sim_counters c;
    hbm__sim_get_counters(sim, &c);
    memset(out, 0, sizeof *out);
    memcpy(out->calls, c.calls, sizeof out->calls);
    out->injected = c.injected;
    out->live_allocations = c.live_allocations;
    out->live_reservations = c.live_reservations;
    out->live_handles = c.live_handles;
    out->mapped_pages = c.mapped_pages;
    out->live_events = c.live_events;
    out->live_host = c.live_host;
    out->host_backed = hbm__sim_is_host_backed(sim);
    return HBM_OK;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const char *op_name(hbm__op op)
{
    static const char *names[HBM__OP_KINDS] = {"malloc",
                                               "free",
                                               "memory info",
                                               "address reserve",
                                               "address free",
                                               "physical create",
                                               "physical release",
                                               "map",
                                               "unmap",
                                               "set access",
                                               "stream synchronize",
                                               "event",
                                               "event query",
                                               "event synchronize",
                                               "device synchronize",
                                               "pinned host alloc",
                                               "pinned host free",
                                               "copy to host",
                                               "copy to device"};
    return names[op];
}

static uint64_t begin(hbm_allocator *a, hbm__op op)
{
    hbm_device_counters *c = &a->dev;
    switch (op) {
    case HBM__OP_MALLOC: c->malloc_calls++; break;
    case HBM__OP_FREE: c->free_calls++; break;
    case HBM__OP_INFO: c->info_calls++; break;
    case HBM__OP_MAP: c->map_calls++; break;
    case HBM__OP_UNMAP: c->unmap_calls++; break;
    case HBM__OP_SYNC:
    case HBM__OP_EVSYNC:
    case HBM__OP_DEVSYNC: c->sync_calls++; break;
    case HBM__OP_EVENT:
    case HBM__OP_QUERY: c->event_calls++; break;
    case HBM__OP_HOST_ALLOC:
    case HBM__OP_HOST_FREE: c->host_calls++; break;
    case HBM__OP_COPY_D2H:
    case HBM__OP_COPY_H2D: c->copy_calls++; break;
    default: c->vmm_calls++; break;
    }
    return a->backend->caps.modelled_cost ? 0 : now_ns();
}

/* Out of memory is a plain status for the calls that obtain memory (the
 * engine's retry ladder handles it); any other failure gets a message. */
static void tally(hbm_allocator *a, uint64_t t0, hbm__op op, size_t size, int rc)
{
    hbm_backend *b = a->backend;
    if (b->caps.modelled_cost && b->ops->cost_ns)
        a->dev.device_ns += b->ops->cost_ns(b->ctx, op, size);
    else if (!b->caps.modelled_cost)
        a->dev.device_ns += now_ns() - t0;
    a->dev.failed_calls += rc != 0;
}

static hbm_status end(hbm_allocator *a, uint64_t t0, hbm__op op, size_t size, int rc)
{
    tally(a, t0, op, size, rc);
    if (rc == 0)
        return HBM_OK;
    hbm_backend *b = a->backend;
    if (rc == HBM__BE_OOM && (op == HBM__OP_MALLOC || op == HBM__OP_CREATE || op == HBM__OP_RESERVE))
        return HBM_ERR_OOM;
    hbm__set_error(a, "%s device %d: %s of %zu bytes failed: %s (backend code %d)", b->ops->name, a->device,
                   op_name(op), size, b->ops->strerror(b->ctx, rc), rc);
    if (a->tearing_down) { /* hbm_destroy reports these: the device may keep what the call held */
        if (!a->teardown_failed++) {
            size_t n = strlen(a->err);
            n = hbm__utf8_cut(a->err, n < sizeof a->teardown_first - 1 ? n : sizeof a->teardown_first - 1);
            memcpy(a->teardown_first, a->err, n);
            a->teardown_first[n] = 0;
        }
        a->teardown_bytes += size;
    }
    return HBM_ERR_BACKEND;
}

/* Calls that obtain memory or read capacity run in the relaxed graph-capture mode,
 * as PyTorch's alloc_block does (CUDAStreamCaptureModeGuard): legal while another
 * thread captures a graph, which the default (global) mode forbids. A real device
 * always gets the exchange (a capture may be under way in code hbmalloc does not
 * see); the simulated one only while this allocator captures (the exchange would
 * be ~10% of a replayed event's instructions). Returns the mode to restore, or -1
 * when nothing was exchanged. Called with the lock held, or (dev_malloc_raw) by a
 * caller that released it outside any capture. */
static inline __attribute__((always_inline)) int relax(hbm_allocator *a, hbm__op op)
{
    if (!a->backend->ops->capture_mode || (a->backend->caps.modelled_cost && !a->ncaptures))
        return -1;
    if (op != HBM__OP_MALLOC && op != HBM__OP_INFO && op != HBM__OP_RESERVE && op != HBM__OP_CREATE &&
        op != HBM__OP_MAP && op != HBM__OP_ACCESS)
        return -1;
    int mode = HBM__CAPTURE_MODE_RELAXED;
    if (a->backend->ops->capture_mode(a->backend->ctx, a->device, &mode) != 0)
        return -1;
    return mode;
}

static inline __attribute__((always_inline)) void unrelax(hbm_allocator *a, int mode)
{
    if (mode >= 0)
        a->backend->ops->capture_mode(a->backend->ctx, a->device, &mode);
}

#define CALL(a, op, size, expr)                  \
    do {                                         \
        uint64_t t0_ = begin((a), (op));         \
        int mode_ = relax((a), (op));            \
        int rc_ = (expr);                        \
        unrelax((a), mode_);                     \
        return end((a), t0_, (op), (size), rc_); \
    } while (0)

#define BE(a) ((a)->backend)
#define CTX(a) ((a)->backend->ctx)

hbm_status hbm__dev_malloc(hbm_allocator *a, size_t size, uintptr_t *out)
{
    CALL(a, HBM__OP_MALLOC, size, BE(a)->ops->mem_alloc(CTX(a), a->device, size, out));
}

/* release_lock_on_malloc: the backend call alone, made without the allocator's
 * lock (it touches no allocator state); hbm__dev_malloc_done, under the lock
 * again, counts it and turns its code into a status. */
int hbm__dev_malloc_raw(hbm_allocator *a, size_t size, uintptr_t *out, uint64_t *t0)
{
    *t0 = a->backend->caps.modelled_cost ? 0 : now_ns();
    int mode = relax(a, HBM__OP_MALLOC);
    int rc = BE(a)->ops->mem_alloc(CTX(a), a->device, size, out);
    unrelax(a, mode);
    return rc;
}

hbm_status hbm__dev_malloc_done(hbm_allocator *a, size_t size, int rc, uint64_t t0)
{
    (void)begin(a, HBM__OP_MALLOC);
    return end(a, t0, HBM__OP_MALLOC, size, rc);
}

/* ---- waiting for the device before memory goes back to it ----
 *
 * The raw calls (no allocator state touched: they may run with the lock released) and their accounting, made
 * under the lock. HBM__BE_QUEUE: a framework's queue could not be flushed (its own code is lost: it is not the
 * backend's). */
#define HBM__BE_QUEUE (-3)

/* Launches still in a framework's host queue are not on the device's streams yet: push them first, so that an
 * event recorded or a stream synchronized covers them. */
static int flush_raw(hbm_backend *b)
{
    hbm_host_queue *q = &b->queue;
    return q->flush && q->flush(q->ctx) ? HBM__BE_QUEUE : 0;
}

/* All of the device's work: with a framework's queue, its own entry (torch_npu's npuSynchronizeDevice empties the
 * task queue first); else the queue flushed, then the device synchronized. */
static int device_sync_raw(hbm_backend *b, int device)
{
    hbm_host_queue *q = &b->queue;
    int rc = q->sync_device ? 0 : flush_raw(b);
    return rc ? rc : b->ops->device_sync(b->ctx, device, q->sync_device, q->ctx);
}

static hbm_status account(hbm_allocator *a, uint64_t t0, hbm__op op, int rc)
{
    (void)begin(a, op); /* counted now, under the lock; t0 was read before the call */
    if (rc != HBM__BE_QUEUE)
        return end(a, t0, op, 0, rc);
    a->dev.failed_calls++;
    hbm__set_error(a,
                   "%s device %d: the framework's launch queue could not be flushed: the launches it still holds "
                   "are not covered",
                   BE(a)->ops->name, a->device);
    return HBM_ERR_BACKEND;
}

static uint64_t clock_start(hbm_allocator *a) { return BE(a)->caps.modelled_cost ? 0 : now_ns(); }

int hbm__dev_may_wait(const hbm_allocator *a)
{
    const hbm_host_queue *q = &BE(a)->queue;
    return !q->may_wait || q->may_wait(q->ctx) != 0;
}

/* Whether a locked operation may give memory back now without a wait (none needed, or the last one still holds). */
bool hbm__dev_quiet(const hbm_allocator *a) { return !BE(a)->caps.device_work || a->quiet_stamp == hbm__free_stamp(a); }

/* Work queued on the device may still touch memory that is free in the cache (its owner launched it, then freed the
 * block, as frameworks do): before the first block goes back to the device, wait for all of it. The wait holds
 * until the next free (a->quiet_stamp). This form keeps the lock: with a framework's queue it makes no wait at all
 * (the queue's worker may need the lock: docs/CONTRACTS.md, "Waiting with the lock open"), and the caller, which
 * should have waited at its safe point (hbm__dev_quiesce_open), gets an error and gives nothing back; counted. */
hbm_status hbm__dev_quiesce(hbm_allocator *a)
{
    if (hbm__dev_quiet(a))
        return HBM_OK;
    uint64_t stamp = hbm__free_stamp(a);
    if (hbm__framework_queue(a)) {
        a->dev.locked_queue_waits++;
        hbm__set_error(a,
                       "%s device %d: a wait for the framework's launch queue would have held hbmalloc's lock "
                       "(blocks were freed since the operation's safe point): nothing was given back this time",
                       BE(a)->ops->name, a->device);
        return HBM_ERR_BACKEND;
    }
    uint64_t t0 = clock_start(a);
    hbm_status rc = account(a, t0, HBM__OP_DEVSYNC, device_sync_raw(BE(a), a->device));
    if (rc == HBM_OK) {
        a->quiet_stamp = stamp;
        a->dev.device_waits++;
    }
    return rc;
}

/* The same at a safe point of an operation: the caller has decided nothing that the wait can invalidate, or decides
 * it again after (docs/CONTRACTS.md, "Waiting with the lock open"). A framework's queue is waited for with the
 * allocator's lock released, as torch_npu's own allocator does (NPUCachingAllocator.cpp, UnlockGuard): the queue's
 * worker thread may free or allocate through this allocator while it drains (a garbage collection run by an
 * operator's compile; workspaces under TASK_QUEUE_ENABLE=2), and would wait for the lock forever. A block freed
 * while the lock was open may carry work launched after the wait began: then it is waited for again. On a thread
 * the queue runs itself (hbm__dev_may_wait) nothing is waited for: an error, nothing is given back. A completed
 * wait also settles the uses of freed blocks that could not be recorded before it began (events.c). */
hbm_status hbm__dev_quiesce_open(hbm_allocator *a)
{
    hbm_backend *b = BE(a);
    if (!hbm__framework_queue(a))
        return hbm__dev_quiesce(a);
    if (hbm__dev_quiet(a) && (!a->nunrec || !b->caps.device_work))
        return HBM_OK;
    if (!hbm__dev_may_wait(a)) {
        hbm__set_error(a,
                       "%s device %d: this thread runs the framework's launch queue, which a wait for the device "
                       "would wait for: nothing was given back",
                       b->ops->name, a->device);
        return HBM_ERR_BACKEND;
    }
    int device = a->device;
    for (int round = 0; round < 8; round++) {
        uint64_t stamp = hbm__free_stamp(a), t0 = clock_start(a), seq = a->unrec_seq;
        hbm__unlock(a);
        int raw = device_sync_raw(b, device);
        hbm__lock(a);
        hbm_status rc = account(a, t0, HBM__OP_DEVSYNC, raw);
        if (rc != HBM_OK)
            return rc;
        a->dev.device_waits++;
        a->device_waited(a, seq);
        if (hbm__free_stamp(a) == stamp) {
            a->quiet_stamp = stamp;
            return HBM_OK;
        }
    }
    /* Frees kept coming while the queue drained: waiting with the lock held could deadlock (see above); nothing is
     * given back this time. */
    hbm__set_error(a,
                   "%s device %d: blocks kept being freed while the framework's launch queue drained (8 rounds): "
                   "nothing was given back to the device this time",
                   b->ops->name, device);
    return HBM_ERR_BACKEND;
}


hbm_status hbm__dev_free(hbm_allocator *a, uintptr_t ptr, size_t size)
{
    hbm_status rc = hbm__dev_quiesce(a);
    if (rc != HBM_OK)
        return rc;
    CALL(a, HBM__OP_FREE, size, BE(a)->ops->mem_free(CTX(a), a->device, ptr, size));
}

hbm_status hbm__dev_info(hbm_allocator *a, size_t *free_bytes, size_t *total_bytes)
{
    CALL(a, HBM__OP_INFO, 0, BE(a)->ops->mem_info(CTX(a), a->device, free_bytes, total_bytes));
}

hbm_status hbm__dev_info_quiet(hbm_allocator *a, size_t *free_bytes, size_t *total_bytes)
{
    uint64_t t0 = begin(a, HBM__OP_INFO);
    int mode = relax(a, HBM__OP_INFO);
    int rc = BE(a)->ops->mem_info(CTX(a), a->device, free_bytes, total_bytes);
    unrelax(a, mode);
    tally(a, t0, HBM__OP_INFO, 0, rc);
    return rc ? HBM_ERR_BACKEND : HBM_OK;
}

hbm_status hbm__dev_reserve(hbm_allocator *a, size_t size, uintptr_t *va)
{
    CALL(a, HBM__OP_RESERVE, size, BE(a)->ops->vmm_reserve(CTX(a), a->device, size, va));
}

hbm_status hbm__dev_unreserve(hbm_allocator *a, uintptr_t va, size_t size)
{
    CALL(a, HBM__OP_UNRESERVE, size, BE(a)->ops->vmm_unreserve(CTX(a), a->device, va, size));
}

hbm_status hbm__dev_create(hbm_allocator *a, size_t size, uint64_t *handle)
{
    CALL(a, HBM__OP_CREATE, size, BE(a)->ops->vmm_create(CTX(a), a->device, size, handle));
}

hbm_status hbm__dev_release(hbm_allocator *a, uint64_t handle)
{
    CALL(a, HBM__OP_RELEASE, 0, BE(a)->ops->vmm_release(CTX(a), a->device, handle));
}

hbm_status hbm__dev_map(hbm_allocator *a, uintptr_t va, size_t size, uint64_t handle)
{
    CALL(a, HBM__OP_MAP, size, BE(a)->ops->vmm_map(CTX(a), a->device, va, size, handle));
}

hbm_status hbm__dev_unmap(hbm_allocator *a, uintptr_t va, size_t size)
{
    CALL(a, HBM__OP_UNMAP, size, BE(a)->ops->vmm_unmap(CTX(a), a->device, va, size));
}

hbm_status hbm__dev_access(hbm_allocator *a, uintptr_t va, size_t size)
{
    if (!BE(a)->ops->vmm_access)
        return HBM_OK; /* Ascend maps with access already granted */
    CALL(a, HBM__OP_ACCESS, size, BE(a)->ops->vmm_access(CTX(a), a->device, va, size));
}

/* The runtime's stream alone: launches still in a framework's queue are not covered (with one, the callers are
 * covered by an open wait of their operation, or wait for their own copies only). */
hbm_status hbm__dev_sync(hbm_allocator *a, hbm_stream stream)
{
    if (!BE(a)->ops->stream_sync)
        return HBM_OK;
    CALL(a, HBM__OP_SYNC, 0, BE(a)->ops->stream_sync(CTX(a), a->device, stream));
}

/* Before pages of a segment are unmapped: its stream's work (PyTorch's ExpandableSegment::unmapHandles), or the
 * whole device where the framework waits for it (torch_npu's; with its queue, the operation's open wait). */
hbm_status hbm__dev_sync_unmap(hbm_allocator *a, hbm_stream stream)
{
    return BE(a)->caps.unmap_syncs_device ? hbm__dev_quiesce(a) : hbm__dev_sync(a, stream);
}

/* ---- a sleeping pool's backup: pinned host memory and copies on a stream ---- */

int hbm__dev_can_copy(const hbm_allocator *a)
{
    const hbm__backend_ops *o = BE(a)->ops;
    return BE(a)->caps.host_copies && o->host_alloc && o->host_free && o->copy_d2h && o->copy_h2d;
}

hbm_status hbm__dev_host_alloc(hbm_allocator *a, size_t size, void **out)
{
    CALL(a, HBM__OP_HOST_ALLOC, size, BE(a)->ops->host_alloc(CTX(a), a->device, size, out));
}

hbm_status hbm__dev_host_free(hbm_allocator *a, void *p, size_t size)
{
    CALL(a, HBM__OP_HOST_FREE, size, BE(a)->ops->host_free(CTX(a), a->device, p));
}

/* Queued on the runtime's `stream` (a sleep or a wake waited for the device at its start: the pool's memory is
 * used by nothing a framework's queue still holds). */
hbm_status hbm__dev_copy_d2h(hbm_allocator *a, void *dst, uintptr_t src, size_t size, hbm_stream stream)
{
    a->dev.copy_bytes += size;
    CALL(a, HBM__OP_COPY_D2H, size, BE(a)->ops->copy_d2h(CTX(a), a->device, dst, src, size, stream));
}

hbm_status hbm__dev_copy_h2d(hbm_allocator *a, uintptr_t dst, const void *src, size_t size, hbm_stream stream)
{
    a->dev.copy_bytes += size;
    CALL(a, HBM__OP_COPY_H2D, size, BE(a)->ops->copy_h2d(CTX(a), a->device, dst, src, size, stream));
}

hbm_status hbm_backend_set_host_queue(hbm_backend *b, const hbm_host_queue *q)
{
    if (!b)
        return HBM_ERR_INVALID;
    if (q)
        b->queue = *q;
    else
        memset(&b->queue, 0, sizeof b->queue);
    return HBM_OK;
}

/* Whether expandable segments can work on a device (the backend's probe, once per device). */
int hbm_backend_vmm(hbm_backend *b, int device, char *why, size_t whylen)
{
    char none[8];
    if (!why || !whylen)
        why = none, whylen = sizeof none;
    if (!b || device < 0 || device >= b->caps.device_count) {
        snprintf(why, whylen, "no such device");
        return 0;
    }
    if (!b->caps.has_vmm || !b->ops->vmm_reserve) {
        snprintf(why, whylen, "%s", b->caps.vmm_why_not[0] ? b->caps.vmm_why_not : "no virtual-memory support");
        return 0;
    }
    return b->ops->vmm_probe ? b->ops->vmm_probe(b->ctx, device, why, whylen) : 1;
}

int hbm__dev_vmm(hbm_allocator *a, char *why, size_t whylen) { return hbm_backend_vmm(BE(a), a->device, why, whylen); }

int hbm_backend_devices(const hbm_backend *b) { return b ? b->caps.device_count : 0; }

const char *hbm_backend_version(const hbm_backend *b) { return b ? b->caps.version : ""; }

hbm_status hbm_backend_get_info(const hbm_backend *b, hbm_backend_info *out)
{
    if (!b || !out)
        return HBM_ERR_INVALID;
    *out = (hbm_backend_info){.devices = b->caps.device_count,
                              .dialect = b->caps.dialect,
                              .vmm_granularity = b->caps.vmm_granularity,
                              .host_copies = b->caps.host_copies != 0};
    return HBM_OK;
}

hbm_status hbm__dev_event_create(hbm_allocator *a, uint64_t *ev)
{
    CALL(a, HBM__OP_EVENT, 0, BE(a)->ops->event_create(CTX(a), a->device, ev));
}

hbm_status hbm__dev_event_destroy(hbm_allocator *a, uint64_t ev)
{
    CALL(a, HBM__OP_EVENT, 0, BE(a)->ops->event_destroy(CTX(a), a->device, ev));
}

/* On the runtime's stream: with a framework's queue, events go through it (hbm__dev_qevent_record). */
hbm_status hbm__dev_event_record(hbm_allocator *a, uint64_t ev, hbm_stream stream)
{
    CALL(a, HBM__OP_EVENT, 0, BE(a)->ops->event_record(CTX(a), a->device, ev, stream));
}

hbm_status hbm__dev_event_sync(hbm_allocator *a, uint64_t ev)
{
    CALL(a, HBM__OP_EVSYNC, 0, BE(a)->ops->event_sync(CTX(a), a->device, ev));
}

/* 1: complete, 0: not yet, < 0: an error (message set). */
int hbm__dev_event_done(hbm_allocator *a, uint64_t ev)
{
    uint64_t t0 = begin(a, HBM__OP_QUERY);
    int rc = BE(a)->ops->event_query(CTX(a), a->device, ev);
    if (rc == HBM__BE_NOT_READY) {
        end(a, t0, HBM__OP_QUERY, 0, 0);
        return 0;
    }
    return end(a, t0, HBM__OP_QUERY, 0, rc) == HBM_OK ? 1 : -1;
}

/* ---- events in a framework queue's order (hbm_host_queue.event_*) ---- */

bool hbm__dev_queue_events(const hbm_allocator *a)
{
    const hbm_host_queue *q = &BE(a)->queue;
    return q->event_record && q->event_query && q->event_release;
}

/* 0: recorded; 1: the queue cannot record on that stream (nothing is set); -1: an error (message set). Adds to the
 * queue: never on a thread the queue runs (the caller checks hbm__dev_may_wait). */
int hbm__dev_qevent_record(hbm_allocator *a, hbm_stream stream, uint64_t *ev)
{
    const hbm_host_queue *q = &BE(a)->queue;
    void *e = NULL;
    uint64_t t0 = begin(a, HBM__OP_EVENT);
    int rc = q->event_record(q->ctx, a->device, stream, &e);
    if (rc == HBM_HOST_QUEUE_NO_STREAM) {
        end(a, t0, HBM__OP_EVENT, 0, 0);
        return 1;
    }
    if (rc != 0 || !e) {
        end(a, t0, HBM__OP_EVENT, 0, 0);
        a->dev.failed_calls++;
        hbm__set_error(a,
                       "%s device %d: recording an event in the framework's launch queue on stream 0x%llx failed "
                       "(code %d)",
                       BE(a)->ops->name, a->device, (unsigned long long)stream, rc);
        return -1;
    }
    end(a, t0, HBM__OP_EVENT, 0, 0);
    a->dev.queue_events++;
    *ev = (uint64_t)(uintptr_t)e;
    return 0;
}

/* 1: complete, 0: not yet, < 0: an error (message set). */
int hbm__dev_qevent_done(hbm_allocator *a, uint64_t ev)
{
    const hbm_host_queue *q = &BE(a)->queue;
    uint64_t t0 = begin(a, HBM__OP_QUERY);
    int rc = q->event_query(q->ctx, (void *)(uintptr_t)ev);
    end(a, t0, HBM__OP_QUERY, 0, 0);
    if (rc >= 0)
        return rc > 0;
    a->dev.failed_calls++;
    hbm__set_error(a, "%s device %d: querying an event of the framework's launch queue failed (code %d)",
                   BE(a)->ops->name, a->device, rc);
    return -1;
}

void hbm__dev_qevent_release(hbm_allocator *a, uint64_t ev)
{
    const hbm_host_queue *q = &BE(a)->queue;
    uint64_t t0 = begin(a, HBM__OP_EVENT);
    q->event_release(q->ctx, (void *)(uintptr_t)ev);
    end(a, t0, HBM__OP_EVENT, 0, 0);
}

hbm_status hbm__dev_stream_check(hbm_allocator *a, hbm_stream stream)
{
    if (!BE(a)->ops->stream_check)
        return HBM_OK;
    int rc = BE(a)->ops->stream_check(CTX(a), a->device, stream);
    if (rc == 0)
        return HBM_OK;
    hbm__set_error(a, "%s device %d: stream 0x%llx: %s (backend code %d)", BE(a)->ops->name, a->device,
                   (unsigned long long)stream, BE(a)->ops->strerror(CTX(a), rc), rc);
    return HBM_ERR_INVALID;
}
