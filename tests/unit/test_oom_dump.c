/* test_oom_dump.c: snapshots at an OOM (src/io/oom_dump.c, hbm_oom_dump, HBMALLOC_OOM_DUMP_DIR) on the simulated
 * device: an OOM leaves one file named for its rank, device and process, which the tool's pickle reader and its replay
 * read as a snapshot; the malloc returns its OOM and message as without it; the bounds (dumps per allocator, the
 * folder's bytes) stop the next one with one warning; a folder gone, a file-size limit or a folder that cannot be
 * written turn it off with one warning and never stop the allocation path; two ranks in one folder make two files;
 * a file of the same name is never replaced. Each test works in a folder of its own. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "helpers.h"
#include "io/oom_dump.h"
#include "trace/pickle.h"
#include "trace/trace.h"

static char dir[64];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hbm-oomdump-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    unsetenv("RANK");
    unsetenv("RANK_ID");
    unsetenv("HBMALLOC_OOM_DUMP_DIR");
    unsetenv("HBMALLOC_OOM_DUMP_MAX");
    unsetenv("HBMALLOC_OOM_DUMP_MAX_MB");
    setenv("HBMALLOC_QUIET", "1", 1);
    return 0;
}

static int remove_dir(void **state)
{
    (void)state;
    chmod(dir, 0700);
    remove_records_dir(dir);
    unsetenv("RANK");
    unsetenv("RANK_ID");
    unsetenv("HBMALLOC_OOM_DUMP_DIR");
    return 0;
}

/* The folder's entries (names into out, up to cap), hidden ones included; their count. */
static int entries(char out[][256], int cap)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            if (n < cap)
                snprintf(out[n], 256, "%.255s", e->d_name);
            n++;
        }
    if (d)
        closedir(d);
    return n;
}

static bool has_entry(const char *name)
{
    char names[32][256];
    int n = entries(names, 32);
    for (int i = 0; i < n && i < 32; i++)
        if (!strcmp(names[i], name))
            return true;
    return false;
}

/* "hbmalloc-oom-RANK-devD-pidP-N.pickle" of this process. */
static const char *dump_name(const char *rank, int device, int n)
{
    static char name[128];
    snprintf(name, sizeof name, "hbmalloc-oom-%s-dev%d-pid%ld-%d.pickle", rank, device, (long)getpid(), n);
    return name;
}

static void write_file(const char *name, size_t bytes)
{
    char path[256];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < bytes; i++)
        fputc('x', f);
    assert_int_equal(fclose(f), 0);
}

/* A malloc past the device (the sim's 1 GiB): HBM_ERR_OOM. */
static void run_out(hbm_allocator *a)
{
    void *p = NULL;
    assert_int_equal(hbm_malloc(a, 4 * GiB, 0, &p), HBM_ERR_OOM);
    assert_null(p);
}

/* history of n entries, each labelled with a 8-frame stack: a snapshot of about n KiB. */
static void grow_history(hbm_allocator *a, size_t n)
{
    char text[2048] = "";
    size_t len = 0;
    for (int f = 0; f < 8; f++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%sforward_%d\t/opt/model/layers.py\t%d", f ? "\n" : "",
                                f, 100 + f);
    hbm_label l;
    assert_int_equal(hbm_label_intern(a, text, &l), HBM_OK);
    assert_int_equal(hbm_history_enable(a, n), HBM_OK);
    for (size_t i = 0; i < n / 2; i++) {
        void *p;
        assert_int_equal(hbm_malloc_labeled(a, 4096, 0, l, &p), HBM_OK);
        assert_int_equal(hbm_free(a, p), HBM_OK);
    }
}

/* stderr into a file while `fn` runs; how many lines hold `needle`. */
static int warnings_during(void (*fn)(void *), void *arg, const char *needle)
{
    char path[128];
    snprintf(path, sizeof path, "%s.stderr", dir);
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, 2);
    close(fd);
    unsetenv("HBMALLOC_QUIET");
    fn(arg);
    setenv("HBMALLOC_QUIET", "1", 1);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[2048];
    int n = 0;
    while (fgets(line, sizeof line, f))
        n += strstr(line, needle) != NULL;
    fclose(f);
    unlink(path);
    return n;
}

static void oom_three_times(void *arg)
{
    for (int i = 0; i < 3; i++)
        run_out(arg);
}

static int count_in(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = text; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

static void an_oom_writes_one_snapshot_named_for_its_rank_and_device(void **state)
{
    (void)state;
    setenv("RANK", "7", 1);
    hbm_allocator *a = NULL;
    char err[256];
    assert_int_equal(hbm_open(&a, "sim:capacity=1GiB,devices=2", 1, "", err, sizeof err), HBM_OK);
    assert_int_equal(hbm_history_enable(a, 1000), HBM_OK);
    void *live;
    assert_int_equal(hbm_malloc(a, 100 * MiB, 0, &live), HBM_OK);
    assert_int_equal(hbm_oom_dump(a, dir, -1, -1), HBM_OK);
    run_out(a);

    char names[8][256];
    assert_int_equal(entries(names, 8), 1); /* the file, and no temporary left */
    assert_string_equal(names[0], dump_name("rank7", 1, 1));
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, names[0]);
    unsigned char *data;
    size_t len;
    assert_int_equal(trace_slurp(path, &data, &len, err, sizeof err), 0);
    pickle_doc *doc;
    const pv *root = pickle_parse(data, len, &doc, err, sizeof err);
    if (!root)
        fail_msg("%s: %s", path, err);
    /* The live block, as a snapshot lists it; the OOM in device 1's history. */
    const pv *segs = pv_get(root, "segments");
    bool found = false;
    for (uint32_t i = 0; i < pv_len(segs); i++) {
        const pv *blocks = pv_get(pv_at(segs, i), "blocks");
        for (uint32_t k = 0; k < pv_len(blocks); k++) {
            int64_t addr;
            assert_int_equal(pv_int(pv_get(pv_at(blocks, k), "address"), &addr), 0);
            if ((uintptr_t)addr == (uintptr_t)live)
                found = pv_is_str(pv_get(pv_at(blocks, k), "state"), "active_allocated");
        }
    }
    assert_true(found);
    const pv *traces = pv_at(pv_get(root, "device_traces"), 1);
    assert_true(pv_len(traces) > 0);
    assert_true(pv_is_str(pv_get(pv_at(traces, pv_len(traces) - 1), "action"), "oom"));
    pickle_free(doc);
    free(data);
    /* What `hbmalloc replay` and `view` read it with. */
    trace t;
    trace_init(&t);
    if (trace_read_any(path, 1, &t, err, sizeof err) != 0)
        fail_msg("trace_read_any(%s): %s", path, err);
    assert_string_equal(t.format, "pytorch-snapshot");
    trace_free(&t);
    assert_int_equal(hbm_free(a, live), HBM_OK);
    hbm_destroy(a);
}

/* The same requests on an allocator without dumps and one with: the same status, message and OOM record; both go on. */
static void the_oom_is_returned_as_without_it_and_the_allocator_goes_on(void **state)
{
    (void)state;
    hbm_allocator *plain = open_sim("sim:capacity=1GiB", ""), *dumping = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_oom_dump(dumping, dir, -1, -1), HBM_OK);
    char msg[2][1536], oom_msg[2][1536];
    hbm_oom_info info[2];
    hbm_allocator *both[2] = {plain, dumping};
    for (int k = 0; k < 2; k++) {
        void *keep, *p;
        assert_int_equal(hbm_malloc(both[k], 300 * MiB, 0, &keep), HBM_OK);
        run_out(both[k]);
        snprintf(msg[k], sizeof msg[k], "%s", hbm_last_error(both[k]));
        assert_int_equal(hbm_copy_last_oom(both[k], &info[k], oom_msg[k], sizeof oom_msg[k]), HBM_OK);
        assert_int_equal(hbm_malloc(both[k], 100 * MiB, 0, &p), HBM_OK); /* it goes on */
        assert_int_equal(hbm_free(both[k], p), HBM_OK);
        assert_int_equal(hbm_free(both[k], keep), HBM_OK);
        assert_valid(both[k]);
    }
    assert_non_null(strstr(msg[0], "out of memory on sim device 0. Tried to allocate 4.00 GiB"));
    assert_string_equal(msg[0], msg[1]);
    assert_string_equal(oom_msg[0], oom_msg[1]);
    assert_memory_equal(&info[0], &info[1], sizeof info[0]);
    assert_int_equal(stats_of(dumping).num_ooms, 1);
    assert_true(has_entry(dump_name("norank", 0, 1)));
    hbm_destroy(plain);
    hbm_destroy(dumping);
}

static void the_rank_comes_from_rank_else_rank_id(void **state)
{
    (void)state;
    setenv("RANK_ID", "5", 1); /* torch_npu's launchers */
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_oom_dump(a, dir, -1, -1), HBM_OK);
    run_out(a);
    assert_true(has_entry(dump_name("rank5", 0, 1)));
    setenv("RANK", "12", 1); /* torchrun's, first */
    run_out(a);
    assert_true(has_entry(dump_name("rank12", 0, 2)));
    hbm_destroy(a);
}

static void at_most_max_dumps_then_one_warning(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_oom_dump(a, dir, 2, -1), HBM_OK);
    run_out(a);
    assert_int_equal(warnings_during(oom_three_times, a, "no more snapshots at an OOM"), 1);
    char names[8][256];
    assert_int_equal(entries(names, 8), 2);
    assert_true(has_entry(dump_name("norank", 0, 1)));
    assert_true(has_entry(dump_name("norank", 0, 2)));
    assert_int_equal(count_in(hbm_warning(a), "no more snapshots at an OOM"), 1);
    assert_int_equal(stats_of(a).num_ooms, 4);
    /* The environment's bound, when the argument leaves it: 1. */
    setenv("HBMALLOC_OOM_DUMP_MAX", "1", 1);
    remove_records_dir(dir);
    assert_int_equal(mkdir(dir, 0700), 0);
    assert_int_equal(hbm_oom_dump(a, dir, -1, -1), HBM_OK);
    run_out(a);
    run_out(a);
    assert_int_equal(entries(names, 8), 1);
    unsetenv("HBMALLOC_OOM_DUMP_MAX");
    hbm_destroy(a);
}

/* The folder holds 1.5 MiB of dumps already; a bound of 2 MiB; a snapshot of about 1 MiB would pass it. Files not
 * named hbmalloc-oom-* do not count. */
static void the_folder_bound_refuses_a_dump_that_would_pass_it(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    grow_history(a, 2000);
    write_file("hbmalloc-oom-rank3-dev0-pid1-1.pickle", 3 * MiB / 2);
    write_file("unrelated.bin", 8 * MiB);
    assert_int_equal(hbm_oom_dump(a, dir, 5, 2), HBM_OK);
    assert_int_equal(warnings_during(oom_three_times, a, "would pass their bound of 2.00 MiB"), 1);
    char names[8][256];
    assert_int_equal(entries(names, 8), 2); /* no dump, no temporary */
    /* Room made: the next OOM writes (the refused ones did not count towards the 5). */
    char path[512];
    snprintf(path, sizeof path, "%s/hbmalloc-oom-rank3-dev0-pid1-1.pickle", dir);
    assert_int_equal(unlink(path), 0);
    run_out(a);
    assert_true(has_entry(dump_name("norank", 0, 4)));
    /* A folder already at its bound: nothing written, said once (the earlier warning was another). */
    write_file("hbmalloc-oom-filler", 2 * MiB);
    run_out(a);
    assert_int_equal(entries(names, 8), 3);
    hbm_destroy(a);
}

/* Sparse files of 2^63 bytes in a shared folder (tmpfs takes them) once summed to a wrapped figure, and every dump
 * then passed the bound: the sum saturates, and have + len is compared without wrapping. */
static void the_folder_bound_never_wraps(void **state)
{
    (void)state;
    uint64_t big = (uint64_t)INT64_MAX;
    assert_true(hbm__oom_dump_add(hbm__oom_dump_add(hbm__oom_dump_add(0, big), big), 2) == UINT64_MAX);
    assert_true(hbm__oom_dump_add(3, 4) == 7);
    assert_true(hbm__oom_dump_over(UINT64_MAX, 2, 2048 * MiB));
    assert_true(hbm__oom_dump_over(1, UINT64_MAX, 2048 * MiB));
    assert_true(hbm__oom_dump_over(2048 * MiB - 1, 2, 2048 * MiB));
    assert_false(hbm__oom_dump_over(2048 * MiB - 2, 2, 2048 * MiB));
}

static void a_folder_gone_turns_it_off_with_one_warning(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_oom_dump(a, dir, -1, -1), HBM_OK);
    assert_int_equal(rmdir(dir), 0);
    assert_int_equal(warnings_during(oom_three_times, a, "snapshots at an OOM are off on device 0"), 1);
    assert_non_null(strstr(hbm_warning(a), "No such file or directory"));
    assert_int_equal(stats_of(a).num_ooms, 3);
    assert_non_null(strstr(hbm_last_error(a), "out of memory on sim device 0"));
    assert_int_equal(mkdir(dir, 0700), 0); /* back: still off */
    run_out(a);
    char names[4][256];
    assert_int_equal(entries(names, 4), 0);
    void *p;
    assert_int_equal(hbm_malloc(a, 100 * MiB, 0, &p), HBM_OK);
    assert_int_equal(hbm_free(a, p), HBM_OK);
    hbm_destroy(a);
}

/* `ulimit -f` under the snapshot's size: the write fails (no SIGXFSZ ends the process), the dumps turn off, the
 * temporary goes. In a child, whose limit is its own. */
static void a_file_size_limit_fails_the_write_and_the_job_goes_on(void **state)
{
    (void)state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
        grow_history(a, 2000);
        struct rlimit rl = {64 << 10, 64 << 10};
        if (setrlimit(RLIMIT_FSIZE, &rl) || hbm_oom_dump(a, dir, -1, -1) != HBM_OK)
            _exit(10);
        void *p;
        for (int i = 0; i < 2; i++)
            if (hbm_malloc(a, 4 * GiB, 0, &p) != HBM_ERR_OOM)
                _exit(11);
        if (count_in(hbm_warning(a), "snapshots at an OOM are off") != 1 || !strstr(hbm_warning(a), "File too large"))
            _exit(12);
        if (hbm_malloc(a, MiB, 0, &p) != HBM_OK)
            _exit(13);
        _exit(0);
    }
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    if (!WIFEXITED(st))
        fail_msg("the child was ended by signal %d", WTERMSIG(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char names[4][256];
    assert_int_equal(entries(names, 4), 0);
}

static void a_folder_that_cannot_be_written_is_refused_at_once(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    char path[256];
    snprintf(path, sizeof path, "%s/missing", dir);
    assert_int_equal(hbm_oom_dump(a, path, -1, -1), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), path));
    assert_non_null(strstr(hbm_last_error(a), "No such file or directory"));
    write_file("plain", 1);
    snprintf(path, sizeof path, "%s/plain", dir);
    assert_int_equal(hbm_oom_dump(a, path, -1, -1), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "is not a folder"));
    if (geteuid() != 0) { /* root writes anywhere */
        assert_int_equal(chmod(dir, 0500), 0);
        assert_int_equal(hbm_oom_dump(a, dir, -1, -1), HBM_ERR_INVALID);
        assert_non_null(strstr(hbm_last_error(a), "is not writable by this process"));
        assert_int_equal(chmod(dir, 0700), 0);
    }
    setenv("HBMALLOC_OOM_DUMP_MAX_MB", "lots", 1);
    assert_int_equal(hbm_oom_dump(a, dir, -1, -1), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_last_error(a), "HBMALLOC_OOM_DUMP_MAX_MB=lots: not a count"));
    unsetenv("HBMALLOC_OOM_DUMP_MAX_MB");
    run_out(a); /* nothing was turned on */
    assert_false(has_entry(dump_name("norank", 0, 1)));
    hbm_destroy(a);
}

static void the_environment_turns_it_on_at_create(void **state)
{
    (void)state;
    setenv("HBMALLOC_OOM_DUMP_DIR", dir, 1);
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    run_out(a);
    assert_true(has_entry(dump_name("norank", 0, 1)));
    assert_int_equal(hbm_oom_dump(a, NULL, 0, 0), HBM_OK); /* off */
    run_out(a);
    assert_false(has_entry(dump_name("norank", 0, 2)));
    hbm_destroy(a);
    /* A replay's allocator (hbm_set_single_thread: `hbmalloc replay`, `sweep`) makes none. */
    a = open_sim("sim:capacity=1GiB", "");
    hbm_set_single_thread(a);
    run_out(a);
    char names[4][256];
    assert_int_equal(entries(names, 4), 1);
    hbm_destroy(a);
    /* A folder that is not there: the allocator is made, with the warning. */
    setenv("HBMALLOC_OOM_DUMP_DIR", "/nonexistent/hbm-oom", 1);
    a = open_sim("sim:capacity=1GiB", "");
    assert_non_null(strstr(hbm_warning(a), "/nonexistent/hbm-oom"));
    assert_non_null(strstr(hbm_warning(a), "(from HBMALLOC_OOM_DUMP_DIR)"));
    run_out(a);
    hbm_destroy(a);
}

/* A relative folder is the one the program was in when it asked. */
static void a_relative_folder_is_taken_where_it_was_named(void **state)
{
    (void)state;
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir("/tmp"), 0);
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_oom_dump(a, dir + strlen("/tmp/"), -1, -1), HBM_OK);
    assert_int_equal(chdir("/"), 0);
    run_out(a);
    assert_int_equal(chdir(cwd), 0);
    assert_true(has_entry(dump_name("norank", 0, 1)));
    hbm_destroy(a);
}

static void two_ranks_into_one_folder_make_two_files(void **state)
{
    (void)state;
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            char v[8];
            snprintf(v, sizeof v, "%d", r);
            setenv("RANK", v, 1);
            setenv("HBMALLOC_OOM_DUMP_DIR", dir, 1);
            hbm_allocator *a = NULL;
            char err[256];
            void *p;
            if (hbm_open(&a, "sim:capacity=1GiB", 0, "", err, sizeof err) != HBM_OK)
                _exit(10);
            _exit(hbm_malloc(a, 4 * GiB, 0, &p) == HBM_ERR_OOM ? 0 : 11);
        }
    }
    for (int r = 0; r < 2; r++) {
        int st;
        assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
        assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    char names[8][256], want[128];
    assert_int_equal(entries(names, 8), 2);
    for (int r = 0; r < 2; r++) {
        snprintf(want, sizeof want, "hbmalloc-oom-rank%d-dev0-pid%ld-1.pickle", r, (long)pids[r]);
        assert_true(has_entry(want));
    }
}

/* An earlier job's dump of the same rank and PID (PIDs repeat in containers) is kept: the number goes on. */
static void a_file_of_the_same_name_is_never_replaced(void **state)
{
    (void)state;
    write_file(dump_name("norank", 0, 1), 3);
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_oom_dump(a, dir, -1, -1), HBM_OK);
    run_out(a);
    run_out(a);
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, dump_name("norank", 0, 1));
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_size, 3);
    assert_true(has_entry(dump_name("norank", 0, 2)));
    assert_true(has_entry(dump_name("norank", 0, 3)));
    hbm_destroy(a);
}

static void *oom_once(void *arg)
{
    void *p;
    return (void *)(uintptr_t)(hbm_malloc(arg, 4 * GiB, 0, &p) == HBM_ERR_OOM);
}

/* Threads running out at once: the bound holds, none waits for ever (the dump takes the lock the malloc gave back). */
static void threads_running_out_at_once_write_no_more_than_the_bound(void **state)
{
    (void)state;
    hbm_allocator *a = open_sim("sim:capacity=1GiB", "");
    assert_int_equal(hbm_oom_dump(a, dir, 2, -1), HBM_OK);
    pthread_t t[6];
    for (int i = 0; i < 6; i++)
        assert_int_equal(pthread_create(&t[i], NULL, oom_once, a), 0);
    for (int i = 0; i < 6; i++) {
        void *ok;
        assert_int_equal(pthread_join(t[i], &ok), 0);
        assert_true(ok != NULL);
    }
    char names[8][256];
    assert_int_equal(entries(names, 8), 2);
    assert_int_equal(stats_of(a).num_ooms, 6);
    hbm_destroy(a);
}

int main(void)
{
#define T(name) cmocka_unit_test_setup_teardown(name, make_dir, remove_dir)
    const struct CMUnitTest tests[] = {
        T(an_oom_writes_one_snapshot_named_for_its_rank_and_device),
        T(the_oom_is_returned_as_without_it_and_the_allocator_goes_on),
        T(the_rank_comes_from_rank_else_rank_id),
        T(at_most_max_dumps_then_one_warning),
        T(the_folder_bound_refuses_a_dump_that_would_pass_it),
        cmocka_unit_test(the_folder_bound_never_wraps),
        T(a_folder_gone_turns_it_off_with_one_warning),
        T(a_file_size_limit_fails_the_write_and_the_job_goes_on),
        T(a_folder_that_cannot_be_written_is_refused_at_once),
        T(the_environment_turns_it_on_at_create),
        T(a_relative_folder_is_taken_where_it_was_named),
        T(two_ranks_into_one_folder_make_two_files),
        T(a_file_of_the_same_name_is_never_replaced),
        T(threads_running_out_at_once_write_no_more_than_the_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
