/* labels.h: interned call-site labels (labels.c). */
#ifndef HBM_CORE_LABELS_H
#define HBM_CORE_LABELS_H

#include "core/types.h"

hbm_status hbm__label_intern(hbm__labels *l, const char *text, hbm_label *out);
/* The same for a's table, with a's error message set when refused (a->lock held). */
hbm_status hbm__label_intern_a(hbm_allocator *a, const char *text, hbm_label *out);
const char *hbm__label_text(const hbm__labels *l, hbm_label id);
void hbm__labels_destroy(hbm__labels *l);

#endif
