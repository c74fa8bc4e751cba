/*
 * releases.c: the PyTorch and torch_npu releases whose settings parsers
 * hbmalloc reproduces, and what distinguishes them.
 *
 * torch_npu: one row per release, generated from the tags of Ascend/pytorch
 * by scripts/gen-npu-releases.py (src/conf/npu_releases.inc). PyTorch: the
 * stored sources hold one version of each file, not its tags, so a key's
 * first release is the first release branch cut after the pull request that
 * added it (the table names the PR); parser generations are read from
 * sources (docs/CONFIGURATION.md, "Releases", gives the files).
 */
#include "conf/releases.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

/* ---- PyTorch (CUDA dialect) ---- */

#define TORCH_OLDEST 1  /* 2.1: expandable_segments appeared */
#define TORCH_NEWEST 14 /* main: 2.14.0a0 */

static const struct {
    const char *key;
    int minor; /* first PyTorch 2.x release */
    const char *evidence;
} torch_keys[] = {
    {"max_split_size_mb", 1, "1.10"},
    {"garbage_collection_threshold", 1, "1.12"},
    {"roundup_power2_divisions", 1, "1.12; list form 2.0"},
    {"backend", 1, "2.0"},
    {"expandable_segments", 1, "PR #96995 (2023-03)"},
    {"release_lock_on_cudamalloc", 2, "PR #108367 (2023-08)"},
    {"release_lock_on_hipmalloc", 2, "PR #110715 (2023-10)"},
    {"pinned_use_cuda_host_register", 2, "PR #111545 (2023-10)"},
    {"pinned_use_hip_host_register", 2, "PR #111545 (2023-10)"},
    {"pinned_num_register_threads", 2, "PR #111545 (2023-10)"},
    {"pinned_use_background_threads", 6, "PR #135524 (2024-09)"},
    {"max_non_split_rounding_mb", 6, "PR #136174 (2024-09)"},
    {"graph_capture_record_stream_reuse", 9, "PR #158352 (2025-08)"},
    {"per_process_memory_fraction", 9, "PR #161035 (2025-08)"},
    {"pinned_reserve_segment_size_mb", 10, "PR #164501 (2025-10)"},
    {"pinned_free_catch_all", 11, "in CUDAAllocatorConfig.cpp after PR #165281 (2025-10)"},
    {"throw_on_cudamalloc_oom", 11, "in CUDAAllocatorConfig.cpp after PR #165281 (2025-10)"},
    {"large_segment_size_mb", 11, "PR #172056 (2026-01)"},
    {"expandable_segments_reserve", 14, "PR #192269 (2026-08)"},
    {"expandable_segments_reserve_by_class", 14, "PR #192269 (2026-08)"},
    {"pinned_max_round_threshold_mb", 14, "main: torch_npu master lists it as a c10 key"},
    {"pinned_max_cached_size_mb", 14, "main: torch_npu master lists it as a c10 key"},
};

static void torch_release(hbm__release *r, int minor, bool newest)
{
    memset(r, 0, sizeof *r);
    r->dialect = HBM_DIALECT_CUDA;
    r->newest = newest;
    r->torch_minor = minor;
    if (minor == TORCH_NEWEST)
        snprintf(r->name, sizeof r->name, "PyTorch 2.%d (main)", minor);
    else
        snprintf(r->name, sizeof r->name, "PyTorch 2.%d", minor);
    /* c10/cuda/CUDAAllocatorConfig.cpp: lexArgs/consumeToken up to 2.9; ConfigTokenizer from PR #165281
     * (merged 2025-10-16, after 2.9 shipped). */
    r->tokenizer = minor >= 10;
    r->split_gt20 = minor <= 9;     /* old parseMaxSplitSize: "must be > 20" */
    r->roundup_gt_bug = minor <= 9; /* old: std::fill from last_index; new: last_index + 1 */
    r->large_segment_first = minor >= 11;
    r->alloc_conf = minor >= 10;
}

/* ---- torch_npu (NPU dialect) ---- */

typedef struct npu_row {
    const char *version, *tag, *keys;
    int combo, split_gt, split_digit, tokenizer, alloc_conf, warn_probe, seg_page;
} npu_row;

static const npu_row npu_rows[] = {
#include "npu_releases.inc"
};
#define NPU_ROWS (sizeof npu_rows / sizeof npu_rows[0])

/* "2.1.0.post6" -> {2, 1, 0, kind, n}: kind 0 rcN, 1 release, 2 postN. -1 if not a version. */
static int parse_version(const char *s, long v[5])
{
    memset(v, 0, 5 * sizeof v[0]);
    v[3] = 1;
    char *end;
    for (int k = 0; k < 3; k++) {
        if (!isdigit((unsigned char)*s))
            return k >= 2 ? 0 : -1; /* "2.6" is 2.6.0 */
        v[k] = strtol(s, &end, 10);
        s = end;
        if (k < 2) {
            if (*s != '.')
                return k == 1 ? 0 : -1;
            s++;
        }
    }
    if (*s == '.')
        s++;
    if (!strncmp(s, "post", 4) || !strncmp(s, "rc", 2)) {
        v[3] = *s == 'p' ? 2 : 0;
        s += *s == 'p' ? 4 : 2;
        if (!isdigit((unsigned char)*s))
            return -1;
        v[4] = strtol(s, &end, 10);
    }
    return 0; /* trailing local versions ("+cu124", "a0+git...") are ignored */
}

static int version_cmp(const long a[5], const long b[5])
{
    for (int k = 0; k < 5; k++)
        if (a[k] != b[k])
            return a[k] < b[k] ? -1 : 1;
    return 0;
}

/* Release tags in release order: v6.0.rc2 < v6.0.rc3 < v6.0.0 < v6.0.0.1 < v7.0.0 < v26.2.0-0day. */
static int tag_cmp(const char *a, const char *b)
{
    if ((*a == 'v') != (*b == 'v'))
        return *a == 'v' ? -1 : 1; /* "master ..." is after every release tag */
    while (*a == 'v')
        a++;
    while (*b == 'v')
        b++;
    for (;;) {
        long x = 0, y = 0;
        int ax = !strncmp(a, "rc", 2), bx = !strncmp(b, "rc", 2);
        x = ax ? strtol(a + 2, NULL, 10) - 1000 : isdigit((unsigned char)*a) ? strtol(a, NULL, 10) : -2000;
        y = bx ? strtol(b + 2, NULL, 10) - 1000 : isdigit((unsigned char)*b) ? strtol(b, NULL, 10) : -2000;
        if (x != y)
            return x < y ? -1 : 1;
        if (x == -2000)
            return 0;
        a += strcspn(a, ".-");
        b += strcspn(b, ".-");
        if (*a != '.' || *b != '.')
            return (*a == '.') - (*b == '.');
        a++;
        b++;
    }
}

static void npu_release(hbm__release *r, const npu_row *row, bool newest)
{
    memset(r, 0, sizeof *r);
    r->dialect = HBM_DIALECT_NPU;
    r->newest = newest;
    snprintf(r->name, sizeof r->name, "torch_npu %s (%s)", row->version, row->tag);
    long v[5];
    r->torch_minor = parse_version(row->version, v) == 0 && v[0] == 2 ? (int)v[1] : 0;
    r->tokenizer = row->tokenizer;
    r->split_gt20 = row->split_gt;
    r->split_digits = row->split_digit;
    r->roundup_gt_bug = false; /* NPUCachingAllocator.cpp v7.3.0: std::fill from last_index + 1 */
    r->combo = row->combo;
    r->alloc_conf = row->alloc_conf;
    r->warn_probe = row->warn_probe;
    r->seg_page = row->seg_page;
    r->keys = row->keys;
    r->tag = row->tag;
    r->large_segment_first = strstr(row->keys, "large_segment_size_mb") != NULL;
}

hbm_status hbm__release_find(hbm__release *r, hbm_dialect d, const char *version, char *err, size_t errlen)
{
    bool newest = !version || !*version;
    long v[5];
    if (!newest && parse_version(version, v)) {
        snprintf(err, errlen, "'%.60s' is not a version: expected MAJOR.MINOR[.PATCH][.postN] (e.g. %s)", version,
                 d == HBM_DIALECT_NPU ? "2.1.0.post6" : "2.6");
        return HBM_ERR_CONF;
    }
    if (d == HBM_DIALECT_CUDA) {
        if (newest) {
            torch_release(r, TORCH_NEWEST, true);
            return HBM_OK;
        }
        if (v[0] < 2 || (v[0] == 2 && v[1] < TORCH_OLDEST)) {
            snprintf(err, errlen, "PyTorch %.60s is older than the oldest release hbmalloc knows (2.%d)", version,
                     TORCH_OLDEST);
            return HBM_ERR_CONF;
        }
        int minor = v[0] > 2 || v[1] > TORCH_NEWEST ? TORCH_NEWEST : (int)v[1];
        torch_release(r, minor, false);
        if (v[0] > 2 || v[1] > TORCH_NEWEST)
            snprintf(r->name + strlen(r->name), sizeof r->name - strlen(r->name), " (newest known, for %.20s)",
                     version);
        return HBM_OK;
    }
    if (newest) {
        npu_release(r, &npu_rows[NPU_ROWS - 1], true);
        return HBM_OK;
    }
    /* The newest row not after the version. */
    const npu_row *best = NULL;
    long bv[5] = {0};
    for (size_t i = 0; i < NPU_ROWS; i++) {
        long rv[5];
        if (parse_version(npu_rows[i].version, rv) || version_cmp(rv, v) > 0)
            continue;
        if (!best || version_cmp(rv, bv) > 0) {
            best = &npu_rows[i];
            memcpy(bv, rv, sizeof bv);
        }
    }
    if (!best) {
        snprintf(err, errlen, "torch_npu %.60s is older than the oldest release hbmalloc knows (%s)", version,
                 npu_rows[0].version);
        return HBM_ERR_CONF;
    }
    npu_release(r, best, false);
    if (version_cmp(bv, v) != 0)
        snprintf(r->name + strlen(r->name), sizeof r->name - strlen(r->name), ", read for %.20s", version);
    return HBM_OK;
}

void hbm__release_oldest(hbm__release *r, hbm_dialect d)
{
    if (d == HBM_DIALECT_CUDA)
        torch_release(r, TORCH_OLDEST, false);
    else
        npu_release(r, &npu_rows[0], false);
}

static bool word_in(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)); p += n)
        if ((p == list || p[-1] == ' ') && (p[n] == ' ' || !p[n]))
            return true;
    return false;
}

bool hbm__release_has_key(const hbm__release *r, const char *key)
{
    if (r->dialect == HBM_DIALECT_NPU)
        return word_in(r->keys, key);
    for (size_t i = 0; i < sizeof torch_keys / sizeof torch_keys[0]; i++)
        if (!strcmp(torch_keys[i].key, key))
            return r->torch_minor >= torch_keys[i].minor;
    return false;
}

const char *hbm__release_key_since(hbm_dialect d, const char *key, char *buf, size_t len)
{
    if (d == HBM_DIALECT_CUDA) {
        for (size_t i = 0; i < sizeof torch_keys / sizeof torch_keys[0]; i++)
            if (!strcmp(torch_keys[i].key, key)) {
                snprintf(buf, len, "PyTorch 2.%d%s", torch_keys[i].minor,
                         torch_keys[i].minor == TORCH_NEWEST ? " (main)" : "");
                return buf;
            }
        return NULL;
    }
    const char *first = NULL;
    for (size_t i = 0; i < NPU_ROWS; i++)
        if (word_in(npu_rows[i].keys, key) && (!first || tag_cmp(npu_rows[i].tag, first) < 0))
            first = npu_rows[i].tag;
    if (!first)
        return NULL;
    size_t tlen = strcspn(first, "-");
    hbm__sbuf sb;
    hbm__sb_init(&sb, buf, len);
    hbm__sb_printf(&sb, "torch_npu %.*s (", (int)tlen, first);
    int n = 0;
    for (size_t i = 0; i < NPU_ROWS; i++)
        if (word_in(npu_rows[i].keys, key) && !strncmp(npu_rows[i].tag, first, tlen) && npu_rows[i].tag[tlen] == '-')
            hbm__sb_printf(&sb, "%s%s", n++ ? ", " : "", npu_rows[i].version);
    hbm__sb_printf(&sb, ")");
    return buf;
}

void hbm_release_list(hbm_dialect d, char *out, size_t len)
{
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, len);
    if (d == HBM_DIALECT_CUDA) {
        for (int m = TORCH_OLDEST; m <= TORCH_NEWEST; m++) {
            hbm__release r;
            torch_release(&r, m, false);
            hbm__sb_printf(&sb, "%-34s %s parser, max_split_size_mb %s; keys:", r.name,
                           r.tokenizer ? "ConfigTokenizer" : "lexArgs/consumeToken",
                           r.split_gt20 ? "> 20"
                           : m >= 11    ? ">= large_segment_size_mb"
                                        : ">= 20");
            for (size_t i = 0; i < sizeof torch_keys / sizeof torch_keys[0]; i++)
                if (torch_keys[i].minor <= m)
                    hbm__sb_printf(&sb, " %s", torch_keys[i].key);
            hbm__sb_printf(&sb, "\n");
        }
        return;
    }
    static const char *const combo[] = {"no check", "refused unless the probe fails", "refused"};
    for (size_t i = 0; i < NPU_ROWS; i++)
        hbm__sb_printf(&sb, "torch_npu %-13s %-30s %s; expandable with max_split/GC: %s; keys: %s\n",
                       npu_rows[i].version, npu_rows[i].tag,
                       npu_rows[i].tokenizer ? "ConfigTokenizer" : "lexArgs/consumeToken", combo[npu_rows[i].combo],
                       npu_rows[i].keys);
}
