/*
 * mempools.c: private pools (PyTorch's MemPool and graph pools): their lifetime, and the routing of requests to them
 * by stream, thread or capture. A private pool keeps its own small and large pools; blocks never cross pools; a
 * released pool's memory returns on empty_cache once nothing of it is live. Runs with a->lock held (but the public
 * entry points, which take it).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "core/mempools.h"
#include "core/segments.h"
#include "core/sleep.h"
#include "core/expandable.h"
#include "core/device.h"
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

void hbm__mempools_teardown(hbm_allocator *a)
{
    free(a->routes);
    while (a->mempools) {
        hbm__mempool *m = a->mempools;
        a->mempools = m->next;
        hbm__sleep_free(a, m);
        hbm__expand_teardown_pool(a, &m->small);
        hbm__expand_teardown_pool(a, &m->large);
        free(m);
    }
}
