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
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "hbmalloc.h"
#include "top.h"
#include "util.h"

/* A record read, its texts made safe to show (safe_text). */
typedef struct entry {
    hbm_record r;
    char name[256];  /* the file's name: orders the allocators of one process on one device */
    unsigned slot;   /* its index among the entries of its rank and device (a Prometheus label) */
    size_t hist;     /* its history (seen.hist) */
    char device[48]; /* the physical device, for the totals: "cuda 3", "npu 5", "sim 0" (device_of) */
} entry;

/* What top remembers of a record between refreshes, by the record's name. */
#define TREND 8
typedef struct history {
    char name[256];
    int64_t reserved[TREND]; /* at the last refreshes, oldest first */
    int n;
    unsigned frame; /* the refresh it was last seen at */
} history;

typedef struct seen {
    entry *recs;
    size_t n, cap;
    size_t stale, refused, removed;
    char refused_file[256], refused_why[160]; /* the first refused file, and why (made safe to show) */
    history *hist;
    size_t nhist, caphist;
    unsigned frame;
} seen;

/* The table's order: the key `s` turns to, or --sort. */
enum { SORT_RANK, SORT_RESERVED, SORT_ALLOCATED, SORT_UNALLOC, SORT_PID, NSORTS };
static const char *const sort_names[NSORTS] = {"rank", "reserved", "allocated", "unallocated", "pid"};

typedef struct opts {
    const char *dir, *csv, *textfile;
    double interval;
    int once, json, clean, sort;
    int keys;           /* the terminal's keys are read: q quits, s sorts */
    int columns, lines; /* the terminal's size, read at every refresh (0: not a terminal, every column) */
} opts;

static volatile sig_atomic_t stop, resized;
static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}
/* SIGWINCH (the terminal's size changed) and SIGCONT (back from Ctrl-Z): redraw now, at the new size. */
static void on_winch(int sig)
{
    (void)sig;
    resized = 1;
}

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
    safe_text(r->asleep_tags, sizeof r->asleep_tags);
    safe_text(r->resident, sizeof r->resident);
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

static void device_of(entry *e);

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
            device_of(en);
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
/* Pools that sleep (docs/SLEEP.md) keep their blocks allocated on pages given back, which reserved does not count:
 * allocated = in memory + asleep. The record gives the sleeping pools' pages (asleep_bytes), which hold their blocks
 * whole: they stand for those blocks here, at most all that is allocated (exact when the blocks fill their pages). */
static int64_t asleep_held(const hbm_record *r)
{
    int64_t z = r->asleep_bytes < 0 ? 0 : r->asleep_bytes;
    return z < r->allocated_bytes ? z : r->allocated_bytes > 0 ? r->allocated_bytes : 0;
}
/* "Unallocated" (docs/MONITOR.md, Terms): reserved less the blocks in memory. */
static int64_t unallocated(const hbm_record *r)
{
    return sat_sub(r->reserved_bytes, sat_sub(r->allocated_bytes, asleep_held(r)));
}
/* part over whole, in [0, 1] whatever the record says. */
static double ratio(int64_t part, int64_t whole)
{
    double f = whole > 0 && part > 0 ? (double)part / (double)whole : 0.0;
    return f > 1.0 ? 1.0 : f;
}
/* Unallocated's share of reserved. */
static double unallocated_share(const hbm_record *r) { return ratio(unallocated(r), r->reserved_bytes); }
/* Free cached bytes: reserved less the active blocks in memory (allocated, and freed blocks still waiting on another
 * stream; a sleeping pool's hold no reserved memory). */
static int64_t free_cached(const hbm_record *r)
{
    return sat_sub(r->reserved_bytes, sat_sub(r->active_bytes, asleep_held(r)));
}
/* "Fragmentation" (docs/TOOL.md, Terms): 1 - the largest free cached block / free cached bytes, in [0, 1]; -1 when
 * nothing is cached free (no fragmentation to speak of). */
static double fragmentation(const hbm_record *r)
{
    int64_t cached = free_cached(r);
    if (cached <= 0)
        return -1.0;
    return 1.0 - ratio(r->largest_free_bytes, cached);
}

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

/* The device a record's allocator is on, as the machine numbers it, for the totals per device: a process sees the
 * devices its CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES lets it see, numbered from 0, so device 0 of two
 * processes may be two devices. Their variable is read from /proc/PID/environ when the PID is still the record's
 * process (its start time, /proc/PID/stat field 22, as the record has it: not a PID of another namespace or a
 * reused one); else the index as the process gives it. The simulated device is every process's own: grouped by
 * index, as if one. */
static void device_of(entry *e)
{
    const hbm_record *r = &e->r;
    bool npu = !strncmp(r->backend, "acl", 3) || !strncmp(r->backend, "npu", 3);
    bool cuda = !strncmp(r->backend, "cuda", 4);
    const char *kind = npu ? "npu" : cuda ? "cuda" : "sim";
    snprintf(e->device, sizeof e->device, "%s %lld", kind, (long long)r->device);
    if ((!npu && !cuda) || r->pid <= 0 || r->device < 0)
        return;
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%lld/stat", (long long)r->pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* after the process name, which may hold anything */
    unsigned long long start = 0;
    for (int field = 2; p && *p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (!p || sscanf(p + 1, "%llu", &start) != 1 || start != r->start_time)
        return;
    snprintf(path, sizeof path, "/proc/%lld/environ", (long long)r->pid);
    char env[65536];
    f = fopen(path, "r");
    if (!f)
        return;
    n = fread(env, 1, sizeof env - 1, f);
    fclose(f);
    env[n] = 0;
    const char *var = npu ? "ASCEND_RT_VISIBLE_DEVICES=" : "CUDA_VISIBLE_DEVICES=";
    for (size_t i = 0; i < n; i += strlen(env + i) + 1) {
        if (strncmp(env + i, var, strlen(var)))
            continue;
        const char *list = env + i + strlen(var);
        for (int64_t k = 0; k < r->device && list; k++)
            if ((list = strchr(list, ',')))
                list++;
        if (!list)
            return;
        char id[40];
        size_t len = strcspn(list, ",");
        snprintf(id, sizeof id, "%.*s", (int)(len < sizeof id ? len : sizeof id - 1), list);
        for (char *c = id; *c; c++) /* a number, or a GPU UUID / MIG name: nothing else is shown */
            if (!(isalnum((unsigned char)*c) || *c == '-' || *c == ':' || *c == '/'))
                return;
        if (id[0])
            snprintf(e->device, sizeof e->device, "%s %.40s", kind, id);
        return;
    }
}

/* Each record's history: its reserved bytes at the last TREND refreshes and the highest peak shown; histories of
 * records gone are dropped. */
static void remember(seen *s)
{
    s->frame++;
    for (size_t i = 0; i < s->n; i++) {
        entry *e = &s->recs[i];
        size_t h = 0;
        while (h < s->nhist && strcmp(s->hist[h].name, e->name))
            h++;
        if (h == s->nhist) {
            if (hbm__grow((void **)&s->hist, &s->caphist, s->nhist + 1, sizeof *s->hist)) {
                e->hist = SIZE_MAX;
                continue;
            }
            memset(&s->hist[h], 0, sizeof s->hist[h]);
            snprintf(s->hist[h].name, sizeof s->hist[h].name, "%s", e->name);
            s->nhist++;
        }
        history *hs = &s->hist[h];
        if (hs->n == TREND)
            memmove(hs->reserved, hs->reserved + 1, (TREND - 1) * sizeof hs->reserved[0]);
        else
            hs->n++;
        hs->reserved[hs->n - 1] = e->r.reserved_bytes;
        hs->frame = s->frame;
        e->hist = h;
    }
    size_t kept = 0;
    for (size_t h = 0; h < s->nhist; h++)
        if (s->hist[h].frame == s->frame)
            s->hist[kept++] = s->hist[h];
    s->nhist = kept;
    for (size_t i = 0; i < s->n; i++) /* the indexes after the compaction */
        for (size_t h = 0; h < s->nhist && s->recs[i].hist != SIZE_MAX; h++)
            if (!strcmp(s->hist[h].name, s->recs[i].name))
                s->recs[i].hist = h;
}

static const history *history_of(const seen *s, const entry *e)
{
    return e->hist < s->nhist ? &s->hist[e->hist] : NULL;
}

/* Reserved over the last refreshes, a bar each, against the highest of them. */
static void trend_text(const history *h, char *buf, size_t len)
{
    static const char *const bars[8] = {"\u2581", "\u2582", "\u2583", "\u2584", "\u2585", "\u2586", "\u2587", "\u2588"};
    buf[0] = 0;
    if (!h)
        return;
    int64_t top = 0;
    for (int k = 0; k < h->n; k++)
        if (h->reserved[k] > top)
            top = h->reserved[k];
    size_t used = 0;
    for (int k = 0; k < h->n && used + 4 < len; k++) {
        int level = top > 0 && h->reserved[k] > 0 ? (int)(7.0 * (double)h->reserved[k] / (double)top + 0.5) : 0;
        used += (size_t)snprintf(buf + used, len - used, "%s", bars[level < 0 ? 0 : level > 7 ? 7 : level]);
    }
}

static int sort_key;
static int64_t sort_figure(const entry *e)
{
    switch (sort_key) {
    case SORT_RESERVED: return e->r.reserved_bytes;
    case SORT_ALLOCATED: return e->r.allocated_bytes;
    case SORT_UNALLOC: return unallocated(&e->r);
    default: return 0;
    }
}
/* The table's order: the largest first for a figure, then top's own order (rank, PID, device, name). */
static int cmp_shown(const void *x, const void *y)
{
    const entry *a = *(const entry *const *)x, *b = *(const entry *const *)y;
    if (sort_key == SORT_PID && a->r.pid != b->r.pid)
        return a->r.pid < b->r.pid ? -1 : 1;
    int64_t fa = sort_figure(a), fb = sort_figure(b);
    if (fa != fb)
        return fa > fb ? -1 : 1;
    return cmp_rec(a, b);
}

/* The table's columns; on a terminal narrower than all of them, those with the highest `drop` go first, so that a
 * row never wraps: at 80 columns, rank, PID, device, allocated, reserved, its share of the capacity, the share
 * unallocated, the largest free block and OOMs stay. */
enum {
    C_RANK,
    C_PID,
    C_DEV,
    C_ALLOC,
    C_RES,
    C_ASLEEP,
    C_CAP,
    C_USE,
    C_OUTSIDE,
    C_UNALLOC,
    C_UNPCT,
    C_FRAG,
    C_LARGEST,
    C_PEAK,
    C_JOBPEAK,
    C_TREND,
    C_OOMS,
    C_RETRIES,
    C_DEVMALLOC,
    C_EXP,
    C_COMMAND,
    NCOLS
};
static const struct {
    const char *head;
    int width, left, drop;
} cols[NCOLS] = {
    [C_RANK] = {"RANK", 5, 1, 0},        [C_PID] = {"PID", 8, 0, 0},
    [C_DEV] = {"DEV", 4, 0, 0},          [C_ALLOC] = {"ALLOCATED", 11, 0, 0},
    [C_RES] = {"RESERVED", 11, 0, 0},    [C_ASLEEP] = {"ASLEEP", 11, 0, 1}, /* shown while a pool sleeps */
    [C_CAP] = {"CAPACITY", 10, 0, 8},    [C_USE] = {"RES/CAP", 7, 0, 0},
    [C_OUTSIDE] = {"OUTSIDE", 11, 0, 6}, /* device used - reserved: not hbmalloc's (dropped with UNALLOC) */
    [C_UNALLOC] = {"UNALLOC", 11, 0, 6}, [C_UNPCT] = {"UNALLOC%", 8, 0, 0},
    [C_FRAG] = {"FRAG%", 6, 0, 3},       [C_LARGEST] = {"LARGEST FREE", 12, 0, 0},
    [C_PEAK] = {"PEAK", 11, 0, 4},       [C_JOBPEAK] = {"JOB PEAK", 11, 0, 7},
    [C_TREND] = {"TREND", TREND, 1, 2},  [C_OOMS] = {"OOMS", 5, 0, 0},
    [C_RETRIES] = {"RETRIES", 7, 0, 5},  [C_DEVMALLOC] = {"DEV MALLOC", 10, 0, 9},
    [C_EXP] = {"EXP", 3, 1, 10},         [C_COMMAND] = {"COMMAND", 7, 1, 11},
};
#define DROP_MAX 11

/* ---- the figures of a record, in one table: the table's cells, --json, --csv and --textfile all read it ---- */

/* Where a figure comes from. */
typedef enum {
    K_I64,         /* an int64_t field of the record (off) */
    K_U64,         /* a uint64_t field */
    K_BOOL,        /* an int64_t field that is 0 or 1 */
    K_STR,         /* a text field */
    K_UNALLOC,     /* reserved - allocated */
    K_UNSHARE,     /* its share of reserved */
    K_FREE_CACHED, /* reserved - active */
    K_FRAG,        /* fragmentation: negative when nothing is cached free */
    K_USE,         /* reserved's share of the device's capacity */
    K_TREND,       /* the last refreshes (the table only) */
    K_DEVICE_AS    /* the physical device, as the process's environment numbers it (entry.device) */
} fkind;

/* How the table writes it. */
typedef enum { T_INT, T_INT_DASH, T_SIZE, T_SIZE_DASH, T_PERCENT, T_PERCENT_DASH, T_YESNO, T_STR, T_TREND } tfmt;

typedef struct field {
    const char *name; /* the key in --json and the column in --csv; NULL: neither */
    fkind kind;
    size_t off;
    int json; /* in --json */
    int csv;  /* its place among --csv's columns (after "time"), 1-based; 0: not there */
    int col;  /* its column of the table (C_*), or -1 */
    tfmt fmt;
    int prom; /* its place among --textfile's metrics, 1-based; 0: not there */
    const char *metric, *type, *help;
} field;

#define F(n, k, field) n, k, offsetof(hbm_record, field)
#define NOPROM 0, NULL, NULL, NULL
static const field fields[] = {
    {F("pid", K_I64, pid), 1, 1, C_PID, T_INT, NOPROM},
    {F("start_time", K_U64, start_time), 1, 0, -1, T_INT, NOPROM},
    {F("device", K_I64, device), 1, 3, C_DEV, T_INT, NOPROM},
    {F("rank", K_I64, rank), 1, 2, C_RANK, T_INT_DASH, NOPROM},
    {F("local_rank", K_I64, local_rank), 1, 0, -1, T_INT, NOPROM},
    {F("world_size", K_I64, world_size), 1, 0, -1, T_INT, NOPROM},
    {F("updated_ns", K_U64, updated_ns), 1, 0, -1, T_INT, 16,
     /* in seconds there */ "hbmalloc_last_update_timestamp_seconds", "gauge",
     "When the process last updated its record."},
    {F("allocated_bytes", K_I64, allocated_bytes), 1, 4, C_ALLOC, T_SIZE, 1, "hbmalloc_allocated_bytes", "gauge",
     "Bytes in allocated blocks (allocated_bytes.all.current)."},
    {F("reserved_bytes", K_I64, reserved_bytes), 1, 5, C_RES, T_SIZE, 2, "hbmalloc_reserved_bytes", "gauge",
     "Bytes held from the device (reserved_bytes.all.current)."},
    {"reserved_unallocated_bytes", K_UNALLOC, 0, 1, 6, C_UNALLOC, T_SIZE, 15, "hbmalloc_reserved_unallocated_bytes",
     "gauge", "Reserved bytes no allocation uses (cached or fragmented)."},
    {"unallocated_share", K_UNSHARE, 0, 1, 7, C_UNPCT, T_PERCENT, NOPROM},
    {"free_cached_bytes", K_FREE_CACHED, 0, 1, 0, -1, T_SIZE, NOPROM},
    {"fragmentation", K_FRAG, 0, 1, 8, C_FRAG, T_PERCENT_DASH, NOPROM},
    {F("active_bytes", K_I64, active_bytes), 1, 0, -1, T_SIZE, 3, "hbmalloc_active_bytes", "gauge",
     "Bytes in active blocks (active_bytes.all.current)."},
    {F("requested_bytes", K_I64, requested_bytes), 1, 0, -1, T_SIZE, NOPROM},
    {F("inactive_split_bytes", K_I64, inactive_split_bytes), 1, 0, -1, T_SIZE, NOPROM},
    {F("peak_allocated_bytes", K_I64, peak_allocated_bytes), 1, 0, -1, T_SIZE, NOPROM},
    {F("peak_reserved_bytes", K_I64, peak_reserved_bytes), 1, 10, C_PEAK, T_SIZE, 4, "hbmalloc_peak_reserved_bytes",
     "gauge", "Peak of reserved_bytes since the last reset."},
    {F("largest_free_bytes", K_I64, largest_free_bytes), 1, 9, C_LARGEST, T_SIZE, 6,
     "hbmalloc_largest_free_block_bytes", "gauge", "The largest cached free block."},
    {F("allocation", K_I64, allocation), 1, 0, -1, T_INT, NOPROM},
    {F("segment", K_I64, segment), 1, 0, -1, T_INT, 7, "hbmalloc_segments", "gauge", "Segments held from the device."},
    {F("active", K_I64, active), 1, 0, -1, T_INT, NOPROM},
    {F("inactive_split", K_I64, inactive_split), 1, 0, -1, T_INT, 8, "hbmalloc_inactive_split_blocks", "gauge",
     "Free blocks of split segments (fragments)."},
    {F("num_ooms", K_I64, num_ooms), 1, 11, C_OOMS, T_INT, 9, "hbmalloc_ooms_total", "counter",
     "Out-of-memory errors."},
    {F("num_alloc_retries", K_I64, num_alloc_retries), 1, 12, C_RETRIES, T_INT, 10, "hbmalloc_alloc_retries_total",
     "counter", "Allocations retried after freeing the cache."},
    {F("num_device_alloc", K_I64, num_device_alloc), 1, 13, C_DEVMALLOC, T_INT, 11, "hbmalloc_device_mallocs_total",
     "counter", "Device allocation calls (and page maps)."},
    {F("num_device_free", K_I64, num_device_free), 1, 14, -1, T_INT, 12, "hbmalloc_device_frees_total", "counter",
     "Device free calls (and page unmaps)."},
    {F("expandable_segments", K_BOOL, expandable_segments), 1, 15, C_EXP, T_YESNO, 13, "hbmalloc_expandable_segments",
     "gauge", "1 when expandable segments are in force."},
    {F("device_total", K_I64, device_total), 1, 0, C_CAP, T_SIZE, 14, "hbmalloc_device_total_bytes", "gauge",
     "The device's capacity."},
    {F("backend", K_STR, backend), 1, 0, -1, T_STR, NOPROM},
    {F("settings", K_STR, settings), 1, 0, -1, T_STR, NOPROM},
    {F("source", K_STR, source), 1, 0, -1, T_STR, NOPROM},
    {F("command", K_STR, command), 1, 16, C_COMMAND, T_STR, NOPROM},
    {F("asleep_bytes", K_I64, asleep_bytes), 1, 0, C_ASLEEP, T_SIZE, 17, "hbmalloc_asleep_bytes", "gauge",
     "Pages of sleeping pools given back; their blocks stay in allocated_bytes."},
    {F("backup_bytes", K_I64, backup_bytes), 1, 0, -1, T_SIZE, NOPROM},
    {F("asleep_tags", K_STR, asleep_tags), 1, 0, -1, T_STR, NOPROM},
    {F("resident_ns", K_I64, resident_ns), 1, 0, -1, T_INT, NOPROM},
    {F("resident_used_bytes", K_I64, resident_used_bytes), 1, 0, -1, T_SIZE, NOPROM},
    {F("outside_bytes", K_I64, outside_bytes), 1, 17, C_OUTSIDE, T_SIZE_DASH, 18, "hbmalloc_outside_bytes", "gauge",
     "Device memory in use outside hbmalloc: the device's used bytes less reserved_bytes (-1: unknown)."},
    {F("device_used_bytes", K_I64, device_used_bytes), 1, 0, -1, T_SIZE_DASH, 19, "hbmalloc_device_used_bytes", "gauge",
     "The device's used bytes as its runtime counts them, every process's (-1: unknown)."},
    {F("outside_process_bytes", K_I64, outside_process_bytes), 1, 0, -1, T_SIZE_DASH, 20,
     "hbmalloc_outside_process_bytes", "gauge",
     "Of the memory outside hbmalloc, this process's (context, communicators' buffers; -1: the runtime does not "
     "tell)."},
    {F("outside_others_bytes", K_I64, outside_others_bytes), 1, 0, -1, T_SIZE_DASH, 21, "hbmalloc_outside_others_bytes",
     "gauge", "Of the memory outside hbmalloc, other processes' (-1: the runtime does not tell)."},
    {F("outside_ns", K_U64, outside_ns), 1, 0, -1, T_INT, NOPROM},
    {F("resident", K_STR, resident), 1, 0, -1, T_STR, NOPROM},
    {F("job_peak_allocated_bytes", K_I64, job_peak_allocated_bytes), 1, 0, -1, T_SIZE, NOPROM},
    {F("job_peak_reserved_bytes", K_I64, job_peak_reserved_bytes), 1, 0, C_JOBPEAK, T_SIZE, 5,
     "hbmalloc_job_peak_reserved_bytes", "gauge",
     "Peak of reserved_bytes since the job started (resets do not lower "
     "it)."},
    {"device_as_numbered", K_DEVICE_AS, 0, 1, 0, -1, T_STR, NOPROM},
    {NULL, K_USE, 0, 0, 0, C_USE, T_PERCENT, NOPROM},
    {NULL, K_TREND, 0, 0, 0, C_TREND, T_TREND, NOPROM},
};
#undef F
#undef NOPROM
#define NFIELDS (sizeof fields / sizeof fields[0])

/* A number the figure is (the kinds that are one). */
static int64_t figure(const field *f, const hbm_record *r)
{
    switch (f->kind) {
    case K_UNALLOC: return unallocated(r);
    case K_FREE_CACHED: return free_cached(r);
    case K_U64: return (int64_t) * (const uint64_t *)((const char *)r + f->off);
    default: return *(const int64_t *)((const char *)r + f->off);
    }
}

static double share(const field *f, const hbm_record *r)
{
    return f->kind == K_UNSHARE ? unallocated_share(r)
           : f->kind == K_USE   ? ratio(r->reserved_bytes, r->device_total)
                                : fragmentation(r);
}

static const char *text_of(const field *f, const hbm_record *r) { return (const char *)r + f->off; }

/* The field at place k of an output (csv or prom), or NULL. */
static const field *field_at(int k, int prom)
{
    for (size_t i = 0; i < NFIELDS; i++)
        if ((prom ? fields[i].prom : fields[i].csv) == k)
            return &fields[i];
    return NULL;
}

/* The columns a text takes on a terminal: one per character (safe_text left no control character). */
static int text_width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

/* A line of the screen: cut at the terminal's width, between characters, so that it never wraps. */
static void put_line(FILE *f, const opts *o, const char *line)
{
    if (o->columns <= 0 || text_width(line) <= o->columns) {
        fprintf(f, "%s\n", line);
        return;
    }
    int w = 0;
    size_t i = 0;
    for (; line[i]; i++) {
        if (((unsigned char)line[i] & 0xc0) != 0x80 && ++w > o->columns)
            break;
    }
    fprintf(f, "%.*s\n", (int)i, line);
}

static void print_row(FILE *f, const opts *o, const bool *on, char cell[NCOLS][48], int command)
{
    char line[1024];
    hbm__sbuf sb;
    hbm__sb_init(&sb, line, sizeof line);
    int last = NCOLS - 1;
    while (last > 0 && !on[last])
        last--;
    for (int c = 0, first = 1; c <= last; c++) {
        if (!on[c])
            continue;
        if (!first)
            hbm__sb_printf(&sb, " ");
        first = 0;
        int width = c == C_COMMAND ? command : cols[c].width;
        int pad = width - text_width(cell[c]);
        if (cols[c].left && c == last)
            hbm__sb_printf(&sb, "%s", cell[c]); /* no padding at the end of a line */
        else if (cols[c].left)
            hbm__sb_printf(&sb, "%s%*s", cell[c], pad > 0 ? pad : 0, "");
        else
            hbm__sb_printf(&sb, "%*s%s", pad > 0 ? pad : 0, "", cell[c]);
    }
    while (sb.len && line[sb.len - 1] == ' ') /* empty cells at the end of a total */
        line[--sb.len] = 0;
    put_line(f, o, line);
}

static void percent_text(double share, char *buf, size_t len) { snprintf(buf, len, "%.1f%%", 100.0 * share); }

static void row_cells(const seen *s, const entry *e, char cell[NCOLS][48])
{
    const hbm_record *r = &e->r;
    for (size_t i = 0; i < NFIELDS; i++) {
        const field *f = &fields[i];
        char *c = f->col >= 0 ? cell[f->col] : NULL;
        if (!c)
            continue;
        switch (f->fmt) {
        case T_INT_DASH:
            if (figure(f, r) < 0) {
                snprintf(c, 48, "-");
                break;
            }
            /* fall through */
        case T_INT: snprintf(c, 48, "%lld", (long long)figure(f, r)); break;
        case T_SIZE: size_text(figure(f, r), c, 48); break;
        case T_SIZE_DASH: /* -1: unknown */
            if (figure(f, r) < 0)
                snprintf(c, 48, "-");
            else
                size_text(figure(f, r), c, 48);
            break;
        case T_PERCENT_DASH:
            if (share(f, r) < 0) {
                snprintf(c, 48, "-");
                break;
            }
            /* fall through */
        case T_PERCENT: percent_text(share(f, r), c, 48); break;
        case T_YESNO: snprintf(c, 48, "%s", figure(f, r) ? "yes" : "no"); break;
        case T_STR: snprintf(c, 48, "%s", text_of(f, r)); break;
        case T_TREND: trend_text(history_of(s, e), c, 48); break;
        }
    }
}

/* One total per device that more than one allocator uses: the figures that add up (not the largest free block,
 * the peaks or fragmentation, which do not). The capacity is the device's, once. */
static void total_cells(const seen *s, const char *device, char cell[NCOLS][48])
{
    int64_t alloc = 0, res = 0, asleep = 0, cap = 0, ooms = 0, retries = 0, mallocs = 0, used = -1, pid = -1;
    bool own_devices = false; /* simulated devices of several processes: each is its process's own, none is shared */
    for (size_t i = 0; i < s->n; i++) {
        const hbm_record *r = &s->recs[i].r;
        if (strcmp(s->recs[i].device, device))
            continue;
        alloc = sat_add(alloc, r->allocated_bytes);
        res = sat_add(res, r->reserved_bytes);
        asleep = sat_add(asleep, asleep_held(r));
        ooms = sat_add(ooms, r->num_ooms);
        retries = sat_add(retries, r->num_alloc_retries);
        mallocs = sat_add(mallocs, r->num_device_alloc);
        if (r->device_total > cap)
            cap = r->device_total;
        if (r->device_used_bytes > used) /* the device's, seen by each: the latest count is the largest mostly */
            used = r->device_used_bytes;
        own_devices |= !strncmp(r->backend, "sim", 3) && pid >= 0 && r->pid != pid;
        pid = r->pid;
    }
    for (int c = 0; c < NCOLS; c++)
        cell[c][0] = 0;
    snprintf(cell[C_RANK], 48, "total");
    snprintf(cell[C_DEV], 48, "%s", strchr(device, ' ') + 1);
    size_text(alloc, cell[C_ALLOC], 48);
    size_text(res, cell[C_RES], 48);
    size_text(asleep, cell[C_ASLEEP], 48);
    size_text(cap, cell[C_CAP], 48);
    percent_text(ratio(res, cap), cell[C_USE], 48);
    int64_t held = res > 0 ? res : 0; /* a negative reserved (a record's nonsense) is 0, as the rows show it */
    if (used < 0 || own_devices) /* outside every allocator of the device: its used bytes less all their reserved */
        snprintf(cell[C_OUTSIDE], 48, "-");
    else
        size_text(used > held ? used - held : 0, cell[C_OUTSIDE], 48);
    int64_t unalloc = sat_sub(res, sat_sub(alloc, asleep)); /* reserved less the blocks in memory */
    size_text(unalloc, cell[C_UNALLOC], 48);
    percent_text(ratio(unalloc, res), cell[C_UNPCT], 48);
    snprintf(cell[C_OOMS], 48, "%lld", (long long)ooms);
    snprintf(cell[C_RETRIES], 48, "%lld", (long long)retries);
    snprintf(cell[C_DEVMALLOC], 48, "%lld", (long long)mallocs);
}

static void print_table(FILE *f, const opts *o, const seen *s)
{
    char when[32], line[1024];
    now_text(when, sizeof when, 0);
    const char *clock = o->once ? when : when + 11; /* live: the time of day is enough, and the title fits 80 */
    /* The devices that more than one allocator uses, in order of first appearance (top's order). */
    const char *devices[64];
    size_t ndev = 0;
    for (size_t i = 0; i < s->n && ndev < 64; i++) {
        size_t k = 0, users = 0;
        while (k < ndev && strcmp(devices[k], s->recs[i].device))
            k++;
        for (size_t j = 0; j < s->n; j++)
            users += !strcmp(s->recs[j].device, s->recs[i].device);
        if (k == ndev && users > 1)
            devices[ndev++] = s->recs[i].device;
    }
    hbm__sbuf sb;
    hbm__sb_init(&sb, line, sizeof line);
    hbm__sb_printf(&sb, "hbmalloc top  %s  %zu allocator%s", clock, s->n, s->n == 1 ? "" : "s");
    if (s->stale)
        hbm__sb_printf(&sb, ", %zu stale", s->stale);
    if (!o->once)
        hbm__sb_printf(&sb, "  every %gs  sort: %s%s", o->interval, sort_names[o->sort],
                       o->keys ? " (s)  quit: q" : "  Ctrl-C quits");
    put_line(f, o, line);
    put_line(f, o, "");
    bool on[NCOLS], asleep = false;
    int width = 0, command = (int)strlen(cols[C_COMMAND].head);
    for (size_t i = 0; i < s->n; i++)
        asleep |= s->recs[i].r.asleep_bytes > 0;
    for (size_t i = 0; i < s->n; i++)
        if (text_width(s->recs[i].r.command) > command)
            command = text_width(s->recs[i].r.command);
    for (int c = 0; c < NCOLS; c++) {
        on[c] = (c != C_TREND || !o->once) && (c != C_ASLEEP || asleep); /* a trend needs refreshes */
        width += on[c] ? (c == C_COMMAND ? command : cols[c].width) + (c > 0) : 0;
    }
    for (int level = DROP_MAX; level > 0 && o->columns && width > o->columns; level--)
        for (int c = 0; c < NCOLS; c++)
            if (cols[c].drop == level && on[c]) {
                on[c] = false;
                width -= (c == C_COMMAND ? command : cols[c].width) + 1;
            }
    char cell[NCOLS][48];
    for (int c = 0; c < NCOLS; c++)
        snprintf(cell[c], sizeof cell[c], "%s", cols[c].head);
    print_row(f, o, on, cell, command);
    /* On a terminal the rows that fit, and how many do not: the title, the notes and the totals stay in view. */
    size_t room = s->n;
    int notes = 2 * (s->stale > 0) + 2 * (s->refused > 0) + !s->n;
    for (size_t i = 0; i < s->n; i++) /* lines under each row whose pools sleep: what sleeps, what still holds */
        notes += (s->recs[i].r.asleep_bytes > 0) * (1 + (s->recs[i].r.resident[0] != 0));
    if (o->lines > 0 && !o->once) {
        int free_lines = o->lines - 3 - (int)ndev - notes - 1;
        room = free_lines > 1 ? (size_t)free_lines : 1;
        if (room < s->n)
            room--; /* the line that says how many more */
    }
    const entry **shown = malloc((s->n ? s->n : 1) * sizeof *shown);
    for (size_t i = 0; shown && i < s->n; i++)
        shown[i] = &s->recs[i];
    if (shown && s->n) {
        sort_key = o->sort;
        qsort(shown, s->n, sizeof *shown, cmp_shown);
    }
    for (size_t i = 0; shown && i < s->n && i < room; i++) {
        row_cells(s, shown[i], cell);
        print_row(f, o, on, cell, command);
        if (shown[i]->r.asleep_bytes > 0) { /* pools that sleep (docs/SLEEP.md): their pages are not in reserved */
            snprintf(line, sizeof line, "      asleep: %s", shown[i]->r.asleep_tags);
            put_line(f, o, line);
            if (shown[i]->r.resident[0]) { /* what the sleep left held: awake pools, graph pools, cache, others */
                snprintf(line, sizeof line, "      held at the last sleep or wake: %s", shown[i]->r.resident);
                put_line(f, o, line);
            }
        }
    }
    free(shown);
    if (room < s->n) {
        snprintf(line, sizeof line, "... %zu more (a taller terminal, s to sort, or --once for all)", s->n - room);
        put_line(f, o, line);
    }
    for (size_t k = 0; k < ndev; k++) {
        total_cells(s, devices[k], cell);
        print_row(f, o, on, cell, command);
    }
    if (!s->n) {
        snprintf(line, sizeof line,
                 "(no process of this user publishes hbmalloc statistics in %s: the PyTorch "
                 "plug-ins do by default, the C API with hbm_publish:True)",
                 o->dir);
        put_line(f, o, line);
    }
    if (s->stale) {
        snprintf(line, sizeof line, "%zu record%s of exited processes ignored%s", s->stale, s->stale == 1 ? "" : "s",
                 o->clean ? (s->removed == s->stale ? " and removed" : ", not all removed")
                          : " (--clean removes them)");
        put_line(f, o, "");
        put_line(f, o, line);
    }
    if (s->refused) {
        snprintf(line, sizeof line, "%zu file%s refused, e.g. %s: %s", s->refused, s->refused == 1 ? "" : "s",
                 s->refused_file, s->refused_why);
        put_line(f, o, "");
        put_line(f, o, line);
    }
}

/* fragmentation as JSON: a number, or null when nothing is cached free. */
static const char *frag_json(const hbm_record *r, char *buf, size_t len)
{
    double f = fragmentation(r);
    if (f < 0)
        return "null";
    snprintf(buf, len, "%.6f", f);
    return buf;
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
        const char *sep = "{";
        fputs(i ? ", " : "", f);
        for (size_t k = 0; k < NFIELDS; k++) {
            const field *x = &fields[k];
            if (!x->json)
                continue;
            fprintf(f, "%s\"%s\": ", sep, x->name);
            sep = ", ";
            char fj[32];
            switch (x->kind) {
            case K_U64: fprintf(f, "%llu", (unsigned long long)figure(x, r)); break;
            case K_BOOL: fputs(figure(x, r) ? "true" : "false", f); break;
            case K_STR: hbm__json_str(f, text_of(x, r)); break;
            case K_DEVICE_AS: hbm__json_str(f, s->recs[i].device); break;
            case K_UNSHARE: fprintf(f, "%.6f", share(x, r)); break;
            case K_FRAG: fputs(frag_json(r, fj, sizeof fj), f); break;
            default: fprintf(f, "%lld", (long long)figure(x, r)); break;
            }
        }
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
    if (ftell(f) == 0) {
        fputs("time", f);
        for (int k = 1; field_at(k, 0); k++)
            fprintf(f, ",%s", field_at(k, 0)->name);
        fputc('\n', f);
    }
    char when[32];
    now_text(when, sizeof when, 1);
    for (size_t i = 0; i < s->n; i++) {
        const hbm_record *r = &s->recs[i].r;
        fputs(when, f);
        for (int k = 1; field_at(k, 0); k++) {
            const field *x = field_at(k, 0);
            fputc(',', f);
            if (x->kind == K_STR)
                csv_field(f, text_of(x, r));
            else if (x->kind == K_FRAG && share(x, r) >= 0)
                fprintf(f, "%.6f", share(x, r));
            else if (x->kind == K_UNSHARE)
                fprintf(f, "%.6f", share(x, r));
            else if (x->kind != K_FRAG)
                fprintf(f, "%lld", (long long)figure(x, r));
        }
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
    fprintf(f, "{rank=\"%lld\",device=\"%lld\",slot=\"%u\"}", (long long)e->r.rank, (long long)e->r.device, e->slot);
}

static int write_textfile(const opts *o, const seen *s)
{
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
    for (int m = 1; field_at(m, 1); m++) {
        const field *x = field_at(m, 1);
        fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", x->metric, x->help, x->metric, x->type);
        for (size_t i = 0; i < s->n; i++) {
            const hbm_record *r = &s->recs[i].r;
            fputs(x->metric, f);
            prom_labels(f, &s->recs[i]);
            if (x->kind == K_U64) /* updated_ns, in seconds */
                fprintf(f, " %.3f\n", (double)r->updated_ns / 1e9);
            else
                fprintf(f, " %lld\n", (long long)figure(x, r));
        }
    }
    fputs("# HELP hbmalloc_info The allocator's process, backend, settings and process name.\n"
          "# TYPE hbmalloc_info gauge\n",
          f);
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
    fprintf(stderr, "\nusage: hbmalloc top [--once] [--json] [--interval SECONDS] [--sort KEY] [--csv FILE] "
                    "[--textfile DIR] [--dir DIR] [--clean]\n");
}

/* The terminal's keys, one at a time and not echoed, while top runs; put back as they were at the end. */
static struct termios saved_tty;
static bool tty_raw;
static void keys_on(void)
{
    struct termios t;
    if (tcgetattr(STDIN_FILENO, &t))
        return;
    if (!tty_raw)
        saved_tty = t;
    t.c_lflag &= ~(tcflag_t)(ICANON | ECHO); /* ISIG stays: Ctrl-C and Ctrl-Z work as anywhere */
    t.c_cc[VMIN] = 0;
    t.c_cc[VTIME] = 0;
    tty_raw = tcsetattr(STDIN_FILENO, TCSANOW, &t) == 0;
}
static void keys_off(void)
{
    if (tty_raw)
        tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
    tty_raw = false;
}

/* Waits `seconds`, or until a key, a resize or a signal. 1: redraw now (s pressed, the size changed). */
static int wait_or_key(opts *o, double seconds)
{
    struct timespec end, now;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += (time_t)seconds;
    end.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (end.tv_nsec >= 1000000000L) {
        end.tv_sec++;
        end.tv_nsec -= 1000000000L;
    }
    for (;;) {
        if (stop)
            return 0;
        if (resized) {
            resized = 0;
            if (o->keys)
                keys_on(); /* back from Ctrl-Z: the shell put the terminal back in lines */
            return 1;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        long long ms = (long long)(end.tv_sec - now.tv_sec) * 1000 + (end.tv_nsec - now.tv_nsec) / 1000000;
        if (ms <= 0)
            return 0;
        struct pollfd p = {o->keys ? STDIN_FILENO : -1, POLLIN, 0};
        if (poll(&p, 1, ms > 1000000 ? 1000000 : (int)ms) <= 0)
            continue;                /* timed out (checked above), or a signal */
        if (!(p.revents & POLLIN)) { /* the terminal hung up: no more keys, the refreshes go on */
            o->keys = 0;
            continue;
        }
        char c;
        if (read(STDIN_FILENO, &c, 1) != 1) {
            o->keys = 0; /* the terminal went away: no more keys, the refreshes go on */
            continue;
        }
        if (c == 'q' || c == 'Q') {
            stop = 1;
            return 0;
        }
        if (c == 's' || c == 'S') {
            o->sort = (o->sort + (c == 's' ? 1 : NSORTS - 1)) % NSORTS;
            return 1;
        }
    }
}

int top_main(int argc, char **argv)
{
    opts o = {hbm_record_dir(), NULL, NULL, 1.0, 0, 0, 0, SORT_RANK, 0, 0, 0};
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
        } else if (!strcmp(a, "--sort") && more) {
            const char *k = argv[++i];
            o.sort = -1;
            for (int s = 0; s < NSORTS; s++)
                if (!strcmp(k, sort_names[s]))
                    o.sort = s;
            if (o.sort < 0) {
                usage_error("--sort takes rank, reserved, allocated, unallocated or pid, not '%s'", k);
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
    struct sigaction sa, old_int, old_term, old_winch, old_cont;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sa.sa_handler = on_winch; /* no SA_RESTART: the wait ends at once, and the screen is drawn at the new size */
    sigaction(SIGWINCH, &sa, &old_winch);
    sigaction(SIGCONT, &sa, &old_cont);
    int tty = !o.json && isatty(STDOUT_FILENO);
    if (tty && !o.once && isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp()) {
        o.keys = 1;
        keys_on();
    }
    seen s = {0};
    int rc = 0;
    for (unsigned frame = 0; !stop; frame++) {
        struct winsize ws;
        o.columns = o.lines = 0; /* read at every refresh: the terminal may have been resized */
        if (tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
            o.columns = ws.ws_col;
            o.lines = ws.ws_row;
        }
        if (collect(&o, &s)) {
            fprintf(stderr, "hbmalloc top: cannot read %s: %s (HBMALLOC_TOP_DIR or --dir names the folder)\n", o.dir,
                    strerror(errno));
            rc = 2;
            break;
        }
        remember(&s);
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
        for (int redraw = 1; redraw && !stop;) {
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
            redraw = wait_or_key(&o, o.interval);
            if (redraw && tty && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) {
                o.columns = ws.ws_col;
                o.lines = ws.ws_row;
            }
            redraw &= !o.json && tty; /* a key or a resize changes only what a terminal shows */
        }
        if (o.once)
            break;
    }
    keys_off();
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGWINCH, &old_winch, NULL);
    sigaction(SIGCONT, &old_cont, NULL);
    free(s.recs);
    free(s.hist);
    return rc;
}
