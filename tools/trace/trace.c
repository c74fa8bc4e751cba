/*
 * trace.c: the trace builder (keys -> slots) and the reader of hbmalloc's own
 * text trace format (docs/TRACE_FORMAT.md):
 *
 *   hbmtrace 1            optional header
 *   # comment
 *   a <id> <size> [<stream>]   allocate
 *   f <id>                     free (completed)
 *   p <id>                     free requested, other streams still using the block
 *   e                          empty_cache
 *   s                          a step ends
 *   u <pool>                   the allocations that follow go into private pool <pool> (0: the default pools)
 *   z <pool> <bytes> <tag> [backup]   the pool falls asleep (0: a pool the trace does not place)
 *   w <pool> <bytes> <tag> [backup]   it wakes
 *
 * Every malformed line is rejected with its line and column; so is an
 * allocation of a live id or a free of an id that is not live. Owns parsing
 * and id -> slot resolution only.
 */
#include "trace.h"
#include "u64map.h"

#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FILE ((size_t)1 << 32) /* 4 GiB of text at most */

void trace_init(trace *t) { memset(t, 0, sizeof *t); }

void trace_free(trace *t)
{
    free(t->ev);
    free(t->rec.seed_segments);
    free(t->rec.seed_blocks);
    free(t->pools);
    trace_meta_free(&t->meta);
    memset(t, 0, sizeof *t);
}

/* ---- the builder ---- */

struct trace_builder {
    trace *t;
    u64map ids;      /* id -> slot | line << 32 */
    uint64_t *dense; /* tb_new_dense: ids 0 .. ndense-1 in an array (8 bytes an id, no hashing), DEAD: not live */
    size_t ndense;
    uint32_t *free_slots;
    size_t nfree, cap_free;
    uint32_t next_slot;
    uint8_t *pending; /* per slot: its free was requested (tb_pending), not completed */
    size_t cap_pending;
    hbm_stream streams[64];
    size_t nstreams;
};

#define DEAD UINT64_MAX /* never slot | line << 32: a slot is below 2^28 */

static int push(trace *t, trace_event e)
{
    if (hbm__grow((void **)&t->ev, &t->cap, t->n + 1, sizeof *t->ev))
        return -1;
    t->ev[t->n++] = e;
    return 0;
}

trace_builder *tb_new(trace *t)
{
    trace_builder *b = calloc(1, sizeof *b);
    if (!b)
        return NULL;
    b->t = t;
    if (u64map_init(&b->ids)) {
        free(b);
        return NULL;
    }
    return b;
}

trace_builder *tb_new_dense(trace *t, size_t nkeys)
{
    trace_builder *b = calloc(1, sizeof *b);
    if (!b || !(b->dense = malloc((nkeys ? nkeys : 1) * sizeof *b->dense))) {
        free(b);
        return NULL;
    }
    memset(b->dense, 0xff, (nkeys ? nkeys : 1) * sizeof *b->dense);
    b->ndense = nkeys;
    b->t = t;
    return b;
}

/* The cell of key (u64map's, or the dense array's index): 1 when it is live, 0 when not, -1 for a key past a dense
 * builder's range (never live). */
static int id_find(trace_builder *b, uint64_t key, size_t *i)
{
    if (b->dense) {
        *i = (size_t)key;
        return key < b->ndense ? b->dense[key] != DEAD : -1;
    }
    *i = u64map_find(&b->ids, key);
    return b->ids.used[*i];
}

static uint64_t id_val(const trace_builder *b, size_t i) { return b->dense ? b->dense[i] : b->ids.vals[i]; }

static int id_put(trace_builder *b, size_t i, uint64_t key, uint64_t val)
{
    if (b->dense) {
        b->dense[i] = val;
        return 0;
    }
    return u64map_put_at(&b->ids, i, key, val);
}

static void id_del(trace_builder *b, size_t i)
{
    if (b->dense)
        b->dense[i] = DEAD;
    else
        u64map_del_at(&b->ids, i);
}

int tb_is_live(trace_builder *b, uint64_t key)
{
    size_t i;
    return id_find(b, key, &i) == 1;
}

size_t tb_probes(const trace_builder *b) { return b->ids.probes; }

int tb_alloc(trace_builder *b, uint64_t key, uint64_t size, hbm_stream stream, uint32_t line, uint32_t *line_of_live)
{
    size_t i;
    int live = id_find(b, key, &i);
    if (live == 1) {
        if (line_of_live)
            *line_of_live = (uint32_t)(id_val(b, i) >> 32);
        return -1;
    }
    if (live < 0)
        return -2;
    trace_event e = {.size = size, .stream = stream, .kind = EV_ALLOC, .line = line};
    if (!b->nfree && b->next_slot >= TRACE_MAX_SLOTS)
        return -2;
    e.slot = b->nfree ? b->free_slots[--b->nfree] : b->next_slot++;
    if (push(b->t, e))
        return -2;
    if (id_put(b, i, key, e.slot | (uint64_t)line << 32))
        return -2;
    size_t s = 0;
    while (s < b->nstreams && b->streams[s] != stream)
        s++;
    if (s == b->nstreams && b->nstreams < sizeof b->streams / sizeof b->streams[0])
        b->streams[b->nstreams++] = stream;
    b->t->allocs++;
    return 0;
}

int tb_free(trace_builder *b, uint64_t key, uint32_t line)
{
    size_t i;
    if (id_find(b, key, &i) != 1)
        return -1;
    uint32_t slot = (uint32_t)id_val(b, i);
    trace_event e = {.kind = EV_FREE, .slot = slot, .line = line, .pended = slot < b->cap_pending && b->pending[slot]};
    if (hbm__grow((void **)&b->free_slots, &b->cap_free, b->nfree + 1, sizeof *b->free_slots))
        return -2;
    if (push(b->t, e))
        return -2;
    if (e.pended)
        b->pending[slot] = 0;
    id_del(b, i);
    b->free_slots[b->nfree++] = e.slot;
    b->t->frees++;
    return 0;
}

int tb_pending(trace_builder *b, uint64_t key, uint32_t line)
{
    size_t i;
    if (id_find(b, key, &i) != 1)
        return -1;
    uint32_t slot = (uint32_t)id_val(b, i);
    if (slot < b->cap_pending && b->pending[slot])
        return -3;
    if (slot >= b->cap_pending) {
        size_t old = b->cap_pending;
        if (hbm__grow((void **)&b->pending, &b->cap_pending, (size_t)slot + 1, 1))
            return -2;
        memset(b->pending + old, 0, b->cap_pending - old);
    }
    trace_event e = {.kind = EV_PENDING, .slot = slot, .line = line};
    if (push(b->t, e))
        return -2;
    b->pending[slot] = 1;
    b->t->pending++;
    return 0;
}

int tb_empty_cache(trace_builder *b, uint32_t line)
{
    trace_event e = {.kind = EV_EMPTY_CACHE, .line = line};
    return push(b->t, e) ? -2 : 0;
}

int tb_step(trace_builder *b, uint32_t line)
{
    trace_event e = {.kind = EV_STEP, .line = line};
    return push(b->t, e) ? -2 : 0;
}

int tb_nap(trace_builder *b, int wake, uint32_t pool, uint64_t bytes, uint32_t tag, int backup, uint32_t line)
{
    if (tag >= TRACE_MAX_SLOTS)
        return -2; /* (tags are the trace's texts: past 2^28 distinct ones, the reader's memory bound came first) */
    trace_event e = {.size = bytes,
                     .stream = pool,
                     .slot = tag,
                     .kind = wake ? EV_WAKE : EV_SLEEP,
                     .pended = backup != 0,
                     .line = line};
    if (push(b->t, e))
        return -2;
    *(wake ? &b->t->wakes : &b->t->sleeps) += 1;
    b->t->unplaced += pool == 0;
    return 0;
}

int tb_pool(trace_builder *b, uint32_t pool, uint32_t line)
{
    trace_event e = {.stream = pool, .kind = EV_POOL, .line = line};
    return push(b->t, e) ? -2 : 0;
}

void tb_finish(trace_builder *b)
{
    b->t->nslots = b->next_slot;
    b->t->nstreams = b->nstreams;
    u64map_free(&b->ids);
    free(b->dense);
    free(b->free_slots);
    free(b->pending);
    free(b);
}

/* ---- the text format ---- */

typedef struct reader {
    const char *name;
    const char *p, *end, *line_start;
    uint32_t line;
    char *err;
    size_t errlen;
} reader;

static int rfail(reader *r, const char *at, const char *msg)
{
    snprintf(r->err, r->errlen, "%s:%u:%zu: %s", r->name, r->line, (size_t)(at - r->line_start) + 1, msg);
    return -1;
}

static void skip_blank(reader *r)
{
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\t'))
        r->p++;
}

static int at_eol(const reader *r) { return r->p >= r->end || *r->p == '\n' || *r->p == '\r' || *r->p == '#'; }

const char *trace_next_line(const char *p, const char *end)
{
    while (p < end && *p != '\n' && *p != '\r')
        p++;
    if (p < end && *p++ == '\r' && p < end && *p == '\n')
        p++;
    return p;
}

size_t trace_bom(const char *data, size_t len) { return len >= 3 && !memcmp(data, "\xef\xbb\xbf", 3) ? 3 : 0; }

/* A decimal unsigned 64-bit number. */
static int read_u64(reader *r, uint64_t *out, const char *what)
{
    char msg[96];
    skip_blank(r);
    const char *start = r->p;
    uint64_t v = 0;
    if (at_eol(r)) {
        snprintf(msg, sizeof msg, "expected %s, found the end of the line", what);
        return rfail(r, start, msg);
    }
    if (*r->p == '-') {
        snprintf(msg, sizeof msg, "%s must not be negative", what);
        return rfail(r, start, msg);
    }
    while (r->p < r->end && *r->p >= '0' && *r->p <= '9') {
        unsigned d = (unsigned)(*r->p - '0');
        if (v > (UINT64_MAX - d) / 10) {
            snprintf(msg, sizeof msg, "%s does not fit in 64 bits", what);
            return rfail(r, start, msg);
        }
        v = v * 10 + d;
        r->p++;
    }
    if (r->p == start || !(at_eol(r) || *r->p == ' ' || *r->p == '\t')) {
        snprintf(msg, sizeof msg, "expected %s as a decimal number", what);
        return rfail(r, r->p == start ? start : r->p, msg);
    }
    *out = v;
    return 0;
}

/* The private pools a text trace names: each number's index in t->pools, and whether it sleeps (the line that put
 * it to sleep, 0: awake). */
typedef struct pools_seen {
    u64map index; /* number -> index + 1 */
    uint32_t *asleep;
    size_t cap, cap_pools;
    uint32_t current; /* where allocations go now (u): index + 1, 0: the default pools */
} pools_seen;

/* Pool `number`'s index + 1 in t->pools (added when new); 0 for number 0; -1 when host memory ran out. */
static int64_t pool_of(trace *t, pools_seen *ps, uint64_t number, uint32_t line)
{
    if (!number)
        return 0;
    size_t i = u64map_find(&ps->index, number);
    if (ps->index.used[i])
        return (int64_t)ps->index.vals[i];
    if (hbm__grow((void **)&t->pools, &ps->cap_pools, t->npools + 1, sizeof *t->pools) ||
        hbm__grow((void **)&ps->asleep, &ps->cap, t->npools + 1, sizeof *ps->asleep) ||
        u64map_put_at(&ps->index, i, number, t->npools + 1))
        return -1;
    t->pools[t->npools] = (trace_pool){number, 0, 0, line};
    ps->asleep[t->npools] = 0;
    return (int64_t)++t->npools;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* A pool's tag: a word, %XX escapes decoded (docs/TRACE_FORMAT.md), "-" when the trace does not say. Its index in
 * t->meta.texts (0: not said) into *tag; 0, -1 (message set) or -2 (out of memory). */
static int read_tag(reader *r, trace *t, uint32_t *tag)
{
    char buf[64];
    size_t n = 0;
    skip_blank(r);
    const char *start = r->p;
    if (at_eol(r))
        return rfail(r, start, "expected the pool's tag ('-' when not known), found the end of the line");
    for (; !at_eol(r) && *r->p != ' ' && *r->p != '\t'; r->p++) {
        char c = *r->p;
        if (c == '%') {
            int hi = r->end - r->p > 2 ? hexval(r->p[1]) : -1, lo = hi >= 0 ? hexval(r->p[2]) : -1;
            if (hi < 0 || lo < 0 || (hi | lo) == 0)
                return rfail(r, r->p, "a tag's '%' is followed by two hex digits (a byte, not 00)");
            c = (char)(hi << 4 | lo);
            r->p += 2;
        }
        if (n + 1 >= sizeof buf)
            return rfail(r, start, "a tag is at most 63 bytes (hbm_pool_tag's limit)");
        buf[n++] = c;
    }
    buf[n] = 0;
    if (!strcmp(buf, "-") && r->p - start == 1) {
        *tag = 0;
        return 0;
    }
    return (*tag = trace_meta_intern(t, buf)) ? 0 : -2;
}

/* `z` or `w`: <pool> <bytes> <tag> [backup]. 0, -1 (message set) or -2. */
static int read_nap(reader *r, trace *t, trace_builder *b, pools_seen *ps, int wake)
{
    uint64_t number, bytes;
    uint32_t tag;
    skip_blank(r);
    const char *pool_at = r->p;
    if (read_u64(r, &number, "a pool number (0: not known)") || read_u64(r, &bytes, "the pool's bytes"))
        return -1;
    int rc = read_tag(r, t, &tag);
    if (rc)
        return rc;
    skip_blank(r);
    int backup = 0;
    if (!at_eol(r)) {
        const char *w = r->p;
        while (!at_eol(r) && *r->p != ' ' && *r->p != '\t')
            r->p++;
        if (r->p - w != 6 || memcmp(w, "backup", 6))
            return rfail(r, w, "expected 'backup' or the end of the line");
        backup = 1;
    }
    int64_t k = pool_of(t, ps, number, r->line);
    if (k < 0)
        return -2;
    char msg[200];
    if (k) {
        trace_pool *p = &t->pools[k - 1];
        if (!tag)
            return rfail(r, pool_at, "a pool the trace names needs its tag (a replay tags it so)");
        if (p->tag && (p->tag != tag || p->backup != backup)) {
            snprintf(msg, sizeof msg, "pool %llu is '%.64s'%s (line %u): a pool keeps its tag and its backup",
                     (unsigned long long)number, t->meta.texts[p->tag], p->backup ? " with backup" : "", p->line);
            return rfail(r, pool_at, msg);
        }
        if (!p->tag) {
            p->tag = tag;
            p->backup = backup;
            p->line = r->line;
        }
        ps->asleep[k - 1] = wake ? 0 : r->line;
    }
    return tb_nap(b, wake, (uint32_t)k, bytes, tag, backup, r->line);
}

int trace_read_text_mem(const char *name, const char *data, size_t len, trace *t, char *err, size_t errlen)
{
    size_t bom = trace_bom(data, len); /* a UTF-8 byte order mark (editors on Windows write one) is not text */
    reader r = {name, data + bom, data + len, data + bom, 0, err, errlen};
    int rc = -1;
    trace_init(t);
    t->format = "hbmtrace";
    trace_builder *b = tb_new(t);
    pools_seen ps = {0};
    if (!b || u64map_init(&ps.index))
        goto nomem;
    while (r.p < r.end) {
        r.line++;
        r.line_start = r.p;
        skip_blank(&r);
        const char *op = r.p;
        if (at_eol(&r)) {
            /* blank line or comment */
        } else if (r.line_start == data + bom && r.end - r.p >= 8 && !memcmp(r.p, "hbmtrace", 8)) {
            r.p += 8;
            uint64_t version;
            if (read_u64(&r, &version, "the format version"))
                goto out;
            if (version != 1) {
                rfail(&r, op, "unsupported hbmtrace version (this reader knows version 1)");
                goto out;
            }
        } else if (strchr("afpesuzw", *op) && (r.p + 1 >= r.end || r.p[1] == ' ' || r.p[1] == '\t' || r.p[1] == '\n' ||
                                               r.p[1] == '\r' || r.p[1] == '#')) {
            r.p++;
            int res = 0;
            if (*op == 'e' || *op == 's') {
                res = *op == 'e' ? tb_empty_cache(b, r.line) : tb_step(b, r.line);
            } else if (*op == 'z' || *op == 'w') {
                if ((res = read_nap(&r, t, b, &ps, *op == 'w')) == -1)
                    goto out;
            } else if (*op == 'u') {
                uint64_t number;
                if (read_u64(&r, &number, "a pool number (0: the default pools)"))
                    goto out;
                int64_t k = pool_of(t, &ps, number, r.line);
                res = k < 0 ? -2 : tb_pool(b, (uint32_t)k, r.line);
                ps.current = k < 0 ? 0 : (uint32_t)k;
            } else {
                uint64_t id, size = 0, stream = 0;
                const char *id_at = (skip_blank(&r), r.p);
                if (read_u64(&r, &id, "a block id"))
                    goto out;
                char msg[160];
                if (*op == 'a') {
                    if (read_u64(&r, &size, "a size in bytes"))
                        goto out;
                    skip_blank(&r);
                    if (!at_eol(&r) && read_u64(&r, &stream, "a stream number"))
                        goto out;
                    if (ps.current && ps.asleep[ps.current - 1]) {
                        snprintf(msg, sizeof msg,
                                 "allocation into pool %llu, asleep since line %u (its 'w' wakes it; "
                                 "'u 0' allocates into the default pools)",
                                 (unsigned long long)t->pools[ps.current - 1].number, ps.asleep[ps.current - 1]);
                        rfail(&r, op, msg);
                        goto out;
                    }
                    uint32_t live_line = 0;
                    res = tb_alloc(b, id, size, stream, r.line, &live_line);
                    if (res == -1) {
                        snprintf(msg, sizeof msg, "block id %llu is already live (allocated on line %u)",
                                 (unsigned long long)id, live_line);
                        rfail(&r, id_at, msg);
                        goto out;
                    }
                } else if (*op == 'p') {
                    res = tb_pending(b, id, r.line);
                    if (res == -1 || res == -3) {
                        snprintf(msg, sizeof msg,
                                 res == -1 ? "pending free of block id %llu, which is not live"
                                           : "pending free of block id %llu, whose free is pending "
                                             "already (its 'f' completes it)",
                                 (unsigned long long)id);
                        rfail(&r, id_at, msg);
                        goto out;
                    }
                } else {
                    res = tb_free(b, id, r.line);
                    if (res == -1) {
                        snprintf(msg, sizeof msg, "free of block id %llu, which is not live", (unsigned long long)id);
                        rfail(&r, id_at, msg);
                        goto out;
                    }
                }
            }
            if (res == -2)
                goto nomem;
            skip_blank(&r);
            if (!at_eol(&r)) {
                rfail(&r, r.p,
                      "unexpected text after the event (events are: a ID SIZE [STREAM], f ID, p ID, e, s, "
                      "u POOL, z POOL BYTES TAG [backup], w POOL BYTES TAG [backup])");
                goto out;
            }
        } else {
            rfail(&r, op,
                  "unknown event (events are: a ID SIZE [STREAM], f ID, p ID, e, s, u POOL, z POOL BYTES TAG "
                  "[backup], w POOL BYTES TAG [backup]; '#' starts a comment)");
            goto out;
        }
        r.p = trace_next_line(r.p, r.end); /* LF, CRLF or CR: a CR alone ends a line too, never drops its rest */
    }
    rc = 0;
    goto out;
nomem:
    snprintf(err, errlen, "%s: out of host memory reading the trace", name);
out:
    if (b)
        tb_finish(b);
    u64map_free(&ps.index);
    free(ps.asleep);
    if (rc)
        trace_free(t);
    return rc;
}

const char *trace_not_a_file(int fd)
{
    struct stat sb;
    if (fstat(fd, &sb) || S_ISREG(sb.st_mode) || S_ISFIFO(sb.st_mode))
        return NULL;
    return S_ISDIR(sb.st_mode) ? "a directory" : S_ISCHR(sb.st_mode) || S_ISBLK(sb.st_mode) ? "a device" : "a socket";
}

int trace_slurp(const char *path, unsigned char **data, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    const char *what = trace_not_a_file(fileno(f));
    if (what) { /* /dev/zero would be read up to the size limit: refused before reading */
        snprintf(err, errlen, "%s is not a regular file (%s): give a trace file (a pipe is read too)", path, what);
        fclose(f);
        return -1;
    }
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 1 << 20;
            if (cap > MAX_FILE) {
                snprintf(err, errlen, "%s: larger than 4 GiB", path);
                free(buf);
                fclose(f);
                return -1;
            }
            unsigned char *nb = realloc(buf, cap + 1);
            if (!nb) {
                snprintf(err, errlen, "%s: out of host memory", path);
                free(buf);
                fclose(f);
                return -1;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        snprintf(err, errlen, "%s: read error", path);
        free(buf);
        return -1;
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return 0;
}

int trace_read_text(const char *path, trace *t, char *err, size_t errlen)
{
    unsigned char *data;
    size_t len;
    if (trace_slurp(path, &data, &len, err, errlen))
        return -1;
    int rc = trace_read_text_mem(path, (const char *)data, len, t, err, errlen);
    free(data);
    return rc;
}
