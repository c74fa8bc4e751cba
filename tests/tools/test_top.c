/* test_top.c: `hbmalloc top` (tools/top.c) on records it must not trust (#28): figures that overflow 64-bit
 * arithmetic, texts with control characters, escape sequences and bytes that are not UTF-8, a file name made to
 * move the cursor; and the Prometheus file's temporary name, where a link may be planted. top_main runs in this
 * process with its standard output in a file; the records are made here as a writer makes them (the header, the
 * lock held for the writer's life). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "io/publish.h"
#include "top.h"
#include "util/util.h"

static char dir[64], out[128];

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hbm-top-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    snprintf(out, sizeof out, "%s.out", dir);
    return 0;
}

static int remove_dir(void **state)
{
    (void)state;
    remove_records_dir(dir);
    unlink(out);
    return 0;
}

/* A record's header as its writer makes it, for this process. */
static void record_header(hbm__shared_record *s)
{
    memset(s, 0, sizeof *s);
    s->magic = HBM__RECORD_MAGIC;
    s->layout = HBM__RECORD_LAYOUT;
    s->size = sizeof *s;
    atomic_store(&s->seq, 2);
    struct stat st;
    s->pid_ns = stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
    s->r.pid = getpid();
}

/* A record of this process named hbmalloc-UID-PID-0-<tag>, with these figures and texts; the writer's lock is
 * held on the returned descriptor (closing it ends the "writer"). */
static int craft(const char *tag, int64_t reserved, int64_t allocated, const char *command, const char *backend)
{
    hbm__shared_record s;
    record_header(&s);
    s.r.rank = s.r.local_rank = s.r.world_size = -1;
    s.r.reserved_bytes = reserved;
    s.r.allocated_bytes = allocated;
    s.r.peak_reserved_bytes = s.r.job_peak_reserved_bytes = s.r.largest_free_bytes = s.r.num_ooms = INT64_MAX;
    memcpy(s.r.command, command, strnlen(command, sizeof s.r.command - 1)); /* no NUL needed: the reader adds one */
    memcpy(s.r.backend, backend, strnlen(backend, sizeof s.r.backend - 1));
    char path[512];
    snprintf(path, sizeof path, "%s/hbmalloc-%u-%ld-0-%s", dir, (unsigned)geteuid(), (long)getpid(), tag);
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, &s, sizeof s), (ssize_t)sizeof s);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    return fd;
}

/* The device's used bytes the next crafted records see (-1: unknown, as before any measurement). */
static int64_t craft_used = -1;

/* A record with the figures the table's terms are made of, on a device, with the writer's lock held. */
static int craft_asleep(const char *tag, int device, int64_t rank, int64_t reserved, int64_t allocated, int64_t active,
                        int64_t largest, int64_t capacity, int64_t asleep)
{
    hbm__shared_record s;
    record_header(&s);
    s.r.device = device;
    s.r.rank = rank;
    s.r.local_rank = s.r.world_size = -1;
    s.r.reserved_bytes = s.r.peak_reserved_bytes = s.r.job_peak_reserved_bytes = reserved;
    s.r.allocated_bytes = allocated;
    s.r.active_bytes = active;
    s.r.largest_free_bytes = largest;
    s.r.device_total = capacity;
    s.r.asleep_bytes = asleep;
    s.r.device_used_bytes = craft_used;
    s.r.outside_bytes = craft_used < 0 ? -1 : craft_used > reserved ? craft_used - reserved : 0;
    s.r.outside_process_bytes = s.r.outside_others_bytes = -1;
    if (asleep)
        snprintf(s.r.asleep_tags, sizeof s.r.asleep_tags, "weights %lld MiB", (long long)(asleep >> 20));
    strcpy(s.r.backend, "sim");
    strcpy(s.r.command, "job");
    char path[512];
    snprintf(path, sizeof path, "%s/hbmalloc-%u-%ld-%d-%s", dir, (unsigned)geteuid(), (long)getpid(), device, tag);
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, &s, sizeof s), (ssize_t)sizeof s);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    return fd;
}

static int craft_figures(const char *tag, int device, int64_t rank, int64_t reserved, int64_t allocated, int64_t active,
                         int64_t largest, int64_t capacity)
{
    return craft_asleep(tag, device, rank, reserved, allocated, active, largest, capacity, 0);
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    char *buf = malloc(1 << 20);
    *len = fread(buf, 1, (1 << 20) - 1, f);
    buf[*len] = 0;
    fclose(f);
    return buf;
}

/* top_main(args) with its standard output in `out`; its exit status. */
static int run_top(int argc, const char **args)
{
    fflush(stdout);
    int saved = dup(STDOUT_FILENO), fd = open(out, O_CREAT | O_TRUNC | O_WRONLY, 0600);
    assert_true(saved >= 0 && fd >= 0);
    dup2(fd, STDOUT_FILENO);
    close(fd);
    int rc = top_main(argc, (char **)args);
    fflush(stdout);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    return rc;
}

/* Valid UTF-8 with no control character but the line feed: what a terminal, node_exporter or a CSV reader can
 * take whatever the records said. */
static void assert_safe_text(const char *what, const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t k = hbm__utf8_char(u + i, n - i);
        bool c0 = k == 1 && ((u[i] < 0x20 && u[i] != '\n') || u[i] == 0x7f);
        bool c1 = k == 2 && u[i] == 0xc2 && u[i + 1] < 0xa0;
        if (!k || c0 || c1)
            fail_msg("%s: byte %zu (0x%02x) is a control character or not UTF-8:\n%s", what, i, u[i], s);
        i += k;
    }
}

#define ESCAPES                               \
    "\x1b[2J\x1b]0;pwned\x07\xff\xfe\xc2\x9b" \
    "1m\x7f" /* clear, title, not UTF-8, 8-bit CSI, DEL */

/* Two records claim reserved = INT64_MAX and allocated = INT64_MIN (their difference and their sums overflow:
 * UBSan stops the old arithmetic), and names made of escape sequences; a file named to clear the screen is
 * refused. Every output is safe text, and the figures saturate. */
static void crafted_figures_and_texts_are_shown_safely(void **state)
{
    (void)state;
    int w1 = craft("a", INT64_MAX, INT64_MIN, ESCAPES, "sim" ESCAPES);
    int w2 = craft("b", INT64_MAX, INT64_MIN, "ok\n\t" ESCAPES, "sim");
    char path[512], prom[160], csv[160];
    snprintf(path, sizeof path, "%s/hbmalloc-%u-\x1b[2J\x1b[31m", dir, (unsigned)geteuid());
    close(open(path, O_CREAT | O_WRONLY, 0600)); /* not a record: refused, and named in the table */

    const char *table[] = {"--once", "--dir", dir};
    assert_int_equal(run_top(3, table), 0);
    size_t n;
    char *text = slurp(out, &n);
    assert_safe_text("the table", text, n);
    char pid[32];
    snprintf(pid, sizeof pid, " %ld ", (long)getpid());
    assert_non_null(strstr(text, pid));
    assert_non_null(strstr(text, "2 allocators"));
    assert_non_null(strstr(text, "1 file refused, e.g. hbmalloc-"));
    assert_non_null(strstr(text, "\xef\xbf\xbd[2J")); /* the escape replaced, the rest shown */
    free(text);

    const char *json[] = {"--once", "--json", "--dir", dir};
    assert_int_equal(run_top(4, json), 0);
    text = slurp(out, &n);
    assert_safe_text("the JSON", text, n);
    assert_non_null(
        strstr(text, "\"reserved_unallocated_bytes\": 9223372036854775807, \"unallocated_share\": 1.000000"));
    free(text);

    snprintf(csv, sizeof csv, "%s/top.csv", dir);
    snprintf(prom, sizeof prom, "%s/hbmalloc.prom", dir);
    const char *files[] = {"--once", "--dir", dir, "--csv", csv, "--textfile", dir};
    assert_int_equal(run_top(7, files), 0);
    text = slurp(csv, &n);
    assert_safe_text("the CSV file", text, n);
    assert_non_null(strstr(text, ",9223372036854775807,1.000000,"));
    free(text);
    text = slurp(prom, &n);
    assert_safe_text("the Prometheus file", text, n);
    assert_non_null(strstr(text, "hbmalloc_reserved_unallocated_bytes{rank=\"-1\",device=\"0\",slot=\"1\"} "
                                 "9223372036854775807\n"));
    free(text);
    close(w1);
    close(w2);
}

/* A record claiming reserved = INT64_MIN beside a measured device (used 0): the device's total row took used less
 * all reserved, which overflowed (UBSan stopped top); a negative reserved counts as 0, as the rows show it. */
static void a_negative_reserved_counts_as_zero_in_the_device_total(void **state)
{
    (void)state;
    int w = craft("n", INT64_MIN, 0, "neg", "sim");
    int w2 = craft("m", -5, 0, "neg", "sim");
    const char *table[] = {"--once", "--dir", dir};
    assert_int_equal(run_top(3, table), 0);
    size_t n;
    char *text = slurp(out, &n);
    const char *total = strstr(text, "\ntotal ");
    if (!total)
        fail_msg("no total row:\n%s", text);
    else if (strstr(total, "GiB")) /* reserved read as 0, as the rows show it: nothing outside is made up */
        fail_msg("the total's figures are made up:\n%s", text);
    free(text);
    close(w);
    close(w2);
}

/* `top --textfile DIR` writes a temporary file and renames it. A link planted at the name the old code used
 * (DIR/.hbmalloc.prom.PID) pointed its write at another file and became hbmalloc.prom; now the temporary file is
 * made with O_EXCL under a random name: the victim is untouched, hbmalloc.prom is a regular file of mode 0644
 * (0666 less a umask of 022), and no temporary file is left. */
static void a_link_planted_at_the_temporary_name_is_not_followed(void **state)
{
    (void)state;
    char victim[160], link[160], prom[160], records[160];
    snprintf(victim, sizeof victim, "%s.victim", dir);
    snprintf(link, sizeof link, "%s/.hbmalloc.prom.%ld", dir, (long)getpid());
    snprintf(prom, sizeof prom, "%s/hbmalloc.prom", dir);
    snprintf(records, sizeof records, "%s/records", dir);
    assert_int_equal(mkdir(records, 0700), 0);
    FILE *f = fopen(victim, "w");
    fputs("precious\n", f);
    fclose(f);
    assert_int_equal(symlink(victim, link), 0);
    mode_t mask = umask(022);
    const char *args[] = {"--once", "--dir", records, "--textfile", dir};
    assert_int_equal(run_top(5, args), 0);
    umask(mask);
    size_t n;
    char *text = slurp(victim, &n);
    assert_string_equal(text, "precious\n");
    free(text);
    struct stat st;
    assert_int_equal(lstat(prom, &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0644);
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode)); /* left as it was */
    DIR *d = opendir(dir);
    struct dirent *e;
    int temporary = 0;
    while ((e = readdir(d)))
        temporary += !strncmp(e->d_name, ".hbmalloc.prom.", 15);
    closedir(d);
    assert_int_equal(temporary, 1); /* the planted link only */
    unlink(victim);
    rmdir(records);
}


/* Issue #29 items 6 and 9: each row says reserved of the device's capacity; "unallocated" is reserved - allocated
 * and its share of reserved; "fragmentation" is 1 - the largest free cached block / free cached bytes (reserved -
 * active), shown only where something is cached free; one total per device that more than one allocator uses,
 * with that device's capacity once, instead of one "all" row summed across devices; --sort orders the rows. */
static void rows_show_capacity_the_two_terms_and_a_total_per_device(void **state)
{
    (void)state;
    /* device 0: two ranks; rank 0 has 400 MiB reserved, 100 allocated, 160 active: 240 MiB cached free whose
     * largest block is 60 MiB (fragmentation 75%), 300 MiB unallocated (75%). Device 1: one allocator, nothing
     * cached free. */
    const int64_t M = (int64_t)1 << 20, G = (int64_t)1 << 30;
    /* Memory outside (issue #40 item 1): device 0 has 1 GiB beside its two allocators' 1000 MiB, each row's
     * outside is the device's used less its own reserved (the other rank's included), the total less both. */
    craft_used = 1000 * M + G;
    int w0 = craft_figures("a", 0, 0, 400 * M, 100 * M, 160 * M, 60 * M, 8 * G);
    int w1 = craft_figures("b", 0, 1, 600 * M, 600 * M, 600 * M, 0, 8 * G);
    craft_used = 2 * G + 512 * M;
    int w2 = craft_figures("c", 1, 2, 2 * G, 2 * G, 2 * G, 0, 8 * G);
    craft_used = -1;
    const char *table[] = {"--once", "--dir", dir};
    assert_int_equal(run_top(3, table), 0);
    size_t n;
    char *text = slurp(out, &n);
    char want[300];
    snprintf(want, sizeof want,
             "\n0     %8ld    0  100.00 MiB  400.00 MiB   8.00 GiB    4.9%%    1.59 GiB  300.00 MiB    75.0%%  75.0%% "
             "   60.00 MiB  400.00 MiB  400.00 MiB     0       0          0 no  job\n",
             (long)getpid());
    if (!strstr(text, want))
        fail_msg("rank 0's row:\n%s\nwanted:%s", text, want);
    assert_non_null(
        strstr(text, "  600.00 MiB  600.00 MiB   8.00 GiB    7.3%    1.39 GiB     0 bytes     0.0%      - "));
    assert_non_null(strstr(text, "    2.00 GiB    2.00 GiB   8.00 GiB   25.0%  512.00 MiB     0 bytes"));
    if (!strstr(text,
                "\ntotal             0  700.00 MiB 1000.00 MiB   8.00 GiB   12.2% 1024.00 MiB  300.00 MiB    30.0%"))
        fail_msg("the device's total:\n%s", text);
    assert_null(strstr(text, "\ntotal             1")); /* one allocator on device 1: its row is its total */
    assert_null(strstr(text, "\nall "));
    assert_null(strstr(text, "ASLEEP")); /* nothing asleep: no column for it */
    free(text);

    const char *json[] = {"--once", "--json", "--dir", dir};
    assert_int_equal(run_top(4, json), 0);
    text = slurp(out, &n);
    assert_non_null(strstr(text, "\"reserved_unallocated_bytes\": 314572800, \"unallocated_share\": 0.750000, "
                                 "\"free_cached_bytes\": 251658240, \"fragmentation\": 0.750000,"));
    assert_non_null(strstr(text, "\"free_cached_bytes\": 0, \"fragmentation\": null,"));
    free(text);

    const char *sorted[] = {"--once", "--sort", "reserved", "--dir", dir};
    assert_int_equal(run_top(5, sorted), 0);
    text = slurp(out, &n);
    char *r2 = strstr(text, "\n2 "), *r1 = strstr(text, "\n1 "), *r0 = strstr(text, "\n0 ");
    assert_true(r2 && r1 && r0 && r2 < r1 && r1 < r0); /* 2 GiB, 600 MiB, 400 MiB */
    free(text);
    const char *bad[] = {"--once", "--sort", "size", "--dir", dir};
    assert_int_equal(run_top(5, bad), 2);
    close(w0);
    close(w1);
    close(w2);
}

/* Pools that sleep (docs/SLEEP.md): a line under the row says what sleeps per tag, made safe as every text of a
 * record; the JSON has the figures. */
static void a_row_says_what_sleeps(void **state)
{
    (void)state;
    const int64_t M = (int64_t)1 << 20, G = (int64_t)1 << 30;
    hbm__shared_record s;
    record_header(&s);
    s.r.rank = s.r.local_rank = s.r.world_size = -1;
    s.r.reserved_bytes = s.r.allocated_bytes = 100 * M;
    s.r.device_total = 8 * G;
    s.r.asleep_bytes = 12 * G;
    s.r.backup_bytes = 4 * G;
    strcpy(s.r.asleep_tags, "weights 4.00 GiB, kv_\033[2Jcache 8.00 GiB");
    strcpy(s.r.backend, "sim");
    strcpy(s.r.command, "job");
    char path[512];
    snprintf(path, sizeof path, "%s/hbmalloc-%u-%ld-0-s", dir, (unsigned)geteuid(), (long)getpid());
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, &s, sizeof s), (ssize_t)sizeof s);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    const char *table[] = {"--once", "--dir", dir};
    assert_int_equal(run_top(3, table), 0);
    size_t n;
    char *text = slurp(out, &n);
    assert_non_null(strstr(text, "\n      asleep: weights 4.00 GiB, kv_"));
    assert_non_null(strstr(text, "cache 8.00 GiB\n"));
    assert_null(strchr(text, '\033'));
    free(text);
    const char *json[] = {"--once", "--json", "--dir", dir};
    assert_int_equal(run_top(4, json), 0);
    text = slurp(out, &n);
    assert_non_null(strstr(text, "\"asleep_bytes\": 12884901888, \"backup_bytes\": 4294967296, \"asleep_tags\": "));
    free(text);
    close(fd);
}

/* Issue #36 item 9: a pool asleep keeps its blocks allocated on pages given back, which reserved does not count, so
 * allocated passed reserved, in the row and in the device's total, and unallocated was nothing. Now an ASLEEP column
 * (while a pool sleeps) gives the sleeping pages, allocated = in memory + asleep, and unallocated is reserved less the
 * blocks in memory: rank 0 has 310 MiB allocated, 120 MiB of it asleep, in 194 MiB reserved: 4 MiB unallocated,
 * 2 MiB of it the largest free block (fragmentation 50%). */
static void a_pool_asleep_has_its_column_and_the_totals_add_up(void **state)
{
    (void)state;
    const int64_t M = (int64_t)1 << 20, G = (int64_t)1 << 30;
    int w0 = craft_asleep("a", 0, 0, 194 * M, 310 * M, 310 * M, 2 * M, 8 * G, 120 * M);
    int w1 = craft_figures("b", 0, 1, 100 * M, 100 * M, 100 * M, 0, 8 * G);
    const char *table[] = {"--once", "--dir", dir};
    assert_int_equal(run_top(3, table), 0);
    size_t n;
    char *text = slurp(out, &n);
    if (!strstr(text,
                "\nRANK       PID  DEV   ALLOCATED    RESERVED      ASLEEP   CAPACITY RES/CAP     OUTSIDE     UNALLOC "
                "UNALLOC%"))
        fail_msg("the header:\n%s", text);
    char want[300];
    snprintf(
        want, sizeof want,
        "\n0     %8ld    0  310.00 MiB  194.00 MiB  120.00 MiB   8.00 GiB    2.4%%           -    4.00 MiB     2.1%%  "
        "50.0%% ",
        (long)getpid());
    if (!strstr(text, want))
        fail_msg("rank 0's row:\n%s\nwanted:%s", text, want);
    assert_non_null(strstr(text, "\n      asleep: weights 120 MiB\n"));
    assert_non_null(strstr(
        text, "  100.00 MiB  100.00 MiB     0 bytes   8.00 GiB    1.2%           -     0 bytes     0.0%      - "));
    if (!strstr(text, "\ntotal             0  410.00 MiB  294.00 MiB  120.00 MiB   8.00 GiB    3.6%           -    "
                      "4.00 MiB     1.4%"))
        fail_msg("the device's total:\n%s", text);
    free(text);
    const char *json[] = {"--once", "--json", "--dir", dir};
    assert_int_equal(run_top(4, json), 0);
    text = slurp(out, &n);
    assert_non_null(strstr(text, "\"reserved_unallocated_bytes\": 4194304, \"unallocated_share\": 0.020619, "
                                 "\"free_cached_bytes\": 4194304, \"fragmentation\": 0.500000,"));
    free(text);
    close(w0);
    close(w1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(crafted_figures_and_texts_are_shown_safely, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_link_planted_at_the_temporary_name_is_not_followed, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_negative_reserved_counts_as_zero_in_the_device_total, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_row_says_what_sleeps, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_pool_asleep_has_its_column_and_the_totals_add_up, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(rows_show_capacity_the_two_terms_and_a_total_per_device, make_dir, remove_dir),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
