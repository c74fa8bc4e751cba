/*
 * outside.c: device memory hbmalloc does not hold (hbm_outside_get, docs/MONITOR.md "Memory outside the
 * allocator"), in figures and in one sentence.
 *
 * A job's memory failures between ranks are mostly about memory no caching allocator sees: the runtime's context,
 * NCCL's or HCCL's buffers (per communicator, made while the job runs), other processes on the device. The device's
 * used bytes as its runtime counts them, less hbmalloc's reserved bytes, is all of it; where the runtime also counts
 * memory per process (the backend's proc_mem: NVML on CUDA), it is split into this process's part and the others'.
 *
 * The device query goes through the door (hbm__dev_info) under the allocator's lock, counted as every device call
 * is (hbm_get_device_counters' info calls). The per-process query does not touch the allocator: hbm_outside_get and
 * the published record's refresh make it without the lock (NVML can take milliseconds); an OOM's message and a
 * sleep's or wake's note make it under the lock they hold, as PyTorch asks NVML under its allocator's lock at an OOM
 * (CUDACachingAllocator.cpp malloc: reportProcessMemoryInfo before lock.unlock()). Reads only: no pool, block or
 * PyTorch statistic changes, and a failed query leaves the caller's last error as it was.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/device.h"
#include "core/outside.h"
#include "core/types.h"
#include "util/util.h"

#define PROCS 256 /* processes read per query; more and the others' sum is unknown */

void hbm__outside_device(hbm_allocator *a, hbm_outside *o)
{
    memset(o, 0, sizeof *o);
    o->device = a->device;
    size_t dev_free = 0, dev_total = 0;
    bool known = hbm__dev_info_quiet(a, &dev_free, &dev_total) == HBM_OK;
    o->reserved = a->stats.reserved_bytes[HBM_POOL_ALL].current;
    o->device_total = (int64_t)(known ? dev_total : a->device_total);
    o->device_used = o->outside = -1;
    if (known) {
        uint64_t used = dev_total > dev_free ? dev_total - dev_free : 0;
        o->device_used = (int64_t)used;
        o->outside = (int64_t)used > o->reserved ? (int64_t)used - o->reserved : 0;
    }
    o->process_bytes = o->process_outside = o->others = -1;
}

void hbm__outside_processes(hbm_allocator *a, hbm_outside *o)
{
    const hbm__backend_ops *ops = a->backend->ops;
    hbm__proc_use p[PROCS];
    size_t n = 0;
    if (!ops->proc_mem || ops->proc_mem(a->backend->ctx, a->device, p, PROCS, &n))
        return;
    o->nprocs = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
    size_t have = n < PROCS ? n : PROCS;
    int64_t me = (int64_t)getpid();
    uint64_t mine = 0, others = 0;
    bool mine_known = true, others_known = n <= PROCS; /* past PROCS, the others' sum misses some */
    for (size_t i = 0; i < have; i++) {
        bool known = p[i].bytes != HBM__PROC_UNKNOWN;
        if (p[i].pid == me) {
            o->self_listed = 1;
            mine_known &= known;
            mine += known ? p[i].bytes : 0;
        } else {
            others_known &= known;
            others += known ? p[i].bytes : 0;
        }
    }
    size_t k = 0; /* the measured ones, largest first: insertion sort of a few entries */
    for (size_t i = 0; i < have; i++)
        if (p[i].bytes != HBM__PROC_UNKNOWN)
            p[k++] = p[i];
    for (size_t i = 1; i < k; i++)
        for (size_t j = i; j > 0 && p[j].bytes > p[j - 1].bytes; j--) {
            hbm__proc_use x = p[j];
            p[j] = p[j - 1];
            p[j - 1] = x;
        }
    for (size_t i = 0; i < k && i < HBM_OUTSIDE_PROCS; i++) {
        o->procs[i].pid = p[i].pid;
        o->procs[i].bytes = p[i].bytes;
    }
    if (!o->self_listed) /* not in the runtime's list (another PID namespace's): no split */
        return;
    if (mine_known) {
        o->process_bytes = (int64_t)mine;
        o->process_outside = o->process_bytes > o->reserved ? o->process_bytes - o->reserved : 0;
    }
    o->others = others_known ? (int64_t)others : -1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

hbm_status hbm_outside_get(hbm_allocator *a, hbm_outside *out)
{
    if (!a || !out)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm__outside_device(a, out);
    hbm__unlock(a);
    hbm__outside_processes(a, out);
    out->ns = now_ns();
    hbm__lock(a);
    a->outside_last = *out;
    hbm__unlock(a);
    return HBM_OK;
}

void hbm__outside_note(hbm_allocator *a, const hbm_outside *o)
{
    a->outside_last = *o;
    if (!a->outside_last.ns)
        a->outside_last.ns = now_ns();
}

void hbm__outside_stats(const hbm_allocator *a, hbm_stats *s)
{
    const hbm_outside *o = &a->outside_last;
    bool m = o->ns != 0;
    s->device_used_bytes = m ? o->device_used : -1;
    s->outside_bytes = m ? o->outside : -1;
    s->outside_process_bytes = m ? o->process_outside : -1;
    s->outside_others_bytes = m ? o->others : -1;
}

size_t hbm_outside_describe(const hbm_outside *o, char *buf, size_t len)
{
    if (!buf || !len)
        return 0;
    buf[0] = 0;
    if (!o)
        return 0;
    hbm__sbuf sb;
    hbm__sb_init(&sb, buf, len);
    char s_out[32], s_me[32], s_others[32], s_x[32];
    if (o->outside < 0) {
        hbm__sb_printf(&sb, "the device's used memory is unknown (its memory query failed)");
        return strlen(buf);
    }
    hbm__format_size((uint64_t)o->outside, s_out, sizeof s_out);
    hbm__sb_printf(&sb, "%s of the device is in use outside hbmalloc", s_out);
    if (!o->nprocs) {
        hbm__sb_printf(&sb, " (the runtime does not tell it by process)");
        return strlen(buf);
    }
    if (!o->self_listed) {
        hbm__sb_printf(&sb,
                       " (this process is not among the %u the runtime lists, as in a container with its own "
                       "process ids: no split by process)",
                       o->nprocs);
        return strlen(buf);
    }
    const char *sep = ": ";
    if (o->process_outside >= 0) {
        hbm__format_size((uint64_t)o->process_outside, s_me, sizeof s_me);
        hbm__sb_printf(&sb, ": %s by this process (its runtime context, communicators' buffers, another allocator)",
                       s_me);
        sep = ", ";
    }
    if (o->others >= 0) {
        hbm__format_size((uint64_t)o->others, s_others, sizeof s_others);
        hbm__sb_printf(&sb, "%s%s by other processes", sep, s_others);
    }
    const char *open = " (";
    for (uint32_t i = 0; i < o->nprocs && i < HBM_OUTSIDE_PROCS && o->others >= 0; i++) {
        if (o->procs[i].pid == (int64_t)getpid() || !o->procs[i].bytes)
            continue;
        hbm__format_size(o->procs[i].bytes, s_x, sizeof s_x);
        hbm__sb_printf(&sb, "%sprocess %lld %s", open, (long long)o->procs[i].pid, s_x);
        open = ", ";
    }
    if (open[0] == ',')
        hbm__sb_printf(&sb, "%s)", o->nprocs > HBM_OUTSIDE_PROCS ? ", ..." : "");
    if (o->process_outside < 0 && o->others < 0)
        hbm__sb_printf(&sb, " (the runtime lists the processes but cannot measure their memory)");
    else if (o->process_outside < 0 || o->others < 0)
        hbm__sb_printf(&sb, "; the runtime cannot measure %s",
                       o->process_outside < 0 ? "this process's memory" : "some other process's memory");
    if (o->process_outside >= 0 && o->others >= 0 && o->outside > o->process_outside + o->others) {
        hbm__format_size((uint64_t)(o->outside - o->process_outside - o->others), s_x, sizeof s_x);
        hbm__sb_printf(&sb, ", %s charged to no process (the driver's own)", s_x);
    }
    return strlen(buf);
}
