/*
 * top.c: `hbmalloc top` (docs/MONITOR.md).
 *
 * Each refresh lists the folder of records (hbm_record_dir, or --dir), reads the files named for this user
 * (hbmalloc-UID-...) with hbm_record_read — which refuses files another user owns or could have written, and
 * tells records of exited processes apart — and writes what it read: a table (redrawn in place on a terminal),
 * a JSON document, CSV lines appended to a file, and/or a Prometheus text file for node_exporter's textfile
 * collector (written to a temporary file of its own, made with O_EXCL, and renamed, as the collector's
 * documentation asks).
 *
 * A record is another process's writing, and a file name in a shared folder anyone's: texts are made valid UTF-8
 * without control characters before anything shows them (a terminal must not take a process name for escape
 * sequences), and arithmetic on the figures saturates instead of overflowing.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "hbmalloc.h"
#include "top.h"
#include "util.h"

/* A record read, its texts made safe to show (safe_text). */
typedef struct entry {
    hbm_record r;
    char name[256]; /* the file's name: orders the allocators of one process on one device */
    unsigned slot;  /* its index among the entries of its rank and device (a Prometheus label) */
} entry;

typedef struct seen {
    entry *recs;
    size_t n, cap;
    size_t stale, refused, removed;
    char refused_file[256], refused_why[160]; /* the first refused file, and why (made safe to show) */
} seen;

typedef struct opts {
    const char *dir, *csv, *textfile;
    double interval;
    int once, json, clean;
    int columns; /* the terminal's width (0: not a terminal, every column) */
} opts;

static volatile sig_atomic_t stop;
static void on_signal(int sig) { (void)sig; stop = 1; }

static int cmp_rec(const void *x, const void *y)
{
    const entry *ea = x, *eb = y;
    const hbm_record *a = &ea->r, *b = &eb->r;
    /* ranks first in rank order, then processes without one by PID; devices in order; then the file's name */
    int64_t ra = a->rank < 0 ? INT64_MAX : a->rank, rb = b->rank < 0 ? INT64_MAX : b->rank;
    if (ra != rb)
        return ra < rb ? -1 : 1;
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    if (a->device != b->device)
        return a->device < b->device ? -1 : 1;
    return strcmp(ea->name, eb->name);
}

/* s rewritten in place (cap bytes with its NUL) as valid UTF-8 without control characters: a byte that is not
 * part of a well-formed character, C0 and C1 controls and DEL become U+FFFD; cut between characters to fit. */
static void safe_text(char *s, size_t cap)
{
    char in[1024];
    size_t n = strnlen(s, cap - 1), out = 0;
    if (n >= sizeof in)
        n = sizeof in - 1;
    memcpy(in, s, n);
    const unsigned char *u = (const unsigned char *)in;
    for (size_t i = 0; i < n;) {
        size_t k = hbm__utf8_char(u + i, n - i);
        bool control = k == 1 ? u[i] < 0x20 || u[i] == 0x7f : k == 2 && u[i] == 0xc2 && u[i + 1] < 0xa0;
        const char *put = k && !control ? in + i : "\xef\xbf\xbd"; /* U+FFFD */
        size_t m = k && !control ? k : 3;
        if (out + m > cap - 1)
            break;
        memcpy(s + out, put, m);
        out += m;
        i += k ? k : 1;
    }
    s[out] = 0;
}

static void safe_record(hbm_record *r)
{
    safe_text(r->backend, sizeof r->backend);
    safe_text(r->settings, sizeof r->settings);
    safe_text(r->source, sizeof r->source);
    safe_text(r->command, sizeof r->command);
}

/* Prometheus: an entry's index among the entries of its rank and device, in their order (entries sorted), so
 * that (rank, device, slot) names each series once. */
static void number_slots(seen *s)
{
    for (size_t i = 0; i < s->n; i++) {
        s->recs[i].slot = 0;
        for (size_t j = 0; j < i; j++)
            s->recs[i].slot += s->recs[j].r.rank == s->recs[i].r.rank && s->recs[j].r.device == s->recs[i].r.device;
    }
}

/* 0, or -1 when the folder cannot be read (errno). */
static int collect(const opts *o, seen *s)
{
    s->n = s->stale = s->refused = s->removed = 0;
    s->refused_file[0] = 0;
    DIR *d = opendir(o->dir);
    if (!d)
        return -1;
    char prefix[64];
    snprintf(prefix, sizeof prefix, "hbmalloc-%u-", (unsigned)geteuid());
    size_t plen = strlen(prefix);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, prefix, plen)) /* not named for this user: not opened at all */
            continue;
        char path[PATH_MAX], why[160];
        if (hbm__grow((void **)&s->recs, &s->cap, s->n + 1, sizeof *s->recs))
            break; /* shown: the records read so far */
        entry *en = &s->recs[s->n];
        hbm_status rc = HBM_ERR_INVALID;
        if (snprintf(path, sizeof path, "%s/%s", o->dir, e->d_name) >= (int)sizeof path)
            snprintf(why, sizeof why, "its path is longer than PATH_MAX (%d)", PATH_MAX);
        else
            rc = hbm_record_read(path, &en->r, why, sizeof why);
        if (rc == HBM_OK) {
            safe_record(&en->r);
            snprintf(en->name, sizeof en->name, "%s", e->d_name);
            s->n++;
        } else if (rc == HBM_ERR_STALE) {
            s->stale++;
            if (o->clean && unlink(path) == 0)
                s->removed++;
        } else {
            if (!s->refused++) {
                snprintf(s->refused_file, sizeof s->refused_file, "%s", e->d_name);
                snprintf(s->refused_why, sizeof s->refused_why, "%s", why);
                safe_text(s->refused_file, sizeof s->refused_file); /* anyone may name a file in /dev/shm */
                safe_text(s->refused_why, sizeof s->refused_why);
            }
        }
    }
    closedir(d);
    if (s->n) /* recs is NULL until a record is read (UBSan: qsort's array is never NULL) */
        qsort(s->recs, s->n, sizeof *s->recs, cmp_rec);
    number_slots(s);
    return 0;
}

/* A record's figures are only as sane as its writer: sums and differences saturate (no signed overflow). */
static int64_t sat_add(int64_t x, int64_t y)
{
    int64_t r;
    return __builtin_add_overflow(x, y, &r) ? (y > 0 ? INT64_MAX : INT64_MIN) : r;
}
static int64_t sat_sub(int64_t x, int64_t y)
{
    int64_t r;
    return __builtin_sub_overflow(x, y, &r) ? (y < 0 ? INT64_MAX : INT64_MIN) : r;
}
static int64_t unallocated(const hbm_record *r) { return sat_sub(r->reserved_bytes, r->allocated_bytes); }
/* Unallocated over reserved, in [0, 1] whatever the record says. */
static double ratio(int64_t unalloc, int64_t reserved)
{
    double f = reserved > 0 && unalloc > 0 ? (double)unalloc / (double)reserved : 0.0;
    return f > 1.0 ? 1.0 : f;
}
static double frag(const hbm_record *r) { return ratio(unallocated(r), r->reserved_bytes); }

static void size_text(int64_t n, char *buf, size_t len) { hbm__format_size(n < 0 ? 0 : (uint64_t)n, buf, len); }

static void now_text(char *buf, size_t len, int utc_iso)
{
    time_t t = time(NULL);
    struct tm tm;
    if (utc_iso)
        strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&t, &tm));
    else
        strftime(buf, len, "%Y-%m-%d %H:%M:%S", localtime_r(&t, &tm));
}

/* The table's columns; on a terminal narrower than all of them, those with the highest `drop` go first (the
 * process name, expandable, device mallocs, unallocated), so that a row never wraps: the rest fit 80 columns. */
enum { C_RANK, C_PID, C_DEV, C_ALLOC, C_RES, C_UNALLOC, C_FRAG, C_LARGEST, C_OOMS, C_RETRIES, C_DEVMALLOC, C_EXP,
       C_COMMAND, NCOLS };
static const struct {
    const char *head;
    int width, left, drop;
} cols[NCOLS] = {
    {"RANK", 5, 1, 0},     {"PID", 8, 0, 0},         {"DEV", 3, 0, 0},     {"ALLOCATED", 11, 0, 0},
    {"RESERVED", 11, 0, 0}, {"UNALLOC", 11, 0, 1},     {"FRAG%", 6, 0, 0},   {"LARGEST FREE", 12, 0, 0},
    {"OOMS", 5, 0, 0},     {"RETRIES", 7, 0, 0},     {"DEV MALLOC", 11, 0, 2}, {"EXP", 3, 1, 3},
    {"COMMAND", 7, 1, 4},
};

static void print_row(FILE *f, const bool *on, char cell[NCOLS][40])
{
    int last = NCOLS - 1;
    while (last > 0 && !on[last])
        last--;
    for (int c = 0, first = 1; c <= last; c++) {
        if (!on[c])
            continue;
        if (!first)
            fputc(' ', f);
        first = 0;
        if (cols[c].left && c == last)
            fputs(cell[c], f); /* no padding at the end of a line */
        else
            fprintf(f, cols[c].left ? "%-*s" : "%*s", cols[c].width, cell[c]);
    }
    fputc('\n', f);
}

/* The columns a text takes on a terminal: one per character (safe_text left no control character). */
static int text_width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

static void print_table(FILE *f, const opts *o, const seen *s)
{
    char when[32];
    now_text(when, sizeof when, 0);
    fprintf(f, "hbmalloc top  %s  %zu allocator%s", when, s->n, s->n == 1 ? "" : "s");
    if (!o->once)
        fprintf(f, "  every %gs, Ctrl-C quits", o->interval);
    fputs("\n\n", f);
    bool on[NCOLS];
    int width = 0, command = (int)strlen(cols[C_COMMAND].head);
    for (size_t i = 0; i < s->n; i++)
        if (text_width(s->recs[i].r.command) > command)
            command = text_width(s->recs[i].r.command);
    for (int c = 0; c < NCOLS; c++) {
        on[c] = true;
        width += (c == C_COMMAND ? command : cols[c].width) + (c > 0);
    }
    for (int level = 4; level > 0 && o->columns && width > o->columns; level--)
        for (int c = 0; c < NCOLS; c++)
            if (cols[c].drop == level && on[c]) {
                on[c] = false;
                width -= (c == C_COMMAND ? command : cols[c].width) + 1;
            }
    char cell[NCOLS][40];
    for (int c = 0; c < NCOLS; c++)
        snprintf(cell[c], sizeof cell[c], "%s", cols[c].head);
    print_row(f, on, cell);
    int64_t ta = 0, tr = 0;
    for (size_t i = 0; i < s->n; i++) {
        const hbm_record *r = &s->recs[i].r;
        if (r->rank >= 0)
            snprintf(cell[C_RANK], sizeof cell[C_RANK], "%lld", (long long)r->rank);
        else
            snprintf(cell[C_RANK], sizeof cell[C_RANK], "-");
        snprintf(cell[C_PID], sizeof cell[C_PID], "%lld", (long long)r->pid);
        snprintf(cell[C_DEV], sizeof cell[C_DEV], "%lld", (long long)r->device);
        size_text(r->allocated_bytes, cell[C_ALLOC], sizeof cell[C_ALLOC]);
        size_text(r->reserved_bytes, cell[C_RES], sizeof cell[C_RES]);
        size_text(unallocated(r), cell[C_UNALLOC], sizeof cell[C_UNALLOC]);
        snprintf(cell[C_FRAG], sizeof cell[C_FRAG], "%.1f", 100.0 * frag(r));
        size_text(r->largest_free_bytes, cell[C_LARGEST], sizeof cell[C_LARGEST]);
        snprintf(cell[C_OOMS], sizeof cell[C_OOMS], "%lld", (long long)r->num_ooms);
        snprintf(cell[C_RETRIES], sizeof cell[C_RETRIES], "%lld", (long long)r->num_alloc_retries);
        snprintf(cell[C_DEVMALLOC], sizeof cell[C_DEVMALLOC], "%lld", (long long)r->num_device_alloc);
        snprintf(cell[C_EXP], sizeof cell[C_EXP], "%s", r->expandable_segments ? "yes" : "no");
        snprintf(cell[C_COMMAND], sizeof cell[C_COMMAND], "%s", r->command);
        print_row(f, on, cell);
        ta = sat_add(ta, r->allocated_bytes);
        tr = sat_add(tr, r->reserved_bytes);
    }
    if (s->n > 1) {
        bool sum[NCOLS];
        for (int c = 0; c < NCOLS; c++) {
            sum[c] = on[c] && c <= C_FRAG;
            cell[c][0] = 0;
        }
        snprintf(cell[C_RANK], sizeof cell[C_RANK], "all");
        size_text(ta, cell[C_ALLOC], sizeof cell[C_ALLOC]);
        size_text(tr, cell[C_RES], sizeof cell[C_RES]);
        size_text(sat_sub(tr, ta), cell[C_UNALLOC], sizeof cell[C_UNALLOC]);
        snprintf(cell[C_FRAG], sizeof cell[C_FRAG], "%.1f", 100.0 * ratio(sat_sub(tr, ta), tr));
        print_row(f, sum, cell);
    }
    if (!s->n)
        fprintf(f, "(no process of this user publishes hbmalloc statistics in %s: the PyTorch plug-ins do by default, "
                   "the C API with hbm_publish:True)\n", o->dir);
    if (s->stale)
        fprintf(f, "\n%zu record%s of exited processes ignored%s\n", s->stale, s->stale == 1 ? "" : "s",
                o->clean ? (s->removed == s->stale ? " and removed" : ", not all removed") : " (--clean removes them)");
    if (s->refused)
        fprintf(f, "\n%zu file%s refused, e.g. %s: %s\n", s->refused, s->refused == 1 ? "" : "s", s->refused_file,
                s->refused_why);
}

static void print_json(FILE *f, const opts *o, const seen *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(f, "{\"time_ns\": %llu, \"dir\": ",
            (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
    hbm__json_str(f, o->dir);
    fprintf(f, ", \"stale\": %zu, \"refused\": %zu, \"records\": [", s->stale, s->refused);
    for (size_t i = 0; i < s->n; i++) {
        const hbm_record *r = &s->recs[i].r;
        fprintf(f, "%s{\"pid\": %lld, \"start_time\": %llu, \"device\": %lld, \"rank\": %lld, \"local_rank\": %lld, "
                   "\"world_size\": %lld, \"updated_ns\": %llu, \"allocated_bytes\": %lld, \"reserved_bytes\": %lld, "
                   "\"reserved_unallocated_bytes\": %lld, \"fragmentation\": %.6f, \"active_bytes\": %lld, "
                   "\"requested_bytes\": %lld, \"inactive_split_bytes\": %lld, \"peak_allocated_bytes\": %lld, "
                   "\"peak_reserved_bytes\": %lld, \"largest_free_bytes\": %lld, \"allocation\": %lld, "
                   "\"segment\": %lld, \"active\": %lld, \"inactive_split\": %lld, \"num_ooms\": %lld, "
                   "\"num_alloc_retries\": %lld, \"num_device_alloc\": %lld, \"num_device_free\": %lld, "
                   "\"expandable_segments\": %s, \"device_total\": %lld, \"backend\": ",
                i ? ", " : "", (long long)r->pid, (unsigned long long)r->start_time, (long long)r->device,
                (long long)r->rank, (long long)r->local_rank, (long long)r->world_size,
                (unsigned long long)r->updated_ns, (long long)r->allocated_bytes, (long long)r->reserved_bytes,
                (long long)unallocated(r), frag(r), (long long)r->active_bytes, (long long)r->requested_bytes,
                (long long)r->inactive_split_bytes, (long long)r->peak_allocated_bytes,
                (long long)r->peak_reserved_bytes, (long long)r->largest_free_bytes, (long long)r->allocation,
                (long long)r->segment, (long long)r->active, (long long)r->inactive_split, (long long)r->num_ooms,
                (long long)r->num_alloc_retries, (long long)r->num_device_alloc, (long long)r->num_device_free,
                r->expandable_segments ? "true" : "false", (long long)r->device_total);
        hbm__json_str(f, r->backend);
        fputs(", \"settings\": ", f);
        hbm__json_str(f, r->settings);
        fputs(", \"source\": ", f);
        hbm__json_str(f, r->source);
        fputs(", \"command\": ", f);
        hbm__json_str(f, r->command);
        fputc('}', f);
    }
    fputs("]}\n", f);
}

/* A CSV field: quoted when it holds a comma, a quote or a line break (RFC 4180). */
static void csv_field(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static int append_csv(const opts *o, const seen *s)
{
    FILE *f = fopen(o->csv, "a");
    if (!f)
        return -1;
    if (ftell(f) == 0)
        fputs("time,pid,rank,device,allocated_bytes,reserved_bytes,reserved_unallocated_bytes,fragmentation,"
              "largest_free_bytes,peak_reserved_bytes,num_ooms,num_alloc_retries,num_device_alloc,num_device_free,"
              "expandable_segments,command\n", f);
    char when[32];
    now_text(when, sizeof when, 1);
    for (size_t i = 0; i < s->n; i++) {
        const hbm_record *r = &s->recs[i].r;
        fprintf(f, "%s,%lld,%lld,%lld,%lld,%lld,%lld,%.6f,%lld,%lld,%lld,%lld,%lld,%lld,%d,", when, (long long)r->pid,
                (long long)r->rank, (long long)r->device, (long long)r->allocated_bytes, (long long)r->reserved_bytes,
                (long long)unallocated(r), frag(r), (long long)r->largest_free_bytes,
                (long long)r->peak_reserved_bytes, (long long)r->num_ooms, (long long)r->num_alloc_retries,
                (long long)r->num_device_alloc, (long long)r->num_device_free, r->expandable_segments ? 1 : 0);
        csv_field(f, r->command);
        fputc('\n', f);
    }
    return fclose(f) ? -1 : 0;
}

/* A label value in the text format: UTF-8 (a byte that is not part of a well-formed character written as
 * U+FFFD: the collector rejects the whole file otherwise), backslash, double quote and line feed escaped. */
static void prom_label(FILE *f, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);
    fputc('"', f);
    for (size_t i = 0; i < n;) {
        size_t k = hbm__utf8_char(u + i, n - i);
        if (!k)
            fputs("\xef\xbf\xbd", f);
        else if (u[i] == '\\' || u[i] == '"')
            fprintf(f, "\\%c", u[i]);
        else if (u[i] == '\n')
            fputs("\\n", f);
        else
            fwrite(u + i, 1, k, f);
        i += k ? k : 1;
    }
    fputc('"', f);
}

/* The labels of a series: rank and device, and the slot among allocators of that rank and device (two of one
 * process, or jobs without RANK) — unique by construction, and the same across restarts of a job, so that series
 * do not multiply with PIDs. The PID is a label of hbmalloc_info only. */
static void prom_labels(FILE *f, const entry *e)
{
    fprintf(f, "{rank=\"%lld\",device=\"%lld\",slot=\"%u\"}", (long long)e->r.rank, (long long)e->r.device,
            e->slot);
}

/* What a metric shows: a field of the record, or one derived from it. */
enum { FIELD, UNALLOCATED, SECONDS };

static int write_textfile(const opts *o, const seen *s)
{
    static const struct {
        const char *name, *type, *help;
        int kind;
        size_t off; /* FIELD: the int64_t field */
    } metrics[] = {
#define M(n, t, h, field) {n, t, h, FIELD, offsetof(hbm_record, field)}
        M("hbmalloc_allocated_bytes", "gauge", "Bytes in allocated blocks (allocated_bytes.all.current).",
          allocated_bytes),
        M("hbmalloc_reserved_bytes", "gauge", "Bytes held from the device (reserved_bytes.all.current).",
          reserved_bytes),
        M("hbmalloc_active_bytes", "gauge", "Bytes in active blocks (active_bytes.all.current).", active_bytes),
        M("hbmalloc_peak_reserved_bytes", "gauge", "Peak of reserved_bytes since the last reset.", peak_reserved_bytes),
        M("hbmalloc_largest_free_block_bytes", "gauge", "The largest cached free block.", largest_free_bytes),
        M("hbmalloc_segments", "gauge", "Segments held from the device.", segment),
        M("hbmalloc_inactive_split_blocks", "gauge", "Free blocks of split segments (fragments).", inactive_split),
        M("hbmalloc_ooms_total", "counter", "Out-of-memory errors.", num_ooms),
        M("hbmalloc_alloc_retries_total", "counter", "Allocations retried after freeing the cache.", num_alloc_retries),
        M("hbmalloc_device_mallocs_total", "counter", "Device allocation calls (and page maps).", num_device_alloc),
        M("hbmalloc_device_frees_total", "counter", "Device free calls (and page unmaps).", num_device_free),
        M("hbmalloc_expandable_segments", "gauge", "1 when expandable segments are in force.", expandable_segments),
        M("hbmalloc_device_total_bytes", "gauge", "The device's capacity.", device_total),
#undef M
        {"hbmalloc_reserved_unallocated_bytes", "gauge", "Reserved bytes no allocation uses (cached or fragmented).",
         UNALLOCATED, 0},
        {"hbmalloc_last_update_timestamp_seconds", "gauge", "When the process last updated its record.", SECONDS, 0},
    };
    char tmp[PATH_MAX], final[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s/.hbmalloc.prom.XXXXXX", o->textfile) >= (int)sizeof tmp ||
        snprintf(final, sizeof final, "%s/hbmalloc.prom", o->textfile) >= (int)sizeof final) {
        errno = ENAMETOOLONG;
        return -1;
    }
    /* A name of its own, made with O_EXCL (mkstemp): a link planted at a predictable one is never followed.
     * Readable as a file fopen made would be (0666 less the umask): node_exporter may run as another user. */
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    mode_t mask = umask(0);
    umask(mask);
    FILE *f = fchmod(fd, 0666 & ~mask) ? NULL : fdopen(fd, "w");
    if (!f) {
        int e = errno;
        close(fd);
        unlink(tmp);
        errno = e;
        return -1;
    }
    for (size_t m = 0; m < sizeof metrics / sizeof metrics[0]; m++) {
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", metrics[m].name, metrics[m].help, metrics[m].name,
                metrics[m].type);
        for (size_t i = 0; i < s->n; i++) {
            const hbm_record *r = &s->recs[i].r;
            fputs(metrics[m].name, f);
            prom_labels(f, &s->recs[i]);
            if (metrics[m].kind == SECONDS)
                fprintf(f, " %.3f\n", (double)r->updated_ns / 1e9);
            else
                fprintf(f, " %lld\n", (long long)(metrics[m].kind == UNALLOCATED
                                                       ? unallocated(r)
                                                       : *(const int64_t *)((const char *)r + metrics[m].off)));
        }
    }
    fputs("# HELP hbmalloc_info The allocator's process, backend, settings and process name.\n"
          "# TYPE hbmalloc_info gauge\n", f);
    for (size_t i = 0; i < s->n; i++) {
        const hbm_record *r = &s->recs[i].r;
        fprintf(f, "hbmalloc_info{rank=\"%lld\",device=\"%lld\",slot=\"%u\",pid=\"%lld\",backend=", (long long)r->rank,
                (long long)r->device, s->recs[i].slot, (long long)r->pid);
        prom_label(f, r->backend);
        fputs(",settings=", f);
        prom_label(f, r->settings);
        fputs(",command=", f);
        prom_label(f, r->command);
        fputs("} 1\n", f);
    }
    if (fclose(f) || rename(tmp, final)) {
        int e = errno;
        unlink(tmp);
        errno = e;
        return -1;
    }
    return 0;
}

static void usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "hbmalloc top: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: hbmalloc top [--once] [--json] [--interval SECONDS] [--csv FILE] [--textfile DIR] "
                    "[--dir DIR] [--clean]\n");
}

int top_main(int argc, char **argv)
{
    opts o = {hbm_record_dir(), NULL, NULL, 1.0, 0, 0, 0, 0};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        int more = i + 1 < argc;
        if (!strcmp(a, "--once")) {
            o.once = 1;
        } else if (!strcmp(a, "--json")) {
            o.json = 1;
        } else if (!strcmp(a, "--clean")) {
            o.clean = 1;
        } else if (!strcmp(a, "--interval") && more) {
            char *end;
            o.interval = strtod(argv[++i], &end);
            if (*end || end == argv[i] || !(o.interval >= 0.1 && o.interval <= 3600)) {
                usage_error("--interval takes seconds from 0.1 to 3600, not '%s'", argv[i]);
                return 2;
            }
        } else if (!strcmp(a, "--csv") && more) {
            o.csv = argv[++i];
        } else if (!strcmp(a, "--textfile") && more) {
            o.textfile = argv[++i];
        } else if (!strcmp(a, "--dir") && more) {
            o.dir = argv[++i];
        } else {
            usage_error(more || a[0] != '-' ? "unknown argument '%s'" : "'%s' needs a value", a);
            return 2;
        }
    }
    struct stat st;
    if (o.textfile && (stat(o.textfile, &st) || !S_ISDIR(st.st_mode))) {
        usage_error("--textfile needs an existing folder (node_exporter's --collector.textfile.directory), not '%s'",
                    o.textfile);
        return 2;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int tty = !o.json && isatty(STDOUT_FILENO);
    struct winsize ws;
    if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        o.columns = ws.ws_col;
    seen s = {0};
    int rc = 0;
    for (unsigned frame = 0; !stop; frame++) {
        if (collect(&o, &s)) {
            fprintf(stderr, "hbmalloc top: cannot read %s: %s (HBMALLOC_TOP_DIR or --dir names the folder)\n", o.dir,
                    strerror(errno));
            rc = 2;
            break;
        }
        if (o.csv && append_csv(&o, &s)) {
            fprintf(stderr, "hbmalloc top: cannot append to %s: %s\n", o.csv, strerror(errno));
            rc = 2;
            break;
        }
        if (o.textfile && write_textfile(&o, &s)) {
            fprintf(stderr, "hbmalloc top: cannot write %s/hbmalloc.prom: %s\n", o.textfile, strerror(errno));
            rc = 2;
            break;
        }
        if (o.json) {
            print_json(stdout, &o, &s);
        } else if (!(o.csv || o.textfile) || o.once || tty) {
            if (tty && !o.once)
                fputs("\033[H\033[2J", stdout); /* redrawn in place, as npu-smi -l and top do */
            else if (frame)
                fputc('\n', stdout);
            print_table(stdout, &o, &s);
        }
        fflush(stdout);
        if (o.once)
            break;
        struct timespec ts = {(time_t)o.interval, (long)((o.interval - (double)(time_t)o.interval) * 1e9)};
        while (!stop && nanosleep(&ts, &ts) && errno == EINTR)
            ;
    }
    free(s.recs);
    return rc;
}
