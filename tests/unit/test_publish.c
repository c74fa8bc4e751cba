/* test_publish.c: the statistics a process publishes for `hbmalloc top` (src/io/publish.c): what the record holds
 * and when it changes, who may read it, records of exited processes, fork, and the settings key; and (#28) that
 * publishing never hurts the job — a full folder, a file-size limit, racing callers, squatted names, long folder
 * names, other PID namespaces — and that a reader survives a record shrinking under it. Each test works in a
 * folder of its own (HBMALLOC_TOP_DIR). */
#define _GNU_SOURCE /* unshare, CLONE_NEW* */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "io/publish.h"

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hbm-publish-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    setenv("HBMALLOC_TOP_DIR", dir, 1);
    return 0;
}

static int remove_dir(void **state)
{
    (void)state;
    remove_records_dir(dir);
    unsetenv("HBMALLOC_TOP_DIR");
    unsetenv("RANK"); /* a failed test leaves what it set */
    unsetenv("RANK_ID");
    return 0;
}

/* The record files in the folder (names into out, up to cap); their count. */
static int records(char out[][512], int cap)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "hbmalloc-", 9)) {
            if (n < cap)
                snprintf(out[n], 512, "%s/%.300s", dir, e->d_name);
            n++;
        }
    if (d)
        closedir(d);
    return n;
}

static hbm_record read_only_record(const char *expect_name_part)
{
    char names[4][512];
    assert_int_equal(records(names, 4), 1);
    if (expect_name_part)
        assert_non_null(strstr(names[0], expect_name_part));
    hbm_record r;
    char why[160];
    hbm_status rc = hbm_record_read(names[0], &r, why, sizeof why);
    if (rc != HBM_OK)
        fail_msg("hbm_record_read(%s) = %s: %s", names[0], hbm_status_name(rc), why);
    return r;
}

static void assert_record_is(const hbm_record *r, hbm_allocator *a)
{
    hbm_stats s = stats_of(a);
    assert_int_equal(r->allocated_bytes, s.allocated_bytes[HBM_POOL_ALL].current);
    assert_int_equal(r->reserved_bytes, s.reserved_bytes[HBM_POOL_ALL].current);
    assert_int_equal(r->active_bytes, s.active_bytes[HBM_POOL_ALL].current);
    assert_int_equal(r->requested_bytes, s.requested_bytes[HBM_POOL_ALL].current);
    assert_int_equal(r->inactive_split_bytes, s.inactive_split_bytes[HBM_POOL_ALL].current);
    assert_int_equal(r->peak_reserved_bytes, s.reserved_bytes[HBM_POOL_ALL].peak);
    assert_int_equal(r->allocation, s.allocation[HBM_POOL_ALL].current);
    assert_int_equal(r->segment, s.segment[HBM_POOL_ALL].current);
    assert_int_equal(r->num_ooms, s.num_ooms);
    assert_int_equal(r->num_device_alloc, s.num_device_alloc);
    assert_int_equal(r->num_device_free, s.num_device_free);
    /* the largest free block, found another way: the snapshot's inactive blocks */
    hbm_snapshot *snap;
    assert_int_equal(hbm_snapshot_take(a, &snap), HBM_OK);
    uint64_t largest = 0;
    for (size_t i = 0; i < snap->nblocks; i++)
        if (snap->blocks[i].state == HBM_BLOCK_INACTIVE && snap->blocks[i].size > largest)
            largest = snap->blocks[i].size;
    hbm_snapshot_free(snap);
    assert_int_equal(r->largest_free_bytes, largest);
}

/* The record once the refresher has written it again after `before` (10 s allowed a loaded machine). */
static hbm_record refreshed_record(uint64_t before)
{
    struct timespec t0, now;
    hbm_record r;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
        r = read_only_record(NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (r.updated_ns == before && now.tv_sec - t0.tv_sec < 10);
    return r;
}

/* The rank is read as the OOM dumps read it: digits only, RANK else RANK_ID. A rank past long long was published as
 * LLONG_MAX (strtoll's clamp), one with a leading space as its number, while the dumps said "norank". */
static void a_rank_that_is_not_a_count_is_none(void **state)
{
    (void)state;
    static const char *const values[] = {"99999999999999999999", " 3", "3 ", "-1", "0x3"};
    unsetenv("RANK_ID");
    for (int i = 0; i < 5; i++) {
        setenv("RANK", values[i], 1);
        for (int with_id = 0; with_id < 2; with_id++) {
            if (with_id)
                setenv("RANK_ID", "5", 1);
            hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
            char part[64];
            snprintf(part, sizeof part, "hbmalloc-%u-%ld-0-", (unsigned)geteuid(), (long)getpid());
            hbm_record r = read_only_record(part);
            if (r.rank != (with_id ? 5 : -1))
                fail_msg("RANK='%s'%s: rank %lld", values[i], with_id ? ", RANK_ID=5" : "", (long long)r.rank);
            assert_int_equal(hbm_destroy(a), HBM_OK);
            unsetenv("RANK_ID");
        }
    }
    unsetenv("RANK");
}

/* A segment change shows at once; a cache hit within a second (the refresher); destroy removes the file. */
static void the_record_follows_the_allocator(void **state)
{
    (void)state;
    setenv("RANK", "3", 1);
    hbm_allocator *a = open_sim("sim:capacity=4GiB", "hbm_publish:True");
    unsetenv("RANK");
    char part[64];
    snprintf(part, sizeof part, "hbmalloc-%u-%ld-0-", (unsigned)geteuid(), (long)getpid());
    hbm_record r = read_only_record(part);
    assert_int_equal(r.pid, getpid());
    FILE *f = fopen("/proc/self/stat", "r"); /* field 22, the start time, read another way (proc(5)) */
    unsigned long long start = 0;
    assert_int_equal(fscanf(f,
                            "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u "
                            "%*d %*d %*d %*d %*d %*d %llu",
                            &start),
                     1);
    fclose(f);
    assert_int_equal(r.start_time, start);
    assert_int_equal(r.rank, 3);
    assert_int_equal(r.local_rank, -1);
    assert_int_equal(r.device_total, 4 * GiB);
    assert_string_equal(r.source, "explicit"); /* the settings string given to hbm_open */
    assert_non_null(strstr(r.settings, "hbm_publish:True"));
    assert_record_is(&r, a);

    void *p = must_malloc(a, 100 * MiB, 0), *q = must_malloc(a, 30 * MiB, 0);
    r = read_only_record(NULL); /* two segments made: updated at each, no waiting */
    assert_int_equal(r.segment, 2);
    assert_int_equal(r.reserved_bytes, stats_of(a).reserved_bytes[0].current);
    assert_int_equal(hbm_free(a, p), HBM_OK);
    void *small = must_malloc(a, 10 * MiB, 0); /* a cache hit in the freed 100 MiB: no segment change */
    void *huge = NULL;
    assert_int_equal(hbm_malloc(a, 8 * GiB, 0, &huge), HBM_ERR_OOM);
    r = read_only_record(NULL);
    assert_int_equal(r.num_ooms, 1); /* an OOM updates it at once */
    uint64_t before = r.updated_ns;
    r = refreshed_record(before);       /* the refresher, with no call into the allocator */
    assert_true(r.updated_ns > before); /* refreshed with no call (every 0.5 s; 10 s allowed a loaded machine) */
    assert_record_is(&r, a);
    assert_true(r.largest_free_bytes > 0 && r.inactive_split > 0); /* the 90 MiB left of the split segment */
    /* The job's peaks survive a reset of the peaks (reset_peak_memory_stats); the record's own peaks do not. */
    assert_int_equal(r.job_peak_reserved_bytes, r.peak_reserved_bytes);
    assert_int_equal(r.job_peak_allocated_bytes, 130 * MiB);
    assert_int_equal(hbm_free(a, small), HBM_OK);
    assert_int_equal(hbm_empty_cache(a), HBM_OK); /* the free 100 MiB segment goes */
    hbm_reset_peak_stats(a);
    r = refreshed_record(read_only_record(NULL).updated_ns); /* the refresher writes the reset's figures */
    assert_int_equal(r.peak_reserved_bytes, r.reserved_bytes);
    assert_true(r.job_peak_reserved_bytes >= 130 * (int64_t)MiB && r.job_peak_reserved_bytes > r.peak_reserved_bytes);
    assert_int_equal(r.job_peak_allocated_bytes, 130 * MiB);
    assert_int_equal(r.peak_allocated_bytes, 30 * MiB);
    assert_int_equal(hbm_free(a, q), HBM_OK);
    assert_int_equal(hbm_destroy(a), HBM_OK);
    assert_int_equal(records(NULL, 0), 0);
}

/* Off by default in the C API; hbm_publish turns it on and off; the plug-ins' mode respects an explicit False. */
static void publishing_is_asked_for(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(records(NULL, 0), 0);
    assert_int_equal(hbm_publish(a, HBM_PUBLISH_UNLESS_SET_OFF), HBM_OK);
    assert_int_equal(records(NULL, 0), 1);
    assert_int_equal(hbm_publish(a, 1), HBM_OK); /* again: still one */
    assert_int_equal(records(NULL, 0), 1);
    assert_int_equal(hbm_publish(a, 0), HBM_OK);
    assert_int_equal(records(NULL, 0), 0);
    assert_int_equal(hbm_destroy(a), HBM_OK);

    a = open_sim("sim:capacity=1GiB", "hbm_publish:False");
    assert_int_equal(hbm_publish(a, HBM_PUBLISH_UNLESS_SET_OFF), HBM_OK);
    assert_int_equal(records(NULL, 0), 0);
    assert_int_equal(hbm_destroy(a), HBM_OK);

    hbm_allocator *b = NULL;
    char err[256];
    assert_int_equal(hbm_open(&b, "sim", 0, "hbm_publish:yes", err, sizeof err), HBM_ERR_CONF);
    assert_non_null(strstr(err, "True or False"));
}

/* A folder that cannot take the record: the allocator works, the reason is in hbm_warning. */
static void an_unwritable_folder_is_a_warning_not_an_error(void **state)
{
    (void)state;
    setenv("HBMALLOC_TOP_DIR", "/nonexistent/hbmalloc-top", 1);
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
    setenv("HBMALLOC_TOP_DIR", dir, 1);
    assert_non_null(strstr(hbm_warning(a), "not published for hbmalloc top"));
    assert_non_null(strstr(hbm_warning(a), "/nonexistent/hbmalloc-top"));
    void *p = must_malloc(a, MiB, 0);
    assert_int_equal(hbm_free(a, p), HBM_OK);
    assert_int_equal(hbm_destroy(a), HBM_OK);
}

/* Files that are not safe to trust are refused with the reason; a reader never writes. */
static void unsafe_files_are_refused(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
    char names[2][512], why[160], path[512];
    assert_int_equal(records(names, 2), 1);
    hbm_record r;
    assert_int_equal(chmod(names[0], 0644), 0);
    assert_int_equal(hbm_record_read(names[0], &r, why, sizeof why), HBM_ERR_INVALID);
    assert_non_null(strstr(why, "readable or writable by other users"));
    assert_int_equal(chmod(names[0], 0600), 0);
    assert_int_equal(hbm_record_read(names[0], &r, why, sizeof why), HBM_OK);
    snprintf(path, sizeof path, "%s/link", dir); /* a symbolic link to a record is not followed */
    assert_int_equal(symlink(names[0], path), 0);
    assert_int_equal(hbm_record_read(path, &r, why, sizeof why), HBM_ERR_INVALID);
    unlink(path);
    snprintf(path, sizeof path, "%s/short", dir); /* not a record: size */
    int fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0 && write(fd, "hbm", 3) == 3);
    close(fd);
    assert_int_equal(hbm_record_read(path, &r, why, sizeof why), HBM_ERR_INVALID);
    assert_non_null(strstr(why, "size"));
    unlink(path);
    snprintf(path, sizeof path, "%s/zeros", dir); /* right size, no magic */
    fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_int_equal(ftruncate(fd, sizeof(hbm__shared_record)), 0);
    close(fd);
    assert_int_equal(hbm_record_read(path, &r, why, sizeof why), HBM_ERR_INVALID);
    assert_non_null(strstr(why, "magic"));
    unlink(path);
    assert_int_equal(hbm_record_read(dir, &r, why, sizeof why), HBM_ERR_INVALID); /* a folder */
    if (geteuid() == 0) { /* another user's record (root can make one; CI runs as root) */
        assert_int_equal(chown(names[0], 65534, 65534), 0);
        assert_int_equal(hbm_record_read(names[0], &r, why, sizeof why), HBM_ERR_INVALID);
        assert_string_equal(why, "owned by another user");
        assert_int_equal(chown(names[0], 0, 0), 0);
    } else {
        print_message("not root: the other-owner case is covered by tests/cli/top.sh only where it runs as root\n");
    }
    assert_int_equal(hbm_destroy(a), HBM_OK);
}

/* A record whose process has exited, or whose PID now names another process (start time), is stale. */
static void records_of_exited_processes_are_stale(void **state)
{
    (void)state;
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        hbm_allocator *a = NULL;
        char err[256];
        if (hbm_open(&a, "sim:capacity=1GiB", 0, "hbm_publish:True", err, sizeof err) != HBM_OK)
            _exit(3);
        _exit(0); /* as a killed process: no destroy, no atexit */
    }
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    char names[2][512], why[160];
    assert_int_equal(records(names, 2), 1);
    hbm_record r;
    assert_int_equal(hbm_record_read(names[0], &r, why, sizeof why), HBM_ERR_STALE);
    assert_non_null(strstr(why, "has exited"));
    unlink(names[0]);

    /* This process's PID with another start time: a PID reused since the record was written. */
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
    assert_int_equal(records(names, 2), 1);
    assert_int_equal(hbm_record_read(names[0], &r, why, sizeof why), HBM_OK);
    int fd = open(names[0], O_RDWR);
    hbm__shared_record *m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    assert_true(m != MAP_FAILED);
    assert_true(m->r.start_time > 0);
    m->r.start_time++;
    assert_int_equal(hbm_record_read(names[0], &r, why, sizeof why), HBM_ERR_STALE);
    m->r.start_time--;
    munmap(m, sizeof *m);
    assert_int_equal(hbm_destroy(a), HBM_OK);
}

/* A forked child neither updates nor removes its parent's record (its exit runs the atexit handler). */
static void a_forked_child_leaves_the_parents_record(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
    void *p = must_malloc(a, 4 * MiB, 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        void *q = NULL; /* a new segment in the child: the parent's record must not show it */
        int ok = hbm_malloc(a, 64 * MiB, 0, &q) == HBM_OK;
        exit(ok ? 0 : 3);
    }
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    hbm_record r = read_only_record(NULL); /* still there */
    assert_int_equal(r.pid, getpid());
    assert_int_equal(r.segment, 1);
    assert_record_is(&r, a);
    assert_int_equal(hbm_free(a, p), HBM_OK);
    assert_int_equal(hbm_destroy(a), HBM_OK);
    assert_int_equal(records(NULL, 0), 0);
}

/* ---- #28: the monitor never hurts the job, and a reader keeps its bounds ---- */

/* How a child ended, for a message: "exit 3", "signal 7 (Bus error)". */
static const char *ending(int st, char *buf, size_t len)
{
    if (WIFSIGNALED(st))
        snprintf(buf, len, "signal %d (%s)", WTERMSIG(st), strsignal(WTERMSIG(st)));
    else
        snprintf(buf, len, "exit %d", WEXITSTATUS(st));
    return buf;
}

/* In a forked child: the signals cmocka catches (to go on with the next test) back to their defaults, so that a
 * crash ends the child and its parent reports it. */
static void plain_child(void)
{
    static const int sigs[] = {SIGBUS, SIGSEGV, SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], SIG_DFL);
}

static int count_of(const char *s, const char *part)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, part)); p += strlen(part))
        n++;
    return n;
}

/* In a child: an allocator that is asked to publish where it cannot. Exit 0 when publishing turned itself off
 * with one warning that contains `why`, the allocator served, no record was left and SIGXFSZ's disposition is
 * the default still; another status says which of these failed. */
static int publish_where_it_cannot(const char *why)
{
    hbm_allocator *a = NULL;
    char err[512];
    if (hbm_open(&a, "sim:capacity=1GiB", 0, "hbm_publish:True", err, sizeof err) != HBM_OK)
        return 11;
    if (count_of(hbm_warning(a), "not published for hbmalloc top") != 1 || !strstr(hbm_warning(a), why)) {
        fprintf(stderr, "warning: '%s'\n", hbm_warning(a));
        return 12;
    }
    void *p = NULL, *q = NULL;
    if (hbm_malloc(a, 64 * MiB, 0, &p) != HBM_OK || hbm_malloc(a, 3 * MiB, 0, &q) != HBM_OK ||
        hbm_free(a, p) != HBM_OK || hbm_free(a, q) != HBM_OK)
        return 13;
    struct sigaction sa;
    if (sigaction(SIGXFSZ, NULL, &sa) || sa.sa_handler != SIG_DFL)
        return 14;
    if (hbm_destroy(a) != HBM_OK)
        return 15;
    DIR *d = opendir(hbm_record_dir());
    struct dirent *e;
    int left = 0;
    while (d && (e = readdir(d)))
        left += !strncmp(e->d_name, "hbmalloc-", 9);
    if (d)
        closedir(d);
    return left ? 16 : 0;
}

/* A job script's `ulimit -f`: sizing the record past RLIMIT_FSIZE would raise SIGXFSZ, which kills a process that
 * keeps the default disposition. Publishing is off with one warning; the allocator serves. */
static void a_file_size_limit_turns_publishing_off_without_sigxfsz(void **state)
{
    (void)state;
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        plain_child();
        struct rlimit rl;
        if (getrlimit(RLIMIT_FSIZE, &rl))
            _exit(10);
        rl.rlim_cur = 0; /* ulimit -f 0 */
        if (setrlimit(RLIMIT_FSIZE, &rl))
            _exit(10);
        _exit(publish_where_it_cannot("file size limit"));
    }
    int st;
    char how[64];
    assert_int_equal(waitpid(child, &st, 0), child);
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        fail_msg("the job with ulimit -f 0 ended with %s", ending(st, how, sizeof how));
}

/* Makes this (forked, single-threaded) process a mount namespace of its own, as root or in a user namespace of
 * its own; 0, or -1 when neither is allowed here. */
static int private_mounts(void)
{
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (unshare(CLONE_NEWNS)) {
        if (unshare(CLONE_NEWUSER | CLONE_NEWNS))
            return -1;
        char map[64];
        int fd = open("/proc/self/setgroups", O_WRONLY);
        if (fd >= 0) {
            (void)!write(fd, "deny", 4);
            close(fd);
        }
        const char *files[2] = {"/proc/self/uid_map", "/proc/self/gid_map"};
        for (int i = 0; i < 2; i++) {
            int n = snprintf(map, sizeof map, "0 %u 1", i ? (unsigned)gid : (unsigned)uid);
            if ((fd = open(files[i], O_WRONLY)) < 0 || write(fd, map, (size_t)n) != n)
                return -1;
            close(fd);
        }
    }
    return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ? -1 : 0; /* nothing leaks to the parent's mounts */
}

/* /dev/shm filled by DataLoader workers and NCCL (64 MB in a default Docker container): a record sized sparse
 * there maps fine and kills the job with SIGBUS at its first store. Here a tmpfs of one page, full. Publishing is
 * off with one warning; the allocator serves. Needs a tmpfs mount: skipped, and said, where none can be made. */
static void a_full_folder_turns_publishing_off_without_sigbus(void **state)
{
    (void)state;
    char full[128];
    snprintf(full, sizeof full, "%s/full", dir);
    assert_int_equal(mkdir(full, 0700), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        plain_child();
        if (private_mounts() || mount("hbm-full", full, "tmpfs", 0, "size=4k,mode=0700"))
            _exit(77);
        char fill[160];
        snprintf(fill, sizeof fill, "%s/fill", full);
        int fd = open(fill, O_CREAT | O_WRONLY, 0600);
        static const char page[4096];
        while (fd >= 0 && write(fd, page, sizeof page) > 0) /* until ENOSPC */
            ;
        if (fd < 0)
            _exit(10);
        close(fd);
        setenv("HBMALLOC_TOP_DIR", full, 1);
        _exit(publish_where_it_cannot(strerror(ENOSPC)));
    }
    int st;
    char how[64];
    assert_int_equal(waitpid(child, &st, 0), child);
    rmdir(full);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
        print_message("SKIPPED: no tmpfs can be mounted here (needs root or user namespaces); the file-size-limit "
                      "test covers the sizing call, tests/cli/publish_full.sh the plug-in\n");
        skip();
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        fail_msg("the job with a full folder ended with %s", ending(st, how, sizeof how));
}

typedef struct race {
    hbm_allocator *a;
    int on;
    pthread_barrier_t *start;
    hbm_status rc;
} race;

static void *publish_at_once(void *arg)
{
    race *r = arg;
    pthread_barrier_wait(r->start);
    r->rc = hbm_publish(r->a, r->on);
    return NULL;
}

/* hbm_publish(a, x) and hbm_publish(a, y) from two threads at once. */
static void publish_twice_at_once(hbm_allocator *a, int x, int y)
{
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    race r[2] = {{a, x, &start, HBM_OK}, {a, y, &start, HBM_OK}};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, publish_at_once, &r[0]), 0);
    publish_at_once(&r[1]);
    pthread_join(t, NULL);
    pthread_barrier_destroy(&start);
    assert_int_equal(r[0].rc, HBM_OK);
    assert_int_equal(r[1].rc, HBM_OK);
}

/* Two threads publishing one allocator at once make one record (before: both published, one record orphaned in
 * the refresher's list, which then locked the allocator after hbm_destroy freed it). 200 rounds; then the
 * refresher runs twice over whatever is left: ASan sees a freed allocator touched, TSan a race. */
static void racing_publish_calls_make_one_record(void **state)
{
    (void)state;
    for (int round = 0; round < 200; round++) {
        hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
        publish_twice_at_once(a, 1, 1);
        assert_int_equal(records(NULL, 0), 1);
        publish_twice_at_once(a, 0, 1); /* either order: one record or none */
        assert_true(records(NULL, 0) <= 1);
        publish_twice_at_once(a, 0, 0);
        assert_int_equal(records(NULL, 0), 0);
        publish_twice_at_once(a, 1, 1);
        assert_int_equal(hbm_destroy(a), HBM_OK);
        assert_int_equal(records(NULL, 0), 0);
    }
    struct timespec ts = {1, 100000000};
    nanosleep(&ts, NULL);
}

static void *churn(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    for (int i = 0; i < 12; i++) {
        hbm_allocator *a = NULL;
        char err[256];
        if (hbm_open(&a, "sim:capacity=1GiB", 0, "hbm_publish:True", err, sizeof err) != HBM_OK)
            return (void *)1;
        void *p = NULL;
        if (hbm_malloc(a, (size_t)(1 + rand_r(&seed) % 64) * MiB, 0, &p) != HBM_OK)
            return (void *)1;
        struct timespec ts = {0, (long)(rand_r(&seed) % 120) * 1000000L}; /* across the refresher's 0.5 s */
        nanosleep(&ts, NULL);
        if (hbm_free(a, p) != HBM_OK || hbm_destroy(a) != HBM_OK)
            return (void *)1;
    }
    return NULL;
}

/* Allocators made, used and destroyed on four threads while the refresher walks the records: every record goes
 * with its allocator (ASan: nothing freed is touched; TSan: no race, no lock-order inversion). */
static void destroy_while_the_refresher_runs(void **state)
{
    (void)state;
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, (void *)(i + 1)), 0);
    for (int i = 0; i < 4; i++) {
        void *rc;
        pthread_join(t[i], &rc);
        assert_null(rc);
    }
    assert_int_equal(records(NULL, 0), 0);
}

/* The bytes of this process's one record (its path in names[0]). */
static void the_record(char names[2][512], hbm__shared_record *s)
{
    assert_int_equal(records(names, 2), 1);
    int fd = open(names[0], O_RDONLY);
    assert_int_equal(read(fd, s, sizeof *s), (ssize_t)sizeof *s);
    close(fd);
}

/* A copy of those bytes at DIR/copy, which no process holds. */
static void write_copy(const hbm__shared_record *s, char *copy, size_t len)
{
    snprintf(copy, len, "%s/copy", dir);
    int fd = open(copy, O_CREAT | O_EXCL | O_WRONLY, 0600);
    assert_int_equal(write(fd, s, sizeof *s), (ssize_t)sizeof *s);
    close(fd);
}

/* Every text field of a record comes back terminated, whatever the file holds (a reader outside hbmalloc may print
 * them): a copy of a record with each text filled to its end. Before, asleep_tags and resident came back as the
 * file had them, and strlen read past the structure (ASan). */
static void a_records_texts_come_back_terminated(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
    char names[2][512], why[160], copy[512];
    hbm__shared_record s;
    the_record(names, &s);
    assert_int_equal(hbm_destroy(a), HBM_OK);
    memset(s.r.backend, 'A', sizeof s.r.backend);
    memset(s.r.settings, 'A', sizeof s.r.settings);
    memset(s.r.source, 'A', sizeof s.r.source);
    memset(s.r.command, 'A', sizeof s.r.command);
    memset(s.r.asleep_tags, 'A', sizeof s.r.asleep_tags);
    memset(s.r.resident, 'A', sizeof s.r.resident);
    write_copy(&s, copy, sizeof copy);
    hbm_record r;
    assert_int_equal(hbm_record_read(copy, &r, why, sizeof why), HBM_ERR_STALE); /* read, and said to be stale */
    assert_int_equal(strlen(r.backend), sizeof r.backend - 1);
    assert_int_equal(strlen(r.settings), sizeof r.settings - 1);
    assert_int_equal(strlen(r.source), sizeof r.source - 1);
    assert_int_equal(strlen(r.command), sizeof r.command - 1);
    assert_int_equal(strlen(r.asleep_tags), sizeof r.asleep_tags - 1);
    assert_int_equal(strlen(r.resident), sizeof r.resident - 1);
    unlink(copy);
}

/* A live record, and a copy of it no process holds (a file left by a killed job that a new process's PID and
 * start time would match): the lock, not the PID, says which lives. And a record of another PID namespace (a
 * container sharing /dev/shm with --ipc=host, where the job is PID 1): its PID means nothing here; it lives while
 * its writer holds its lock, and is stale once the writer is gone — `top --clean` relies on that. */
static void a_record_of_another_pid_namespace_lives_while_its_lock_is_held(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
    char names[2][512], why[160], copy[512];
    hbm__shared_record s;
    the_record(names, &s);
    write_copy(&s, copy, sizeof copy);
    hbm_record r;
    assert_int_equal(hbm_record_read(names[0], &r, why, sizeof why), HBM_OK);
    assert_int_equal(hbm_record_read(copy, &r, why, sizeof why), HBM_ERR_STALE); /* same PID, same start time */
    assert_non_null(strstr(why, "no process holds its record"));
    unlink(copy);
    assert_int_equal(hbm_destroy(a), HBM_OK);

    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) { /* the job in the other namespace: its record says PID 1 of a namespace that is not ours */
        close(ready[0]);
        hbm_allocator *b = NULL;
        char err[256];
        if (hbm_open(&b, "sim:capacity=1GiB", 0, "hbm_publish:True", err, sizeof err) != HBM_OK)
            _exit(3);
        char mine[2][512];
        int fd;
        if (records(mine, 2) != 1 || (fd = open(mine[0], O_RDWR)) < 0)
            _exit(4);
        hbm__shared_record *m = mmap(NULL, sizeof *m, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        if (m == MAP_FAILED)
            _exit(5);
        m->pid_ns = ~m->pid_ns;
        m->r.pid = 1;
        m->r.start_time = 12345;
        (void)!write(ready[1], "x", 1);
        pause(); /* until killed */
        _exit(0);
    }
    close(ready[1]);
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    close(ready[0]);
    assert_int_equal(records(names, 2), 1);
    assert_int_equal(hbm_record_read(names[0], &r, why, sizeof why), HBM_OK);
    assert_int_equal(r.pid, 1);
    kill(child, SIGKILL);
    int st;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_int_equal(hbm_record_read(names[0], &r, why, sizeof why), HBM_ERR_STALE);
    unlink(names[0]);
}

/* Another user pre-creates every name of the old scheme (hbmalloc-UID-PID-DEVICE-N, N counting from 0) in the
 * shared folder, as files and as links: this process still publishes, under a name with random bits. */
static void names_squatted_in_advance_do_not_stop_publishing(void **state)
{
    (void)state;
    char path[512];
    for (int n = 0; n < 8192; n++) {
        snprintf(path, sizeof path, "%s/hbmalloc-%u-%ld-0-%d", dir, (unsigned)geteuid(), (long)getpid(), n);
        if (n % 2)
            assert_int_equal(symlink("/etc/passwd", path), 0);
        else
            close(open(path, O_CREAT | O_WRONLY, 0644));
        if (geteuid() == 0)
            (void)!lchown(path, 65534, 65534);
    }
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
    assert_string_equal(hbm_warning(a), "");
    DIR *d = opendir(dir);
    struct dirent *e;
    int live = 0;
    while ((e = readdir(d))) {
        hbm_record r;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        live += strncmp(e->d_name, "hbmalloc-", 9) == 0 && hbm_record_read(path, &r, NULL, 0) == HBM_OK;
    }
    closedir(d);
    assert_int_equal(live, 1);
    assert_int_equal(hbm_destroy(a), HBM_OK);
}

/* HBMALLOC_TOP_DIR longer than the old 256-byte path buffer: the record is made in that folder, whole, and
 * readable; a name too long for any path is refused with a warning that says so. */
static void a_long_folder_name_is_kept_whole_or_refused_clearly(void **state)
{
    (void)state;
    char deep[512], mid[320], seg[201];
    memset(seg, 'd', 200);
    seg[200] = 0;
    snprintf(mid, sizeof mid, "%s/%s", dir, seg);
    assert_int_equal(mkdir(mid, 0700), 0);
    snprintf(deep, sizeof deep, "%s/%.80s", mid, seg);
    assert_int_equal(mkdir(deep, 0700), 0);
    assert_true(strlen(deep) > 280);
    setenv("HBMALLOC_TOP_DIR", deep, 1);
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
    assert_string_equal(hbm_warning(a), "");
    DIR *d = opendir(deep);
    struct dirent *e;
    char prefix[64], path[PATH_MAX + 300];
    snprintf(prefix, sizeof prefix, "hbmalloc-%u-%ld-0-", (unsigned)geteuid(), (long)getpid());
    int found = 0;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix)) && strlen(e->d_name) == strlen(prefix) + 16) {
            hbm_record r;
            snprintf(path, sizeof path, "%s/%s", deep, e->d_name);
            assert_int_equal(hbm_record_read(path, &r, NULL, 0), HBM_OK);
            found++;
        }
    closedir(d);
    assert_int_equal(found, 1);
    assert_int_equal(hbm_destroy(a), HBM_OK);
    assert_int_equal(rmdir(deep), 0);
    assert_int_equal(rmdir(mid), 0);

    char *huge = malloc(PATH_MAX + 100);
    memset(huge, 'x', PATH_MAX + 99);
    huge[0] = '/';
    huge[PATH_MAX + 99] = 0;
    setenv("HBMALLOC_TOP_DIR", huge, 1);
    free(huge);
    a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
    setenv("HBMALLOC_TOP_DIR", dir, 1);
    assert_non_null(strstr(hbm_warning(a), "not published for hbmalloc top: the folder's name is too long"));
    assert_non_null(strstr(hbm_warning(a), "PATH_MAX"));
    assert_true(strlen(hbm_warning(a)) < 400); /* the folder's name is not repeated whole */
    assert_int_equal(hbm_destroy(a), HBM_OK);
}

/* Shrinks the file to nothing and restores it, over and over, until killed. */
static void shrink_and_restore(const char *path)
{
    hbm__shared_record s;
    int fd = open(path, O_RDWR);
    if (fd < 0 || pread(fd, &s, sizeof s, 0) != (ssize_t)sizeof s)
        _exit(1);
    for (;;)
        if (ftruncate(fd, 0) || pwrite(fd, &s, sizeof s, 0) != (ssize_t)sizeof s)
            _exit(1);
}

/* A record that shrinks while it is read (a reader that maps after fstat dies of SIGBUS): refused or read, never
 * a crash. A copy of a live record, truncated and rewritten by one process while another reads it 20,000 times
 * (processes, not threads: a crash is reported as one, and ThreadSanitizer keeps track). */
static void a_record_that_shrinks_while_read_is_refused_not_a_crash(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "hbm_publish:True");
    char names[2][512], copy[512];
    assert_int_equal(records(names, 2), 1);
    snprintf(copy, sizeof copy, "%s/shrinking", dir);
    int in = open(names[0], O_RDONLY), out = open(copy, O_CREAT | O_EXCL | O_WRONLY, 0600);
    hbm__shared_record s;
    assert_int_equal(read(in, &s, sizeof s), (ssize_t)sizeof s);
    assert_int_equal(write(out, &s, sizeof s), (ssize_t)sizeof s);
    close(in);
    close(out);
    assert_int_equal(hbm_destroy(a), HBM_OK);
    pid_t shrinker = fork();
    assert_true(shrinker >= 0);
    if (shrinker == 0)
        shrink_and_restore(copy);
    pid_t reader = fork();
    assert_true(reader >= 0);
    if (reader == 0) {
        plain_child();
        int whole = 0, refused = 0;
        for (int i = 0; i < 20000; i++) {
            hbm_record r;
            char why[160];
            if (hbm_record_read(copy, &r, why, sizeof why) == HBM_ERR_INVALID)
                refused++;
            else /* whole (stale: no process holds the copy) */
                whole++;
        }
        fprintf(stderr, "shrinking record: %d read whole, %d refused\n", whole, refused);
        _exit(0);
    }
    int st, sst;
    char how[64];
    assert_int_equal(waitpid(reader, &st, 0), reader);
    kill(shrinker, SIGKILL);
    assert_int_equal(waitpid(shrinker, &sst, 0), shrinker);
    unlink(copy);
    if (!WIFEXITED(st) || WEXITSTATUS(st))
        fail_msg("the reader of a shrinking record ended with %s", ending(st, how, sizeof how));
    assert_true(WIFSIGNALED(sst) && WTERMSIG(sst) == SIGKILL); /* it shrank until the end */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(the_record_follows_the_allocator, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(publishing_is_asked_for, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(an_unwritable_folder_is_a_warning_not_an_error, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(unsafe_files_are_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_records_texts_come_back_terminated, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_rank_that_is_not_a_count_is_none, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(records_of_exited_processes_are_stale, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_forked_child_leaves_the_parents_record, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(names_squatted_in_advance_do_not_stop_publishing, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_file_size_limit_turns_publishing_off_without_sigxfsz, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_full_folder_turns_publishing_off_without_sigbus, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(racing_publish_calls_make_one_record, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(destroy_while_the_refresher_runs, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_record_of_another_pid_namespace_lives_while_its_lock_is_held, make_dir,
                                        remove_dir),
        cmocka_unit_test_setup_teardown(a_long_folder_name_is_kept_whole_or_refused_clearly, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_record_that_shrinks_while_read_is_refused_not_a_crash, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
