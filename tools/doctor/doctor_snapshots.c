/*
 * doctor_snapshots.c: see doctor_snapshots.h. Owns reading several ranks' snapshots for their figures and their
 * active blocks by size and frame, the comparison (ranks.h's rule) and its report; the values come from
 * trace/pickle.c (pickle and JSON, its memory bounded by the file), what they mean from PyTorch's writer
 * (pytorch/pytorch v2.5.0, torch/csrc/cuda/memory_snapshot.cpp, _memory_snapshot_pickled: a segment's "device",
 * "total_size" and "blocks"; a block's "size", "state" and "frames"; device_traces' "action" and "size") and
 * hbmalloc's (src/io/snapshot.c, the same keys). Knows nothing of logs or the environment.
 */
#include "doctor_snapshots.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "wrap.h"
#include "trace/pickle.h"
#include "trace/ranks.h"
#include "trace/trace.h"
#include "trace/u64map.h"
#include "util.h"

#define MAX_BYTES TRACE_MAX_BYTES
#define FRAME_TEXT 300 /* a frame's text is cut there */

void doctor_snaps_init(doctor_snaps *s) { memset(s, 0, sizeof *s); }

void doctor_snaps_free(doctor_snaps *s)
{
    for (size_t i = 0; i < s->npaths; i++)
        free(s->paths[i]);
    free(s->paths);
    for (size_t i = 0; i < s->n; i++)
        free(s->r[i].g);
    free(s->r);
    for (size_t i = 0; i < s->nbad; i++)
        free(s->bad[i]);
    free(s->bad);
    for (size_t i = 0; i < s->nframes; i++)
        free(s->frames[i]);
    free(s->frames);
    if (s->frame_index) {
        u64map_free(s->frame_index);
        free(s->frame_index);
    }
    memset(s, 0, sizeof *s);
}

/* ---- the files ---- */

static int add_path(doctor_snaps *s, const char *p)
{
    char *c = strdup(p);
    if (!c || hbm__grow((void **)&s->paths, &s->cap_paths, s->npaths + 1, sizeof *s->paths)) {
        free(c);
        return -1;
    }
    s->paths[s->npaths++] = c;
    return 0;
}

static int snapshot_name(const char *name)
{
    size_t n = strlen(name);
    return (n > 7 && !strcmp(name + n - 7, ".pickle")) || (n > 4 && !strcmp(name + n - 4, ".pkl")) ||
           (n > 5 && !strcmp(name + n - 5, ".json"));
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* A folder's snapshot files, by name. */
static int add_folder(doctor_snaps *s, const char *dir, char *err, size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "%s: cannot read the folder: %s", dir, strerror(errno));
        return -1;
    }
    size_t first = s->npaths, dl = strlen(dir);
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d));) {
        if (e->d_name[0] == '.' || !snapshot_name(e->d_name))
            continue;
        char *p = malloc(dl + strlen(e->d_name) + 2);
        if (!p) {
            rc = -1;
            break;
        }
        sprintf(p, "%s%s%s", dir, dl && dir[dl - 1] == '/' ? "" : "/", e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
            rc = add_path(s, p);
        free(p);
    }
    closedir(d);
    if (rc) {
        snprintf(err, errlen, "%s: out of host memory", dir);
        return -1;
    }
    if (s->npaths == first) {
        snprintf(err, errlen, "%s: no snapshot in the folder (files named *.pickle, *.pkl or *.json)", dir);
        return -1;
    }
    qsort(s->paths + first, s->npaths - first, sizeof *s->paths, by_name);
    return 0;
}

int doctor_snaps_add(doctor_snaps *s, const char *arg, char *err, size_t errlen)
{
    struct stat st;
    if (stat(arg, &st) == 0 && S_ISDIR(st.st_mode))
        return add_folder(s, arg, err, errlen);
    if (!strpbrk(arg, "*?[") || stat(arg, &st) == 0) { /* a file (one that does not open is said when read) */
        if (add_path(s, arg)) {
            snprintf(err, errlen, "out of host memory");
            return -1;
        }
        return 0;
    }
    glob_t g;
    int rc = glob(arg, 0, NULL, &g);
    if (rc == GLOB_NOMATCH) {
        snprintf(err, errlen, "%s: no file matches", arg);
        globfree(&g);
        return -1;
    }
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; i++) {
        if (stat(g.gl_pathv[i], &st) == 0 && S_ISDIR(st.st_mode))
            rc = add_folder(s, g.gl_pathv[i], err, errlen) ? 1 : 0;
        else if (add_path(s, g.gl_pathv[i]))
            rc = GLOB_NOSPACE;
    }
    globfree(&g);
    if (rc == 1)
        return -1;
    if (rc) {
        snprintf(err, errlen, "%s: %s", arg, rc == GLOB_NOSPACE ? "out of host memory" : "cannot read a folder");
        return -1;
    }
    return 0;
}

static int note_bad(doctor_snaps *s, FILE *errs, const char *msg)
{
    char *c = strdup(msg);
    if (!c || hbm__grow((void **)&s->bad, &s->cap_bad, s->nbad + 1, sizeof *s->bad)) {
        free(c);
        return -1;
    }
    s->bad[s->nbad++] = c;
    if (errs)
        doctor_wrap(errs, DOCTOR_WIDTH, "hbmalloc doctor: ", msg);
    return 0;
}

/* ---- frames ---- */

uint64_t snaps_class(uint64_t size)
{
    if (size < 8)
        return size;
    uint64_t p = (uint64_t)1 << (63 - __builtin_clzll(size)), step = p / 4;
    return size == p ? p : (size + step - 1) / step * step;
}

uint64_t snaps_class_low(uint64_t cls)
{
    if (cls < 8)
        return cls ? cls - 1 : 0;
    uint64_t p = (uint64_t)1 << (63 - __builtin_clzll(cls));
    return cls == p ? p - p / 8 : cls - p / 4;
}

const char *snaps_frame(const doctor_snaps *s, uint32_t frame)
{
    return frame && frame <= s->nframes ? s->frames[frame - 1] : "";
}

static int ends_with(const pv *v, const char *tail)
{
    size_t m = strlen(tail);
    return v && v->type == PV_STR && v->u.str.len >= m && !memcmp(v->u.str.s + v->u.str.len - m, tail, m);
}

static int str_has(const pv *v, const char *needle)
{
    if (!v || v->type != PV_STR)
        return 0;
    size_t m = strlen(needle);
    for (uint32_t i = 0; i + m <= v->u.str.len; i++)
        if (!memcmp(v->u.str.s + i, needle, m))
            return 1;
    return 0;
}

/* Frames that say nothing of who allocated: the stack capture itself and the interpreter (torch's own filter,
 * torch/cuda/_memory_viz.py _frame_filter, v2.5.0), and the caching allocator's functions. */
static int machinery(const pv *f)
{
    static const char *const names[] = {"unwind::unwind",    "CapturedTraceback::gather",
                                        "gather_with_cpp",   "_start",
                                        "__libc_start_main", "PyEval_",
                                        "PyObject_",         "PyFunction_",
                                        "CachingAllocator"};
    static const char *const files[] = {"core/boxing",
                                        "/Register",
                                        "/Redispatch",
                                        "pythonrun.c",
                                        "Modules/main.c",
                                        "Objects/call.c",
                                        "Objects/methodobject.c",
                                        "pycore_ceval.h",
                                        "ceval.c",
                                        "cpython/abstract.h",
                                        "CachingAllocator"};
    const pv *name = pv_get(f, "name"), *file = pv_get(f, "filename");
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (str_has(name, names[i]))
            return 1;
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++)
        if (str_has(file, files[i]))
            return 1;
    return 0;
}

/* The frame that names who allocated, frames innermost first (as both writers list them): the first Python frame
 * outside torch and torch_npu (the model's own code), else the first Python frame, else the first that is not the
 * machinery, else the first. */
static const pv *user_frame(const pv *frames)
{
    uint32_t n = pv_len(frames);
    for (uint32_t k = 0; k < n; k++) {
        const pv *file = pv_get(pv_at(frames, k), "filename");
        if (ends_with(file, ".py") && !str_has(file, "/torch/") && !str_has(file, "/torch_npu/"))
            return pv_at(frames, k);
    }
    for (uint32_t k = 0; k < n; k++)
        if (ends_with(pv_get(pv_at(frames, k), "filename"), ".py"))
            return pv_at(frames, k);
    for (uint32_t k = 0; k < n; k++)
        if (!machinery(pv_at(frames, k)))
            return pv_at(frames, k);
    return n ? pv_at(frames, 0) : NULL;
}

/* A string value into out (controls as spaces), at most room - 1 bytes, cut between UTF-8 characters. */
static void put_str(char *out, size_t room, const pv *v, size_t from_last)
{
    const char *p = v && v->type == PV_STR ? v->u.str.s : "";
    size_t n = v && v->type == PV_STR ? v->u.str.len : 0;
    if (from_last) { /* a path: its last component, as torch's _frame_fmt shows it */
        for (size_t i = n; i > 0; i--)
            if (p[i - 1] == '/') {
                n -= i;
                p += i;
                break;
            }
    }
    if (n >= room)
        n = hbm__utf8_cut(p, room - 1);
    for (size_t i = 0; i < n; i++)
        out[i] = (unsigned char)p[i] < 0x20 ? ' ' : p[i];
    out[n] = 0;
}

/* "file:LINE:name" (torch's _frame_fmt, torch/cuda/_memory_viz.py v2.5.0), or the name alone when the frame has no
 * file (a label hbmalloc was given as one name). */
static void frame_text(const pv *f, char *out, size_t len)
{
    char file[120], name[FRAME_TEXT];
    int64_t line = 0;
    put_str(file, sizeof file, pv_get(f, "filename"), 1);
    put_str(name, sizeof name, pv_get(f, "name"), 0);
    pv_int(pv_get(f, "line"), &line);
    if (file[0])
        snprintf(out, len, "%s:%lld:%s", file, (long long)line, name);
    else
        snprintf(out, len, "%s", name[0] ? name : "?");
}

/* The text's frame id (1 + its index), interned; 0 when host memory ran out. */
static uint32_t intern(doctor_snaps *s, const char *text)
{
    if (!s->frame_index) {
        u64map *m = malloc(sizeof *m);
        if (!m || u64map_init(m)) {
            free(m);
            return 0;
        }
        s->frame_index = m;
    }
    u64map *m = s->frame_index;
    uint64_t h = 1469598103934665603ull;
    for (const char *p = text; *p; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    for (;; h = hbm__mix64(h + 1)) {   /* another text of the same hash: the next hash (a file can choose texts) */
        uint64_t v = u64map_get(m, h); /* 0: absent (ids start at 1) */
        if (!v)
            break;
        if (!strcmp(s->frames[v - 1], text))
            return (uint32_t)v;
    }
    char *c = strdup(text);
    if (!c || s->nframes >= UINT32_MAX - 1 ||
        hbm__grow((void **)&s->frames, &s->cap_frames, s->nframes + 1, sizeof *s->frames) ||
        u64map_put(m, h, s->nframes + 1)) {
        free(c);
        return 0;
    }
    s->frames[s->nframes++] = c;
    return (uint32_t)s->nframes;
}

/* ---- one snapshot ---- */

typedef struct blk {
    uint64_t cls, size;
    uint32_t frame;
} blk;

static int by_group(const void *pa, const void *pb)
{
    const blk *a = pa, *b = pb;
    if (a->cls != b->cls)
        return a->cls < b->cls ? 1 : -1; /* larger classes first */
    return a->frame < b->frame ? -1 : a->frame > b->frame;
}

/* The blocks into groups (sorted by class, larger first, then frame). */
static int group(snap_rank *r, blk *b, size_t nb)
{
    if (nb) /* qsort(NULL, 0, ...) is undefined */
        qsort(b, nb, sizeof *b, by_group);
    size_t ng = 0;
    for (size_t i = 0; i < nb; i++)
        ng += i == 0 || by_group(&b[i - 1], &b[i]);
    r->g = calloc(ng ? ng : 1, sizeof *r->g);
    if (!r->g)
        return -1;
    for (size_t i = 0; i < nb; i++) {
        if (i == 0 || by_group(&b[i - 1], &b[i]))
            r->g[r->ng++] = (snap_group){b[i].cls, b[i].frame, 0, 0, b[i].size, b[i].size};
        snap_group *g = &r->g[r->ng - 1];
        g->count++;
        g->bytes += b[i].size;
        g->min = b[i].size < g->min ? b[i].size : g->min;
        g->max = b[i].size > g->max ? b[i].size : g->max;
    }
    return 0;
}

typedef struct reading {
    doctor_snaps *s;
    const char *path;
    size_t len; /* the file's: it bounds the work */
    char msg[400];
    int nomem;
} reading;

static int bad_file(reading *rd, const char *msg)
{
    snprintf(rd->msg, sizeof rd->msg, "%s", msg);
    return -1;
}

/* The segments and history of one device into r. */
static int read_device(reading *rd, const pv *root, const pv *segments, const pv *traces, int device, snap_rank *r)
{
    uint64_t walked = 0;
    int64_t active = 0; /* the blocks counted: allocated, and freed while a stream still used them */
    blk *b = NULL;
    size_t nb = 0, cap = 0;
    for (uint32_t i = 0; i < pv_len(segments); i++) {
        const pv *seg = pv_at(segments, i);
        int64_t dev = 0, total = 0, asleep = 0;
        pv_int(pv_get(seg, "device"), &dev);
        if (dev != device)
            continue;
        if (pv_int(pv_get(seg, "total_size"), &total) || total < 0 || total > MAX_BYTES) {
            free(b);
            return bad_file(rd, "a segment lacks total_size, or it is out of range (0 to 2^48 bytes)");
        }
        if (!pv_int(pv_get(seg, "is_asleep"), &asleep) && asleep) /* hbmalloc's: pages given back, not reserved */
            continue;
        if (total > MAX_BYTES - r->reserved) { /* memo references can repeat a segment without end */
            free(b);
            return bad_file(rd, "the segments on one device add up to more than 2^48 bytes (no device has that)");
        }
        r->reserved += total;
        const pv *blocks = pv_get(seg, "blocks");
        walked += pv_len(blocks);
        if (walked > rd->len) { /* memo references can repeat a segment: the work stays bounded by the file */
            free(b);
            return bad_file(rd, "the segments hold more blocks than the file can describe (memo references repeat "
                                "them); refusing at over one block per byte");
        }
        if (!pv_len(blocks)) { /* no blocks listed: the segment's own figure */
            int64_t a = 0;
            if (!pv_int(pv_get(seg, "allocated_size"), &a) && a > 0 && a <= total)
                r->allocated += a; /* at most reserved: below 2^48 */
            continue;
        }
        for (uint32_t k = 0; k < pv_len(blocks); k++) {
            const pv *bl = pv_at(blocks, k), *state = pv_get(bl, "state");
            int64_t size = 0;
            if (pv_int(pv_get(bl, "size"), &size) || size < 0 || size > MAX_BYTES) {
                free(b);
                return bad_file(rd, "a block lacks its size, or it is out of range (0 to 2^48 bytes)");
            }
            if (pv_is_str(state, "inactive")) {
                r->largest_free = size > r->largest_free ? size : r->largest_free;
                continue;
            }
            int allocated = pv_is_str(state, "active_allocated");
            if (!allocated && !pv_is_str(state, "active_pending_free") && !pv_is_str(state, "active_awaiting_free"))
                continue;                    /* a state neither writer uses: not counted */
            if (size > MAX_BYTES - active) { /* so that every group's bytes, and their differences, stay in range */
                free(b);
                return bad_file(rd, "the active blocks on one device add up to more than 2^48 bytes");
            }
            active += size;
            r->allocated += allocated ? size : 0;
            const pv *frames = pv_get(bl, "frames");
            uint32_t frame = 0;
            if (pv_len(frames)) {
                frame = frames->mark; /* a frames list shared through memo references is read once */
                if (!frame) {
                    char text[FRAME_TEXT + 160];
                    frame_text(user_frame(frames), text, sizeof text);
                    if (!(frame = intern(rd->s, text))) {
                        free(b);
                        rd->nomem = 1;
                        return -1;
                    }
                    pv_set_mark(frames, frame);
                }
                r->framed++;
            }
            if (hbm__grow((void **)&b, &cap, nb + 1, sizeof *b)) {
                free(b);
                rd->nomem = 1;
                return -1;
            }
            b[nb++] = (blk){snaps_class((uint64_t)size), (uint64_t)size, frame};
            r->blocks++;
        }
    }
    /* The history backwards from the end: before a segment_alloc (or map, or a wake) there was that much less,
     * before a segment_free (or unmap, or a sleep) that much more. */
    const pv *events = traces ? pv_at(traces, (uint32_t)device) : NULL;
    int64_t cur = r->reserved;
    r->peak = cur;
    if (pv_len(events) > rd->len) {
        free(b);
        return bad_file(rd, "the history holds more events than the file can describe");
    }
    for (uint32_t i = pv_len(events); i-- > 0;) {
        const pv *e = pv_at(events, i), *act = pv_get(e, "action");
        int64_t size = 0;
        pv_int(pv_get(e, "size"), &size);
        if (size < 0 || size > MAX_BYTES)
            size = 0;
        if (pv_is_str(act, "oom"))
            r->ooms++;
        int up = pv_is_str(act, "segment_alloc") || pv_is_str(act, "segment_map") || pv_is_str(act, "wake");
        int down = pv_is_str(act, "segment_free") || pv_is_str(act, "segment_unmap") || pv_is_str(act, "sleep");
        if (!up && !down)
            continue;
        r->has_history = 1;
        cur += up ? -size : size;
        if (cur > MAX_BYTES || cur < -MAX_BYTES) { /* each step is at most 2^48: cur never overflows first */
            free(b);
            return bad_file(rd, "the history's segment events add up to more than 2^48 bytes");
        }
        r->peak = cur > r->peak ? cur : r->peak;
    }
    int64_t v;
    r->outside = -1;
    if (root && !pv_int(pv_get(root, "outside_bytes"), &v) && v >= 0 && v <= MAX_BYTES)
        r->outside = v;
    else if (root && !pv_int(pv_get(root, "device_used_bytes"), &v) && v >= 0 && v <= MAX_BYTES)
        r->outside = v > r->reserved ? v - r->reserved : 0;
    int rc = group(r, b, nb);
    free(b);
    if (rc)
        rd->nomem = 1;
    return rc;
}

/* One file: a rank per device it holds. 0, or -1 with rd->msg (or rd->nomem). */
static int read_file(reading *rd)
{
    doctor_snaps *s = rd->s;
    unsigned char *data;
    size_t len;
    char err[600];
    if (trace_slurp(rd->path, &data, &len, err, sizeof err)) {
        size_t n = strlen(rd->path); /* "PATH: cannot open: why", "PATH is not a regular file ...": after PATH */
        const char *p = strncmp(err, rd->path, n) ? err : err + n;
        return bad_file(rd, p + (*p == ' '));
    }
    size_t bom = trace_bom((const char *)data, len), lead = bom;
    while (lead < len && strchr(" \t\r\n", data[lead]))
        lead++;
    int json = lead < len && (data[lead] == '{' || data[lead] == '[');
    if (!(len > bom && data[bom] == 0x80) && !json) {
        free(data);
        return bad_file(rd, "is not a memory snapshot: --snapshot reads the pickle torch.cuda.memory._dump_snapshot "
                            "writes (torch_npu's too), the same as JSON, and hbmalloc's --snapshot files");
    }
    rd->len = len - bom;
    pickle_doc *doc = NULL;
    pv *root = (json ? json_parse : pickle_parse)(data + bom, len - bom, &doc, err, sizeof err);
    if (!root) {
        free(data);
        snprintf(rd->msg, sizeof rd->msg, "is not a memory snapshot this reads: %.300s", err);
        return -1;
    }
    const pv *segments = root, *traces = NULL, *top = NULL;
    if (root->type == PV_DICT) { /* PyTorch 2.x; 1.x dumped a bare list of segments */
        top = root;
        segments = pv_get(root, "segments");
        traces = pv_get(root, "device_traces");
    }
    int rc = 0;
    if (!segments || segments->type != PV_LIST)
        rc = bad_file(rd, "is not a PyTorch memory snapshot (no list of segments)");
    else if (traces && traces->type != PV_LIST)
        rc = bad_file(rd, "is not a PyTorch memory snapshot (device_traces is not a list)");
    uint64_t seen = 0;
    for (uint32_t i = 0; rc == 0 && i < pv_len(segments); i++) {
        int64_t dev = 0;
        pv_int(pv_get(pv_at(segments, i), "device"), &dev);
        if (dev < 0 || dev > 63)
            rc = bad_file(rd, "a segment's device is not 0 to 63");
        else
            seen |= 1ull << dev;
    }
    for (uint32_t d = 0; rc == 0 && traces && d < pv_len(traces) && d < 64; d++)
        if (pv_len(pv_at(traces, d)))
            seen |= 1ull << d;
    if (!seen)
        seen = 1; /* nothing reserved and no history: device 0, empty */
    int64_t named = -1;
    if (top && !pv_int(pv_get(top, "rank"), &named) && (named < 0 || named > 9999999))
        named = -1;
    int ndev = __builtin_popcountll(seen);
    for (int d = 0; rc == 0 && d < 64; d++) {
        if (!(seen >> d & 1))
            continue;
        if (hbm__grow((void **)&s->r, &s->cap, s->n + 1, sizeof *s->r)) {
            rd->nomem = 1;
            rc = -1;
            break;
        }
        snap_rank *r = &s->r[s->n];
        memset(r, 0, sizeof *r);
        r->path = (char *)rd->path;
        r->device = d;
        r->ndevices_in_file = ndev;
        /* A file of several devices (one process driving several) names no one rank for each. */
        r->rank = named >= 0 ? (int)named : ndev == 1 ? ranks_from_name(rd->path) : -1;
        if ((rc = read_device(rd, top, segments, traces, d, r)) == 0)
            s->n++;
        else
            free(r->g);
    }
    pickle_free(doc);
    free(data);
    return rc;
}

/* ---- the comparison ---- */

static int by_rank(const void *pa, const void *pb)
{
    const snap_rank *a = pa, *b = pb;
    if ((a->rank < 0) != (b->rank < 0))
        return a->rank < 0 ? 1 : -1; /* unknown ranks last */
    if (a->rank != b->rank)
        return a->rank < b->rank ? -1 : 1;
    return a->device < b->device ? -1 : a->device > b->device;
}

static double figure(const doctor_snaps *s, const snap_rank *r, int k)
{
    return k == 0   ? (double)(s->use_peak ? r->peak : r->reserved)
           : k == 1 ? (double)(r->reserved - r->allocated)
                    : (double)r->outside;
}

/* What r holds more of than m, group by group: the largest differences in bytes, at most SNAPS_DIFF_MAX. */
static void diff(snap_rank *r, const snap_rank *m)
{
    r->ndiff = r->ndiff_all = 0;
    r->diff_bytes = 0;
    for (size_t i = 0, j = 0; i < r->ng; i++) {
        const snap_group *g = &r->g[i];
        while (j < m->ng && (m->g[j].cls > g->cls || (m->g[j].cls == g->cls && m->g[j].frame < g->frame)))
            j++; /* both sorted as by_group sorts */
        const snap_group *h = j < m->ng && m->g[j].cls == g->cls && m->g[j].frame == g->frame ? &m->g[j] : NULL;
        int64_t db = (int64_t)g->bytes - (int64_t)(h ? h->bytes : 0);
        if (db <= 0)
            continue;
        snap_diff d = {*g, (int64_t)g->count - (int64_t)(h ? h->count : 0), db};
        r->ndiff_all++;
        r->diff_bytes += db;
        size_t at = r->ndiff < SNAPS_DIFF_MAX ? r->ndiff++ : SNAPS_DIFF_MAX;
        if (at == SNAPS_DIFF_MAX) {
            if (db <= r->diff[SNAPS_DIFF_MAX - 1].dbytes)
                continue;
            at = SNAPS_DIFF_MAX - 1;
        }
        while (at > 0 && r->diff[at - 1].dbytes < db) { /* kept in order, largest first */
            r->diff[at] = r->diff[at - 1];
            at--;
        }
        r->diff[at] = d;
    }
}

static const char *rank_name(const snap_rank *r, char *buf, size_t len)
{
    if (r->rank >= 0 && r->ndevices_in_file == 1)
        snprintf(buf, len, "rank %d", r->rank);
    else if (r->rank >= 0)
        snprintf(buf, len, "rank %d device %d", r->rank, r->device);
    else {
        const char *b = strrchr(r->path, '/');
        snprintf(buf, len, "%.120s%s", b ? b + 1 : r->path, "");
        if (r->ndevices_in_file > 1)
            snprintf(buf + strlen(buf), len - strlen(buf), " device %d", r->device);
    }
    return buf;
}

static void size_str(int64_t v, char *buf, size_t len) { hbm__format_size(v > 0 ? (uint64_t)v : 0, buf, len); }

/* "4 blocks of 2.00 GiB" or "4 blocks of 1.50 GiB to 2.00 GiB". */
static void blocks_str(const snap_diff *d, char *buf, size_t len)
{
    char a[32], b[32];
    hbm__format_size(d->g.min, a, sizeof a);
    hbm__format_size(d->g.max, b, sizeof b);
    int64_t c = d->dcount > 0 ? d->dcount : 0;
    if (d->g.min == d->g.max)
        snprintf(buf, len, "%lld more block%s of %s", (long long)c, c == 1 ? "" : "s", a);
    else
        snprintf(buf, len, "%lld more block%s of %s to %s", (long long)c, c == 1 ? "" : "s", a, b);
    if (c == 0)
        snprintf(buf, len, "larger blocks of %s to %s", a, b);
}

static void add_finding(doctor_snaps *s, doctor *d, const snap_rank *r)
{
    const snap_rank *m = &s->r[s->median];
    char name[160], mname[160], x[32], med[32], ex[32];
    rank_name(r, name, sizeof name);
    rank_name(m, mname, sizeof mname);
    int k = r->outlier & SNAP_RESERVED ? 0 : r->outlier & SNAP_UNALLOCATED ? 1 : 2;
    static const char *const what[3][2] = {{"reserved at the snapshot", "peak reserved"},
                                           {"reserved but unallocated", "reserved but unallocated"},
                                           {"outside the allocator", "outside the allocator"}};
    double v = figure(s, r, k);
    size_str((int64_t)v, x, sizeof x);
    size_str((int64_t)s->med[k], med, sizeof med);
    size_str((int64_t)(v - s->med[k]), ex, sizeof ex);
    finding *f = doctor_add(d, SEV_WARNING, "rank-outlier");
    if (!f)
        return;
    char ratio[48] = "";
    if (s->med[k] > 0)
        snprintf(ratio, sizeof ratio, ", %.2fx", v / s->med[k]);
    snprintf(f->title, sizeof f->title, "%s stands out among %zu ranks: %s %s, the median rank's %s (+%s%s)", name,
             s->n, what[k][s->use_peak && k == 0], x, med, ex, ratio);
    char cut[256];
    snprintf(cut, sizeof cut, "%.*s", (int)hbm__utf8_cut(r->path, strlen(r->path) > 200 ? 200 : strlen(r->path)),
             r->path);
    size_str(r->reserved, x, sizeof x);
    size_str(r->allocated, med, sizeof med);
    snprintf(f->evidence, sizeof f->evidence, "%s%s: reserved %s at the snapshot, allocated %s", cut,
             strlen(cut) < strlen(r->path) ? "..." : "", x, med);
    hbm__sbuf sb;
    hbm__sb_init(&sb, f->why, sizeof f->why);
    if (r->ndiff) {
        char blocks[128];
        blocks_str(&r->diff[0], blocks, sizeof blocks);
        size_str(r->diff_bytes, x, sizeof x);
        hbm__sb_printf(&sb, "It holds %s in active blocks that %s (the median) does not; the most: %s%s%s (+", x, mname,
                       blocks, r->diff[0].g.frame ? " allocated at " : "", snaps_frame(s, r->diff[0].g.frame));
        size_str(r->diff[0].dbytes, x, sizeof x);
        hbm__sb_printf(&sb, "%s; the section \"Ranks' snapshots\" lists the rest). ", x);
    } else if (k != 2) {
        hbm__sb_printf(&sb,
                       "It holds no active blocks that %s (the median) does not: the difference is cached, free "
                       "memory (fragmentation, or a cache that grew at a moment the snapshot no longer shows). ",
                       mname);
    }
    hbm__sb_printf(&sb, "A rank far above the others is the one that runs out first; its neighbours then fail in the "
                        "collectives (NCCL or HCCL errors) that hide the first cause.");
    char a[1024], b[1024];
    hbm__shell_quote(m->path, a, sizeof a);
    hbm__shell_quote(r->path, b, sizeof b);
    if (strlen(a) + strlen(b) + 80 < sizeof f->next[0])
        doctor_next(f, "both side by side, on one scale:\n$ hbmalloc view %s %s -o ranks.svg", a, b);
    if (r->ndiff && r->diff[0].g.frame)
        doctor_next(f,
                    "look at what %s does differently at %s (a pipeline stage's extra activations, the last "
                    "stage's logits and loss, a gather or checkpoint done on one rank only)",
                    name, snaps_frame(s, r->diff[0].g.frame));
    if (k == 1 && strlen(b) + 80 < sizeof f->next[0])
        doctor_next(f, "its fragmentation under other settings (replayed):\n$ hbmalloc sweep %s", b);
}

int doctor_snaps_run(doctor_snaps *s, doctor *d, FILE *errs)
{
    char msg[700];
    for (size_t i = 0; i < s->npaths; i++) {
        reading rd = {.s = s, .path = s->paths[i]};
        size_t before = s->n;
        if (read_file(&rd)) {
            if (rd.nomem) /* this file's: said as its own, the others still read */
                snprintf(rd.msg, sizeof rd.msg, ": out of host memory while reading it");
            for (size_t q = before; q < s->n; q++) /* a file is read whole or not at all */
                free(s->r[q].g);
            s->n = before;
            /* "PATH is not ...", "PATH: cannot open: ...", "PATH: a segment lacks ..." */
            const char *sep = rd.msg[0] == ':' ? "" : strncmp(rd.msg, "is ", 3) ? ": " : " ";
            snprintf(msg, sizeof msg, "%s%s%s", s->paths[i], sep, rd.msg);
            s->unreadable++;
            if (note_bad(s, errs, msg))
                return -1;
            continue;
        }
        /* Two files of one rank: the first named is kept (the same rank twice would weigh twice in the median). */
        for (size_t k = before; k < s->n; k++) {
            const snap_rank *r = &s->r[k];
            for (size_t j = 0; r->rank >= 0 && r->ndevices_in_file == 1 && j < before; j++)
                if (s->r[j].rank == r->rank && s->r[j].ndevices_in_file == 1) {
                    snprintf(msg, sizeof msg, "%s is left out: it is rank %d too, as %s is (the first named is kept)",
                             r->path, r->rank, s->r[j].path);
                    if (note_bad(s, errs, msg))
                        return -1;
                    for (size_t q = before; q < s->n; q++)
                        free(s->r[q].g);
                    s->n = before;
                    break;
                }
        }
    }
    if (s->n == 0)
        return 0;
    qsort(s->r, s->n, sizeof *s->r, by_rank);
    s->use_peak = 1;
    for (size_t i = 0; i < s->n; i++)
        s->use_peak &= s->r[i].has_history;
    double *v = malloc(s->n * sizeof *v);
    if (!v)
        return -1;
    for (int k = 0; k < 3; k++) {
        size_t n = 0;
        for (size_t i = 0; i < s->n; i++)
            if (k < 2 || s->r[i].outside >= 0)
                v[n++] = figure(s, &s->r[i], k);
        if (k == 2)
            s->noutside = n;
        s->med[k] = n ? ranks_median(v, n) : 0;
        s->mad[k] = n ? ranks_mad(v, n, s->med[k]) : 0;
        for (size_t i = 0; n >= 2 && i < s->n; i++)
            if ((k < 2 || s->r[i].outside >= 0) &&
                ranks_is_high(figure(s, &s->r[i], k), s->med[k], s->mad[k], RANKS_MIN_BYTES))
                s->r[i].outlier |= 1 << k;
    }
    free(v);
    s->median = 0;
    for (size_t i = 0; i < s->n; i++)
        if (figure(s, &s->r[i], 0) == s->med[0]) {
            s->median = i;
            break;
        }
    for (size_t i = 0; i < s->n; i++)
        if (s->r[i].outlier) {
            s->noutliers++;
            diff(&s->r[i], &s->r[s->median]);
            add_finding(s, d, &s->r[i]);
        }
    return 0;
}

/* ---- printing ---- */

static void figures(const snap_rank *r, char out[5][32])
{
    size_str(r->reserved, out[0], 32);
    size_str(r->peak, out[1], 32);
    size_str(r->allocated, out[2], 32);
    size_str(r->largest_free, out[3], 32);
    if (r->outside >= 0)
        size_str(r->outside, out[4], 32);
    else
        snprintf(out[4], 32, "unknown");
}

void doctor_snaps_text(const doctor_snaps *s, FILE *out)
{
    char line[1200], name[160], f[5][32], u[32];
    fprintf(out, "\nRanks' snapshots\n");
    for (size_t i = 0; i < s->nbad; i++)
        doctor_wrap(out, DOCTOR_WIDTH, "  not read: ", s->bad[i]);
    if (s->n == 0) {
        doctor_wrap(out, DOCTOR_WIDTH, "  ", "No snapshot could be read: nothing to compare.");
        return;
    }
    /* 99 columns at most (DOCTOR_WIDTH), no space at a line's end */
    fprintf(out, "  %-12s %-13s %-11s %-20s %-12s %-11s %-4s %s\n", "rank", s->use_peak ? "peak reserved" : "reserved",
            "allocated", "unallocated (share)", "largest free", "outside", "OOMs", "outlier");
    for (size_t i = 0; i < s->n; i++) {
        const snap_rank *r = &s->r[i];
        figures(r, f);
        size_str(r->reserved - r->allocated, u, sizeof u);
        char frag[48], ooms[24];
        snprintf(frag, sizeof frag, "%s (%.1f%%)", u,
                 r->reserved ? 100.0 * (double)(r->reserved - r->allocated) / (double)r->reserved : 0.0);
        snprintf(ooms, sizeof ooms, "%llu", (unsigned long long)r->ooms);
        int n = snprintf(line, sizeof line, "  %-12.12s %-13s %-11s %-20s %-12s %-11s %-4s %s",
                         rank_name(r, name, sizeof name), s->use_peak ? f[1] : f[0], f[2], frag, f[3], f[4], ooms,
                         r->outlier ? "yes" : "");
        while (n > 0 && (size_t)n < sizeof line && line[n - 1] == ' ')
            line[--n] = 0;
        fprintf(out, "%s\n", line);
    }
    for (size_t i = 0; i < s->n; i++) {
        snprintf(line, sizeof line, "%s (device %d): %s", rank_name(&s->r[i], name, sizeof name), s->r[i].device,
                 s->r[i].path);
        doctor_wrap(out, DOCTOR_WIDTH, "  file of ", line);
    }
    doctor_wrap(out, DOCTOR_WIDTH, "  ",
                s->use_peak ? "Reserved: the peak over each snapshot's recorded history (its segment events)."
                            : "Reserved: at the snapshot (not every snapshot has a history of segment events to "
                              "give a peak).");
    if (s->noutside < s->n)
        doctor_wrap(out, DOCTOR_WIDTH, "  ",
                    "Outside: unknown where a snapshot does not say how much of the device is used outside the "
                    "allocator (outside_bytes or device_used_bytes).");
    if (s->n == 1) {
        doctor_wrap(out, DOCTOR_WIDTH, "  ",
                    "One rank's snapshot only: nothing to compare it with. Give every rank's (a folder, or a pattern "
                    "such as --snapshot 'dumps/*.pickle').");
        return;
    }
    if (!s->noutliers) {
        size_str((int64_t)s->med[0], f[0], 32);
        snprintf(line, sizeof line,
                 "No outlier: no rank is above the median (%s) by more than 20%% and 1 GiB and three spreads.", f[0]);
        doctor_wrap(out, DOCTOR_WIDTH, "  ", line);
        return;
    }
    for (size_t i = 0; i < s->n; i++) {
        const snap_rank *r = &s->r[i];
        if (!r->outlier)
            continue;
        char mname[160];
        rank_name(&s->r[s->median], mname, sizeof mname);
        rank_name(r, name, sizeof name);
        size_str(r->diff_bytes, u, sizeof u);
        fprintf(out, "\n  Outlier %s:", name);
        for (int k = 0, said = 0; k < 3; k++)
            if (r->outlier >> k & 1) {
                size_str((int64_t)figure(s, r, k), f[0], 32);
                size_str((int64_t)s->med[k], f[1], 32);
                fprintf(out, "%s%s %s against %s", said++ ? "; " : " ",
                        k == 0   ? (s->use_peak ? "peak reserved" : "reserved")
                        : k == 1 ? "unallocated"
                                 : "outside",
                        f[0], f[1]);
            }
        fputc('\n', out);
        if (!r->ndiff) {
            snprintf(line, sizeof line, "It holds no active blocks that %s (the median rank) does not.", mname);
            doctor_wrap(out, DOCTOR_WIDTH, "    ", line);
            continue;
        }
        int framed = 0;
        for (size_t k = 0; k < r->ndiff; k++)
            framed |= r->diff[k].g.frame != 0;
        snprintf(line, sizeof line,
                 "What it holds that %s (the median rank) does not, by size%s: %s in %zu group%s%s%s", mname,
                 framed ? " and allocating frame" : "", u, r->ndiff_all, r->ndiff_all == 1 ? "" : "s",
                 r->ndiff_all > r->ndiff ? ", the largest listed" : "",
                 framed ? ""
                        : " (no frames recorded: torch.cuda.memory._record_memory_history() before the run records "
                          "them)");
        doctor_wrap(out, DOCTOR_WIDTH, "    ", line);
        for (size_t k = 0; k < r->ndiff; k++) {
            const snap_diff *d = &r->diff[k];
            char blocks[128], pre[48];
            blocks_str(d, blocks, sizeof blocks);
            size_str(d->dbytes, u, sizeof u);
            snprintf(pre, sizeof pre, "    +%-11s ", u);
            snprintf(line, sizeof line, "%s%s%s", blocks, d->g.frame ? " at " : "", snaps_frame(s, d->g.frame));
            doctor_wrap(out, DOCTOR_WIDTH, pre, line);
        }
    }
}

static void json_rank(const doctor_snaps *s, const snap_rank *r, FILE *out)
{
    fputs("{\"file\":", out);
    hbm__json_str(out, r->path);
    fprintf(out,
            ",\"rank\":%d,\"device\":%d,\"reserved\":%lld,\"peak_reserved\":%lld,\"peak_from_history\":%s,"
            "\"allocated\":%lld,\"unallocated\":%lld,\"fragmentation\":%.4f,\"largest_free\":%lld,",
            r->rank, r->device, (long long)r->reserved, (long long)r->peak, r->has_history ? "true" : "false",
            (long long)r->allocated, (long long)(r->reserved - r->allocated),
            r->reserved ? (double)(r->reserved - r->allocated) / (double)r->reserved : 0.0, (long long)r->largest_free);
    if (r->outside >= 0)
        fprintf(out, "\"outside\":%lld,", (long long)r->outside);
    else
        fputs("\"outside\":null,", out);
    fprintf(out, "\"ooms\":%llu,\"active_blocks\":%llu,\"blocks_with_frames\":%llu,\"outlier\":[",
            (unsigned long long)r->ooms, (unsigned long long)r->blocks, (unsigned long long)r->framed);
    static const char *const names[3] = {"reserved", "unallocated", "outside"};
    for (int k = 0, c = 0; k < 3; k++)
        if (r->outlier >> k & 1)
            fprintf(out, "%s\"%s\"", c++ ? "," : "", names[k]);
    fputs("]", out);
    if (r->outlier) {
        fprintf(out, ",\"more_than_median\":{\"bytes\":%lld,\"groups\":%zu,\"largest\":[", (long long)r->diff_bytes,
                r->ndiff_all);
        for (size_t k = 0; k < r->ndiff; k++) {
            const snap_diff *d = &r->diff[k];
            fprintf(out,
                    "%s{\"size_low\":%llu,\"size_high\":%llu,\"min\":%llu,\"max\":%llu,\"blocks\":%lld,"
                    "\"bytes\":%lld,\"frame\":",
                    k ? "," : "", (unsigned long long)snaps_class_low(d->g.cls), (unsigned long long)d->g.cls,
                    (unsigned long long)d->g.min, (unsigned long long)d->g.max, (long long)d->dcount,
                    (long long)d->dbytes);
            if (d->g.frame)
                hbm__json_str(out, snaps_frame(s, d->g.frame));
            else
                fputs("null", out);
            fputc('}', out);
        }
        fputs("]}", out);
    }
    fputc('}', out);
}

void doctor_snaps_json(const doctor_snaps *s, FILE *out)
{
    fprintf(out, "{\"compared\":\"%s\",\"ranks\":[", s->use_peak ? "peak_reserved" : "reserved");
    for (size_t i = 0; i < s->n; i++) {
        if (i)
            fputc(',', out);
        json_rank(s, &s->r[i], out);
    }
    fprintf(out, "],\"median\":{\"rank\":%d,\"reserved\":%.0f,\"unallocated\":%.0f,\"outside\":",
            s->n ? s->r[s->median].rank : -1, s->med[0], s->med[1]);
    if (s->noutside >= 2)
        fprintf(out, "%.0f", s->med[2]);
    else
        fputs("null", out);
    fprintf(out, "},\"outliers\":%zu,\"not_read\":[", s->noutliers);
    for (size_t i = 0; i < s->nbad; i++) {
        if (i)
            fputc(',', out);
        hbm__json_str(out, s->bad[i]);
    }
    fputs("]}", out);
}
