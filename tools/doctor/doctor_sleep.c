/*
 * doctor_sleep.c: what a sleep left in use, from the line vLLM's sleep mode logs after every sleep: "Sleep mode
 * freed 71.25 GiB memory, 1.38 GiB memory is still in use." (vllm/v1/worker/gpu_worker.py `sleep`: the device's
 * free memory before and after CuMemAllocator.sleep, from torch.cuda.mem_get_info; vllm-ascend's NPU worker logs
 * the same words from torch.npu.mem_get_info). The complaint most filed against the sleep modes is "the sleep did
 * not free the memory", and the worst form of it is memory that stays in use a little more after every cycle: one
 * finding says what stayed and who can hold it, another, per process, that it grows.
 *
 * The figure is the device's used memory, not the process's: other processes on the device count in it. A process
 * is told apart by the "p:PID" or "pid=PID" its log lines carry (vLLM's logging formats); lines without one are one
 * series.
 */
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"
#include "doctor.h"

#define GiB 1073741824.0
#define GROWTH_GIB 0.25 /* less than this between the first and the last sleep is noise of the runtime's own */
#define GROWTH_SLEEPS 3
#define NOISE_GIB \
    0.10 /* a figure lower than the one before by more than this: not a steady growth (two devices'
                          figures interleaved in one series, a cache given back) */

/* The PID a log line names ("p:475095", "pid=1234"), or -1. */
static long pid_of(const char *line)
{
    static const char *const keys[] = {" p:", "pid=", "(pid "};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        const char *p = strstr(line, keys[k]);
        if (p && isdigit((unsigned char)p[strlen(keys[k])]))
            return strtol(p + strlen(keys[k]), NULL, 10);
    }
    return -1;
}

static void size_text(double gib, char *buf, size_t len) { snprintf(buf, len, "%.2f GiB", gib); }

static struct doctor_sleeps *series(doctor *d, long pid)
{
    for (int i = 0; i < d->nsleeps; i++)
        if (d->sleeps[i].pid == pid)
            return &d->sleeps[i];
    if (d->nsleeps == (int)(sizeof d->sleeps / sizeof d->sleeps[0]))
        return NULL; /* past 32 processes: counted in the log's finding, not followed apart */
    struct doctor_sleeps *s = &d->sleeps[d->nsleeps++];
    memset(s, 0, sizeof *s);
    s->pid = pid;
    return s;
}

#define LEFT_WHY                                                                                                      \
    "vLLM's sleep mode (and vllm-ascend's) logs this after every sleep: the device's used memory once its allocator " \
    "gave back what was allocated inside use_memory_pool (weights, KV cache) and torch's cache was emptied. What "    \
    "stays is held by something else: the runtime's context (several hundred MiB per process on CUDA), NCCL / HCCL "  \
    "communicators' buffers, graph pools captured outside the sleeping pool, tensors allocated outside it, and "      \
    "other processes on the same device (the figure is the device's, not the process's)."

static void left_in_use(doctor *d, const char *path, long lineno, const char *line, double used)
{
    finding *f;
    if (!d->sleep_finding) {
        f = doctor_add(d, SEV_INFO, "sleep-left-in-use");
        d->sleep_finding = d->n && f == &d->f[d->n - 1] ? (int)d->n : 0; /* 0: out of host memory, not kept */
        doctor_evidence(f, path, lineno, line);
        doctor_next(f, "name each holder with its size: with hbmalloc's pools (hbmalloc.torch.pool() and sleep()), "
                       "hbmalloc.torch.resident() after the sleep, or `hbmalloc top` under the process's row "
                       "(hbmalloc help SLEEP, \"What still holds memory\")");
        doctor_next(f, "other processes on the device: nvidia-smi --query-compute-apps=pid,used_memory --format=csv "
                       "(npu-smi info on Ascend)");
    } else {
        f = &d->f[d->sleep_finding - 1];
        f->count += f->count < INT_MAX;
    }
    /* The most any process left, and the least: a process far above the others holds something they do not. */
    const struct doctor_sleeps *most = NULL, *least = NULL;
    for (int i = 0; i < d->nsleeps; i++) {
        if (!most || d->sleeps[i].high > most->high)
            most = &d->sleeps[i];
        if (!least || d->sleeps[i].low < least->low)
            least = &d->sleeps[i];
    }
    char s_most[32], s_least[32];
    size_text(most && most->high > used ? most->high : used, s_most, sizeof s_most);
    snprintf(f->title, sizeof f->title, "After a sleep, up to %s stayed in use on the device (%d sleep%s logged)",
             s_most, f->count, f->count == 1 ? "" : "s");
    snprintf(f->why, sizeof f->why, "%s", LEFT_WHY);
    if (most && least && most != least && most->pid >= 0 && most->high - least->low >= GROWTH_GIB) {
        size_text(most->high, s_most, sizeof s_most);
        size_text(least->low, s_least, sizeof s_least);
        size_t n = strlen(f->why);
        snprintf(f->why + n, sizeof f->why - n,
                 " Process %ld left the most, %s, where the least was %s: what it holds more than the others is "
                 "where to look first.",
                 most->pid, s_most, s_least);
    }
}

static void growth(doctor *d, struct doctor_sleeps *s, const char *path, long lineno, const char *line)
{
    if (s->n < GROWTH_SLEEPS || s->last - s->first < GROWTH_GIB || s->fell)
        return;
    finding *f;
    if (!s->growth) {
        f = doctor_add(d, SEV_WARNING, "sleep-growth");
        s->growth = d->n && f == &d->f[d->n - 1] ? (int)d->n : 0;
        snprintf(f->why, sizeof f->why,
                 "Each sleep and wake of this process leaves more memory in use after the sleep: something "
                 "allocates outside the sleeping pools every cycle and does not give it back, and after enough "
                 "cycles the wake (or the other phase) runs out of memory. It is the device's figure: another "
                 "process that grows shows the same.");
        doctor_next(f,
                    "compare hbmalloc.torch.resident() after two sleeps: the holder that grows is the leak (an awake "
                    "pool by tag, untagged graph pools, hbmalloc's cache, or memory outside hbmalloc)");
        doctor_next(f, "other processes on the device: nvidia-smi --query-compute-apps=pid,used_memory --format=csv "
                       "(npu-smi info on Ascend)");
    } else {
        f = &d->f[s->growth - 1];
    }
    if (!f->evidence[0])
        doctor_evidence(f, path, lineno, line); /* where it was first seen growing */
    f->count = s->n;
    char a[32], b[32], lo[32];
    size_text(s->first, a, sizeof a);
    size_text(s->last, b, sizeof b);
    size_text(s->low, lo, sizeof lo);
    char who[48] = "";
    if (s->pid >= 0)
        snprintf(who, sizeof who, " of process %ld", s->pid);
    snprintf(f->title, sizeof f->title, "What a sleep leaves in use grew from %s to %s over %d sleeps%s (least %s)", a,
             b, s->n, who, lo);
}

int doctor_sleep_line(doctor *d, const char *path, long lineno, const char *line)
{
    const char *p = strstr(line, "Sleep mode freed ");
    if (!p)
        return 0;
    size_t n;
    (void)doctor_size(p + 17, &n); /* what it freed: not needed, but it must be a size */
    const char *q = n ? strstr(p + 17 + n, " memory, ") : NULL;
    double used = q ? doctor_size(q + 9, &n) : 0;
    if (!q || !n || !strstr(q + 9 + n, " memory is still in use"))
        return 0; /* another text with the same words: not read as figures */
    used /= GiB;
    struct doctor_sleeps *s = series(d, pid_of(line));
    if (s) {
        s->fell |= s->n && used < s->last - NOISE_GIB;
        s->first = s->n ? s->first : used;
        s->low = s->n && s->low < used ? s->low : used;
        s->high = s->n && s->high > used ? s->high : used;
        s->last = used;
        s->n++;
    }
    left_in_use(d, path, lineno, line, used);
    if (s)
        growth(d, s, path, lineno, line);
    return 1;
}
