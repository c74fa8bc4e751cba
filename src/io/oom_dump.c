/*
 * oom_dump.c: the allocator's snapshot at each out-of-memory, written to a folder the user names (hbm_oom_dump,
 * $HBMALLOC_OOM_DUMP_DIR: docs/API.md, "Snapshots at an OOM"), so that the rank that ran out leaves its evidence
 * where the job's owner looks, with no line of the job's code changed (torchrun gives every worker its RANK).
 *
 * When: after the failed malloc gave its lock back (engine.c malloc_end, through a->oom_dump), as PyTorch calls its
 * OOM observers after `lock.unlock()` (CUDACachingAllocator.cpp, DeviceCachingAllocator::malloc: "Make sure we do
 * not have the device lock before calling our observers"). hbm_snapshot_take takes the lock again (it is not
 * recursive: a dump under it would wait for ever), and the file is written with no lock held, so the job's other
 * threads never wait for the disk. The snapshot is the state just after the OOM (the retry ladder has given the cache
 * back; another thread may have allocated or freed since), with the OOM's own history entry when history is on.
 *
 * The file: DIR/hbmalloc-oom-rank{RANK}-dev{DEVICE}-pid{PID}-{N}.pickle (RANK, else RANK_ID, as publish.c reads
 * them; "norank" without either), hbm_snapshot_save's pickle (`hbmalloc view`, `hbmalloc replay` and torch's
 * memory_viz open it), written under a hidden name with 64 random bits (.hbmalloc-oom-....tmp: nobody can plant a
 * link there first) and then linked to its name, which never replaces a file: a reader never sees half a snapshot,
 * and an earlier job's dump of the same rank and PID (PIDs repeat in containers) is kept, the number going on.
 *
 * Bounds, both said once when reached: at most max_dumps snapshots per allocator (one rank, one device); and the
 * folder's hbmalloc-oom-* files (hidden temporaries included) at most max_bytes, checked with no lock shared between
 * processes: the snapshot is made in memory first, so its size is known; a writer sums the folder with it before it
 * makes its temporary, reserves the temporary's whole size (posix_fallocate), and sums again before it writes a
 * byte, removing the temporary if the sum passes the bound. Of writers racing, the last to sum sees every other's
 * reserved temporary, so the bound holds at every moment (but for a readdir that misses a file renamed while it
 * runs), and ranks that all run out at once never put more than the bound on a shared disk.
 *
 * Never stops the job: a failure (the folder gone or not writable, the disk full, a file-size limit, no host
 * memory) turns the dumps off with one warning (stderr unless HBMALLOC_QUIET, and hbm_warning); the malloc's
 * HBM_ERR_OOM, its message and the last-OOM record stay as they were (nothing here writes a->err at an OOM or
 * a->oom_msg). Nothing here calls the allocator but hbm_snapshot_take.
 *
 * Owns a->oomd (changed under the allocator's lock only; freed by hbm_destroy) and a->oom_dump.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/errors.h"
#include "io/oom_dump.h"
#include "io/snapshot.h"
#include "util/env.h"
#include "util/util.h"

/* Snapshots per allocator: the first OOMs are the ones that explain a failure (the request that did not fit, the
 * state that refused it); later ones on the same device are mostly a loop that catches the error and tries again
 * smaller (a batch-size finder, cuDNN's workspace fallback), whose states repeat the first. Three keep the first and
 * what follows it. */
#define DEFAULT_MAX_DUMPS 3
/* The folder's hbmalloc-oom-* files, in MiB. A snapshot without history is small (400 live blocks: 0.1 MiB, 0.4 MiB
 * labelled with 8-frame stacks); history makes it large (100,000 entries with 8-frame stacks: 87 MiB, with 30-frame
 * stacks: 305 MiB; measured with hbm_snapshot_save, docs/API.md). 2 GiB keeps the three dumps of two ranks with such
 * history, or those of thousands without, and stops a job that runs out on every rank at once from filling a shared
 * disk. */
#define DEFAULT_MAX_MB 2048
#define PREFIX "hbmalloc-oom-"

struct hbm__oomd {
    bool on;         /* false: hbm_oom_dump(a, NULL) turned it off */
    bool off;        /* a dump failed: no more, said once */
    bool said_count; /* max_dumps reached, said */
    bool said_full;  /* the folder's bound reached, said */
    int max_dumps;
    int made;     /* dumps begun (one skipped for the folder's bound is given back) */
    unsigned seq; /* the number in the last file's name */
    unsigned gen; /* bumped by each hbm_oom_dump: a dump begun before changes nothing after it */
    uint64_t max_bytes;
    char dir[PATH_MAX]; /* absolute */
};

/* What one dump works with, copied under the lock: the settings may change while it writes. */
typedef struct job {
    unsigned gen, seq;
    uint64_t max_bytes;
    char dir[PATH_MAX];
} job;

/* A warning: added to hbm_warning (under the lock) and said on stderr unless HBMALLOC_QUIET. */
__attribute__((format(printf, 2, 3))) static void say(hbm_allocator *a, const char *fmt, ...)
{
    char text[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    hbm__lock(a);
    hbm__warning_add(a, text);
    hbm__unlock(a);
    if (!hbm__env(HBM__ENV_QUIET))
        fprintf(stderr, "hbmalloc: warning: %s\n", text);
}

/* The folder's bytes never wrap: sparse files of 2^63 bytes planted in a shared folder (tmpfs takes them) would
 * otherwise sum to a little, and every dump would pass the bound. */
uint64_t hbm__oom_dump_add(uint64_t sum, uint64_t size) { return size > UINT64_MAX - sum ? UINT64_MAX : sum + size; }
bool hbm__oom_dump_over(uint64_t have, uint64_t len, uint64_t max) { return len > max || have > max - len; }

/* The bytes of the folder's dumps and hidden temporaries (regular files named PREFIX* or .PREFIX*). 0, or errno. */
static int folder_bytes(const char *dir, uint64_t *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return errno;
    uint64_t sum = 0;
    struct dirent *e;
    errno = 0;
    while ((e = readdir(d))) {
        const char *n = e->d_name + (e->d_name[0] == '.');
        struct stat st;
        if (strncmp(n, PREFIX, sizeof PREFIX - 1) == 0 && fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
            S_ISREG(st.st_mode))
            sum = hbm__oom_dump_add(sum, (uint64_t)st.st_size);
    }
    int err = errno;
    closedir(d);
    *out = sum;
    return err;
}

/* "rank3", from RANK else RANK_ID (torchrun sets RANK for every worker: torch/distributed/elastic/agent/server/
 * local_elastic_agent.py v1.13.1:236; torch_npu's launchers RANK_ID), or "norank". */
static void rank_name(char *out, size_t n)
{
    long long r = hbm__env_count_or(HBM__ENV_RANK, HBM__ENV_RANK_ID);
    if (r >= 0)
        snprintf(out, n, "rank%lld", r);
    else
        snprintf(out, n, "norank");
}

/* The snapshot's pickle in memory: 0, or -1 (no host memory). */
static int encode(hbm_allocator *a, unsigned char **data, size_t *len)
{
    hbm_snapshot *s = NULL;
    if (hbm_snapshot_take(a, &s) != HBM_OK)
        return -1;
    int rc = hbm__snapshot_pickle(s, data, len);
    hbm_snapshot_free(s);
    return rc;
}

/* Into fd, made for it: its space first (posix_fallocate: another writer's sum of the folder counts it from then on,
 * and a full disk fails here, before a byte is written), then, if the folder's sum with it stays within max_bytes,
 * the bytes. 0; EDQUOT when the sum passes the bound (*have: the folder's bytes without this file); or an errno. A
 * file-size limit (ulimit -f) raises SIGXFSZ at the call that passes it, whose default ends the process: with a
 * limit, the signal is blocked on this thread meanwhile and a pending one taken back, so the call fails with EFBIG
 * and the disposition is never touched. */
static int write_reserved(int fd, const char *dir, const unsigned char *data, size_t len, uint64_t max_bytes,
                          uint64_t *have)
{
    struct rlimit rl;
    bool limited = getrlimit(RLIMIT_FSIZE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY;
    sigset_t xfsz, old;
    sigemptyset(&xfsz);
    sigaddset(&xfsz, SIGXFSZ);
    if (limited)
        pthread_sigmask(SIG_BLOCK, &xfsz, &old);
    int e = len ? posix_fallocate(fd, 0, (off_t)len) : 0;
    if (!e && !(e = folder_bytes(dir, have))) {
        *have = *have > len ? *have - len : 0;
        if (hbm__oom_dump_over(*have, len, max_bytes))
            e = EDQUOT;
    }
    for (size_t off = 0; !e && off < len;) {
        ssize_t w = pwrite(fd, data + off, len - off, (off_t)off);
        if (w < 0 && errno != EINTR)
            e = errno;
        else if (w > 0)
            off += (size_t)w;
    }
    if (limited) {
        sigset_t pending;
        const struct timespec now = {0, 0};
        if (sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ))
            sigtimedwait(&xfsz, NULL, &now);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    return e;
}

/* Turns the dumps off after a failure, once (a dump begun under other settings changes nothing). */
static void fail(hbm_allocator *a, const job *j, const char *why)
{
    hbm__lock(a);
    struct hbm__oomd *o = a->oomd;
    bool first = o && o->gen == j->gen && !o->off;
    if (first)
        o->off = true;
    hbm__unlock(a);
    if (first)
        say(a, "snapshots at an OOM are off on device %d: %s. The OOM itself is reported as before", a->device, why);
}

/* The folder's bound reached: the dump given back (a later OOM may find room), said once. */
static void full(hbm_allocator *a, const job *j, uint64_t have, uint64_t size)
{
    hbm__lock(a);
    struct hbm__oomd *o = a->oomd;
    bool first = o && o->gen == j->gen && !o->said_full;
    if (o && o->gen == j->gen) {
        o->made--;
        o->said_full = true;
    }
    hbm__unlock(a);
    if (!first)
        return;
    char s_have[32], s_size[32], s_max[32];
    hbm__format_size(have, s_have, sizeof s_have);
    hbm__format_size(size, s_size, sizeof s_size);
    hbm__format_size(j->max_bytes, s_max, sizeof s_max);
    if (size)
        say(a,
            "no snapshot written at this OOM on device %d: %s already holds %s of " PREFIX "* files and this one of %s "
            "would pass their bound of %s (HBMALLOC_OOM_DUMP_MAX_MB); move them away or raise the bound",
            a->device, j->dir, s_have, s_size, s_max);
    else
        say(a,
            "no snapshot written at this OOM on device %d: %s already holds %s of " PREFIX "* files, their bound is %s "
            "(HBMALLOC_OOM_DUMP_MAX_MB); move them away or raise the bound",
            a->device, j->dir, s_have, s_max);
}

/* a->oom_dump: after an OOM of a malloc on `a`, its lock given back. */
static void dump(hbm_allocator *a)
{
    job j;
    int said_max = -1;
    hbm__lock(a);
    struct hbm__oomd *o = a->oomd;
    bool go = o && o->on && !o->off && o->made < o->max_dumps;
    if (go) {
        o->made++;
        j.gen = o->gen;
        j.seq = ++o->seq;
        j.max_bytes = o->max_bytes;
        memcpy(j.dir, o->dir, sizeof j.dir);
    } else if (o && o->on && !o->off && !o->said_count) {
        o->said_count = true;
        said_max = o->max_dumps;
        memcpy(j.dir, o->dir, sizeof j.dir);
    }
    hbm__unlock(a);
    if (said_max >= 0)
        say(a,
            "no more snapshots at an OOM on device %d: %d written to %s already, the most HBMALLOC_OOM_DUMP_MAX "
            "allows; the first ones are kept",
            a->device, said_max, j.dir);
    if (!go)
        return;

    char why[PATH_MAX + 160];
    uint64_t have = 0;
    int e = folder_bytes(j.dir, &have);
    if (e) {
        snprintf(why, sizeof why, "%s cannot be read: %s", j.dir, strerror(e));
        fail(a, &j, why);
        return;
    }
    /* The snapshot in memory first: its size is known before anything is written, so the bound is checked against
     * it and its space reserved before its bytes go out (a job whose ranks all run out at once never puts ranks x a
     * snapshot on the disk past the bound, even for a moment). */
    unsigned char *data = NULL;
    size_t len = 0;
    if (encode(a, &data, &len)) {
        fail(a, &j, "out of host memory for the snapshot");
        return;
    }
    if (hbm__oom_dump_over(have, len, j.max_bytes)) {
        free(data);
        full(a, &j, have, len);
        return;
    }
    char rank[32], tmp[PATH_MAX], name[PATH_MAX];
    rank_name(rank, sizeof rank);
    long pid = (long)getpid();
    int n = snprintf(tmp, sizeof tmp, "%s/." PREFIX "%s-dev%d-pid%ld-%u.%016llx.tmp", j.dir, rank, a->device, pid,
                     j.seq, (unsigned long long)hbm__random_bits());
    if (n < 0 || (size_t)n >= sizeof tmp) {
        free(data);
        fail(a, &j, "the folder's name is too long for a file's path (PATH_MAX)");
        return;
    }
    int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0666);
    if (fd < 0) {
        snprintf(why, sizeof why, "%s cannot be made: %s", tmp, strerror(errno));
        free(data);
        fail(a, &j, why);
        return;
    }
    e = write_reserved(fd, j.dir, data, len, j.max_bytes, &have);
    free(data);
    if (close(fd) && !e)
        e = errno;
    if (e) {
        unlink(tmp);
        if (e == EDQUOT) {
            full(a, &j, have, len);
        } else {
            snprintf(why, sizeof why, "%s: %s", tmp, strerror(e));
            fail(a, &j, why);
        }
        return;
    }
    /* link(), not rename(): it never replaces a file that has the name. A filesystem without hard links gets
     * rename() once no file has the name. */
    unsigned seq = j.seq;
    for (int tries = 0; tries < 1000; tries++, seq++) {
        n = snprintf(name, sizeof name, "%s/" PREFIX "%s-dev%d-pid%ld-%u.pickle", j.dir, rank, a->device, pid, seq);
        if (n < 0 || (size_t)n >= sizeof name) { /* shorter than the temporary's: cannot happen */
            e = ENAMETOOLONG;
            break;
        }
        if (link(tmp, name) == 0) {
            e = 0;
            break;
        }
        e = errno;
        if (e == EEXIST)
            continue;
        if ((e == EPERM || e == ENOTSUP || e == ENOSYS || e == EMLINK) && access(name, F_OK) != 0 &&
            rename(tmp, name) == 0)
            e = 0;
        break;
    }
    unlink(tmp);
    if (e) {
        snprintf(why, sizeof why, "%s cannot be made: %s", name, strerror(e));
        fail(a, &j, why);
        return;
    }
    hbm__lock(a);
    if (a->oomd && a->oomd->gen == j.gen && a->oomd->seq < seq)
        a->oomd->seq = seq;
    hbm__unlock(a);
}

/* A bound from its argument, else its variable, else its default: 0, or -1 with the reason in why. */
static int bound(long long arg, hbm__env_var var, long long dflt, long long most, long long *out, char *why,
                 size_t whylen)
{
    long long v = arg;
    if (v < 0) {
        v = hbm__env_count(var);
        if (v == -2) {
            snprintf(why, whylen, "%s=%s: not a count (a whole number, 0 or more)", hbm__env_name(var), hbm__env(var));
            return -1;
        }
        if (v < 0)
            v = dflt;
    }
    if (v > most) {
        snprintf(why, whylen, "a bound of %lld (%s) is past its most, %lld", v, hbm__env_name(var), most);
        return -1;
    }
    *out = v;
    return 0;
}

/* A refusal of hbm_oom_dump (core/errors.c). */
#define refuse(a, ...) hbm__refuse((a), HBM_ERR_INVALID, "no snapshots at an OOM", __VA_ARGS__)

hbm_status hbm_oom_dump(hbm_allocator *a, const char *dir, int max_dumps, long long max_mb)
{
    if (!a)
        return HBM_ERR_INVALID;
    if (!dir || !*dir) {
        hbm__lock(a);
        if (a->oomd) {
            a->oomd->on = false;
            a->oomd->gen++;
        }
        __atomic_store_n(&a->oom_dump, NULL, __ATOMIC_RELEASE);
        hbm__unlock(a);
        return HBM_OK;
    }
    char why[600];
    long long count, mb;
    if (bound(max_dumps, HBM__ENV_OOM_DUMP_MAX, DEFAULT_MAX_DUMPS, INT_MAX, &count, why, sizeof why) ||
        bound(max_mb, HBM__ENV_OOM_DUMP_MAX_MB, DEFAULT_MAX_MB, (long long)(UINT64_MAX >> 21), &mb, why, sizeof why))
        return refuse(a, "%s", why);
    char abs[PATH_MAX];
    int n;
    if (dir[0] == '/') {
        n = snprintf(abs, sizeof abs, "%s", dir);
    } else { /* the folder the job started in, not the one it is in at its OOM */
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof cwd))
            return refuse(a, "%s is relative and the current folder is unknown: %s", dir, strerror(errno));
        n = snprintf(abs, sizeof abs, "%s/%s", cwd, dir);
    }
    if (n < 0 || (size_t)n + 80 >= sizeof abs) /* room for a file's name after it */
        return refuse(a, "the folder's name is too long: %zu bytes, a file's path would pass PATH_MAX (%d)",
                      strlen(dir), PATH_MAX);
    struct stat st;
    if (stat(abs, &st) != 0)
        return refuse(a, "%s: %s (the folder is not made for you: make it, on a disk with room)", abs, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return refuse(a, "%s is not a folder", abs);
    if (access(abs, W_OK | X_OK) != 0)
        return refuse(a, "%s is not writable by this process: %s", abs, strerror(errno));
    struct hbm__oomd *fresh = NULL;
    if (!a->oomd && !(fresh = calloc(1, sizeof *fresh)))
        return refuse(a, "out of host memory");
    hbm__lock(a);
    if (fresh && !a->oomd)
        a->oomd = fresh, fresh = NULL;
    struct hbm__oomd *o = a->oomd;
    o->gen++;
    o->on = true;
    o->off = o->said_count = o->said_full = false;
    o->made = 0;
    o->max_dumps = (int)count;
    o->max_bytes = (uint64_t)mb << 20;
    memcpy(o->dir, abs, sizeof o->dir);
    __atomic_store_n(&a->oom_dump, dump, __ATOMIC_RELEASE);
    hbm__unlock(a);
    free(fresh);
    return HBM_OK;
}

hbm_status hbm__oom_dump_from_env(hbm_allocator *a)
{
    const char *dir = hbm__env(HBM__ENV_OOM_DUMP_DIR);
    if (!dir || !*dir)
        return HBM_OK;
    hbm_status rc = hbm_oom_dump(a, dir, -1, -1);
    if (rc != HBM_OK) {
        char why[sizeof a->err];
        memcpy(why, a->err, sizeof why);
        hbm__set_error(a, "%s (from HBMALLOC_OOM_DUMP_DIR)", why);
    }
    return rc;
}

void hbm__oom_dump_free(hbm_allocator *a)
{
    __atomic_store_n(&a->oom_dump, NULL, __ATOMIC_RELEASE);
    free(a->oomd);
    a->oomd = NULL;
}
