/*
 * policy_ops.h: the interface a policy implements (src/policy/: the arena, the plan file, the step plan). The caching
 * engine (engine.c) is PyTorch's policy, the default; an allocator with another has a->pol, and the engine calls it
 * through these pointers at the points below, and nowhere else. Core defines the interface and never names a
 * policy: a new one is a file of src/policy/ and a row of registry.c's table. Every call runs with a->lock held.
 */
#ifndef HBM_CORE_POLICY_OPS_H
#define HBM_CORE_POLICY_OPS_H

#include "core/types.h"

typedef struct hbm__policy_ops {
    const char *name;
    /* Serve a request: a rounded request of `size` on `stream` for the default pools. Returns a free block of the
     * region (a->region) that serves it, or NULL for the caching engine's path. *note: a nonzero note, and the
     * block that serves the request, whatever serves it, carries it (b->note, opaque to core) until it is freed. */
    hbm__block *(*serve)(hbm_allocator *a, hbm_stream stream, size_t size, uint64_t *note);
    /* Note a free: a block that carries a note is freed (hbm_free, before its memory is given back). May be NULL
     * when serve never notes. */
    void (*freed)(hbm_allocator *a, hbm__block *b);
    /* The device is full after the engine's retries: a free block of the region for the request, or NULL. May be
     * NULL. */
    hbm__block *(*rescue)(hbm_allocator *a, hbm_stream stream, size_t size);
    /* hbm_step: a training step ends (may be NULL). */
    hbm_status (*step)(hbm_allocator *a);
    /* Statistics: the policy's figures into st (hbm_get_stats: plan_height); *positions, the plan in force's
     * (hbm_memory_usage). */
    void (*stats)(hbm_allocator *a, hbm_stats *st, size_t *positions);
    /* Validate: the policy's invariants (hbm_check), each broken one to fail(ck). */
    void (*validate)(hbm_allocator *a, void (*fail)(void *ck, const char *what), void *ck);
    /* Retire and tear down (hbm_destroy): everything the policy holds freed, a->pol with it; the region's segment
     * goes with the others. */
    void (*teardown)(hbm_allocator *a);
} hbm__policy_ops;

/* The start of every policy's state: a->pol points at it. */
typedef struct hbm__policy {
    const hbm__policy_ops *ops;
} hbm__policy;

#endif
