/* test_publish.c: the statistics a process publishes for `hbmalloc top` (src/publish.c): what the record holds
 * and when it changes, who may read it, records of exited processes, fork, and the settings key. Each test
 * works in a folder of its own (HBMALLOC_TOP_DIR). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "publish.h"

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
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d)))
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(dir);
    unsetenv("HBMALLOC_TOP_DIR");
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
    assert_int_equal(fscanf(f, "%*d (%*[^)]) %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u "
                               "%*d %*d %*d %*d %*d %*d %llu", &start), 1);
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
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do { /* the refresher, with no call into the allocator */
        struct timespec ts = {0, 20000000};
        nanosleep(&ts, NULL);
        r = read_only_record(NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while (r.updated_ns == before && now.tv_sec - t0.tv_sec < 10);
    assert_true(r.updated_ns > before); /* refreshed with no call (every 0.5 s; 10 s allowed a loaded machine) */
    assert_record_is(&r, a);
    assert_true(r.largest_free_bytes > 0 && r.inactive_split > 0); /* the 90 MiB left of the split segment */
    assert_int_equal(hbm_free(a, small), HBM_OK);
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
        print_message("not root: the other-owner case is covered by tests/top.sh only where it runs as root\n");
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(the_record_follows_the_allocator, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(publishing_is_asked_for, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(an_unwritable_folder_is_a_warning_not_an_error, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(unsafe_files_are_refused, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(records_of_exited_processes_are_stale, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_forked_child_leaves_the_parents_record, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
