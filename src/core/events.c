/*
 * events.c: frees that wait for other streams (record_stream): the per-stream event queues, the event cache, the
 * frees deferred while a graph is captured and the uses a framework's launch queue could not record yet.
 *
 * PyTorch's rules: a freed block that other streams used gets one event per such stream and becomes reusable only
 * when all have completed; queues are polled in FIFO order at the start of every malloc, each stream on its own (no
 * head-of-line blocking across streams); empty_cache and the last OOM retry wait for every event. Runs with a->lock
 * held (but hbm_record_stream, which takes it).
 *
 * Graph capture (PyTorch's beginAllocateToPool with a stream filter): while a capture routing is in force, querying
 * or synchronizing events, recording one on a capturing stream or freeing device memory would invalidate the
 * capture, so, as PyTorch does, events are not processed and a freed block that other streams used waits in
 * `deferred` (its event_count held at 1) until no capture is under way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/stats.h"
#include "core/events.h"
#include "core/segments.h"
#include "core/device.h"
#include "util/util.h"

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
    a->free_completed(a, b); /* the engine's hbm__free_block: events.c calls nothing above it */
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
 * wait there hangs the job (Ascend/pytorch v26.1.0: torch_npu/csrc/framework/OpParamMaker.cpp:614-617,
 * torch_npu/csrc/core/npu/NPUQueue.cpp:242-290, 843-871). */

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

void hbm__events_teardown(hbm_allocator *a)
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
    free(a->deferred);
}
