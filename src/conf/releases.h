/*
 * releases.h: which framework release reads a settings string, and how.
 *
 * A settings variable is parsed by the framework the user runs, not by
 * hbmalloc: PYTORCH_CUDA_ALLOC_CONF by PyTorch, PYTORCH_NPU_ALLOC_CONF by
 * torch_npu. Their parsers changed from release to release (keys added, a
 * tolerant tokenizer replacing a strict one, bounds moved). A release
 * describes one parser: which keys it knows and which of those behaviours it
 * has. Owns the release tables; knows nothing of parsing itself.
 */
#ifndef HBM_RELEASES_H
#define HBM_RELEASES_H

#include <stdbool.h>
#include <stddef.h>

#include "hbmalloc.h"

/* How torch_npu treats max_split_size_mb / garbage_collection_threshold with expandable_segments:True. */
enum {
    HBM__COMBO_NONE = 0,        /* no check: accepted */
    HBM__COMBO_AFTER_PROBE = 1, /* checked after the virtual-memory probe turned expandable segments off
                                   where the device cannot: refused only on a device that can */
    HBM__COMBO_BEFORE_PROBE = 2 /* refused on every device */
};

/* What torch_npu's segment_size_mb sizes (scripts/gen-npu-releases.py reads it at each tag). Never a whole
 * segment: get_allocation_size keeps 20 MiB (large_segment_size_mb where the release has it). */
enum {
    HBM__SEG_PAGE_NONE = 0,  /* the release has no segment_size_mb */
    HBM__SEG_PAGE = 1,       /* the page of the large pool's expandable segments (v7.2.0.1 to 2.10) */
    HBM__SEG_PAGE_UNLESS = 2 /* that page unless large_segment_size_mb is set, deprecated (2.11 on) */
};

typedef struct hbm__release {
    hbm_dialect dialect; /* CUDA: PyTorch; NPU: torch_npu */
    char name[96];       /* "PyTorch 2.6", "torch_npu 2.1.0.post6 (v6.0.rc2-pytorch2.1.0)" */
    bool newest;         /* no version given: the newest release known */
    int torch_minor;     /* the PyTorch 2.x minor this release is (CUDA) or builds on (NPU) */
    bool tokenizer;      /* c10 ConfigTokenizer: every isspace dropped, separators not checked, std::stoull */
    bool split_gt20;     /* max_split_size_mb / max_non_split_rounding_mb must be > 20 (else >= the large segment) */
    bool split_digits;   /* torch_npu: max_split_size_mb and large_segment_size_mb must be all digits */
    bool roundup_gt_bug; /* '>' in a roundup_power2_divisions list also overwrites the last entry */
    bool large_segment_first; /* large_segment_size_mb read before the other keys, sets max_non_split's default */
    int combo;                /* HBM__COMBO_*: NPU only */
    bool alloc_conf;          /* PYTORCH_ALLOC_CONF is read as well */
    bool warn_probe;          /* torch_npu prints "expandable_segments feature is not supportted" at start-up */
    int seg_page;             /* NPU: what segment_size_mb sizes (HBM__SEG_PAGE_*) */
    const char *keys;         /* NPU: the keys its parser names, space-separated; NULL for CUDA (see has_key) */
    const char *tag;          /* NPU: the release tag ("v6.0.rc2-pytorch2.1.0"); "" for CUDA */
} hbm__release;

/* The release a version names ("2.6", "2.6.0", "2.1.0.post6"); NULL or "" for the newest. A version
 * between two known ones reads as the older; one before the oldest known, or not a version, is an error. */
hbm_status hbm__release_find(hbm__release *r, hbm_dialect d, const char *version, char *err, size_t errlen);
/* The oldest release known for the dialect. */
void hbm__release_oldest(hbm__release *r, hbm_dialect d);
/* Whether the release's parser knows the key. */
bool hbm__release_has_key(const hbm__release *r, const char *key);
/* The first release that knows the key, as text ("PyTorch 2.9", "torch_npu v26.1.0 (2.10.0.post4, ...)"), or
 * NULL when no release of the dialect does. */
const char *hbm__release_key_since(hbm_dialect d, const char *key, char *buf, size_t len);

#endif
