/*
 * torch_plugin.h: what the parts of the PyTorch plug-in share (not exported):
 * torch_plugin.c (the device set, the C-compatible hooks and the helper's
 * entry points), pystack.c (Python stacks as labels) and torch_hooks.cpp (the
 * hooks whose types are C++: the throwing alloc, graph pools).
 */
#ifndef HBM_TORCH_PLUGIN_H
#define HBM_TORCH_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#include "hbmalloc.h"

#ifdef __cplusplus
extern "C" {
#endif

#define HBM_TORCH_EXPORT __attribute__((visibility("default")))

/* The framework this build serves: its words in OOM messages, its device and settings names. */
#ifdef HBM_PLUGIN_NPU
#define HBM_TORCH_DEV "NPU"
#else
#define HBM_TORCH_DEV "CUDA"
#endif

/* The allocator of a device, created on first use (NULL and a message on stderr otherwise). */
hbm_allocator *hbm_torch__allocator(int device);

/* Allocate for the framework. 0: *out set; otherwise *out is NULL and msg holds the whole error
 * text: for out of memory (return 1) PyTorch's or torch_npu's own OOM message followed by
 * hbmalloc's diagnosis; for anything else (return 2) hbmalloc's message. */
int hbm_torch__malloc(size_t size, int device, void *stream, void **out, char *msg, size_t msglen);

/* The segment holding ptr (getBaseAllocation). 0, or -1 with msg. */
int hbm_torch__base(void *ptr, void **base, size_t *size, char *msg, size_t msglen);

/* Graph pools. A torch pool id (a pair) maps to one hbmalloc private pool per device, counted as
 * torch counts its uses (begin increments, release decrements). */
int hbm_torch__pool_begin(int device, uint64_t id0, uint64_t id1, hbm_stream_filter filter, void *ctx, char *msg,
                          size_t msglen);
/* End the newest capture routing into the pool; *ctx receives its filter context (to be freed). */
int hbm_torch__pool_end(int device, uint64_t id0, uint64_t id1, void **ctx, char *msg, size_t msglen);
int hbm_torch__pool_release(int device, uint64_t id0, uint64_t id1, char *msg, size_t msglen);

/* torch_hooks.cpp: call a bool(bool) C++ function of the framework (npuSynchronizeDevice) with false, catching what it
 * throws. 0: it returned true; 1: false; 2: it threw. */
int hbm_torch__call_bool_fn(void *fn);
#ifdef HBM_PLUGIN_NPU
/* torch_npu's NPUEvent and NPUStream (torch_hooks.cpp): 1 when libtorch_npu.so exports what recording an event
 * through its task queue needs; the aclrtStream of an NPUStream given by its parts (-2: not available, -1: failed);
 * the hbm_host_queue event calls. */
int hbm_torch__npu_events_init(void *lib);
int hbm_torch__npu_stream_of(int64_t id, int device_index, int device_type, void **acl);
int hbm_torch__npu_event_record(void *ctx, int device, hbm_stream stream, void **event);
int hbm_torch__npu_event_query(void *ctx, void *event);
void hbm_torch__npu_event_release(void *ctx, void *event);
#endif

/* The helper's error text for the calling thread (hbm_torch_error()), and its setter, printf-style (torch_error.c). */
extern __thread char hbm_torch__helper_error[1600];
void hbm_torch__set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Told of a graph's private pool just made by a capture on this thread (torch_plugin.c calls it when set): set by
 * torch_sleep.c at the first pool(tag), which tags the graph's pool with the thread's pool(tag), if any, so that the
 * graph sleeps with it. A pointer, so that the plug-in's core calls nothing of the pools that sleep above it. */
extern void (*hbm_torch__graph_pool_made)(hbm_allocator *a, hbm_mempool pool);

/* pystack.c: the label of the calling allocation (0: none) and the capture switches. */
hbm_label hbm_torch__call_label(hbm_allocator *a, int device);
void hbm_torch__stacks_enable(int on);

#ifdef __cplusplus
}
#endif
#endif
