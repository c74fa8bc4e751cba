/*
 * outside.c: device memory hbmalloc does not hold (hbm_outside_get, docs/MONITOR.md "Memory outside the
 * allocator"), in figures and in one sentence.
 *
 * A job's memory failures between ranks are mostly about memory no caching allocator sees: the runtime's context,
 * NCCL's or HCCL's buffers (per communicator, made while the job runs), other processes on the device. The device's
 * used bytes as its runtime counts them, less hbmalloc's reserved bytes, is all of it; where the runtime also counts
 * memory per process (the backend's proc_mem: NVML on CUDA), it is split into this process's part and the others'.
 *
 * The device query goes through the door (hbm__dev_info) under the allocator's lock; the per-process query does
 * not touch the allocator and runs without it (NVML can take milliseconds). Reads only: no pool, block or statistic
 * changes, and a failed query leaves the caller's last error as it was.
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

/* The device's part, with a->lock held: used, reserved, outside; the per-process figures unknown. */
static void device_part(hbm_allocator *a, hbm_outside *o)
{
    memset(o, 0, sizeof *o);
    o->device = a->device;
    char saved[sizeof a->err];
    memcpy(saved, a->err, sizeof saved);
    size_t dev_free = 0, dev_total = 0;
    bool known = hbm__dev_info(a, &dev_free, &dev_total) == HBM_OK;
    memcpy(a->err, saved, sizeof saved);
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
    for (size_t i = 1; i < have; i++) /* largest first: insertion sort, a few entries */
        for (size_t j = i; j > 0 && p[j].bytes > p[j - 1].bytes; j--) {
            hbm__proc_use x = p[j];
            p[j] = p[j - 1];
            p[j - 1] = x;
        }
    int64_t me = (int64_t)getpid();
    uint64_t mine = 0, others = 0;
    bool found = false;
    for (size_t i = 0; i < have; i++) {
        if (i < HBM_OUTSIDE_PROCS) {
            o->procs[i].pid = p[i].pid;
            o->procs[i].bytes = p[i].bytes;
        }
        if (p[i].pid == me) {
            mine += p[i].bytes;
            found = true;
        } else {
            others += p[i].bytes;
        }
    }
    if (!found) /* not in the runtime's list (another PID namespace): no split */
        return;
    o->process_bytes = (int64_t)mine;
    o->process_outside = o->process_bytes > o->reserved ? o->process_bytes - o->reserved : 0;
    o->others = n > PROCS ? -1 : (int64_t)others;
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
    device_part(a, out);
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
    if (o->process_outside >= 0 && o->others >= 0) {
        hbm__format_size((uint64_t)o->process_outside, s_me, sizeof s_me);
        hbm__format_size((uint64_t)o->others, s_others, sizeof s_others);
        hbm__sb_printf(&sb,
                       ": %s by this process (its runtime context, communicators' buffers, another allocator), "
                       "%s by other processes",
                       s_me, s_others);
        const char *sep = " (";
        for (uint32_t i = 0; i < o->nprocs && i < HBM_OUTSIDE_PROCS; i++) {
            if (o->procs[i].pid == (int64_t)getpid())
                continue;
            hbm__format_size(o->procs[i].bytes, s_x, sizeof s_x);
            hbm__sb_printf(&sb, "%sprocess %lld %s", sep, (long long)o->procs[i].pid, s_x);
            sep = ", ";
        }
        if (sep[0] == ',')
            hbm__sb_printf(&sb, "%s)", o->nprocs > HBM_OUTSIDE_PROCS ? ", ..." : "");
    } else if (o->nprocs) {
        hbm__sb_printf(&sb,
                       " (this process is not among the %u the runtime lists, as in a container with its own "
                       "process ids: no split by process)",
                       o->nprocs);
    } else {
        hbm__sb_printf(&sb, " (the runtime does not tell it by process)");
    }
    return strlen(buf);
}
