/*
 * publish.c: an allocator's statistics in shared memory, for `hbmalloc top` and other monitors
 * (docs/MONITOR.md).
 *
 * Each publishing allocator owns one file of hbm_record_dir(), created 0600 with O_EXCL under a name with 64
 * random bits (hbmalloc-UID-PID-DEVICE-RANDOM: another user cannot squat it in a shared folder, and jobs of two
 * PID namespaces sharing /dev/shm do not collide), its space reserved for real (posix_fallocate: a store into
 * the mapping of a full tmpfs would be SIGBUS) and mapped shared: a header (magic, layout, size, the writer's PID
 * namespace) and a sequence number around an hbm_record. A writer makes the number odd, writes, makes it even; a
 * reader copies between two equal even readings (a seqlock), so it never blocks the job and never sees half an
 * update. Writers: the segment-change points of the engine (hbm__publish_update, under the allocator's lock: a
 * device call was just made, the copy costs nothing beside it), an OOM, and one thread of the library that
 * refreshes every record of the process twice a second — so the malloc/free fast path is untouched.
 *
 * The writer holds an exclusive flock on its file for the record's life (the descriptor stays open; a forked
 * child closes its copy): the proof of life a reader checks in any PID namespace (hbm_record_read). PIDs are
 * only believed by a reader of the writer's own namespace.
 *
 * Process-wide state (the list of records, the thread) is guarded by `reg`, always taken before an allocator's
 * lock and tracked for fork (fork.c); every change of an allocator's publishing (hbm_publish) happens whole under
 * it, so two callers never both publish one allocator. A record belongs to the process that made it: a forked
 * child neither updates nor removes its parent's records. At exit the files are removed (atexit), and when
 * SIGTERM, SIGINT or SIGHUP left at their default end the process (publish_signals.c); a killed process leaves its
 * file, unlocked, which readers report as stale (HBM_ERR_STALE).
 *
 * Failing to publish never stops the job: hbm_publish returns an error with the reason, the allocator goes on.
 * This file must not touch the allocator beyond its statistics (read under its lock) and a->pub.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/fork.h"
#include "util/env.h"
#include "core/errors.h"
#include "core/stats.h"
#include "core/segments.h"
#include "core/sleep.h"
#include "core/outside.h"
#include "io/publish.h"
#include "io/publish_signals.h"
#include "util/util.h"

#define REFRESH_NS 500000000L /* the thread's period: every record at least once a second */

struct hbm__pub {
    hbm__shared_record *rec;
    hbm_allocator *a;
    pid_t owner;
    int fd;      /* open for the record's life: its flock is the writer's proof of life (-1 in a forked child) */
    int sigslot; /* its slot in the signal handler's table (publish_signals.c), or -1 */
    struct hbm__pub *next;
    char path[]; /* as long as the folder's name needs */
};

static pthread_mutex_t reg = PTHREAD_MUTEX_INITIALIZER;
static struct hbm__pub *list;
static pid_t thread_pid; /* the process whose refresher runs (a forked child has none) */
static bool exiting;
static pthread_once_t once = PTHREAD_ONCE_INIT;

const char *hbm_record_dir(void)
{
    const char *d = hbm__env(HBM__ENV_TOP_DIR);
    if (d && *d)
        return d;
    struct stat st;
    return stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
}

/* This process's PID namespace (the inode of /proc/self/ns/pid), 0 when /proc does not say. */
static uint64_t pid_namespace(void)
{
    struct stat st;
    return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
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
    hbm_stats view;
    hbm__stats_view(a, &view);
    const hbm_stats *s = &view;
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
    r->job_peak_allocated_bytes = r->peak_allocated_bytes > a->peak_allocated_before_reset
                                      ? r->peak_allocated_bytes
                                      : a->peak_allocated_before_reset;
    r->job_peak_reserved_bytes = r->peak_reserved_bytes > a->peak_reserved_before_reset ? r->peak_reserved_bytes
                                                                                        : a->peak_reserved_before_reset;
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
    hbm__sleep_record(a, &r->asleep_bytes, &r->backup_bytes, r->asleep_tags, sizeof r->asleep_tags);
    r->resident_ns = a->res_ns;
    r->resident_used_bytes = a->res_ns ? a->res_used : -1;
    snprintf(r->resident, sizeof r->resident, "%s", a->res_ns ? a->res_text : "");
    hbm_stats o;
    hbm__outside_stats(a, &o);
    r->device_used_bytes = o.device_used_bytes;
    r->outside_bytes = o.outside_bytes;
    r->outside_process_bytes = o.outside_process_bytes;
    r->outside_others_bytes = o.outside_others_bytes;
    r->outside_ns = a->outside_last.ns;
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

static void hbm__publish_update(hbm_allocator *a)
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

/* In a forked child: the parent's records are not the child's, nor is their lock (flock belongs to the open
 * file, which the child shares): closed, so that a child outliving its parent does not keep the parent's
 * records alive for readers. reg is held across the fork (fork.c), so the list is whole. */
static void child_after_fork(void)
{
    for (struct hbm__pub *p = list; p; p = p->next)
        if (p->fd >= 0) {
            close(p->fd);
            p->fd = -1;
        }
}

static void install(void)
{
    atexit(at_exit);
    hbm__pubsig_install(); /* and a signal that would end the process without atexit (publish_signals.c) */
    (void)hbm__fork_track(&reg, HBM__FORK_SET); /* untracked (no host memory): fork is then as unsafe as before */
    (void)pthread_atfork(NULL, NULL, child_after_fork); /* failing: a child keeps the lock while it lives */
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
                hbm_outside o; /* memory outside hbmalloc, measured for each refresh (outside.c) */
                hbm_outside_get(p->a, &o);
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
    hbm__pubsig_remove(p->sigslot);
    if (p->owner == getpid())
        unlink(p->path);
    munmap(p->rec, sizeof *p->rec);
    if (p->fd >= 0)
        close(p->fd); /* after the unlink: a reader never finds the file unlocked while it is listed */
    free(p);
}

/* The error of a failed hbm_publish (core/errors.c). */
#define refuse(a, rc, ...) hbm__refuse((a), (rc), "not published for hbmalloc top", __VA_ARGS__)

/* Makes the record and publishes it; reg is held. The file is ready (size reserved, lock held, header written)
 * before the allocator points at it. */
static hbm_status publish_on(hbm_allocator *a)
{
    const char *dir = hbm_record_dir();
    const size_t size = sizeof(hbm__shared_record);
    /* Sizing a file past RLIMIT_FSIZE raises SIGXFSZ, which kills a process that does not ignore it (`ulimit -f`
     * in a job script): checked first, so that the signal is never raised and its disposition never touched. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < size)
        return refuse(a, HBM_ERR_BACKEND, "the file size limit (ulimit -f) is %llu bytes, under a record's %zu",
                      (unsigned long long)rl.rlim_cur, size);
    /* "/hbmalloc-" UID "-" PID "-" DEVICE "-" 16 hex digits, and the NUL: at most 10 + 3 * 11 + 3 + 16 + 1 */
    size_t len = strlen(dir) + 64;
    if (len > PATH_MAX)
        return refuse(a, HBM_ERR_BACKEND,
                      "the folder's name is too long: %zu bytes, a record's path would pass "
                      "PATH_MAX (%d) (set HBMALLOC_TOP_DIR to a shorter one)",
                      strlen(dir), PATH_MAX);
    struct hbm__pub *p = calloc(1, sizeof *p + len);
    if (!p)
        return refuse(a, HBM_ERR_NOMEM, "out of host memory");
    p->a = a;
    p->owner = getpid();
    p->sigslot = -1; /* no slot until the record is made */
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 8; tries++) { /* a name taken: another, random again */
        snprintf(p->path, len, "%s/hbmalloc-%u-%ld-%d-%016llx", dir, (unsigned)geteuid(), (long)p->owner, a->device,
                 (unsigned long long)hbm__random_bits());
        fd = open(p->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    int err = fd < 0 ? errno : 0;
    const char *step = "cannot create a record";
    /* The lock before the size: a reader judges only a file of a record's size, so it never sees one unlocked. */
    if (!err && flock(fd, LOCK_EX | LOCK_NB))
        err = errno, step = "cannot lock the record";
    if (!err && fchmod(fd, 0600))
        err = errno, step = "cannot make the record private";
    if (!err && (err = posix_fallocate(fd, 0, (off_t)size)) != 0) /* real space: no page of it can fault later */
        step = "no space for the record";
    void *m = err ? MAP_FAILED : mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!err && m == MAP_FAILED)
        err = errno, step = "cannot map the record";
    if (err) {
        if (fd >= 0) {
            unlink(p->path);
            close(fd);
        }
        free(p);
        size_t n = strlen(dir);
        return refuse(a, HBM_ERR_BACKEND, "%s in %.*s%s: %s (set HBMALLOC_TOP_DIR to a folder of yours%s)", step,
                      (int)(n > 300 ? 300 : n), dir, n > 300 ? "..." : "", strerror(err),
                      err == ENOSPC || err == EDQUOT ? " with room" : "");
    }
    p->fd = fd;
    p->rec = m;
    p->rec->pid_ns = pid_namespace();
    hbm_record *r = &p->rec->r;
    r->pid = p->owner;
    r->start_time = start_time(p->owner);
    r->device = a->device;
    r->rank = hbm__env_count_or(HBM__ENV_RANK, HBM__ENV_RANK_ID); /* digits only, as the OOM dumps read it */
    r->local_rank = hbm__env_count_or(HBM__ENV_LOCAL_RANK, HBM__ENV_VARS);
    r->world_size = hbm__env_count_or(HBM__ENV_WORLD_SIZE, HBM__ENV_RANK_SIZE);
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
    p->rec->size = (uint32_t)size;
    p->rec->layout = HBM__RECORD_LAYOUT;
    atomic_store_explicit((_Atomic uint64_t *)&p->rec->magic, HBM__RECORD_MAGIC, memory_order_release);
    a->pub = p;
    a->pub_update = hbm__publish_update;
    hbm__unlock(a);
    p->next = list;
    list = p;
    p->sigslot = hbm__pubsig_add(p->path);
    if (!exiting && start_refresher()) { /* kept: updated at segment changes only */
        hbm__lock(a);
        hbm__warning_add(a, "hbmalloc top: no refresher thread (pthread_create failed): the published statistics "
                            "change only when a segment does");
        hbm__unlock(a);
    }
    return HBM_OK;
}

hbm_status hbm_publish(hbm_allocator *a, int on)
{
    if (!a)
        return HBM_ERR_INVALID;
    if (on == HBM_PUBLISH_UNLESS_SET_OFF && a->conf.publish == 0)
        return HBM_OK;
    pthread_once(&once, install);
    /* The whole change under reg: a->pub is written only here, under reg and the allocator's lock, so it can be
     * read under either. Two threads publishing at once make one record; an unpublish never misses one. */
    pthread_mutex_lock(&reg);
    hbm_status rc = HBM_OK;
    struct hbm__pub *p = NULL;
    if (on && a->single_thread) {
        rc = refuse(a, HBM_ERR_INVALID, "this allocator runs without its lock (a replay)");
    } else if (on) {
        if (!a->pub)
            rc = publish_on(a);
    } else if (a->pub) {
        hbm__lock(a);
        p = a->pub;
        a->pub = NULL;
        a->pub_update = NULL;
        hbm__unlock(a);
        for (struct hbm__pub **q = &list; *q; q = &(*q)->next)
            if (*q == p) {
                *q = p->next;
                break;
            }
    }
    pthread_mutex_unlock(&reg);
    if (p)
        unpublish(p);
    return rc;
}

/* The record copied whole by pread (a file that shrinks under a mapping would be SIGBUS): between two equal even
 * readings of its sequence number. NULL, or why not. */
static const char *read_record(int fd, hbm__shared_record *s)
{
    const off_t at = (off_t)offsetof(hbm__shared_record, seq);
    for (int tries = 0; tries < 1000; tries++) {
        uint64_t q, again;
        if (pread(fd, &q, sizeof q, at) != (ssize_t)sizeof q)
            return "changed size while being read";
        if (q & 1) { /* being written */
            sched_yield();
            continue;
        }
        atomic_thread_fence(memory_order_acquire); /* the copy after the first reading, the second after it */
        if (pread(fd, s, sizeof *s, 0) != (ssize_t)sizeof *s)
            return "changed size while being read";
        atomic_thread_fence(memory_order_acquire);
        if (pread(fd, &again, sizeof again, at) != (ssize_t)sizeof again)
            return "changed size while being read";
        if (again == q)
            return NULL;
    }
    return "always being written (no consistent copy in 1000 tries)";
}

/* Whether the record's writer lives. Its lock says so in any PID namespace: free, no process has the record
 * open (the writer died, and any forked child too). Held (or a file system without flock): alive, unless the
 * record comes from this reader's own namespace and its PID has exited or names a process started at another
 * time (say, a forked child of a killed writer, from before it closed its copy). */
static hbm_status liveness(int fd, const hbm__shared_record *s, char *why, size_t whylen)
{
    const hbm_record *r = &s->r;
    if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
        flock(fd, LOCK_UN);
        snprintf(why, whylen, "process %lld has exited (no process holds its record)", (long long)r->pid);
        return HBM_ERR_STALE;
    }
    uint64_t ns = pid_namespace();
    if (!ns || ns != s->pid_ns)
        return HBM_OK; /* another namespace's PID says nothing here: a live job there is not taken for dead */
    uint64_t now = r->start_time ? start_time((long)r->pid) : 0; /* 0: /proc says nothing (hidepid) */
    if ((kill((pid_t)r->pid, 0) && errno == ESRCH) || (now && now != r->start_time)) {
        snprintf(why, whylen, "process %lld has exited", (long long)r->pid);
        return HBM_ERR_STALE;
    }
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
    hbm__shared_record s;
    const char *bad = fstat(fd, &st)                  ? strerror(errno)
                      : !S_ISREG(st.st_mode)          ? "not a regular file"
                      : st.st_uid != geteuid()        ? "owned by another user"
                      : st.st_mode & 077              ? "readable or writable by other users (a record is 0600)"
                      : st.st_size != (off_t)sizeof s ? "not the size of a record of this hbmalloc"
                                                      : read_record(fd, &s);
    if (!bad && (s.magic != HBM__RECORD_MAGIC || s.layout != HBM__RECORD_LAYOUT || s.size != sizeof s))
        bad = "not a record of this hbmalloc (magic, layout or size)";
    if (!bad && (s.r.pid <= 0 || s.r.pid > INT32_MAX))
        bad = "no process id";
    hbm_status rc = bad ? HBM_ERR_INVALID : liveness(fd, &s, why, whylen);
    close(fd);
    if (bad) {
        snprintf(why, whylen, "%s", bad);
        return HBM_ERR_INVALID;
    }
    *out = s.r;
    out->backend[sizeof out->backend - 1] = out->settings[sizeof out->settings - 1] = 0;
    out->source[sizeof out->source - 1] = out->command[sizeof out->command - 1] = 0;
    out->asleep_tags[sizeof out->asleep_tags - 1] = out->resident[sizeof out->resident - 1] = 0;
    return rc;
}
