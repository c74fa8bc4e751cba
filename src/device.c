/*
 * device.c: the only caller of a backend. Counts every call, adds up the
 * time spent in device calls (the backend's cost model, or the measured wall
 * time of a real device) and turns backend codes into hbm_status values and
 * messages. Must not make policy decisions.
 */
#include <time.h>

#include "internal.h"

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

typedef struct call {
    uint64_t t0;
} call;

static void begin(hbm_allocator *a, call *c)
{
    c->t0 = a->backend->caps.modelled_cost ? 0 : now_ns();
}

static hbm_status end(hbm_allocator *a, call *c, hbm__op op, size_t size, int rc, const char *what)
{
    hbm_backend *b = a->backend;
    if (b->caps.modelled_cost && b->ops->cost_ns)
        a->dev.device_ns += b->ops->cost_ns(b->ctx, op, size);
    else if (!b->caps.modelled_cost)
        a->dev.device_ns += now_ns() - c->t0;
    if (rc == 0)
        return HBM_OK;
    a->dev.failed_calls++;
    if (rc == HBM__BE_OOM && op == HBM__OP_MALLOC)
        return HBM_ERR_OOM; /* the engine's retry chain and OOM message take it from here */
    hbm__set_error(a, "%s device %d: %s of %zu bytes failed: %s (backend code %d)", b->ops->name, a->device, what,
                   size, b->ops->strerror(b->ctx, rc), rc);
    return HBM_ERR_BACKEND;
}

hbm_status hbm__dev_malloc(hbm_allocator *a, size_t size, uintptr_t *out)
{
    call c;
    begin(a, &c);
    a->dev.malloc_calls++;
    int rc = a->backend->ops->mem_alloc(a->backend->ctx, a->device, size, out);
    return end(a, &c, HBM__OP_MALLOC, size, rc, "malloc");
}

hbm_status hbm__dev_free(hbm_allocator *a, uintptr_t ptr, size_t size)
{
    call c;
    begin(a, &c);
    a->dev.free_calls++;
    int rc = a->backend->ops->mem_free(a->backend->ctx, a->device, ptr, size);
    return end(a, &c, HBM__OP_FREE, size, rc, "free");
}

hbm_status hbm__dev_info(hbm_allocator *a, size_t *free_bytes, size_t *total_bytes)
{
    call c;
    begin(a, &c);
    a->dev.info_calls++;
    int rc = a->backend->ops->mem_info(a->backend->ctx, a->device, free_bytes, total_bytes);
    return end(a, &c, HBM__OP_INFO, 0, rc, "memory info");
}
