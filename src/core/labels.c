/*
 * labels.c: the call-site labels of the history (a label per allocation, as
 * PyTorch keeps a context per block). Owns interning: one id per distinct
 * text, found in O(1) by a hash of the text, and the texts, kept until the
 * allocator is destroyed (ids in the history ring and in blocks refer to
 * them), at most HBM_LABELS_MAX texts and HBM_LABELS_MAX_BYTES bytes of
 * them; the ids are found by their text through the one hash map (util/hashmap.h). Knows nothing of blocks or the
 * ring. Runs with a->lock held.
 */
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"
#include "core/labels.h"
#include "util/util.h"

static uint64_t hash_text(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

uint64_t hbm__label_hash(const void *slots, uint32_t id)
{
    const hbm__labels *l = (const hbm__labels *)((const char *)slots - offsetof(hbm__labels, slots));
    return hash_text(l->text[id - 1]);
}

typedef struct text_of_id {
    const hbm__labels *l;
    const char *text;
} text_of_id;

static int same_text(const void *ctx, uint32_t id)
{
    const text_of_id *t = ctx;
    return !strcmp(t->l->text[id - 1], t->text);
}

hbm_status hbm__label_intern(hbm__labels *l, const char *text, uint32_t *out)
{
    size_t len = strlen(text);
    l->full = 0;
    if (len > HBM_LABEL_MAX)
        return HBM_ERR_INVALID;
    if ((!l->slots.keys && hbm__label_slots_init(&l->slots)) || hbm__label_slots_reserve(&l->slots, 1))
        return HBM_ERR_NOMEM;
    l->nslot = (uint32_t)(l->slots.mask + 1);
    text_of_id want = {l, text};
    size_t i = hbm__label_slots_probe(&l->slots, hash_text(text), same_text, &want);
    if (hbm__label_slots_occupied(&l->slots, i)) {
        *out = l->slots.keys[i];
        return HBM_OK;
    }
    l->full = l->n >= HBM_LABELS_MAX || l->bytes + len + 1 > HBM_LABELS_MAX_BYTES;
    if (l->full)
        return HBM_ERR_NOMEM;
    size_t cap = l->cap;
    if (hbm__grow((void **)&l->text, &cap, (size_t)l->n + 1, sizeof *l->text))
        return HBM_ERR_NOMEM;
    l->cap = cap;
    char *copy = malloc(len + 1);
    if (!copy)
        return HBM_ERR_NOMEM;
    memcpy(copy, text, len + 1);
    l->text[l->n++] = copy;
    l->bytes += len + 1;
    (void)hbm__label_slots_put_at(&l->slots, i, l->n, 0); /* room was made above */
    *out = l->n;
    return HBM_OK;
}

const char *hbm__label_text(const hbm__labels *l, uint32_t id) { return id && id <= l->n ? l->text[id - 1] : NULL; }

void hbm__labels_destroy(hbm__labels *l)
{
    for (uint32_t i = 0; i < l->n; i++)
        free(l->text[i]);
    free(l->text);
    hbm__label_slots_free(&l->slots);
    memset(l, 0, sizeof *l);
}

hbm_status hbm__label_intern_a(hbm_allocator *a, const char *text, hbm_label *out)
{
    hbm_status rc = hbm__label_intern(&a->labels, text, out);
    if (rc == HBM_ERR_INVALID)
        hbm__set_error(a, "label of %zu bytes: at most %d are kept", strlen(text), HBM_LABEL_MAX);
    else if (rc != HBM_OK && a->labels.full)
        hbm__set_error(a,
                       "label table full: %u labels, %zu bytes of text, kept until hbm_destroy (at most %d and "
                       "%u): label what repeats (a call site, a phase), not what grows (a step number)",
                       a->labels.n, a->labels.bytes, HBM_LABELS_MAX, HBM_LABELS_MAX_BYTES);
    else if (rc != HBM_OK)
        hbm__set_error(a, "out of host memory for allocator bookkeeping");
    return rc;
}

hbm_status hbm_label_intern(hbm_allocator *a, const char *text, hbm_label *out)
{
    if (!a || !text || !out)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc = hbm__label_intern_a(a, text, out);
    hbm__unlock(a);
    return rc;
}
