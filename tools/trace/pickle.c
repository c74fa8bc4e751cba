/*
 * pickle.c: see pickle.h. Owns parsing of the snapshot pickle subset and of
 * JSON into the same values (one node model, one memory bound, one index of
 * large dicts); knows nothing of what the values mean.
 *
 * Why JSON is parsed here rather than by a packaged library (jansson, json-c):
 * their trees cost 40 to 70 bytes per value of their own, charged by no one,
 * and a snapshot's arrays of small numbers take 2 to 3 bytes of file per value,
 * so a hostile or merely large file would pass the readers' bound of 16 bytes
 * of memory per byte (docs/RELIABILITY.md, #28); here every node is charged
 * against 8 bytes per byte while it is read and the parse stops where that
 * passes. It also keeps the tool free of a library the main job would need.
 */
#include "pickle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 512 /* containers open at once (MARK nesting and dict/list building) */
#define INDEX_MIN 16  /* dicts of more pairs get a sorted index of their keys */
#define SMALL_MIN (-1)
#define SMALL_MAX 255 /* integers shared as one node each (BININT1 and -1) */

_Static_assert(sizeof(pv) == 24, "a node is 24 bytes: the memory bound counts on it");

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    unsigned char mem[];
} chunk;

/* The parse's memory (nodes, item arrays, its stack and memo) is bounded by the file: past MEM_PER_BYTE bytes per
 * byte, above MEM_FLOOR, the file is refused while it is read, not after. Real snapshots take 3 to 4; a 1-byte
 * opcode that makes a container (']', TUPLE1) takes a 24-byte node, so files of them are refused (issue #28). */
#define MEM_PER_BYTE 8
#define MEM_FLOOR ((size_t)1 << 20)

struct pickle_doc {
    chunk *chunks;
    size_t used, limit; /* bytes of the parse's memory, and the bound */
    int over;           /* an allocation was refused for the bound, not for want of host memory */
};

/* Counts n more bytes against the bound: 0, or -1 (over it) */
static int charge(pickle_doc *d, size_t n)
{
    if (n > d->limit - d->used) {
        d->over = 1;
        return -1;
    }
    d->used += n;
    return 0;
}

static void *arena(pickle_doc *d, size_t n)
{
    n = (n + 7) & ~(size_t)7; /* pointers, int64 and double need no more */
    if (charge(d, n))
        return NULL;
    if (!d->chunks || d->chunks->used + n > d->chunks->cap) {
        size_t cap = n > (1 << 20) ? n : (1 << 20);
        chunk *c = malloc(sizeof *c + cap);
        if (!c)
            return NULL;
        c->next = d->chunks;
        c->used = 0;
        c->cap = cap;
        d->chunks = c;
    }
    void *p = d->chunks->mem + d->chunks->used;
    d->chunks->used += n;
    return p;
}

void pickle_free(pickle_doc *d)
{
    if (!d)
        return;
    for (chunk *c = d->chunks, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(d);
}

typedef struct parser {
    const unsigned char *p, *start, *end;
    pickle_doc *doc;
    pv **stack;
    size_t sp, cap;
    size_t *marks;
    size_t nmarks;
    pv **memo;
    size_t nmemo, cap_memo;
    pv **big; /* dicts that passed INDEX_MIN pairs: indexed at STOP */
    size_t nbig, cap_big;
    pv *shared[SMALL_MAX - SMALL_MIN + 1 + 3]; /* small ints, then None, False, True */
    char *err;
    size_t errlen;
    int failed;
} parser;

static pv *perr(parser *ps, size_t at, const char *fmt, const char *arg)
{
    if (!ps->failed) {
        char msg[200];
        snprintf(msg, sizeof msg, fmt, arg);
        snprintf(ps->err, ps->errlen, "offset %zu: %s", at, msg);
        ps->failed = 1;
    }
    return NULL;
}

/* Why memory was refused: the file's bound, or the host. */
static const char *nomem(const parser *ps)
{
    return ps->doc->over ? "the file's values need more than 8 bytes of memory per byte of file (small containers "
                           "nested or repeated, or a memo index far past the values): refusing"
                         : "out of host memory";
}

static pv *node(parser *ps, pv_type t)
{
    pv *v = arena(ps->doc, sizeof *v);
    if (!v)
        return perr(ps, (size_t)(ps->p - ps->start), "%s", nomem(ps));
    memset(v, 0, sizeof *v);
    v->type = (uint8_t)t;
    return v;
}

/* Immutable values that recur (None, booleans, small integers) are one node each. */
static pv *shared(parser *ps, pv_type t, int64_t i)
{
    size_t k = t == PV_NONE   ? SMALL_MAX - SMALL_MIN + 1
               : t == PV_BOOL ? SMALL_MAX - SMALL_MIN + 2 + (size_t)i
                              : (size_t)(i - SMALL_MIN);
    if (!ps->shared[k] && (ps->shared[k] = node(ps, t)))
        ps->shared[k]->u.i = i;
    return ps->shared[k];
}

static int push(parser *ps, pv *v)
{
    if (!v)
        return -1;
    if (ps->sp == ps->cap) {
        size_t cap = ps->cap ? ps->cap * 2 : 256;
        pv **s = charge(ps->doc, (cap - ps->cap) * sizeof *s) ? NULL : realloc(ps->stack, cap * sizeof *s);
        if (!s) {
            perr(ps, (size_t)(ps->p - ps->start), "%s", nomem(ps));
            return -1;
        }
        ps->stack = s;
        ps->cap = cap;
    }
    ps->stack[ps->sp++] = v;
    return 0;
}

static int need(parser *ps, size_t n, size_t at, const char *what)
{
    if ((size_t)(ps->end - ps->p) < n) {
        perr(ps, at, "file ends inside %s (truncated)", what);
        return -1;
    }
    return 0;
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* Item arrays live in the arena too: a batch (APPENDS, SETITEMS, TUPLE) sizes the
 * array exactly; growing past it copies into a new array at least twice the size
 * (at most twice the final size is wasted, nothing needs freeing). */
static int seq_reserve(parser *ps, pv *seq, size_t extra, size_t at)
{
    size_t need = (size_t)seq->u.seq.n + extra;
    if (need <= seq->u.seq.cap)
        return 0;
    size_t cap = seq->type == PV_TUPLE ? need /* filled once, never grown */
                 : seq->u.seq.cap      ? (size_t)seq->u.seq.cap * 2
                                       : 4;
    if (cap < need)
        cap = need;
    if (cap > (size_t)(ps->end - ps->start) * 2 + 8 || cap > UINT32_MAX - 1) {
        perr(ps, at, "%s", "container larger than the file can describe");
        return -1;
    }
    pv **items = arena(ps->doc, cap * sizeof *items);
    if (!items) {
        perr(ps, at, "%s", nomem(ps));
        return -1;
    }
    if (seq->u.seq.n)
        memcpy(items, seq->u.seq.items, seq->u.seq.n * sizeof *items);
    seq->u.seq.items = items;
    seq->u.seq.cap = (uint32_t)cap;
    return 0;
}

static int seq_add(parser *ps, pv *seq, pv *item, size_t at)
{
    if (seq_reserve(ps, seq, 1, at))
        return -1;
    seq->u.seq.items[seq->u.seq.n++] = item;
    if (seq->type == PV_DICT && seq->u.seq.n == 2 * INDEX_MIN + 1) { /* passed INDEX_MIN pairs, once */
        if (ps->nbig == ps->cap_big) {
            size_t cap = ps->cap_big ? ps->cap_big * 2 : 64;
            pv **big = charge(ps->doc, (cap - ps->cap_big) * sizeof *big) ? NULL : realloc(ps->big, cap * sizeof *big);
            if (!big) {
                perr(ps, at, "%s", nomem(ps));
                return -1;
            }
            ps->big = big;
            ps->cap_big = cap;
        }
        ps->big[ps->nbig++] = seq;
    }
    return 0;
}

/* Adds stack[from..sp) to seq in order. */
static void seq_add_all(parser *ps, pv *seq, size_t from, size_t at)
{
    if (seq_reserve(ps, seq, ps->sp - from, at))
        return;
    for (size_t i = from; i < ps->sp && !ps->failed; i++)
        seq_add(ps, seq, ps->stack[i], at);
}

/* Key order of the index: string keys by (length, bytes), then pair position (so the
 * last of equal keys, the one Python keeps, sorts last); other keys after all strings. */
typedef struct sort_key {
    const char *s;
    uint32_t len, pos, str;
} sort_key;

static int key_cmp(const void *a, const void *b)
{
    const sort_key *x = a, *y = b;
    if (x->str != y->str)
        return x->str ? -1 : 1;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    int c = x->str ? memcmp(x->s, y->s, x->len) : 0;
    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/* Gives a big dict a sorted index of its pairs, stored after its items. */
static int index_dict(parser *ps, pv *d)
{
    uint32_t pairs = d->u.seq.n / 2;
    size_t bytes = (size_t)d->u.seq.n * sizeof(pv *) + (size_t)pairs * sizeof(uint32_t);
    pv **items = arena(ps->doc, bytes);
    if (!items)
        return -1;
    memcpy(items, d->u.seq.items, d->u.seq.n * sizeof *items);
    uint32_t *order = (uint32_t *)(items + d->u.seq.n);
    sort_key *keys = malloc((size_t)pairs * sizeof *keys);
    if (!keys)
        return -1;
    for (uint32_t i = 0; i < pairs; i++) {
        const pv *k = items[2 * i];
        keys[i] = k->type == PV_STR ? (sort_key){k->u.str.s, k->u.str.len, i, 1} : (sort_key){NULL, 0, i, 0};
    }
    qsort(keys, pairs, sizeof *keys, key_cmp);
    for (uint32_t i = 0; i < pairs; i++)
        order[i] = keys[i].pos;
    free(keys);
    d->u.seq.items = items;
    d->u.seq.cap = d->u.seq.n;
    d->indexed = 1;
    return 0;
}

static size_t pop_mark(parser *ps, size_t at)
{
    if (!ps->nmarks) {
        perr(ps, at, "%s", "no MARK to close");
        return (size_t)-1;
    }
    return ps->marks[--ps->nmarks];
}

static const char *opname(unsigned char op)
{
    switch (op) {
    case 'c': return "GLOBAL (would import a module)";
    case 0x93: return "STACK_GLOBAL (would import a module)";
    case 'R': return "REDUCE (would call a function)";
    case 'b': return "BUILD (would set object state)";
    case 0x81: return "NEWOBJ (would construct an object)";
    case 0x92: return "NEWOBJ_EX (would construct an object)";
    case 'i': return "INST (would construct an object)";
    case 'o': return "OBJ (would construct an object)";
    case 'P': return "PERSID (persistent id)";
    case 'Q': return "BINPERSID (persistent id)";
    default: return NULL;
    }
}

/* A parse of data begun (both formats): its document, bounded by the file, and its stack of open containers. 0, or
 * -1 with err set. */
static int parse_begin(parser *ps, const unsigned char *data, size_t len, char *err, size_t errlen)
{
    memset(ps, 0, sizeof *ps);
    ps->p = ps->start = data;
    ps->end = data + len;
    ps->err = err;
    ps->errlen = errlen;
    ps->doc = calloc(1, sizeof *ps->doc);
    ps->marks = malloc(MAX_DEPTH * sizeof *ps->marks);
    if (!ps->doc || !ps->marks) {
        snprintf(err, errlen, "out of host memory");
        return -1;
    }
    ps->doc->limit = len > (SIZE_MAX - MEM_FLOOR) / MEM_PER_BYTE ? SIZE_MAX : MEM_PER_BYTE * len + MEM_FLOOR;
    return 0;
}

/* Its end: the root and its document to the caller, or NULL and nothing kept. */
static pv *parse_end(parser *ps, pv *result, pickle_doc **docp)
{
    free(ps->stack);
    free(ps->marks);
    free(ps->memo);
    free(ps->big);
    if (!result) {
        pickle_free(ps->doc);
        return NULL;
    }
    *docp = ps->doc;
    return result;
}

/* ---- the opcodes, one family each (pickle_parse dispatches); each stops the parse through perr on a fault ---- */

/* BININT, BININT1, BININT2. */
static void op_int(parser *ps, unsigned char op, size_t at)
{
    int n = op == 'J' ? 4 : op == 'K' ? 1 : 2;
    if (need(ps, (size_t)n, at, "an integer"))
        return;
    int64_t i = op == 'J' ? (int64_t)(int32_t)(uint32_t)le(ps->p, 4) : (int64_t)le(ps->p, n);
    ps->p += n;
    pv *v = i >= SMALL_MIN && i <= SMALL_MAX ? shared(ps, PV_INT, i) : node(ps, PV_INT);
    if (v)
        v->u.i = i;
    push(ps, v);
}

/* LONG1: n bytes, little-endian two's complement. */
static void op_long1(parser *ps, size_t at)
{
    if (need(ps, 1, at, "LONG1"))
        return;
    unsigned n = *ps->p++;
    if (need(ps, n, at, "LONG1"))
        return;
    /* Python writes an unsigned 64-bit value with the top bit set (e.g. a C++ frame's line
     * SIZE_MAX) as 9 bytes, the last a zero sign byte: keep its 64 bits. */
    if (n > 9 || (n == 9 && ps->p[8] != 0)) {
        perr(ps, at, "%s", "integer wider than 64 bits");
        return;
    }
    uint64_t u = n ? le(ps->p, n == 9 ? 8 : (int)n) : 0;
    if (n && n < 8 && (ps->p[n - 1] & 0x80))
        u |= ~(uint64_t)0 << (8 * n);
    ps->p += n;
    pv *v = node(ps, PV_INT);
    if (v)
        v->u.i = (int64_t)u;
    push(ps, v);
}

/* BINFLOAT: big-endian double. */
static void op_float(parser *ps, size_t at)
{
    if (need(ps, 8, at, "BINFLOAT"))
        return;
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = u << 8 | ps->p[i];
    ps->p += 8;
    pv *v = node(ps, PV_FLOAT);
    if (v)
        memcpy(&v->u.f, &u, sizeof u);
    push(ps, v);
}

/* BINUNICODE(8), SHORT_BINUNICODE, BINBYTES(8), SHORT_BINBYTES: read as strings, pointing into the file. */
static void op_string(parser *ps, unsigned char op, size_t at)
{
    int w = (op == 'X' || op == 'B') ? 4 : (op == 0x8c || op == 'C') ? 1 : 8;
    if (need(ps, (size_t)w, at, "a string length"))
        return;
    uint64_t n = le(ps->p, w);
    ps->p += w;
    if (n > (uint64_t)(ps->end - ps->p) || n > UINT32_MAX) {
        perr(ps, at, "%s", "string longer than the rest of the file (truncated or corrupt)");
        return;
    }
    pv *v = node(ps, PV_STR);
    if (v) {
        v->u.str.s = (const char *)ps->p;
        v->u.str.len = (uint32_t)n;
    }
    ps->p += n;
    push(ps, v);
}

/* MEMOIZE, BINPUT, LONG_BINPUT: the top of the stack kept at an index (the next one, or the one given). */
static void op_memo_put(parser *ps, unsigned char op, size_t at)
{
    size_t idx = ps->nmemo;
    if (op != 0x94) {
        int w = op == 'q' ? 1 : 4;
        if (need(ps, (size_t)w, at, "a memo index"))
            return;
        idx = (size_t)le(ps->p, w);
        ps->p += w;
    }
    if (!ps->sp) {
        perr(ps, at, "%s", "memo store with an empty stack");
        return;
    }
    if (idx > (size_t)(ps->end - ps->start)) {
        perr(ps, at, "%s", "memo index larger than the file can use");
        return;
    }
    if (idx >= ps->cap_memo) {
        size_t cap = ps->cap_memo ? ps->cap_memo : 1024;
        while (cap <= idx)
            cap *= 2;
        pv **m = charge(ps->doc, (cap - ps->cap_memo) * sizeof *m) ? NULL : realloc(ps->memo, cap * sizeof *m);
        if (!m) {
            perr(ps, at, "%s", nomem(ps));
            return;
        }
        memset(m + ps->cap_memo, 0, (cap - ps->cap_memo) * sizeof *m);
        ps->memo = m;
        ps->cap_memo = cap;
    }
    ps->memo[idx] = ps->stack[ps->sp - 1];
    if (idx >= ps->nmemo)
        ps->nmemo = idx + 1;
}

/* BINGET, LONG_BINGET. */
static void op_memo_get(parser *ps, unsigned char op, size_t at)
{
    int w = op == 'h' ? 1 : 4;
    if (need(ps, (size_t)w, at, "a memo index"))
        return;
    size_t idx = (size_t)le(ps->p, w);
    ps->p += w;
    if (idx >= ps->nmemo || !ps->memo[idx]) {
        perr(ps, at, "%s", "memo get of an index never stored");
        return;
    }
    push(ps, ps->memo[idx]);
}

/* APPENDS, SETITEMS, TUPLE: the items above the last mark, into the container below it (or a new tuple). */
static void op_from_mark(parser *ps, unsigned char op, size_t at)
{
    size_t m = pop_mark(ps, at);
    if (m == (size_t)-1)
        return;
    if (op == 't') {
        pv *v = node(ps, PV_TUPLE);
        if (v)
            seq_add_all(ps, v, m, at);
        ps->sp = m;
        push(ps, v);
        return;
    }
    pv *target = m > 0 ? ps->stack[m - 1] : NULL;
    if (!target || target->type != (op == 'e' ? PV_LIST : PV_DICT) || (op == 'u' && (ps->sp - m) % 2)) {
        perr(ps, at, "%s", op == 'e' ? "APPENDS without a list" : "SETITEMS without a dict or pairs");
        return;
    }
    seq_add_all(ps, target, m, at);
    ps->sp = m;
}

/* APPEND, SETITEM: one item (or pair) into the container below it. */
static void op_add(parser *ps, unsigned char op, size_t at)
{
    size_t n = op == 'a' ? 1 : 2;
    if (ps->sp < n + 1 || ps->stack[ps->sp - n - 1]->type != (op == 'a' ? PV_LIST : PV_DICT)) {
        perr(ps, at, "%s", op == 'a' ? "APPEND without a list" : "SETITEM without a dict");
        return;
    }
    for (size_t k = n; k > 0; k--)
        seq_add(ps, ps->stack[ps->sp - n - 1], ps->stack[ps->sp - k], at);
    ps->sp -= n;
}

/* TUPLE1..3. */
static void op_tuple_n(parser *ps, unsigned char op, size_t at)
{
    size_t n = (size_t)(op - 0x84);
    if (ps->sp < n) {
        perr(ps, at, "%s", "TUPLE with too few items on the stack");
        return;
    }
    pv *v = node(ps, PV_TUPLE);
    if (v)
        seq_add_all(ps, v, ps->sp - n, at);
    ps->sp -= n;
    push(ps, v);
}

/* STOP: the one value left is the document's root, its large dicts indexed. */
static pv *op_stop(parser *ps, size_t at)
{
    pv *result = NULL;
    if (ps->sp != 1)
        perr(ps, at, "%s", "STOP with other than one value on the stack");
    else
        result = ps->stack[0];
    for (size_t i = 0; result && i < ps->nbig; i++)
        if (index_dict(ps, ps->big[i]))
            result = perr(ps, at, "%s", nomem(ps));
    return result;
}

/* PROTO, FRAME, MARK: the stream's framing, nothing pushed. */
static void op_framing(parser *ps, unsigned char op, size_t at)
{
    if (op == 0x80) {
        if (need(ps, 1, at, "PROTO"))
            return;
        if (*ps->p < 2 || *ps->p > 5)
            perr(ps, at, "%s", "unsupported pickle protocol (2 to 5 are read)");
        ps->p++;
    } else if (op == 0x95) { /* an 8-byte length; the content follows inline */
        if (need(ps, 8, at, "FRAME"))
            return;
        if (le(ps->p, 8) > (uint64_t)(ps->end - ps->p - 8))
            perr(ps, at, "%s", "FRAME longer than the rest of the file (truncated)");
        ps->p += 8;
    } else if (ps->nmarks == MAX_DEPTH) {
        perr(ps, at, "%s", "nesting deeper than 512 levels");
    } else {
        ps->marks[ps->nmarks++] = ps->sp;
    }
}

pv *pickle_parse(const unsigned char *data, size_t len, pickle_doc **docp, char *err, size_t errlen)
{
    parser ps;
    *docp = NULL;
    pv *result = NULL;
    if (parse_begin(&ps, data, len, err, errlen))
        return parse_end(&ps, NULL, docp);
    if (len < 2 || data[0] != 0x80) {
        perr(&ps, 0, "%s", "not a pickle (it does not start with a PROTO opcode)");
        return parse_end(&ps, NULL, docp);
    }
    while (!ps.failed) {
        size_t at = (size_t)(ps.p - ps.start);
        if (ps.p >= ps.end) {
            perr(&ps, at, "%s", "file ends before STOP (truncated)");
            break;
        }
        unsigned char op = *ps.p++;
        switch (op) {
        case 0x80: /* PROTO */
        case 0x95: /* FRAME */
        case '(': /* MARK */ op_framing(&ps, op, at); break;
        case '}': push(&ps, node(&ps, PV_DICT)); break;
        case ']': push(&ps, node(&ps, PV_LIST)); break;
        case ')': push(&ps, node(&ps, PV_TUPLE)); break;
        case 'N': push(&ps, shared(&ps, PV_NONE, 0)); break;
        case 0x88:
        case 0x89: push(&ps, shared(&ps, PV_BOOL, op == 0x88)); break;
        case 'J':
        case 'K':
        case 'M': op_int(&ps, op, at); break;
        case 0x8a: op_long1(&ps, at); break;
        case 'G': op_float(&ps, at); break;
        case 'X':
        case 0x8c:
        case 0x8d:
        case 'B':
        case 'C':
        case 0x8e: op_string(&ps, op, at); break;
        case 0x94: /* MEMOIZE */
        case 'q':
        case 'r': op_memo_put(&ps, op, at); break;
        case 'h':
        case 'j': op_memo_get(&ps, op, at); break;
        case 'a': /* APPEND */
        case 's': /* SETITEM */ op_add(&ps, op, at); break;
        case 'e': /* APPENDS */
        case 'u': /* SETITEMS */
        case 't': /* TUPLE */ op_from_mark(&ps, op, at); break;
        case 0x85:
        case 0x86:
        case 0x87: op_tuple_n(&ps, op, at); break;
        case '.': /* STOP */ return parse_end(&ps, op_stop(&ps, at), docp);
        default: {
            const char *name = opname(op);
            char what[64];
            snprintf(what, sizeof what, "opcode 0x%02x", op);
            perr(&ps, at, name ? "refusing opcode %s: snapshots are plain data" : "unsupported %s", name ? name : what);
            break;
        }
        }
    }
    return parse_end(&ps, result, docp);
}

/* ---- JSON ---- */

/* A JSON error at p: "line L, column C: message" (the first one only). NULL. */
static pv *jerr(parser *ps, const unsigned char *p, const char *msg)
{
    if (ps->failed)
        return NULL;
    size_t line = 1, col = 1;
    for (const unsigned char *q = ps->start; q < p && q < ps->end; q++, col++)
        if (*q == '\n') {
            line++;
            col = 0;
        }
    snprintf(ps->err, ps->errlen, "line %zu, column %zu: %s", line, col, msg);
    ps->failed = 1;
    return NULL;
}

static void json_blank(parser *ps)
{
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex4(const unsigned char *p)
{
    int v = 0;
    for (int k = 0; k < 4; k++) {
        int d = p[k] >= '0' && p[k] <= '9'   ? p[k] - '0'
                : p[k] >= 'a' && p[k] <= 'f' ? p[k] - 'a' + 10
                : p[k] >= 'A' && p[k] <= 'F' ? p[k] - 'A' + 10
                                             : -1;
        if (d < 0)
            return -1;
        v = v << 4 | d;
    }
    return v;
}

static size_t utf8(unsigned char *out, unsigned cp)
{
    if (cp < 0x80)
        return out[0] = (unsigned char)cp, 1;
    if (cp < 0x800)
        return out[0] = (unsigned char)(0xc0 | cp >> 6), out[1] = (unsigned char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000) {
        out[0] = (unsigned char)(0xe0 | cp >> 12);
        out[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
        out[2] = (unsigned char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (unsigned char)(0xf0 | cp >> 18);
    out[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
    out[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
    out[3] = (unsigned char)(0x80 | (cp & 0x3f));
    return 4;
}

/* A string at ps->p (its opening quote): the file's bytes when it has no escape, else a decoded copy (never longer:
 * an escape of 2, 6 or 12 characters gives 1 to 4 bytes; a lone surrogate U+FFFD). */
static pv *json_string(parser *ps)
{
    const unsigned char *open = ps->p++, *s = ps->p;
    int escaped = 0;
    while (ps->p < ps->end && *ps->p != '"') {
        if (*ps->p < 0x20)
            return jerr(ps, ps->p, "a control character inside a string (JSON escapes them)");
        if (*ps->p == '\\') {
            escaped = 1;
            ps->p++;
        }
        ps->p++;
    }
    if (ps->p >= ps->end)
        return jerr(ps, open, "the file ends inside this string (truncated)");
    size_t n = (size_t)(ps->p - s);
    ps->p++;
    if (n > UINT32_MAX)
        return jerr(ps, open, "a string longer than 4 GiB");
    pv *v = node(ps, PV_STR);
    if (!v)
        return NULL;
    if (!escaped) {
        v->u.str.s = (const char *)s;
        v->u.str.len = (uint32_t)n;
        return v;
    }
    unsigned char *out = arena(ps->doc, n ? n : 1);
    if (!out)
        return jerr(ps, open, nomem(ps));
    size_t k = 0;
    for (const unsigned char *q = s; q < s + n;) {
        if (*q != '\\') {
            out[k++] = *q++;
            continue;
        }
        const unsigned char *e = q++;
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *m = *q ? strchr(from, *q) : NULL;
        if (m) {
            out[k++] = (unsigned char)to[m - from];
            q++;
            continue;
        }
        int cp = *q == 'u' && s + n - q >= 5 ? hex4(q + 1) : -1;
        if (cp < 0)
            return jerr(ps, e, "an unknown escape in a string (JSON has \\\" \\\\ \\/ \\b \\f \\n \\r \\t \\uXXXX)");
        q += 5;
        if (cp >= 0xd800 && cp < 0xdc00 && s + n - q >= 6 && q[0] == '\\' && q[1] == 'u') {
            int lo = hex4(q + 2);
            if (lo >= 0xdc00 && lo < 0xe000) {
                cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
                q += 6;
            }
        }
        if (cp >= 0xd800 && cp < 0xe000)
            cp = 0xfffd; /* a lone surrogate: no character */
        k += utf8(out + k, (unsigned)cp);
    }
    v->u.str.s = (const char *)out;
    v->u.str.len = (uint32_t)k;
    return v;
}

/* A number (integers that fit in 64 bits as integers, as Python writes them; an unsigned one past 2^63 keeps its
 * 64 bits, as the pickle reader's LONG1), or true, false, null, NaN, Infinity, -Infinity (Python's json writes the
 * last three). */
static pv *json_scalar(parser *ps)
{
    const unsigned char *s = ps->p;
    static const struct {
        const char *word;
        int type;
        int64_t i;
    } words[] = {{"true", PV_BOOL, 1}, {"false", PV_BOOL, 0},     {"null", PV_NONE, 0},
                 {"NaN", PV_FLOAT, 0}, {"Infinity", PV_FLOAT, 1}, {"-Infinity", PV_FLOAT, -1}};
    for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
        size_t n = strlen(words[k].word);
        if ((size_t)(ps->end - s) >= n && !memcmp(s, words[k].word, n)) {
            ps->p += n;
            if (words[k].type != PV_FLOAT)
                return shared(ps, (pv_type)words[k].type, words[k].i);
            pv *v = node(ps, PV_FLOAT);
            if (v)
                v->u.f = words[k].i ? words[k].i * (double)INFINITY : (double)NAN;
            return v;
        }
    }
    const unsigned char *q = s + (s < ps->end && *s == '-');
    int digits = 0, frac = 0;
    while (q < ps->end && *q >= '0' && *q <= '9')
        q++, digits++;
    if (!digits || (digits > 1 && q[-digits] == '0'))
        return jerr(ps, s, "expected a value (a string, number, object, array, true, false or null)");
    if (q < ps->end && *q == '.') {
        frac = 1;
        const unsigned char *d = ++q;
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
        if (q == d)
            return jerr(ps, s, "a number's '.' must be followed by digits");
    }
    if (q < ps->end && (*q == 'e' || *q == 'E')) {
        frac = 1;
        q += q + 1 < ps->end && (q[1] == '+' || q[1] == '-') ? 2 : 1;
        const unsigned char *d = q;
        while (q < ps->end && *q >= '0' && *q <= '9')
            q++;
        if (q == d)
            return jerr(ps, s, "a number's exponent must have digits");
    }
    ps->p = q;
    char buf[64];
    if ((size_t)(q - s) >= sizeof buf)
        return jerr(ps, s, "a number of more than 63 characters");
    memcpy(buf, s, (size_t)(q - s));
    buf[q - s] = 0;
    if (frac) {
        pv *v = node(ps, PV_FLOAT);
        if (v)
            v->u.f = strtod(buf, NULL);
        return v;
    }
    uint64_t u = 0;
    for (const char *c = buf + (buf[0] == '-'); *c; c++) {
        if (u > (UINT64_MAX - (uint64_t)(*c - '0')) / 10)
            return jerr(ps, s, "an integer wider than 64 bits");
        u = u * 10 + (uint64_t)(*c - '0');
    }
    if (buf[0] == '-' && u > (uint64_t)INT64_MAX + 1)
        return jerr(ps, s, "an integer wider than 64 bits");
    int64_t i = buf[0] == '-' ? (int64_t)(0 - u) : (int64_t)u;
    pv *v = (buf[0] != '-' && u <= SMALL_MAX) || i == -1 ? shared(ps, PV_INT, i) : node(ps, PV_INT);
    if (v)
        v->u.i = i;
    return v;
}

pv *json_parse(const unsigned char *data, size_t len, pickle_doc **docp, char *err, size_t errlen)
{
    parser ps;
    uint8_t *is_dict = malloc(MAX_DEPTH); /* the open containers' kinds */
    *docp = NULL;
    pv *result = NULL;
    if (parse_begin(&ps, data, len, err, errlen) || !is_dict) {
        snprintf(err, errlen, "out of host memory");
        goto done;
    }
    /* A value; then, inside a container, ',' and the next (a dict's: a key and ':' first) or its end. */
    for (int want_key = 0, first = 0; !ps.failed;) {
        json_blank(&ps);
        if (ps.p >= ps.end) {
            jerr(&ps, ps.p,
                 ps.nmarks ? "the file ends inside an object or array (truncated)" : "no value: the file is blank");
            break;
        }
        const unsigned char *at = ps.p;
        if (first && (*at == '}' || *at == ']')) { /* an empty container, or (want_key) a dict's end after '{' */
        } else if (want_key) {
            if (*at != '"') {
                jerr(&ps, at, "expected a key (a string) in this object");
                break;
            }
            if (push(&ps, json_string(&ps)))
                break;
            json_blank(&ps);
            if (ps.p >= ps.end || *ps.p != ':') {
                jerr(&ps, ps.p, "expected ':' after the key");
                break;
            }
            ps.p++;
            want_key = 0;
            first = 0;
            continue;
        } else if (*at == '{' || *at == '[') {
            if (ps.nmarks == MAX_DEPTH) {
                jerr(&ps, at, "nesting deeper than 512 levels");
                break;
            }
            is_dict[ps.nmarks] = *at == '{';
            ps.marks[ps.nmarks++] = ps.sp;
            ps.p++;
            want_key = *at == '{';
            first = 1;
            continue;
        } else if (push(&ps, *at == '"' ? json_string(&ps) : json_scalar(&ps))) {
            break;
        }
        first = 0;
        /* After a value (or at the close of an empty container): close what ends here, then ',' or the end. */
        for (;;) {
            json_blank(&ps);
            if (!ps.nmarks) {
                if (ps.p != ps.end)
                    jerr(&ps, ps.p, "text after the value");
                else
                    result = ps.stack[0];
                goto finish;
            }
            int dict = is_dict[ps.nmarks - 1];
            if (ps.p >= ps.end) {
                jerr(&ps, ps.p, "the file ends inside an object or array (truncated)");
                goto finish;
            }
            if (*ps.p == (dict ? '}' : ']')) {
                size_t m = ps.marks[--ps.nmarks];
                pv *v = node(&ps, dict ? PV_DICT : PV_LIST);
                if (v)
                    seq_add_all(&ps, v, m, (size_t)(ps.p - ps.start));
                ps.sp = m;
                ps.p++;
                if (push(&ps, v) || ps.failed)
                    goto finish;
                continue;
            }
            if (*ps.p == ',') {
                ps.p++;
                want_key = dict;
                break;
            }
            jerr(&ps, ps.p, dict ? "expected ',' or '}' in this object" : "expected ',' or ']' in this array");
            goto finish;
        }
    }
finish:
    for (size_t i = 0; result && i < ps.nbig; i++)
        if (index_dict(&ps, ps.big[i]))
            result = jerr(&ps, ps.p, nomem(&ps));
done:
    free(is_dict);
    return parse_end(&ps, result, docp);
}

const pv *pv_get(const pv *d, const char *key)
{
    if (!d || d->type != PV_DICT)
        return NULL;
    if (!d->indexed) {
        for (uint32_t i = d->u.seq.n / 2; i-- > 0;)
            if (pv_is_str(d->u.seq.items[2 * i], key))
                return d->u.seq.items[2 * i + 1];
        return NULL;
    }
    /* Binary search for the last pair whose key equals `key` (string keys sort by length, bytes). */
    const uint32_t *order = (const uint32_t *)(d->u.seq.items + d->u.seq.n);
    size_t len = strlen(key);
    uint32_t lo = 0, hi = d->u.seq.n / 2; /* first position whose key is greater than `key` */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        const pv *k = d->u.seq.items[2 * order[mid]];
        int c = k->type != PV_STR     ? 1
                : k->u.str.len != len ? (k->u.str.len < len ? -1 : 1)
                                      : memcmp(k->u.str.s, key, len);
        if (c <= 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo && pv_is_str(d->u.seq.items[2 * order[lo - 1]], key) ? d->u.seq.items[2 * order[lo - 1] + 1] : NULL;
}

int pv_is_str(const pv *v, const char *s)
{
    size_t n = strlen(s);
    return v && v->type == PV_STR && v->u.str.len == n && !memcmp(v->u.str.s, s, n);
}

int pv_int(const pv *v, int64_t *out)
{
    if (!v || (v->type != PV_INT && v->type != PV_BOOL))
        return -1;
    *out = v->u.i;
    return 0;
}

uint32_t pv_len(const pv *v)
{
    if (!v || (v->type != PV_LIST && v->type != PV_TUPLE && v->type != PV_DICT))
        return 0;
    return v->type == PV_DICT ? v->u.seq.n / 2 : v->u.seq.n;
}

const pv *pv_at(const pv *v, uint32_t i)
{
    return v && (v->type == PV_LIST || v->type == PV_TUPLE) && i < v->u.seq.n ? v->u.seq.items[i] : NULL;
}

void pv_set_mark(const pv *v, uint32_t mark)
{
    if (v)
        ((pv *)v)->mark = mark; /* the node is the document's, not a string in the file: writable */
}
