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
 * With vmm=on too, its virtual memory is real: a reservation is address space
 * without access (PROT_NONE), a physical handle a memory file (memfd), a map
 * puts that file at the address, an unmap takes it away again: a page mapped
 * anew starts zeroed, and touching an unmapped page faults, as on a device.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create (glibc 2.27) */
#endif
#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "util/fork.h"
#include "util/rb.h"
#include "util/util.h"
#include "backend.h"
#include "sim.h"
#include "util/ranges.h"

#define SIM_MAX_DEVICES 16
#define SIM_ALIGN (2 * HBM__MiB)
#define SIM_VA_BASE ((uintptr_t)0x100000000000ull) /* 16 TiB */
#define SIM_OTHERS_PID 4242                        /* others_pid's default */
#define SIM_VA_SPAN ((uintptr_t)0x100000000000ull) /* 16 TiB of addresses per device */
#define SIM_MAX_CAPACITY ((size_t)8 << 40)         /* 8 TiB */
#define SIM_MAX_FAULTS 32

/* A live allocation, in a tree by address: a free finds it, a copy finds the allocation holding an address, in
 * O(log n) (a sorted array's insertion and removal made empty_cache quadratic: issue #38 item 5). */
typedef struct sim_alloc {
    hbm__rb node;
    uintptr_t addr;
    size_t size;
    int device;
    struct sim_alloc *next_spare; /* while on the spare list */
} sim_alloc;

/* Nodes come from blocks of SIM_NODES, freed ones are kept for the next allocation: a node costs no malloc of its
 * own (a replay makes one per segment; malloc and free were 6% of a default replay's instructions). */
#define SIM_NODES 128
typedef struct sim_node_block {
    struct sim_node_block *next;
    sim_alloc nodes[SIM_NODES];
} sim_node_block;

typedef struct sim_dev {
    /* others: memory held outside hbmalloc (every process), context of it this process's own (its runtime context,
     * communicators' buffers), the rest other processes'. */
    size_t capacity, used, others, context, driver;
    hbm__ranges free; /* free addresses (address-only mode) */
} sim_dev;

/* A virtual reservation and its page table (handle per granularity page, 0 = unmapped), in chunks of
 * SIM_PAGE_CHUNK pages made at a chunk's first map: a reservation costs its chunk pointers (8 bytes per
 * SIM_PAGE_CHUNK pages: 8 KiB for 1 TiB of 2 MiB pages), not a page table of the whole range zeroed at each
 * reservation and scanned at each unreservation (issue #38 item 4). */
#define SIM_PAGE_CHUNK 512
typedef struct sim_resv {
    uintptr_t va;
    size_t size;
    int device;
    uint64_t **chunks;
    size_t npages, mapped; /* pages in the range, pages mapped now */
} sim_resv;

/* Pinned host memory (host_alloc): real memory when host-backed, else a token no one reads (address-only mode
 * models the cost, as it does for the device). */
typedef struct sim_host {
    uintptr_t p;
    size_t size;
} sim_host;

/* Physical handles: a slot is reused once released, so the table is as large as the most handles
 * live at once; the handle's value carries the slot's generation (high 32 bits) beside its index + 1
 * (low 32 bits), so a stale handle, released and its slot reused, is still caught. */
typedef struct sim_handle {
    size_t size;
    int device;
    int live;
    int mapped;         /* pages of reservations that point at it */
    int fd;             /* host-backed virtual memory: the memory file behind it */
    uint32_t gen;       /* bumped at each release */
    uint32_t next_free; /* index + 1 of the next released slot, while this one is released */
} sim_handle;

#define HANDLE_SLOT(h) ((size_t)((h)&0xffffffffu) - 1)

/* A stream's clock: work recorded on it completes when the test lets it (held
 * streams), or at once (the default: an idle device). */
typedef struct sim_stream {
    hbm_stream id;
    int device;
    uint64_t submitted, completed;
    int held;
    int capturing; /* a graph capture is under way on it (hbm__sim_stream_capture) */
} sim_stream;

typedef struct sim_event {
    int live, device, recorded;
    hbm_stream stream;
    uint64_t seq;
    uint32_t gen, next_free; /* as a handle's: a destroyed event's slot is reused, its old id refused */
} sim_event;

typedef struct sim_fault_state {
    hbm__sim_fault rule;
    uint64_t seen;
} sim_fault_state;

typedef struct sim {
    pthread_mutex_t lock; /* allocators of several devices may share one sim */
    int ndev;
    int host_backed;
    int vmm_asked; /* vmm=on given: with memory=host, virtual memory over memory files */
    sim_dev dev[SIM_MAX_DEVICES];
    sim_host *hosts; /* pinned host allocations */
    size_t nhosts, cap_hosts;
    uintptr_t next_token;
    hbm__rb *live;               /* sim_alloc by address */
    sim_node_block *node_blocks; /* the first one is being carved */
    size_t nodes_carved;         /* of the first block */
    sim_alloc *spare_nodes;
    uint64_t cost_base_ns[HBM__OP_KINDS];
    uint64_t cost_per_gib_ns[HBM__OP_KINDS];
    sim_fault_state faults[SIM_MAX_FAULTS];
    int nfaults;
    hbm__sim_counters counters;
    /* virtual memory */
    int vmm;
    size_t granularity;
    sim_resv *resv;
    size_t nresv, cap_resv;
    sim_handle *handles; /* handle h lives at handles[HANDLE_SLOT(h)] */
    size_t nhandles, cap_handles;
    uint32_t free_handle; /* index + 1 of the first released slot, 0: none */
    /* streams and events */
    int strict_streams; /* streams=strict: only stream 0 and created streams exist */
    int no_processes;   /* processes=off: no per-process query (no NVML or DCMI, or refused) */
    int proc_hold;      /* tests: a per-process query waits (on proc_cv, the lock given up) while set */
    int proc_waiting;   /* queries waiting so */
    pthread_cond_t proc_cv;
    int64_t others_pid; /* the process the others' memory is reported under */
    sim_stream *streams;
    size_t nstreams, cap_streams;
    uint32_t *stream_index; /* open addressing over (device, id): index + 1 into streams, 0: empty; a power of two */
    size_t index_cap;
    sim_event *events; /* event e lives at events[HANDLE_SLOT(e)], its generation in the high half */
    size_t nevents, cap_events;
    uint32_t free_event; /* index + 1 of the first destroyed slot, 0: none */
    int ncapturing;      /* streams with a capture under way */
} sim;

/* The calling thread's capture mode (HBM__CAPTURE_MODE_*), as the CUDA driver keeps one per thread. */
static __thread int sim_thread_mode;

/* CUDA's rules while a stream captures a graph (global mode, PyTorch's default):
 * calls that obtain memory are allowed only from a thread in relaxed mode;
 * frees, synchronizations and event queries are never allowed (they would
 * synchronize with, or observe, work that is only being recorded); recording
 * an event on the capturing stream records it into the graph, which the
 * allocator must not mistake for the stream's progress. A violation fails the
 * call and is counted. */
static inline int capture_check(sim *s, hbm__op op, const sim_stream *record_on)
{
    if (s->ncapturing == 0)
        return 0;
    int ok;
    switch (op) {
    case HBM__OP_MALLOC:
    case HBM__OP_INFO:
    case HBM__OP_RESERVE:
    case HBM__OP_CREATE:
    case HBM__OP_MAP:
    case HBM__OP_ACCESS: ok = sim_thread_mode == HBM__CAPTURE_MODE_RELAXED; break;
    case HBM__OP_EVENT: ok = !(record_on && record_on->capturing); break;
    default: ok = 0; break;
    }
    if (ok)
        return 0;
    s->counters.capture_violations++;
    return HBM__SIM_ERR_CAPTURE;
}

/* ---- address ranges (address-only mode) ---- */

static size_t range_bytes(size_t size) { return (size + SIM_ALIGN - 1) / SIM_ALIGN * SIM_ALIGN; }

static int range_take(sim_dev *d, size_t size, uintptr_t *out)
{
    return hbm__ranges_take(&d->free, range_bytes(size), out);
}

static int range_give(sim_dev *d, uintptr_t addr, size_t size)
{
    return hbm__ranges_give(&d->free, addr, addr + range_bytes(size));
}

/* ---- live allocations ---- */

static bool alloc_less(const hbm__rb *a, const hbm__rb *b)
{
    return ((const sim_alloc *)a)->addr < ((const sim_alloc *)b)->addr;
}

static sim_alloc *node_get(sim *s)
{
    sim_alloc *a = s->spare_nodes;
    if (a) {
        s->spare_nodes = a->next_spare;
        return a;
    }
    if (!s->node_blocks || s->nodes_carved == SIM_NODES) {
        sim_node_block *b = malloc(sizeof *b);
        if (!b)
            return NULL;
        b->next = s->node_blocks;
        s->node_blocks = b;
        s->nodes_carved = 0;
    }
    return &s->node_blocks->nodes[s->nodes_carved++];
}

static void node_put(sim *s, sim_alloc *a)
{
    a->next_spare = s->spare_nodes;
    s->spare_nodes = a;
}

/* The live allocation with the highest address at or below addr, or NULL. */
static sim_alloc *live_at_or_below(const sim *s, uintptr_t addr)
{
    sim_alloc *best = NULL;
    for (hbm__rb *n = s->live; n;) {
        sim_alloc *a = (sim_alloc *)n;
        if (a->addr <= addr) {
            best = a;
            n = n->r;
        } else {
            n = n->l;
        }
    }
    return best;
}

/* ---- page tables of reservations ---- */

static uint64_t page_get(const sim_resv *r, size_t i)
{
    const uint64_t *c = r->chunks[i / SIM_PAGE_CHUNK];
    return c ? c[i % SIM_PAGE_CHUNK] : 0;
}

/* Makes the chunks of pages [first, first + n) that are not there yet. -1: no host memory (the ones made stay). */
static int page_chunks(sim_resv *r, size_t first, size_t n)
{
    for (size_t c = first / SIM_PAGE_CHUNK; n && c <= (first + n - 1) / SIM_PAGE_CHUNK; c++)
        if (!r->chunks[c] && !(r->chunks[c] = calloc(SIM_PAGE_CHUNK, sizeof **r->chunks)))
            return -1;
    return 0;
}

static void page_set(sim_resv *r, size_t i, uint64_t handle)
{
    r->chunks[i / SIM_PAGE_CHUNK][i % SIM_PAGE_CHUNK] = handle;
}

static void resv_free_pages(sim_resv *r)
{
    for (size_t c = 0; c < (r->npages + SIM_PAGE_CHUNK - 1) / SIM_PAGE_CHUNK; c++)
        free(r->chunks[c]);
    free(r->chunks);
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
    if ((rc = capture_check(s, HBM__OP_MALLOC, NULL)))
        goto done;
    if ((rc = fault_check(s, HBM__OP_MALLOC, size)))
        goto done;
    sim_dev *d = &s->dev[device];
    if (size > d->capacity - d->used - d->others || d->used + d->others > d->capacity) {
        rc = HBM__BE_OOM;
        goto done;
    }
    sim_alloc *a = node_get(s);
    if (!a) {
        rc = HBM__SIM_ERR_HOST;
        goto done;
    }
    uintptr_t addr;
    if (s->host_backed) {
        void *p = NULL;
        if (posix_memalign(&p, 4096, size ? size : 1)) {
            node_put(s, a);
            rc = HBM__SIM_ERR_HOST;
            goto done;
        }
        addr = (uintptr_t)p;
    } else if (range_take(d, size, &addr)) {
        node_put(s, a);
        rc = HBM__BE_OOM; /* the virtual range is exhausted: only past 16 TiB of churn */
        goto done;
    }
    *a = (sim_alloc){.addr = addr, .size = size, .device = device};
    hbm__rb_insert(&s->live, &a->node, alloc_less);
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
    if ((rc = capture_check(s, HBM__OP_FREE, NULL)))
        goto done;
    sim_alloc *a = live_at_or_below(s, ptr);
    if (!a || a->addr != ptr || a->device != device || a->size != size) {
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
    hbm__rb_remove(&s->live, &a->node);
    node_put(s, a);
    d->used -= size;
    s->counters.live_allocations--;
    s->counters.live_bytes -= size;
done:
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* NVML's view (docs/CONTRACTS.md, the NVML row): this process holds what it allocated and its context; the
 * others' memory is one other process's; the driver's own is no process's. Not a device call: no capture check, no fault, no cost. */
static int sim_proc_mem(void *ctx, int device, hbm__proc_use *out, size_t cap, size_t *n)
{
    sim *s = ctx;
    int rc = 0;
    pthread_mutex_lock(&s->lock);
    for (s->proc_waiting++; s->proc_hold;) /* as slow as NVML can be, for a test: the sim's lock given up */
        pthread_cond_wait(&s->proc_cv, &s->lock);
    s->proc_waiting--;
    if (s->no_processes) {
        rc = HBM__SIM_ERR_UNSUPPORTED;
    } else if (device < 0 || device >= s->ndev) {
        rc = HBM__SIM_ERR_DEVICE;
    } else {
        sim_dev *d = &s->dev[device];
        hbm__proc_use p[2] = {{(int64_t)getpid(), d->used + d->context},
                              {s->others_pid, d->others - d->context - d->driver}};
        size_t k = 1 + (p[1].bytes > 0);
        for (size_t i = 0; i < k && i < cap; i++)
            out[i] = p[i];
        *n = k;
    }
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
    else if (!(rc = capture_check(s, HBM__OP_INFO, NULL)) && !(rc = fault_check(s, HBM__OP_INFO, 0))) {
        sim_dev *d = &s->dev[device];
        size_t taken = d->used + d->others;
        *free_bytes = taken > d->capacity ? 0 : d->capacity - taken;
        *total_bytes = d->capacity;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}


/* ---- virtual memory ---- */

static sim_resv *resv_find(sim *s, int device, uintptr_t va, size_t size)
{
    for (size_t i = 0; i < s->nresv; i++) {
        sim_resv *r = &s->resv[i];
        if (r->device == device && va >= r->va && va - r->va <= r->size && size <= r->size - (va - r->va))
            return r;
    }
    return NULL;
}

static int vmm_begin(sim *s, hbm__op op, int device, size_t size)
{
    s->counters.calls[op]++;
    if (!s->vmm)
        return HBM__SIM_ERR_NO_VMM;
    if (device < 0 || device >= s->ndev)
        return HBM__SIM_ERR_DEVICE;
    int rc = capture_check(s, op, NULL);
    return rc ? rc : fault_check(s, op, size);
}

static int sim_reserve(void *ctx, int device, size_t size, uintptr_t *va)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = vmm_begin(s, HBM__OP_RESERVE, device, size);
    if (!rc && (size == 0 || size % s->granularity))
        rc = HBM__SIM_ERR_ALIGN;
    if (!rc && size > SIM_VA_SPAN)
        rc = HBM__BE_OOM; /* more address space than the device has, before any host memory is asked for */
    size_t npages = rc ? 0 : size / s->granularity;
    uint64_t **chunks = NULL;
    if (!rc && (hbm__grow((void **)&s->resv, &s->cap_resv, s->nresv + 1, sizeof(sim_resv)) ||
                !(chunks = calloc((npages + SIM_PAGE_CHUNK - 1) / SIM_PAGE_CHUNK, sizeof *chunks))))
        rc = HBM__SIM_ERR_HOST;
    if (!rc && s->host_backed) {
        void *p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED)
            rc = HBM__BE_OOM;
        else
            *va = (uintptr_t)p;
    } else if (!rc && range_take(&s->dev[device], size, va)) {
        rc = HBM__BE_OOM; /* address space exhausted */
    }
    if (!rc) {
        s->resv[s->nresv++] = (sim_resv){*va, size, device, chunks, npages, 0};
        s->counters.live_reservations++;
    } else {
        free(chunks);
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_unreserve(void *ctx, int device, uintptr_t va, size_t size)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = vmm_begin(s, HBM__OP_UNRESERVE, device, size);
    sim_resv *r = rc ? NULL : resv_find(s, device, va, size);
    if (!rc && (!r || r->va != va || r->size != size))
        rc = HBM__SIM_ERR_BAD_RANGE;
    if (!rc && r->mapped)
        rc = HBM__SIM_ERR_STILL_MAPPED;
    if (!rc) {
        if (s->host_backed)
            munmap((void *)va, size);
        else
            range_give(&s->dev[device], va, size);
        resv_free_pages(r);
        *r = s->resv[--s->nresv];
        s->counters.live_reservations--;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_create(void *ctx, int device, size_t size, uint64_t *handle)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = vmm_begin(s, HBM__OP_CREATE, device, size);
    if (!rc && (size == 0 || size % s->granularity))
        rc = HBM__SIM_ERR_ALIGN;
    sim_dev *d = rc ? NULL : &s->dev[device];
    if (!rc && (size > d->capacity - d->used - d->others || d->used + d->others > d->capacity))
        rc = HBM__BE_OOM;
    if (!rc && !s->free_handle &&
        (s->nhandles >= UINT32_MAX ||
         hbm__grow((void **)&s->handles, &s->cap_handles, s->nhandles + 1, sizeof(sim_handle))))
        rc = HBM__SIM_ERR_HOST;
    int fd = -1;
    if (!rc && s->host_backed && ((fd = memfd_create("hbm-sim-page", MFD_CLOEXEC)) < 0 || ftruncate(fd, (off_t)size))) {
        if (fd >= 0)
            close(fd);
        rc = HBM__SIM_ERR_HOST;
    }
    if (!rc) {
        size_t slot = s->free_handle ? s->free_handle - 1 : s->nhandles++;
        sim_handle *x = &s->handles[slot];
        uint32_t gen = s->free_handle ? x->gen : 0;
        s->free_handle = s->free_handle ? x->next_free : 0;
        *x = (sim_handle){size, device, 1, 0, fd, gen, 0};
        *handle = (uint64_t)gen << 32 | (slot + 1);
        d->used += size;
        s->counters.live_handles++;
        s->counters.live_bytes += size;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static sim_handle *handle_get(sim *s, int device, uint64_t h)
{
    if ((h & 0xffffffffu) == 0 || HANDLE_SLOT(h) >= s->nhandles)
        return NULL;
    sim_handle *x = &s->handles[HANDLE_SLOT(h)];
    return x->live && x->gen == (uint32_t)(h >> 32) && x->device == device ? x : NULL;
}

static int sim_release(void *ctx, int device, uint64_t handle)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = vmm_begin(s, HBM__OP_RELEASE, device, 0);
    sim_handle *h = rc ? NULL : handle_get(s, device, handle);
    if (!rc && !h)
        rc = HBM__SIM_ERR_BAD_HANDLE;
    if (!rc && h->mapped)
        rc = HBM__SIM_ERR_STILL_MAPPED;
    if (!rc) {
        if (h->fd >= 0)
            close(h->fd);
        h->fd = -1;
        h->live = 0;
        h->gen++;
        h->next_free = s->free_handle;
        s->free_handle = (uint32_t)(h - s->handles) + 1;
        s->dev[device].used -= h->size;
        s->counters.live_handles--;
        s->counters.live_bytes -= h->size;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_map(void *ctx, int device, uintptr_t va, size_t size, uint64_t handle)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = vmm_begin(s, HBM__OP_MAP, device, size);
    sim_handle *h = rc ? NULL : handle_get(s, device, handle);
    sim_resv *r = rc ? NULL : resv_find(s, device, va, size);
    if (!rc && !h)
        rc = HBM__SIM_ERR_BAD_HANDLE;
    if (!rc && (!r || (va - r->va) % s->granularity || size != h->size))
        rc = HBM__SIM_ERR_BAD_RANGE;
    size_t first = rc ? 0 : (va - r->va) / s->granularity, n = rc ? 0 : size / s->granularity;
    for (size_t i = 0; !rc && i < n; i++)
        if (page_get(r, first + i))
            rc = HBM__SIM_ERR_STILL_MAPPED;
    if (!rc && page_chunks(r, first, n))
        rc = HBM__SIM_ERR_HOST;
    if (!rc && s->host_backed &&
        mmap((void *)va, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, h->fd, 0) == MAP_FAILED)
        rc = HBM__SIM_ERR_HOST;
    for (size_t i = 0; !rc && i < n; i++)
        page_set(r, first + i, handle);
    if (!rc) {
        r->mapped += n;
        h->mapped += (int)n;
        s->counters.mapped_pages += n;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_unmap(void *ctx, int device, uintptr_t va, size_t size)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = vmm_begin(s, HBM__OP_UNMAP, device, size);
    sim_resv *r = rc ? NULL : resv_find(s, device, va, size);
    if (!rc && (!r || (va - r->va) % s->granularity || size % s->granularity || size == 0))
        rc = HBM__SIM_ERR_BAD_RANGE;
    size_t first = rc ? 0 : (va - r->va) / s->granularity, n = rc ? 0 : size / s->granularity;
    for (size_t i = 0; !rc && i < n; i++)
        if (!page_get(r, first + i))
            rc = HBM__SIM_ERR_BAD_RANGE; /* not mapped */
    /* The address stays reserved, without access: a touch of it faults, as on a device. */
    if (!rc && s->host_backed &&
        mmap((void *)va, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
        rc = HBM__SIM_ERR_HOST;
    for (size_t i = 0; !rc && i < n; i++) {
        s->handles[HANDLE_SLOT(page_get(r, first + i))].mapped--;
        page_set(r, first + i, 0);
    }
    if (!rc) {
        r->mapped -= n;
        s->counters.mapped_pages -= n;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_access(void *ctx, int device, uintptr_t va, size_t size)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = vmm_begin(s, HBM__OP_ACCESS, device, size);
    sim_resv *r = rc ? NULL : resv_find(s, device, va, size);
    if (!rc && !r)
        rc = HBM__SIM_ERR_BAD_RANGE;
    pthread_mutex_unlock(&s->lock);
    return rc;
}


/* ---- streams and events ---- */

static size_t stream_hash(int device, hbm_stream id, size_t cap)
{
    uint64_t h = (id ^ ((uint64_t)(unsigned)device << 48)) * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

/* The slot of (device, id) in the index: its entry, or the empty one where it would go. */
static size_t stream_slot(const sim *s, int device, hbm_stream id)
{
    size_t k = stream_hash(device, id, s->index_cap);
    for (uint32_t e; (e = s->stream_index[k]); k = (k + 1) & (s->index_cap - 1))
        if (s->streams[e - 1].id == id && s->streams[e - 1].device == device)
            break;
    return k;
}

/* Streams are found through a hash index: a replay plays each pending free on a stream of its own (tools/run/replay.c),
 * so a run may have thousands. */
static sim_stream *stream_get(sim *s, int device, hbm_stream id, int create)
{
    if (s->index_cap) {
        uint32_t e = s->stream_index[stream_slot(s, device, id)];
        if (e)
            return &s->streams[e - 1];
    }
    if (!create || (s->strict_streams && id != 0) ||
        hbm__grow((void **)&s->streams, &s->cap_streams, s->nstreams + 1, sizeof(sim_stream)))
        return NULL;
    if (2 * (s->nstreams + 1) > s->index_cap) { /* at most half full */
        size_t cap = s->index_cap ? 2 * s->index_cap : 64;
        uint32_t *idx = calloc(cap, sizeof *idx);
        if (!idx)
            return NULL;
        free(s->stream_index);
        s->stream_index = idx;
        s->index_cap = cap;
        for (size_t i = 0; i < s->nstreams; i++)
            idx[stream_slot(s, s->streams[i].device, s->streams[i].id)] = (uint32_t)i + 1;
    }
    s->streams[s->nstreams] = (sim_stream){id, device, 0, 0, 0, 0};
    s->stream_index[stream_slot(s, device, id)] = (uint32_t)s->nstreams + 1;
    return &s->streams[s->nstreams++];
}

static sim_event *event_get(sim *s, int device, uint64_t e)
{
    if ((e & 0xffffffffu) == 0 || HANDLE_SLOT(e) >= s->nevents)
        return NULL;
    sim_event *x = &s->events[HANDLE_SLOT(e)];
    return x->live && x->gen == (uint32_t)(e >> 32) && x->device == device ? x : NULL;
}

static int ev_begin(sim *s, hbm__op op, int device)
{
    s->counters.calls[op]++;
    if (device < 0 || device >= s->ndev)
        return HBM__SIM_ERR_DEVICE;
    if (op != HBM__OP_EVENT) { /* create, record and destroy are checked by their callers */
        int rc = capture_check(s, op, NULL);
        if (rc)
            return rc;
    }
    return fault_check(s, op, 0);
}

static int sim_event_create(void *ctx, int device, uint64_t *event)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = ev_begin(s, HBM__OP_EVENT, device);
    if (!rc && !s->free_event &&
        (s->nevents >= UINT32_MAX || hbm__grow((void **)&s->events, &s->cap_events, s->nevents + 1, sizeof(sim_event))))
        rc = HBM__SIM_ERR_HOST;
    if (!rc) { /* a destroyed event's slot first: a job that makes and destroys events holds a bounded table */
        size_t slot = s->free_event ? s->free_event - 1 : s->nevents++;
        sim_event *x = &s->events[slot];
        uint32_t gen = s->free_event ? x->gen : 0;
        s->free_event = s->free_event ? x->next_free : 0;
        *x = (sim_event){1, device, 0, 0, 0, gen, 0};
        *event = (uint64_t)gen << 32 | (slot + 1);
        s->counters.live_events++;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_event_destroy(void *ctx, int device, uint64_t event)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = ev_begin(s, HBM__OP_EVENT, device);
    sim_event *e = rc ? NULL : event_get(s, device, event);
    if (!rc && !e)
        rc = HBM__SIM_ERR_BAD_EVENT;
    if (!rc) {
        e->live = 0;
        e->gen++;
        e->next_free = s->free_event;
        s->free_event = (uint32_t)(e - s->events) + 1;
        s->counters.live_events--;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_event_record(void *ctx, int device, uint64_t event, hbm_stream stream)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = ev_begin(s, HBM__OP_EVENT, device);
    sim_event *e = rc ? NULL : event_get(s, device, event);
    sim_stream *st = rc ? NULL : stream_get(s, device, stream, 1);
    if (!rc && !e)
        rc = HBM__SIM_ERR_BAD_EVENT;
    if (!rc && !st)
        rc = HBM__SIM_ERR_BAD_STREAM;
    if (!rc)
        rc = capture_check(s, HBM__OP_EVENT, st);
    if (!rc) {
        e->recorded = 1;
        e->stream = stream;
        e->seq = ++st->submitted;
        if (!st->held)
            st->completed = st->submitted;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* Query (wait == 0) or wait for (wait == 1) an event. Waiting completes a held
 * stream up to the event: the host waits, so the device gets there. */
static int event_check(sim *s, int device, uint64_t event, int wait)
{
    pthread_mutex_lock(&s->lock);
    int rc = ev_begin(s, wait ? HBM__OP_EVSYNC : HBM__OP_QUERY, device);
    sim_event *e = rc ? NULL : event_get(s, device, event);
    if (!rc && !e)
        rc = HBM__SIM_ERR_BAD_EVENT;
    sim_stream *st = !rc && e->recorded ? stream_get(s, device, e->stream, 0) : NULL;
    if (st && st->completed < e->seq) {
        if (wait)
            st->completed = e->seq;
        else
            rc = HBM__BE_NOT_READY;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_event_query(void *ctx, int device, uint64_t event) { return event_check(ctx, device, event, 0); }

static int sim_event_sync(void *ctx, int device, uint64_t event) { return event_check(ctx, device, event, 1); }

static int sim_stream_check(void *ctx, int device, hbm_stream stream)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = device < 0 || device >= s->ndev    ? HBM__SIM_ERR_DEVICE
             : stream_get(s, device, stream, 1) ? 0
                                                : HBM__SIM_ERR_BAD_STREAM;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_sync(void *ctx, int device, hbm_stream stream)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->counters.calls[HBM__OP_SYNC]++;
    int rc = device < 0 || device >= s->ndev ? HBM__SIM_ERR_DEVICE : capture_check(s, HBM__OP_SYNC, NULL);
    if (!rc)
        rc = fault_check(s, HBM__OP_SYNC, 0);
    sim_stream *st = rc ? NULL : stream_get(s, device, stream, 1);
    if (!rc && !st)
        rc = HBM__SIM_ERR_BAD_STREAM;
    if (!rc)
        st->completed = st->submitted;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* ---- pinned host memory and copies (a sleeping pool's backup) ---- */

static size_t host_find(const sim *s, uintptr_t p)
{
    for (size_t i = 0; i < s->nhosts; i++)
        if (s->hosts[i].p == p)
            return i;
    return SIZE_MAX;
}

/* Whether [p, p + n) lies inside one live host allocation. */
static int host_holds(const sim *s, uintptr_t p, size_t n)
{
    for (size_t i = 0; i < s->nhosts; i++)
        if (p >= s->hosts[i].p && n <= s->hosts[i].size && p - s->hosts[i].p <= s->hosts[i].size - n)
            return 1;
    return 0;
}

/* Whether [p, p + n) of device memory can be read or written: inside one live allocation, or mapped pages of one
 * reservation. */
static int device_holds(const sim *s, int device, uintptr_t p, size_t n)
{
    const sim_alloc *a = live_at_or_below(s, p);
    if (a && a->device == device && n <= a->size && p - a->addr <= a->size - n)
        return 1;
    for (size_t k = 0; k < s->nresv; k++) {
        const sim_resv *r = &s->resv[k];
        if (r->device != device || p < r->va || p - r->va > r->size || n > r->size - (p - r->va))
            continue;
        for (size_t g = (p - r->va) / s->granularity; g * s->granularity < p - r->va + n; g++)
            if (!page_get(r, g))
                return 0;
        return 1;
    }
    return 0;
}

static int sim_host_alloc(void *ctx, int device, size_t size, void **out)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->counters.calls[HBM__OP_HOST_ALLOC]++;
    int rc = device < 0 || device >= s->ndev ? HBM__SIM_ERR_DEVICE : capture_check(s, HBM__OP_HOST_ALLOC, NULL);
    if (!rc)
        rc = fault_check(s, HBM__OP_HOST_ALLOC, size);
    if (!rc && (size == 0 || hbm__grow((void **)&s->hosts, &s->cap_hosts, s->nhosts + 1, sizeof *s->hosts)))
        rc = HBM__SIM_ERR_HOST;
    uintptr_t p = 0;
    if (!rc && s->host_backed) {
        void *m = NULL;
        if (posix_memalign(&m, 4096, size))
            rc = HBM__SIM_ERR_HOST;
        p = (uintptr_t)m;
    } else if (!rc) {
        if (!s->next_token)
            s->next_token = (uintptr_t)0xfe0000000000ull; /* never read: address-only mode */
        p = s->next_token;
        s->next_token += (size + 4095) / 4096 * 4096 + 4096;
    }
    if (!rc) {
        s->hosts[s->nhosts++] = (sim_host){p, size};
        s->counters.live_host++;
        *out = (void *)p;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_host_free(void *ctx, int device, void *p)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->counters.calls[HBM__OP_HOST_FREE]++;
    size_t i = host_find(s, (uintptr_t)p);
    int rc = device < 0 || device >= s->ndev ? HBM__SIM_ERR_DEVICE : i == SIZE_MAX ? HBM__SIM_ERR_BAD_FREE : 0;
    if (!rc)
        rc = fault_check(s, HBM__OP_HOST_FREE, s->hosts[i].size);
    if (!rc) {
        if (s->host_backed)
            free(p);
        s->hosts[i] = s->hosts[--s->nhosts];
        s->counters.live_host--;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* A copy is work on `stream`: it completes with the stream (at once unless the stream is held). Host-backed, the
 * bytes move now. Either end outside live memory, or unmapped, is refused. */
static int sim_copy(sim *s, hbm__op op, int device, uintptr_t dev, uintptr_t host, size_t size, hbm_stream stream)
{
    pthread_mutex_lock(&s->lock);
    s->counters.calls[op]++;
    int rc = device < 0 || device >= s->ndev ? HBM__SIM_ERR_DEVICE : capture_check(s, op, NULL);
    if (!rc)
        rc = fault_check(s, op, size);
    sim_stream *st = rc ? NULL : stream_get(s, device, stream, 1);
    if (!rc && !st)
        rc = HBM__SIM_ERR_BAD_STREAM;
    if (!rc && (!size || !host_holds(s, host, size) || !device_holds(s, device, dev, size)))
        rc = HBM__SIM_ERR_BAD_RANGE;
    if (!rc) {
        if (s->host_backed && op == HBM__OP_COPY_D2H)
            memcpy((void *)host, (const void *)dev, size);
        else if (s->host_backed)
            memcpy((void *)dev, (const void *)host, size);
        st->submitted++;
        if (!st->held)
            st->completed = st->submitted;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}

static int sim_copy_d2h(void *ctx, int device, void *dst, uintptr_t src, size_t size, hbm_stream stream)
{
    return sim_copy(ctx, HBM__OP_COPY_D2H, device, src, (uintptr_t)dst, size, stream);
}

static int sim_copy_h2d(void *ctx, int device, uintptr_t dst, const void *src, size_t size, hbm_stream stream)
{
    return sim_copy(ctx, HBM__OP_COPY_H2D, device, dst, (uintptr_t)src, size, stream);
}

static const char *sim_strerror(void *ctx, int code)
{
    (void)ctx;
    switch (code) {
    case 0: return "success";
    case HBM__BE_OOM: return "out of device memory";
    case HBM__SIM_ERR_INJECTED: return "injected fault (sim fault rule)";
    case HBM__SIM_ERR_UNSUPPORTED: return "no per-process memory query (processes=off)";
    case HBM__SIM_ERR_BAD_FREE: return "free of an address the device never handed out";
    case HBM__SIM_ERR_DEVICE: return "no such device";
    case HBM__SIM_ERR_HOST: return "host memory behind the simulated device ran out";
    case HBM__SIM_ERR_NO_VMM: return "the device has no virtual-memory support";
    case HBM__SIM_ERR_ALIGN: return "size is not a multiple of the allocation granularity";
    case HBM__SIM_ERR_BAD_RANGE:
        return "address range is not inside one reservation, misaligned, or not mapped (a copy: not inside live "
               "memory at both ends)";
    case HBM__SIM_ERR_BAD_HANDLE: return "no such physical handle (released, or of another device)";
    case HBM__SIM_ERR_STILL_MAPPED: return "range or handle is still mapped";
    case HBM__SIM_ERR_BAD_EVENT: return "no such event (destroyed, or of another device)";
    case HBM__SIM_ERR_BAD_STREAM: return "unknown stream (the sim runs with streams=strict)";
    case HBM__SIM_ERR_CAPTURE: return "operation not permitted when stream is capturing (graph capture)";
    default: return "unknown sim error";
    }
}

static int sim_capture_mode(void *ctx, int device, int *mode)
{
    (void)ctx;
    (void)device;
    if (*mode < HBM__CAPTURE_MODE_GLOBAL || *mode > HBM__CAPTURE_MODE_RELAXED)
        return HBM__SIM_ERR_INJECTED;
    int prev = sim_thread_mode;
    sim_thread_mode = *mode;
    *mode = prev;
    return 0;
}

static uint64_t sim_cost_ns(void *ctx, hbm__op op, size_t size)
{
    sim *s = ctx;
    return s->cost_base_ns[op] + (uint64_t)((double)s->cost_per_gib_ns[op] * (double)size / (double)HBM__GiB);
}

static void sim_close(void *ctx)
{
    sim *s = ctx;
    for (hbm__rb *n = hbm__rb_first(s->live); n && s->host_backed; n = hbm__rb_next(n))
        free((void *)((sim_alloc *)n)->addr);
    for (sim_node_block *b = s->node_blocks, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    for (int d = 0; d < s->ndev; d++)
        hbm__ranges_clear(&s->dev[d].free);
    for (size_t i = 0; i < s->nresv; i++) {
        if (s->host_backed)
            munmap((void *)s->resv[i].va, s->resv[i].size);
        resv_free_pages(&s->resv[i]);
    }
    free(s->resv);
    for (size_t i = 0; i < s->nhandles; i++)
        if (s->handles[i].live && s->handles[i].fd >= 0)
            close(s->handles[i].fd);
    for (size_t i = 0; s->host_backed && i < s->nhosts; i++)
        free((void *)s->hosts[i].p);
    free(s->hosts);
    free(s->handles);
    free(s->streams);
    free(s->stream_index);
    free(s->events);
    hbm__fork_untrack(&s->lock);
    pthread_cond_destroy(&s->proc_cv);
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
    .vmm_reserve = sim_reserve,
    .vmm_unreserve = sim_unreserve,
    .vmm_create = sim_create,
    .vmm_release = sim_release,
    .vmm_map = sim_map,
    .vmm_unmap = sim_unmap,
    .vmm_access = sim_access,
    .stream_sync = sim_sync,
    .event_create = sim_event_create,
    .event_destroy = sim_event_destroy,
    .event_record = sim_event_record,
    .event_query = sim_event_query,
    .event_sync = sim_event_sync,
    .stream_check = sim_stream_check,
    .capture_mode = sim_capture_mode,
    .host_alloc = sim_host_alloc,
    .host_free = sim_host_free,
    .copy_d2h = sim_copy_d2h,
    .copy_h2d = sim_copy_h2d,
    .proc_mem = sim_proc_mem,
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

/* "22.0.3" -> 22000003 (major x 1e6 + minor x 1e3 + patch); -1 when malformed. */
static long parse_version(const char *v)
{
    long part[3] = {0, 0, 0};
    int k = 0;
    for (const char *p = v; *p; p++) {
        if (*p == '.') {
            if (++k > 2)
                return -1;
        } else if (*p >= '0' && *p <= '9') {
            part[k] = part[k] * 10 + (*p - '0');
            if (part[k] > 999)
                return -1;
        } else {
            return -1;
        }
    }
    return part[0] * 1000000 + part[1] * 1000 + part[2];
}

static int sim_set(sim *s, const char *key, const char *val, size_t *capacity, size_t *others, size_t *context,
                   size_t *driver, hbm__backend_caps *caps, char *err, size_t errlen)
{
    uint64_t n;
    if (!strcmp(key, "driver")) {
        if (hbm__parse_size(val, driver)) {
            snprintf(err, errlen, "sim: driver '%s' must be a size (memory no process is charged with)", val);
            return -1;
        }
        return 0;
    }
    if (!strcmp(key, "context")) {
        if (hbm__parse_size(val, context)) {
            snprintf(err, errlen, "sim: context '%s' must be a size (this process's memory outside hbmalloc)", val);
            return -1;
        }
        return 0;
    }
    if (!strcmp(key, "processes")) {
        if (strcmp(val, "on") && strcmp(val, "off")) {
            snprintf(err, errlen, "sim: processes '%s' must be 'on' or 'off'", val);
            return -1;
        }
        s->no_processes = !strcmp(val, "off");
        return 0;
    }
    if (!strcmp(key, "others_pid")) {
        if (hbm__parse_u64(val, &n) || n == 0 || n > INT32_MAX) {
            snprintf(err, errlen, "sim: others_pid '%s' must be a process id (1 to 2^31-1)", val);
            return -1;
        }
        s->others_pid = (int64_t)n;
        return 0;
    }
    if (!strcmp(key, "vmm")) {
        if (strcmp(val, "on") && strcmp(val, "off")) {
            snprintf(err, errlen, "sim: vmm '%s' must be 'on' or 'off'", val);
            return -1;
        }
        s->vmm = !strcmp(val, "on");
        s->vmm_asked = s->vmm;
        if (!s->vmm)
            snprintf(caps->vmm_why_not, sizeof caps->vmm_why_not,
                     "the device reports no virtual-memory support (sim vmm=off)");
        return 0;
    }
    if (!strcmp(key, "firmware")) {
        long v = parse_version(val);
        if (v < 0) {
            snprintf(err, errlen, "sim: firmware '%s' must be a version like 23.0.3", val);
            return -1;
        }
        snprintf(caps->version, sizeof caps->version, "firmware %s", val);
        /* Ascend documents HDK >= 23.0.0 for the virtual-memory API behind
         * expandable segments; older firmware answers the probe with 207000
         * ACL_ERROR_RT_FEATURE_NOT_SUPPORT. The sim behaves the same way. */
        if (v < 23000000) {
            s->vmm = 0;
            snprintf(caps->vmm_why_not, sizeof caps->vmm_why_not,
                     "firmware %s predates virtual-memory support (Ascend HDK >= 23.0.0 is required; the runtime "
                     "answers the probe with 207000 ACL_ERROR_RT_FEATURE_NOT_SUPPORT)",
                     val);
        }
        return 0;
    }
    if (!strcmp(key, "streams")) {
        if (strcmp(val, "auto") && strcmp(val, "strict")) {
            snprintf(err, errlen, "sim: streams '%s' must be 'auto' or 'strict'", val);
            return -1;
        }
        s->strict_streams = !strcmp(val, "strict");
        return 0;
    }
    if (!strcmp(key, "granularity")) {
        if (hbm__parse_size(val, &s->granularity) || s->granularity < 4096 || (s->granularity & (s->granularity - 1))) {
            snprintf(err, errlen, "sim: granularity '%s' must be a power of two >= 4KiB (e.g. 2MiB)", val);
            return -1;
        }
        return 0;
    }
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
        static const char *cost_keys[HBM__OP_KINDS] = {
            "malloc_us",  "free_us",      "info_us",     "reserve_us", "unreserve_us", "create_us", "release_us",
            "map_us",     "unmap_us",     "access_us",   "sync_us",    "event_us",     "query_us",  "evsync_us",
            "devsync_us", "hostalloc_us", "hostfree_us", "d2h_us",     "h2d_us"};
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
            hbm__sim_fault f = {
                .kind = -1, .nth = n, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
            hbm__sim_add_fault(s, &f);
            return 0;
        }
        snprintf(err, errlen,
                 "sim: unknown option '%s' (known: capacity, others, context, driver, others_pid, processes, memory, "
                 "devices, dialect, pad, vmm, firmware, granularity, streams, <call>_us, <call>_us_per_gib, "
                 "fail_nth)",
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
    pthread_cond_init(&s->proc_cv, NULL);
    if (hbm__fork_track(&s->lock, HBM__FORK_BACKEND)) {
        pthread_cond_destroy(&s->proc_cv);
        pthread_mutex_destroy(&s->lock);
        free(s);
        snprintf(err, errlen, "sim: out of host memory");
        return HBM_ERR_NOMEM;
    }
    s->ndev = 1;
    /* Cost model defaults: placeholders of the right order for a driver
     * allocation and free; set them from measurements of your device. */
    s->cost_base_ns[HBM__OP_MALLOC] = 20000;
    s->cost_base_ns[HBM__OP_FREE] = 10000;
    s->cost_base_ns[HBM__OP_INFO] = 1000;
    s->cost_base_ns[HBM__OP_RESERVE] = 5000;
    s->cost_base_ns[HBM__OP_UNRESERVE] = 5000;
    s->cost_base_ns[HBM__OP_CREATE] = 10000;
    s->cost_base_ns[HBM__OP_RELEASE] = 5000;
    s->cost_base_ns[HBM__OP_MAP] = 2000;
    s->cost_base_ns[HBM__OP_UNMAP] = 5000;
    s->cost_base_ns[HBM__OP_ACCESS] = 2000;
    s->cost_base_ns[HBM__OP_SYNC] = 1000;
    s->cost_base_ns[HBM__OP_EVENT] = 1000;
    s->cost_base_ns[HBM__OP_QUERY] = 500;
    s->cost_base_ns[HBM__OP_EVSYNC] = 1000;
    /* A sleeping pool's backup: pinning host memory costs about 0.3 s per GiB (cudaHostAlloc touches and locks
     * every page), unpinning a third of that; copies at PCIe 5 x16 speed, about 43 GB/s (25 ms per GiB). */
    s->cost_base_ns[HBM__OP_HOST_ALLOC] = 20000;
    s->cost_per_gib_ns[HBM__OP_HOST_ALLOC] = 300000000;
    s->cost_base_ns[HBM__OP_HOST_FREE] = 10000;
    s->cost_per_gib_ns[HBM__OP_HOST_FREE] = 100000000;
    s->cost_base_ns[HBM__OP_COPY_D2H] = 10000;
    s->cost_per_gib_ns[HBM__OP_COPY_D2H] = 25000000;
    s->cost_base_ns[HBM__OP_COPY_H2D] = 10000;
    s->cost_per_gib_ns[HBM__OP_COPY_H2D] = 25000000;
    s->vmm = 1;
    s->granularity = 2 * HBM__MiB;
    b->caps.device_count = 1;
    b->caps.dialect = HBM_DIALECT_CUDA;
    b->caps.request_pad = 0;
    b->caps.modelled_cost = 1;
    size_t capacity = 80 * HBM__GiB, others = 0, context = 0, driver = 0;
    s->others_pid = SIM_OTHERS_PID;

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
        if (sim_set(s, tok, eq + 1, &capacity, &others, &context, &driver, &b->caps, err, errlen)) {
            sim_close(s);
            return HBM_ERR_INVALID;
        }
    }
    b->caps.device_count = s->ndev;
    if (s->vmm && s->host_backed && !s->vmm_asked) {
        s->vmm = 0;
        snprintf(b->caps.vmm_why_not, sizeof b->caps.vmm_why_not,
                 "the host-backed simulated device (memory=host) has no virtual memory unless vmm=on is given");
    }
    b->caps.has_vmm = s->vmm;
    b->caps.host_copies = 1;
    b->caps.host_readable = s->host_backed; /* address-only: a token no one reads */
    b->caps.vmm_granularity = s->granularity;
    if (!b->caps.version[0])
        snprintf(b->caps.version, sizeof b->caps.version, "simulated device");
    for (int d = 0; d < s->ndev; d++) {
        sim_dev *dev = &s->dev[d];
        dev->capacity = capacity;
        dev->others = others + context + driver;
        dev->context = context;
        dev->driver = driver;
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

void *hbm__sim_ctx(hbm_backend *b) { return b && b->ops == &sim_ops ? b->ctx : NULL; }

int hbm__sim_hold_processes(void *ctx, int hold)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    s->proc_hold = hold;
    int waiting = s->proc_waiting;
    pthread_cond_broadcast(&s->proc_cv);
    pthread_mutex_unlock(&s->lock);
    return waiting;
}

int hbm__sim_set_outside(void *ctx, int device, size_t context, size_t others)
{
    sim *s = ctx;
    int rc = -1;
    pthread_mutex_lock(&s->lock);
    if (device >= 0 && device < s->ndev) {
        s->dev[device].others = others + context + s->dev[device].driver;
        s->dev[device].context = context;
        rc = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
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
    out->handle_slots = s->nhandles;
    pthread_mutex_unlock(&s->lock);
}

int hbm__sim_stream_create(void *ctx, int device, hbm_stream stream)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int strict = s->strict_streams;
    s->strict_streams = 0;
    int rc = stream_get(s, device, stream, 1) ? 0 : -1;
    s->strict_streams = strict;
    pthread_mutex_unlock(&s->lock);
    return rc;
}

int hbm__sim_stream_hold(void *ctx, int device, hbm_stream stream, int hold)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    sim_stream *st = stream_get(s, device, stream, 1);
    if (st) {
        st->held = hold;
        if (!hold)
            st->completed = st->submitted;
    }
    pthread_mutex_unlock(&s->lock);
    return st ? 0 : -1;
}

int hbm__sim_stream_pending(void *ctx, int device, hbm_stream stream)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    sim_stream *st = stream_get(s, device, stream, 0);
    int n = st ? (int)(st->submitted - st->completed) : 0;
    pthread_mutex_unlock(&s->lock);
    return n;
}

int hbm__sim_stream_capture(void *ctx, int device, hbm_stream stream, int capturing)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    sim_stream *st = stream_get(s, device, stream, 1);
    if (st && st->capturing != !!capturing) {
        st->capturing = !!capturing;
        s->ncapturing += capturing ? 1 : -1;
    }
    pthread_mutex_unlock(&s->lock);
    return st ? 0 : -1;
}

int hbm__sim_is_host_backed(void *ctx) { return ((sim *)ctx)->host_backed; }

int hbm__sim_host_scribble(void *ctx, size_t nth, size_t offset)
{
    sim *s = ctx;
    pthread_mutex_lock(&s->lock);
    int rc = -1;
    if (s->host_backed && nth < s->nhosts && offset < s->hosts[nth].size) {
        ((unsigned char *)s->hosts[nth].p)[offset] ^= 0x5a;
        rc = 0;
    }
    pthread_mutex_unlock(&s->lock);
    return rc;
}
