/*
 * conf.h: the PYTORCH_CUDA_ALLOC_CONF / PYTORCH_NPU_ALLOC_CONF grammar turned
 * into a struct of settings. Owns parsing, validation and the text of the
 * effective settings; knows nothing of devices or the engine.
 */
#ifndef HBM_CONF_H
#define HBM_CONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hbmalloc.h"

#define HBM__ROUNDUP_INTERVALS 16

typedef struct hbm__conf {
    hbm_dialect dialect;
    /* Device-memory policy (used by the engine). */
    size_t max_split_size;                              /* SIZE_MAX: unlimited (PyTorch's default) */
    size_t max_non_split_rounding;                      /* oversize reuse tolerance, 20 MiB */
    size_t large_segment_size;                          /* segment for 1..10 MiB requests and large page, 20 MiB */
    double gc_threshold;                                /* 0: off */
    double memory_fraction;                             /* per_process_memory_fraction, 1.0 */
    uint64_t roundup_divisions[HBM__ROUNDUP_INTERVALS]; /* any power of two, as PyTorch's size_t */
    bool expandable_segments;
    bool release_lock_on_malloc;    /* release_lock_on_cudamalloc / release_lock_on_npumalloc */
    bool throw_on_malloc_oom;       /* throw_on_cudamalloc_oom / throw_on_npumalloc_oom */
    bool multi_stream_lazy_reclaim; /* NPU */
    bool page_size_1g;              /* NPU page_size:1g */
    unsigned base_addr_aligned_kb;  /* NPU, 16 */
    bool backend_async;             /* backend:cudaMallocAsync was asked for */
    bool remap_free_pages;          /* hbmalloc policy: move free pages to where a request grows */
    size_t expandable_page;         /* large-pool page of expandable segments; 0 = large_segment_size. Set by
                                        hbm_expandable_page_mb, else by torch_npu's segment_size_mb */
    bool page_given;                /* hbm_expandable_page_mb was given (it wins over segment_size_mb) */
    size_t segment_size;            /* NPU segment_size_mb as given (0: not), see conf.c's K_SEGMENT_SIZE */
    size_t arena_bytes;             /* hbmalloc policy: one region of this size, sub-allocated best fit (0: off) */
    size_t headroom_bytes;          /* hbm_headroom_mb: device memory left free for what is not hbmalloc's (0: off) */
    double arena_fraction;          /* hbmalloc policy: the region as this share of free device memory (0: off) */
    bool step_plan;                 /* hbmalloc policy: learn the step (hbm_step) and serve later steps from a plan */
    char plan_file[128];            /* hbmalloc policy: a plan (hbmalloc plan -o) served from the arena ("": none) */
    int publish;                    /* hbm_publish: statistics for `hbmalloc top` (publish.c): 1 True, 0 False,
                                        -1 not given (the C API: off; the PyTorch plug-ins: on) */
    /* Host (pinned) allocator and graph keys: accepted and validated as PyTorch
     * does, reported by describe; they do not concern device memory. */
    bool pinned_use_host_register, pinned_use_background_threads, pinned_free_catch_all;
    bool graph_capture_record_stream_reuse, pin_memory_expandable_segments, pinned_mem_register;
    unsigned pinned_num_register_threads;
    uint64_t pinned_reserve_segment_size_mb, pinned_max_round_threshold_mb, pinned_max_cached_size_mb;
    bool align_hugepages; /* torch_npu v6.0.rc2 only */
    /* expandable_segments_reserve (PyTorch main): virtual address space per segment, a fraction of the
     * device or GiB; it sizes reservations, not memory. by_class entries are only counted. */
    double es_reserve;
    bool es_reserve_set, es_reserve_gib;
    int es_reserve_classes;
    /* torch_npu: max_split_size_mb / garbage_collection_threshold with expandable_segments:True, which the
     * release refuses only where the device has virtual memory (HBM__COMBO_AFTER_PROBE): the allocator,
     * which knows the device, decides. */
    bool combo_needs_no_vmm;
    /* Where the string came from and what it was. */
    char source[32];
    char text[512];
    bool text_truncated;
    char release[128];   /* the parser reproduced: "hbmalloc (strict)", "PyTorch 2.6", "torch_npu 2.1.0.post6 (...)" */
    char warnings[1024]; /* parse-time warnings: deprecated keys, what a lenient parser read, ignored options */
} hbm__conf;

/* Defaults, as PyTorch has them. */
void hbm__conf_defaults(hbm__conf *c, hbm_dialect d);
struct hbm__release;
/* Parse s (a complete settings string) over defaults. Returns HBM_OK or HBM_ERR_CONF with err set.
 * c->source says whose string it is: a PYTORCH_* variable is read as the framework reads it (the
 * release named by HBMALLOC_TORCH_VERSION / HBMALLOC_TORCH_NPU_VERSION, hbm__conf_env_version, else the newest known, with
 * its leniency, each lenient reading noted in c->warnings); anything else (HBMALLOC_CONF, explicit)
 * strictly, with the newest release's keys and hbmalloc's own hbm_* keys. */
hbm_status hbm__conf_parse(hbm__conf *c, const char *s, hbm_dialect d, char *err, size_t errlen);
/* The same with the release given (NULL: as hbm__conf_parse chooses) and what is known of the device's
 * virtual memory (vmm: 1 yes, 0 no, -1 unknown), which decides torch_npu's expandable combination rule. */
hbm_status hbm__conf_parse_release(hbm__conf *c, const char *s, hbm_dialect d, const struct hbm__release *rel, int vmm,
                                   char *err, size_t errlen);
/* The parser itself: the release given, else the one `version` names (NULL: the newest known); it reads no
 * environment. hbm__conf_parse and hbm__conf_parse_release pass the environment's version (hbm__conf_env_version). */
hbm_status hbm__conf_parse_version(hbm__conf *c, const char *s, hbm_dialect d, const struct hbm__release *rel,
                                   const char *version, int vmm, char *err, size_t errlen);
/* The release a PYTORCH_* string is read as, where the plug-in names it: HBMALLOC_TORCH_VERSION or
 * HBMALLOC_TORCH_NPU_VERSION (NULL: unset, the newest). */
const char *hbm__conf_env_version(hbm_dialect d);
/* Settings from: explicit (if non-NULL), else HBMALLOC_CONF, else the dialect's PyTorch variables. An error in an
 * explicit string ends "(from " HBM__FROM_ARGUMENT ")", which the tool says as "(from --conf)". */
#define HBM__FROM_ARGUMENT HBM_SETTINGS_ARGUMENT
hbm_status hbm__conf_load(hbm__conf *c, const char *explicit_settings, hbm_dialect d, char *err, size_t errlen);
/* The device-memory policy of c as a string hbmalloc reads strictly and the newest releases accept: the keys
 * that differ from the defaults (host-allocator keys left out). Parsing it gives the same policy. */
void hbm__conf_policy_string(const hbm__conf *c, char *out, size_t outlen);
/* Effective settings, one "key: value" per line: each key's line from the table of keys (conf.c). */
void hbm__conf_describe(const hbm__conf *c, char *out, size_t outlen);
/* Every key of that table as the documentation's list: a Markdown table, one row per key. */
void hbm__conf_keys(char *out, size_t outlen);

#endif
