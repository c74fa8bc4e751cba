/*
 * fake_work.h: device work that completes later, for the fake runtimes
 * (fake_cuda.c, fake_acl.c; each includes it and keeps its own copy).
 *
 * What a real device does and an allocator can get wrong (docs/CONTRACTS.md,
 * "Device work"): a kernel launched on a stream runs after the launch call
 * returns; it completes in stream order, when the stream, its device or an
 * event recorded after it is synchronized, or when time passes (fw_progress).
 * An event recorded on a stream completes when the work queued on that stream
 * before the record has completed (cudaEventRecord, aclrtRecordEvent).
 * Freeing or unmapping memory that queued work still touches is a device
 * use-after-free: the fake records it as a violation (the first text kept),
 * which the tests read and fail on. So is work launched on memory that is not
 * allocated or mapped, and the first use of a block by one stream while another
 * stream's work on it is still queued (a block reused too early).
 *
 * A host-side launch queue in front of the device (torch_npu's task queue,
 * modelled by tests/fakes/fake_torch_npu.cpp) registers fw_host_busy: work it holds
 * counts as queued work on the ranges it touches.
 *
 * A copy between the device and pinned host memory (cuMemcpyDtoHAsync,
 * aclrtMemcpyAsync) is work too (fw_launch_copy): on its device range like a
 * kernel, and on its host buffer, which must not be freed while it is queued
 * (fw_host_queued). Its bytes move when it is launched: kernels here move none,
 * so the order of bytes cannot differ; what can go wrong is reported instead
 * (a copy of memory another stream's queued work still uses, a copy from
 * unmapped memory, a host buffer freed under a copy).
 *
 * Not modelled: the time work takes, the legacy default stream's implicit
 * ordering against other streams, graph replays, peer-to-peer traffic.
 */
#ifndef HBM_FAKE_WORK_H
#define HBM_FAKE_WORK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define FW_MAX 4096

typedef struct fw_item {
    int live, device;
    void *stream;
    uintptr_t lo, hi;
    uintptr_t hlo, hhi; /* a copy's host buffer (0, 0: not a copy) */
    unsigned long seq;  /* launch order, device-wide */
} fw_item;

static struct {
    fw_item items[FW_MAX];
    unsigned long seq;
    long violations, launched;
    char first[512];
    /* A host-side queue's launches not yet on the device, with fw_busy's arguments. */
    int (*host_busy)(uintptr_t lo, uintptr_t hi, int device, void *except, int use_except);
} W;

/* The calls a test asks to see, in order (fw_note; on while W.logging). */
static struct {
    int on;
    char text[16384];
    size_t n;
} L;

static void fw_note(const char *call)
{
    size_t k = strlen(call);
    if (L.on && L.n + k + 2 < sizeof L.text) {
        memcpy(L.text + L.n, call, k);
        L.n += k;
        L.text[L.n++] = ' ';
        L.text[L.n] = 0;
    }
}

static void fw_reset(void)
{
    int (*keep)(uintptr_t, uintptr_t, int, void *, int) = W.host_busy;
    memset(&W, 0, sizeof W);
    memset(&L, 0, sizeof L);
    W.host_busy = keep;
}

__attribute__((format(printf, 1, 2))) static void fw_violation(const char *fmt, ...)
{
    if (!W.violations++) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(W.first, sizeof W.first, fmt, ap);
        va_end(ap);
    }
}

/* A stream handle names one stream of one device; the null stream is each device's default stream. */
static int fw_on(const fw_item *w, int device, void *stream)
{
    return w->live && w->stream == stream && (stream || w->device == device);
}

/* Queue work on (device, stream) touching [lo, lo + size), and a copy's host buffer [hlo, hlo + size). -1: no room. */
static int fw_launch_copy(int device, void *stream, uintptr_t lo, size_t size, uintptr_t hlo)
{
    for (int i = 0; i < FW_MAX; i++)
        if (!W.items[i].live) {
            W.items[i] = (fw_item){1, device, stream, lo, lo + size, hlo, hlo ? hlo + size : 0, ++W.seq};
            W.launched++;
            return 0;
        }
    return -1;
}

static int fw_launch(int device, void *stream, uintptr_t lo, size_t size)
{
    return fw_launch_copy(device, stream, lo, size, 0);
}

/* Whether a queued copy still uses host memory [lo, hi). */
static int fw_host_queued(uintptr_t lo, uintptr_t hi)
{
    for (int i = 0; i < FW_MAX; i++)
        if (W.items[i].live && W.items[i].hlo && W.items[i].hlo < hi && lo < W.items[i].hhi)
            return 1;
    return 0;
}

/* The sequence number an event recorded now on (device, stream) waits for. */
static unsigned long fw_last_seq(int device, void *stream)
{
    unsigned long last = 0;
    for (int i = 0; i < FW_MAX; i++)
        if (fw_on(&W.items[i], device, stream) && W.items[i].seq > last)
            last = W.items[i].seq;
    return last;
}

/* Whether work of (device, stream) launched at or before `upto` is still queued. */
static int fw_pending(int device, void *stream, unsigned long upto)
{
    for (int i = 0; i < FW_MAX; i++)
        if (fw_on(&W.items[i], device, stream) && W.items[i].seq <= upto)
            return 1;
    return 0;
}

/* Stream order: completing work up to `upto` on a stream completes everything before it there. */
static void fw_complete_stream(int device, void *stream, unsigned long upto)
{
    for (int i = 0; i < FW_MAX; i++)
        if (fw_on(&W.items[i], device, stream) && W.items[i].seq <= upto)
            W.items[i].live = 0;
}

static void fw_complete_device(int device)
{
    for (int i = 0; i < FW_MAX; i++)
        if (W.items[i].live && W.items[i].device == device)
            W.items[i].live = 0;
}

/* Time passes: the n oldest pieces of work complete (each after what was before it on its stream). */
static void fw_progress(long n)
{
    for (; n > 0; n--) {
        int oldest = -1;
        for (int i = 0; i < FW_MAX; i++)
            if (W.items[i].live && (oldest < 0 || W.items[i].seq < W.items[oldest].seq))
                oldest = i;
        if (oldest < 0)
            return;
        W.items[oldest].live = 0;
    }
}

/* Queued work (on the device, or still in a host-side queue) touching [lo, hi); with `except` set, work of
 * that one stream of that device does not count (stream order protects it). */
static int fw_busy(uintptr_t lo, uintptr_t hi, int device, void *except, int use_except)
{
    for (int i = 0; i < FW_MAX; i++) {
        const fw_item *w = &W.items[i];
        if (!w->live || w->hi <= lo || hi <= w->lo)
            continue;
        if (use_except && fw_on(w, device, except))
            continue;
        return 1;
    }
    return W.host_busy && W.host_busy(lo, hi, device, except, use_except);
}

static long fw_violations(char *buf, size_t len)
{
    if (buf && len)
        snprintf(buf, len, "%s", W.first);
    return W.violations;
}

#endif /* HBM_FAKE_WORK_H */
