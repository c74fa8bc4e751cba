/*
 * sim.c: the simulated device. Owns capacity accounting per device,
 * deterministic address assignment, optional host backing, the latency cost
 * model, call counters and fault injection. Knows nothing of pools or policy.
 *
 * Address-only mode (default) touches no memory: an 80 GiB device replays on
 * a small machine. Addresses come from a per-device virtual range with
 * first-fit placement at 2 MiB alignment, so a replay gives the same
 * addresses every time. Host-backed mode (memory=host) hands out real host
 * memory so tests can write into blocks; its addresses are not deterministic.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../util.h"
#include "backend.h"
#include "sim.h"

#define SIM_MAX_DEVICES 16
#define SIM_ALIGN (2 * HBM__MiB)
#define SIM_VA_BASE ((uintptr_t)0x100000000000ull) /* 16 TiB */
#define SIM_VA_SPAN ((uintptr_t)0x100000000000ull) /* 16 TiB of addresses per device */
#define SIM_MAX_CAPACITY ((size_t)8 << 40)          /* 8 TiB */
#define SIM_MAX_FAULTS 32

typedef struct sim_range {
    uintptr_t start, end;
} sim_range;

typedef struct sim_alloc {
    uintptr_t addr;
    size_t size;
    int device;
} sim_alloc;

typedef struct sim_dev {
    size_t capacity, used, others;
    sim_range *free_ranges; /* sorted by start, disjoint, never adjacent */
    size_t nranges, cap_ranges;
} sim_dev;

typedef struct sim_fault_state {
    hbm__sim_fault rule;
    uint64_t seen;
} sim_fault_state;

typedef struct sim {
    pthread_mutex_t lock; /* allocators of several devices may share one sim */
    int ndev;
    int host_backed;
    sim_dev dev[SIM_MAX_DEVICES];
    sim_alloc *live; /* sorted by addr */
    size_t nlive, cap_live;
    uint64_t cost_base_ns[HBM__OP_KINDS];
    uint64_t cost_per_gib_ns[HBM__OP_KINDS];
    sim_fault_state faults[SIM_MAX_FAULTS];
    int nfaults;
    hbm__sim_counters counters;
} sim;

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = *cap ? *cap * 2 : 16;
    while (n < need)
        n *= 2;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -1;
    *p = q;
    *cap = n;
    return 0;
}

/* ---- address ranges (address-only mode) ---- */

static int range_take(sim_dev *d, size_t size, uintptr_t *out)
{
    size_t need = (size + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN;
    for (size_t i = 0; i < d->nranges; i++) {
        sim_range *r = &d->free_ranges[i];
        if (r->end - r->start < need)
            continue;
        *out = r->start;
        r->start += need;
        if (r->start == r->end) {
            memmove(r, r + 1, (d->nranges - i - 1) * sizeof *r);
            d->nranges--;
        }
        return 0;
    }
    return -1;
}

static int range_give(sim_dev *d, uintptr_t addr, size_t size)
{
    uintptr_t end = addr + (size + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN;
    size_t i = 0;
    while (i < d->nranges && d->free_ranges[i].start < addr)
        i++;
    int merge_prev = i > 0 && d->free_ranges[i - 1].end == addr;
    int merge_next = i < d->nranges && d->free_ranges[i].start == end;
    if (merge_prev && merge_next) {
        d->free_ranges[i - 1].end = d->free_ranges[i].end;
        memmove(&d->free_ranges[i], &d->free_ranges[i + 1], (d->nranges - i - 1) * sizeof(sim_range));
        d->nranges--;
    } else if (merge_prev) {
        d->free_ranges[i - 1].end = end;
    } else if (merge_next) {
        d->free_ranges[i].start = addr;
    } else {
        if (grow((void **)&d->free_ranges, &d->cap_ranges, d->nranges + 1, sizeof(sim_range)))
            return -1;
        memmove(&d->free_ranges[i + 1], &d->free_ranges[i], (d->nranges - i) * sizeof(sim_range));
        d->free_ranges[i] = (sim_range){addr, end};
        d->nranges++;
    }
    return 0;
}

/* ---- live allocations ---- */

static size_t live_find(const sim *s, uintptr_t addr)
{
    size_t lo = 0, hi = s->nlive;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->live[mid].addr < addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* ---- faults ---- */

static int fault_check(sim *s, hbm__op op, size_t size)
{
    for (int i = 0; i < s->nfaults; i++) {
        sim_fault_state *f = &s->faults[i];
        if (f->rule.kind >= 0 && f->rule.kind != (int)op)
            continue;
        if (size < f->rule.min_size || size > f->rule.max_size)
            continue;
        f->seen++;
        if (f->rule.nth == 0 || f->seen == f->rule.nth) {
            s->counters.injected++;
            return f->rule.code;
        }
    }
    return 0;
}

/* ---- backend table ---- */

static int sim_alloc_fn(void *ctx, int device, size_t size, uintptr_t *out)
{
    sim *s = ctx;
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    s->counters.calls[HBM__OP_MALLOC]++;
    if (device < 0 || device >= s->ndev) {
        rc = HBM__SIM_ERR_DEVICE;
        goto done;
    }
    if ((rc = fault_check(s, HBM__OP_MALLOC, size)))
        goto done;
    sim_dev *d = &s->dev[device];
    if (size > d->capacity - d->used - d->others || d->used + d->others > d->capacity) {
        rc = HBM__BE_OOM;
        goto done;
    }
    if (grow((void **)&s->live, &s->cap_live, s->nlive + 1, sizeof(sim_alloc))) {
        rc = HBM__SIM_ERR_HOST;
        goto done;
    }
    uintptr_t addr;
    if (s->host_backed) {
        void *p = NULL;
        if (posix_memalign(&p, 4096, size ? size : 1)) {
            rc = HBM__SIM_ERR_HOST;
            goto done;
        }
        addr = (uintptr_t)p;
    } else if (range_take(d, size, &addr)) {
        rc = HBM__BE_OOM; /* the virtual range is exhausted: only past 16 TiB of churn */
        goto done;
    }
    size_t i = live_find(s, addr);
    memmove(&s->live[i + 1], &s->live[i], (s->nlive - i) * sizeof(sim_alloc));
    s->live[i] = (sim_alloc){addr, size, device};
    s->nlive++;
    d->used += size;
    s->counters.live_allocations++;
    s->counters.live_bytes += size;
    *out = addr;
done:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_free_fn(void *ctx, int device, uintptr_t ptr, size_t size)
{
    sim *s = ctx;
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    s->counters.calls[HBM__OP_FREE]++;
    size_t i = live_find(s, ptr);
    if (i == s->nlive || s->live[i].addr != ptr || s->live[i].device != device ||
        s->live[i].size != size) {
        rc = HBM__SIM_ERR_BAD_FREE;
        goto done;
    }
    if ((rc = fault_check(s, HBM__OP_FREE, size)))
        goto done;
    sim_dev *d = &s->dev[device];
    if (s->host_backed)
        free((void *)ptr);
    else if (range_give(d, ptr, size)) {
        rc = HBM__SIM_ERR_HOST;
        goto done;
    }
    memmove(&s->live[i], &s->live[i + 1], (s->nlive - i - 1) * sizeof(sim_alloc));
    s->nlive--;
    d->used -= size;
    s->counters.live_allocations--;
    s->counters.live_bytes -= size;
done:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_info_fn(void *ctx, int device, size_t *free_bytes, size_t *total_bytes)
{
    sim *s = ctx;
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    s->counters.calls[HBM__OP_INFO]++;
    if (device < 0 || device >= s->ndev)
        rc = HBM__SIM_ERR_DEVICE;
    else if (!(rc = fault_check(s, HBM__OP_INFO, 0))) {
        sim_dev *d = &s->dev[device];
        size_t taken = d->used + d->others;
        *free_bytes = taken > d->capacity ? 0 : d->capacity - taken;
        *total_bytes = d->capacity;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static const char *sim_strerror(void *ctx, int code)
{
    (void)ctx;
    switch (code) {
    case 0: return "success";
    case HBM__BE_OOM: return "out of device memory";
    case HBM__SIM_ERR_INJECTED: return "injected fault (sim fault rule)";
    case HBM__SIM_ERR_BAD_FREE: return "free of an address the device never handed out";
    case HBM__SIM_ERR_DEVICE: return "no such device";
    case HBM__SIM_ERR_HOST: return "host memory behind the simulated device ran out";
    default: return "unknown sim error";
    }
}

static uint64_t sim_cost_ns(void *ctx, hbm__op op, size_t size)
{
    sim *s = ctx;
    return s->cost_base_ns[op] + (uint64_t)((double)s->cost_per_gib_ns[op] * (double)size / (double)HBM__GiB);
}

static void sim_close(void *ctx)
{
    sim *s = ctx;
    if (s->host_backed)
        for (size_t i = 0; i < s->nlive; i++)
            free((void *)s->live[i].addr);
    for (int d = 0; d < s->ndev; d++)
        free(s->dev[d].free_ranges);
    free(s->live);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static const hbm__backend_ops sim_ops = {
    .name = "sim",
    .mem_alloc = sim_alloc_fn,
    .mem_free = sim_free_fn,
    .mem_info = sim_info_fn,
    .strerror = sim_strerror,
    .cost_ns = sim_cost_ns,
    .close = sim_close,
};

/* ---- spec parsing: "capacity=80GiB,memory=host,devices=2,..." ---- */

static int parse_us(const char *v, uint64_t *ns)
{
    char *end;
    double d = strtod(v, &end);
    if (end == v || *end || d < 0 || d > 1e12)
        return -1;
    *ns = (uint64_t)(d * 1000.0);
    return 0;
}

static int sim_set(sim *s, const char *key, const char *val, size_t *capacity, size_t *others,
                   hbm__backend_caps *caps, char *err, size_t errlen)
{
    uint64_t n;
    if (!strcmp(key, "capacity")) {
        if (hbm__parse_size(val, capacity) || *capacity == 0 || *capacity > SIM_MAX_CAPACITY) {
            snprintf(err, errlen, "sim: capacity '%s' must be a size from 1 byte to 8TiB (e.g. 80GiB)", val);
            return -1;
        }
    } else if (!strcmp(key, "others")) {
        if (hbm__parse_size(val, others)) {
            snprintf(err, errlen, "sim: others '%s' must be a size (memory held outside hbmalloc)", val);
            return -1;
        }
    } else if (!strcmp(key, "memory")) {
        if (!strcmp(val, "host"))
            s->host_backed = 1;
        else if (!strcmp(val, "address"))
            s->host_backed = 0;
        else {
            snprintf(err, errlen, "sim: memory '%s' must be 'address' or 'host'", val);
            return -1;
        }
    } else if (!strcmp(key, "devices")) {
        if (hbm__parse_u64(val, &n) || n < 1 || n > SIM_MAX_DEVICES) {
            snprintf(err, errlen, "sim: devices '%s' must be 1..%d", val, SIM_MAX_DEVICES);
            return -1;
        }
        s->ndev = (int)n;
    } else if (!strcmp(key, "dialect")) {
        if (!strcmp(val, "cuda")) {
            caps->dialect = HBM_DIALECT_CUDA;
            caps->request_pad = 0;
        } else if (!strcmp(val, "npu")) {
            caps->dialect = HBM_DIALECT_NPU;
            caps->request_pad = 32;
        } else {
            snprintf(err, errlen, "sim: dialect '%s' must be 'cuda' or 'npu'", val);
            return -1;
        }
    } else if (!strcmp(key, "pad")) {
        if (hbm__parse_u64(val, &n) || n > 4096) {
            snprintf(err, errlen, "sim: pad '%s' must be 0..4096 bytes", val);
            return -1;
        }
        caps->request_pad = (size_t)n;
    } else {
        static const char *cost_keys[HBM__OP_KINDS] = {"malloc_us", "free_us", "info_us"};
        for (int op = 0; op < HBM__OP_KINDS; op++) {
            char per[32];
            snprintf(per, sizeof per, "%s_per_gib", cost_keys[op]);
            uint64_t *dst = !strcmp(key, cost_keys[op]) ? &s->cost_base_ns[op]
                            : !strcmp(key, per)         ? &s->cost_per_gib_ns[op]
                                                        : NULL;
            if (!dst)
                continue;
            if (parse_us(val, dst)) {
                snprintf(err, errlen, "sim: %s '%s' must be a number of microseconds >= 0", key, val);
                return -1;
            }
            return 0;
        }
        if (!strcmp(key, "fail_nth")) {
            if (hbm__parse_u64(val, &n) || n == 0) {
                snprintf(err, errlen, "sim: fail_nth '%s' must be a call number >= 1", val);
                return -1;
            }
            hbm__sim_fault f = {.kind = -1, .nth = n, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
            hbm__sim_add_fault(s, &f);
            return 0;
        }
        snprintf(err, errlen,
                 "sim: unknown option '%s' (known: capacity, others, memory, devices, dialect, pad, "
                 "malloc_us, free_us, info_us, *_per_gib, fail_nth)",
                 key);
        return -1;
    }
    return 0;
}

int hbm__sim_open(struct hbm_backend *b, const char *opts, char *err, size_t errlen)
{
    sim *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "sim: out of host memory");
        return HBM_ERR_NOMEM;
    }
    pthread_mutex_init(&s->lock, NULL);
    s->ndev = 1;
    /* Cost model defaults: placeholders of the right order for a driver
     * allocation and free; set them from measurements of your device. */
    s->cost_base_ns[HBM__OP_MALLOC] = 20000;
    s->cost_base_ns[HBM__OP_FREE] = 10000;
    s->cost_base_ns[HBM__OP_INFO] = 1000;
    b->caps.device_count = 1;
    b->caps.dialect = HBM_DIALECT_CUDA;
    b->caps.request_pad = 0;
    b->caps.modelled_cost = 1;
    size_t capacity = 80 * HBM__GiB, others = 0;

    char buf[1024];
    if (strlen(opts) >= sizeof buf) {
        snprintf(err, errlen, "sim: option string longer than %zu bytes", sizeof buf - 1);
        sim_close(s);
        return HBM_ERR_INVALID;
    }
    strcpy(buf, opts);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq) {
            snprintf(err, errlen, "sim: option '%s' must be key=value", tok);
            sim_close(s);
            return HBM_ERR_INVALID;
        }
        *eq = 0;
        if (sim_set(s, tok, eq + 1, &capacity, &others, &b->caps, err, errlen)) {
            sim_close(s);
            return HBM_ERR_INVALID;
        }
    }
    b->caps.device_count = s->ndev;
    for (int d = 0; d < s->ndev; d++) {
        sim_dev *dev = &s->dev[d];
        dev->capacity = capacity;
        dev->others = others;
        if (!s->host_backed) {
            uintptr_t base = SIM_VA_BASE + (uintptr_t)d * SIM_VA_SPAN;
            if (range_give(dev, base, SIM_VA_SPAN)) {
                sim_close(s);
                return HBM_ERR_NOMEM;
            }
        }
    }
    b->ops = &sim_ops;
    b->ctx = s;
    return HBM_OK;
}

/* ---- test and tool controls ---- */

void *hbm__sim_ctx(hbm_backend *b)
{
    return b && b->ops == &sim_ops ? b->ctx : NULL;
}

int hbm__sim_add_fault(void *ctx, const hbm__sim_fault *rule)
{
    sim *s = ctx;
    int rc = -1;
    pthread_mutex_lock(&s->lock);
    if (s->nfaults < SIM_MAX_FAULTS) {
        s->faults[s->nfaults].rule = *rule;
        s->faults[s->nfaults].seen = 0;
        s->nfaults++;
        rc = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

void hbm__sim_clear_faults(void *ctx)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->nfaults = 0;
    pthread_mutex_unlock(&s->lock);
}

void hbm__sim_get_counters(void *ctx, hbm__sim_counters *out)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    *out = s->counters;
    pthread_mutex_unlock(&s->lock);
}

int hbm__sim_is_host_backed(void *ctx)
{
    return ((sim *)ctx)->host_backed;
}
