/*
 * pickle.h: a reader for the subset of Python's pickle format that PyTorch
 * memory snapshots use (protocols 2-5: dicts, lists, tuples, strings, ints,
 * floats, bools, None, memo operations, frames), and for JSON into the same
 * values (hbmalloc's JSON snapshots). It never executes anything:
 * an opcode outside the subset (GLOBAL, REDUCE, ...) is rejected with its
 * name and byte offset, and so is a truncated or malformed file. Nesting,
 * element counts and lengths are bounded by the file itself.
 *
 * Costs are bounded by the file: every value takes a node of 24 bytes and a
 * slot in its container (None, booleans and small integers share nodes), so
 * memory stays a small multiple of the input; a value reached through memo
 * references is one node however often it is referenced (callers that walk
 * nested references must bound their own work, see import_pytorch.c), and a
 * dict lookup is O(log n) however many pairs the dict has.
 */
#ifndef HBM_TOOLS_PICKLE_H
#define HBM_TOOLS_PICKLE_H

#include <stddef.h>
#include <stdint.h>

typedef enum pv_type { PV_NONE, PV_BOOL, PV_INT, PV_FLOAT, PV_STR, PV_LIST, PV_TUPLE, PV_DICT } pv_type;

typedef struct pv {
    uint8_t type;
    uint8_t indexed; /* PV_DICT of more than INDEX_MIN pairs: items[2n..] hold its keys' sorted order */
    uint32_t mark;   /* the caller's (0 after parsing; pv_set_mark): a value reached through memo references is one
                        node, so a mark made at one place is seen at all of them (import_pytorch.c: a frames list's
                        stack, built once) */
    union {
        int64_t i; /* PV_BOOL, PV_INT */
        double f;  /* PV_FLOAT */
        struct {
            const char *s; /* not NUL-terminated; points into the file */
            uint32_t len;
        } str;
        struct {
            struct pv **items; /* dict: key, value, key, value, ... */
            uint32_t n, cap;
        } seq;
    } u;
} pv;

typedef struct pickle_doc pickle_doc;

/* Parse data (kept by the caller while the document lives). Returns the root or NULL with
 * "offset N: message" in err. */
pv *pickle_parse(const unsigned char *data, size_t len, pickle_doc **doc, char *err, size_t errlen);
/* JSON (RFC 8259, and Python's NaN, Infinity, -Infinity) into the same values: objects as dicts, arrays as lists;
 * the same bounds. Returns the root or NULL with "line L, column C: message" in err. */
pv *json_parse(const unsigned char *data, size_t len, pickle_doc **doc, char *err, size_t errlen);
void pickle_free(pickle_doc *doc);

/* Helpers */
const pv *pv_get(const pv *dict, const char *key); /* the last value set for key (as Python); NULL if absent */
int pv_is_str(const pv *v, const char *s);
int pv_int(const pv *v, int64_t *out); /* 0 if v is an int or bool */
uint32_t pv_len(const pv *v);          /* items of a list/tuple, pairs of a dict, 0 otherwise */
const pv *pv_at(const pv *seq, uint32_t i);
/* Sets v's mark: the nodes belong to the document, which belongs to the caller. */
void pv_set_mark(const pv *v, uint32_t mark);

#endif
