/*
 * doctor_env.c: the environment part of `hbmalloc doctor`. Which backends
 * load and what they report (versions, virtual memory per device), the Ascend
 * version files (driver, firmware, CANN toolkit) and `npu-smi info` (summary
 * table and per-board versions), `nvidia-smi`, the visible-device and HCCL
 * variables, and the allocator settings in the environment validated against
 * what the device supports. Findings go to the doctor; facts are reported as
 * read. Tables are parsed by cells ('|', whitespace, '/'), never by column.
 */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util.h"
#include "doctor.h"
#include "hbmalloc.h"

/* ---- versions ---- */

/* One component: numbers as themselves; rc<n>, beta<n>, alpha<n> and T<n> before the release they precede.
 * Numbers are clamped (a version part above 999999 is not a version anyone ships). */
#define PART_RELEASE 3000000L
static long clamp_part(const char *s, long top)
{
    long k = strtol(s, NULL, 10);
    return k < 0 ? 0 : k > top ? top : k;
}

static long part_value(const char *s, size_t n)
{
    if (n && isdigit((unsigned char)s[0]))
        return PART_RELEASE + clamp_part(s, 999999);
    long k = 0;
    for (size_t i = 0; i < n; i++)
        if (isdigit((unsigned char)s[i])) {
            k = clamp_part(s + i, 499999);
            break;
        }
    if (n >= 2 && !strncasecmp(s, "rc", 2))
        return 2000000 + k;
    if (n >= 4 && !strncasecmp(s, "beta", 4))
        return 1500000 + k;
    if (n >= 5 && !strncasecmp(s, "alpha", 5))
        return 1000000 + k;
    return k; /* T<n>: test builds */
}

int doctor_vercmp(const char *a, const char *b)
{
    while (*a || *b) {
        size_t na = strcspn(a, "."), nb = strcspn(b, ".");
        long va = na ? part_value(a, na) : PART_RELEASE, vb = nb ? part_value(b, nb) : PART_RELEASE; /* missing = .0 */
        if (va != vb)
            return va < vb ? -1 : 1;
        a += na + (a[na] == '.');
        b += nb + (b[nb] == '.');
    }
    return 0;
}

int doctor_in_ranges(const char *v, const char *ranges)
{
    int seen = 0;
    for (const char *p = strchr(ranges, '['); p; p = strchr(p + 1, '[')) {
        char lo[64], hi[64];
        const char *comma = strchr(p, ','), *end = strchr(p, ']');
        if (!comma || !end || comma > end || (size_t)(comma - p - 1) >= sizeof lo ||
            (size_t)(end - comma - 1) >= sizeof hi)
            return -1;
        snprintf(lo, sizeof lo, "%.*s", (int)(comma - p - 1), p + 1);
        snprintf(hi, sizeof hi, "%.*s", (int)(end - comma - 1), comma + 1);
        char *l = lo, *h = hi;
        while (*l == ' ')
            l++;
        while (*h == ' ')
            h++;
        seen = 1;
        size_t hn = strlen(h);
        int upper_ok;
        if (hn && h[hn - 1] == '.') /* "24.1." : any 24.1.x */
            upper_ok = !strncmp(v, h, hn) || doctor_vercmp(v, h) <= 0;
        else
            upper_ok = doctor_vercmp(v, h) <= 0;
        size_t ln = strlen(l); /* "24.1" as a lower bound includes 24.1.rc3 */
        int lower_ok = doctor_vercmp(v, l) >= 0 || (!strncmp(v, l, ln) && (v[ln] == '.' || !v[ln]));
        if (lower_ok && upper_ok)
            return 1;
    }
    return seen ? 0 : -1;
}

/* ---- files and commands ---- */

/* A version file under --root, at most max bytes; NULL when it is absent or not a regular file. Opened without
 * blocking (a FIFO blocks in open() until a writer comes, maybe never) and read only when it is a regular file (a
 * device or a pipe could block or never end): the doctor is run when something is wrong with the machine. */
static char *slurp_file(const char *path, size_t max)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0)
        return NULL;
    if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
        close(fd);
        return NULL;
    }
    char *buf = malloc(max + 1);
    size_t n = 0;
    while (buf && n < max) {
        ssize_t got = read(fd, buf + n, max - n);
        if (got <= 0)
            break; /* the end, or an error: what was read is judged (a version line is short) */
        n += (size_t)got;
    }
    close(fd);
    if (buf)
        buf[n] = 0;
    return buf;
}

/* The value of "key=value" (or "key : value" with colon) in text, trimmed; 0 when found. */
static int get_key(const char *text, const char *key, char sep, char *out, size_t outlen)
{
    size_t kl = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        const char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (strncmp(p, key, kl) != 0)
            continue;
        p += kl;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != sep)
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        size_t n = strcspn(p, "\r\n");
        while (n && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        snprintf(out, outlen, "%.*s", (int)n, p);
        return 0;
    }
    return -1;
}

static int file_key(const char *root, const char *rel, const char *key, char *out, size_t outlen)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    char *t = slurp_file(path, 1 << 16);
    int rc = t ? get_key(t, key, '=', out, outlen) : -1;
    free(t);
    return rc;
}

/* How long an external command may take: npu-smi and nvidia-smi hang when the driver is wedged, which is when the
 * doctor is needed. HBMALLOC_DOCTOR_TIMEOUT (seconds) overrides the 10 s. */
static int cmd_timeout_ms(void)
{
    const char *v = getenv("HBMALLOC_DOCTOR_TIMEOUT");
    double s = v ? atof(v) : 10.0;
    return s > 0 && s < 3600 ? (int)(s * 1000) : 10000;
}

/* Run argv (execvp) with a time limit; its stdout, at most 1 MiB. NULL when it did not run or did not finish in time
 * (*timed_out then 1: its process group was killed). */
static char *spawn_limited(char *const argv[], int limit, int *timed_out)
{
    *timed_out = 0;
    int fd[2];
    if (pipe(fd))
        return NULL;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return NULL;
    }
    if (pid == 0) {
        setpgid(0, 0); /* its own group: a timeout kills what it started too */
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, 2); /* what it says on stderr is not the doctor's output */
        execvp(argv[0], argv);
        _exit(127);
    }
    setpgid(pid, pid);
    close(fd[1]);
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long left = limit - ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000);
        if (left <= 0) {
            *timed_out = 1;
            break;
        }
        struct pollfd p = {fd[0], POLLIN, 0};
        int r = poll(&p, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            *timed_out = r == 0;
            break;
        }
        char scratch[4096];
        ssize_t got = buf && n < cap ? read(fd[0], buf + n, cap - n) : read(fd[0], scratch, sizeof scratch);
        if (got <= 0)
            break;
        if (buf && n < cap)
            n += (size_t)got;
    }
    close(fd[0]);
    if (*timed_out)
        kill(-pid, SIGKILL);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (!buf || *timed_out) {
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    if ((!WIFEXITED(st) || WEXITSTATUS(st) != 0) && n == 0) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* A fixed command line (no user text in it), within the doctor's command limit. */
static char *run_limited(const char *cmdline, int *timed_out)
{
    char *argv[] = {"/bin/sh", "-c", (char *)cmdline, NULL};
    return spawn_limited(argv, cmd_timeout_ms(), timed_out);
}

static int count_hung(const doctor *d)
{
    int n = 0;
    for (size_t i = 0; i < d->nfacts; i++)
        n += strstr(d->facts[i].value, "did not answer within") != NULL;
    return n;
}

/* A command that did not answer in time: a fact, and once per tool a finding (a wedged driver). */
static void hung(doctor *d, const char *section, const char *tool, const char *cmdline)
{
    double s = cmd_timeout_ms() / 1000.0;
    doctor_fact(d, section, tool, "did not answer within %g s (killed)", s);
    for (size_t i = 0; i < d->n; i++)
        if (!strcmp(d->f[i].id, "tool-hung") && strstr(d->f[i].title, tool))
            return;
    finding *f = doctor_add(d, SEV_ERROR, "tool-hung");
    snprintf(f->title, sizeof f->title, "%s did not answer within %g s: the driver may be wedged", tool, s);
    snprintf(f->evidence, sizeof f->evidence, "%s (killed after %g s)", cmdline, s);
    snprintf(f->why, sizeof f->why,
             "%s asks the kernel driver; it hangs when the driver or a device is stuck, which "
             "also stalls every program that opens the device (allocations, collectives).",
             tool);
    doctor_next(f, "dmesg | tail -50 for driver errors (%s)", !strcmp(tool, "npu-smi") ? "davinci, npu, hdc" : "Xid");
    doctor_next(f, "look for processes stuck on the device (ps -eo pid,stat,cmd | grep ' D'); a reboot or a driver "
                   "reload clears a wedged driver");
    doctor_next(f, "HBMALLOC_DOCTOR_TIMEOUT=SECONDS waits longer");
}

/* run_limited for the doctor's tools: NULL when it failed or hung (the hang recorded). */
static char *run(doctor *d, const char *section, const char *tool, const char *cmdline)
{
    int timed_out;
    char *out = run_limited(cmdline, &timed_out);
    if (timed_out)
        hung(d, section, tool, cmdline);
    return out;
}

/* ---- table cells ---- */

static int line_has(const char *line, size_t len, const char *s) { return memmem(line, len, s, strlen(s)) != NULL; }

typedef struct cells {
    char c[8][200];
    int n;
} cells;

static void split_row(const char *line, size_t len, cells *out)
{
    out->n = 0;
    const char *p = line, *end = line + len;
    if (p < end && *p == '|')
        p++;
    while (p < end && out->n < 8) {
        const char *bar = memchr(p, '|', (size_t)(end - p));
        const char *stop = bar ? bar : end;
        while (p < stop && *p == ' ')
            p++;
        const char *q = stop;
        while (q > p && (q[-1] == ' ' || q[-1] == '\r'))
            q--;
        if (!bar && q == p)
            break;
        snprintf(out->c[out->n++], sizeof out->c[0], "%.*s", (int)(q - p), p);
        if (!bar)
            break;
        p = bar + 1;
    }
}

/* The last "a / b" number pair in the row's cells (HBM after Memory when both are there). */
static int last_pair(const cells *r, long *used, long *total)
{
    int found = 0;
    for (int i = 0; i < r->n; i++)
        for (const char *s = strchr(r->c[i], '/'); s; s = strchr(s + 1, '/')) {
            const char *a = s;
            while (a > r->c[i] && a[-1] == ' ')
                a--;
            const char *digits = a;
            while (digits > r->c[i] && isdigit((unsigned char)digits[-1]))
                digits--;
            const char *b = s + 1;
            while (*b == ' ')
                b++;
            if (digits == a || !isdigit((unsigned char)*b))
                continue;
            *used = strtol(digits, NULL, 10);
            *total = strtol(b, NULL, 10);
            found = 1;
        }
    return found;
}

static int health_word(const char *s)
{
    static const char *w[] = {"OK", "Warning", "Alarm", "Critical", "Abnormal", "Unknown", "NA"};
    for (size_t i = 0; i < sizeof w / sizeof w[0]; i++)
        if (!strcmp(s, w[i]))
            return 1;
    return 0;
}

typedef struct npu_dev {
    int id;
    char name[64], health[32];
    long used, total;
} npu_dev;

/* `npu-smi info`: the version in the header, then two rows per NPU; stops at the process table. */
static int parse_npu_smi(const char *text, char *version, size_t vlen, npu_dev *devs, int max)
{
    int n = 0, pending = -1;
    version[0] = 0;
    for (const char *line = text; line && *line && n <= max;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        const char *v = strstr(line, "Version:");
        if (!version[0] && v && v < line + len) {
            v += 8;
            while (*v == ' ')
                v++;
            size_t k = strcspn(v, " |\r\n");
            snprintf(version, vlen, "%.*s", (int)k, v);
        } else if (len > 1 && line[0] == '|') {
            cells r;
            split_row(line, len, &r);
            if (r.n && line_has(line, len, "Process id"))
                break; /* the process table follows */
            int h = -1;
            for (int i = 1; i < r.n && h < 0; i++)
                if (health_word(r.c[i]))
                    h = i;
            if (h > 0 && isdigit((unsigned char)r.c[0][0]) && n < max) {
                npu_dev *d = &devs[n];
                memset(d, 0, sizeof *d);
                d->id = atoi(r.c[0]);
                const char *name = r.c[0] + strspn(r.c[0], "0123456789");
                while (*name == ' ')
                    name++;
                snprintf(d->name, sizeof d->name, "%.60s", *name ? name : (h > 1 ? r.c[1] : "?"));
                snprintf(d->health, sizeof d->health, "%.30s", r.c[h]);
                d->used = d->total = -1;
                pending = n++;
            } else if (pending >= 0) {
                last_pair(&r, &devs[pending].used, &devs[pending].total);
                pending = -1;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

/* ---- the settings in the environment ---- */

/* The settings string without its expandable_segments entry (brackets kept whole). */
/* ---- backends ---- */

/* torch_npu's ProcessGroupHCCL keeps collective inputs alive through recordStream under
 * MULTI_STREAM_MEMORY_REUSE 0, 1 (its default) and 3, and stashes them under 2 (OptionsManager.cpp
 * GetMultiStreamMemoryReuse reads it with strtol; ProcessGroupHCCL.cpp). A pluggable allocator never
 * receives torch_npu's recordStream (its hook takes an NPUStream by value), so with hbmalloc only 2 is safe. */
static void check_reuse_mode(doctor *d, int ascend)
{
    const char *v = getenv("MULTI_STREAM_MEMORY_REUSE");
    if (!v) {
        if (ascend)
            doctor_fact(d, "variables", "MULTI_STREAM_MEMORY_REUSE",
                        "unset: torch_npu's default 1 (HCCL relies on "
                        "recordStream); hbmalloc_torch.use() sets 2");
        return;
    }
    doctor_fact(d, "variables", "MULTI_STREAM_MEMORY_REUSE", "%.380s", v);
    char *end;
    long mode = strtol(v, &end, 10);
    if (end == v || mode < 0 || mode > 3) {
        finding *f = doctor_add(d, SEV_ERROR, "multi-stream-reuse-invalid");
        snprintf(f->title, sizeof f->title,
                 "MULTI_STREAM_MEMORY_REUSE='%.60s' is refused: torch_npu stops at the "
                 "first collective",
                 v);
        snprintf(f->evidence, sizeof f->evidence, "environment: MULTI_STREAM_MEMORY_REUSE=%.200s", v);
        snprintf(f->why, sizeof f->why,
                 "torch_npu accepts 0, 1 or 2 (and 3 in releases from 2025): \"MULTI_STREAM_"
                 "MEMORY_REUSE should be 0, 1, 2 or 3\".");
        doctor_next(f, "export MULTI_STREAM_MEMORY_REUSE=2");
    } else if (mode != 2) {
        finding *f = doctor_add(d, SEV_WARNING, "multi-stream-reuse-record-stream");
        snprintf(f->title, sizeof f->title,
                 "MULTI_STREAM_MEMORY_REUSE=%ld: HCCL collectives rely on recordStream, "
                 "which hbmalloc's torch_npu plug-in cannot receive",
                 mode);
        snprintf(f->evidence, sizeof f->evidence, "environment: MULTI_STREAM_MEMORY_REUSE=%.200s", v);
        snprintf(f->why, sizeof f->why,
                 "With this mode torch_npu's ProcessGroupHCCL marks a collective's inputs with "
                 "recordStream so that the allocator keeps them until HCCL is done. torch_npu passes recordStream to a "
                 "pluggable allocator as an NPUStream by value, which no C allocator can take, so under hbmalloc the "
                 "input can be reused while HCCL still reads it. Mode 2 keeps the tensors alive until the work "
                 "completes instead (batch_isend_irecv and coalesced collectives still use recordStream: keep their "
                 "tensors until work.wait()). Only matters with hbmalloc (or another pluggable allocator) in the job.");
        doctor_next(f, "export MULTI_STREAM_MEMORY_REUSE=2 (hbmalloc_torch.use() sets it when it is unset)");
    }
}

static void probe_backend(doctor *d, const char *spec, int *vmm, char *why, size_t whylen)
{
    hbm_backend *b;
    char err[600];
    *vmm = -1;
    if (hbm_backend_open(&b, spec, err, sizeof err) != HBM_OK) {
        doctor_fact(d, spec, "loads", "no: %.380s", err);
        return;
    }
    doctor_fact(d, spec, "loads", "yes");
    d->runtimes_loaded++;
    doctor_fact(d, spec, "version", "%.300s", hbm_backend_version(b));
    int n = hbm_backend_devices(b), yes = 1;
    doctor_fact(d, spec, "devices", "%d", n);
    char no[384] = "";
    for (int dev = 0; dev < n && yes; dev++) /* each device probed, as each rank's allocator would */
        yes = hbm_backend_vmm(b, dev, no, sizeof no);
    hbm_backend_info info;
    hbm_backend_get_info(b, &info);
    if (yes)
        doctor_fact(d, spec, "virtual memory", "yes on every device (granularity %zu KiB): expandable segments work",
                    info.vmm_granularity >> 10);
    else
        doctor_fact(d, spec, "virtual memory", "no: %.380s", no);
    /* Pools that sleep (docs/SLEEP.md) keep their addresses only with virtual memory. */
    doctor_fact(d, spec, "sleeping pools",
                yes ? "yes: hbmalloc.torch.sleep() keeps every address%s"
                    : "no: a sleep cannot keep addresses without virtual memory%s",
                !yes               ? ""
                : info.host_copies ? "; backups in pinned host memory"
                                   : "; no backup (the runtime has no pinned host copies)");
    *vmm = yes;
    if (why)
        snprintf(why, whylen, "%s", yes ? "virtual memory available" : no);
    hbm_backend_close(b);
}

/* ---- Ascend ---- */

static void ascend(doctor *d, const char *root, int *present)
{
    char v[128], fw_range[256] = "", fw[64] = "", cann[64] = "";
    *present = 0;
    if (!file_key(root, "usr/local/Ascend/driver/version.info", "Version", v, sizeof v)) {
        *present = 1;
        snprintf(d->driver, sizeof d->driver, "%.60s", v);
        doctor_fact(d, "ascend", "driver (HDK)", "%s (/usr/local/Ascend/driver/version.info)", v);
        if (!file_key(root, "usr/local/Ascend/driver/version.info", "compatible_version_fw", fw_range, sizeof fw_range))
            doctor_fact(d, "ascend", "driver accepts firmware", "%s", fw_range);
    }
    if (!file_key(root, "usr/local/Ascend/firmware/version.info", "Version", fw, sizeof fw)) {
        *present = 1;
        doctor_fact(d, "ascend", "firmware", "%s (/usr/local/Ascend/firmware/version.info)", fw);
    }
    if (!file_key(root, "usr/local/Ascend/ascend-toolkit/latest/version.cfg", "runtime_running_version", v, sizeof v)) {
        const char *colon = strchr(v, ':');
        if (colon)
            snprintf(cann, sizeof cann, "%.*s", (int)strcspn(colon + 1, "]"), colon + 1);
    }
    static const char *infos[] = {"usr/local/Ascend/ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info",
                                  "usr/local/Ascend/ascend-toolkit/latest/x86_64-linux/ascend_toolkit_install.info",
                                  "usr/local/Ascend/ascend-toolkit/latest/opp/version.info"};
    for (size_t i = 0; i < 3 && !cann[0]; i++)
        if (!file_key(root, infos[i], i < 2 ? "version" : "Version", v, sizeof v))
            snprintf(cann, sizeof cann, "%.60s", v);
    if (cann[0]) {
        *present = 1;
        doctor_fact(d, "ascend", "CANN toolkit", "%s", cann);
    }

    /* npu-smi: what the driver itself says. */
    int hung_before = count_hung(d);
    char *t = hbm__on_path("npu-smi") ? run(d, "ascend", "npu-smi", "npu-smi info 2>/dev/null") : NULL;
    npu_dev devs[64];
    int n = 0;
    if (t) {
        char ver[64];
        *present = 1;
        n = parse_npu_smi(t, ver, sizeof ver, devs, 64);
        if (ver[0]) {
            doctor_fact(d, "ascend", "npu-smi driver", "%s", ver);
            if (!d->driver[0])
                snprintf(d->driver, sizeof d->driver, "%s", ver);
        }
        for (int i = 0; i < n; i++) {
            if (devs[i].total > 0)
                doctor_fact(d, "ascend", "npu", "%d %s, health %s, memory %ld / %ld MB used", devs[i].id, devs[i].name,
                            devs[i].health, devs[i].used, devs[i].total);
            else
                doctor_fact(d, "ascend", "npu", "%d %s, health %s", devs[i].id, devs[i].name, devs[i].health);
            if (strcmp(devs[i].health, "OK") != 0) {
                finding *f = doctor_add(d, SEV_ERROR, "npu-unhealthy");
                snprintf(f->title, sizeof f->title, "NPU %d reports health %s", devs[i].id, devs[i].health);
                snprintf(f->evidence, sizeof f->evidence, "npu-smi info: NPU %d %s: %s", devs[i].id, devs[i].name,
                         devs[i].health);
                snprintf(f->why, sizeof f->why,
                         "A card that is not OK fails allocations and collective operations "
                         "(HCCL errors on every rank that talks to it).");
                doctor_next(f,
                            "npu-smi info -t health -i %d for the error code; dmesg | grep -i -E 'npu|davinci' for "
                            "driver messages",
                            devs[i].id);
                doctor_next(f, "leave the card out (ASCEND_RT_VISIBLE_DEVICES) until it is repaired or reset");
            }
        }
        free(t);
        if (n == 0)
            doctor_fact(d, "ascend", "npu-smi", "ran, but no NPU rows were recognised");
    } else if (count_hung(d) == hung_before) {
        doctor_fact(d, "ascend", "npu-smi", hbm__on_path("npu-smi") ? "failed to run" : "not on PATH");
    }
    /* Per board: the driver's and the firmware's own versions, and whether the driver accepts the pair. */
    for (int i = 0; i < n && i < 16 && count_hung(d) == hung_before; i++) {
        char cmd[64], sw[64] = "", fwv[64] = "", compat[64] = "";
        snprintf(cmd, sizeof cmd, "npu-smi info -t board -i %d 2>/dev/null", devs[i].id);
        char *b = run(d, "ascend", "npu-smi", cmd);
        if (!b)
            continue;
        get_key(b, "Software Version", ':', sw, sizeof sw);
        get_key(b, "Firmware Version", ':', fwv, sizeof fwv);
        get_key(b, "Compatibility", ':', compat, sizeof compat);
        free(b);
        doctor_fact(d, "ascend", "board", "NPU %d: software (driver) %s, firmware %s, compatibility %s", devs[i].id,
                    sw[0] ? sw : "?", fwv[0] ? fwv : "?", compat[0] ? compat : "?");
        if (!fw[0] && fwv[0])
            snprintf(fw, sizeof fw, "%s", fwv);
        if (!d->driver[0] && sw[0])
            snprintf(d->driver, sizeof d->driver, "%s", sw);
        if (compat[0] && strcmp(compat, "OK") != 0) {
            finding *f = doctor_add(d, SEV_ERROR, "ascend-driver-firmware-mismatch");
            snprintf(f->title, sizeof f->title, "NPU %d: npu-smi says the driver and firmware are not compatible (%s)",
                     devs[i].id, compat);
            snprintf(f->evidence, sizeof f->evidence,
                     "npu-smi info -t board -i %d: Software Version %s, Firmware "
                     "Version %s, Compatibility %s",
                     devs[i].id, sw, fwv, compat);
            snprintf(f->why, sizeof f->why,
                     "With a mismatched pair the runtime refuses features such as virtual memory "
                     "(207000 ACL_ERROR_RT_FEATURE_NOT_SUPPORT: expandable segments are switched off) and collective "
                     "communication can fail to initialise.");
            doctor_next(f, "install the firmware that goes with driver %s (or the driver for firmware %s), then reboot",
                        sw, fwv);
        }
    }
    if (d->driver[0] && doctor_vercmp(d->driver, "23.0.0") < 0) {
        /* Information: it matters when expandable segments are asked for, which doctor_settings says as an error. */
        finding *f = doctor_add(d, SEV_INFO, "ascend-hdk-too-old");
        snprintf(f->title, sizeof f->title, "Ascend driver (HDK) %s is older than 23.0.0: no expandable segments",
                 d->driver);
        snprintf(f->evidence, sizeof f->evidence, "driver version %s", d->driver);
        snprintf(f->why, sizeof f->why,
                 "Huawei documents Ascend HDK 23.0.0 or later for expandable_segments; older "
                 "drivers answer the virtual-memory probe with 207000 and torch_npu silently falls back.");
        doctor_next(f, "upgrade the driver and firmware together to HDK >= 23.0.0");
        doctor_next(f, "until then: no expandable_segments in PYTORCH_NPU_ALLOC_CONF; to choose max_split_size_mb / "
                       "garbage_collection_threshold, replay a snapshot of the job on this device: hbmalloc doctor "
                       "--trace SNAPSHOT.pickle");
    }
    if (fw[0] && fw_range[0] && doctor_in_ranges(fw, fw_range) == 0) {
        finding *f = doctor_add(d, SEV_ERROR, "ascend-driver-firmware-mismatch");
        snprintf(f->title, sizeof f->title, "firmware %.40s is outside the range driver %.40s accepts (%.150s)", fw,
                 d->driver[0] ? d->driver : "?", fw_range);
        snprintf(f->evidence, sizeof f->evidence,
                 "/usr/local/Ascend/driver/version.info compatible_version_fw=%s; "
                 "firmware Version=%s",
                 fw_range, fw);
        snprintf(
            f->why, sizeof f->why,
            "The driver and firmware packages do not match. The runtime then answers "
            "virtual-memory calls with 207000 (ACL_ERROR_RT_FEATURE_NOT_SUPPORT, 'Feature is not supported and the "
            "possible cause is that driver and firmware packages do not match'): torch_npu prints "
            "'expandable_segments feature is not supportted' and runs without them, and device-UUID and IPC calls "
            "used by multi-card runs can fail the same way.");
        doctor_next(f,
                    "install a driver whose compatible_version_fw contains %s, or the firmware the driver expects; "
                    "reboot",
                    fw);
        doctor_next(f, "check: npu-smi info -t board -i 0 must say Compatibility : OK; then run hbmalloc doctor again");
    }
}

/* ---- NVIDIA ---- */

static void nvidia(doctor *d)
{
    int hung_before = count_hung(d);
    char *t = hbm__on_path("nvidia-smi") ? run(d, "nvidia", "nvidia-smi", "nvidia-smi 2>/dev/null") : NULL;
    if (!t) {
        if (count_hung(d) == hung_before)
            doctor_fact(d, "nvidia", "nvidia-smi", hbm__on_path("nvidia-smi") ? "failed to run" : "not on PATH");
        return;
    }
    char v[64];
    const char *p = strstr(t, "Driver Version:");
    if (p && sscanf(p + 15, " %63s", v) == 1)
        doctor_fact(d, "nvidia", "driver", "%s", v);
    p = strstr(t, "CUDA Version:");
    if (p && sscanf(p + 13, " %63s", v) == 1)
        doctor_fact(d, "nvidia", "CUDA (driver API)", "%s", v);
    int gpu = -1;
    char name[128] = "";
    for (const char *line = t; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        cells r;
        if (line[0] == '|') {
            split_row(line, len, &r);
            long used, total;
            if (r.n >= 2 && isdigit((unsigned char)r.c[0][0]) && strchr(r.c[1], ':')) {
                gpu = atoi(r.c[0]);
                const char *nm = r.c[0] + strspn(r.c[0], "0123456789 ");
                snprintf(name, sizeof name, "%.100s", nm);
                char *gap = strstr(name, "  "); /* the persistence-mode column follows after a gap */
                if (gap)
                    *gap = 0;
            } else if (gpu >= 0 && line_has(line, len, "MiB /")) {
                for (int k = 0; k < r.n; k++)
                    if (sscanf(r.c[k], "%ldMiB / %ldMiB", &used, &total) == 2) {
                        doctor_fact(d, "nvidia", "gpu", "%d %s, %ld / %ld MiB used", gpu, name, used, total);
                        gpu = -1;
                        break;
                    }
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    free(t);
}

void doctor_env(doctor *d, const char *root)
{
    probe_backend(d, "cuda", &d->cuda_vmm, NULL, 0);
    probe_backend(d, "acl", &d->npu_vmm, d->npu_vmm_why, sizeof d->npu_vmm_why);
    int present = 0;
    ascend(d, root, &present);
    nvidia(d);
    /* With no runtime loaded, what the versions say decides. */
    if (d->npu_vmm < 0 && present) {
        if (d->driver[0] && doctor_vercmp(d->driver, "23.0.0") < 0) {
            d->npu_vmm = 0;
            snprintf(d->npu_vmm_why, sizeof d->npu_vmm_why, "Ascend HDK %s is older than 23.0.0", d->driver);
        }
        for (size_t i = 0; i < d->n; i++)
            if (!strcmp(d->f[i].id, "ascend-driver-firmware-mismatch")) {
                d->npu_vmm = 0;
                snprintf(d->npu_vmm_why, sizeof d->npu_vmm_why, "the driver and firmware do not match");
            }
    }
    static const char *vars[] = {"CUDA_VISIBLE_DEVICES",   "NVIDIA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES",
                                 "ASCEND_VISIBLE_DEVICES", "HCCL_BUFFSIZE",          "HCCL_CONNECT_TIMEOUT",
                                 "NCCL_BUFFSIZE",          "HBMALLOC_BACKEND"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v)
            doctor_fact(d, "variables", vars[i], "%.380s", v);
    }
    const char *hb = getenv("HCCL_BUFFSIZE");
    if (hb) {
        char *end;
        long mb = strtol(hb, &end, 10);
        if (*end || end == hb || mb < 1) {
            finding *f = doctor_add(d, SEV_WARNING, "hccl-buffsize-invalid");
            snprintf(f->title, sizeof f->title, "HCCL_BUFFSIZE='%.100s' is not a whole number of MB >= 1", hb);
            snprintf(f->evidence, sizeof f->evidence, "environment: HCCL_BUFFSIZE=%.200s", hb);
            snprintf(f->why, sizeof f->why, "HCCL reads it as MB (default 200).");
            doctor_next(f, "set a whole number, e.g. export HCCL_BUFFSIZE=200");
        } else {
            doctor_fact(d, "variables", "HCCL buffers",
                        "each communicator takes 2 x %ld MB = %ld MB of device memory "
                        "outside the caching allocator",
                        mb, 2 * mb);
        }
    }
    check_reuse_mode(d, present);
    d->ascend = present;
}

/* ---- the framework a job would run: the Python on PATH (or HBMALLOC_PYTHON) and what it imports ---- */

/* Printed as KEY=VALUE lines; imports the frameworks and asks hbmalloc.torch whether use() would take them (the same
 * rule as use(): hbmalloc.torch.would_accept), else the same thresholds. Nothing is swapped or allocated. */
static const char python_probe[] =
    "import importlib.util, sys\n"
    "def say(k, v): print('%s=%s' % (k, str(v).replace('\\n', ' ')[:300]))\n"
    "say('python', sys.executable)\n"
    "try:\n"
    "    import torch\n"
    "    say('torch', torch.__version__)\n"
    "    say('torch_cuda', getattr(getattr(torch, 'version', None), 'cuda', None) or '')\n"
    "except Exception as e:\n"
    "    say('torch_error', '%s: %s' % (type(e).__name__, e))\n"
    "if 'torch' in sys.modules and importlib.util.find_spec('torch_npu') is not None:\n"
    "    try:\n"
    "        import torch_npu\n"
    "        say('torch_npu', torch_npu.__version__)\n"
    "    except Exception as e:\n"
    "        say('torch_npu_error', '%s: %s' % (type(e).__name__, e))\n"
    "for dev, mod in (('cuda', 'torch'), ('npu', 'torch_npu')):\n"
    "    if mod not in sys.modules:\n"
    "        continue\n"
    "    try:\n"
    "        import hbmalloc.torch as h\n"
    "        ok, why = h.would_accept(dev)\n"
    "    except ImportError:\n"
    "        m = sys.modules[mod]\n"
    "        v = tuple(int(x) for x in m.__version__.split('.')[:2] if x.isdigit())\n"
    "        ok = v >= ((2, 1) if dev == 'npu' else (2, 0)) and hasattr((m.npu if dev == 'npu' else m.cuda).memory,\n"
    "            'NPUPluggableAllocator' if dev == 'npu' else 'CUDAPluggableAllocator')\n"
    "        why = '' if ok else 'no pluggable allocator in this release (hbmalloc needs torch >= 2.0, torch_npu >= "
    "2.1)'\n"
    "    say('accept_' + dev, 'yes' if ok else 'no: ' + why)\n";

static const char *probe_value(const char *text, const char *key, char *out, size_t len)
{
    return get_key(text, key, '=', out, len) == 0 ? out : NULL;
}

/* The local torch refused, for a torch_npu job: what use() needs on an NPU (torch_npu >= 2.1 with the torch of the
 * same number, python/hbmalloc/torch.py's MIN_TORCH_NPU), and the pair to install: the job's own release when a log
 * names one (not inferred) that has the pluggable allocator. npu: this Python's torch_npu, or NULL. */
static void torch_for_npu(finding *f, const char *torch, const char *npu, const char *why_npu, const char *job_npu)
{
    const char *colon = strstr(why_npu, ": "); /* a log's "PATH:LINE: the line": where is enough */
    int at = colon ? (int)(colon - why_npu) : (int)strlen(why_npu);
    snprintf(f->why, sizeof f->why,
             "the job runs torch_npu (%.*s). On an NPU hbmalloc.torch.use() needs torch_npu 2.1 or later "
             "(NPUPluggableAllocator) with the torch release of the same number (torch_npu 2.x.y goes with torch "
             "2.x.y); this Python imports torch %s and %s%s.",
             at > 400 ? 400 : at, why_npu, torch, npu ? "torch_npu " : "no torch_npu", npu ? npu : "");
    int major = 0, minor = 0, patch = 0;
    if (job_npu && sscanf(job_npu, "%d.%d.%d", &major, &minor, &patch) == 3 &&
        (major > 2 || (major == 2 && minor >= 1)))
        doctor_next(f,
                    "pip install torch==%d.%d.%d torch_npu==%s (the job's torch_npu and its torch), with the CANN "
                    "that torch_npu release names",
                    major, minor, patch, job_npu);
    else
        doctor_next(f, "pip install 'torch_npu>=2.1' with its torch (torch_npu 2.x.y goes with torch 2.x.y) and the "
                       "CANN it names, e.g. pip install torch==2.6.0 torch_npu==2.6.0");
}

void doctor_python(doctor *d)
{
    const char *py = getenv("HBMALLOC_PYTHON");
    py = py && *py ? py : "python3";
    char *argv[] = {(char *)py, "-c", (char *)python_probe, NULL};
    int timed_out = 0;
    /* Importing torch takes seconds (a cold CUDA build more): six times the commands' limit, 60 s by default. */
    char *text = spawn_limited(argv, 6 * cmd_timeout_ms(), &timed_out);
    if (!text) {
        if (timed_out)
            doctor_fact(d, "python", py, "did not finish importing torch within %d s", 6 * cmd_timeout_ms() / 1000);
        else
            doctor_fact(d, "python", py, "not found, or failed (HBMALLOC_PYTHON names another)");
        return;
    }
    char path[300], torch[64], cuda[64], npu[64], err[320], acc[1200];
    doctor_fact(d, "python", "interpreter", "%s", probe_value(text, "python", path, sizeof path) ? path : py);
    /* A torch_npu job (a log, the machine, or this Python says so): use() needs torch_npu's pluggable allocator,
     * and CUDA's, with its wheel, is beside the point. Asked before this Python's own torch_npu sets the version. */
    int npu_here = probe_value(text, "torch_npu", npu, sizeof npu) != NULL;
    const char *on_npu = doctor_on_npu(d);
    if (!on_npu && npu_here)
        on_npu = "this Python imports torch_npu";
    const struct {
        const char *dev, *name, *version_key, *error_key, *accept_key;
    } fw[] = {{"cuda", "torch", "torch", "torch_error", "accept_cuda"},
              {"npu", "torch_npu", "torch_npu", "torch_npu_error", "accept_npu"}};
    for (int i = 0; i < 2; i++) {
        char *ver = i ? npu : torch;
        if (!probe_value(text, fw[i].version_key, ver, 64)) {
            ver[0] = 0;
            if (probe_value(text, fw[i].error_key, err, sizeof err))
                doctor_fact(d, "python", fw[i].name, "not importable: %s", err);
            else if (!i)
                doctor_fact(d, "python", fw[i].name, "not importable");
            continue;
        }
        int accepted = probe_value(text, fw[i].accept_key, acc, sizeof acc) && !strcmp(acc, "yes");
        char build[96] = "";
        if (!i)
            snprintf(build, sizeof build,
                     probe_value(text, "torch_cuda", cuda, sizeof cuda) && cuda[0] ? " (built for CUDA %s)"
                                                                                   : " (a CPU build: no CUDA)",
                     cuda);
        doctor_fact(d, "python", fw[i].name, "%s%s: hbmalloc.torch.use() %s", ver, build,
                    accepted ? "accepts it" : "refuses it");
        char *from = i ? d->torch_npu_from : d->torch_from;
        char *known = i ? d->torch_npu_version : d->torch_version;
        char probe[512];
        if (!known[0] && hbm_settings_check_release(i ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF", "",
                                                    i ? HBM_DIALECT_NPU : HBM_DIALECT_CUDA, ver, -1, probe,
                                                    sizeof probe) == HBM_OK) {
            /* the settings advice reads PYTORCH_*_ALLOC_CONF as this release does (a release hbmalloc knows) */
            snprintf(known, 40, "%.39s", ver);
            snprintf(from, 300, "the %s that %.200s imports", fw[i].name, path);
        }
        if (accepted)
            continue;
        finding *f = doctor_add(d, SEV_WARNING, i ? "torch-npu-refused" : "torch-refused");
        snprintf(f->title, sizeof f->title, "%s %s cannot host hbmalloc: hbmalloc.torch.use() refuses it", fw[i].name,
                 ver);
        snprintf(f->evidence, sizeof f->evidence, "%.200s imports %s %s", path, fw[i].name, ver);
        if (!i && on_npu) {
            torch_for_npu(f, ver, npu_here ? npu : NULL, on_npu, d->npu_version_inferred ? NULL : d->torch_npu_version);
            continue;
        }
        snprintf(f->why, sizeof f->why, "%.1300s", strncmp(acc, "no: ", 4) ? acc : acc + 4);
        doctor_next(f, i ? "pip install 'torch_npu>=2.1' with its torch (torch_npu 2.x.y goes with torch 2.x.y)"
                         : "pip install 'torch>=2.3' (the wheel for your CUDA; a venv's torch comes before the "
                           "system's)");
    }
    free(text);
}

void doctor_unchecked(doctor *d)
{
    if (d->runtimes_loaded || d->nnot_checked >= 2)
        return;
    snprintf(d->not_checked[d->nnot_checked++], sizeof d->not_checked[0],
             "the devices: no device runtime loads here (neither the NVIDIA driver's libcuda.so.1 nor CANN's "
             "libascendcl.so), so their memory, their virtual memory (expandable_segments) and the settings on them "
             "were not probed. Run hbmalloc doctor where the job runs (on Ascend after `source "
             "/usr/local/Ascend/ascend-toolkit/set_env.sh`), or name the runtime: HBMALLOC_LIBCUDA=PATH, "
             "HBMALLOC_LIBASCENDCL=PATH");
}
