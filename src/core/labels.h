/* labels.h: interned call-site labels (labels.c): their table, which the allocator holds (core/types.h), and its
 * functions. */
#ifndef HBM_CORE_LABELS_H
#define HBM_CORE_LABELS_H

#include <stddef.h>
#include <stdint.h>

#include "util/hashmap.h"
#include "hbmalloc.h"

/* The ids of interned labels found by their text: the hash map (util/hashmap.h) of ids (0: an empty cell),
 * hashed by their text (labels.c). */
uint64_t hbm__label_hash(const void *slots, uint32_t id);
#define HBM__LABEL_HASH(m, id) hbm__label_hash(m, id)
HBM__HASHMAP(hbm__label_slots, uint32_t, uint8_t, HBM__LABEL_HASH, 0, 0, 64)

/* Interned label texts (labels.c): text[id - 1]; slots finds an id by its text. */
typedef struct hbm__labels {
    char **text;
    uint32_t n, cap;
    hbm__label_slots slots;
    uint32_t nslot; /* slots' capacity (a power of two; its load is at most 1/2), or 0 before the first label */
    size_t bytes;   /* of text kept, bounded by HBM_LABELS_MAX_BYTES */
    int full;       /* the last refusal was the bound, not host memory */
} hbm__labels;

hbm_status hbm__label_intern(hbm__labels *l, const char *text, hbm_label *out);
/* The same for a's table, with a's error message set when refused (a->lock held). */
hbm_status hbm__label_intern_a(hbm_allocator *a, const char *text, hbm_label *out);
const char *hbm__label_text(const hbm__labels *l, hbm_label id);
void hbm__labels_destroy(hbm__labels *l);

#endif
