/*
 * streams.c: event-deferred frees (record_stream) and private pools.
 *
 * Owns the per-stream event queues, the event cache, routing of requests to
 * private pools, and their lifetime. PyTorch's rules: a freed block that
 * other streams used gets one event per such stream and becomes reusable
 * only when all have completed; queues are polled in FIFO order at the start
 * of every malloc, each stream on its own (no head-of-line blocking across
 * streams); empty_cache and the last OOM retry wait for every event.
 * A private pool keeps its own small and large pools; blocks never cross
 * pools; a released pool's memory returns on empty_cache once nothing of it
 * is live. Runs with a->lock held (except the public entry points, which
 * take it).
 *
 * Graph capture (PyTorch's beginAllocateToPool with a stream filter): while
 * a capture routing is in force, querying or synchronizing events, recording
 * one on a capturing stream or freeing device memory would invalidate the
 * capture, so, as PyTorch does, events are not processed and a freed block
 * that other streams used waits in `deferred` (its event_count held at 1)
 * until no capture is under way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/stats.h"
#include "core/segments.h"
#include "core/streams.h"
#include "core/sleep.h"
#include "core/expandable.h"
#include "core/device.h"
#include "core/pool.h"
#include "util/util.h"

/* ---- routing ---- */

hbm__pool *hbm__route_pool(hbm_allocator *a, size_t size, hbm_stream stream)
{
    bool small = size <= HBM__SMALL_SIZE;
    if (a->nroutes) {
        pthread_t self = pthread_self();
        for (size_t i = a->nroutes; i-- > 0;) {
            hbm__route *r = &a->routes[i];
            bool match = r->kind == HBM__ROUTE_THREAD   ? pthread_equal(r->thread, self)
                         : r->kind == HBM__ROUTE_STREAM ? r->stream == stream
                                                        : r->filter(r->filter_ctx, stream) != 0;
            if (match)
                return small ? &r->mp->small : &r->mp->large;
        }
    }
    return small ? &a->small : &a->large;
}

/* ---- events ---- */

static hbm__event_queue *queue_for(hbm_allocator *a, hbm_stream stream)
{
    for (size_t i = 0; i < a->nqueues; i++)
        if (a->queues[i].stream == stream)
            return &a->queues[i];
    if (hbm__grow((void **)&a->queues, &a->cap_queues, a->nqueues + 1, sizeof *a->queues))
        return NULL;
    hbm__event_queue *q = &a->queues[a->nqueues++];
    memset(q, 0, sizeof *q);
    q->stream = stream;
    return q;
}

static int queue_push(hbm__event_queue *q, uint64_t ev, hbm__block *b, bool queued)
{
    if (q->n == q->cap) {
        size_t cap = q->cap ? q->cap * 2 : 16;
        void *items = malloc(cap * sizeof *q->items);
        if (!items)
            return -1;
        for (size_t i = 0; i < q->n; i++)
            memcpy((char *)items + i * sizeof *q->items, &q->items[(q->head + i) % q->cap], sizeof *q->items);
        free(q->items);
        q->items = items;
        q->head = 0;
        q->cap = cap;
    }
    size_t at = (q->head + q->n++) % q->cap;
    q->items[at].event = ev;
    q->items[at].block = b;
    q->items[at].queued = queued;
    return 0;
}

static void queue_pop(hbm__event_queue *q)
{
    q->head = (q->head + 1) % q->cap;
    q->n--;
}

/* An event to record: a cached one, else a new one (PyTorch pools them: creating is slow). */
static hbm_status event_get(hbm_allocator *a, uint64_t *ev)
{
    if (a->nspare_events) {
        *ev = a->spare_events[--a->nspare_events];
        return HBM_OK;
    }
    return hbm__dev_event_create(a, ev);
}

static void event_put(hbm_allocator *a, uint64_t ev)
{
    if (hbm__grow((void **)&a->spare_events, &a->cap_spare_events, a->nspare_events + 1, sizeof *a->spare_events)) {
        hbm__dev_event_destroy(a, ev);
        return;
    }
    a->spare_events[a->nspare_events++] = ev;
}

/* A block freed while other streams used it, whose last event completed: no longer active, free again. */
static void pending_done(hbm_allocator *a, hbm__block *b)
{
    hbm__pend_add(a, b->seg->pool, (int64_t)b->size, -1);
    hbm__free_block(a, b);
}

hbm_status hbm__insert_events(hbm_allocator *a, hbm__block *b)
{
    hbm_status first_error = HBM_OK;
    hbm__uses *u = b->uses;
    b->uses = NULL; /* PyTorch moves stream_uses out here */
    for (uint32_t i = 0; i < u->n; i++) {
        hbm_stream s = u->s[i];
        hbm__event_queue *q = queue_for(a, s);
        uint64_t ev;
        hbm_status rc = q ? event_get(a, &ev) : HBM_ERR_NOMEM;
        if (rc == HBM_OK && (rc = hbm__dev_event_record(a, ev, s)) != HBM_OK)
            event_put(a, ev);
        if (rc == HBM_OK && queue_push(q, ev, b, false) == 0) {
            b->event_count++;
            a->pending_events++;
            continue;
        }
        /* No event: wait for the stream instead, so the block is still safe to reuse. */
        hbm_status sync = hbm__dev_sync(a, s);
        if (first_error == HBM_OK)
            first_error = sync != HBM_OK ? sync : HBM_OK;
    }
    free(u);
    if (b->event_count == 0)
        pending_done(a, b);
    return first_error;
}

static void complete_one(hbm_allocator *a, hbm__event_queue *q)
{
    uint64_t ev = q->items[q->head].event;
    hbm__block *b = q->items[q->head].block;
    bool queued = q->items[q->head].queued;
    queue_pop(q);
    a->pending_events--;
    if (queued)
        hbm__dev_qevent_release(a, ev);
    else
        event_put(a, ev);
    if (--b->event_count == 0)
        pending_done(a, b);
}

/* ---- with a framework's launch queue (docs/CONTRACTS.md, "Waiting with the lock open") ----
 *
 * A launch the framework queued before a free may not be on the device's streams yet: an event recorded on the
 * runtime's stream would complete before it. torch_npu's own allocator records such events through its queue
 * (NPUCachingAllocator.cpp insert_events -> NPUEvent::record -> LaunchRecordEventTask), and so does hbmalloc when the
 * queue offers it (hbm_host_queue.event_record): a free then waits for nothing. Where it cannot (a thread the queue
 * runs itself, which must not add to it; a stream the queue does not know; no host memory), the use is held
 * unrecorded: recorded by a later operation on another thread, or complete once a device-wide wait that began after
 * it has ended (hbm__settle_unrecorded). No free waits for the queue: torch_npu frees on its release thread, and a
 * wait there hangs the job (DEVICE_APIS: OpParamMaker.cpp v26.1.0:614-617, NPUQueue.cpp 242-290, 843-871). */

/* One use recorded in the queue's order: 0, or 1 when it was not (unknown stream, an error, no host memory). */
static int queue_use(hbm_allocator *a, hbm__block *b, hbm_stream s)
{
    hbm__event_queue *q = queue_for(a, s);
    uint64_t ev;
    if (!q || hbm__dev_qevent_record(a, s, &ev) != 0)
        return 1;
    if (queue_push(q, ev, b, true)) {
        hbm__dev_qevent_release(a, ev);
        return 1;
    }
    b->event_count++;
    a->pending_events++;
    return 0;
}

static hbm_status unrecorded_add(hbm_allocator *a, hbm__block *b, hbm_stream s, bool retry)
{
    if (hbm__grow((void **)&a->unrec, &a->cap_unrec, a->nunrec + 1, sizeof *a->unrec)) {
        /* Cannot even remember it: the block stays out of use for good rather than risk reuse. */
        b->event_count++;
        a->nstuck++;
        hbm__set_error(a, "out of host memory for allocator bookkeeping: a block freed while another stream used it "
                          "stays unused");
        return HBM_ERR_NOMEM;
    }
    a->unrec[a->nunrec++] = (struct hbm__unrecorded){b, s, ++a->unrec_seq, retry};
    b->event_count++;
    a->pending_events++;
    a->dev.unrecorded_uses++;
    return HBM_OK;
}

static void unrecorded_drop(hbm_allocator *a, size_t i)
{
    hbm__block *b = a->unrec[i].block;
    a->unrec[i] = a->unrec[--a->nunrec];
    a->pending_events--;
    if (--b->event_count == 0)
        pending_done(a, b);
}

static hbm_status queue_free(hbm_allocator *a, hbm__block *b)
{
    hbm_status rc = HBM_OK;
    bool events = hbm__dev_queue_events(a), can = events && hbm__dev_may_wait(a);
    hbm__uses *u = b->uses;
    b->uses = NULL;
    b->event_count++; /* held while its uses are added: none completes it early */
    for (uint32_t i = 0; i < u->n; i++) {
        if (can && queue_use(a, b, u->s[i]) == 0)
            continue;
        hbm_status r = unrecorded_add(a, b, u->s[i], events && !can);
        rc = rc == HBM_OK ? r : rc;
    }
    free(u);
    if (--b->event_count == 0)
        pending_done(a, b);
    return rc;
}

/* Uses held for the thread they were freed on, recorded now in the queue's order where it can be (on a thread that
 * may add to the queue); those the queue could not record (an unknown stream) wait for a device-wide wait. */
static void record_unrecorded(hbm_allocator *a)
{
    if (!hbm__dev_queue_events(a) || !hbm__dev_may_wait(a))
        return;
    for (size_t i = a->nunrec; i-- > 0;) {
        if (!a->unrec[i].retry)
            continue;
        a->unrec[i].retry = false; /* once: a failure here is the stream's */
        if (queue_use(a, a->unrec[i].block, a->unrec[i].stream) == 0)
            unrecorded_drop(a, i); /* the block keeps the event just recorded */
    }
}

void hbm__settle_unrecorded(hbm_allocator *a, uint64_t seq)
{
    for (size_t i = a->nunrec; i-- > 0;)
        if (a->unrec[i].seq <= seq)
            unrecorded_drop(a, i);
}

hbm_status hbm__free_with_uses(hbm_allocator *a, hbm__block *b)
{
    if (a->ncaptures == 0)
        return hbm__framework_queue(a) ? queue_free(a, b) : hbm__insert_events(a, b);
    if (hbm__grow((void **)&a->deferred, &a->cap_deferred, a->ndeferred + 1, sizeof *a->deferred)) {
        /* Cannot even remember it: keep the block out of use for good rather than risk reuse. */
        hbm__set_error(a, "out of host memory for allocator bookkeeping: a block freed during graph capture "
                          "stays unused");
        b->event_count = 1;
        a->nstuck++;
        return HBM_ERR_NOMEM;
    }
    b->event_count = 1; /* stands for the end of the capture */
    a->pending_events++;
    a->deferred[a->ndeferred++] = b;
    return HBM_OK;
}

/* insert_events_deferred_until_no_capture */
static void insert_deferred(hbm_allocator *a)
{
    size_t n = a->ndeferred;
    a->ndeferred = 0;
    a->pending_events -= n;
    for (size_t i = 0; i < n; i++) {
        hbm__block *b = a->deferred[i];
        b->event_count = 0;
        if (hbm__framework_queue(a))
            queue_free(a, b);
        else
            hbm__insert_events(a, b);
    }
}

void hbm__process_events(hbm_allocator *a)
{
    if (a->ncaptures)
        return; /* event queries are illegal during capture */
    if (a->ndeferred)
        insert_deferred(a);
    if (a->nunrec)
        record_unrecorded(a);
    if (a->pending_events == 0)
        return;
    for (size_t i = 0; i < a->nqueues;) {
        hbm__event_queue *q = &a->queues[i];
        while (q->n) {
            uint64_t ev = q->items[q->head].event;
            int done = q->items[q->head].queued ? hbm__dev_qevent_done(a, ev) : hbm__dev_event_done(a, ev);
            if (done != 1)
                break; /* not yet (or the query failed: retried at the next malloc) */
            complete_one(a, q);
        }
        if (q->n) {
            i++;
            continue;
        }
        /* Empty: erased, as PyTorch erases an empty stream's deque, so that a malloc polls only the streams with
         * events outstanding (a replay gives each pending free a stream of its own). */
        free(q->items);
        a->queues[i] = a->queues[--a->nqueues];
    }
}

/* Every event waited for. Those of a framework's queue have no wait of their own: the caller waited for the device
 * (hbm__dev_quiesce_open, which settles the unrecorded uses too), after which they report complete; one that does
 * not stays pending. */
hbm_status hbm__sync_events(hbm_allocator *a)
{
    hbm_status rc = HBM_OK;
    a->stats.num_sync_all_streams++;
    if (a->ndeferred)
        insert_deferred(a); /* callers run only outside captures */
    for (size_t i = 0; i < a->nqueues && rc == HBM_OK; i++) {
        hbm__event_queue *q = &a->queues[i];
        while (q->n && rc == HBM_OK) {
            uint64_t ev = q->items[q->head].event;
            if (q->items[q->head].queued) {
                int done = hbm__dev_qevent_done(a, ev);
                if (done != 1) {
                    rc = done < 0 ? HBM_ERR_BACKEND : HBM_OK;
                    break;
                }
            } else if ((rc = hbm__dev_event_sync(a, ev)) != HBM_OK) {
                break;
            }
            complete_one(a, q);
        }
    }
    return rc;
}

hbm_status hbm_record_stream(hbm_allocator *a, void *ptr, hbm_stream stream)
{
    if (!a)
        return HBM_ERR_INVALID;
    if (!ptr)
        return HBM_OK; /* PyTorch ignores null data pointers */
    hbm__lock(a);
    hbm_status rc = HBM_OK;
    hbm__block *b = hbm__ptrmap_get(&a->live, (uintptr_t)ptr);
    if (!b) {
        hbm__segment *seg = hbm__segment_find(a, (uintptr_t)ptr);
        hbm__set_error(a,
                       seg ? "hbm_record_stream(%p): pointer is not a live block (freed, or inside a block); "
                             "nothing was changed"
                           : "hbm_record_stream(%p): pointer was not allocated by this allocator; nothing was "
                             "changed",
                       ptr);
        rc = seg ? HBM_ERR_INVALID : HBM_ERR_FOREIGN_PTR;
    } else if (stream != b->stream) {
        hbm__uses *u = b->uses;
        uint32_t i = 0, n = u ? u->n : 0;
        while (i < n && u->s[i] != stream)
            i++;
        if (i == n && (rc = hbm__dev_stream_check(a, stream)) == HBM_OK) {
            if (!u || u->n == u->cap) {
                uint32_t cap = u ? u->cap * 2 : 2;
                hbm__uses *g = realloc(u, sizeof *g + cap * sizeof *g->s);
                if (!g) {
                    hbm__set_error(a, "out of host memory for allocator bookkeeping");
                    rc = HBM_ERR_NOMEM;
                } else {
                    g->n = n;
                    g->cap = cap;
                    b->uses = u = g;
                }
            }
            if (rc == HBM_OK)
                u->s[u->n++] = stream;
        }
    }
    hbm__unlock(a);
    return rc;
}

/* ---- private pools ---- */

hbm__mempool *hbm__mempool_find(hbm_allocator *a, hbm_mempool id)
{
    for (hbm__mempool *m = a->mempools; m; m = m->next)
        if (m->id == id)
            return m;
    return NULL;
}

/* A pool still held by someone, or NULL with the error set. */
static hbm__mempool *mempool_held(hbm_allocator *a, hbm_mempool id)
{
    hbm__mempool *m = hbm__mempool_find(a, id);
    if (!m || m->use_count == 0) {
        hbm__set_error(a, "private pool %llu does not exist (or was released already)", (unsigned long long)id);
        return NULL;
    }
    return m;
}

/* Live (allocated or pending) blocks and reserved bytes of a private pool's segments. */
static void mempool_usage(hbm_allocator *a, const hbm__mempool *m, size_t *live, size_t *reserved, size_t *segments)
{
    *live = *reserved = *segments = 0;
    for (hbm__segment *s = hbm__segments_first(a); s; s = hbm__segments_next(s)) {
        if (s->pool != &m->small && s->pool != &m->large)
            continue;
        (*segments)++;
        *reserved += s->expandable ? s->mapped_pages * s->page : s->size; /* a sleeping pool's pages are not */
        for (hbm__block *b = s->head; b; b = b->next)
            *live += b->allocated || b->event_count > 0;
    }
}

hbm_status hbm_mempool_create(hbm_allocator *a, hbm_mempool *out)
{
    if (!a || !out)
        return HBM_ERR_INVALID;
    hbm__mempool *m = calloc(1, sizeof *m);
    if (!m)
        return HBM_ERR_NOMEM;
    hbm__lock(a);
    m->id = ++a->next_mempool_id;
    m->small.is_small = true;
    m->small.sibling = &m->large;
    m->large.sibling = &m->small;
    m->small.owner = m->large.owner = m;
    m->use_count = 1;
    m->next = a->mempools;
    a->mempools = m;
    *out = m->id;
    hbm__unlock(a);
    return HBM_OK;
}

static hbm_status begin_route(hbm_allocator *a, hbm_mempool id, hbm__route r)
{
    if (!a)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm__mempool *m = mempool_held(a, id);
    hbm_status rc = m ? HBM_OK : HBM_ERR_INVALID;
    /* Several captures may share a pool (graphs sharing a memory pool); a stream or thread routing is one. */
    for (size_t i = 0; rc == HBM_OK && r.kind != HBM__ROUTE_CAPTURE && i < a->nroutes; i++)
        if (a->routes[i].mp == m) {
            hbm__set_error(a, "private pool %llu: already routing allocations to it (end it first)",
                           (unsigned long long)id);
            rc = HBM_ERR_INVALID;
        }
    if (rc == HBM_OK && r.kind == HBM__ROUTE_STREAM)
        rc = hbm__dev_stream_check(a, r.stream);
    if (rc == HBM_OK && hbm__grow((void **)&a->routes, &a->cap_routes, a->nroutes + 1, sizeof *a->routes))
        rc = HBM_ERR_NOMEM;
    if (rc == HBM_OK) {
        r.mp = m;
        r.thread = pthread_self();
        a->routes[a->nroutes++] = r;
        a->ncaptures += r.kind == HBM__ROUTE_CAPTURE;
        m->use_count++;
    }
    hbm__unlock(a);
    return rc;
}

hbm_status hbm_mempool_begin_stream(hbm_allocator *a, hbm_mempool p, hbm_stream stream)
{
    return begin_route(a, p, (hbm__route){.kind = HBM__ROUTE_STREAM, .stream = stream});
}

hbm_status hbm_mempool_begin_thread(hbm_allocator *a, hbm_mempool p)
{
    return begin_route(a, p, (hbm__route){.kind = HBM__ROUTE_THREAD});
}

hbm_status hbm_mempool_begin_capture(hbm_allocator *a, hbm_mempool p, hbm_stream_filter filter, void *ctx)
{
    if (!filter)
        return HBM_ERR_INVALID;
    return begin_route(a, p, (hbm__route){.kind = HBM__ROUTE_CAPTURE, .filter = filter, .filter_ctx = ctx});
}

int hbm_captures_underway(hbm_allocator *a)
{
    if (!a)
        return 0;
    hbm__lock(a);
    int n = (int)a->ncaptures;
    hbm__unlock(a);
    return n;
}

hbm_status hbm_mempool_end(hbm_allocator *a, hbm_mempool id)
{
    if (!a)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc = HBM_ERR_INVALID;
    for (size_t i = a->nroutes; i-- > 0;)
        if (a->routes[i].mp->id == id) {
            a->routes[i].mp->use_count--;
            a->ncaptures -= a->routes[i].kind == HBM__ROUTE_CAPTURE;
            memmove(&a->routes[i], &a->routes[i + 1], (a->nroutes - i - 1) * sizeof *a->routes);
            a->nroutes--;
            rc = HBM_OK;
            break;
        }
    if (rc != HBM_OK)
        hbm__set_error(a, "private pool %llu: not routing allocations to it", (unsigned long long)id);
    hbm__unlock(a);
    return rc;
}

hbm_status hbm_mempool_release(hbm_allocator *a, hbm_mempool id)
{
    if (!a)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc = HBM_OK;
    hbm__mempool *m = mempool_held(a, id);
    if (!m) {
        rc = HBM_ERR_INVALID;
    } else {
        m->use_count--;
        size_t live, reserved, segments;
        mempool_usage(a, m, &live, &reserved, &segments);
        if (live) {
            hbm__set_error(a,
                           "private pool %llu released with %zu live block%s: it is kept until they are freed, "
                           "and its memory returns on the next empty_cache after that",
                           (unsigned long long)id, live, live == 1 ? "" : "s");
            rc = HBM_ERR_POOL_BUSY;
        }
    }
    hbm__unlock(a);
    return rc;
}

hbm_status hbm_mempool_trim(hbm_allocator *a, hbm_mempool id)
{
    if (!a)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc = HBM_OK;
    hbm__mempool *m = mempool_held(a, id);
    if (!m) {
        rc = HBM_ERR_INVALID;
    } else if (a->ncaptures) {
        hbm__set_error(a, "hbm_mempool_trim during a graph capture: nothing was released (returning memory "
                          "synchronizes the device)");
        rc = HBM_ERR_CAPTURE;
    } else if (m->sleep_state == HBM_POOL_FALLING_ASLEEP || m->sleep_state == HBM_POOL_WAKING) {
        rc = hbm__sleep_refuse(a, m); /* its sleep or wake gives back what it holds */
    } else {
        m->use_count++; /* kept while the lock may open */
        if ((rc = hbm__dev_quiesce_open(a)) == HBM_OK) {
            /* Decided again after the wait: a capture, a sleep or a wake may have begun while the lock was open. */
            if (a->ncaptures) {
                hbm__set_error(a, "hbm_mempool_trim: a graph capture began while it waited for the device: nothing "
                                  "was released");
                rc = HBM_ERR_CAPTURE;
            } else if (m->sleep_state == HBM_POOL_FALLING_ASLEEP || m->sleep_state == HBM_POOL_WAKING) {
                rc = hbm__sleep_refuse(a, m);
            } else {
                hbm_status rl = hbm__release_pool(a, &m->large), rs = hbm__release_pool(a, &m->small);
                rc = rl != HBM_OK ? rl : rs;
            }
        }
        m->use_count--;
    }
    hbm__unlock(a);
    return rc;
}

size_t hbm_mempool_reserved(hbm_allocator *a, hbm_mempool id)
{
    if (!a)
        return 0;
    hbm__lock(a);
    size_t live = 0, reserved = 0, segments = 0;
    hbm__mempool *m = hbm__mempool_find(a, id);
    if (m)
        mempool_usage(a, m, &live, &reserved, &segments);
    hbm__unlock(a);
    return reserved;
}

hbm_status hbm__release_mempools(hbm_allocator *a)
{
    hbm_status first_error = HBM_OK;
    for (hbm__mempool **link = &a->mempools; *link;) {
        hbm__mempool *m = *link;
        if (m->use_count > 0) {
            link = &m->next;
            continue;
        }
        hbm_status rl = hbm__release_pool(a, &m->large), rs = hbm__release_pool(a, &m->small);
        if (first_error == HBM_OK)
            first_error = rl != HBM_OK ? rl : rs;
        size_t live, reserved, segments;
        mempool_usage(a, m, &live, &reserved, &segments);
        if (segments == 0) {
            *link = m->next;
            hbm__sleep_free(a, m);
            hbm__expand_teardown_pool(a, &m->small);
            hbm__expand_teardown_pool(a, &m->large);
            free(m);
        } else {
            link = &m->next;
        }
    }
    return first_error;
}

void hbm__stream_teardown(hbm_allocator *a)
{
    for (size_t i = 0; i < a->nqueues; i++) {
        hbm__event_queue *q = &a->queues[i];
        for (size_t k = 0; k < q->n; k++) {
            size_t at = (q->head + k) % q->cap;
            if (q->items[at].queued)
                hbm__dev_qevent_release(a, q->items[at].event);
            else
                hbm__dev_event_destroy(a, q->items[at].event);
        }
        free(q->items);
    }
    free(a->queues);
    free(a->unrec);
    for (size_t i = 0; i < a->nspare_events; i++)
        hbm__dev_event_destroy(a, a->spare_events[i]);
    free(a->spare_events);
    free(a->routes);
    free(a->deferred);
    while (a->mempools) {
        hbm__mempool *m = a->mempools;
        a->mempools = m->next;
        hbm__sleep_free(a, m);
        hbm__expand_teardown_pool(a, &m->small);
        hbm__expand_teardown_pool(a, &m->large);
        free(m);
    }
}
