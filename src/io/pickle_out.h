/* pickle_out.h: see pickle_out.c. */
#ifndef HBM_PICKLE_OUT_H
#define HBM_PICKLE_OUT_H

#include <stddef.h>
#include <stdint.h>

typedef struct hbm__pickle_out hbm__pickle_out;
hbm__pickle_out *hbm__pw_new(void);
int hbm__pw_finish(hbm__pickle_out *w, unsigned char **data, size_t *len); /* 0, or -1 (out of memory) */
void hbm__pw_dict(hbm__pickle_out *w); /* open a dict: then key, value, key, value, ...; then hbm__pw_end */
void hbm__pw_list(hbm__pickle_out *w); /* open a list: then items; then hbm__pw_end */
void hbm__pw_end(hbm__pickle_out *w);
void hbm__pw_str(hbm__pickle_out *w, const char *s);
void hbm__pw_int(hbm__pickle_out *w, int64_t v);
void hbm__pw_float(hbm__pickle_out *w, double v);
void hbm__pw_bool(hbm__pickle_out *w, int v);
void hbm__pw_none(hbm__pickle_out *w);
void hbm__pw_pair(hbm__pickle_out *w, int64_t a, int64_t b); /* a 2-tuple of ints */

#endif
