/*
 * publish.c: an allocator's statistics in shared memory, for `hbmalloc top` and other monitors
 * (docs/MONITOR.md).
 *
 * Each publishing allocator owns one file of hbm_record_dir(), created 0600 with O_EXCL and mapped shared: a
 * header (magic, layout, size) and a sequence number around an hbm_record. A writer makes the number odd, writes,
 * makes it even; a reader copies between two equal even readings (a seqlock), so it never blocks the job and never
 * sees half an update. Writers: the segment-change points of the engine (hbm__publish_update, under the
 * allocator's lock: a device call was just made, the copy costs nothing beside it), an OOM, and one thread of the
 * library that refreshes every record of the process twice a second — so the malloc/free fast path is untouched.
 *
 * Process-wide state (the list of records, the thread) is guarded by `reg`, always taken before an allocator's
 * lock and tracked for fork (fork.c). A record belongs to the process that made it: a forked child neither updates
 * nor removes its parent's records. At exit the files are removed (atexit); a killed process leaves its file,
 * which readers recognise by its PID and start time (hbm_record_read: HBM_ERR_STALE).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fork.h"
#include "internal.h"
#include "publish.h"
#include "util.h"

#define REFRESH_NS 500000000L /* the thread's period: every record at least once a second */

struct hbm__pub {
    hbm__shared_record *rec;
    hbm_allocator *a;
    pid_t owner;
    char path[256];
    struct hbm__pub *next;
};

static pthread_mutex_t reg = PTHREAD_MUTEX_INITIALIZER;
static struct hbm__pub *list;
static pid_t thread_pid; /* the process whose refresher runs (a forked child has none) */
static bool exiting;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Atomic unsigned counter;

const char *hbm_record_dir(void)
{
    const char *d = getenv("HBMALLOC_TOP_DIR");
    if (d && *d)
        return d;
    struct stat st;
    return stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
}

/* Field 22 of /proc/PID/stat (the start time in clock ticks since boot), or 0 when unknown. */
static uint64_t start_time(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the name in parentheses may hold spaces and parentheses */
    if (!p)
        return 0;
    for (int field = 2; field < 22 && p; field++) /* from the ")": p is then at the space before field `field + 1` */
        p = strchr(p + 1, ' ');
    return p ? strtoull(p + 1, NULL, 10) : 0;
}

/* src cut to fit n bytes with its NUL, between characters. */
static void put_text(char *dst, size_t n, const char *src)
{
    size_t len = hbm__utf8_cut(src, strnlen(src, n - 1));
    memcpy(dst, src, len);
    dst[len] = 0;
}

static int64_t env_int(const char *name, const char *alt)
{
    const char *v = getenv(name);
    if ((!v || !*v) && alt)
        v = getenv(alt);
    if (!v || !*v)
        return -1;
    char *end;
    long long x = strtoll(v, &end, 10);
    return *end || x < 0 ? -1 : x;
}

/* The largest cached free block, private pools included. */
static size_t largest_free(hbm_allocator *a)
{
    size_t best = hbm__largest_free(a), x;
    for (hbm__mempool *m = a->mempools; m; m = m->next)
        for (int k = 0; k < 2; k++)
            if ((x = hbm__pool_largest(k ? &m->large : &m->small)) > best)
                best = x;
    return best;
}

/* The figures that change; the allocator's lock is held. */
static void fill_stats(hbm_allocator *a, hbm_record *r)
{
    const hbm_stats *s = &a->stats;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r->updated_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
    r->allocated_bytes = s->allocated_bytes[HBM_POOL_ALL].current;
    r->reserved_bytes = s->reserved_bytes[HBM_POOL_ALL].current;
    r->active_bytes = s->active_bytes[HBM_POOL_ALL].current;
    r->requested_bytes = s->requested_bytes[HBM_POOL_ALL].current;
    r->inactive_split_bytes = s->inactive_split_bytes[HBM_POOL_ALL].current;
    r->peak_allocated_bytes = s->allocated_bytes[HBM_POOL_ALL].peak;
    r->peak_reserved_bytes = s->reserved_bytes[HBM_POOL_ALL].peak;
    r->largest_free_bytes = (int64_t)largest_free(a);
    r->allocation = s->allocation[HBM_POOL_ALL].current;
    r->segment = s->segment[HBM_POOL_ALL].current;
    r->active = s->active[HBM_POOL_ALL].current;
    r->inactive_split = s->inactive_split[HBM_POOL_ALL].current;
    r->num_ooms = s->num_ooms;
    r->num_alloc_retries = s->num_alloc_retries;
    r->num_device_alloc = s->num_device_alloc;
    r->num_device_free = s->num_device_free;
    r->expandable_segments = s->expandable_segments;
    r->device_total = (int64_t)a->device_total;
}

static void update(struct hbm__pub *p)
{
    hbm__shared_record *s = p->rec;
    uint64_t q = atomic_load_explicit(&s->seq, memory_order_relaxed);
    atomic_store_explicit(&s->seq, q + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    fill_stats(p->a, &s->r);
    atomic_store_explicit(&s->seq, q + 2, memory_order_release);
}

void hbm__publish_update(hbm_allocator *a)
{
    if (a->pub->owner == getpid())
        update(a->pub);
}

static void at_exit(void)
{
    pthread_mutex_lock(&reg);
    exiting = true;
    pid_t me = getpid();
    for (struct hbm__pub *p = list; p; p = p->next)
        if (p->owner == me)
            unlink(p->path);
    pthread_mutex_unlock(&reg);
}

static void install(void)
{
    atexit(at_exit);
    (void)hbm__fork_track(&reg, HBM__FORK_SET); /* untracked (no host memory): fork is then as unsafe as before */
}

static void *refresher(void *arg)
{
    (void)arg;
    for (;;) {
        struct timespec ts = {0, REFRESH_NS};
        while (nanosleep(&ts, &ts) && errno == EINTR)
            ;
        pthread_mutex_lock(&reg);
        pid_t me = getpid();
        bool any = false;
        for (struct hbm__pub *p = list; p && !exiting; p = p->next)
            if (p->owner == me) {
                any = true;
                hbm__lock(p->a);
                update(p);
                hbm__unlock(p->a);
            }
        if (!any) { /* nothing left to refresh: the thread ends, the next hbm_publish starts another */
            thread_pid = 0;
            pthread_mutex_unlock(&reg);
            return NULL;
        }
        pthread_mutex_unlock(&reg);
    }
}

/* reg is held. 0, or an errno value. */
static int start_refresher(void)
{
    if (thread_pid == getpid())
        return 0;
    pthread_attr_t attr;
    pthread_t t;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* the job's signals stay with its own threads */
    int rc = pthread_attr_init(&attr);
    if (!rc) {
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        rc = pthread_create(&t, &attr, refresher, NULL);
        pthread_attr_destroy(&attr);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (!rc)
        thread_pid = getpid();
    return rc;
}

static void unpublish(struct hbm__pub *p)
{
    if (p->owner == getpid())
        unlink(p->path);
    munmap(p->rec, sizeof *p->rec);
    free(p);
}

static hbm_status publish_on(hbm_allocator *a)
{
    pthread_once(&once, install);
    struct hbm__pub *p = calloc(1, sizeof *p);
    if (!p) {
        hbm__set_error(a, "not published for hbmalloc top: out of host memory");
        return HBM_ERR_NOMEM;
    }
    p->a = a;
    p->owner = getpid();
    snprintf(p->path, sizeof p->path, "%s/hbmalloc-%u-%ld-%d-%u", hbm_record_dir(), (unsigned)geteuid(),
             (long)p->owner, a->device, atomic_fetch_add(&counter, 1));
    int fd = open(p->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    int err = fd < 0 ? errno : 0;
    if (!err && (fchmod(fd, 0600) || ftruncate(fd, sizeof(hbm__shared_record))))
        err = errno;
    void *m = err ? MAP_FAILED : mmap(NULL, sizeof(hbm__shared_record), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!err && m == MAP_FAILED)
        err = errno;
    if (fd >= 0)
        close(fd);
    if (err) {
        if (fd >= 0)
            unlink(p->path);
        hbm__set_error(a, "not published for hbmalloc top: %s: %s (set HBMALLOC_TOP_DIR to a folder of yours)",
                       p->path, strerror(err));
        free(p);
        return HBM_ERR_BACKEND;
    }
    p->rec = m;
    hbm_record *r = &p->rec->r;
    r->pid = p->owner;
    r->start_time = start_time(p->owner);
    r->device = a->device;
    r->rank = env_int("RANK", "RANK_ID");
    r->local_rank = env_int("LOCAL_RANK", NULL);
    r->world_size = env_int("WORLD_SIZE", "RANK_SIZE");
    put_text(r->backend, sizeof r->backend, a->backend->spec);
    hbm__conf_policy_string(&a->conf, r->settings, sizeof r->settings);
    put_text(r->source, sizeof r->source, a->conf.source);
    int cfd = open("/proc/self/comm", O_RDONLY | O_CLOEXEC);
    if (cfd >= 0) {
        ssize_t n = read(cfd, r->command, sizeof r->command - 1);
        close(cfd);
        while (n > 0 && (r->command[n - 1] == '\n' || r->command[n - 1] == 0))
            r->command[--n] = 0;
    }
    hbm__lock(a);
    update(p);
    p->rec->size = sizeof(hbm__shared_record);
    p->rec->layout = HBM__RECORD_LAYOUT;
    atomic_store_explicit((_Atomic uint64_t *)&p->rec->magic, HBM__RECORD_MAGIC, memory_order_release);
    a->pub = p;
    hbm__unlock(a);
    pthread_mutex_lock(&reg);
    p->next = list;
    list = p;
    int rc = exiting ? 0 : start_refresher();
    pthread_mutex_unlock(&reg);
    if (rc) /* kept: updated at segment changes only */
        hbm__warning_add(a, "hbmalloc top: no refresher thread (pthread_create failed): the published statistics "
                            "change only when a segment does");
    return HBM_OK;
}

hbm_status hbm_publish(hbm_allocator *a, int on)
{
    if (!a)
        return HBM_ERR_INVALID;
    if (on == HBM_PUBLISH_UNLESS_SET_OFF && a->conf.publish == 0)
        return HBM_OK;
    if (on) {
        if (a->single_thread) {
            hbm__set_error(a, "not published for hbmalloc top: this allocator runs without its lock (a replay)");
            return HBM_ERR_INVALID;
        }
        return a->pub ? HBM_OK : publish_on(a);
    }
    pthread_mutex_lock(&reg);
    hbm__lock(a);
    struct hbm__pub *p = a->pub;
    a->pub = NULL;
    hbm__unlock(a);
    for (struct hbm__pub **q = &list; p && *q; q = &(*q)->next)
        if (*q == p) {
            *q = p->next;
            break;
        }
    pthread_mutex_unlock(&reg);
    if (p)
        unpublish(p);
    return HBM_OK;
}

hbm_status hbm_record_read(const char *path, hbm_record *out, char *why, size_t whylen)
{
    char local[8];
    if (!why || !whylen)
        why = local, whylen = sizeof local;
    why[0] = 0;
    if (!path || !out) {
        snprintf(why, whylen, "NULL argument");
        return HBM_ERR_INVALID;
    }
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, whylen, "%s", strerror(errno));
        return HBM_ERR_INVALID;
    }
    struct stat st;
    const char *bad = fstat(fd, &st) ? strerror(errno)
                      : !S_ISREG(st.st_mode)   ? "not a regular file"
                      : st.st_uid != geteuid() ? "owned by another user"
                      : st.st_mode & 077       ? "readable or writable by other users (a record is 0600)"
                      : st.st_size != (off_t)sizeof(hbm__shared_record) ? "not the size of a record of this hbmalloc"
                                                              : NULL;
    hbm__shared_record *s = bad ? MAP_FAILED : mmap(NULL, sizeof *s, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (bad || s == MAP_FAILED) {
        snprintf(why, whylen, "%s", bad ? bad : strerror(errno));
        return HBM_ERR_INVALID;
    }
    hbm_status rc = HBM_ERR_INVALID;
    if (atomic_load_explicit((_Atomic uint64_t *)&s->magic, memory_order_acquire) != HBM__RECORD_MAGIC ||
        s->layout != HBM__RECORD_LAYOUT ||
        s->size != sizeof *s) {
        snprintf(why, whylen, "not a record of this hbmalloc (magic, layout or size)");
    } else {
        for (int tries = 0; tries < 1000 && rc != HBM_OK; tries++) {
            uint64_t q = atomic_load_explicit(&s->seq, memory_order_acquire);
            if (q & 1) {
                sched_yield();
                continue;
            }
            memcpy(out, &s->r, sizeof *out);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&s->seq, memory_order_relaxed) == q)
                rc = HBM_OK;
        }
        if (rc != HBM_OK)
            snprintf(why, whylen, "always being written (no consistent copy in 1000 tries)");
    }
    munmap(s, sizeof *s);
    if (rc != HBM_OK)
        return rc;
    out->backend[sizeof out->backend - 1] = out->settings[sizeof out->settings - 1] = 0;
    out->source[sizeof out->source - 1] = out->command[sizeof out->command - 1] = 0;
    if (out->pid <= 0 || out->pid > INT32_MAX) {
        snprintf(why, whylen, "no process id");
        return HBM_ERR_INVALID;
    }
    uint64_t now = out->start_time ? start_time((long)out->pid) : 0; /* 0: /proc says nothing (hidepid) */
    if ((kill((pid_t)out->pid, 0) && errno == ESRCH) || (now && now != out->start_time)) {
        snprintf(why, whylen, "process %lld has exited", (long long)out->pid);
        return HBM_ERR_STALE;
    }
    return HBM_OK;
}
