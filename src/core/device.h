/* device.h: the device door (device.c), the only caller of a backend: every device call the library makes. */
#ifndef HBM_BACKEND_DEVICE_H
#define HBM_BACKEND_DEVICE_H

#include "core/stats.h"
#include "core/types.h"

hbm_status hbm__dev_malloc(hbm_allocator *a, size_t size, uintptr_t *out);
int hbm__dev_malloc_raw(hbm_allocator *a, size_t size, uintptr_t *out, uint64_t *t0);
hbm_status hbm__dev_malloc_done(hbm_allocator *a, size_t size, int rc, uint64_t t0);
hbm_status hbm__dev_free(hbm_allocator *a, uintptr_t ptr, size_t size);
hbm_status hbm__dev_info(hbm_allocator *a, size_t *free_bytes, size_t *total_bytes);
/* The same query, counted and timed, but a failure leaves no message: a->err is untouched (callers for whom a failed
 * query is an unknown figure: outside.c, from the published record's refresher too, which must not write what a
 * public call of the job's thread may be reading or writing). */
hbm_status hbm__dev_info_quiet(hbm_allocator *a, size_t *free_bytes, size_t *total_bytes);
hbm_status hbm__dev_reserve(hbm_allocator *a, size_t size, uintptr_t *va);
hbm_status hbm__dev_unreserve(hbm_allocator *a, uintptr_t va, size_t size);
hbm_status hbm__dev_create(hbm_allocator *a, size_t size, uint64_t *handle);
hbm_status hbm__dev_release(hbm_allocator *a, uint64_t handle);
hbm_status hbm__dev_map(hbm_allocator *a, uintptr_t va, size_t size, uint64_t handle);
hbm_status hbm__dev_unmap(hbm_allocator *a, uintptr_t va, size_t size);
hbm_status hbm__dev_access(hbm_allocator *a, uintptr_t va, size_t size);
hbm_status hbm__dev_sync(hbm_allocator *a, hbm_stream stream);
/* Wait for all the device's work before memory goes back to it (holds until the next free). With a framework's
 * queue this locked form never waits: an error unless an open wait since the last free holds (docs/CONTRACTS.md). */
hbm_status hbm__dev_quiesce(hbm_allocator *a);
/* The same at a safe point (no decision read across it): a framework's queue is waited for with the lock released;
 * it settles the unrecorded uses (events.c) added before it began. */
hbm_status hbm__dev_quiesce_open(hbm_allocator *a);
/* Whether the last wait still holds (memory may go back without one). */
bool hbm__dev_quiet(const hbm_allocator *a);
/* 0 on a thread a framework's queue runs itself (its worker, its release thread): nothing may wait or enqueue there. */
int hbm__dev_may_wait(const hbm_allocator *a);
/* Events recorded in a framework queue's order (hbm_host_queue.event_*): whether the queue offers them, and the
 * calls (record: 0 recorded, 1 a stream the queue does not know, -1 an error). */
bool hbm__dev_queue_events(const hbm_allocator *a);
int hbm__dev_qevent_record(hbm_allocator *a, hbm_stream stream, uint64_t *ev);
int hbm__dev_qevent_done(hbm_allocator *a, uint64_t ev);
void hbm__dev_qevent_release(hbm_allocator *a, uint64_t ev);
/* The backend's name ("sim", "cuda", "acl") and capabilities, for messages and decisions: read here, as every
 * other thing about the device (core names the backend nowhere else). */
static inline const char *hbm__dev_name(const hbm_allocator *a) { return a->backend->ops->name; }
static inline const hbm__backend_caps *hbm__dev_caps(const hbm_allocator *a) { return &a->backend->caps; }
/* Changes whenever a block is freed (never 0): every hbm_free counts in allocation[ALL].freed, which only
 * hbm_reset_accumulated_stats sets back, and that counts in stat_resets. */
static inline uint64_t hbm__free_stamp(const hbm_allocator *a)
{
    return ((uint64_t)hbm__stats_frees(&a->stats) ^ (a->stat_resets << 40)) + 1;
}

/* A framework's launch queue sits in front of the device (hbm_backend_set_host_queue). */
static inline bool hbm__framework_queue(const hbm_allocator *a)
{
    return a->backend->queue.flush || a->backend->queue.sync_device;
}
/* A sleeping pool's backup (sleep.c): whether the backend has pinned host memory and copies; the calls. */
int hbm__dev_can_copy(const hbm_allocator *a);
hbm_status hbm__dev_host_alloc(hbm_allocator *a, size_t size, void **out);
hbm_status hbm__dev_host_free(hbm_allocator *a, void *p, size_t size);
hbm_status hbm__dev_copy_d2h(hbm_allocator *a, void *dst, uintptr_t src, size_t size, hbm_stream stream);
hbm_status hbm__dev_copy_h2d(hbm_allocator *a, uintptr_t dst, const void *src, size_t size, hbm_stream stream);
/* Before unmapping pages of a segment on `stream`: that stream, or the device where the runtime needs it. */
hbm_status hbm__dev_sync_unmap(hbm_allocator *a, hbm_stream stream);
/* Whether expandable segments work on a's device; 0 with the reason. */
int hbm__dev_vmm(hbm_allocator *a, char *why, size_t whylen);
hbm_status hbm__dev_event_create(hbm_allocator *a, uint64_t *ev);
hbm_status hbm__dev_event_destroy(hbm_allocator *a, uint64_t ev);
hbm_status hbm__dev_event_record(hbm_allocator *a, uint64_t ev, hbm_stream stream);
hbm_status hbm__dev_event_sync(hbm_allocator *a, uint64_t ev);
int hbm__dev_event_done(hbm_allocator *a, uint64_t ev);
hbm_status hbm__dev_stream_check(hbm_allocator *a, hbm_stream stream);

#endif
