/*
 * sim.h: controls of the simulated device that tests and tools reach past the
 * backend table: fault rules, call counters and what is still outstanding.
 */
#ifndef HBM_SIM_H
#define HBM_SIM_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

/* A fault rule. A call matches when its kind matches (kind < 0: any) and its
 * size lies in [min_size, max_size]. With nth > 0 only the nth matching call
 * (1-based, counted from when the rule was added) fails; with nth == 0 every
 * matching call fails. code is HBM__BE_OOM or a sim error code (SIM_ERR_*). */
typedef struct hbm__sim_fault {
    int kind;
    uint64_t nth;
    size_t min_size, max_size;
    int code;
} hbm__sim_fault;

enum {
    HBM__SIM_ERR_INJECTED = 1,
    HBM__SIM_ERR_BAD_FREE = 2,
    HBM__SIM_ERR_DEVICE = 3,
    HBM__SIM_ERR_HOST = 4,
    HBM__SIM_ERR_NO_VMM = 5,
    HBM__SIM_ERR_ALIGN = 6,
    HBM__SIM_ERR_BAD_RANGE = 7,
    HBM__SIM_ERR_BAD_HANDLE = 8,
    HBM__SIM_ERR_STILL_MAPPED = 9,
    HBM__SIM_ERR_BAD_EVENT = 10,
    HBM__SIM_ERR_BAD_STREAM = 11,
    HBM__SIM_ERR_CAPTURE = 12,
    HBM__SIM_ERR_UNSUPPORTED = 13
};

typedef struct hbm__sim_counters {
    uint64_t calls[HBM__OP_KINDS]; /* every call, failed ones too */
    uint64_t injected;             /* calls failed by a fault rule */
    uint64_t live_allocations;     /* device allocations not yet freed (all devices) */
    uint64_t live_bytes;           /* bytes of live allocations and live physical handles */
    uint64_t live_reservations;    /* virtual reservations not yet freed */
    uint64_t live_handles;         /* physical handles not yet released */
    uint64_t handle_slots;         /* the handle table's size: the most handles live at once */
    uint64_t mapped_pages;         /* granularity pages mapped */
    uint64_t live_events;          /* events not yet destroyed */
    uint64_t capture_violations;   /* calls a graph capture forbids (CUDA's rules; see sim.c) */
    uint64_t live_host;            /* pinned host allocations not yet freed */
} hbm__sim_counters;

/* The sim context behind a backend opened with "sim" (NULL for other backends). */
void *hbm__sim_ctx(hbm_backend *b);
int hbm__sim_add_fault(void *ctx, const hbm__sim_fault *rule);
void hbm__sim_clear_faults(void *ctx);
void hbm__sim_get_counters(void *ctx, hbm__sim_counters *out);
int hbm__sim_is_host_backed(void *ctx);
/* Tests: change the byte at offset of the nth live pinned host allocation (host-backed only), as a stray write into
 * a sleeping pool's backup would. 0, or -1 when there is none such. */
int hbm__sim_host_scribble(void *ctx, size_t nth, size_t offset);
/* Streams: create one (needed with streams=strict); hold one (work recorded on it
 * stays incomplete until released or synchronized); count its incomplete work. */
int hbm__sim_stream_create(void *ctx, int device, hbm_stream stream);
int hbm__sim_stream_hold(void *ctx, int device, hbm_stream stream, int hold);
int hbm__sim_stream_pending(void *ctx, int device, hbm_stream stream);
/* Graph capture: mark a stream as capturing (or not); while any stream captures, the sim
 * enforces CUDA's capture rules and counts violations. */
int hbm__sim_stream_capture(void *ctx, int device, hbm_stream stream, int capturing);
/* Memory outside hbmalloc on a device, changed while the job runs (a communicator made, another process started):
 * this process's part (context) and other processes' (others). -1: no such device. */
int hbm__sim_set_outside(void *ctx, int device, size_t context, size_t others);
/* Tests: hold (1) the per-process query, as a slow NVML does, or let it go (0); returns how many queries were waiting
 * when called. */
int hbm__sim_hold_processes(void *ctx, int hold);

#endif
