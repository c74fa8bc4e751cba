/*
 * conf.c: parses PyTorch allocator settings strings.
 *
 * Owns the grammar (key:value[,key:value]*, list values [a:b,c:d,>:e]), the
 * keys of the two dialects (CUDA: PYTORCH_CUDA_ALLOC_CONF; NPU:
 * PYTORCH_NPU_ALLOC_CONF), value ranges, cross-key rules and where a string
 * comes from. Must not touch devices or allocator state.
 *
 * A string in a PYTORCH_* variable is read as the framework release reads it
 * (releases.h): the strict lexArgs/consumeToken parsers of PyTorch <= 2.9 and
 * torch_npu <= 2.12, or c10's ConfigTokenizer after them, with their
 * leniency: std::stoi/stoull/stod read a number's prefix ("12abc" is 12, "-5"
 * wraps), spaces inside a word are dropped ("1 28" is 128), and the tokenizer
 * does not check separators. Each lenient reading is accepted, as the
 * framework accepts it, and named in the warnings, because a setting read as
 * something else is the bug users chase. HBMALLOC_CONF and explicit strings
 * are hbmalloc's own and read strictly: a whole number, a ':' after each key,
 * a ',' between entries, no word split by spaces. docs/CONFIGURATION.md, "The cases", gives the
 * cases and the source lines.
 */
#include "conf/conf.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conf/releases.h"
#include "util/env.h"
#include "util/util.h"

#define MAX_TOKENS 256
#define MAX_TOKEN_LEN 128

typedef struct tok {
    char s[MAX_TOKEN_LEN];
    size_t pos; /* offset of the token's first character in the original string */
    bool glued; /* spaces inside the word were dropped */
} tok;

typedef struct lexed {
    tok t[MAX_TOKENS];
    size_t n;
} lexed;

/* How a string is read. */
typedef struct rules {
    const hbm__release *rel;
    bool strict;    /* hbmalloc's own rules (HBMALLOC_CONF, explicit strings) */
    bool tokenizer; /* c10 ConfigTokenizer */
    int vmm;        /* the device's virtual memory: 1, 0, -1 unknown */
} rules;

static int is_sep(char c) { return c == ',' || c == ':' || c == '[' || c == ']'; }

/* Whitespace the framework drops: ConfigTokenizer every isspace, lexArgs only ' '. */
static bool dropped(const rules *r, char c)
{
    if (r->strict)
        return false;
    return r->tokenizer ? isspace((unsigned char)c) : c == ' ';
}

static hbm_status lex(const char *s, const rules *r, lexed *lx, char *err, size_t errlen)
{
    lx->n = 0;
    size_t i = 0;
    while (s[i]) {
        if (isspace((unsigned char)s[i]) && (r->strict || dropped(r, s[i]))) {
            i++;
            continue;
        }
        if (lx->n == MAX_TOKENS) {
            snprintf(err, errlen, "settings string has more than %d tokens", MAX_TOKENS);
            return HBM_ERR_CONF;
        }
        tok *t = &lx->t[lx->n++];
        t->pos = i;
        t->glued = false;
        size_t len = 0;
        if (is_sep(s[i])) {
            t->s[len++] = s[i++];
            t->s[len] = 0;
            continue;
        }
        for (;;) {
            if (!s[i] || is_sep(s[i]))
                break;
            if (isspace((unsigned char)s[i]) && (r->strict || dropped(r, s[i]))) {
                size_t j = i;
                while (s[j] && isspace((unsigned char)s[j]) && (r->strict || dropped(r, s[j])))
                    j++;
                if (r->strict || !s[j] || is_sep(s[j])) {
                    i = j;
                    break;
                }
                t->glued = true; /* the framework joins "1 28" into "128" */
                i = j;
                continue;
            }
            unsigned char c = (unsigned char)s[i];
            if ((c < 0x20 && !isspace(c)) || c >= 0x7f) {
                snprintf(err, errlen, "settings string has a non-printable byte 0x%02x at character %zu", c, i);
                return HBM_ERR_CONF;
            }
            if (len == MAX_TOKEN_LEN - 1) {
                snprintf(err, errlen, "settings string has a word longer than %d characters at character %zu",
                         MAX_TOKEN_LEN - 1, t->pos);
                return HBM_ERR_CONF;
            }
            t->s[len++] = s[i++];
        }
        t->s[len] = 0;
    }
    return HBM_OK;
}

/* ---- value parsers: each returns 0, or -1 after writing err ---- */

typedef struct ctx {
    const char *key;
    const tok *val;
    const rules *r;
    hbm__conf *cf;
    char *err;
    size_t errlen;
    bool *max_split_set; /* max_split_size_mb was given (the NPU dialect's rule with expandable segments) */
} ctx;

static int fail(const ctx *c, const char *allowed)
{
    snprintf(c->err, c->errlen, "invalid setting '%s:%s' (character %zu): %s", c->key, c->val->s, c->val->pos, allowed);
    return -1;
}

static void warn(hbm__conf *cf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(hbm__conf *cf, const char *fmt, ...)
{
    hbm__sbuf sb = {cf->warnings, sizeof cf->warnings, strlen(cf->warnings)};
    va_list ap;
    va_start(ap, fmt);
    char line[400];
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    hbm__sb_printf(&sb, "%s\n", line);
}

static const char *who(const ctx *c) { return c->r->rel->dialect == HBM_DIALECT_NPU ? "torch_npu" : "PyTorch"; }

static int get_bool(const ctx *c, bool *out)
{
    /* Every release accepts exactly "True" and "False" (case-sensitive). */
    if (!strcmp(c->val->s, "True"))
        *out = true;
    else if (!strcmp(c->val->s, "False"))
        *out = false;
    else
        return fail(c, "expected True or False (case-sensitive, as PyTorch requires)");
    return 0;
}

static bool all_digits(const char *s)
{
    if (!*s)
        return false;
    for (; *s; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

/* What a lenient framework made of a word that is not a plain number. */
static void lenient_note(const ctx *c, const char *num, const char *stop, bool wrapped, bool glued)
{
    const char *s = c->val->s;
    warn(c->cf, "%s reads '%s:%s' as %s%s%s%s%s%s", who(c), c->key, s, num, stop ? " (the number stops before '" : "",
         stop ? stop : "", stop ? "')" : "", wrapped ? " (wrapped)" : "",
         glued ? " (spaces inside the word dropped)" : "");
}

/* An unsigned integer as the release reads it: strictly (the whole word, digits only), with std::stoull
 * (ConfigTokenizer: a prefix, '-' wraps modulo 2^64) or std::stoi (lexArgs parsers: a prefix within int,
 * a negative value cast to size_t). Where the framework read something other than the word, a warning. */
static int get_uint(const ctx *c, uint64_t *out, const char *allowed)
{
    const char *s = c->val->s;
    if (c->r->strict) {
        if (hbm__parse_u64(s, out))
            return fail(c, allowed);
        return 0;
    }
    char *end;
    errno = 0;
    if (c->r->tokenizer) {
        unsigned long long v = strtoull(s, &end, 10);
        if (end == s || errno == ERANGE)
            return fail(c, errno == ERANGE ? "out of range (std::stoull throws)" : "not a number (std::stoull throws)");
        *out = v;
    } else {
        long v = strtol(s, &end, 10);
        if (end == s || errno == ERANGE || v > INT32_MAX || v < INT32_MIN)
            return fail(c, end == s ? "not a number (std::stoi throws)" : "out of int range (std::stoi throws)");
        *out = (uint64_t)(int64_t)v; /* (size_t) of a negative int */
    }
    if (*end || !all_digits(s) || c->val->glued) {
        char num[32];
        snprintf(num, sizeof num, "%llu", (unsigned long long)*out);
        lenient_note(c, num, *end ? end : NULL, s[0] == '-', c->val->glued);
    }
    return 0;
}

static int get_double(const ctx *c, double *out, const char *allowed)
{
    const char *s = c->val->s;
    char *end;
    errno = 0;
    if (c->r->strict) {
        if (!*s || !(isdigit((unsigned char)s[0]) || s[0] == '.'))
            return fail(c, allowed);
        double v = strtod(s, &end);
        if (*end || errno || !isfinite(v))
            return fail(c, allowed);
        *out = v;
        return 0;
    }
    double v = strtod(s, &end); /* std::stod is strtod: a prefix, hex, inf and nan included; ERANGE throws */
    if (end == s || errno == ERANGE)
        return fail(c, end == s ? "not a number (std::stod throws)" : "out of range (std::stod throws)");
    *out = v;
    bool plain = (isdigit((unsigned char)s[0]) || s[0] == '.') && !strpbrk(s, "xXpPnN");
    if (*end || !plain || c->val->glued) {
        char num[32];
        snprintf(num, sizeof num, "%g", v);
        lenient_note(c, num, *end ? end : NULL, false, c->val->glued);
    }
    return 0;
}

/* A count of MiB stored as bytes, clamped to SIZE_MAX / MiB as PyTorch does. */
static void store_mib(uint64_t v, size_t *bytes)
{
    if (v > SIZE_MAX / HBM__MiB)
        v = SIZE_MAX / HBM__MiB;
    *bytes = (size_t)v * HBM__MiB;
}

/* max_split_size_mb and max_non_split_rounding_mb: > 20 in the lexArgs releases, >= 20 after, >= the large
 * segment once large_segment_size_mb exists; torch_npu's digits-only check where it has one. */
static int get_split(const ctx *c, size_t *bytes)
{
    char allowed[200];
    size_t min_mb = c->r->rel->large_segment_first ? c->cf->large_segment_size / HBM__MiB : 20;
    bool gt = !c->r->strict && c->r->rel->split_gt20;
    snprintf(allowed, sizeof allowed,
             "expected a whole number of MiB %s %zu (%s: \"CachingAllocator option %s too "
             "small, must be %s %zu\")",
             gt ? ">" : ">=", gt ? (size_t)20 : min_mb, who(c), c->key, gt ? ">" : ">=", gt ? (size_t)20 : min_mb);
    if (!c->r->strict && c->r->rel->split_digits && !all_digits(c->val->s)) {
        char m[120];
        snprintf(m, sizeof m, "not all digits (torch_npu: \"CachingAllocator option %s is invalid.\")", c->key);
        return fail(c, m);
    }
    uint64_t v;
    if (get_uint(c, &v, allowed))
        return -1;
    if (gt ? v <= 20 : v < min_mb)
        return fail(c, allowed);
    store_mib(v, bytes);
    return 0;
}

static int is_pow2(uint64_t v) { return v && !(v & (v - 1)); }

static int log2_floor(uint64_t v)
{
    int r = -1;
    while (v) {
        v >>= 1;
        r++;
    }
    return r;
}

static int list_error(const ctx *c, size_t pos, const char *what)
{
    snprintf(c->err, c->errlen, "invalid setting %s: %s (character %zu)", c->key, what, pos);
    return -1;
}

/* roundup_power2_divisions: "N" or "[B1:v1,B2:v2,...,>:vk]"; *pi points at the value.
 * PyTorch's loop (c10/core/AllocatorConfig.cpp parseRoundUpPower2Divisions): an entry B:v sets interval
 * log2(B) (clamped to 0..15); the first B:v entry also fills every lower interval; '>':v fills the intervals
 * after the last B:v entry (last_index starts at 0, so a leading '>' leaves interval 0), and in the lexArgs
 * releases from the last entry itself; "[]" changes nothing; a ',' before ']' is accepted. */
static int parse_roundup(const ctx *c0, const lexed *lx, size_t *pi)
{
    hbm__conf *cf = c0->cf;
    size_t i = *pi;
    ctx c = *c0;
    c.val = &lx->t[i];
    uint64_t *div = cf->roundup_divisions;
    if (strcmp(lx->t[i].s, "[") != 0) {
        uint64_t v;
        if (get_uint(&c, &v, "expected a power of two (1, 2, 4, ...) or a list [MiB:divisions,...,>:divisions]"))
            return -1;
        if (!is_pow2(v))
            return fail(&c, "the divisions must be a power of two (PyTorch: \"For roundups, the divisions has to be "
                            "power of 2\")");
        for (int k = 0; k < HBM__ROUNDUP_INTERVALS; k++)
            div[k] = v;
        return 0;
    }
    size_t open = lx->t[i].pos;
    int last_index = 0;
    bool first = true;
    i++;
    for (;;) {
        if (i >= lx->n)
            return list_error(&c, open, "the list is not closed with ']'");
        if (!strcmp(lx->t[i].s, "]"))
            break;
        if (c.r->strict && !strcmp(lx->t[i].s, ","))
            return list_error(&c, lx->t[i].pos, "an empty entry in the list");
        if (i + 2 >= lx->n)
            return list_error(&c, open, "the list is not closed with ']'");
        const tok *bound = &lx->t[i], *colon = &lx->t[i + 1], *val = &lx->t[i + 2];
        if (strcmp(colon->s, ":") != 0) {
            if (c.r->strict || !c.r->tokenizer) {
                char m[160];
                snprintf(m, sizeof m, "expected ':' after '%.40s', found '%.40s' (entries are MiB:divisions)", bound->s,
                         colon->s);
                return list_error(&c, colon->pos, m);
            }
            warn(cf,
                 "PyTorch does not check the separator after '%s' in roundup_power2_divisions: '%s' is taken "
                 "for ':'",
                 bound->s, colon->s);
        }
        ctx cv = c;
        cv.val = val;
        uint64_t v;
        if (get_uint(&cv, &v, "divisions must be 0 or a power of two"))
            return -1;
        if (v && !is_pow2(v))
            return fail(&cv, "divisions must be 0 or a power of two (PyTorch: \"For roundups, the divisions has to be "
                             "power of 2 or 0 to disable roundup\")");
        if (!strcmp(bound->s, ">")) {
            int from = c.r->rel->roundup_gt_bug && !c.r->strict ? last_index : last_index + 1;
            for (int k = from; k < HBM__ROUNDUP_INTERVALS; k++)
                div[k] = v;
        } else {
            ctx cb = c;
            cb.val = bound;
            uint64_t b;
            if (get_uint(&cb, &b, "interval bounds are MiB, a power of two") || !is_pow2(b))
                return fail(&cb, "interval bounds must be a power of two in MiB (PyTorch: \"For roundups, the "
                                 "intervals have to be power of 2\")");
            int index = log2_floor(b);
            if (index > HBM__ROUNDUP_INTERVALS - 1)
                index = HBM__ROUNDUP_INTERVALS - 1;
            if (first)
                for (int k = 0; k < index; k++)
                    div[k] = v;
            first = false;
            div[index] = v;
            last_index = index;
        }
        i += 3;
        if (i >= lx->n)
            return list_error(&c, open, "the list is not closed with ']'");
        if (!strcmp(lx->t[i].s, "]"))
            break;
        if (strcmp(lx->t[i].s, ",") != 0) {
            char m[160];
            snprintf(m, sizeof m, "expected ',' or ']', found '%s'", lx->t[i].s);
            if (c.r->strict || !c.r->tokenizer)
                return list_error(&c, lx->t[i].pos, m);
            warn(cf, "PyTorch does not check the separator in roundup_power2_divisions: '%s' is taken for ','",
                 lx->t[i].s);
        }
        i++;
        if (c.r->strict && i < lx->n && !strcmp(lx->t[i].s, "]"))
            return list_error(&c, lx->t[i].pos, "a ',' before ']'");
    }
    *pi = i;
    return 0;
}

/* expandable_segments_reserve value (PyTorch main CUDAAllocatorConfig::parseReserveSpec): a positive finite
 * fraction of the device, or GiB with a trailing G/g. A bad value is not an error there: PyTorch warns and
 * keeps its default; so does hbmalloc, except in its own strict strings. */
static int reserve_spec(const ctx *c, double *value, bool *gib)
{
    const char *s = c->val->s;
    size_t n = strlen(s);
    *gib = n && (s[n - 1] == 'G' || s[n - 1] == 'g');
    char num[MAX_TOKEN_LEN];
    snprintf(num, sizeof num, "%.*s", (int)(n - *gib), s);
    char *end;
    errno = 0;
    double v = strtod(num, &end);
    bool ok = num[0] && !*end && !errno && isfinite(v) && v > 0.0 && !isspace((unsigned char)num[0]);
    if (!ok) {
        if (c->r->strict)
            return fail(c, "expected a positive fraction of the device (0.5) or GiB (40G)");
        warn(c->cf,
             "PyTorch ignores the invalid expandable-segment reserve '%s' (\"Ignoring invalid "
             "expandable-segment reserve value\") and keeps its default",
             s);
        return 1;
    }
    *value = v;
    return 0;
}

static int parse_reserve_classes(const ctx *c0, const lexed *lx, size_t *pi)
{
    size_t i = *pi;
    ctx c = *c0;
    c.val = &lx->t[i];
    if (strcmp(lx->t[i].s, "[") != 0)
        return fail(&c, "expected a list [class:reserve,...] (PyTorch: expandable_segments_reserve_by_class:"
                        "[name:val,name:val,...])");
    int n = 0;
    i++;
    while (i < lx->n && strcmp(lx->t[i].s, "]") != 0) {
        if (i + 2 >= lx->n)
            break;
        ctx cv = c;
        cv.val = &lx->t[i + 2];
        double v;
        bool gib;
        int rc = reserve_spec(&cv, &v, &gib);
        if (rc < 0)
            return -1;
        n += rc == 0;
        i += 3;
        if (i < lx->n && !strcmp(lx->t[i].s, ","))
            i++;
    }
    if (i >= lx->n)
        return list_error(&c, lx->t[*pi].pos, "the list is not closed with ']'");
    c0->cf->es_reserve_classes = n;
    *pi = i;
    return 0;
}

/* ---- the keys: each one row of one table (below), with how its value is read and how hbmalloc conf shows it ---- */

enum { D_CUDA = 1, D_NPU = 2, D_BOTH = 3 };

/* The keys some rule of parse_tokens names (the rest are found by name only). */
typedef enum key_id {
    K_OTHER,
    K_MAX_SPLIT,     /* a max_split_size_mb given: the NPU dialect's rule with expandable segments */
    K_LARGE_SEGMENT, /* read first where a release does: it bounds max_split_size_mb */
    K_HBM_FIRST      /* hbmalloc's own keys (hbm_ prefix) from here on */
} key_id;

/* The field of hbm__conf a row's default goes to. */
typedef enum field_type { F_NONE, F_BOOL, F_SIZE, F_U64, F_UNSIGNED, F_INT, F_DOUBLE } field_type;

typedef struct key_def key_def;
struct key_def {
    const char *name;
    key_id id;
    int dialects;
    field_type type;
    size_t off;      /* the hbm__conf field (F_NONE: none, or several) */
    uint64_t dflt_u; /* its default (the integer types) */
    double dflt_d;   /* (F_DOUBLE) */
    /* The value read at lx->t[*pi] into c->cf: 0, or -1 with the message in c->err. NULL: a boolean at off. */
    int (*set)(const ctx *c, const key_def *k, const lexed *lx, size_t *pi);
    int line; /* its place among the lines of hbmalloc conf (0: none of its own) */
    void (*show)(const hbm__conf *cf, hbm__sbuf *sb); /* that line */
    const char *value, *dflt, *what;                  /* the documentation's key list (hbmalloc conf --keys) */
};

#define AT(field) offsetof(hbm__conf, field)

static int set_bool(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)lx, (void)pi;
    return get_bool(c, (bool *)((char *)c->cf + k->off));
}

static int set_backend(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    if (!strcmp(c->val->s, "native"))
        c->cf->backend_async = false;
    else if (!strcmp(c->val->s, "cudaMallocAsync"))
        c->cf->backend_async = true;
    else
        return fail(c, "expected native or cudaMallocAsync (PyTorch: \"Unknown allocator backend, options are "
                       "native and cudaMallocAsync\")");
    return 0;
}

static int set_split(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)lx, (void)pi;
    if (k->id == K_MAX_SPLIT)
        *c->max_split_set = true;
    return get_split(c, (size_t *)((char *)c->cf + k->off));
}

static int set_large_segment(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    uint64_t v;
    /* > 10 MiB, no upper bound (c10 parseLargeSegmentSize; torch_npu 2.11+ also digits only). */
    const char *allowed = "expected a whole number of MiB > 10 (\"CachingAllocator option large_segment_size_mb "
                          "must be > 10 MB\")";
    if (!c->r->strict && c->r->rel->split_digits && !all_digits(c->val->s))
        return fail(c, "not all digits (torch_npu: \"CachingAllocator option large_segment_size_mb is "
                       "invalid.\")");
    if (get_uint(c, &v, allowed))
        return -1;
    if (v <= 10)
        return fail(c, allowed);
    /* At most 2^62 bytes (4 EiB, past any device): a page or segment of it, rounded to the device's
     * granularity, cannot wrap to 0 (fuzz_conf found that division by zero). */
    store_mib(v < ((uint64_t)1 << 42) ? v : (uint64_t)1 << 42, &c->cf->large_segment_size);
    return 0;
}

static int set_segment_size(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    uint64_t v;
    /* torch_npu from v7.2.0.1 (2.6.0.post4): isDigit, then std::stoi, [20, 512], kept in a member of its own
     * (m_segment_size_mb: NPUCachingAllocator.cpp v7.2.0.1-pytorch2.6.0:1048, NPUAllocatorConfig.cpp
     * master:199) that only the making of an expandable segment of the large pool reads, as its page size
     * (v7.2.0.1-pytorch2.6.0:2320-2322; from 2.11 get_custom_expandable_segment_size, where a set
     * large_segment_size_mb wins: v26.1.0-pytorch2.11.0:2532-2539, master:2762-2769). Whole segments keep
     * 20 MiB (get_allocation_size: kLargeBuffer, v7.2.0.1-pytorch2.6.0:2557-2566; large_segment_size() from
     * 2.13, master:2771-2778). Resolved after every key is read (parse_tokens): see segment_page. */
    const char *allowed = "expected a whole number of MiB in [20, 512] (torch_npu: \"CachingAllocator option "
                          "segment_size_mb error, must be [20, 512], dtype is int\")";
    if (!all_digits(c->val->s))
        return fail(c, "not all digits (torch_npu: \"CachingAllocator option segment_size_mb is invalid.\")");
    if (get_uint(c, &v, allowed))
        return -1;
    if (v < 20 || v > 512)
        return fail(c, allowed);
    c->cf->segment_size = (size_t)v * HBM__MiB;
    if (c->r->rel->seg_page == HBM__SEG_PAGE_UNLESS) /* NPUAllocatorConfig.cpp v26.1.0-pytorch2.11.0:245 */
        warn(c->cf, "segment_size_mb is deprecated, use large_segment_size_mb (torch_npu warns the same)");
    return 0;
}

static int set_gc(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    double d;
    if (get_double(c, &d, "expected a number strictly between 0 and 1"))
        return -1;
    if (!(d > 0.0 && d < 1.0))
        return fail(c, "expected a number strictly between 0 and 1 (PyTorch: \"garbage_collect_threshold is "
                       "invalid, set it in (0.0, 1.0)\")");
    c->cf->gc_threshold = d;
    return 0;
}

static int set_fraction(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    double d;
    if (get_double(c, &d, "expected a number in [0, 1]"))
        return -1;
    if (!(d >= 0.0 && d <= 1.0))
        return fail(c, "expected a number in [0, 1] (PyTorch: \"per_process_memory_fraction is invalid, set it "
                       "in [0.0, 1.0]\")");
    c->cf->memory_fraction = d;
    return 0;
}

static int set_roundup(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k;
    return parse_roundup(c, lx, pi);
}

static int set_es_reserve(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    double d;
    bool gib;
    int rc = reserve_spec(c, &d, &gib);
    if (rc < 0)
        return -1;
    if (rc == 0) {
        c->cf->es_reserve = d;
        c->cf->es_reserve_gib = gib;
        c->cf->es_reserve_set = true;
    }
    return 0;
}

static int set_es_reserve_classes(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k;
    return parse_reserve_classes(c, lx, pi);
}

static int set_publish(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    bool on;
    int rc = get_bool(c, &on);
    if (!rc)
        c->cf->publish = on;
    return rc;
}

static int set_page(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    uint64_t v;
    const char *allowed = "expected an even whole number of MiB in [2, 1024] (a multiple of the 2 MiB device "
                          "granularity)";
    if (get_uint(c, &v, allowed) || v < 2 || v > 1024 || v % 2)
        return fail(c, allowed);
    c->cf->expandable_page = (size_t)v * HBM__MiB;
    c->cf->page_given = true;
    return 0;
}

static int set_arena(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi; /* the last of the two arena keys wins, as repeated keys do */
    uint64_t v;
    const char *allowed = "expected a whole number of MiB in [2, 16777216] (the arena's size), or 0 for none";
    if (get_uint(c, &v, allowed) || (v && v < 2) || v > 16777216)
        return fail(c, allowed);
    c->cf->arena_bytes = (size_t)v * HBM__MiB;
    c->cf->arena_fraction = 0;
    return 0;
}

static int set_headroom(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    uint64_t v;
    const char *allowed = "expected a whole number of MiB in [0, 16777216]: device memory left free for memory "
                          "outside hbmalloc (0: none)";
    if (get_uint(c, &v, allowed) || v > 16777216)
        return fail(c, allowed);
    c->cf->headroom_bytes = (size_t)v * HBM__MiB;
    return 0;
}

static int set_arena_fraction(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    double d;
    const char *allowed = "expected a share of the device's free memory in (0, 1], or 0 for none";
    if (get_double(c, &d, allowed) || !(d >= 0 && d <= 1))
        return fail(c, allowed);
    c->cf->arena_fraction = d;
    c->cf->arena_bytes = 0;
    return 0;
}

static int set_plan_file(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi; /* read at create (policy/plan_file.c): here only the path */
    snprintf(c->cf->plan_file, sizeof c->cf->plan_file, "%s", c->val->s);
    return 0;
}

static int set_pin_threads(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    uint64_t v;
    if (get_uint(c, &v, "expected a power of two <= 128"))
        return -1;
    if (!is_pow2(v))
        return fail(c, "expected a power of two <= 128 (PyTorch: \"Number of register threads has to be power "
                       "of 2\")");
    if (v > 128)
        return fail(c, "expected a power of two <= 128 (PyTorch: \"Number of register threads should be less "
                       "than or equal to 128\")");
    c->cf->pinned_num_register_threads = (unsigned)v;
    return 0;
}

static int set_pin_reserve(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    uint64_t v;
    /* PyTorch: > 0; torch_npu reads it with toSizeT and no check (0 accepted). */
    if (get_uint(c, &v, "expected a whole number of MiB"))
        return -1;
    if (v == 0 && c->cf->dialect != HBM_DIALECT_NPU)
        return fail(c, "expected a whole number of MiB > 0 (PyTorch: \"Pinned reserve segment size has to be "
                       "greater than 0\")");
    c->cf->pinned_reserve_segment_size_mb = v;
    return 0;
}

static int set_mib(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)lx, (void)pi;
    return get_uint(c, (uint64_t *)((char *)c->cf + k->off), "expected a whole number of MiB");
}

static int set_base_align(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    /* torch_npu: isDigit, std::stoi, no leading zeros (the length must equal to_string's), [0, 16]. */
    const char *s = c->val->s;
    if (!all_digits(s))
        return fail(c, "expected a whole number of KiB in [0, 16] (torch_npu: \"CachingAllocator option "
                       "base_addr_aligned_kb is invalid.\")");
    if ((s[0] == '0' && s[1]) || strlen(s) > 2 || atoi(s) > 16)
        return fail(c, "expected a whole number of KiB in [0, 16] without leading zeros (torch_npu: "
                       "\"CachingAllocator option base_addr_aligned_kb error, must be [0~16], dtype is int\")");
    c->cf->base_addr_aligned_kb = (unsigned)atoi(s);
    return 0;
}

static int set_page_size(const ctx *c, const key_def *k, const lexed *lx, size_t *pi)
{
    (void)k, (void)lx, (void)pi;
    if (strcmp(c->val->s, "1g") != 0)
        return fail(c, "the only page size is 1g (torch_npu: \"Unsupported page_size value\")");
    c->cf->page_size_1g = true;
    return 0;
}

/* ---- hbmalloc conf's lines, one per key that has one (key_def.show) ---- */

static const char *b2s(bool b) { return b ? "True" : "False"; }

static void show_max_split(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->max_split_size == SIZE_MAX)
        hbm__sb_printf(sb, "max_split_size_mb: unlimited\n");
    else
        hbm__sb_printf(sb, "max_split_size_mb: %zu\n", c->max_split_size / HBM__MiB);
}

static void show_max_non_split(const hbm__conf *c, hbm__sbuf *sb)
{
    hbm__sb_printf(sb, "max_non_split_rounding_mb: %zu\n", c->max_non_split_rounding / HBM__MiB);
}

static void show_large_segment(const hbm__conf *c, hbm__sbuf *sb)
{
    hbm__sb_printf(sb, "large_segment_size_mb: %zu\n", c->large_segment_size / HBM__MiB);
}

static void show_segment_size(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->dialect == HBM_DIALECT_NPU && c->segment_size) /* torch_npu's own member, not the large segment */
        hbm__sb_printf(sb,
                       "segment_size_mb: %zu (the page of the large pool's expandable segments, as torch_npu; "
                       "whole segments are %zu MiB%s)\n",
                       c->segment_size / HBM__MiB, c->large_segment_size / HBM__MiB,
                       c->expandable_page != c->segment_size ? "; not used: another setting sizes the pages"
                       : !c->expandable_segments             ? "; no effect without expandable_segments:True"
                                                             : "");
}

static void show_gc(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->gc_threshold > 0)
        hbm__sb_printf(sb, "garbage_collection_threshold: %g%s\n", c->gc_threshold,
                       c->memory_fraction < 1.0 ? "" : " (inactive: PyTorch runs it only under a memory fraction < 1)");
    else
        hbm__sb_printf(sb, "garbage_collection_threshold: 0 (off)\n");
}

static void show_fraction(const hbm__conf *c, hbm__sbuf *sb)
{
    hbm__sb_printf(sb, "per_process_memory_fraction: %g\n", c->memory_fraction);
}

static void show_roundup(const hbm__conf *c, hbm__sbuf *sb)
{
    hbm__sb_printf(sb, "roundup_power2_divisions: [");
    bool any = false;
    for (int k = 0; k < HBM__ROUNDUP_INTERVALS; k++) {
        hbm__sb_printf(sb, "%s%u:%llu", k ? "," : "", 1u << k, (unsigned long long)c->roundup_divisions[k]);
        any |= c->roundup_divisions[k] > 1;
    }
    hbm__sb_printf(sb, "]%s\n", any ? "" : " (off)");
}

static void show_expandable(const hbm__conf *c, hbm__sbuf *sb)
{
    hbm__sb_printf(sb, "expandable_segments: %s\n", b2s(c->expandable_segments));
}

static void show_remap(const hbm__conf *c, hbm__sbuf *sb)
{
    hbm__sb_printf(sb, "hbm_remap_free_pages: %s (hbmalloc policy%s)\n", b2s(c->remap_free_pages),
                   c->remap_free_pages && !c->expandable_segments ? "; needs expandable_segments:True" : "");
}

static void show_arena(const hbm__conf *c, hbm__sbuf *sb) /* hbm_arena_mb or hbm_arena_fraction, whichever is set */
{
    if (!c->arena_bytes && !(c->arena_fraction > 0))
        return;
    char what[64];
    if (c->arena_bytes)
        snprintf(what, sizeof what, "hbm_arena_mb: %zu", c->arena_bytes / HBM__MiB);
    else
        snprintf(what, sizeof what, "hbm_arena_fraction: %g", c->arena_fraction);
    hbm__sb_printf(sb,
                   "%s (hbmalloc policy: one region reserved at the first allocation and sub-allocated best "
                   "fit; %s beyond it)\n",
                   what, c->expandable_segments ? "expandable segments" : "segments");
}

static void show_plan_file(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->plan_file[0])
        hbm__sb_printf(sb,
                       "hbm_plan_file: %s (hbmalloc policy: allocation k served at the plan's offset in the arena, "
                       "when it fits and that range is free)\n",
                       c->plan_file);
}

static void show_step_plan(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->step_plan)
        hbm__sb_printf(sb,
                       "hbm_step_plan: True (hbmalloc policy: the allocations of a training step, marked by "
                       "hbm_step, learnt and later steps served from a plan in one region%s)\n",
                       c->expandable_segments ? ", beside the expandable segments" : "");
}

static void show_publish(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->publish >= 0)
        hbm__sb_printf(sb, "hbm_publish: %s (statistics for hbmalloc top%s)\n", b2s(c->publish),
                       c->publish ? ", in a shared-memory record of this process" : ": not published");
}

static void show_headroom(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->headroom_bytes)
        hbm__sb_printf(sb,
                       "hbm_headroom_mb: %zu (hbmalloc policy: kept free on the device for memory outside hbmalloc, "
                       "collectives' buffers and other processes; the cache gives back before taking it)\n",
                       c->headroom_bytes / HBM__MiB);
}

static void show_page(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->page_given)
        hbm__sb_printf(sb, "hbm_expandable_page_mb: %zu (hbmalloc policy: large-pool page of expandable segments%s)\n",
                       c->expandable_page / HBM__MiB,
                       !c->expandable_segments ? "; needs expandable_segments:True" : "");
    else if (c->expandable_page)
        hbm__sb_printf(sb, "hbm_expandable_page_mb: default (segment_size_mb, as torch_npu)\n");
    else
        hbm__sb_printf(sb, "hbm_expandable_page_mb: default (large_segment_size_mb, as PyTorch)\n");
}

static void show_release_lock(const hbm__conf *c, hbm__sbuf *sb) /* the dialect's key */
{
    hbm__sb_printf(sb, "%s: %s\n",
                   c->dialect == HBM_DIALECT_NPU ? "release_lock_on_npumalloc" : "release_lock_on_cudamalloc",
                   b2s(c->release_lock_on_malloc));
}

static void show_throw(const hbm__conf *c, hbm__sbuf *sb)
{
    hbm__sb_printf(sb, "%s: %s\n", c->dialect == HBM_DIALECT_NPU ? "throw_on_npumalloc_oom" : "throw_on_cudamalloc_oom",
                   b2s(c->throw_on_malloc_oom));
}

static void show_es_reserve(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->dialect != HBM_DIALECT_NPU && c->es_reserve_set)
        hbm__sb_printf(sb,
                       "expandable_segments_reserve: %g%s (virtual address space per expandable segment; the "
                       "sim reserves without limit)\n",
                       c->es_reserve, c->es_reserve_gib ? " GiB" : " of the device");
}

static void show_es_reserve_classes(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->dialect != HBM_DIALECT_NPU && c->es_reserve_classes)
        hbm__sb_printf(sb,
                       "expandable_segments_reserve_by_class: %d class%s (per-stream tags; hbmalloc does not "
                       "tag streams)\n",
                       c->es_reserve_classes, c->es_reserve_classes == 1 ? "" : "es");
}

static void show_align_hugepages(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->dialect == HBM_DIALECT_NPU && c->align_hugepages)
        hbm__sb_printf(sb, "align_hugepages: True (torch_npu v6.0.rc2; no effect on the model)\n");
}

static void show_lazy_reclaim(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->dialect == HBM_DIALECT_NPU)
        hbm__sb_printf(sb, "multi_stream_lazy_reclaim: %s\n", b2s(c->multi_stream_lazy_reclaim));
}

static void show_page_size(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->dialect == HBM_DIALECT_NPU)
        hbm__sb_printf(sb, "page_size: %s\n", c->page_size_1g ? "1g" : "default");
}

static void show_base_align(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->dialect == HBM_DIALECT_NPU)
        hbm__sb_printf(sb, "base_addr_aligned_kb: %u\n", c->base_addr_aligned_kb);
}

static void show_backend(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->dialect != HBM_DIALECT_NPU)
        hbm__sb_printf(sb, "backend: %s\n", c->backend_async ? "cudaMallocAsync (native policy applied)" : "native");
}

static void show_graph_reuse(const hbm__conf *c, hbm__sbuf *sb)
{
    if (c->dialect != HBM_DIALECT_NPU)
        hbm__sb_printf(sb, "graph_capture_record_stream_reuse: %s (graph capture only)\n",
                       b2s(c->graph_capture_record_stream_reuse));
}

static void show_pinned(const hbm__conf *c, hbm__sbuf *sb) /* the host-allocator keys, on one line */
{
    hbm__sb_printf(sb, "host-allocator keys (pinned host memory, no effect on device memory):");
    hbm__sb_printf(sb, " pinned_use_background_threads=%s", b2s(c->pinned_use_background_threads));
    if (c->dialect == HBM_DIALECT_NPU)
        hbm__sb_printf(sb, " pin_memory_expandable_segments=%s pinned_mem_register=%s",
                       b2s(c->pin_memory_expandable_segments), b2s(c->pinned_mem_register));
    else
        hbm__sb_printf(sb, " pinned_use_cuda_host_register=%s pinned_num_register_threads=%u pinned_free_catch_all=%s",
                       b2s(c->pinned_use_host_register), c->pinned_num_register_threads, b2s(c->pinned_free_catch_all));
    hbm__sb_printf(sb,
                   " pinned_reserve_segment_size_mb=%llu pinned_max_round_threshold_mb=%llu "
                   "pinned_max_cached_size_mb=%llu\n",
                   (unsigned long long)c->pinned_reserve_segment_size_mb,
                   (unsigned long long)c->pinned_max_round_threshold_mb,
                   (unsigned long long)c->pinned_max_cached_size_mb);
}

/* The table. Its order is the order keys are offered as the nearest to an unknown one (hint_key); `line` orders
 * hbmalloc conf's lines. The releases that know a key are releases.c's (hbm__release_has_key, the columns of
 * src/conf/npu_releases.inc); value, default and what are the documentation's key list (hbmalloc conf --keys,
 * docs/CONFIGURATION.md). */
#define BOOL_KEY(n, id, d, field, line, show, what)                                            \
    {                                                                                          \
        n, id, d, F_BOOL, AT(field), 0, 0, NULL, line, show, "`True` / `False`", "False", what \
    }
static const key_def keys[] = {
    {"backend", K_OTHER, D_CUDA, F_NONE, 0, 0, 0, set_backend, 23, show_backend, "`native` / `cudaMallocAsync`",
     "native", "hbmalloc applies the native policy either way, and says so in a warning"},
    {"max_split_size_mb", K_MAX_SPLIT, D_BOTH, F_SIZE, AT(max_split_size), SIZE_MAX, 0, set_split, 1, show_max_split,
     "integer MiB >= 20 (> 20 in PyTorch <= 2.9 and torch_npu <= 2.10)", "unlimited",
     "blocks of at least this size are never split and serve only requests of at least it, within "
     "`max_non_split_rounding_mb`"},
    {"max_non_split_rounding_mb", K_OTHER, D_BOTH, F_SIZE, AT(max_non_split_rounding), 20 * HBM__MiB, 0, set_split, 2,
     show_max_non_split, "integer MiB >= 20", "20",
     "how much larger than an oversize request a cached oversize block may be and still serve it"},
    {"large_segment_size_mb", K_LARGE_SEGMENT, D_BOTH, F_SIZE, AT(large_segment_size), 20 * HBM__MiB, 0,
     set_large_segment, 3, show_large_segment, "integer MiB > 10 (PyTorch 2.11+, torch_npu 2.11+)", "20",
     "the segment for 1-10 MiB requests and the large pool's expandable page; read before the other keys"},
    {"garbage_collection_threshold", K_OTHER, D_BOTH, F_DOUBLE, AT(gc_threshold), 0, 0, set_gc, 5, show_gc, "0 < v < 1",
     "off", "reclaim old cached segments when reserved > v x the memory-fraction limit"},
    {"roundup_power2_divisions", K_OTHER, D_BOTH, F_NONE, 0, 0, 0, set_roundup, 7, show_roundup,
     "power of two, or `[MiB:div,...,>:div]`", "off", "round requests to 1/div steps between powers of two"},
    BOOL_KEY("expandable_segments", K_OTHER, D_BOTH, expandable_segments, 8, show_expandable,
             "segments are virtual reservations mapped page by page (one warning, and whole segments, where the "
             "device cannot)"),
    BOOL_KEY("release_lock_on_cudamalloc", K_OTHER, D_CUDA, release_lock_on_malloc, 15, show_release_lock,
             "other threads use the allocator while the device allocates"),
    BOOL_KEY("release_lock_on_hipmalloc", K_OTHER, D_CUDA, release_lock_on_malloc, 0, NULL,
             "release_lock_on_cudamalloc's ROCm name"),
    BOOL_KEY("release_lock_on_npumalloc", K_OTHER, D_NPU, release_lock_on_malloc, 0, NULL,
             "release_lock_on_cudamalloc's torch_npu name"),
    BOOL_KEY("pinned_use_cuda_host_register", K_OTHER, D_CUDA, pinned_use_host_register, 0, NULL,
             "pinned host memory: validated and reported"),
    BOOL_KEY("pinned_use_hip_host_register", K_OTHER, D_CUDA, pinned_use_host_register, 0, NULL,
             "pinned host memory: validated and reported"),
    {"pinned_num_register_threads", K_OTHER, D_CUDA, F_UNSIGNED, AT(pinned_num_register_threads), 1, 0, set_pin_threads,
     0, NULL, "power of two <= 128", "1", "pinned host memory: validated and reported"},
    BOOL_KEY("pinned_use_background_threads", K_OTHER, D_BOTH, pinned_use_background_threads, 25, show_pinned,
             "pinned host memory: validated and reported"),
    {"pinned_reserve_segment_size_mb", K_OTHER, D_BOTH, F_U64, AT(pinned_reserve_segment_size_mb), 0, 0,
     set_pin_reserve, 0, NULL, "integer MiB (> 0 in PyTorch)", "0", "pinned host memory: validated and reported"},
    {"pinned_max_round_threshold_mb", K_OTHER, D_BOTH, F_U64, AT(pinned_max_round_threshold_mb), 0, 0, set_mib, 0, NULL,
     "integer MiB", "0", "pinned host memory: validated and reported"},
    {"pinned_max_cached_size_mb", K_OTHER, D_BOTH, F_U64, AT(pinned_max_cached_size_mb), 0, 0, set_mib, 0, NULL,
     "integer MiB", "0", "pinned host memory: validated and reported"},
    BOOL_KEY("graph_capture_record_stream_reuse", K_OTHER, D_CUDA, graph_capture_record_stream_reuse, 24,
             show_graph_reuse, "graph capture only: reported"),
    {"per_process_memory_fraction", K_OTHER, D_BOTH, F_DOUBLE, AT(memory_fraction), 0, 1.0, set_fraction, 6,
     show_fraction, "0..1 (PyTorch 2.9+, torch_npu 2.10.0.post4+ / v26.1.0)", "1",
     "cap reserved memory at fraction x capacity (1 removes the cap)"},
    BOOL_KEY("pinned_free_catch_all", K_OTHER, D_CUDA, pinned_free_catch_all, 0, NULL,
             "pinned host memory: validated and reported"),
    BOOL_KEY("throw_on_cudamalloc_oom", K_OTHER, D_CUDA, throw_on_malloc_oom, 16, show_throw,
             "validated and reported (the plug-ins raise on OOM)"),
    BOOL_KEY("throw_on_npumalloc_oom", K_OTHER, D_NPU, throw_on_malloc_oom, 0, NULL,
             "throw_on_cudamalloc_oom's torch_npu name"),
    BOOL_KEY("pin_memory_expandable_segments", K_OTHER, D_NPU, pin_memory_expandable_segments, 0, NULL,
             "pinned host memory: validated and reported"),
    BOOL_KEY("pinned_mem_register", K_OTHER, D_NPU, pinned_mem_register, 0, NULL,
             "pinned host memory: validated and reported"),
    {"base_addr_aligned_kb", K_OTHER, D_NPU, F_UNSIGNED, AT(base_addr_aligned_kb), 16, 0, set_base_align, 22,
     show_base_align, "0..16 without leading zeros", "16", "validated and reported"},
    {"page_size", K_OTHER, D_NPU, F_BOOL, AT(page_size_1g), 0, 0, set_page_size, 21, show_page_size, "`1g`", "default",
     "large-pool segments in 1 GiB units"},
    {"segment_size_mb", K_OTHER, D_NPU, F_SIZE, AT(segment_size), 0, 0, set_segment_size, 4, show_segment_size,
     "20..512 (torch_npu 2.6.0.post4 / v7.2.0.1 and later)", "none",
     "the page of the large pool's expandable segments (whole segments keep 20 MiB); deprecated from 2.11"},
    BOOL_KEY("multi_stream_lazy_reclaim", K_OTHER, D_NPU, multi_stream_lazy_reclaim, 20, show_lazy_reclaim,
             "validated and reported"),
    BOOL_KEY("align_hugepages", K_OTHER, D_NPU, align_hugepages, 19, show_align_hugepages,
             "torch_npu v6.0.rc2 only: validated and reported"),
    {"expandable_segments_reserve", K_OTHER, D_CUDA, F_NONE, 0, 0, 0, set_es_reserve, 17, show_es_reserve,
     "a fraction of the device, or GiB (`40G`)", "none",
     "PyTorch main: sizes virtual reservations; reported, not modelled (an invalid value is ignored with a warning)"},
    {"expandable_segments_reserve_by_class", K_OTHER, D_CUDA, F_NONE, 0, 0, 0, set_es_reserve_classes, 18,
     show_es_reserve_classes, "`[class:value,...]`", "none", "PyTorch main: counted, not modelled"},
    /* hbmalloc's own policies (hbm_ prefix): not PyTorch keys. */
    BOOL_KEY("hbm_remap_free_pages", K_HBM_FIRST, D_BOTH, remap_free_pages, 9, show_remap,
             "with expandable segments: free pages elsewhere in the pool are moved to where a request grows"),
    {"hbm_expandable_page_mb", K_HBM_FIRST, D_BOTH, F_SIZE, AT(expandable_page), 0, 0, set_page, 14, show_page,
     "even whole MiB in [2, 1024]", "`segment_size_mb` (NPU) or `large_segment_size_mb`",
     "with expandable segments: the page of the large pool's segments"},
    {"hbm_arena_mb", K_HBM_FIRST, D_BOTH, F_SIZE, AT(arena_bytes), 0, 0, set_arena, 10, show_arena,
     "whole MiB in [2, 16777216], or 0", "0 (off)",
     "one region reserved at the first allocation, its stream's requests served best fit from it"},
    {"hbm_arena_fraction", K_HBM_FIRST, D_BOTH, F_DOUBLE, AT(arena_fraction), 0, 0, set_arena_fraction, 0, NULL,
     "0 < v <= 1, or 0", "0 (off)", "the same, sized as this share of the device's free memory"},
    {"hbm_plan_file", K_HBM_FIRST, D_BOTH, F_NONE, 0, 0, 0, set_plan_file, 11, show_plan_file,
     "a path (up to 127 characters)", "none", "a plan of `hbmalloc plan -o`, served from the arena"},
    BOOL_KEY("hbm_step_plan", K_HBM_FIRST, D_BOTH, step_plan, 12, show_step_plan,
             "the training step learnt (hbm_step) and later steps served from a plan in one region"),
    {"hbm_publish", K_HBM_FIRST, D_BOTH, F_INT, AT(publish), (uint64_t)-1, 0, set_publish, 13, show_publish,
     "`True` / `False`", "False (the PyTorch plug-ins: True)", "statistics in a shared-memory record for hbmalloc top"},
    {"hbm_headroom_mb", K_HBM_FIRST, D_BOTH, F_SIZE, AT(headroom_bytes), 0, 0, set_headroom, 26, show_headroom,
     "whole MiB in [0, 16777216]", "0 (off)",
     "device memory left free for what is not hbmalloc's (communicators' buffers, other processes): cached memory "
     "goes back before a new segment takes it, and a request that would take it fails naming it"},
};
#undef BOOL_KEY
#define NKEYS (sizeof keys / sizeof keys[0])

static const key_def *find_key(const char *name)
{
    for (size_t i = 0; i < NKEYS; i++)
        if (!strcmp(keys[i].name, name))
            return &keys[i];
    return NULL;
}

static bool is_hbm_key(const key_def *k) { return k->id >= K_HBM_FIRST; }

static int set_key(hbm__conf *cf, const key_def *k, const rules *r, const lexed *lx, size_t *pi, bool *max_split_set,
                   char *err, size_t errlen)
{
    ctx c = {k->name, &lx->t[*pi], r, cf, err, errlen, max_split_set};
    return k->set ? k->set(&c, k, lx, pi) : set_bool(&c, k, lx, pi);
}

void hbm__conf_defaults(hbm__conf *c, hbm_dialect d)
{
    memset(c, 0, sizeof *c);
    c->dialect = d;
    for (size_t i = 0; i < NKEYS; i++) {
        const key_def *k = &keys[i];
        void *f = (char *)c + k->off;
        switch (k->type) {
        case F_NONE: break;
        case F_BOOL: *(bool *)f = k->dflt_u != 0; break;
        case F_SIZE: *(size_t *)f = (size_t)k->dflt_u; break;
        case F_U64: *(uint64_t *)f = k->dflt_u; break;
        case F_UNSIGNED: *(unsigned *)f = (unsigned)k->dflt_u; break;
        case F_INT: *(int *)f = (int)(int64_t)k->dflt_u; break;
        case F_DOUBLE: *(double *)f = k->dflt_d; break;
        }
    }
    strcpy(c->source, "default");
}

static const char *conf_dialect_var(hbm_dialect d)
{
    return d == HBM_DIALECT_NPU ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF";
}

static bool key_known(const rules *r, const key_def *k, hbm_dialect d);

/* What the user likely meant by a key nobody knows: KEY=VALUE for KEY:VALUE, or the nearest key this release
 * reads in this variable (hbmalloc's own keys only where they are allowed). */
static void hint_key(const rules *r, const tok *key, const key_def *k, hbm__sbuf *sb)
{
    if (k)
        return;
    const char *eq = strchr(key->s, '=');
    if (eq) {
        char name[MAX_TOKEN_LEN];
        snprintf(name, sizeof name, "%.*s", (int)(eq - key->s), key->s);
        if (find_key(name)) {
            hbm__sb_printf(sb, "; a key and its value are separated by ':', not '=': write '%s:%s'", name, eq + 1);
            return;
        }
    }
    const char *names[sizeof keys / sizeof keys[0]];
    size_t n = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (key_known(r, &keys[i], r->rel->dialect) && (r->strict || !is_hbm_key(&keys[i])))
            names[n++] = keys[i].name;
    const char *near = hbm__nearest(key->s, names, n);
    if (near)
        hbm__sb_printf(sb, "; did you mean '%s'?", near);
}

/* The framework's words for a key it does not know, and when it would. */

static void unknown_key(const rules *r, const tok *key, const key_def *k, char *err, size_t errlen)
{
    hbm_dialect d = r->rel->dialect;
    hbm__sbuf sb;
    hbm__sb_init(&sb, err, errlen);
    if (r->strict || r->tokenizer) {
        if (d == HBM_DIALECT_NPU)
            hbm__sb_printf(&sb,
                           k && (k->dialects & D_CUDA) && !(k->dialects & D_NPU)
                               ? "torch_npu not support key '%s' in NPU allocator config (character %zu)"
                               : "Unrecognized key '%s' in NPU allocator config (character %zu)",
                           key->s, key->pos);
        else
            hbm__sb_printf(&sb, "Unrecognized key '%s' in CUDA allocator config (character %zu)", key->s, key->pos);
    } else {
        hbm__sb_printf(&sb, "Unrecognized CachingAllocator option: %s (character %zu)", key->s, key->pos);
    }
    hint_key(r, key, k, &sb);
    char since[200];
    if (k && hbm__release_key_since(d, key->s, since, sizeof since))
        hbm__sb_printf(&sb, "; %s is known from %s on, not to %s", key->s, since, r->rel->name);
    else if (k && d == HBM_DIALECT_CUDA && (k->dialects & D_NPU))
        hbm__sb_printf(&sb, "; it is a torch_npu key: use the npu dialect (PYTORCH_NPU_ALLOC_CONF)");
    else if (k && d == HBM_DIALECT_NPU && (k->dialects & D_CUDA))
        hbm__sb_printf(&sb, "; it is a PyTorch CUDA key");
}

static bool key_known(const rules *r, const key_def *k, hbm_dialect d)
{
    if (!k || !(k->dialects & (d == HBM_DIALECT_NPU ? D_NPU : D_CUDA)))
        return false;
    if (is_hbm_key(k))
        return true; /* refused outside HBMALLOC_CONF with its own message */
    return hbm__release_has_key(r->rel, k->name);
}

/* torch_npu's segment_size_mb, once every key is read: the page of the large pool's expandable segments, unless
 * hbm_expandable_page_mb (hbmalloc's own) is given or, from 2.11, large_segment_size_mb is set (compared with
 * kLargeBuffer, 20 MiB: NPUCachingAllocator.cpp master:2764), which wins, with torch_npu's warning
 * (NPUAllocatorConfig.cpp v26.1.0-pytorch2.11.0:489-491, master:355-359). */
static void segment_page(hbm__conf *cf, const rules *r)
{
    if (!cf->segment_size)
        return;
    if (r->rel->seg_page == HBM__SEG_PAGE_UNLESS && cf->large_segment_size != 20 * HBM__MiB)
        warn(cf, "segment_size_mb and large_segment_size_mb are both set: large_segment_size_mb sizes the pages of "
                 "expandable segments (torch_npu warns the same: \"Both `segment_size_mb` and "
                 "`large_segment_size_mb` are set\")");
    else if (!cf->page_given)
        cf->expandable_page = cf->segment_size;
}

static hbm_status parse_tokens(hbm__conf *cf, const lexed *lx, const rules *r, char *err, size_t errlen)
{
    hbm_dialect d = cf->dialect;
    bool max_split_set = false;
    bool framework = !strncmp(cf->source, "PYTORCH_", 8);
    /* large_segment_size_mb first where the release reads it first: it bounds max_split_size_mb. */
    for (int pass = r->rel->large_segment_first ? 0 : 1; pass < 2; pass++) {
        for (size_t i = 0; i < lx->n; i++) {
            const tok *key = &lx->t[i];
            if (is_sep(key->s[0])) {
                if (r->strict) {
                    snprintf(err, errlen,
                             "settings: expected a key at character %zu, found '%s' (the form is "
                             "key:value,key:value)",
                             key->pos, key->s);
                    return HBM_ERR_CONF;
                }
                unknown_key(r, key, NULL, err, errlen);
                return HBM_ERR_CONF;
            }
            const key_def *k = find_key(key->s);
            if (!key_known(r, k, d)) {
                unknown_key(r, key, k, err, errlen);
                return HBM_ERR_CONF;
            }
            if (is_hbm_key(k) && framework) {
                snprintf(err, errlen,
                         "'%s' is an hbmalloc key: %s refuses it in %s (\"Unrecognized CachingAllocator "
                         "option: %s\"); put hbmalloc's keys in HBMALLOC_CONF (character %zu)",
                         key->s, d == HBM_DIALECT_NPU ? "torch_npu" : "PyTorch", cf->source, key->s, key->pos);
                return HBM_ERR_CONF;
            }
            bool colon = i + 1 < lx->n && !strcmp(lx->t[i + 1].s, ":");
            if (i + 2 >= lx->n || (!colon && (r->strict || !r->tokenizer))) {
                if (r->strict || i + 2 >= lx->n)
                    snprintf(err, errlen, "settings: key '%s' at character %zu needs a value: write %s:VALUE%s", key->s,
                             key->pos, key->s,
                             r->strict      ? ""
                             : r->tokenizer ? " (PyTorch: \"Index out of "
                                              "bounds in ConfigTokenizer\")"
                                            : " (\"Error, expecting a value\")");
                else
                    snprintf(err, errlen,
                             "settings: expected ':' after '%s' at character %zu, found '%s' "
                             "(\"Error parsing CachingAllocator settings, expected :\")",
                             key->s, lx->t[i + 1].pos, lx->t[i + 1].s);
                return HBM_ERR_CONF;
            }
            if (r->strict && is_sep(lx->t[i + 2].s[0]) && lx->t[i + 2].s[0] != '[') {
                snprintf(err, errlen, "settings: key '%s' at character %zu needs a value: write %s:VALUE", key->s,
                         key->pos, key->s);
                return HBM_ERR_CONF;
            }
            if (!colon && pass == 1)
                warn(cf, "PyTorch does not check the separator after '%s': '%s' is taken for ':'", key->s,
                     lx->t[i + 1].s);
            i += 2;
            bool is_large = k->id == K_LARGE_SEGMENT;
            if (pass == 0 && !is_large) {
                /* skip the value (a word or a list) */
                if (!strcmp(lx->t[i].s, "["))
                    while (i < lx->n && strcmp(lx->t[i].s, "]"))
                        i++;
            } else if (pass == 0 || !is_large || !r->rel->large_segment_first) {
                if (set_key(cf, k, r, lx, &i, &max_split_set, err, errlen))
                    return HBM_ERR_CONF;
                if (is_large && pass == 0)
                    cf->max_non_split_rounding = cf->large_segment_size; /* its default follows */
            }
            if (i + 1 < lx->n) {
                if (strcmp(lx->t[i + 1].s, ",") != 0) {
                    if (r->strict || !r->tokenizer) {
                        snprintf(err, errlen,
                                 "settings: expected ',' after the value of '%s' at character %zu, "
                                 "found '%s'",
                                 k->name, lx->t[i + 1].pos, lx->t[i + 1].s);
                        return HBM_ERR_CONF;
                    }
                    if (pass == 1)
                        warn(cf, "PyTorch does not check the separator after '%s:%s': '%s' is taken for ','", k->name,
                             lx->t[i].s, lx->t[i + 1].s);
                }
                i++; /* a trailing comma is accepted */
            }
        }
    }
    segment_page(cf, r);
    if (d == HBM_DIALECT_NPU && cf->expandable_segments && (max_split_set || cf->gc_threshold > 0)) {
        static const char msg[] = "`max_split_size_mb` or `garbage_collection_threshold`, cannot be enabled with "
                                  "`expandable_segments`, please set `expandable_segments` to `False`.";
        if (r->strict) {
            /* hbmalloc's own string: the engine runs both, as PyTorch does on CUDA (max_split applies to whole
             * segments and to the pages of expandable ones). */
            warn(cf, "torch_npu 2.13 and later refuse max_split_size_mb / garbage_collection_threshold with "
                     "expandable_segments:True in PYTORCH_NPU_ALLOC_CONF; hbmalloc runs them together, as PyTorch "
                     "does on CUDA");
            goto done;
        }
        int combo = r->rel->combo;
        if (combo == HBM__COMBO_BEFORE_PROBE || (combo == HBM__COMBO_AFTER_PROBE && r->vmm == 1)) {
            snprintf(err, errlen, "invalid settings: %s (%s refuses this combination%s)", msg, r->rel->name,
                     combo == HBM__COMBO_AFTER_PROBE ? " on a device with virtual memory" : "");
            return HBM_ERR_CONF;
        }
        if (combo == HBM__COMBO_AFTER_PROBE && r->vmm == 0) {
            cf->expandable_segments = false;
            warn(cf,
                 "%s turns expandable segments off on this device (no virtual memory: \"expandable_segments "
                 "setting failure, now change to `False`.\"), so max_split_size_mb and garbage_collection_threshold "
                 "apply; on a device with virtual memory it refuses the string",
                 r->rel->name);
        } else if (combo == HBM__COMBO_AFTER_PROBE) {
            cf->combo_needs_no_vmm = true;
            warn(cf,
                 "%s accepts max_split_size_mb / garbage_collection_threshold with expandable_segments:True only "
                 "where the device has no virtual memory (expandable segments then turn off); torch_npu 2.13 and "
                 "later refuse it everywhere",
                 r->rel->name);
        }
    }
done:
    if (cf->backend_async)
        warn(cf, "backend:cudaMallocAsync hands memory to CUDA's stream-ordered allocator in PyTorch; hbmalloc is a "
                 "native caching allocator and applies the native policy");
    return HBM_OK;
}

/* The release a PYTORCH_* variable is read as: `v`, the release the plug-in names (it knows torch.__version__ and
 * torch_npu.__version__), else the newest. */
static hbm_status default_release(hbm__release *rel, hbm_dialect d, const char *v, char *err, size_t errlen)
{
    char inner[300];
    if (hbm__release_find(rel, d, v, inner, sizeof inner) == HBM_OK)
        return HBM_OK;
    if (strstr(inner, "older than")) {
        /* A framework older than any release known still started with its string: read it as the oldest. */
        hbm__release_oldest(rel, d);
        return HBM_OK;
    }
    snprintf(err, errlen, "%s (from %s)", inner,
             d == HBM_DIALECT_NPU ? "HBMALLOC_TORCH_NPU_VERSION" : "HBMALLOC_TORCH_VERSION");
    return HBM_ERR_CONF;
}

/* ';' between settings, as a shell's list would have them: no release splits there. PyTorch's tokenizer splits at
 * ',' ':' '[' ']' only (ConfigTokenizer, c10/core/AllocatorConfig.h:28-44 at pytorch/pytorch 007b9bc0; lexArgs in
 * c10/cuda/CUDAAllocatorConfig.cpp before it; torch_npu uses the same two, as this file's head says), so
 * "True;max_split_size_mb" is one word and the error names a piece of it. Appended to that error: the separator,
 * and the string as it should read. */
static void hint_semicolon(const char *s, char *err, size_t errlen)
{
    char fixed[512];
    snprintf(fixed, sizeof fixed, "%s", s);
    for (char *p = fixed; (p = strchr(p, ';'));)
        *p = ',';
    hbm__sbuf sb = {err, errlen, strlen(err)};
    hbm__sb_printf(&sb, "; settings are separated by ',', not ';': write '%s'", fixed);
}

hbm_status hbm__conf_parse_version(hbm__conf *cf, const char *s, hbm_dialect d, const hbm__release *given,
                                   const char *version, int vmm, char *err, size_t errlen)
{
    char src[sizeof cf->source];
    memcpy(src, cf->source, sizeof src);
    hbm__conf_defaults(cf, d);
    memcpy(cf->source, src, sizeof src);
    if (!s)
        s = "";
    size_t slen = strlen(s);
    cf->text_truncated = slen >= sizeof cf->text;
    snprintf(cf->text, sizeof cf->text, "%s", s);

    hbm__release rel;
    if (given)
        rel = *given;
    else if (default_release(&rel, d, version, err, errlen) != HBM_OK)
        return HBM_ERR_CONF;
    bool framework = !strncmp(cf->source, "PYTORCH_", 8);
    rules r = {&rel, !framework && !given, rel.tokenizer, vmm};
    if (r.strict)
        snprintf(cf->release, sizeof cf->release, "hbmalloc (strict; keys of %s)", rel.name);
    else
        snprintf(cf->release, sizeof cf->release, "%s", rel.name);

    lexed *lx = malloc(sizeof *lx); /* 35 KiB: too large for the stack of a caller's thread */
    if (!lx) {
        snprintf(err, errlen, "out of host memory parsing settings");
        return HBM_ERR_NOMEM;
    }
    hbm_status rc = lex(s, &r, lx, err, errlen);
    if (rc == HBM_OK)
        rc = parse_tokens(cf, lx, &r, err, errlen);
    free(lx);
    if (rc == HBM_ERR_CONF && strchr(s, ';') && errlen)
        hint_semicolon(s, err, errlen);
    return rc;
}

const char *hbm__conf_env_version(hbm_dialect d)
{
    return hbm__env(d == HBM_DIALECT_NPU ? HBM__ENV_TORCH_NPU_VERSION : HBM__ENV_TORCH_VERSION);
}

hbm_status hbm__conf_parse_release(hbm__conf *cf, const char *s, hbm_dialect d, const hbm__release *given, int vmm,
                                   char *err, size_t errlen)
{
    return hbm__conf_parse_version(cf, s, d, given, given ? NULL : hbm__conf_env_version(d), vmm, err, errlen);
}

hbm_status hbm__conf_parse(hbm__conf *cf, const char *s, hbm_dialect d, char *err, size_t errlen)
{
    return hbm__conf_parse_release(cf, s, d, NULL, -1, err, errlen);
}

hbm_status hbm__conf_load(hbm__conf *c, const char *explicit_settings, hbm_dialect d, char *err, size_t errlen)
{
    const char *s = explicit_settings, *src = "explicit";
    if (!s && (s = hbm__env(HBM__ENV_CONF)))
        src = "HBMALLOC_CONF";
    if (!s && d == HBM_DIALECT_NPU) {
        const char *npu = hbm__env(HBM__ENV_PYTORCH_NPU_CONF), *gen = hbm__env(HBM__ENV_PYTORCH_CONF);
        if (npu && gen) {
            snprintf(err, errlen,
                     "Both PYTORCH_NPU_ALLOC_CONF and PYTORCH_ALLOC_CONF have been set, please set only "
                     "one of them.");
            return HBM_ERR_CONF;
        }
        s = npu ? npu : gen;
        src = npu ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_ALLOC_CONF";
    } else if (!s) {
        /* CUDAAllocatorConfig's order: the CUDA variable first, then the generic one. */
        if ((s = hbm__env(HBM__ENV_PYTORCH_CUDA_CONF)))
            src = "PYTORCH_CUDA_ALLOC_CONF";
        else if ((s = hbm__env(HBM__ENV_PYTORCH_CONF)))
            src = "PYTORCH_ALLOC_CONF";
    }
    if (!s) {
        s = "";
        src = "default";
    }
    snprintf(c->source, sizeof c->source, "%s", src);
    char inner[400];
    hbm_status rc = hbm__conf_parse(c, s, d, inner, sizeof inner);
    if (rc != HBM_OK) /* "explicit" is the caller's own string: hbm_open's argument (the tool's --conf) */
        snprintf(err, errlen, "%s (from %s)", inner, strcmp(src, "explicit") ? src : HBM__FROM_ARGUMENT);
    return rc;
}

void hbm__conf_describe(const hbm__conf *c, char *out, size_t outlen)
{
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, outlen);
    hbm__sb_printf(&sb, "dialect: %s (%s)\n", c->dialect == HBM_DIALECT_NPU ? "npu" : "cuda",
                   conf_dialect_var(c->dialect));
    hbm__sb_printf(&sb, "source: %s\n", c->source);
    hbm__sb_printf(&sb, "read as: %s\n", c->release);
    hbm__sb_printf(&sb, "string: \"%s\"%s\n", c->text, c->text_truncated ? " (truncated)" : "");
    for (int line = 1;; line++) { /* each key's line, in the table's order of lines */
        size_t i = 0;
        while (i < NKEYS && keys[i].line != line)
            i++;
        if (i == NKEYS)
            break;
        keys[i].show(c, &sb);
    }
    if (c->warnings[0])
        hbm__sb_printf(&sb, "warnings:\n%s", c->warnings);
}

void hbm__conf_keys(char *out, size_t outlen)
{
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, outlen);
    hbm__sb_printf(&sb, "| key | dialects | value | default | what hbmalloc does with it |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < NKEYS; i++) {
        const key_def *k = &keys[i];
        hbm__sb_printf(&sb, "| `%s` | %s | %s | %s | %s |\n", k->name,
                       is_hbm_key(k)           ? "both (HBMALLOC_CONF only)"
                       : k->dialects == D_BOTH ? "both"
                       : k->dialects == D_NPU  ? "NPU"
                                               : "CUDA",
                       k->value, k->dflt, k->what);
    }
}

/* The shortest decimal that reads back as v ("0.6", not "0.59999999999999998"). */
static void shortest(double v, char *buf, size_t len)
{
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, len, "%.*g", p, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

void hbm__conf_policy_string(const hbm__conf *c, char *out, size_t outlen)
{
    char num[40];
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, outlen);
    bool npu = c->dialect == HBM_DIALECT_NPU;
#define SEP (sb.len ? "," : "")
    if (c->large_segment_size != 20 * HBM__MiB)
        hbm__sb_printf(&sb, "%slarge_segment_size_mb:%zu", SEP, c->large_segment_size / HBM__MiB);
    if (c->max_split_size != SIZE_MAX)
        hbm__sb_printf(&sb, "%smax_split_size_mb:%zu", SEP, c->max_split_size / HBM__MiB);
    if (c->max_non_split_rounding != (c->large_segment_size > 20 * HBM__MiB ? c->large_segment_size : 20 * HBM__MiB))
        hbm__sb_printf(&sb, "%smax_non_split_rounding_mb:%zu", SEP, c->max_non_split_rounding / HBM__MiB);
    if (c->gc_threshold > 0) {
        shortest(c->gc_threshold, num, sizeof num);
        hbm__sb_printf(&sb, "%sgarbage_collection_threshold:%s", SEP, num);
    }
    if (c->memory_fraction < 1.0) {
        shortest(c->memory_fraction, num, sizeof num);
        hbm__sb_printf(&sb, "%sper_process_memory_fraction:%s", SEP, num);
    }
    bool any = false, uniform = true;
    for (int k = 0; k < HBM__ROUNDUP_INTERVALS; k++) {
        any |= c->roundup_divisions[k] != 0;
        uniform &= c->roundup_divisions[k] == c->roundup_divisions[0];
    }
    if (any && uniform && c->roundup_divisions[0])
        hbm__sb_printf(&sb, "%sroundup_power2_divisions:%llu", SEP, (unsigned long long)c->roundup_divisions[0]);
    else if (any) {
        hbm__sb_printf(&sb, "%sroundup_power2_divisions:[", SEP);
        for (int k = 0; k < HBM__ROUNDUP_INTERVALS; k++)
            hbm__sb_printf(&sb, "%s%u:%llu", k ? "," : "", 1u << k, (unsigned long long)c->roundup_divisions[k]);
        hbm__sb_printf(&sb, "]");
    }
    if (c->expandable_segments)
        hbm__sb_printf(&sb, "%sexpandable_segments:True", SEP);
    if (npu && c->page_size_1g)
        hbm__sb_printf(&sb, "%spage_size:1g", SEP);
    if (npu && c->base_addr_aligned_kb != 16)
        hbm__sb_printf(&sb, "%sbase_addr_aligned_kb:%u", SEP, c->base_addr_aligned_kb);
    if (c->remap_free_pages)
        hbm__sb_printf(&sb, "%shbm_remap_free_pages:True", SEP);
    if (c->page_given)
        hbm__sb_printf(&sb, "%shbm_expandable_page_mb:%zu", SEP, c->expandable_page / HBM__MiB);
    else if (npu && c->segment_size && c->expandable_page == c->segment_size)
        hbm__sb_printf(&sb, "%ssegment_size_mb:%zu", SEP, c->segment_size / HBM__MiB);
    if (c->plan_file[0])
        hbm__sb_printf(&sb, "%shbm_plan_file:%s", SEP, c->plan_file);
    if (c->step_plan)
        hbm__sb_printf(&sb, "%shbm_step_plan:True", SEP);
    if (c->publish >= 0)
        hbm__sb_printf(&sb, "%shbm_publish:%s", SEP, c->publish ? "True" : "False");
    if (c->arena_bytes)
        hbm__sb_printf(&sb, "%shbm_arena_mb:%zu", SEP, c->arena_bytes / HBM__MiB);
    else if (c->arena_fraction > 0)
        hbm__sb_printf(&sb, "%shbm_arena_fraction:%g", SEP, c->arena_fraction);
    if (c->headroom_bytes)
        hbm__sb_printf(&sb, "%shbm_headroom_mb:%zu", SEP, c->headroom_bytes / HBM__MiB);
#undef SEP
}
