/*
 * conf.c: parses PyTorch allocator settings strings.
 *
 * Owns the grammar (key:value[,key:value]*, list values [a:b,c:d,>:e]), the
 * key sets of the two dialects (CUDA: PYTORCH_CUDA_ALLOC_CONF; NPU:
 * PYTORCH_NPU_ALLOC_CONF), value ranges, cross-key rules and where a string
 * comes from. Must not touch devices or allocator state.
 *
 * Accept/reject decisions follow PyTorch (2.8+ parser) and torch_npu key by
 * key. Where PyTorch's tokenizer is lenient by accident we reject, because a
 * setting silently read as something else is the bug users chase: a number
 * with trailing garbage ("12abc", which std::stoull reads as 12), a missing
 * ':' separator, an empty entry. Whitespace around tokens is dropped, as
 * PyTorch's ConfigTokenizer does; whitespace inside a word separates tokens
 * (PyTorch would glue "1 28" into 128, or a value to the next key when a
 * comma is missing) and so leads to an error.
 */
#include "conf.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

#define MAX_TOKENS 256
#define MAX_TOKEN_LEN 128

typedef struct tok {
    char s[MAX_TOKEN_LEN];
    size_t pos; /* offset of the token's first character in the original string */
} tok;

typedef struct lexed {
    tok t[MAX_TOKENS];
    size_t n;
} lexed;

static int is_sep(char c) { return c == ',' || c == ':' || c == '[' || c == ']'; }

static hbm_status lex(const char *s, lexed *lx, char *err, size_t errlen)
{
    lx->n = 0;
    size_t i = 0;
    while (s[i]) {
        if (isspace((unsigned char)s[i])) {
            i++;
            continue;
        }
        if (lx->n == MAX_TOKENS) {
            snprintf(err, errlen, "settings string has more than %d tokens", MAX_TOKENS);
            return HBM_ERR_CONF;
        }
        tok *t = &lx->t[lx->n++];
        t->pos = i;
        size_t len = 0;
        if (is_sep(s[i])) {
            t->s[len++] = s[i++];
        } else {
            while (s[i] && !is_sep(s[i]) && !isspace((unsigned char)s[i])) {
                if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] >= 0x7f) {
                    snprintf(err, errlen, "settings string has a non-printable byte 0x%02x at character %zu",
                             (unsigned char)s[i], i);
                    return HBM_ERR_CONF;
                }
                if (len == MAX_TOKEN_LEN - 1) {
                    snprintf(err, errlen, "settings string has a word longer than %d characters at character %zu",
                             MAX_TOKEN_LEN - 1, t->pos);
                    return HBM_ERR_CONF;
                }
                t->s[len++] = s[i++];
            }
        }
        t->s[len] = 0;
    }
    return HBM_OK;
}

/* ---- keys ---- */

enum { D_CUDA = 1, D_NPU = 2, D_BOTH = 3 };

typedef enum key_id {
    K_BACKEND, K_MAX_SPLIT, K_MAX_NON_SPLIT, K_LARGE_SEGMENT, K_GC, K_ROUNDUP, K_EXPANDABLE,
    K_RELEASE_LOCK_CUDA, K_RELEASE_LOCK_HIP, K_RELEASE_LOCK_NPU, K_PIN_HOST_REG, K_PIN_HIP_HOST_REG,
    K_PIN_THREADS, K_PIN_BG, K_PIN_RESERVE, K_PIN_ROUND, K_PIN_CACHED, K_GRAPH_REUSE, K_FRACTION,
    K_PIN_CATCH_ALL, K_THROW_CUDA, K_THROW_NPU, K_PIN_EXPANDABLE, K_PIN_REGISTER, K_BASE_ALIGN,
    K_PAGE_SIZE, K_SEGMENT_SIZE, K_LAZY_RECLAIM, K_HBM_REMAP, K_HBM_PAGE
} key_id;

typedef struct key_def {
    const char *name;
    key_id id;
    int dialects;
} key_def;

static const key_def keys[] = {
    {"backend", K_BACKEND, D_CUDA},
    {"max_split_size_mb", K_MAX_SPLIT, D_BOTH},
    {"max_non_split_rounding_mb", K_MAX_NON_SPLIT, D_BOTH},
    {"large_segment_size_mb", K_LARGE_SEGMENT, D_BOTH},
    {"garbage_collection_threshold", K_GC, D_BOTH},
    {"roundup_power2_divisions", K_ROUNDUP, D_BOTH},
    {"expandable_segments", K_EXPANDABLE, D_BOTH},
    {"release_lock_on_cudamalloc", K_RELEASE_LOCK_CUDA, D_CUDA},
    {"release_lock_on_hipmalloc", K_RELEASE_LOCK_HIP, D_CUDA},
    {"release_lock_on_npumalloc", K_RELEASE_LOCK_NPU, D_NPU},
    {"pinned_use_cuda_host_register", K_PIN_HOST_REG, D_CUDA},
    {"pinned_use_hip_host_register", K_PIN_HIP_HOST_REG, D_CUDA},
    {"pinned_num_register_threads", K_PIN_THREADS, D_CUDA},
    {"pinned_use_background_threads", K_PIN_BG, D_BOTH},
    {"pinned_reserve_segment_size_mb", K_PIN_RESERVE, D_BOTH},
    {"pinned_max_round_threshold_mb", K_PIN_ROUND, D_BOTH},
    {"pinned_max_cached_size_mb", K_PIN_CACHED, D_BOTH},
    {"graph_capture_record_stream_reuse", K_GRAPH_REUSE, D_CUDA},
    {"per_process_memory_fraction", K_FRACTION, D_BOTH},
    {"pinned_free_catch_all", K_PIN_CATCH_ALL, D_CUDA},
    {"throw_on_cudamalloc_oom", K_THROW_CUDA, D_CUDA},
    {"throw_on_npumalloc_oom", K_THROW_NPU, D_NPU},
    {"pin_memory_expandable_segments", K_PIN_EXPANDABLE, D_NPU},
    {"pinned_mem_register", K_PIN_REGISTER, D_NPU},
    {"base_addr_aligned_kb", K_BASE_ALIGN, D_NPU},
    {"page_size", K_PAGE_SIZE, D_NPU},
    {"segment_size_mb", K_SEGMENT_SIZE, D_NPU},
    {"multi_stream_lazy_reclaim", K_LAZY_RECLAIM, D_NPU},
    /* hbmalloc's own policies (hbm_ prefix): not PyTorch keys. */
    {"hbm_remap_free_pages", K_HBM_REMAP, D_BOTH},
    {"hbm_expandable_page_mb", K_HBM_PAGE, D_BOTH},
};

static const key_def *find_key(const char *name)
{
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (!strcmp(keys[i].name, name))
            return &keys[i];
    return NULL;
}

/* ---- value parsers: each returns 0, or -1 after writing err ---- */

typedef struct ctx {
    const char *key;
    const tok *val;
    char *err;
    size_t errlen;
} ctx;

static int fail(const ctx *c, const char *allowed)
{
    snprintf(c->err, c->errlen, "invalid setting '%s:%s' (character %zu): %s", c->key, c->val->s, c->val->pos,
             allowed);
    return -1;
}

static int get_bool(const ctx *c, bool *out)
{
    /* PyTorch accepts exactly "True" and "False" (case-sensitive). */
    if (!strcmp(c->val->s, "True"))
        *out = true;
    else if (!strcmp(c->val->s, "False"))
        *out = false;
    else
        return fail(c, "expected True or False (case-sensitive, as PyTorch requires)");
    return 0;
}

static int get_u64(const ctx *c, uint64_t *out, const char *allowed)
{
    if (hbm__parse_u64(c->val->s, out))
        return fail(c, allowed);
    return 0;
}

static int get_double(const ctx *c, double *out, const char *allowed)
{
    const char *s = c->val->s;
    char *end;
    if (!*s || !(isdigit((unsigned char)s[0]) || s[0] == '.'))
        return fail(c, allowed);
    errno = 0;
    double v = strtod(s, &end);
    if (*end || errno || !isfinite(v))
        return fail(c, allowed);
    *out = v;
    return 0;
}

/* An integer count of MiB stored as bytes; PyTorch clamps to SIZE_MAX / MiB. */
static int get_mib(const ctx *c, uint64_t min, uint64_t max, const char *allowed, size_t *bytes)
{
    uint64_t v;
    if (get_u64(c, &v, allowed))
        return -1;
    if (v < min || v > max)
        return fail(c, allowed);
    if (v > SIZE_MAX / HBM__MiB)
        v = SIZE_MAX / HBM__MiB;
    *bytes = (size_t)v * HBM__MiB;
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

/* roundup_power2_divisions: "N" or "[B1:v1,B2:v2,...,>:vk]"; lx/i point at the value. */
static int parse_roundup(hbm__conf *cf, const lexed *lx, size_t *pi, char *err, size_t errlen)
{
    size_t i = *pi;
    ctx c = {"roundup_power2_divisions", &lx->t[i], err, errlen};
    uint32_t *div = cf->roundup_divisions;
    if (strcmp(lx->t[i].s, "[") != 0) {
        uint64_t v;
        if (get_u64(&c, &v, "expected a power of two (1, 2, 4, ...) or a list [MiB:divisions,...,>:divisions]"))
            return -1;
        if (!is_pow2(v) || v > (1u << 30))
            return fail(&c, "the divisions must be a power of two (PyTorch: \"For roundups, the divisions has to be "
                            "power of 2\")");
        for (int k = 0; k < HBM__ROUNDUP_INTERVALS; k++)
            div[k] = (uint32_t)v;
        *pi = i;
        return 0;
    }
    int last_index = -1;
    bool first = true;
    i++;
    for (;;) {
        if (i + 2 >= lx->n) {
            snprintf(err, errlen, "invalid setting roundup_power2_divisions: the list starting at character %zu "
                                  "is not closed with ']'", lx->t[*pi].pos);
            return -1;
        }
        const tok *bound = &lx->t[i], *colon = &lx->t[i + 1], *val = &lx->t[i + 2];
        if (strcmp(colon->s, ":") != 0) {
            snprintf(err, errlen, "invalid setting roundup_power2_divisions: expected ':' after '%s' at character %zu "
                                  "(entries are MiB:divisions)", bound->s, colon->pos);
            return -1;
        }
        ctx cv = {"roundup_power2_divisions", val, err, errlen};
        uint64_t v;
        if (get_u64(&cv, &v, "divisions must be 0 or a power of two") || (v && !is_pow2(v)) || v > (1u << 30))
            return fail(&cv, "divisions must be 0 or a power of two (PyTorch: \"For roundups, the divisions has to be "
                             "power of 2 or 0 to disable roundup\")");
        if (!strcmp(bound->s, ">")) {
            /* PyTorch 2.8+: fills the intervals after the last explicit one
             * (older releases started at the last one, overwriting it). */
            for (int k = last_index + 1; k < HBM__ROUNDUP_INTERVALS; k++)
                div[k] = (uint32_t)v;
        } else {
            ctx cb = {"roundup_power2_divisions", bound, err, errlen};
            uint64_t b;
            if (get_u64(&cb, &b, "interval bounds are MiB, a power of two") || !is_pow2(b))
                return fail(&cb, "interval bounds must be a power of two in MiB (PyTorch: \"For roundups, the "
                                 "intervals have to be power of 2\")");
            int index = log2_floor(b);
            if (index > HBM__ROUNDUP_INTERVALS - 1)
                index = HBM__ROUNDUP_INTERVALS - 1;
            if (first)
                for (int k = 0; k < index; k++)
                    div[k] = (uint32_t)v;
            div[index] = (uint32_t)v;
            last_index = index;
        }
        first = false;
        i += 3;
        if (i >= lx->n) {
            snprintf(err, errlen, "invalid setting roundup_power2_divisions: the list starting at character %zu "
                                  "is not closed with ']'", lx->t[*pi].pos);
            return -1;
        }
        if (!strcmp(lx->t[i].s, "]"))
            break;
        if (strcmp(lx->t[i].s, ",") != 0) {
            snprintf(err, errlen, "invalid setting roundup_power2_divisions: expected ',' or ']' at character %zu, "
                                  "found '%s'", lx->t[i].pos, lx->t[i].s);
            return -1;
        }
        i++;
    }
    *pi = i;
    return 0;
}

static int set_key(hbm__conf *cf, const key_def *k, const lexed *lx, size_t *pi, bool *max_split_set,
                   char *err, size_t errlen)
{
    ctx c = {k->name, &lx->t[*pi], err, errlen};
    bool npu = cf->dialect == HBM_DIALECT_NPU;
    uint64_t v;
    switch (k->id) {
    case K_BACKEND:
        if (!strcmp(c.val->s, "native"))
            cf->backend_async = false;
        else if (!strcmp(c.val->s, "cudaMallocAsync"))
            cf->backend_async = true;
        else
            return fail(&c, "expected native or cudaMallocAsync (PyTorch: \"Unknown allocator backend, options are "
                            "native and cudaMallocAsync\")");
        return 0;
    case K_MAX_SPLIT:
        *max_split_set = true;
        return get_mib(&c, 20, UINT64_MAX, "expected a whole number of MiB >= 20 (PyTorch: \"CachingAllocator option "
                                           "max_split_size_mb too small, must be >= 20\")", &cf->max_split_size);
    case K_MAX_NON_SPLIT:
        return get_mib(&c, 20, UINT64_MAX, "expected a whole number of MiB >= 20 (PyTorch: \"CachingAllocator option "
                                           "max_non_split_rounding_mb too small, must be >= 20\")",
                       &cf->max_non_split_rounding);
    case K_LARGE_SEGMENT:
        if (npu)
            return get_mib(&c, 20, 512, "expected a whole number of MiB in [20, 512] (torch_npu: \"must be [20, 512], "
                                        "dtype is int\")", &cf->large_segment_size);
        return get_mib(&c, 11, UINT64_MAX, "expected a whole number of MiB > 10 (PyTorch: \"CachingAllocator option "
                                           "large_segment_size_mb must be > 10 MB\")", &cf->large_segment_size);
    case K_SEGMENT_SIZE: {
        size_t bytes;
        if (get_mib(&c, 20, 512, "expected a whole number of MiB in [20, 512] (torch_npu: \"CachingAllocator option "
                                 "segment_size_mb error, must be [20, 512], dtype is int\")", &bytes))
            return -1;
        cf->large_segment_size = bytes; /* large_segment_size_mb wins: applied after the loop */
        hbm__sbuf sb = {cf->warnings, sizeof cf->warnings, strlen(cf->warnings)};
        hbm__sb_printf(&sb, "segment_size_mb is deprecated, use large_segment_size_mb (torch_npu warns the same)\n");
        return 0;
    }
    case K_GC: {
        double d;
        if (get_double(&c, &d, "expected a number strictly between 0 and 1"))
            return -1;
        if (!(d > 0.0 && d < 1.0))
            return fail(&c, "expected a number strictly between 0 and 1 (PyTorch: \"garbage_collect_threshold is "
                            "invalid, set it in (0.0, 1.0)\")");
        cf->gc_threshold = d;
        return 0;
    }
    case K_FRACTION: {
        double d;
        if (get_double(&c, &d, "expected a number in [0, 1]"))
            return -1;
        if (!(d >= 0.0 && d <= 1.0))
            return fail(&c, "expected a number in [0, 1] (PyTorch: \"per_process_memory_fraction is invalid, set it "
                            "in [0.0, 1.0]\")");
        cf->memory_fraction = d;
        return 0;
    }
    case K_ROUNDUP:
        return parse_roundup(cf, lx, pi, err, errlen);
    case K_EXPANDABLE: return get_bool(&c, &cf->expandable_segments);
    case K_RELEASE_LOCK_CUDA:
    case K_RELEASE_LOCK_HIP:
    case K_RELEASE_LOCK_NPU: return get_bool(&c, &cf->release_lock_on_malloc);
    case K_PIN_HOST_REG:
    case K_PIN_HIP_HOST_REG: return get_bool(&c, &cf->pinned_use_host_register);
    case K_PIN_BG: return get_bool(&c, &cf->pinned_use_background_threads);
    case K_GRAPH_REUSE: return get_bool(&c, &cf->graph_capture_record_stream_reuse);
    case K_PIN_CATCH_ALL: return get_bool(&c, &cf->pinned_free_catch_all);
    case K_THROW_CUDA:
    case K_THROW_NPU: return get_bool(&c, &cf->throw_on_malloc_oom);
    case K_PIN_EXPANDABLE: return get_bool(&c, &cf->pin_memory_expandable_segments);
    case K_PIN_REGISTER: return get_bool(&c, &cf->pinned_mem_register);
    case K_LAZY_RECLAIM: return get_bool(&c, &cf->multi_stream_lazy_reclaim);
    case K_HBM_REMAP: return get_bool(&c, &cf->remap_free_pages);
    case K_HBM_PAGE: {
        const char *allowed = "expected an even whole number of MiB in [2, 1024] (a multiple of the 2 MiB device "
                              "granularity)";
        if (get_mib(&c, 2, 1024, allowed, &cf->expandable_page))
            return -1;
        return (cf->expandable_page / HBM__MiB) % 2 ? fail(&c, allowed) : 0;
    }
    case K_PIN_THREADS:
        if (get_u64(&c, &v, "expected a power of two <= 128"))
            return -1;
        if (!is_pow2(v))
            return fail(&c, "expected a power of two <= 128 (PyTorch: \"Number of register threads has to be power "
                            "of 2\")");
        if (v > 128)
            return fail(&c, "expected a power of two <= 128 (PyTorch: \"Number of register threads should be less "
                            "than or equal to 128\")");
        cf->pinned_num_register_threads = (unsigned)v;
        return 0;
    case K_PIN_RESERVE:
        if (get_u64(&c, &v, "expected a whole number of MiB > 0") || v == 0)
            return fail(&c, "expected a whole number of MiB > 0 (PyTorch: \"Pinned reserve segment size has to be "
                            "greater than 0\")");
        cf->pinned_reserve_segment_size_mb = v;
        return 0;
    case K_PIN_ROUND: return get_u64(&c, &cf->pinned_max_round_threshold_mb, "expected a whole number of MiB");
    case K_PIN_CACHED: return get_u64(&c, &cf->pinned_max_cached_size_mb, "expected a whole number of MiB");
    case K_BASE_ALIGN:
        if (get_u64(&c, &v, "expected a whole number of KiB in [0, 16] (torch_npu: \"CachingAllocator option "
                            "base_addr_aligned_kb is invalid.\")"))
            return -1;
        if (v > 16)
            return fail(&c, "expected a whole number of KiB in [0, 16] (torch_npu: \"CachingAllocator option "
                            "base_addr_aligned_kb error, must be [0~16], dtype is int\")");
        cf->base_addr_aligned_kb = (unsigned)v;
        return 0;
    case K_PAGE_SIZE:
        if (strcmp(c.val->s, "1g") != 0)
            return fail(&c, "the only page size is 1g (torch_npu: \"Unsupported page_size value\")");
        cf->page_size_1g = true;
        return 0;
    }
    return fail(&c, "internal: unhandled key");
}

void hbm__conf_defaults(hbm__conf *c, hbm_dialect d)
{
    memset(c, 0, sizeof *c);
    c->dialect = d;
    c->max_split_size = SIZE_MAX;
    c->max_non_split_rounding = 20 * HBM__MiB;
    c->large_segment_size = 20 * HBM__MiB;
    c->memory_fraction = 1.0;
    c->pinned_num_register_threads = 1;
    c->base_addr_aligned_kb = 16;
    strcpy(c->source, "default");
}

static const char *dialect_var(hbm_dialect d)
{
    return d == HBM_DIALECT_NPU ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF";
}

hbm_status hbm__conf_parse(hbm__conf *cf, const char *s, hbm_dialect d, char *err, size_t errlen)
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

    lexed *lx = malloc(sizeof *lx); /* 33 KiB: too large for the stack of a caller's thread */
    if (!lx) {
        snprintf(err, errlen, "out of host memory parsing settings");
        return HBM_ERR_NOMEM;
    }
    hbm_status rc = lex(s, lx, err, errlen);
    bool max_split_set = false, large_segment_set = false;
    size_t large_segment = 0;
    for (size_t i = 0; rc == HBM_OK && i < lx->n; i++) {
        const tok *key = &lx->t[i];
        if (is_sep(key->s[0])) {
            snprintf(err, errlen, "settings: expected a key at character %zu, found '%s' (the form is key:value,key:value)",
                     key->pos, key->s);
            rc = HBM_ERR_CONF;
            break;
        }
        const key_def *k = find_key(key->s);
        if (!k || !(k->dialects & (d == HBM_DIALECT_NPU ? D_NPU : D_CUDA))) {
            if (d == HBM_DIALECT_NPU)
                snprintf(err, errlen, k ? "torch_npu not support key '%s' in NPU allocator config (character %zu)"
                                        : "Unrecognized key '%s' in NPU allocator config (character %zu)",
                         key->s, key->pos);
            else
                snprintf(err, errlen, k ? "Unrecognized key '%s' in CUDA allocator config (character %zu); it is a "
                                          "torch_npu key: use the npu dialect (PYTORCH_NPU_ALLOC_CONF)"
                                        : "Unrecognized key '%s' in CUDA allocator config (character %zu)",
                         key->s, key->pos);
            rc = HBM_ERR_CONF;
            break;
        }
        if (i + 2 >= lx->n || strcmp(lx->t[i + 1].s, ":") != 0 ||
            (is_sep(lx->t[i + 2].s[0]) && lx->t[i + 2].s[0] != '[')) {
            snprintf(err, errlen, "settings: key '%s' at character %zu needs a value: write %s:VALUE", key->s,
                     key->pos, key->s);
            rc = HBM_ERR_CONF;
            break;
        }
        if ((k->id == K_HBM_REMAP || k->id == K_HBM_PAGE) && !strncmp(cf->source, "PYTORCH_", 8)) {
            /* The framework parses its variable itself and stops at keys it does not know. */
            snprintf(err, errlen, "'%s' is an hbmalloc key: %s refuses it in %s (\"Unrecognized CachingAllocator "
                                  "option: %s\"); put hbmalloc's keys in HBMALLOC_CONF (character %zu)",
                     key->s, d == HBM_DIALECT_NPU ? "torch_npu" : "PyTorch", cf->source, key->s, key->pos);
            rc = HBM_ERR_CONF;
            break;
        }
        i += 2;
        if (set_key(cf, k, lx, &i, &max_split_set, err, errlen)) {
            rc = HBM_ERR_CONF;
            break;
        }
        if (k->id == K_LARGE_SEGMENT) {
            large_segment_set = true;
            large_segment = cf->large_segment_size;
        }
        if (i + 1 < lx->n) {
            if (strcmp(lx->t[i + 1].s, ",") != 0) {
                snprintf(err, errlen, "settings: expected ',' after the value of '%s' at character %zu, found '%s'",
                         k->name, lx->t[i + 1].pos, lx->t[i + 1].s);
                rc = HBM_ERR_CONF;
                break;
            }
            i++; /* a trailing comma is accepted */
        }
    }
    free(lx);
    if (rc != HBM_OK)
        return rc;
    if (large_segment_set)
        cf->large_segment_size = large_segment; /* torch_npu: large_segment_size_mb wins over segment_size_mb */
    if (d == HBM_DIALECT_NPU && cf->expandable_segments && (max_split_set || cf->gc_threshold > 0)) {
        snprintf(err, errlen, "invalid settings: `max_split_size_mb` or `garbage_collection_threshold`, cannot be "
                              "enabled with `expandable_segments`, please set `expandable_segments` to `False`. "
                              "(torch_npu rejects this combination)");
        return HBM_ERR_CONF;
    }
    if (cf->backend_async) {
        hbm__sbuf sb = {cf->warnings, sizeof cf->warnings, strlen(cf->warnings)};
        hbm__sb_printf(&sb, "backend:cudaMallocAsync hands memory to CUDA's stream-ordered allocator in PyTorch; "
                            "hbmalloc is a native caching allocator and applies the native policy\n");
    }
    return HBM_OK;
}

hbm_status hbm__conf_load(hbm__conf *c, const char *explicit_settings, hbm_dialect d, char *err, size_t errlen)
{
    const char *s = explicit_settings, *src = "explicit";
    if (!s && (s = getenv("HBMALLOC_CONF")))
        src = "HBMALLOC_CONF";
    if (!s && d == HBM_DIALECT_NPU) {
        const char *npu = getenv("PYTORCH_NPU_ALLOC_CONF"), *gen = getenv("PYTORCH_ALLOC_CONF");
        if (npu && gen) {
            snprintf(err, errlen, "Both PYTORCH_NPU_ALLOC_CONF and PYTORCH_ALLOC_CONF have been set, please set only "
                                  "one of them.");
            return HBM_ERR_CONF;
        }
        s = npu ? npu : gen;
        src = npu ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_ALLOC_CONF";
    } else if (!s) {
        /* CUDAAllocatorConfig's order: the CUDA variable first, then the generic one. */
        if ((s = getenv("PYTORCH_CUDA_ALLOC_CONF")))
            src = "PYTORCH_CUDA_ALLOC_CONF";
        else if ((s = getenv("PYTORCH_ALLOC_CONF")))
            src = "PYTORCH_ALLOC_CONF";
    }
    if (!s) {
        s = "";
        src = "default";
    }
    snprintf(c->source, sizeof c->source, "%s", src);
    char inner[400];
    hbm_status rc = hbm__conf_parse(c, s, d, inner, sizeof inner);
    if (rc != HBM_OK)
        snprintf(err, errlen, "%s (from %s)", inner, src);
    return rc;
}

static const char *b2s(bool b) { return b ? "True" : "False"; }

void hbm__conf_describe(const hbm__conf *c, char *out, size_t outlen)
{
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, outlen);
    bool npu = c->dialect == HBM_DIALECT_NPU;
    hbm__sb_printf(&sb, "dialect: %s (%s)\n", npu ? "npu" : "cuda", dialect_var(c->dialect));
    hbm__sb_printf(&sb, "source: %s\n", c->source);
    hbm__sb_printf(&sb, "string: \"%s\"%s\n", c->text, c->text_truncated ? " (truncated)" : "");
    if (c->max_split_size == SIZE_MAX)
        hbm__sb_printf(&sb, "max_split_size_mb: unlimited\n");
    else
        hbm__sb_printf(&sb, "max_split_size_mb: %zu\n", c->max_split_size / HBM__MiB);
    hbm__sb_printf(&sb, "max_non_split_rounding_mb: %zu\n", c->max_non_split_rounding / HBM__MiB);
    hbm__sb_printf(&sb, "large_segment_size_mb: %zu\n", c->large_segment_size / HBM__MiB);
    if (c->gc_threshold > 0)
        hbm__sb_printf(&sb, "garbage_collection_threshold: %g%s\n", c->gc_threshold,
                       c->memory_fraction < 1.0 ? "" : " (inactive: PyTorch runs it only under a memory fraction < 1)");
    else
        hbm__sb_printf(&sb, "garbage_collection_threshold: 0 (off)\n");
    hbm__sb_printf(&sb, "per_process_memory_fraction: %g\n", c->memory_fraction);
    hbm__sb_printf(&sb, "roundup_power2_divisions: [");
    bool any = false;
    for (int k = 0; k < HBM__ROUNDUP_INTERVALS; k++) {
        hbm__sb_printf(&sb, "%s%u:%u", k ? "," : "", 1u << k, c->roundup_divisions[k]);
        any |= c->roundup_divisions[k] > 1;
    }
    hbm__sb_printf(&sb, "]%s\n", any ? "" : " (off)");
    hbm__sb_printf(&sb, "expandable_segments: %s\n", b2s(c->expandable_segments));
    hbm__sb_printf(&sb, "hbm_remap_free_pages: %s (hbmalloc policy%s)\n", b2s(c->remap_free_pages),
                   c->remap_free_pages && !c->expandable_segments ? "; needs expandable_segments:True" : "");
    if (c->expandable_page)
        hbm__sb_printf(&sb, "hbm_expandable_page_mb: %zu (hbmalloc policy: large-pool page of expandable segments%s)\n",
                       c->expandable_page / HBM__MiB, !c->expandable_segments ? "; needs expandable_segments:True" : "");
    else
        hbm__sb_printf(&sb, "hbm_expandable_page_mb: default (large_segment_size_mb, as PyTorch)\n");
    hbm__sb_printf(&sb, "%s: %s\n", npu ? "release_lock_on_npumalloc" : "release_lock_on_cudamalloc",
                   b2s(c->release_lock_on_malloc));
    hbm__sb_printf(&sb, "%s: %s\n", npu ? "throw_on_npumalloc_oom" : "throw_on_cudamalloc_oom",
                   b2s(c->throw_on_malloc_oom));
    if (npu) {
        hbm__sb_printf(&sb, "multi_stream_lazy_reclaim: %s\n", b2s(c->multi_stream_lazy_reclaim));
        hbm__sb_printf(&sb, "page_size: %s\n", c->page_size_1g ? "1g" : "default");
        hbm__sb_printf(&sb, "base_addr_aligned_kb: %u\n", c->base_addr_aligned_kb);
    } else {
        hbm__sb_printf(&sb, "backend: %s\n", c->backend_async ? "cudaMallocAsync (native policy applied)" : "native");
        hbm__sb_printf(&sb, "graph_capture_record_stream_reuse: %s (graph capture only)\n",
                       b2s(c->graph_capture_record_stream_reuse));
    }
    hbm__sb_printf(&sb, "host-allocator keys (pinned host memory, no effect on device memory):");
    hbm__sb_printf(&sb, " pinned_use_background_threads=%s", b2s(c->pinned_use_background_threads));
    if (npu)
        hbm__sb_printf(&sb, " pin_memory_expandable_segments=%s pinned_mem_register=%s",
                       b2s(c->pin_memory_expandable_segments), b2s(c->pinned_mem_register));
    else
        hbm__sb_printf(&sb, " pinned_use_cuda_host_register=%s pinned_num_register_threads=%u pinned_free_catch_all=%s",
                       b2s(c->pinned_use_host_register), c->pinned_num_register_threads, b2s(c->pinned_free_catch_all));
    hbm__sb_printf(&sb, " pinned_reserve_segment_size_mb=%llu pinned_max_round_threshold_mb=%llu "
                        "pinned_max_cached_size_mb=%llu\n",
                   (unsigned long long)c->pinned_reserve_segment_size_mb,
                   (unsigned long long)c->pinned_max_round_threshold_mb,
                   (unsigned long long)c->pinned_max_cached_size_mb);
    if (c->warnings[0])
        hbm__sb_printf(&sb, "warnings:\n%s", c->warnings);
}
