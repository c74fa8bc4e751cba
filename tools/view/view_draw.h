/* view_draw.h: what the static pictures share (view_draw.c). */
#ifndef HBM_TOOLS_VIEW_DRAW_H
#define HBM_TOOLS_VIEW_DRAW_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* s as SVG text: markup escaped, controls and bytes that are not well-formed UTF-8 as U+FFFD. */
void view_xml_text(FILE *f, const char *s);
/* The smallest step of 2^k bytes giving at most `most` intervals up to max. */
uint64_t view_bin_step(uint64_t max, uint64_t most);
/* A tick's label: "0", else a whole number of the largest binary unit the step counts ("16 GiB"). */
void view_tick_label(uint64_t v, uint64_t step, char *out, size_t len);

#endif
