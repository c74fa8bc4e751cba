/*
 * util.h: small helpers shared by the library and the tools: size parsing and PyTorch-style size formatting,
 * bounded string building, JSON and UTF-8, hashing, a did-you-mean. No policy, no allocator state. The one
 * utility header that tools/, plugin/, bench/ and fuzz/ include besides include/hbmalloc.h.
 */
#ifndef HBM_UTIL_H
#define HBM_UTIL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "hashmap.h" /* the hash map, instantiated per key type */

#define HBM__KiB ((size_t)1024)
#define HBM__MiB ((size_t)1024 * 1024)
#define HBM__GiB ((size_t)1024 * 1024 * 1024)

/* Parse "80GiB", "80G", "512MiB", "4096", "1.5GiB" into bytes. Returns 0 or -1. */
int hbm__parse_size(const char *s, size_t *out);
/* Parse a whole unsigned decimal (digits only, no sign, no overflow). Returns 0 or -1. */
int hbm__parse_u64(const char *s, uint64_t *out);
/* PyTorch's format_size: "512 bytes", "1.50 KiB", "20.00 MiB", "80.00 GiB". */
void hbm__format_size(uint64_t n, char *buf, size_t len);

/* Make room for `need` elements of `elem` bytes in *p (capacity *cap, doubled as it grows).
 * 0, or -1 with *p and *cap unchanged when host memory runs out. */
int hbm__grow(void **p, size_t *cap, size_t need, size_t elem);

/* s as one POSIX shell word, single-quoted ('...', with ' written '\\''), so that a printed
 * `export VAR=...` pastes as it reads: [, ], > and spaces stay in the value. Truncates to fit len. */
void hbm__shell_quote(const char *s, char *out, size_t len);

/* UTF-8 (RFC 3629). hbm__utf8_char: the length (1-4) of the well-formed character at s[0..n), or 0
 * (a stray continuation byte, an overlong form, a surrogate, above U+10FFFF, or cut short by n).
 * hbm__utf8_cut: the largest m <= n such that s[0..m) does not end inside a character (a cut
 * there never splits one; bytes before it are not judged). */
size_t hbm__utf8_char(const unsigned char *s, size_t n);
size_t hbm__utf8_cut(const char *s, size_t n);
/* s as a JSON string, quotes included: always valid JSON whatever the bytes (controls escaped,
 * a byte that is not part of a well-formed UTF-8 character written as U+FFFD). */
void hbm__json_str(FILE *out, const char *s);
/* The same, with < > & escaped too: safe inside an HTML <script> element. */
void hbm__json_str_html(FILE *out, const char *s);

/* Bounded appender: writes at most cap-1 bytes and keeps buf NUL-terminated; a cut falls between
 * UTF-8 characters. */
typedef struct hbm__sbuf {
    char *buf;
    size_t cap, len;
} hbm__sbuf;
void hbm__sb_init(hbm__sbuf *sb, char *buf, size_t cap);
void hbm__sb_printf(hbm__sbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* splitmix64's finalizer: a well-mixed 64-bit hash of z. */
static inline uint64_t hbm__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The name of names[0..n) nearest to word within a few edits (a quarter of its length, at least 2; an adjacent swap
 * is one), for a did-you-mean; NULL when none is that near. */
const char *hbm__nearest(const char *word, const char *const *names, size_t n);

/* 1 when an executable `prog` is in a folder of PATH (empty entries skipped), else 0: the commands that run one
 * (the doctor's npu-smi and nvidia-smi, the view's rsvg-convert) say so when it is missing. */
int hbm__on_path(const char *prog);
/* Why a sleeping pool's tag is refused (empty, a control character: it is printed in tables and tab-separated
 * lines), or NULL when it is fine. */
const char *hbm__tag_invalid(const char *tag);

/* 64 bits no other user can predict (getrandom), for names made with O_EXCL in shared folders; without them (no
 * entropy yet, an old kernel) bits at least unique in this process: O_EXCL still refuses a name that exists. */
uint64_t hbm__random_bits(void);

#endif
