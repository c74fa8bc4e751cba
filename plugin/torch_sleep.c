/*
 * torch_sleep.c: the PyTorch plug-in's pools that sleep (docs/SLEEP.md): hbmalloc.torch.pool(tag),
 * sleep(tag), wake(tag) and pools(), through ctypes.
 *
 * A tag is one hbmalloc private pool per device, tagged (hbm_pool_tag), made at its first use on that device. Two
 * ways in:
 *   - with use() (hbmalloc is torch's allocator): hbm_torch_pool_enter routes the calling thread's allocations into
 *     the tag's pool (hbm_mempool_begin_thread) until hbm_torch_pool_exit; a graph captured meanwhile gets a private
 *     pool of its own, tagged the same (tag_graph_pool, through hbm_torch__graph_pool_made), so that it sleeps
 *     with the tag;
 *   - without it (torch's own allocator global): torch's MemPool with hbmalloc as its pluggable allocator. torch
 *     calls the allocator with (size, device, stream) only, so each tag has its own alloc entry point, a slot:
 *     hbm_torch_pool_alloc_K allocates in tag K's pool (hbm_mempool_malloc), whatever thread calls it (torch asks
 *     for a segment from the thread that allocates a tensor, but releases them from any thread). A NULL return is
 *     torch's out-of-memory path (CUDACachingAllocator.cpp v2.6:884-892: cudaErrorMemoryAllocation).
 * The frees of both come through hbm_torch_free (by pointer).
 *
 * Never throws; errors go to the helper (hbm_torch_error) as -1.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torch_plugin.h"
#include "util.h"

#define TAGS 16 /* slots: hbm_torch_pool_alloc_0 .. _15 */
#define DEVICES 64
#define DEPTH 8 /* pool(tag) nested on one thread */

typedef struct tag_entry {
    char name[64];
    int backup;
    int pins; /* hbm_torch_pin minus unpin: every pool of the tag, made now or later, pinned so often */
    char pin_why[160];
    hbm_mempool pool[DEVICES]; /* 0: not made on that device yet */
} tag_entry;

static pthread_mutex_t tags_lock = PTHREAD_MUTEX_INITIALIZER;
static tag_entry tags[TAGS];
static int ntags;

/* The calling thread's pool(tag) blocks (use() mode), innermost last. */
static __thread struct {
    int slot, device;
    hbm_mempool pool;
} stack[DEPTH];
static __thread int depth;

/* The slot of tag, made when new (backup is fixed at that moment). -1 with the error set. tags_lock held. */
static int slot_of(const char *tag, int backup)
{
    if (hbm__tag_invalid(tag)) {
        hbm_torch__set_error("pool tag %s: %s", tag && *tag ? "with a control character" : "''", hbm__tag_invalid(tag));
        return -1;
    }
    if (strlen(tag) >= sizeof tags[0].name) {
        hbm_torch__set_error("pool tag '%.80s' must be 1 to %zu bytes", tag, sizeof tags[0].name - 1);
        return -1;
    }
    for (int i = 0; i < ntags; i++)
        if (!strcmp(tags[i].name, tag)) {
            if (backup >= 0 && tags[i].backup != !!backup) {
                hbm_torch__set_error("pool '%s' was made with backup=%s: a tag keeps its backup setting", tag,
                                     tags[i].backup ? "True" : "False");
                return -1;
            }
            return i;
        }
    if (ntags == TAGS) {
        hbm_torch__set_error("pool '%s': at most %d tags per process", tag, TAGS);
        return -1;
    }
    if (backup < 0) {
        hbm_torch__set_error("no pool is tagged '%s'", tag);
        return -1;
    }
    memset(&tags[ntags], 0, sizeof tags[ntags]);
    snprintf(tags[ntags].name, sizeof tags[ntags].name, "%s", tag);
    tags[ntags].backup = !!backup;
    return ntags++;
}

/* The tag's pool on device, made and tagged at its first use. 0 with the error set. tags_lock held. */
static hbm_mempool pool_on(int slot, int device, hbm_allocator **out)
{
    *out = NULL;
    if (device < 0 || device >= DEVICES) {
        hbm_torch__set_error("device %d is out of range", device);
        return 0;
    }
    hbm_allocator *a = hbm_torch__allocator(device);
    if (!a) {
        hbm_torch__set_error("device %d has no allocator (see the message above)", device);
        return 0;
    }
    tag_entry *t = &tags[slot];
    if (!t->pool[device]) {
        hbm_mempool id;
        if (hbm_mempool_create(a, &id) != HBM_OK) {
            hbm_torch__set_error("out of host memory making pool '%s'", t->name);
            return 0;
        }
        if (hbm_pool_tag(a, id, t->name, t->backup) != HBM_OK) {
            char e[1200];
            hbm_copy_last_error(a, e, sizeof e);
            hbm_mempool_release(a, id);
            hbm_torch__set_error("%s", e);
            return 0;
        }
        for (int k = 0; k < t->pins; k++) /* pinned before this device's pool was made */
            hbm_pool_pin(a, id, t->pin_why);
        t->pool[device] = id;
    }
    *out = a;
    return t->pool[device];
}

/* torch_plugin.c's helper entry points used here. */
HBM_TORCH_EXPORT int hbm_torch_device_count(void);
HBM_TORCH_EXPORT int hbm_torch_device_used(int device);
HBM_TORCH_EXPORT const char *hbm_torch_error(void);

HBM_TORCH_EXPORT int hbm_torch_pool_enter(const char *tag, int backup, int device);
HBM_TORCH_EXPORT int hbm_torch_pool_exit(void);
HBM_TORCH_EXPORT int hbm_torch_pool_slot(const char *tag, int backup);
HBM_TORCH_EXPORT int hbm_torch_pool_state(const char *tag);
HBM_TORCH_EXPORT int hbm_torch_sleep(const char *tag, size_t chunk, hbm_sleep_progress progress, void *ctx);
HBM_TORCH_EXPORT int hbm_torch_wake(const char *tag, int release_host, hbm_sleep_progress progress, void *ctx);
HBM_TORCH_EXPORT int hbm_torch_sleep_as(const char *tag, size_t chunk, int backup, int checksum, const char *backup_dir,
                                        hbm_sleep_progress progress, void *ctx);
HBM_TORCH_EXPORT int hbm_torch_wake_as(const char *tag, int release_host, int no_restore, hbm_sleep_progress progress,
                                       void *ctx);
HBM_TORCH_EXPORT long hbm_torch_pools(char *buf, long len);
HBM_TORCH_EXPORT int hbm_torch_mem_info(int device, size_t *free_bytes, size_t *total_bytes);
HBM_TORCH_EXPORT void hbm_torch_pool_free(void *ptr, size_t size, int device, void *stream);

/* use() mode: the calling thread's allocations on `device` go into the tag's pool until hbm_torch_pool_exit. */
static void tag_graph_pool(hbm_allocator *a, hbm_mempool pool);

HBM_TORCH_EXPORT int hbm_torch_pool_enter(const char *tag, int backup, int device)
{
    __atomic_store_n(&hbm_torch__graph_pool_made, tag_graph_pool, __ATOMIC_RELEASE);
    if (depth == DEPTH) {
        hbm_torch__set_error("pool(%.80s): nested more than %d deep", tag ? tag : "", DEPTH);
        return -1;
    }
    pthread_mutex_lock(&tags_lock);
    hbm_allocator *a = NULL;
    int slot = slot_of(tag, backup);
    hbm_mempool pool = slot >= 0 ? pool_on(slot, device, &a) : 0;
    pthread_mutex_unlock(&tags_lock);
    if (!pool)
        return -1;
    if (hbm_mempool_begin_thread(a, pool) != HBM_OK) {
        char e[1200];
        hbm_copy_last_error(a, e, sizeof e);
        hbm_torch__set_error("pool(%s): %s", tag, e);
        return -1;
    }
    stack[depth].slot = slot;
    stack[depth].device = device;
    stack[depth].pool = pool;
    depth++;
    return 0;
}

HBM_TORCH_EXPORT int hbm_torch_pool_exit(void)
{
    if (!depth) {
        hbm_torch__set_error("pool exit without pool enter on this thread");
        return -1;
    }
    depth--;
    hbm_allocator *a = hbm_torch__allocator(stack[depth].device);
    if (!a || hbm_mempool_end(a, stack[depth].pool) != HBM_OK) {
        hbm_torch__set_error("pool exit: %s", a ? hbm_last_error(a) : "no allocator");
        return -1;
    }
    return 0;
}

static void tag_graph_pool(hbm_allocator *a, hbm_mempool pool)
{
    if (!depth)
        return;
    pthread_mutex_lock(&tags_lock);
    tag_entry t = tags[stack[depth - 1].slot];
    pthread_mutex_unlock(&tags_lock);
    if (hbm_pool_tag(a, pool, t.name, t.backup) != HBM_OK)
        fprintf(stderr, "hbmalloc: warning: the graph captured inside pool('%s') will not sleep with it: %s\n", t.name,
                hbm_last_error(a));
    else
        for (int k = 0; k < t.pins; k++) /* the tag is pinned: so is the graph's pool */
            hbm_pool_pin(a, pool, t.pin_why);
}

/* MemPool mode: the slot whose entry point (hbm_torch_pool_alloc_SLOT) serves the tag. */
HBM_TORCH_EXPORT int hbm_torch_pool_slot(const char *tag, int backup)
{
    pthread_mutex_lock(&tags_lock);
    int slot = slot_of(tag, backup);
    pthread_mutex_unlock(&tags_lock);
    return slot;
}

static void *slot_alloc(int slot, size_t size, int device, void *stream)
{
    pthread_mutex_lock(&tags_lock);
    hbm_allocator *a = NULL;
    hbm_mempool pool = slot < ntags ? pool_on(slot, device, &a) : 0;
    char name[64];
    snprintf(name, sizeof name, "%s", slot < ntags ? tags[slot].name : "?");
    pthread_mutex_unlock(&tags_lock);
    void *p = NULL;
    if (!pool) {
        fprintf(stderr, "hbmalloc: pool '%s': %s\n", name, hbm_torch_error());
        return NULL;
    }
    hbm_status rc = hbm_mempool_malloc(a, pool, size, (hbm_stream)(uintptr_t)stream, &p);
    if (rc != HBM_OK && rc != HBM_ERR_OOM) /* out of memory is torch's own path (its message follows) */
        fprintf(stderr, "hbmalloc: %s\n", hbm_last_error(a));
    return rc == HBM_OK ? p : NULL;
}

/* MemPool mode's free_fn: torch gives a segment back (release_block: empty_cache, the pool's end) after it cached it
 * itself, so its pages go back to the device now rather than be cached a second time here. */
HBM_TORCH_EXPORT void hbm_torch_pool_free(void *ptr, size_t size, int device, void *stream)
{
    (void)size;
    (void)stream;
    hbm_allocator *a = hbm_torch__allocator(device);
    if (!a || hbm_free(a, ptr) != HBM_OK) {
        fprintf(stderr, "hbmalloc: %s\n", a ? hbm_last_error(a) : "no allocator");
        return;
    }
    pthread_mutex_lock(&tags_lock);
    hbm_mempool pools[TAGS];
    int n = ntags;
    for (int i = 0; i < n; i++)
        pools[i] = device >= 0 && device < DEVICES ? tags[i].pool[device] : 0;
    pthread_mutex_unlock(&tags_lock);
    for (int i = 0; i < n; i++) /* the pool that held ptr (a trim of the others finds nothing to do) */
        if (pools[i]) {
            hbm_status rc = hbm_mempool_trim(a, pools[i]);
            if (rc != HBM_OK && rc != HBM_ERR_ASLEEP) /* a sleep or wake under way gives it back itself */
                fprintf(stderr, "hbmalloc: %s\n", hbm_last_error(a));
        }
}

#define SLOT(k)                                                                             \
    HBM_TORCH_EXPORT void *hbm_torch_pool_alloc_##k(size_t size, int device, void *stream); \
    HBM_TORCH_EXPORT void *hbm_torch_pool_alloc_##k(size_t size, int device, void *stream)  \
    {                                                                                       \
        return slot_alloc(k, size, device, stream);                                         \
    }
/* A list of definitions, not of statements: */
// clang-format off
SLOT(0) SLOT(1) SLOT(2) SLOT(3) SLOT(4) SLOT(5) SLOT(6) SLOT(7)
SLOT(8) SLOT(9) SLOT(10) SLOT(11) SLOT(12) SLOT(13) SLOT(14) SLOT(15)
    // clang-format on

    /* fn on every tagged pool of every device in use whose tag is `tag` (NULL: any tag), however many pools there
     * are (a job with hundreds of graphs has a pool each). 0, or -1 with the error set (no host memory for the
     * list). */
    static int each_tagged(const char *tag,
                           void (*fn)(int device, hbm_allocator *a, const hbm_pool_info *info, void *ctx), void *ctx)
{
    int n = hbm_torch_device_count();
    for (int d = 0; d < n; d++) {
        hbm_allocator *a = hbm_torch_device_used(d) ? hbm_torch__allocator(d) : NULL;
        if (!a)
            continue;
        size_t cap = hbm_pool_list(a, NULL, 0), k;
        hbm_mempool *ids = NULL;
        for (;;) { /* pools made between the two calls: asked again with room for them */
            free(ids);
            if (!(ids = malloc((cap ? cap : 1) * sizeof *ids))) {
                hbm_torch__set_error("out of host memory listing the pools of device %d", d);
                return -1;
            }
            if ((k = hbm_pool_list(a, ids, cap)) <= cap)
                break;
            cap = k;
        }
        for (size_t i = 0; i < k; i++) {
            hbm_pool_info info;
            if (hbm_pool_info_get(a, ids[i], &info) == HBM_OK && info.tag[0] && (!tag || !strcmp(tag, info.tag)))
                fn(d, a, &info, ctx);
        }
        free(ids);
    }
    return 0;
}

typedef struct apply_ctx {
    hbm_status (*fn)(hbm_allocator *, hbm_mempool, const hbm_sleep_opts *);
    const hbm_sleep_opts *o;
    int done, failed;
} apply_ctx;

static void apply_one(int device, hbm_allocator *a, const hbm_pool_info *info, void *ctx)
{
    apply_ctx *c = ctx;
    if (c->fn(a, info->id, c->o) == HBM_OK) {
        c->done++;
    } else if (!c->failed++) {
        char e[1200];
        hbm_copy_last_error(a, e, sizeof e);
        hbm_torch__set_error("device %d: %s", device, e);
    }
}

/* fn (a sleep or a wake) on each pool of the tag: the number done, or -1 with the first failure's text. */
static int each_pool(const char *tag, hbm_status (*fn)(hbm_allocator *, hbm_mempool, const hbm_sleep_opts *),
                     const hbm_sleep_opts *o)
{
    apply_ctx c = {fn, o, 0, 0};
    if (each_tagged(tag, apply_one, &c))
        return -1;
    return c.failed ? -1 : c.done;
}

/* sleep(tag, backup=None|True|False, checksum=, backup_dir=): backup is an hbm_sleep_backup (0: as the tag was
 * made); backup_dir NULL: the backup in pinned host memory. */
HBM_TORCH_EXPORT int hbm_torch_sleep_as(const char *tag, size_t chunk, int backup, int checksum, const char *backup_dir,
                                        hbm_sleep_progress progress, void *ctx)
{
    hbm_sleep_opts o = {.chunk_bytes = chunk,
                        .progress = progress,
                        .ctx = ctx,
                        .backup = (hbm_sleep_backup)backup,
                        .checksum = checksum,
                        .backup_dir = backup_dir};
    return each_pool(tag, hbm_pool_sleep, &o);
}

/* wake(tag, restore=False): no_restore drops the backups instead of copying them back. */
HBM_TORCH_EXPORT int hbm_torch_wake_as(const char *tag, int release_host, int no_restore, hbm_sleep_progress progress,
                                       void *ctx)
{
    hbm_sleep_opts o = {.progress = progress, .ctx = ctx, .release_host = release_host, .no_restore = no_restore};
    return each_pool(tag, hbm_pool_wake, &o);
}

HBM_TORCH_EXPORT int hbm_torch_sleep(const char *tag, size_t chunk, hbm_sleep_progress progress, void *ctx)
{
    return hbm_torch_sleep_as(tag, chunk, HBM_SLEEP_AS_TAGGED, 0, NULL, progress, ctx);
}

HBM_TORCH_EXPORT int hbm_torch_wake(const char *tag, int release_host, hbm_sleep_progress progress, void *ctx)
{
    return hbm_torch_wake_as(tag, release_host, 0, progress, ctx);
}

/* The state of a tag across devices: HBM_POOL_AWAKE unless one of its pools is not; -1 for an unknown tag. */
HBM_TORCH_EXPORT int hbm_torch_pool_state(const char *tag)
{
    pthread_mutex_lock(&tags_lock);
    int slot = -1;
    for (int i = 0; i < ntags && slot < 0; i++)
        if (tag && !strcmp(tags[i].name, tag))
            slot = i;
    hbm_mempool pools[DEVICES];
    if (slot >= 0)
        memcpy(pools, tags[slot].pool, sizeof pools);
    pthread_mutex_unlock(&tags_lock);
    if (slot < 0)
        return -1;
    int state = HBM_POOL_AWAKE;
    for (int d = 0; d < DEVICES; d++) {
        hbm_allocator *a = pools[d] ? hbm_torch__allocator(d) : NULL;
        hbm_pool_info info;
        if (a && hbm_pool_info_get(a, pools[d], &info) == HBM_OK && info.state != HBM_POOL_AWAKE)
            state = info.state;
    }
    return state;
}

typedef struct text_ctx {
    char *buf;
    long len, need;
} text_ctx;

static void pool_line(int device, hbm_allocator *a, const hbm_pool_info *f, void *ctx)
{
    (void)a;
    text_ctx *t = ctx;
    int w = snprintf(
        t->buf && t->need < t->len ? t->buf + t->need : NULL,
        t->buf && t->need < t->len ? (size_t)(t->len - t->need) : 0,
        "%d\t%llu\t%s\t%d\t%d\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu"
        "\t%llu\t%llu\n",
        device, (unsigned long long)f->id, f->tag, f->backup, (int)f->state, (unsigned long long)f->live_bytes,
        (unsigned long long)f->reserved_bytes, (unsigned long long)f->asleep_bytes, (unsigned long long)f->backup_bytes,
        (unsigned long long)f->host_bytes, (unsigned long long)f->sleeps, (unsigned long long)f->wakes,
        (unsigned long long)f->sleep_ns, (unsigned long long)f->sleep_device_ns, (unsigned long long)f->sleep_calls,
        (unsigned long long)f->wake_ns, (unsigned long long)f->wake_device_ns, (unsigned long long)f->wake_calls,
        (unsigned long long)f->file_bytes);
    t->need += w;
}

/* One line per tagged pool of every device in use, tab-separated: device, id, tag, backup, state, then the byte
 * counts and the last sleep's and wake's costs (hbm_pool_info's order). Returns the length (or the length needed). */
HBM_TORCH_EXPORT long hbm_torch_pools(char *buf, long len)
{
    text_ctx t = {buf, len, 0};
    return each_tagged(NULL, pool_line, &t) ? -1 : t.need;
}

/* torch.cuda.mem_get_info()'s figures, as the runtime gives them to hbmalloc (tests on the simulated device). */
HBM_TORCH_EXPORT int hbm_torch_mem_info(int device, size_t *free_bytes, size_t *total_bytes)
{
    hbm_allocator *a = hbm_torch__allocator(device);
    if (!a || hbm_mem_get_info(a, free_bytes, total_bytes) != HBM_OK) {
        hbm_torch__set_error("device %d: memory information unavailable", device);
        return -1;
    }
    return 0;
}

/* What still holds memory (docs/SLEEP.md): one line per device in use (device < 0: all of them; else that one, when
 * in use), tab-separated: device, device_total, device_used, outside (-1: unknown), reserved, asleep_reserved,
 * asleep_bytes, awake_reserved, awake_live, graph_reserved, graph_live, default_reserved, default_live, cache,
 * releasable, asleep_pools, awake_pools, graph_pools, awake_tags, then hbm_resident_describe's sentence. Returns the
 * length (or the length needed); tags and the sentence hold no tab (a tag with a control character is refused). */
HBM_TORCH_EXPORT long hbm_torch_resident(int device, char *buf, long len);
HBM_TORCH_EXPORT long hbm_torch_resident(int device, char *buf, long len)
{
    text_ctx t = {buf, len, 0};
    int n = hbm_torch_device_count();
    for (int d = device < 0 ? 0 : device; d < (device < 0 ? n : device + 1) && d < n; d++) {
        hbm_allocator *a = hbm_torch_device_used(d) ? hbm_torch__allocator(d) : NULL;
        hbm_resident r;
        if (!a || hbm_resident_get(a, &r) != HBM_OK)
            continue;
        char say[1024];
        hbm_resident_describe(&r, say, sizeof say);
        int w = snprintf(
            t.buf && t.need < t.len ? t.buf + t.need : NULL, t.buf && t.need < t.len ? (size_t)(t.len - t.need) : 0,
            "%d\t%lld\t%lld\t%lld\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%u\t%u"
            "\t%u\t%s\t%s\n",
            d, (long long)r.device_total, (long long)r.device_used, (long long)r.outside,
            (unsigned long long)r.reserved, (unsigned long long)r.asleep_reserved, (unsigned long long)r.asleep_bytes,
            (unsigned long long)r.awake_reserved, (unsigned long long)r.awake_live,
            (unsigned long long)r.graph_reserved, (unsigned long long)r.graph_live,
            (unsigned long long)r.default_reserved, (unsigned long long)r.default_live, (unsigned long long)r.cache,
            (unsigned long long)r.releasable, r.asleep_pools, r.awake_pools, r.graph_pools, r.awake_tags, say);
        t.need += w;
    }
    return t.need;
}

typedef struct pin_ctx {
    const char *reason; /* NULL: unpin */
    int failed;
} pin_ctx;

static void pin_one(int device, hbm_allocator *a, const hbm_pool_info *info, void *ctx)
{
    pin_ctx *c = ctx;
    hbm_status rc = c->reason ? hbm_pool_pin(a, info->id, c->reason) : hbm_pool_unpin(a, info->id);
    if (rc != HBM_OK && !c->failed++) {
        char e[1200];
        hbm_copy_last_error(a, e, sizeof e);
        hbm_torch__set_error("device %d: %s", device, e);
    }
}

/* pin(tag, reason) / unpin(tag): every pool of the tag on every device, and those made for it later (a graph
 * captured inside it), refuse to sleep while pinned (hbm_pool_pin). A tag asleep cannot be pinned. */
HBM_TORCH_EXPORT int hbm_torch_pin(const char *tag, const char *reason, int on);
HBM_TORCH_EXPORT int hbm_torch_pin(const char *tag, const char *reason, int on)
{
    if (on && (!reason || !*reason)) {
        hbm_torch__set_error("pin(%.80s): give the reason (what registered the pool's memory)", tag ? tag : "");
        return -1;
    }
    if (on && hbm_torch_pool_state(tag) > 0) {
        hbm_torch__set_error("pin('%.80s'): the pool is not awake: wake it first", tag);
        return -1;
    }
    pthread_mutex_lock(&tags_lock);
    int slot = -1;
    for (int i = 0; i < ntags && slot < 0; i++)
        if (tag && !strcmp(tags[i].name, tag))
            slot = i;
    if (slot < 0 || (!on && !tags[slot].pins)) {
        pthread_mutex_unlock(&tags_lock);
        hbm_torch__set_error(slot < 0 ? "no pool is tagged '%.80s'" : "pool '%.80s' is not pinned", tag ? tag : "");
        return -1;
    }
    tags[slot].pins += on ? 1 : -1;
    if (on)
        snprintf(tags[slot].pin_why, sizeof tags[slot].pin_why, "%s", reason);
    pin_ctx c = {on ? reason : NULL, 0};
    int rc = each_tagged(tag, pin_one, &c); /* with tags_lock held: no pool of the tag is made meanwhile */
    pthread_mutex_unlock(&tags_lock);
    return rc || c.failed ? -1 : 0;
}
