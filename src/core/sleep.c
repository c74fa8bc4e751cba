/*
 * sleep.c: pools that sleep and wake (docs/SLEEP.md).
 *
 * Owns a tagged private pool's sleep: its tag, whether it keeps a backup, the
 * backup itself (runs of live bytes in pinned host buffers) and the order of a
 * sleep and a wake: wait for everything that could still touch the pool, copy,
 * give the pages back; map them again, copy back. The pages themselves are
 * expandable.c's (hbm__expand_sleep, hbm__expand_wake); this file never maps or
 * unmaps, and never touches a block: a sleeping pool keeps its reservations
 * and every block where it was, so each live block keeps its address.
 *
 * Why a tagged pool is always made of pages: an address survives only where
 * the physical memory under it can be taken away and put back, which is what
 * virtual memory (expandable segments) gives; a device without it cannot keep
 * the address, and tagging is refused there with the reason (docs/SLEEP.md
 * argues against a mode that relocates). Why an allocation into a sleeping
 * pool is refused rather than waking it: a wake maps the whole pool back and
 * copies gigabytes, which must not hide in an allocation of the other phase
 * (it would also take back the memory the sleep was for). Frees work.
 *
 * Runs with a->lock held, except where a sleep or a wake waits for a
 * framework's queue (hbm__dev_quiesce_open) or calls the caller's progress
 * callback: then the pool is in a transitional state (allocations into it are
 * refused, another sleep or wake of it too) and holds a use, so that it cannot
 * be deleted meanwhile. The queue is never waited for with the lock held: the
 * copies go to the runtime's streams directly (the sleep's first wait covered
 * every launch on the pool's memory), and the pages go only after an open wait
 * made after the last callback (docs/CONTRACTS.md, "Waiting with the lock open").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/engine.h"
#include "core/segments.h"
#include "core/history.h"
#include "core/labels.h"
#include "core/events.h"
#include "core/mempools.h"
#include "core/sleep.h"
#include "core/sleep_file.h"
#include "core/resident.h"
#include "core/expandable.h"
#include "core/device.h"
#include "core/pool.h"
#include "util/util.h"

#define HBM__SLEEP_CHUNK ((size_t)64 << 20) /* a backup piece: one pinned buffer, one copy, one progress call */

/* A piece of the backup: live bytes at addr on the device, at host in one of the buffers. */
typedef struct backup_run {
    uintptr_t addr;
    size_t size;
    unsigned char *host;
    hbm_stream stream; /* the segment's: the copy is queued there */
    size_t buf;        /* which buffer (with a file: which piece; its buffer is buf % 2) */
    uint64_t sum;      /* the piece's checksum once copied (hbm_sleep_opts.checksum) */
    uint64_t off;      /* with a file: where its bytes are in it */
} backup_run;

typedef struct host_buf {
    void *p;
    size_t size;
} host_buf;

typedef struct hbm__sleep hbm__sleep;
struct hbm__sleep {
    hbm_label tag_label; /* the tag as a label: history entries of its pages carry it (0: the label table was full) */
    bool backup;
    backup_run *runs;
    size_t nruns, cap_runs;
    host_buf *bufs; /* pinned host memory: the backup, or kept from the last one for the next */
    size_t nbufs, cap_bufs;
    size_t backup_bytes;
    hbm__bfile file; /* the backup's file (hbm_sleep_opts.backup_dir); not open: in pinned memory */
    size_t nstage;   /* with a file: the buffers its pieces go through in turn (1 or 2) */
    uint64_t sleeps, wakes;
    uint64_t sleep_cost[3], wake_cost[3]; /* the last sleep's and wake's: wall ns, device ns, device calls */
    bool kept;                            /* the last sleep kept a backup (its choice, or the tag's) */
    bool summed;                          /* its runs have checksums, checked by the wake */
    uint32_t pins;                        /* hbm_pool_pin minus hbm_pool_unpin: while > 0 it does not sleep */
    char pin_why[160];                    /* the latest pin's reason */
    size_t rec_bytes;                     /* hbm__sleep_record's sum of its pages asleep */
    hbm__block *cur;                      /* copy_in's place in the blocks (NULL: from a segment's head) */
};

static uint64_t wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t calls_of(const hbm_device_counters *c)
{
    return c->malloc_calls + c->free_calls + c->info_calls + c->map_calls + c->unmap_calls + c->vmm_calls +
           c->sync_calls + c->event_calls + c->host_calls + c->copy_calls;
}

static bool in_pool(const hbm__segment *seg, const hbm__mempool *m)
{
    return seg->pool == &m->small || seg->pool == &m->large;
}

static const char *tag_of(const hbm__mempool *m) { return m->tag; }

static const char *state_name(uint8_t s)
{
    static const char *names[] = {"awake", "asleep", "being put to sleep", "being woken"};
    return s < 4 ? names[s] : "in an unknown state";
}

hbm_status hbm__sleep_refuse(hbm_allocator *a, const hbm__mempool *m)
{
    hbm__set_error(a,
                   "private pool %llu ('%s') is %s: no allocation goes into it until it is woken "
                   "(hbm_pool_wake; hbmalloc.torch.wake('%s')); its blocks must not be touched meanwhile",
                   (unsigned long long)m->id, tag_of(m), state_name(m->sleep_state), tag_of(m));
    return HBM_ERR_ASLEEP;
}

/* The pool named and tagged, or NULL with the error set. A pool released (use count 0) is still its tag's while it
 * exists, that is while it holds memory: a graph deleted whose output is still held keeps its pool's blocks, which
 * sleep and wake with the tag (and must wake, to be restored); an empty_cache reaps it once it holds nothing. */
static hbm__mempool *tagged_pool(hbm_allocator *a, hbm_mempool id, const char *op)
{
    hbm__mempool *m = hbm__mempool_find(a, id);
    if (!m)
        hbm__set_error(a, "%s: private pool %llu does not exist (or was released and emptied already)", op,
                       (unsigned long long)id);
    else if (!m->sl)
        hbm__set_error(a,
                       "%s: private pool %llu has no tag: only a tagged pool sleeps (hbm_pool_tag before its "
                       "first allocation; hbmalloc.torch.pool(tag))",
                       op, (unsigned long long)id);
    else
        return m;
    return NULL;
}

/* The pool a sleep or a wake (op) may work on: tagged, held, not being put to sleep or woken by another thread, and
 * no graph capture under way (what the capture forbids, and the verb, in `refusal`). NULL with the status in *rc. */
static hbm__mempool *pool_for(hbm_allocator *a, hbm_mempool id, const char *op, const char *refusal, hbm_status *rc)
{
    hbm__mempool *m = tagged_pool(a, id, op);
    *rc = m ? HBM_OK : HBM_ERR_INVALID;
    if (m && (m->sleep_state == HBM_POOL_FALLING_ASLEEP || m->sleep_state == HBM_POOL_WAKING)) {
        hbm__set_error(a, "%s: pool '%s' is %s by another thread", op, tag_of(m), state_name(m->sleep_state));
        *rc = HBM_ERR_INVALID;
    } else if (m && a->ncaptures) {
        hbm__set_error(a,
                       "%s: pool '%s' on %s device %d during a graph capture: %s it before the capture begins or "
                       "after it ends",
                       op, tag_of(m), hbm__dev_name(a), a->device, refusal);
        *rc = HBM_ERR_CAPTURE;
    }
    return *rc == HBM_OK ? m : NULL;
}

/* ---- tagging ---- */

hbm_status hbm_pool_tag(hbm_allocator *a, hbm_mempool id, const char *tag, int backup)
{
    if (!a)
        return HBM_ERR_INVALID;
    const char *bad = hbm__tag_invalid(tag);
    if (bad) {
        hbm__lock(a);
        hbm__set_error(a, "hbm_pool_tag: %s", bad);
        hbm__unlock(a);
        return HBM_ERR_INVALID;
    }
    hbm__lock(a);
    hbm_status rc = HBM_ERR_INVALID;
    hbm__mempool *m = hbm__mempool_find(a, id);
    bool plain = false, holds = false;
    for (hbm__segment *seg = hbm__segments_first(a); m && seg; seg = hbm__segments_next(seg)) {
        plain |= in_pool(seg, m) && !seg->expandable;
        holds |= in_pool(seg, m);
    }
    bool same = m && m->sl && !strcmp(m->tag, tag) && m->sl->backup == (backup != 0);
    if (a->vmm < 0)
        a->vmm = hbm__dev_vmm(a, a->vmm_why, sizeof a->vmm_why);
    if (!m || m->use_count == 0) {
        hbm__set_error(a, "hbm_pool_tag: private pool %llu does not exist (or was released already)",
                       (unsigned long long)id);
    } else if (same) {
        rc = HBM_OK; /* tagged so already */
    } else if (strlen(tag) >= sizeof m->tag) {
        hbm__set_error(a, "hbm_pool_tag: tag '%.40s...' is longer than %zu bytes", tag, sizeof m->tag - 1);
    } else if (a->vmm != 1) {
        hbm__set_error(a,
                       "pool '%s' cannot sleep on %s device %d: %s. A sleeping pool keeps every tensor's address "
                       "only by unmapping the memory under it and mapping new memory there at wake, which needs "
                       "virtual memory (the API behind expandable segments). Fix: on Ascend, CANN 7.0.0 or later "
                       "on an HDK (driver and firmware) of 23.0.0 or later (see `npu-smi info`, `hbmalloc doctor`); "
                       "on CUDA, driver 10.2 or "
                       "later on a device that reports VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED. Without it, free the "
                       "tensors and empty_cache() instead, and re-create them (docs/SLEEP.md)",
                       tag, hbm__dev_name(a), a->device, a->vmm_why[0] ? a->vmm_why : "no virtual memory");
    } else if (backup && !hbm__dev_can_copy(a)) {
        hbm__set_error(a,
                       "pool '%s': backup needs pinned host memory and copies on a stream, which the %s backend "
                       "does not offer here (cuMemHostAlloc / aclrtMallocHost and the async copies); tag it "
                       "without backup (its contents are then undefined after a wake)",
                       tag, hbm__dev_name(a));
    } else if (plain) {
        hbm__set_error(a,
                       "hbm_pool_tag: private pool %llu already holds whole segments (made before it was tagged, "
                       "with expandable segments off): tag a pool before its first allocation",
                       (unsigned long long)id);
    } else if (holds && !same) { /* one model: a tag and its backup default are fixed at the first allocation */
        if (m->sl)
            hbm__set_error(a,
                           "hbm_pool_tag: pool '%s' (backup %s) already holds memory: its tag and its backup "
                           "default were fixed at its first allocation. Choose backup or discard at each sleep "
                           "instead (hbm_sleep_opts.backup; hbmalloc.torch.sleep(tag, backup=...))",
                           m->tag, m->sl->backup ? "on" : "off");
        else
            hbm__set_error(a,
                           "hbm_pool_tag: private pool %llu already holds memory: tag a pool before its first "
                           "allocation",
                           (unsigned long long)id);
    } else if (m->sleep_state) {
        hbm__set_error(a, "hbm_pool_tag: pool '%s' is %s: its tag and backup change only while it is awake", tag_of(m),
                       state_name(m->sleep_state));
    } else if (!m->sl && !(m->sl = calloc(1, sizeof *m->sl))) {
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        rc = HBM_ERR_NOMEM;
    } else {
        snprintf(m->tag, sizeof m->tag, "%s", tag);
        m->sl->backup = backup != 0;
        if (hbm__label_intern(&a->labels, tag, &m->sl->tag_label) != HBM_OK)
            m->sl->tag_label = 0; /* the history's entries then go without the tag; the pool sleeps all the same */
        rc = HBM_OK;
    }
    hbm__unlock(a);
    return rc;
}

/* ---- the backup ---- */

static void free_bufs(hbm_allocator *a, hbm__sleep *sl, size_t from)
{
    while (sl->nbufs > from) {
        host_buf *b = &sl->bufs[sl->nbufs - 1];
        if (hbm__dev_host_free(a, b->p, b->size) != HBM_OK)
            break; /* kept: tried again when the pool goes */
        sl->nbufs--;
    }
}

static void drop_backup(hbm__sleep *sl)
{
    sl->nruns = 0;
    sl->backup_bytes = 0;
    sl->summed = false;
    hbm__bfile_close(&sl->file);
}

/* A checksum of n bytes of host memory, 8 at a time: each word multiplied into the state and the state rotated, so
 * that a changed byte, a moved word or a swapped pair of words changes it (not a cryptographic hash: it catches
 * stray writes and torn copies, not an adversary). About 4 GB/s on one core. */
static uint64_t sum_of(const unsigned char *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ (w * 0xff51afd7ed558ccdull)) * 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 29;
    }
    for (; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h ^ (h >> 32);
}

/* The first run whose bytes no longer match their checksum, or SIZE_MAX. */
static size_t first_changed(const hbm__sleep *sl)
{
    for (size_t i = 0; i < sl->nruns; i++)
        if (sum_of(sl->runs[i].host, sl->runs[i].size) != sl->runs[i].sum)
            return i;
    return SIZE_MAX;
}

static hbm_status add_run(hbm_allocator *a, hbm__sleep *sl, backup_run r)
{
    if (hbm__grow((void **)&sl->runs, &sl->cap_runs, sl->nruns + 1, sizeof *sl->runs)) {
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        return HBM_ERR_NOMEM;
    }
    sl->runs[sl->nruns++] = r;
    return HBM_OK;
}

/* The pool's live bytes as runs (adjacent live blocks joined, in address order), cut into pieces that each lie in
 * one pinned buffer: the buffers kept from the last backup first, new ones of `chunk` bytes (the last one smaller)
 * after them; buffers left over are freed. The host pointers are set; nothing is copied yet. With a folder (a
 * backup in a file), the pieces are `chunk` bytes of the file each, staged in turn through two pinned buffers of
 * that size (one when the whole fits in one piece), and the file's room is taken now. */
static hbm_status plan_backup(hbm_allocator *a, hbm__mempool *m, size_t chunk, const char *dir)
{
    hbm__sleep *sl = m->sl;
    drop_backup(sl);
    size_t total = 0, covered = 0, keep = 0;
    for (hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg))
        for (hbm__block *b = in_pool(seg, m) ? seg->head : NULL; b; b = b->next)
            total += b->allocated ? b->size : 0;
    size_t stage = total < chunk ? total : chunk, nstage = total > chunk ? 2 : 1;
    if (!total)
        dir = NULL; /* nothing to keep: no file */
    if (dir) {
        hbm_status rc = hbm__bfile_open(a, &sl->file, dir, total);
        if (rc != HBM_OK)
            return rc;
        sl->nstage = nstage;
        while (keep < sl->nbufs && keep < nstage && sl->bufs[keep].size == stage)
            keep++; /* a larger one would hold the pinned memory the file is for */
        covered = keep * stage;
        total = nstage * stage; /* the pinned memory wanted */
    } else {
        while (keep < sl->nbufs && covered < total)
            covered += sl->bufs[keep++].size;
    }
    free_bufs(a, sl, keep);
    if (dir && sl->nbufs != keep)
        return HBM_ERR_BACKEND; /* a buffer not freed (its message set) would be taken for a piece's */
    while (covered < total) {
        size_t want = dir ? stage : total - covered < chunk ? total - covered : chunk;
        void *p = NULL;
        if (hbm__grow((void **)&sl->bufs, &sl->cap_bufs, sl->nbufs + 1, sizeof *sl->bufs)) {
            hbm__set_error(a, "out of host memory for allocator bookkeeping");
            return HBM_ERR_NOMEM;
        }
        hbm_status rc = hbm__dev_host_alloc(a, want, &p);
        if (rc != HBM_OK)
            return rc; /* the buffers made so far are kept for the next try */
        sl->bufs[sl->nbufs++] = (host_buf){p, want};
        covered += want;
    }
    size_t buf = 0, used = 0; /* the buffer (with a file, the piece) being filled and how much of it */
    for (hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg)) {
        for (hbm__block *b = in_pool(seg, m) ? seg->head : NULL; b;) {
            if (!b->allocated) {
                b = b->next;
                continue;
            }
            uintptr_t lo = b->addr, hi = b->addr + b->size;
            for (b = b->next; b && b->allocated; b = b->next)
                hi = b->addr + b->size;
            while (lo < hi) {
                const host_buf *hb = &sl->bufs[dir ? buf % nstage : buf];
                size_t size = dir ? stage : hb->size, room = size - used, take = room < hi - lo ? room : hi - lo;
                hbm_status rc = add_run(
                    a, sl,
                    (backup_run){lo, take, (unsigned char *)hb->p + used, seg->stream, buf, 0, sl->backup_bytes});
                if (rc != HBM_OK) {
                    drop_backup(sl);
                    return rc;
                }
                lo += take;
                sl->backup_bytes += take;
                if ((used += take) == size)
                    buf++, used = 0;
            }
        }
    }
    return HBM_OK;
}

/* Wait for the streams the runs [from, to) were queued on (the copies are device work): each once, in O(runs) (a
 * pool of small blocks has thousands of runs in a buffer, on a handful of streams; past SEEN of them one may be
 * waited for twice). */
static hbm_status sync_runs(hbm_allocator *a, const hbm__sleep *sl, size_t from, size_t to)
{
    enum { SEEN = 16 };
    hbm_stream seen[SEEN];
    size_t nseen = 0;
    hbm_status rc = HBM_OK;
    for (size_t i = from; i < to && rc == HBM_OK; i++) {
        hbm_stream s = sl->runs[i].stream;
        size_t k = 0;
        while (k < nseen && seen[k] != s)
            k++;
        if (k < nseen)
            continue;
        if (nseen < SEEN)
            seen[nseen++] = s;
        rc = hbm__dev_sync(a, s);
    }
    return rc;
}

/* The caller's progress callback, with the lock released (it may take the GIL, which another thread holds while
 * it waits for this lock: torch's allocation path). */
static void progress(hbm_allocator *a, hbm__sleep *sl, const hbm_sleep_opts *o, uint64_t done, uint64_t total)
{
    if (!o->progress)
        return;
    sl->cur = NULL; /* a free meanwhile may merge the block it points to */
    hbm__unlock(a);
    o->progress(o->ctx, done, total);
    hbm__lock(a);
}

/* A piece of the backup in flight: runs [i, j), and the event recorded after their copies when they are all on
 * one stream (else their streams are waited for). */
typedef struct piece {
    size_t i, j;
    uint64_t ev;
    bool has_ev;
} piece;

static hbm_status piece_wait(hbm_allocator *a, const hbm__sleep *sl, const piece *p)
{
    return p->has_ev ? hbm__dev_event_sync(a, p->ev) : sync_runs(a, sl, p->i, p->j);
}

/* A pass over the backup: copy queues one run's copy; with a file, `before` reads a piece's runs [i, j) into their
 * buffer ahead of their copies (a wake) and `after` writes them out once their copies are done (a sleep). */
typedef struct pass {
    hbm_status (*copy)(hbm_allocator *, hbm__mempool *, const backup_run *);
    hbm_status (*before)(hbm_allocator *, hbm__sleep *, const hbm_sleep_opts *, size_t, size_t);
    hbm_status (*after)(hbm_allocator *, hbm__sleep *, const hbm_sleep_opts *, size_t, size_t);
} pass;

/* A piece queued earlier, finished: waited for, written to the file (a sleep's), counted and reported (the lock
 * open in the callback). rc: the pass's status so far (a failed pass still waits, and reports nothing). The piece is
 * empty after. */
static hbm_status piece_done(hbm_allocator *a, hbm__sleep *sl, const hbm_sleep_opts *o, const pass *ps, piece *p,
                             hbm_status rc, uint64_t *done)
{
    if (p->j <= p->i)
        return rc;
    hbm_status rs = piece_wait(a, sl, p);
    if (rc == HBM_OK && (rc = rs) == HBM_OK && sl->file.open && ps->after)
        rc = ps->after(a, sl, o, p->i, p->j);
    if (rc == HBM_OK) {
        for (size_t r = p->i; r < p->j; r++)
            *done += sl->runs[r].size;
        progress(a, sl, o, *done, sl->backup_bytes); /* the lock open: the next piece's copies run */
    }
    p->i = p->j = 0;
    return rc;
}

/* copy on every run, in address order, without a wait per piece. Without a progress callback or a file every copy
 * is queued and each stream waited for once at the end: the pieces follow each other on the device. Otherwise a
 * piece's copies are queued, then the piece before it is waited for (an event recorded after its copies; two events,
 * used in turn), written to the file and reported: one piece in flight while the next is queued. A file's pieces go
 * through two buffers in turn (piece n in buffer n % 2); when the piece before uses the same buffer (pieces between
 * them were dropped with a segment given back while asleep, hbm__sleep_forget), it is finished first, so that a
 * buffer is never refilled under a copy. *done: the bytes of the pieces done. A failure: what was queued is waited
 * for first (its buffers must not be reused under the copies). */
static hbm_status each_buffer(hbm_allocator *a, hbm__mempool *m, const hbm_sleep_opts *o, const pass *ps,
                              uint64_t *done)
{
    hbm__sleep *sl = m->sl;
    hbm_status rc = HBM_OK;
    size_t i = 0;
    *done = 0;
    sl->cur = NULL;
    if (!o->progress && !sl->file.open) {
        for (; i < sl->nruns && rc == HBM_OK; i++)
            rc = ps->copy(a, m, &sl->runs[i]);
        hbm_status rs = sync_runs(a, sl, 0, i);
        if (rc == HBM_OK && (rc = rs) == HBM_OK)
            *done = sl->backup_bytes;
        return rc;
    }
    uint64_t ev[2];
    bool made[2] = {false, false};
    piece prev = {0, 0, 0, false};
    for (int k = 0; rc == HBM_OK && (i < sl->nruns || prev.j > prev.i); k ^= 1) {
        piece cur = {i, i, 0, false};
        size_t end = i;
        while (end < sl->nruns && sl->runs[end].buf == sl->runs[i].buf)
            end++;
        if (end > i && sl->file.open && prev.j > prev.i &&
            sl->runs[prev.i].buf % sl->nstage == sl->runs[i].buf % sl->nstage)
            rc = piece_done(a, sl, o, ps, &prev, rc, done); /* its buffer is this piece's: free it first */
        if (rc == HBM_OK && end > i && sl->file.open && ps->before)
            rc = ps->before(a, sl, o, i, end);
        bool one = true;
        for (; cur.j < end && rc == HBM_OK; cur.j++) {
            rc = ps->copy(a, m, &sl->runs[cur.j]);
            one &= sl->runs[cur.j].stream == sl->runs[i].stream;
        }
        if (rc == HBM_OK && cur.j > i && one && (made[k] || hbm__dev_event_create(a, &ev[k]) == HBM_OK)) {
            made[k] = true; /* without events (a failed create or record) the piece's streams are waited for */
            cur.has_ev = hbm__dev_event_record(a, ev[k], sl->runs[i].stream) == HBM_OK;
            cur.ev = ev[k];
        }
        i = cur.j;
        rc = piece_done(a, sl, o, ps, &prev, rc, done);
        prev = cur;
    }
    if (rc != HBM_OK)
        (void)sync_runs(a, sl, 0, i);
    for (int k = 0; k < 2; k++)
        if (made[k])
            hbm__dev_event_destroy(a, ev[k]);
    return rc;
}

static hbm_status copy_out(hbm_allocator *a, hbm__mempool *m, const backup_run *r)
{
    (void)m;
    return hbm__dev_copy_d2h(a, r->host, r->addr, r->size, r->stream);
}

/* A piece back only where a block is still live (one freed while asleep has nothing to get back, and its pages may
 * be gone). The runs come in address order: the walk over the segment's blocks goes on from the block the last run
 * ended in (sl->cur) while the lock stayed closed, so a wake costs O(runs + blocks), not O(runs x blocks). */
static hbm_status copy_in(hbm_allocator *a, hbm__mempool *m, const backup_run *r)
{
    hbm__sleep *sl = m->sl;
    hbm_status rc = HBM_OK;
    hbm__segment *seg = hbm__segment_find(a, r->addr);
    if (seg && !in_pool(seg, m))
        seg = NULL; /* never: hbm__sleep_forget drops the runs of a segment given back */
    hbm__block *b = seg ? seg->head : NULL;
    if (seg && sl->cur && sl->cur->seg == seg && sl->cur->addr <= r->addr)
        b = sl->cur;
    for (; b && b->addr < r->addr + r->size && rc == HBM_OK; b = b->next) {
        uintptr_t lo = b->addr > r->addr ? b->addr : r->addr;
        uintptr_t hi = b->addr + b->size < r->addr + r->size ? b->addr + b->size : r->addr + r->size;
        if (b->allocated && lo < hi)
            rc = hbm__dev_copy_h2d(a, lo, r->host + (lo - r->addr), hi - lo, r->stream);
        sl->cur = b; /* the next run begins in this block or after it */
    }
    return rc;
}

/* A piece's runs [i, j) lie one after the other in their buffer and in the file, with the gaps of runs dropped while
 * asleep (hbm__sleep_forget): the bytes from the first run's start to the last run's end. */
static size_t piece_bytes(const hbm__sleep *sl, size_t i, size_t j)
{
    return (size_t)(sl->runs[j - 1].off + sl->runs[j - 1].size - sl->runs[i].off);
}

static hbm_status piece_out(hbm_allocator *a, hbm__sleep *sl, const hbm_sleep_opts *o, size_t i, size_t j)
{
    if (o->checksum)
        for (size_t r = i; r < j; r++)
            sl->runs[r].sum = sum_of(sl->runs[r].host, sl->runs[r].size);
    return hbm__bfile_write(a, &sl->file, sl->runs[i].off, sl->runs[i].host, piece_bytes(sl, i, j));
}

static hbm_status piece_in(hbm_allocator *a, hbm__sleep *sl, const hbm_sleep_opts *o, size_t i, size_t j)
{
    (void)o;
    hbm_status rc = hbm__bfile_read(a, &sl->file, sl->runs[i].off, sl->runs[i].host, piece_bytes(sl, i, j));
    for (size_t r = i; r < j && rc == HBM_OK && sl->summed; r++) {
        if (sum_of(sl->runs[r].host, sl->runs[r].size) == sl->runs[r].sum)
            continue;
        char s_bad[32];
        hbm__format_size(sl->runs[r].size, s_bad, sizeof s_bad);
        hbm__set_error(a,
                       "its backup changed in its file since the sleep (the piece of %s for device address %p, piece "
                       "%zu of %zu, at offset %llu of the file in %s, no longer matches its checksum: the disk or "
                       "another writer of the file). Wake it without the restore (hbm_sleep_opts.no_restore; "
                       "hbmalloc.torch.wake(tag, restore=False)) and load its contents again",
                       s_bad, (void *)sl->runs[r].addr, r + 1, sl->nruns, (unsigned long long)sl->runs[r].off,
                       sl->file.dir);
        rc = HBM_ERR_CHECKSUM;
    }
    return rc;
}

static const pass backup_pass = {copy_out, NULL, piece_out}, restore_pass = {copy_in, piece_in, NULL};

/* Copy every run to host memory (or through it to the file in o->backup_dir). */
static hbm_status take_backup(hbm_allocator *a, hbm__mempool *m, const hbm_sleep_opts *o)
{
    hbm__sleep *sl = m->sl;
    uint64_t done = 0;
    hbm_status rc = plan_backup(a, m, o->chunk_bytes, o->backup_dir);
    if (rc == HBM_OK)
        rc = each_buffer(a, m, o, &backup_pass, &done);
    if (rc != HBM_OK) {
        char s_done[32], s_all[32], why[sizeof a->err];
        memcpy(why, a->err, sizeof why);
        hbm__format_size(done, s_done, sizeof s_done);
        hbm__format_size(sl->backup_bytes, s_all, sizeof s_all);
        if (!sl->nruns)
            hbm__set_error(a,
                           "pool '%s': no backup could be made (%.900s); the pool stays awake, nothing was given back",
                           m->tag, why);
        else
            hbm__set_error(a,
                           "pool '%s': the backup to %s stopped after %s of %s (%.900s); the pool stays awake, "
                           "nothing was given back",
                           m->tag, sl->file.open ? "its file" : "host memory", s_done, s_all, why);
        drop_backup(sl);
    }
    return rc;
}

/* Copy the backup back. */
static hbm_status restore_backup(hbm_allocator *a, hbm__mempool *m, const hbm_sleep_opts *o)
{
    uint64_t done;
    return each_buffer(a, m, o, &restore_pass, &done);
}

/* ---- sleep ---- */

/* Nothing may still touch the pool's memory: on a device that runs work, all of it (a framework's queue first,
 * with the lock open: hbm__dev_quiesce_open), live blocks included, not just what was freed since the last wait;
 * on the simulated device, which runs none, the streams of the pool and those its blocks were recorded on (a held
 * stream is completed). Then the frees waiting on events complete. */
static hbm_status settle(hbm_allocator *a, hbm__mempool *m)
{
    hbm_status rc = HBM_OK;
    if (hbm__dev_caps(a)->device_work) {
        a->quiet_stamp = 0;
        rc = hbm__dev_quiesce_open(a);
    } else {
        for (hbm__segment *seg = hbm__segments_first(a); seg && rc == HBM_OK; seg = hbm__segments_next(seg)) {
            if (!in_pool(seg, m))
                continue;
            rc = hbm__dev_sync(a, seg->stream);
            for (hbm__block *b = seg->head; b && rc == HBM_OK; b = b->next)
                for (uint32_t u = 0; b->allocated && b->uses && u < b->uses->n && rc == HBM_OK; u++)
                    rc = hbm__dev_sync(a, b->uses->s[u]);
        }
    }
    if (rc == HBM_OK && a->pending_events)
        rc = hbm__sync_events(a);
    return rc;
}

/* What a sleep or a wake that began at t0 with the counters d0 cost: wall time, device time, device calls. */
static void record_cost(const hbm_allocator *a, uint64_t t0, const hbm_device_counters *d0, uint64_t out[3])
{
    out[0] = wall_ns() - t0;
    out[1] = a->dev.device_ns - d0->device_ns;
    out[2] = calls_of(&a->dev) - calls_of(d0);
}

hbm_status hbm_pool_sleep(hbm_allocator *a, hbm_mempool id, const hbm_sleep_opts *opts)
{
    if (!a)
        return HBM_ERR_INVALID;
    hbm_sleep_opts o = opts ? *opts : (hbm_sleep_opts){0};
    if (!o.chunk_bytes)
        o.chunk_bytes = HBM__SLEEP_CHUNK;
    uint64_t t0 = wall_ns();
    hbm__lock(a);
    hbm_device_counters d0 = a->dev;
    hbm_status rc;
    hbm__mempool *m = pool_for(a, id, "hbm_pool_sleep",
                               "nothing was given back (sleeping waits for the device, "
                               "which would invalidate the capture); sleep",
                               &rc);
    if (!m) {
        hbm__unlock(a);
        return rc;
    }
    hbm__sleep *sl = m->sl;
    if (sl->pins) {
        hbm__set_error(a,
                       "pool '%s' is pinned (hbm_pool_pin, %u time%s): %s. Its pages were handed to a collective "
                       "library, which would keep pointing at the pages a sleep gives back (hangs or wrong results "
                       "after the wake): deregister them and hbm_pool_unpin (hbmalloc.torch.unpin) first. Nothing "
                       "was given back",
                       m->tag, sl->pins, sl->pins == 1 ? "" : "s", sl->pin_why);
        hbm__unlock(a);
        return HBM_ERR_INVALID;
    }
    bool again = m->sleep_state == HBM_POOL_ASLEEP; /* a sleep that left pages mapped: give them back now */
    bool keep = o.backup == HBM_SLEEP_BACKUP || (o.backup == HBM_SLEEP_AS_TAGGED && sl->backup);
    bool unreadable = keep && (o.checksum || o.backup_dir) && !hbm__dev_caps(a)->host_readable;
    bool no_file = o.backup_dir && !keep && !again;
    if ((unsigned)o.backup > HBM_SLEEP_DISCARD || (keep && !again && !hbm__dev_can_copy(a)) || unreadable || no_file) {
        if ((unsigned)o.backup > HBM_SLEEP_DISCARD)
            hbm__set_error(a, "hbm_pool_sleep: backup %d is none of HBM_SLEEP_AS_TAGGED, _BACKUP, _DISCARD",
                           (int)o.backup);
        else if (no_file)
            hbm__set_error(a,
                           "pool '%s': a backup folder was given (%.300s) to a sleep that keeps no backup (%s): ask "
                           "for one (HBM_SLEEP_BACKUP; backup=True) or give no folder. Nothing was given back",
                           m->tag, o.backup_dir, o.backup == HBM_SLEEP_DISCARD ? "HBM_SLEEP_DISCARD" : "tagged so");
        else if (unreadable)
            hbm__set_error(a,
                           "pool '%s': %s needs host memory the CPU can read, which the %s backend's pinned memory "
                           "is not here (the simulated device without memory=host); sleep it without. Nothing was "
                           "given back",
                           m->tag, o.checksum ? "a checksum of the backup" : "a backup in a file", hbm__dev_name(a));
        else
            hbm__set_error(a,
                           "pool '%s': a backup needs pinned host memory and copies on a stream, which the %s "
                           "backend does not offer here; sleep it with HBM_SLEEP_DISCARD (its contents are then "
                           "undefined after the wake). Nothing was given back",
                           m->tag, hbm__dev_name(a));
        hbm__unlock(a);
        return HBM_ERR_INVALID;
    }
    if (!again)
        sl->kept = keep;
    m->sleep_state = HBM_POOL_FALLING_ASLEEP;
    m->use_count++; /* not deleted while the lock is open */
    rc = settle(a, m);
    if (rc == HBM_OK && !again) { /* free pages back, empty reservations too: they hold nothing to wake */
        hbm_status rl = hbm__release_pool(a, &m->large), rs = hbm__release_pool(a, &m->small);
        rc = rl != HBM_OK ? rl : rs;
    }
    if (rc == HBM_OK && sl->kept && !again && (rc = take_backup(a, m, &o)) == HBM_OK && o.checksum) {
        for (size_t i = 0; i < sl->nruns && !sl->file.open; i++)          /* complete: each_buffer waited for them */
            sl->runs[i].sum = sum_of(sl->runs[i].host, sl->runs[i].size); /* a file's: as each piece was written */
        sl->summed = true;
    }
    size_t given = 0, held = 0;
    /* The progress callbacks opened the lock: a block freed meanwhile (other streams' work on it) is waited for
     * again before any page goes, at this safe point (with a framework's queue the lock opens; nothing decided
     * before it is read after but the pool, which its state and use keep as it was). */
    if (rc == HBM_OK)
        rc = hbm__dev_quiesce_open(a);
    if (rc == HBM_OK) {
        for (hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg)) {
            if (!in_pool(seg, m) || !seg->expandable)
                continue;
            size_t g = 0;
            hbm_status r = rc == HBM_OK ? hbm__expand_sleep(a, seg, &g) : HBM_OK;
            given += g;
            held += seg->mapped_pages * seg->page;
            if (r != HBM_OK)
                rc = r;
        }
        if (rc != HBM_OK) {
            char why[sizeof a->err], s_given[32], s_held[32];
            memcpy(why, a->err, sizeof why);
            hbm__format_size(given, s_given, sizeof s_given);
            hbm__format_size(held, s_held, sizeof s_held);
            if (given || again)
                hbm__set_error(a,
                               "pool '%s': sleeping gave back %s, but %s of its pages are still mapped (%.900s); the "
                               "pool is asleep: sleep it again to give them back, or wake it",
                               m->tag, s_given, s_held, why);
            else
                hbm__set_error(a, "pool '%s': nothing was given back (%.900s); the pool stays awake", m->tag, why);
        }
    }
    if (rc == HBM_OK || given || again) {
        m->sleep_state = HBM_POOL_ASLEEP;
        sl->sleeps += !again;
    } else {
        m->sleep_state = HBM_POOL_AWAKE;
        drop_backup(sl);
    }
    m->use_count--;
    if (!again || given)
        record_cost(a, t0, &d0, sl->sleep_cost);
    hbm__resident_note(a);
    hbm__published(a);
    hbm__unlock(a);
    return rc;
}

/* ---- wake ---- */

typedef struct was_asleep {
    hbm__segment *seg;
    bool *pages;
    size_t n; /* the segment's pages made then */
} was_asleep;

/* Which pages were asleep before the wake, per segment of the pool: a wake that fails gives back what it mapped. */
static hbm_status remember(hbm_allocator *a, hbm__mempool *m, was_asleep **out, size_t *n)
{
    size_t k = 0;
    for (hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg))
        k += in_pool(seg, m) && seg->asleep_pages;
    was_asleep *w = calloc(k ? k : 1, sizeof *w);
    if (!w) {
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
        return HBM_ERR_NOMEM;
    }
    *n = 0;
    for (hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg)) {
        if (!in_pool(seg, m) || !seg->asleep_pages)
            continue;
        bool *pg = malloc(seg->pages_made * sizeof *pg);
        if (!pg) {
            for (size_t i = 0; i < *n; i++)
                free(w[i].pages);
            free(w);
            hbm__set_error(a, "out of host memory for allocator bookkeeping");
            return HBM_ERR_NOMEM;
        }
        for (size_t i = 0; i < seg->pages_made; i++)
            pg[i] = seg->pages[i].asleep;
        w[(*n)++] = (was_asleep){seg, pg, seg->pages_made};
    }
    *out = w;
    return HBM_OK;
}

static void forget(was_asleep *w, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(w[i].pages);
    free(w);
}

static size_t asleep_bytes(hbm_allocator *a, const hbm__mempool *m)
{
    size_t n = 0;
    for (hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg))
        if (in_pool(seg, m))
            n += seg->asleep_pages * seg->page;
    return n;
}

/* Map every asleep page of the pool; when the device is full, hbmalloc's own cached memory goes back first (the OOM
 * retry of an allocation) and the wake tries once more. */
static hbm_status map_all(hbm_allocator *a, const was_asleep *w, size_t n)
{
    hbm_status rc = HBM_OK;
    bool retried = false;
    for (size_t i = 0; i < n && rc == HBM_OK; i++) {
        size_t mapped;
        rc = hbm__expand_wake(a, w[i].seg, &mapped);
        if (rc == HBM_ERR_OOM && !retried) {
            retried = true;
            if ((rc = hbm__dev_quiesce_open(a)) == HBM_OK)
                hbm__release_cached_blocks(a);
            rc = hbm__expand_wake(a, w[i].seg, &mapped);
        }
    }
    return rc;
}

hbm_status hbm_pool_wake(hbm_allocator *a, hbm_mempool id, const hbm_sleep_opts *opts)
{
    if (!a)
        return HBM_ERR_INVALID;
    hbm_sleep_opts o = opts ? *opts : (hbm_sleep_opts){0};
    uint64_t t0 = wall_ns();
    hbm__lock(a);
    hbm_device_counters d0 = a->dev;
    hbm__mempool *m = tagged_pool(a, id, "hbm_pool_wake");
    if (m && m->sleep_state == HBM_POOL_AWAKE) {
        hbm__unlock(a);
        return HBM_OK; /* nothing to do */
    }
    hbm_status rc;
    m = pool_for(a, id, "hbm_pool_wake", "it stays asleep (its copies would be captured into the graph); wake", &rc);
    if (!m) {
        hbm__unlock(a);
        return rc;
    }
    hbm__sleep *sl = m->sl;
    bool kept = sl->kept;
    sl->kept &= !o.no_restore; /* what the wake's history entries say: restored or not */
    m->sleep_state = HBM_POOL_WAKING;
    m->use_count++;
    /* Pages under blocks freed while asleep hold nothing: forgotten, without a device call (a free page a failed
     * sleep left mapped is given back here too, after the device's work: with a framework's queue the wait is made
     * here, the lock open, before anything is decided), and reservations left empty released. */
    if (!hbm__framework_queue(a) || hbm__dev_quiesce_open(a) == HBM_OK) {
        hbm_status rl = hbm__release_pool(a, &m->large), rs = hbm__release_pool(a, &m->small);
        (void)rl, (void)rs; /* a failure only keeps free pages mapped */
    }
    size_t need = asleep_bytes(a, m);
    size_t bad = sl->summed && !sl->file.open && !o.no_restore ? first_changed(sl) : SIZE_MAX; /* a file's: read */
    was_asleep *w = NULL;
    size_t nw = 0;
    if (bad != SIZE_MAX) { /* before any page is mapped: nothing to undo */
        char s_bad[32];
        hbm__format_size(sl->runs[bad].size, s_bad, sizeof s_bad);
        hbm__set_error(a,
                       "pool '%s' stays asleep: its backup changed in host memory since the sleep (the piece of %s "
                       "for device address %p, piece %zu of %zu, no longer matches its checksum: a stray write into "
                       "the pinned buffer at %p, or a copy that had not finished). Nothing was copied back. Wake it "
                       "without the restore (hbm_sleep_opts.no_restore; hbmalloc.torch.wake(tag, restore=False)) and "
                       "load its contents again",
                       m->tag, s_bad, (void *)sl->runs[bad].addr, bad + 1, sl->nruns, (void *)sl->runs[bad].host);
        rc = HBM_ERR_CHECKSUM;
    } else if (a->fraction_set && a->total_reserved + need > a->allowed_max) {
        char s_need[32], s_max[32];
        hbm__format_size(need, s_need, sizeof s_need);
        hbm__format_size(a->allowed_max, s_max, sizeof s_max);
        hbm__set_error(a,
                       "pool '%s' stays asleep: waking it needs %s, past the memory-fraction limit of %s "
                       "(per_process_memory_fraction %g)",
                       m->tag, s_need, s_max, a->fraction);
        rc = HBM_ERR_OOM;
    } else {
        rc = remember(a, m, &w, &nw);
    }
    if (rc == HBM_OK && (rc = map_all(a, w, nw)) != HBM_OK) {
        char why[sizeof a->err], s_need[32], s_free[32];
        size_t dev_free = 0, dev_total = 0;
        memcpy(why, a->err, sizeof why);
        if (hbm__dev_info(a, &dev_free, &dev_total) != HBM_OK)
            dev_free = 0;
        hbm__format_size(need, s_need, sizeof s_need);
        hbm__format_size(dev_free, s_free, sizeof s_free);
        if (rc == HBM_ERR_OOM)
            hbm__set_error(a,
                           "pool '%s' stays asleep: waking it needs %s of device memory and %s device %d has %s "
                           "free (after hbmalloc's own cache was given back); free memory in the other phase and "
                           "wake it again. Nothing was lost",
                           m->tag, s_need, hbm__dev_name(a), a->device, s_free);
        else
            hbm__set_error(a,
                           "pool '%s' stays asleep: mapping its pages failed (%.900s); nothing was lost, wake it again",
                           m->tag, why);
    }
    if (rc == HBM_OK && sl->nruns && !o.no_restore && (rc = restore_backup(a, m, &o)) != HBM_OK) {
        char why[sizeof a->err];
        memcpy(why, a->err, sizeof why);
        if (rc == HBM_ERR_CHECKSUM)
            hbm__set_error(a, "pool '%s' stays asleep: %.900s", m->tag, why);
        else
            hbm__set_error(
                a,
                "pool '%s' stays asleep: copying its backup back failed (%.900s); the backup is kept, wake it "
                "again",
                m->tag, why);
    }
    if (rc != HBM_OK) { /* back as it was: what this wake mapped is given back (fresh pages; the copies waited for) */
        for (size_t i = 0; i < nw; i++)
            hbm__expand_unwake(a, w[i].seg, w[i].pages, w[i].n);
        m->sleep_state = HBM_POOL_ASLEEP;
        sl->kept = kept; /* the backup is still there */
    } else {
        drop_backup(sl);
        if (o.release_host)
            free_bufs(a, sl, 0);
        m->sleep_state = HBM_POOL_AWAKE;
        sl->wakes++;
    }
    if (w)
        forget(w, nw);
    m->use_count--;
    record_cost(a, t0, &d0, sl->wake_cost);
    hbm__resident_note(a);
    hbm__published(a);
    hbm__unlock(a);
    return rc;
}

/* ---- pins: pools handed to a collective library ---- */

static hbm_status pin(hbm_allocator *a, hbm_mempool id, const char *reason, int by)
{
    if (!a || (by > 0 && (!reason || !*reason)))
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc = HBM_ERR_INVALID;
    hbm__mempool *m = tagged_pool(a, id, by > 0 ? "hbm_pool_pin" : "hbm_pool_unpin");
    if (m && by > 0 && m->sleep_state != HBM_POOL_AWAKE) {
        hbm__set_error(a, "hbm_pool_pin: pool '%s' is %s: its pages are not the device's to hand out; wake it first",
                       m->tag, state_name(m->sleep_state));
    } else if (m && by < 0 && !m->sl->pins) {
        hbm__set_error(a, "hbm_pool_unpin: pool '%s' is not pinned", m->tag);
    } else if (m) {
        m->sl->pins += by;
        if (by > 0)
            snprintf(m->sl->pin_why, sizeof m->sl->pin_why, "%s", reason);
        rc = HBM_OK;
    }
    hbm__unlock(a);
    return rc;
}

hbm_status hbm_pool_pin(hbm_allocator *a, hbm_mempool id, const char *reason) { return pin(a, id, reason, 1); }

hbm_status hbm_pool_unpin(hbm_allocator *a, hbm_mempool id) { return pin(a, id, NULL, -1); }

/* ---- state ---- */

hbm_status hbm_pool_info_get(hbm_allocator *a, hbm_mempool id, hbm_pool_info *out)
{
    if (!a || !out)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm__mempool *m = hbm__mempool_find(a, id);
    hbm_status rc = m ? HBM_OK : HBM_ERR_INVALID;
    if (!m) {
        hbm__set_error(a, "hbm_pool_info_get: private pool %llu does not exist", (unsigned long long)id);
    } else {
        memset(out, 0, sizeof *out);
        out->id = m->id;
        out->state = (hbm_pool_state)m->sleep_state;
        for (hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg)) {
            if (!in_pool(seg, m))
                continue;
            out->reserved_bytes += seg->expandable ? seg->mapped_pages * seg->page : seg->size;
            out->asleep_bytes += seg->asleep_pages * seg->page;
            for (hbm__block *b = seg->head; b; b = b->next)
                out->live_bytes += b->allocated ? b->size : 0;
        }
        const hbm__sleep *sl = m->sl;
        if (sl) {
            snprintf(out->tag, sizeof out->tag, "%s", m->tag);
            out->backup = sl->backup;
            out->backup_bytes = sl->backup_bytes;
            out->file_bytes = sl->file.open ? sl->backup_bytes : 0;
            for (size_t i = 0; i < sl->nbufs; i++)
                out->host_bytes += sl->bufs[i].size;
            out->sleeps = sl->sleeps;
            out->wakes = sl->wakes;
            out->sleep_ns = sl->sleep_cost[0];
            out->sleep_device_ns = sl->sleep_cost[1];
            out->sleep_calls = sl->sleep_cost[2];
            out->wake_ns = sl->wake_cost[0];
            out->wake_device_ns = sl->wake_cost[1];
            out->wake_calls = sl->wake_cost[2];
        }
    }
    hbm__unlock(a);
    return rc;
}

size_t hbm_pool_list(hbm_allocator *a, hbm_mempool *ids, size_t cap)
{
    if (!a)
        return 0;
    hbm__lock(a);
    size_t n = 0;
    for (hbm__mempool *m = a->mempools; m; m = m->next)
        n++;
    size_t k = n;
    for (hbm__mempool *m = a->mempools; m; m = m->next) /* newest first in the list: filled from the back */
        if (--k < cap && ids)
            ids[k] = m->id;
    hbm__unlock(a);
    return n;
}

void hbm__sleep_stats(hbm_allocator *a, hbm_stats *st)
{
    st->asleep_pools = st->asleep_bytes = st->backup_bytes = 0;
    for (hbm__mempool *m = a->mempools; m; m = m->next) {
        if (!m->sl)
            continue;
        st->asleep_pools += m->sleep_state != HBM_POOL_AWAKE;
        st->backup_bytes += (int64_t)m->sl->backup_bytes;
    }
    for (hbm__segment *seg = hbm__segments_first(a); seg && st->asleep_pools; seg = hbm__segments_next(seg))
        st->asleep_bytes += (int64_t)(seg->asleep_pages * seg->page);
}

void hbm__sleep_forget(hbm_allocator *a, hbm__mempool *m, uintptr_t addr, size_t size)
{
    (void)a;
    hbm__sleep *sl = m->sl;
    size_t k = 0;
    for (size_t i = 0; i < sl->nruns; i++) {
        if (sl->runs[i].addr >= addr && sl->runs[i].addr - addr < size) {
            sl->backup_bytes -= sl->runs[i].size;
            continue;
        }
        sl->runs[k++] = sl->runs[i];
    }
    sl->nruns = k;
}

void hbm__sleep_trace(hbm_allocator *a, const hbm__mempool *m, hbm_trace_action action, uint64_t addr, uint64_t size,
                      hbm_stream stream)
{
    if (a->history && m && m->sl)
        hbm__record(a, action | (m->sl->kept ? HBM__TRACE_BACKUP : 0), addr, size, stream, m->sl->tag_label);
}

typedef struct tag_sum {
    const char *tag;
    size_t bytes, at; /* its pools' pages asleep; the place of its oldest pool in the list */
} tag_sum;

/* The published figures of what sleeps, in O(pools x tags shown + segments): it runs under the lock at every change
 * of reserved memory (publish.c), and a job may hold thousands of pools (a graph's each). */
void hbm__sleep_record(hbm_allocator *a, int64_t *asleep, int64_t *backup, char *tags, size_t len)
{
    hbm__sbuf sb;
    hbm__sb_init(&sb, tags, len);
    tags[0] = 0;
    *asleep = *backup = 0;
    bool any = false;
    for (hbm__mempool *m = a->mempools; m; m = m->next)
        if (m->sl) {
            m->sl->rec_bytes = 0;
            any |= m->sleep_state != 0;
            *backup += m->sleep_state ? (int64_t)m->sl->backup_bytes : 0;
        }
    if (!any)
        return;
    for (hbm__segment *seg = hbm__segments_first(a); seg; seg = hbm__segments_next(seg)) {
        hbm__mempool *m = seg->asleep_pages ? seg->pool->owner : NULL;
        if (m && m->sl && m->sleep_state) {
            m->sl->rec_bytes += seg->asleep_pages * seg->page;
            *asleep += (int64_t)(seg->asleep_pages * seg->page);
        }
    }
    /* One entry per tag (pools may share one: a graph's and its pool(tag)'s), in the order of each tag's oldest pool.
     * The list is newest first: a tag's place is where it is seen last. The text holds fewer tags than `shown`
     * (each at least "t 0, "); past that many tags the newest ones are left out. */
    enum { SHOWN = 64 };
    tag_sum e[SHOWN];
    size_t ne = 0, at = 0;
    for (hbm__mempool *m = a->mempools; m; m = m->next, at++) {
        if (!m->sl || !m->sleep_state)
            continue;
        size_t i = 0;
        while (i < ne && strcmp(e[i].tag, m->tag))
            i++;
        if (i == ne && ne == SHOWN)
            continue;
        if (i == ne)
            e[ne++].bytes = 0;
        e[i].tag = m->tag;
        e[i].bytes += m->sl->rec_bytes;
        e[i].at = at;
    }
    for (size_t i = 1; i < ne; i++) /* the oldest (largest `at`) first: at most SHOWN, by insertion */
        for (size_t j = i; j > 0 && e[j].at > e[j - 1].at; j--) {
            tag_sum t = e[j];
            e[j] = e[j - 1], e[j - 1] = t;
        }
    for (size_t i = 0; i < ne && sb.len + 1 < sb.cap; i++) {
        char size[32];
        hbm__format_size(e[i].bytes, size, sizeof size);
        hbm__sb_printf(&sb, "%s%s %s", tags[0] ? ", " : "", e[i].tag, size);
    }
}

void hbm__sleep_free(hbm_allocator *a, hbm__mempool *m)
{
    hbm__sleep *sl = m->sl;
    if (!sl)
        return;
    for (size_t i = 0; i < sl->nbufs; i++)
        hbm__dev_host_free(a, sl->bufs[i].p, sl->bufs[i].size);
    free(sl->bufs);
    free(sl->runs);
    hbm__bfile_close(&sl->file);
    free(sl);
    m->sl = NULL;
    m->tag[0] = 0;
}

void hbm__sleep_check(hbm_allocator *a, void (*fail)(void *ck, const char *what), void *ck)
{
    char msg[256];
    for (hbm__mempool *m = a->mempools; m; m = m->next) {
        const hbm__sleep *sl = m->sl;
        if (m->sleep_state > HBM_POOL_WAKING || (m->sleep_state && !sl)) {
            snprintf(msg, sizeof msg, "private pool %llu is in sleep state %d without a tag", (unsigned long long)m->id,
                     m->sleep_state);
            fail(ck, msg);
        }
        if (!sl)
            continue;
        size_t sum = 0, held = 0;
        for (size_t i = 0; i < sl->nbufs; i++)
            held += sl->bufs[i].size;
        for (size_t i = 0; i < sl->nruns; i++) {
            const backup_run *r = &sl->runs[i];
            hbm__segment *seg = hbm__segment_find(a, r->addr);
            size_t buf = sl->file.open && sl->nstage ? r->buf % sl->nstage : r->buf;
            sum += r->size;
            if (buf >= sl->nbufs || r->host < (unsigned char *)sl->bufs[buf].p ||
                r->host + r->size > (unsigned char *)sl->bufs[buf].p + sl->bufs[buf].size ||
                (sl->file.open && r->off + r->size > sl->file.size)) {
                snprintf(msg, sizeof msg, "pool '%s': backup run %p (%zu bytes) lies outside its buffer or file",
                         m->tag, (void *)r->addr, r->size);
                fail(ck, msg);
            }
            /* A run outlives its blocks (freed while asleep), not their segment (hbm__sleep_forget). */
            if (!seg || !in_pool(seg, m) || r->addr + r->size > seg->addr + seg->size) {
                snprintf(msg, sizeof msg, "pool '%s': backup run %p (%zu bytes) is not inside one of its segments",
                         m->tag, (void *)r->addr, r->size);
                fail(ck, msg);
            }
        }
        if (sum != sl->backup_bytes || (sl->nruns && m->sleep_state == HBM_POOL_AWAKE) ||
            (sum > held && !sl->file.open) || (sl->file.open && m->sleep_state == HBM_POOL_AWAKE)) {
            snprintf(msg, sizeof msg,
                     "pool '%s' (%s) holds a backup of %zu bytes in runs of %zu, in %zu bytes of host "
                     "buffers",
                     m->tag, state_name(m->sleep_state), sl->backup_bytes, sum, held);
            fail(ck, msg);
        }
    }
}

/* resident.c names the awake pools that hold memory by their tags. */
