/*
 * wrap.h: the doctor's text fitted to a terminal (wrap.c): lines wrapped at words to DOCTOR_WIDTH columns, and
 * quoted log text cut at a word with a mark. Every printer of `hbmalloc doctor` writes through it; the JSON output
 * is never wrapped.
 */
#ifndef HBM_DOCTOR_WRAP_H
#define HBM_DOCTOR_WRAP_H

#include <stddef.h>
#include <stdio.h>

/* The widest line the doctor prints for people: fits a 100-column terminal and a review tool's diff. */
#define DOCTOR_WIDTH 100

/* prefix, then text, on lines no wider than width columns (a UTF-8 character is one column, an East Asian wide one
 * two); the lines after the first hang under the text (indented by prefix's width). Lines break at spaces (a run of
 * them is one break, kept as written inside a line) and at a '\n' in text; a word that does not fit a whole line
 * breaks after a '/', ',' or ';', or between wide characters, or else stands alone on its line, longer than width:
 * a word is never cut. Kept on one line: "export" and the assignment after it (even past the width, so that a
 * printed export pastes), an option and its value ("-i 0"), and a figure and its unit ("80.00 GiB"). A line of text
 * that starts with "$ " is a command: written on lines of its own, its arguments whole, continued with " \\" (so that
 * it pastes into a shell as printed, and tests run it as printed). */
void doctor_wrap(FILE *out, int width, const char *prefix, const char *text);

/* How much of s[0..n) to keep to quote it in at most max bytes: all of it when it fits, else up to the last space
 * before the limit (never inside a word; inside a UTF-8 character neither, for text without spaces such as Chinese),
 * with trailing spaces dropped. *cut is set to 1 when text was dropped: the caller then adds " ...". */
size_t doctor_quote_len(const char *s, size_t n, size_t max, int *cut);

#endif
