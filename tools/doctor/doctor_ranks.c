/*
 * doctor_ranks.c: a job's logs from several ranks, for `hbmalloc doctor --log ...` (issue #40 item 3). It owns the
 * rank table: which rank each line comes from, when it was written, and the failures doctor_log.c recognised on it;
 * after the logs it orders the ranks' first failures in time, names the first and its cause, and says whether the
 * other ranks' collective errors are its consequence or that this is unconfirmed. It reads lines and findings; it
 * never opens a file (doctor_inputs.c does) and never recognises a failure itself (doctor_log.c does).
 *
 * The shapes it reads, as the launchers and libraries write them:
 * - "[rank3]: " before every line of an exception: torch's distributed excepthook, installed by init_process_group
 *   (pytorch/pytorch torch/distributed/distributed_c10d.py, _distributed_excepthook: f"{excepthook_prefix}: {s}" with
 *   excepthook_prefix = f"[rank{get_rank()}]"; PR #118190, January 2024, line 1361 at 0214711f as issue #126379
 *   links it); "[rank3]:" before torch's C++ log lines (c10/util/Logging.cpp, MessageLogger: stream_ << "[rank" <<
 *   GLOBAL_RANK << "]:") and TORCH_LOGS lines.
 * - "[default3]:" before every line torchrun tees (--tee 3): "[{role}{local_rank}]:" with torchrun's role
 *   "default", the LOCAL rank (torch/distributed/elastic/multiprocessing/tail_log.py: header
 *   f"[{self._name}{local_rank}]:", written as dst.write(f"{header}{line}"), line 36 at commit 059a238); "[3]:" with
 *   log_line_prefix_template "[${rank}]:" (the global rank; local_elastic_agent.py's docstring). Prefixes stack:
 *   "[default0]:[rank0]: Traceback ...".
 * - Files: torchrun --log-dir writes <log_dir>/<run_id>_<8 random>/attempt_<n>/<local_rank>/stdout.log, stderr.log
 *   and error.json (torch/distributed/elastic/multiprocessing/api.py at 0068f5a3, DefaultLogsSpecs.reify and
 *   _make_log_dir: the folder is the LOCAL rank); MindSpore's msrun writes worker_<rank>.log beside scheduler.log in
 *   its --log_dir, and MindFormers log/rank_<i>/info.log, error.log (mindspore.cn MindFormers docs,
 *   feature/logging); rank_3.log and the like are read the same way.
 * - Times: Python logging's asctime "2025-12-18 20:27:22,783" (DeepSpeed's "[2025-12-18 20:27:22,783] [INFO]");
 *   torch's C++ "[E1218 20:27:21.426415540 ProcessGroupNCCL.cpp:629]" (MessageLogger: the month times 100 plus the
 *   day, unpadded, no year; its fraction is CLOCK_MONOTONIC's nanoseconds, not the wall clock's, so it is read to
 *   the second), glog's "E1218 20:27:21.426415"; HCCL's plog "[ERROR] HCCL(2111667,all_reduce_test):2025-10-24-
 *   11:18:29.597.044" (hicann/hccl/docs/zh/user_guide/fault_diagnosis/task_exec_stage.md:118 at 09300b70); NCCL's
 *   WARN lines "[2025-01-05 10:00:00] host:pid:tid [dev] ..." from NCCL 2.26.2 (NVIDIA/nccl/src/debug.cc:85 and :99
 *   at nccl4py-v0.3.1: NCCL_DEBUG_TIMESTAMP_LEVELS defaults to WARN, NCCL_DEBUG_TIMESTAMP_FORMAT to "[%F %T] "); its
 *   INFO lines carry none ("%s:%d:%d [%d] NCCL INFO", debug.cc:330 and :354), so their order is their position in
 *   the file only.
 * - Hosts: NCCL's "host:pid:tid" (debug.cc:330). Processes: that pid, HCCL's "HCCL(pid,", torch_npu's "(PID:159,",
 *   "pid=N". The rank hint "[Rank 3] ": DeepSpeed's log_dist (deepspeed/utils/logging.py: "[Rank {}] {}") and torch's
 *   watchdog messages.
 */
#define _GNU_SOURCE /* strcasestr */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"
#include "doctor.h"
#include "doctor_ranks.h"
#include "wrap.h"

enum { K_OOM, K_COLL, K_OTHER };

#define RANK_EVENTS 4            /* failures kept per rank: its first ones (the rest are counted) */
#define MAX_EVENTS 8192          /* failures kept in all: about 6 MB */
#define MAX_KEYS 65536           /* ranks tracked (global, local per file, unknown per file) */
#define MAX_GLOBAL (1 << 20)     /* the largest global rank read */
#define MAX_LOCAL 1024           /* the largest local rank read */
#define MAX_FILES 65536          /* files tracked */
#define SKEW_S 1.0               /* two hosts' clocks are trusted to agree within this */
#define SLACK_S 60.0             /* added to the collective timeout: flushing, the watchdog's poll, clocks */
#define DEFAULT_TIMEOUT_S 1836.0 /* HCCL_EXEC_TIMEOUT's default, above PyTorch's 10 minutes for NCCL */

typedef struct when {
    int year;                        /* -1: the line gave none (torch's C++ lines): taken to be the others' year */
    double soy;                      /* seconds since the year began, local time as written; < 0: no time */
    double res;                      /* the resolution: the time is in [soy, soy + res) */
    signed char after_feb, leap_day; /* past February; a leap day counted in soy (by the year known then) */
} when;

typedef struct ev {
    int kind, key, file, own; /* own: the time is the line's own, not the last one before it */
    size_t fi;                /* its finding */
    long line;
    when lo, hi;             /* when it happened: at or after lo, before hi (hi.soy < 0: unknown) */
    double rbu;              /* an out-of-memory message's reserved-but-unallocated bytes, or -1 */
    char id[24], title[160]; /* its finding's, kept: the findings are reordered before --json prints */
    char stamp[32];
    char text[404]; /* the line, up to a word (cut: " ..." follows in the evidence) */
    int cut;
} ev;

typedef struct rkey {
    int rank, local, file; /* rank -1: unknown; local: a local rank, of file's node */
    char host[64];
    long pid, pid2; /* pid2: another process seen with this rank (mixed jobs or a restart) */
    int pid_file, pid2_file;
    int files[2], nfiles; /* the first two files it appears in */
    long lines;
    when last; /* its last time */
    int ev[RANK_EVENTS], nev;
    long more;
    int pending[RANK_EVENTS], npending; /* events waiting for a later time to bound them */
    int merged; /* a local rank found to be a global one (both prefixes on a line): its lines went there */
} rkey;

typedef struct rfile {
    char *path;
    int rank, local; /* from the name; -1 none */
    long lines, timed, world;
    char job[64];
    int *local_idx;  /* local rank -> key + 1 */
    int unknown_idx; /* key + 1 of its lines with no rank */
} rfile;

struct doctor_ranks {
    rfile *files;
    size_t nfiles, capf;
    rkey *keys;
    size_t nkeys, capk;
    int *gidx; /* global rank -> key + 1 */
    size_t capg;
    ev *evs;
    size_t nevs, cape;
    long dropped, untracked, files_dropped;
    double timeout_s; /* the largest collective timeout a line states */
    int year_hint;
    int cur_file, cur_key, cur_own;
    long cur_line;
    const char *last_name; /* the stream the last line came from: a new name, or a line number that does not grow, */
    long last_lineno;      /* starts a new file (once: a file past MAX_FILES is not retried on each line) */
    const char *cur_text;
    when cur_when;
    double cur_rbu;
    char cur_stamp[32];
    /* The report, for --json. */
    int reported, first_ev, confirmed; /* first_ev: -1 none */
    char reason[600], order[16];
    double window_s;
};

static void ranks_free(struct doctor_ranks *r)
{
    for (size_t i = 0; i < r->nfiles; i++) {
        free(r->files[i].path);
        free(r->files[i].local_idx);
    }
    free(r->files);
    free(r->keys);
    free(r->gidx);
    free(r->evs);
    free(r);
}

static struct doctor_ranks *state(doctor *d)
{
    if (!d->ranks) {
        d->ranks = calloc(1, sizeof *d->ranks);
        if (!d->ranks)
            return NULL; /* out of host memory: the logs are read without ranks */
        d->ranks->cur_file = d->ranks->cur_key = d->ranks->first_ev = -1;
        d->ranks_free = ranks_free;
    }
    return d->ranks;
}

/* ---- times ---- */

static long days_before_year(long y) /* days from 1970-01-01 to y-01-01 (proleptic Gregorian) */
{
    y--;
    return 365 * (y - 1969) + (y / 4 - 1969 / 4) - (y / 100 - 1969 / 100) + (y / 400 - 1969 / 400);
}

static int leap(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

/* a - b in seconds; a year a line did not give is the other's. */
static double when_diff(when a, when b)
{
    double days = a.year >= 0 && b.year >= 0 ? (double)(days_before_year(a.year) - days_before_year(b.year)) : 0;
    return days * 86400 + a.soy - b.soy;
}

static int num(const char *p, int n) /* n digits at p, or -1 */
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)p[i]))
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

/* A time for people: "2025-12-18 20:07:20.103", or "12-18 20:17:21" when the line gave no year. */
static void when_text(when w, int hint, char *buf, size_t len)
{
    static const int before[] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365};
    int y = w.year >= 0 ? w.year : hint;
    long day = (long)(w.soy / 86400), sod = (long)(w.soy - day * 86400.0);
    int mon = 1;
    while (mon < 12 && day >= before[mon] + (mon >= 2 && y > 0 && leap(y)))
        mon++;
    int dom = (int)(day - before[mon - 1] - (mon > 2 && y > 0 && leap(y))) + 1;
    int ms = (int)((w.soy - floor(w.soy)) * 1000 + 0.5), h = (int)(sod / 3600), mi = (int)(sod / 60 % 60),
        sec = (int)(sod % 60);
    hbm__sbuf sb;
    hbm__sb_init(&sb, buf, len);
    if (w.year >= 0)
        hbm__sb_printf(&sb, "%04d-", w.year);
    hbm__sb_printf(&sb, "%02d-%02d %02d:%02d:%02d", mon, dom, h, mi, sec);
    if (w.res < 1)
        hbm__sb_printf(&sb, ".%03d", ms > 999 ? 999 : ms);
}

static int set_when(when *w, int year, int mon, int day, int h, int mi, int s, double frac, double res, int hint)
{
    static const int before[] = {0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334};
    if (mon < 1 || mon > 12 || day < 1 || day > 31 || h > 23 || mi > 59 || s > 60)
        return 0;
    int ly = year >= 0 ? year : hint;
    w->year = year;
    w->after_feb = mon > 2;
    w->leap_day = mon > 2 && ly > 0 && leap(ly);
    w->soy =
        (double)(before[mon - 1] + (mon > 2 && ly > 0 && leap(ly)) + day - 1) * 86400 + h * 3600 + mi * 60 + s + frac;
    w->res = res;
    return 1;
}

/* The fraction after a time at p ('.' or ',' then digits; HCCL's ".mmm.uuu" as one): its value and resolution. */
static size_t fraction(const char *p, double *frac, double *res, int *digits)
{
    size_t n = 0;
    *frac = 0, *res = 1, *digits = 0;
    if (*p != '.' && *p != ',')
        return 0;
    n = 1;
    double scale = 0.1;
    for (int group = 0; group < 2; group++) {
        while (isdigit((unsigned char)p[n]) && *digits < 9) {
            *frac += (p[n] - '0') * scale;
            *res = scale;
            scale /= 10, (*digits)++, n++;
        }
        if (group == 0 && *digits == 3 && p[n] == '.' && num(p + n + 1, 3) >= 0)
            n++; /* HCCL's microseconds after its milliseconds */
        else
            break;
    }
    return *digits ? n : 0;
}

/* The line's own time, if it has one near its start: 0 or 1. txt: the time as written. */
static int line_time(const char *s, size_t n, int hint, when *w, char *txt, size_t txtlen)
{
    size_t lim = n < 120 ? n : 120;
    /* torch's C++ "[E1218 20:27:21.426415540 file:line]" ("[W530 ..." on May 30: the month times 100 plus the day,
     * unpadded) or glog's "E1218 20:27:21.426415 ..." at the start */
    size_t b = s[0] == '[', m = lim > b + 4 && isdigit((unsigned char)s[b + 4]) ? 4 : 3;
    const char *t = s + b + 1 + m;
    if (lim > b + 10 + m && s[b] && strchr("IWEF", s[b]) && num(s + b + 1, (int)m) >= 0 && t[0] == ' ' &&
        num(t + 1, 2) >= 0 && t[3] == ':' && num(t + 4, 2) >= 0 && t[6] == ':' && num(t + 7, 2) >= 0) {
        double frac, res;
        int digits;
        size_t fl = fraction(t + 9, &frac, &res, &digits);
        if (b && digits == 9) /* c10's MessageLogger: CLOCK_MONOTONIC's nanoseconds, not the wall clock's */
            frac = 0, res = 1;
        int md = num(s + b + 1, (int)m);
        if (set_when(w, -1, md / 100, md % 100, num(t + 1, 2), num(t + 4, 2), num(t + 7, 2), frac, res, hint)) {
            snprintf(txt, txtlen, "%.*s", (int)(m + 9 + fl), s + b + 1);
            return 1;
        }
    }
    /* YYYY-MM-DD[ T-]HH:MM:SS[.,frac] anywhere in the first 120 bytes (Python logging, NCCL, HCCL's plog) */
    for (size_t i = 0; i + 19 <= lim; i++) {
        if (!isdigit((unsigned char)s[i]) || (i && isdigit((unsigned char)s[i - 1])))
            continue;
        const char *p = s + i;
        int y = num(p, 4);
        if (y < 1970 || p[4] != '-' || num(p + 5, 2) < 0 || p[7] != '-' || num(p + 8, 2) < 0 || !strchr(" T-", p[10]) ||
            num(p + 11, 2) < 0 || p[13] != ':' || num(p + 14, 2) < 0 || p[16] != ':' || num(p + 17, 2) < 0)
            continue;
        double frac, res;
        int digits;
        size_t fl = fraction(p + 19, &frac, &res, &digits);
        if (set_when(w, y, num(p + 5, 2), num(p + 8, 2), num(p + 11, 2), num(p + 14, 2), num(p + 17, 2), frac, res,
                     y)) {
            snprintf(txt, txtlen, "%.*s", (int)(19 + fl), p);
            return 1;
        }
    }
    return 0;
}

/* ---- ranks ---- */

/* Launchers' rank prefixes at the line's start (module comment): their length; *g a global rank, *l a local one. */
static size_t prefixes(const char *s, int *g, int *l)
{
    size_t at = 0;
    for (int round = 0; round < 3 && s[at] == '['; round++) {
        const char *p = s + at;
        size_t i = 1;
        while (isalpha((unsigned char)p[i]) || p[i] == '_')
            i++;
        size_t role = i - 1, d0 = i;
        while (isdigit((unsigned char)p[i]) && i - d0 < 7)
            i++;
        if (i == d0 || p[i] != ']' || p[i + 1] != ':')
            break;
        long v = strtol(p + d0, NULL, 10);
        if (!role || (role == 4 && !strncmp(p + 1, "rank", 4)))
            *g = (int)v;
        else
            *l = (int)v;
        at += i + 2;
        if (s[at] == ' ')
            at++;
    }
    return at;
}

/* "rank3", "rank_3", "worker-3" as a word in s[0..n): the number, or -1. */
static int rank_word(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i && isalnum((unsigned char)s[i - 1]))
            continue;
        size_t w = !strncasecmp(s + i, "rank", 4) ? 4 : !strncasecmp(s + i, "worker", 6) ? 6 : 0;
        if (!w || i + w >= n)
            continue;
        size_t j = i + w;
        if (s[j] == '_' || s[j] == '-' || s[j] == '.')
            j++;
        size_t d0 = j;
        while (j < n && isdigit((unsigned char)s[j]) && j - d0 < 7)
            j++;
        if (j > d0 && (j == n || !isalnum((unsigned char)s[j])))
            return atoi(s + d0);
    }
    return -1;
}

/* A file's rank from its path (module comment): its name, a folder rank_<i>, or torchrun's --log-dir layout (a
 * local rank; its run id is the job). */
static void path_rank(const char *path, rfile *f)
{
    const char *comp[5] = {0};
    size_t len[5] = {0};
    int nc = 0;
    const char *end = path + strlen(path);
    while (end > path && nc < 5) { /* the last five components, last first */
        const char *s = end;
        while (s > path && s[-1] != '/')
            s--;
        if (end > s) {
            comp[nc] = s, len[nc] = (size_t)(end - s);
            nc++;
        }
        end = s > path ? s - 1 : s;
    }
    for (int i = 0; i < nc && i < 2; i++) {
        int r = rank_word(comp[i], len[i]);
        if (r >= 0) {
            f->rank = r, f->local = 0;
            return;
        }
    }
    if (nc >= 3 && len[1] <= 7 && strspn(comp[1], "0123456789") == len[1] && !strncmp(comp[2], "attempt_", 8)) {
        f->rank = atoi(comp[1]), f->local = 1;
        if (nc >= 4 && len[3] > 9 && comp[3][len[3] - 9] == '_') /* <run_id>_<mkdtemp's 8 characters> */
            snprintf(f->job, sizeof f->job, "torchrun run %.*s", (int)(len[3] - 9 > 40 ? 40 : len[3] - 9), comp[3]);
    }
}

static int new_key(struct doctor_ranks *r, int rank, int local, int file)
{
    if (r->nkeys >= MAX_KEYS || hbm__grow((void **)&r->keys, &r->capk, r->nkeys + 1, sizeof *r->keys)) {
        r->untracked++;
        return -1;
    }
    rkey *k = &r->keys[r->nkeys];
    memset(k, 0, sizeof *k);
    k->rank = rank, k->local = local, k->file = file;
    k->pid = k->pid2 = -1;
    k->last.soy = -1;
    return (int)r->nkeys++;
}

static int key_for(struct doctor_ranks *r, int file, int g, int l)
{
    rfile *f = &r->files[file];
    int *slot;
    if (g >= 0) {
        if (g >= MAX_GLOBAL) {
            r->untracked++;
            return -1;
        }
        if ((size_t)g >= r->capg) {
            size_t old = r->capg;
            if (hbm__grow((void **)&r->gidx, &r->capg, (size_t)g + 1, sizeof *r->gidx)) {
                r->untracked++;
                return -1;
            }
            memset(r->gidx + old, 0, (r->capg - old) * sizeof *r->gidx);
        }
        slot = &r->gidx[g];
    } else if (l >= 0) {
        if (l >= MAX_LOCAL || (!f->local_idx && !(f->local_idx = calloc(MAX_LOCAL, sizeof *f->local_idx)))) {
            r->untracked++;
            return -1;
        }
        slot = &f->local_idx[l];
    } else {
        slot = &f->unknown_idx;
    }
    if (!*slot) {
        int k = new_key(r, g >= 0 ? g : l, g < 0 && l >= 0, file);
        if (k < 0)
            return -1;
        *slot = k + 1;
    }
    rkey *k = &r->keys[*slot - 1];
    if (k->nfiles < 2 && (!k->nfiles || k->files[k->nfiles - 1] != file))
        k->files[k->nfiles++] = file;
    return *slot - 1;
}

static void new_file(struct doctor_ranks *r, const char *name)
{
    r->cur_file = -1;
    if (r->nfiles >= MAX_FILES || hbm__grow((void **)&r->files, &r->capf, r->nfiles + 1, sizeof *r->files)) {
        r->files_dropped++;
        return;
    }
    rfile *f = &r->files[r->nfiles];
    memset(f, 0, sizeof *f);
    f->path = strdup(name);
    if (!f->path) {
        r->files_dropped++;
        return;
    }
    f->rank = -1;
    path_rank(name, f);
    r->cur_file = (int)r->nfiles++;
}

/* The number after word in s (separators " :='\"" between), or -1. */
static long number_after(const char *s, const char *word, int icase)
{
    const char *p = icase ? strcasestr(s, word) : strstr(s, word);
    if (!p)
        return -1;
    p += strlen(word);
    while (*p && strchr(" :='\"", *p))
        p++;
    char *e;
    long v = strtol(p, &e, 10);
    return e > p && v >= 0 ? v : -1;
}

/* The job facts and the process one line states (module comment). */
static void line_facts(struct doctor_ranks *r, rfile *f, rkey *k, const char *s)
{
    long v = number_after(s, "world_size", 1);
    if (v >= 1 && v <= MAX_GLOBAL && !f->world)
        f->world = v;
    const char *j = strstr(s, "SLURM_JOB_ID=");
    const char *jt = "slurm job ";
    if (!j)
        j = strstr(s, "TORCHELASTIC_RUN_ID="), jt = "torchrun run ";
    if (j && !f->job[0]) {
        j = strchr(j, '=') + 1;
        size_t n = strcspn(j, " \t\r\n'\",;");
        if (n)
            snprintf(f->job, sizeof f->job, "%s%.*s", jt, (int)(n > 40 ? 40 : n), j);
    }
    double t = number_after(s, "Timeout(ms)=", 0);
    if (t > 0 && t / 1000 > r->timeout_s)
        r->timeout_s = t / 1000;
    t = number_after(s, "HCCL_EXEC_TIMEOUT", 0);
    if (t > 0 && t > r->timeout_s)
        r->timeout_s = t;
    if (!k)
        return;
    long pid = -1;
    const char *h = strstr(s, " NCCL ");
    if (h) { /* [time] host:pid:tid [dev] ... NCCL ... */
        const char *p = s;
        if (*p == '[' && strchr(p, ']') && strchr(p, ']') - p < 40)
            p = strchr(p, ']') + 1 + (strchr(p, ']')[1] == ' ');
        size_t hn = strcspn(p, ": \t");
        char *e1, *e2;
        if (hn && hn < sizeof k->host && p[hn] == ':') {
            long pv = strtol(p + hn + 1, &e1, 10);
            if (e1 > p + hn + 1 && *e1 == ':' && (strtol(e1 + 1, &e2, 10), e2 > e1 + 1) && e2[0] == ' ' &&
                e2[1] == '[') {
                pid = pv;
                if (!k->host[0])
                    snprintf(k->host, sizeof k->host, "%.*s", (int)hn, p);
            }
        }
    }
    if (pid < 0 && (h = strstr(s, "HCCL(")))
        pid = number_after(h, "HCCL(", 0);
    if (pid < 0 && (h = strstr(s, "(PID:")))
        pid = number_after(h, "(PID:", 0);
    if (pid < 0 && (h = strstr(s, "pid=")) && (h == s || !isalnum((unsigned char)h[-1])))
        pid = number_after(h, "pid=", 0);
    if (pid <= 0)
        return;
    if (k->pid < 0)
        k->pid = pid, k->pid_file = r->cur_file;
    else if (pid != k->pid && k->pid2 < 0)
        k->pid2 = pid, k->pid2_file = r->cur_file;
}

/* "[default3]:[rank3]: ...": this file's local rank l is global rank key k from now on; what its lines had shown as
 * the local rank joins it. */
static void alias(struct doctor_ranks *r, rfile *f, int l, int k)
{
    if (!f->local_idx && !(f->local_idx = calloc(MAX_LOCAL, sizeof *f->local_idx)))
        return;
    int old = f->local_idx[l] - 1;
    if (old == k)
        return;
    f->local_idx[l] = k + 1;
    if (old < 0)
        return;
    rkey *o = &r->keys[old], *g = &r->keys[k];
    o->merged = 1;
    g->lines += o->lines;
    if (o->last.soy >= 0 && (g->last.soy < 0 || when_diff(o->last, g->last) > 0))
        g->last = o->last;
    for (int i = 0; i < o->nev && g->nev < RANK_EVENTS; i++) {
        g->ev[g->nev++] = o->ev[i];
        r->evs[o->ev[i]].key = k;
    }
    for (int i = 0; i < o->npending && g->npending < RANK_EVENTS; i++)
        g->pending[g->npending++] = o->pending[i];
    o->nev = o->npending = 0;
}

size_t doctor_ranks_line(doctor *d, const char *name, long lineno, const char *line)
{
    int g = -1, l = -1;
    size_t skip = prefixes(line, &g, &l);
    struct doctor_ranks *r = state(d);
    if (!r)
        return skip;
    if (name != r->last_name || lineno <= r->last_lineno ||
        (r->cur_file >= 0 && strcmp(r->files[r->cur_file].path, name)))
        new_file(r, name);
    r->last_name = name, r->last_lineno = lineno;
    r->cur_key = -1, r->cur_rbu = -1, r->cur_own = 0, r->cur_text = line, r->cur_line = lineno;
    if (r->cur_file < 0)
        return skip;
    rfile *f = &r->files[r->cur_file];
    const char *body = line + skip;
    if (g < 0 && l < 0) {
        const char *hint = strstr(body, "[Rank ");
        if (f->rank >= 0)
            *(f->local ? &l : &g) = f->rank;
        else if (hint && hint - body < 160 && number_after(hint, "[Rank ", 0) >= 0)
            g = (int)number_after(hint, "[Rank ", 0);
    }
    int k = key_for(r, r->cur_file, g, l);
    if (k >= 0 && g >= 0 && l < 0 && f->local && f->rank >= 0 && f->rank < MAX_LOCAL)
        l = f->rank; /* torchrun's --log-dir file of a local rank whose lines say their global rank */
    if (k >= 0 && g >= 0 && l >= 0 && l < MAX_LOCAL)
        alias(r, f, l, k);
    r->cur_key = k;
    rkey *key = k >= 0 ? &r->keys[k] : NULL;
    f->lines++;
    if (key)
        key->lines++;
    when w;
    if (line_time(body, strcspn(body, "\r\n"), r->year_hint, &w, r->cur_stamp, sizeof r->cur_stamp)) {
        r->cur_own = 1, r->cur_when = w;
        f->timed++;
        if (w.year >= 0)
            r->year_hint = w.year;
        if (key) {
            key->last = w;
            int keep = 0;
            for (int i = 0; i < key->npending; i++) { /* failures without a time of their own: before this one */
                ev *e = &r->evs[key->pending[i]];
                if (e->file != r->cur_file) { /* another file's line says nothing of when this one was written */
                    key->pending[keep++] = key->pending[i];
                    continue;
                }
                e->hi = w;
                e->hi.soy += w.res;
            }
            key->npending = keep;
        }
    }
    line_facts(r, f, key, body);
    return skip;
}

void doctor_ranks_oom_figure(doctor *d, double rbu)
{
    if (d->ranks)
        d->ranks->cur_rbu = rbu;
}

static int kind_of(const char *id)
{
    if (!strncmp(id, "oom-", 4))
        return K_OOM;
    if (!strcmp(id, "hccl-error") || !strcmp(id, "nccl-error"))
        return K_COLL;
    if (!strcmp(id, "acl-error") || !strcmp(id, "cuda-driver-mismatch"))
        return K_OTHER;
    return -1; /* not a failure of the rank (a warning, a setting) */
}

void doctor_ranks_event(doctor *d, size_t fi, const char *title)
{
    struct doctor_ranks *r = d->ranks;
    if (!r || r->cur_key < 0 || fi >= d->n)
        return;
    int kind = kind_of(d->f[fi].id);
    if (kind < 0)
        return;
    rkey *k = &r->keys[r->cur_key];
    if (k->nev == RANK_EVENTS || r->nevs >= MAX_EVENTS ||
        hbm__grow((void **)&r->evs, &r->cape, r->nevs + 1, sizeof *r->evs)) {
        k->more++;
        if (k->nev < RANK_EVENTS)
            r->dropped++;
        return;
    }
    ev *e = &r->evs[r->nevs];
    memset(e, 0, sizeof *e);
    e->kind = kind, e->key = r->cur_key, e->file = r->cur_file, e->fi = fi, e->line = r->cur_line;
    e->rbu = r->cur_rbu;
    e->hi.soy = -1;
    snprintf(e->id, sizeof e->id, "%.23s", d->f[fi].id);
    int tcut;
    size_t tl = doctor_quote_len(title, strlen(title), 150, &tcut);
    snprintf(e->title, sizeof e->title, "%.*s%s", (int)tl, title, tcut ? " ..." : "");
    if (r->cur_own) {
        e->own = 1, e->lo = e->hi = r->cur_when;
        e->hi.soy += r->cur_when.res;
        when_text(e->lo, r->year_hint, e->stamp, sizeof e->stamp);
    } else {
        e->lo = k->last; /* at or after its rank's last time; bounded above by its next */
        if (e->lo.soy >= 0)
            when_text(e->lo, r->year_hint, e->stamp, sizeof e->stamp);
        k->pending[k->npending++] = (int)r->nevs;
    }
    const char *t = r->cur_text;
    while (*t == ' ' || *t == '\t')
        t++;
    size_t keep = doctor_quote_len(t, strcspn(t, "\r\n"), 400, &e->cut);
    snprintf(e->text, sizeof e->text, "%.*s", (int)keep, t);
    k->ev[k->nev++] = (int)r->nevs++;
}

/* ---- the report ---- */

static const char *short_path(const char *p) /* the last two components */
{
    const char *s = strrchr(p, '/');
    if (!s)
        return p;
    const char *t = s;
    while (t > p && t[-1] != '/')
        t--;
    return t > p || *p != '/' ? t : s + 1;
}

static void label(const struct doctor_ranks *r, const rkey *k, char *buf, size_t len)
{
    if (k->rank >= 0 && !k->local)
        snprintf(buf, len, "rank %d", k->rank);
    else if (k->rank >= 0)
        snprintf(buf, len, "local rank %d of %.80s", k->rank, short_path(r->files[k->file].path));
    else
        snprintf(buf, len, "a process of unknown rank in %.80s", short_path(r->files[k->file].path));
}

static void evidence(const struct doctor_ranks *r, const ev *e, finding *f)
{
    doctor_evidence(f, r->files[e->file].path, e->line, e->text);
    if (e->cut) {
        size_t n = strlen(f->evidence);
        snprintf(f->evidence + n, sizeof f->evidence - n, " ...");
    }
}

static const char *kind_name(int k) { return k == K_OOM ? "oom" : k == K_COLL ? "collective" : "other"; }

/* Ranks as "0-2, 4 and 7" (global ranks, runs of three or more as a range; others by their label). */
static void rank_list(const struct doctor_ranks *r, const int *keys, int n, char *buf, size_t len)
{
    hbm__sbuf sb;
    hbm__sb_init(&sb, buf, len);
    int items = 0, total = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            const rkey *k = &r->keys[keys[i]];
            int j = i;
            while (!k->local && k->rank >= 0 && j + 1 < n && !r->keys[keys[j + 1]].local &&
                   r->keys[keys[j + 1]].rank == r->keys[keys[j]].rank + 1)
                j++;
            if (j < i + 2)
                j = i; /* two in a row are two items */
            if (pass == 0) {
                total++;
                i = j;
                continue;
            }
            hbm__sb_printf(&sb, "%s", !items ? "" : items == total - 1 ? " and " : ", ");
            items++;
            if (j > i)
                hbm__sb_printf(&sb, "%d-%d", k->rank, r->keys[keys[j]].rank);
            else if (k->rank >= 0 && !k->local)
                hbm__sb_printf(&sb, "%d", k->rank);
            else {
                char l[200];
                label(r, k, l, sizeof l);
                hbm__sb_printf(&sb, "%s", l);
            }
            i = j;
        }
    }
}

static int by_rank(const void *pa, const void *pb, void *arg)
{
    const struct doctor_ranks *r = arg;
    const rkey *a = &r->keys[*(const int *)pa], *b = &r->keys[*(const int *)pb];
    if (a->local != b->local)
        return a->local - b->local;
    if (a->file != b->file && a->local)
        return a->file - b->file;
    return a->rank - b->rank;
}

/* Order of two first failures: by time where both have one, else by position in one file, else unknown (0). */
static int before(const struct doctor_ranks *r, const ev *a, const ev *b)
{
    if (a->lo.soy >= 0 && b->lo.soy >= 0) {
        double dt = when_diff(a->lo, b->lo);
        if (dt)
            return dt < 0 ? -1 : 1;
        return a->kind == K_OOM && b->kind != K_OOM ? -1 : b->kind == K_OOM && a->kind != K_OOM ? 1 : 0;
    }
    (void)r;
    if (a->file == b->file)
        return a->line < b->line ? -1 : a->line > b->line;
    return 0;
}

static int by_time(const void *pa, const void *pb, void *arg)
{
    const struct doctor_ranks *r = arg;
    const ev *a = &r->evs[*(const int *)pa], *b = &r->evs[*(const int *)pb];
    int ta = a->lo.soy >= 0, tb = b->lo.soy >= 0;
    if (ta != tb)
        return tb - ta; /* timed first */
    int c = before(r, a, b);
    if (c)
        return c;
    return a->file != b->file ? a->file - b->file : (a->line > b->line) - (a->line < b->line);
}

static void fmt_s(double s, char *buf, size_t len)
{
    if (s < 120)
        snprintf(buf, len, "%.3g s", s);
    else
        snprintf(buf, len, "%.0f s", s);
}

/* Whether the timing shows collective error c to follow the first failure F (DOCTOR.md, "Several ranks"): reason
 * stays empty when it does, else says why not. Returns c's time after F's earliest. */
static double judge(const struct doctor_ranks *r, const ev *F, const ev *c, double window, char *reason, size_t len)
{
    char lab[200], l0[200];
    label(r, &r->keys[c->key], lab, sizeof lab);
    label(r, &r->keys[F->key], l0, sizeof l0);
    if (F->hi.soy < 0) {
        snprintf(reason, len,
                 "%s's failure has no time of its own and no later line of its log has one: it happened at or after "
                 "%s, which does not place it before the others",
                 l0, F->stamp[0] ? F->stamp : "its last time");
        return 0;
    }
    double gap = when_diff(c->lo, F->hi), gap0 = when_diff(c->lo, F->lo);
    const char *hc = r->keys[c->key].host, *hf = r->keys[F->key].host;
    if (c->hi.soy >= 0 && when_diff(c->hi, F->lo) <= 0)
        snprintf(reason, len, "%s's collective error came before the first failure", lab);
    else if (gap < 0)
        snprintf(reason, len,
                 "%s's collective error is too close to the first failure to order them at the logs' resolution", lab);
    else if (hc[0] && hf[0] && strcmp(hc, hf) && gap < SKEW_S) /* two hosts, two clocks */
        snprintf(reason, len,
                 "%s's collective error is on another host less than %.0f s after the first failure: closer than two "
                 "hosts' clocks are trusted to agree",
                 lab, SKEW_S);
    else if (gap0 > window)
        snprintf(reason, len,
                 "%s's collective error came %.0f s after the first failure, later than the collective timeout allows "
                 "(window %.0f s)",
                 lab, gap0, window);
    return gap0;
}

/* The first failure, and whether the others' collective errors are its consequence (DOCTOR.md, "Several ranks"). */
static void timeline(doctor *d, struct doctor_ranks *r, int mixed)
{
    int known = 0, nfirst = 0;
    for (size_t i = 0; i < r->nkeys; i++)
        known += r->keys[i].rank >= 0 && !r->keys[i].merged;
    int *first = malloc((r->nkeys + 1) * sizeof *first), *cons = malloc((r->nkeys + 1) * sizeof *cons);
    if (!first || !cons) {
        free(first);
        free(cons);
        return;
    }
    for (size_t i = 0; i < r->nkeys; i++)
        if (r->keys[i].nev)
            first[nfirst++] = r->keys[i].ev[0]; /* a rank's own lines are in time order: its first failure */
    int known_failing = 0;
    for (int i = 0; i < nfirst; i++)
        known_failing += r->keys[r->evs[first[i]].key].rank >= 0;
    if (known < 2 || !known_failing) { /* one rank, or files of unknown ranks: no job to order */
        free(first);
        free(cons);
        return;
    }
    qsort_r(first, (size_t)nfirst, sizeof *first, by_time, r);
    const ev *F = &r->evs[first[0]];
    int timed_all = 1, one_file = 1, hosts = 0, ncons = 0, own_fail = 0;
    char host0[64] = "", reason[600] = "";
    for (int i = 0; i < nfirst; i++) {
        const ev *e = &r->evs[first[i]];
        timed_all &= e->lo.soy >= 0;
        one_file &= e->file == F->file;
        const char *h = r->keys[e->key].host;
        if (h[0] && !host0[0])
            snprintf(host0, sizeof host0, "%s", h);
        else if (h[0] && strcmp(h, host0))
            hosts = 1;
    }
    double window = (r->timeout_s > 0 ? r->timeout_s : DEFAULT_TIMEOUT_S) + SLACK_S;
    double lo_gap = -1, hi_gap = -1;
    r->window_s = window;
    snprintf(r->order, sizeof r->order, "%s", timed_all ? "time" : one_file ? "position" : "none");
    /* A collective error first, while another rank ran out of memory: the memory failure is not shown to come first. */
    if (F->kind == K_COLL)
        for (int i = 1; i < nfirst; i++)
            if (r->evs[first[i]].kind == K_OOM) {
                char lab[200];
                label(r, &r->keys[r->evs[first[i]].key], lab, sizeof lab);
                snprintf(reason, sizeof reason,
                         "a collective error came before %s's out-of-memory failure: the out-of-memory may be a "
                         "consequence, or the clocks disagree",
                         lab);
                break;
            }
    if (mixed)
        snprintf(reason, sizeof reason,
                 "the logs are not all of one run of one job (the finding 'the logs do not "
                 "all come from one run of one job')");
    for (int i = 1; i < nfirst; i++) {
        const ev *c = &r->evs[first[i]];
        if (c->kind != K_COLL) {
            own_fail++;
            continue;
        }
        cons[ncons++] = c->key;
        if (reason[0])
            continue;
        if (!timed_all) {
            snprintf(reason, sizeof reason,
                     one_file ? "the failures carry no time (NCCL's INFO lines have none), so they are ordered by "
                                "their position in %.200s only, which is when each rank's output reached the file, "
                                "not when it failed"
                              : "the failures carry no time and are in different files, which cannot be ordered "
                                "against each other%.0s",
                     r->files[F->file].path);
            continue;
        }
        double gap0 = judge(r, F, c, window, reason, sizeof reason);
        if (lo_gap < 0 || gap0 < lo_gap)
            lo_gap = gap0;
        if (gap0 > hi_gap)
            hi_gap = gap0;
    }
    qsort_r(cons, (size_t)ncons, sizeof *cons, by_rank, r);
    char who[200], others[600], what[200];
    label(r, &r->keys[F->key], who, sizeof who);
    rank_list(r, cons, ncons, others, sizeof others);
    snprintf(what, sizeof what, "%s", F->title);
    int confirmed = ncons && !reason[0];
    r->first_ev = first[0], r->confirmed = confirmed;
    snprintf(r->reason, sizeof r->reason, "%s", reason);
    finding *f;
    hbm__sbuf t;
    if (!ncons && !reason[0]) {
        f = doctor_add(d, SEV_INFO, "ranks-first-failure");
        hbm__sb_init(&t, f->title, sizeof f->title);
        hbm__sb_printf(&t, "%s failed first: %s%s", who, what,
                       own_fail ? "; the other failing ranks failed on their own (not collective errors)"
                                : "; no other rank logged a collective error");
    } else if (confirmed) {
        char a[32], b[32];
        fmt_s(lo_gap, a, sizeof a);
        fmt_s(hi_gap, b, sizeof b);
        f = doctor_add(d, SEV_ERROR, "ranks-first-failure");
        hbm__sb_init(&t, f->title, sizeof f->title);
        hbm__sb_printf(&t, "%s failed first: %s; the collective errors of %s%s came %s%s%s later: its consequence", who,
                       what, ncons > 1 ? "ranks " : "", others, a, strcmp(a, b) ? " to " : "", strcmp(a, b) ? b : "");
    } else {
        f = doctor_add(d, SEV_WARNING, "ranks-first-failure-unconfirmed");
        hbm__sb_init(&t, f->title, sizeof f->title);
        if (ncons)
            hbm__sb_printf(&t,
                           "%s failed first as far as the logs show (%s), but that the collective errors of %s%s are "
                           "its consequence is unconfirmed: %s",
                           who, what, ncons > 1 ? "ranks " : "", others, reason);
        else
            hbm__sb_printf(&t, "%s failed first as far as the logs show (%s); what caused what is unconfirmed: %s", who,
                           what, reason);
    }
    evidence(r, F, f);
    hbm__sbuf sb;
    hbm__sb_init(&sb, f->why, sizeof f->why);
    hbm__sb_printf(&sb, "Each rank's first failure, %s (window: the collective timeout%s, %.0f s, + %.0f s):",
                   timed_all  ? "in time order, as its log wrote the time"
                   : one_file ? "in the order of the file's lines"
                              : "in no order the logs can show",
                   r->timeout_s > 0 ? " the logs state" : " HCCL_EXEC_TIMEOUT's default", window - SLACK_S, SLACK_S);
    for (int i = 0; i < nfirst && i < 8; i++) {
        const ev *e = &r->evs[first[i]];
        char lab[200];
        label(r, &r->keys[e->key], lab, sizeof lab);
        hbm__sb_printf(&sb, "\n%s, %s%s%s: %s (%.100s:%ld)", lab, e->own || e->lo.soy < 0 ? "" : "after ",
                       e->lo.soy >= 0 ? e->stamp : "no time",
                       e->own || e->lo.soy < 0 ? "" : " (its log's last time before the line)", e->title,
                       short_path(r->files[e->file].path), e->line);
    }
    if (nfirst > 8)
        hbm__sb_printf(&sb, "\nand %d more ranks", nfirst - 8);
    if (hosts)
        hbm__sb_printf(&sb,
                       "\nThe ranks run on several hosts: their times come from different clocks (trusted to "
                       "agree within %.0f s).",
                       SKEW_S);
    if (confirmed || (!ncons && !reason[0]))
        doctor_next(f, "start with %s's failure (the finding '%.120s'): %s", who, what,
                    confirmed ? "the other ranks' collective errors are what their collectives do when a rank "
                                "stops; they go away with it"
                              : "it is the only failure of the job these logs show");
    else {
        doctor_next(f, "look at %s's failure first (the finding '%.120s'), then decide with times", who, what);
        doctor_next(f,
                    "times decide it: log with Python logging's %%(asctime)s; torch's C++ warnings carry one; "
                    "NCCL prints one on its WARN lines from 2.26 (NCCL_DEBUG_TIMESTAMP_LEVELS=WARN,INFO for its INFO "
                    "lines too); HCCL's plog lines carry one (~/ascend/log/debug/plog)");
    }
    free(first);
    free(cons);
}

/* Files that cannot be one job's: different world sizes or job ids, or one rank written by two processes. */
static int mixed_jobs(doctor *d, struct doctor_ranks *r)
{
    char why[1300] = "";
    hbm__sbuf sb;
    hbm__sb_init(&sb, why, sizeof why);
    const rfile *w0 = NULL, *j0 = NULL;
    int wsaid = 0, jsaid = 0;
    for (size_t i = 0; i < r->nfiles; i++) {
        const rfile *f = &r->files[i];
        if (f->world && !w0) {
            w0 = f;
        } else if (f->world && w0 && f->world != w0->world && !wsaid) {
            hbm__sb_printf(&sb, "%sworld size %ld in %.150s but %ld in %.150s", sb.len ? "; " : "", w0->world, w0->path,
                           f->world, f->path);
            wsaid = 1;
        }
        if (f->job[0] && !j0) {
            j0 = f;
        } else if (f->job[0] && j0 && strcmp(f->job, j0->job) && !jsaid) {
            hbm__sb_printf(&sb, "%s%s in %.150s but %s in %.150s", sb.len ? "; " : "", j0->job, j0->path, f->job,
                           f->path);
            jsaid = 1;
        }
    }
    int said = 0;
    for (size_t i = 0; i < r->nkeys && said < 3; i++) {
        const rkey *k = &r->keys[i];
        char lab[200];
        label(r, k, lab, sizeof lab);
        if (k->pid2 > 0) {
            hbm__sb_printf(&sb, "%s%s was written by two processes, pid %ld (%.120s) and pid %ld (%.120s)",
                           sb.len ? "; " : "", lab, k->pid, r->files[k->pid_file].path, k->pid2,
                           r->files[k->pid2_file].path);
            said++;
        } else if (!k->local && k->rank >= 0 && k->nfiles == 2) {
            hbm__sb_printf(&sb, "%s%s has two logs, %.120s and %.120s", sb.len ? "; " : "", lab,
                           r->files[k->files[0]].path, r->files[k->files[1]].path);
            said++;
        }
    }
    if (!why[0])
        return 0;
    finding *f = doctor_add(d, SEV_WARNING, "ranks-mixed-jobs");
    snprintf(f->title, sizeof f->title, "the logs do not all come from one run of one job: %.400s", why);
    snprintf(f->evidence, sizeof f->evidence, "%zu log files", r->nfiles);
    snprintf(f->why, sizeof f->why,
             "The ranks of one job state one world size and one job id, and each rank is one process. Logs of "
             "another job, or of an earlier attempt of this one (torchrun restarts write attempt_<n> folders), make "
             "the order of failures mean nothing across them.");
    doctor_next(f, "give the doctor the logs of one attempt of one job: one folder, or a pattern that names only it");
    return 1;
}

/* Ranks of the job with no line in any log: world size as the logs state it, else the highest rank + 1. */
static void missing_ranks(doctor *d, struct doctor_ranks *r)
{
    long world = 0;
    int global = 0, stated = 0;
    for (size_t i = 0; i < r->nfiles; i++)
        if (r->files[i].world > world)
            world = r->files[i].world, stated = 1;
    for (size_t i = 0; i < r->nkeys; i++)
        if (r->keys[i].rank >= 0 && !r->keys[i].local) {
            global++;
            if (!stated && r->keys[i].rank + 1 > world)
                world = r->keys[i].rank + 1;
        }
    if (global < 2 || world <= 0 || world > MAX_GLOBAL)
        return;
    char list[900] = "";
    hbm__sbuf sb;
    hbm__sb_init(&sb, list, sizeof list);
    long missing = 0;
    for (long g = 0; g < world; g++) {
        if ((size_t)g < r->capg && r->gidx[g])
            continue;
        long e = g;
        while (e + 1 < world && !((size_t)(e + 1) < r->capg && r->gidx[e + 1]))
            e++;
        missing += e - g + 1;
        if (sb.len < 800)
            hbm__sb_printf(&sb, "%s%ld%s%.0ld", sb.len ? ", " : "", g, e > g ? "-" : "", e > g ? e : 0);
        g = e;
    }
    if (!missing)
        return;
    finding *f = doctor_add(d, SEV_WARNING, "ranks-missing");
    snprintf(f->title, sizeof f->title, "%ld of the job's %ld ranks have no log: %.400s", missing, world, list);
    snprintf(f->evidence, sizeof f->evidence, "%s",
             stated ? "world size as the logs state it (WORLD_SIZE)"
                    : "the highest rank seen + 1 (no log states WORLD_SIZE)");
    snprintf(f->why, sizeof f->why,
             "The first failure may be on a rank whose log is missing: the order above covers only the ranks "
             "given.");
    doctor_next(f, "add their logs (torchrun --log-dir keeps every local rank's, msrun's --log_dir every worker's)");
}

/* Issue #40 item 2: a communicator that failed after an out-of-memory message showed a cache larger than what the
 * communicator needs: a headroom keeps that much free of the cache (doctor_headroom_next). */
static void headroom_after_oom(doctor *d, struct doctor_ranks *r)
{
    for (size_t i = 0; i < r->nevs; i++) {
        const ev *e = &r->evs[i];
        if (e->kind != K_COLL || e->fi >= d->n || strstr(e->title, "timed out"))
            continue; /* a timeout waits for a peer: this device's memory did not fail it */
        finding *f = &d->f[e->fi];
        int said = 0;
        for (int k = 0; k < f->nnext && !said; k++)
            said = strstr(f->next[k], "hbm_headroom_mb:") != NULL;
        if (said)
            continue;
        const char *lib = !strcmp(f->id, "hccl-error") ? "HCCL" : "NCCL";
        char basis[300];
        double need = (double)doctor_headroom_mb(lib, basis, sizeof basis) * 1048576.0;
        for (size_t j = 0; j < r->nevs; j++) {
            const ev *o = &r->evs[j];
            if (o->kind != K_OOM || !(o->rbu >= need) || o->key != e->key) /* this rank's device, not another's */
                continue;
            int earlier = (o->file == e->file && o->line < e->line) ||
                          (o->hi.soy >= 0 && e->lo.soy >= 0 && when_diff(e->lo, o->hi) >= 0);
            if (!earlier)
                continue;
            char size[32], lead[600];
            doctor_format_size(o->rbu, size, sizeof size);
            snprintf(lead, sizeof lead,
                     "the out-of-memory message before it (%.200s:%ld) showed %s reserved but unallocated: the "
                     "cache held memory the communicator then could not get; ",
                     short_path(r->files[o->file].path), o->line, size);
            doctor_headroom_next(f, lib, lead);
            break;
        }
    }
}

/* A time without a year (torch's C++ lines) takes the year of the last dated line read, its day counted again in
 * that year: compared once with a dated line and once with another undated one, it would otherwise order
 * A < B < C < A (two dated lines of two years around it), and March 1st read before any dated line of a leap year
 * came a day early. */
static void give_year(when *w, int year)
{
    if (w->year >= 0 || w->soy < 0)
        return;
    int leap_day = w->after_feb && leap(year); /* read before any dated line, March 1st was day 59 */
    w->soy += (leap_day - w->leap_day) * 86400.0;
    w->leap_day = (signed char)leap_day;
    w->year = year;
}

static void give_years(struct doctor_ranks *r)
{
    if (r->year_hint <= 0)
        return; /* no line gave a year (0: none yet): every time is within one year, compared by seconds */
    for (size_t i = 0; i < r->nevs; i++) {
        give_year(&r->evs[i].lo, r->year_hint);
        give_year(&r->evs[i].hi, r->year_hint);
    }
    for (size_t i = 0; i < r->nkeys; i++)
        give_year(&r->keys[i].last, r->year_hint);
}

void doctor_ranks_report(doctor *d)
{
    struct doctor_ranks *r = d->ranks;
    if (!r || r->reported)
        return;
    r->reported = 1;
    give_years(r);
    headroom_after_oom(d, r);
    int mixed = mixed_jobs(d, r);
    timeline(d, r, mixed);
    missing_ranks(d, r);
}

/* ---- JSON ---- */

/* "time": as the doctor read it (null: none), "time_own": the line's own, or its rank's last before it. */
static void json_when(FILE *out, const ev *e)
{
    fputs(",\"time\":", out);
    if (e->lo.soy >= 0)
        hbm__json_str(out, e->stamp);
    else
        fputs("null", out);
    fprintf(out, ",\"time_own\":%s", e->own ? "true" : "false");
}

void doctor_ranks_json(const doctor *d, FILE *out)
{
    const struct doctor_ranks *r = d->ranks;
    if (!r)
        return;
    fputs(",\"ranks\":{\"files\":[", out);
    for (size_t i = 0; i < r->nfiles; i++) {
        const rfile *f = &r->files[i];
        fputs(i ? ",{\"path\":" : "{\"path\":", out);
        hbm__json_str(out, f->path);
        if (f->rank >= 0)
            fprintf(out, ",\"rank\":%d,\"local\":%s", f->rank, f->local ? "true" : "false");
        else
            fputs(",\"rank\":null,\"local\":false", out);
        fprintf(out, ",\"lines\":%ld,\"timed_lines\":%ld,\"world_size\":", f->lines, f->timed);
        if (f->world)
            fprintf(out, "%ld", f->world);
        else
            fputs("null", out);
        fputs(",\"job\":", out);
        if (f->job[0])
            hbm__json_str(out, f->job);
        else
            fputs("null", out);
        fputc('}', out);
    }
    fputs("],\"ranks\":[", out);
    for (size_t i = 0, n = 0; i < r->nkeys; i++) {
        const rkey *k = &r->keys[i];
        char lab[200];
        if (k->merged)
            continue;
        label(r, k, lab, sizeof lab);
        fputs(n++ ? ",{\"label\":" : "{\"label\":", out);
        hbm__json_str(out, lab);
        if (k->rank >= 0)
            fprintf(out, ",\"rank\":%d", k->rank);
        else
            fputs(",\"rank\":null", out);
        fprintf(out, ",\"local\":%s,\"file\":", k->local ? "true" : "false");
        hbm__json_str(out, r->files[k->file].path);
        fputs(",\"host\":", out);
        if (k->host[0])
            hbm__json_str(out, k->host);
        else
            fputs("null", out);
        if (k->pid > 0)
            fprintf(out, ",\"pid\":%ld", k->pid);
        else
            fputs(",\"pid\":null", out);
        fprintf(out, ",\"lines\":%ld,\"failures_kept\":%d,\"failures_more\":%ld,\"first_failure\":", k->lines, k->nev,
                k->more);
        if (k->nev) {
            const ev *e = &r->evs[k->ev[0]];
            fprintf(out, "{\"kind\":\"%s\",\"finding\":", kind_name(e->kind));
            hbm__json_str(out, e->id);
            fputs(",\"title\":", out);
            hbm__json_str(out, e->title);
            json_when(out, e);
            fprintf(out, ",\"line\":%ld}", e->line);
        } else {
            fputs("null", out);
        }
        fputc('}', out);
    }
    fprintf(out, "],\"untracked_lines\":%ld,\"failures_dropped\":%ld,\"files_dropped\":%ld,\"timeline\":", r->untracked,
            r->dropped, r->files_dropped);
    if (r->first_ev < 0) {
        fputs("null}", out);
        return;
    }
    const ev *F = &r->evs[r->first_ev];
    char lab[200];
    label(r, &r->keys[F->key], lab, sizeof lab);
    fputs("{\"first\":", out);
    hbm__json_str(out, lab);
    fputs(",\"first_finding\":", out);
    hbm__json_str(out, F->id);
    fprintf(out, ",\"first_kind\":\"%s\"", kind_name(F->kind));
    json_when(out, F);
    fprintf(out, ",\"ordered_by\":\"%s\",\"consequence\":\"%s\",\"reason\":", r->order,
            r->confirmed   ? "confirmed"
            : r->reason[0] ? "unconfirmed"
                           : "none");
    hbm__json_str(out, r->reason);
    fprintf(out, ",\"window_s\":%.0f}}", r->window_s);
}
