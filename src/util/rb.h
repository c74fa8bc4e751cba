/*
 * rb.h: an intrusive red-black tree with parent pointers. Owns ordering and
 * balance only; it never allocates, and knows nothing of blocks: callers
 * embed an hbm__rb and pass a comparator (keys must be unique, e.g. by
 * including the address).
 *
 * Why this shape: the allocator removes nodes it already holds (the best fit
 * it just found, the neighbours it coalesces with) far more often than it
 * searches. With parent pointers a removal needs no descent and no
 * comparison, and rebalancing is O(1) rotations amortised; stepping to the
 * next or previous node is O(1) amortised. Insertion and the searches are
 * one descent, O(log n), with one hard-to-predict branch per level: the
 * orderings are written to need no more (pool.h), and the descent branches
 * on their result. (A descent with no branch at all, the child indexed by the result,
 * measured 25-30% slower on the replay benchmark: it turns every level into
 * a dependent load, where the predictor usually guesses right.) The
 * functions are static inline so that a constant ordering is inlined at
 * each call site (the malloc path).
 */
#ifndef HBM_RB_H
#define HBM_RB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Three words: the colour is the low bit of the parent's address (nodes are pointer-aligned), which takes a block
 * object from 136 to 128 bytes before the free-only fields overlap the live-only ones (issue #38 item 3). */
typedef struct hbm__rb {
    struct hbm__rb *l, *r;
    uintptr_t pc; /* the parent's address | 1 when red */
} hbm__rb;

static inline hbm__rb *hbm__rb_parent(const hbm__rb *n) { return (hbm__rb *)(n->pc & ~(uintptr_t)1); }
static inline bool hbm__rb_red(const hbm__rb *n) { return n->pc & 1; }
static inline void hbm__rb_set_parent(hbm__rb *n, const hbm__rb *p) { n->pc = (uintptr_t)p | (n->pc & 1); }
static inline void hbm__rb_set_red(hbm__rb *n, bool red) { n->pc = (n->pc & ~(uintptr_t)1) | (uintptr_t)red; }

/* The ordering: true when a sorts before b. Keys are unique. */
typedef bool (*hbm__rb_less)(const hbm__rb *a, const hbm__rb *b);

static inline bool hbm__rb_is_red(const hbm__rb *n) { return n && hbm__rb_red(n); }

/* Make `to` take from's place under parent (the root when parent is NULL). */
static inline void hbm__rb_replace(hbm__rb **root, hbm__rb *parent, const hbm__rb *from, hbm__rb *to)
{
    if (!parent)
        *root = to;
    else if (parent->l == from)
        parent->l = to;
    else
        parent->r = to;
}

static inline void hbm__rb_rot_left(hbm__rb **root, hbm__rb *x)
{
    hbm__rb *y = x->r;
    x->r = y->l;
    if (y->l)
        hbm__rb_set_parent(y->l, x);
    hbm__rb_set_parent(y, hbm__rb_parent(x));
    hbm__rb_replace(root, hbm__rb_parent(x), x, y);
    y->l = x;
    hbm__rb_set_parent(x, y);
}

static inline void hbm__rb_rot_right(hbm__rb **root, hbm__rb *x)
{
    hbm__rb *y = x->l;
    x->l = y->r;
    if (y->r)
        hbm__rb_set_parent(y->r, x);
    hbm__rb_set_parent(y, hbm__rb_parent(x));
    hbm__rb_replace(root, hbm__rb_parent(x), x, y);
    y->r = x;
    hbm__rb_set_parent(x, y);
}

/* Restore the colours after linking red node z as a leaf. */
static inline void hbm__rb_insert_fix(hbm__rb **root, hbm__rb *z)
{
    hbm__rb *p;
    while ((p = hbm__rb_parent(z)) && hbm__rb_red(p)) {
        hbm__rb *g = hbm__rb_parent(p); /* exists: a red node is never the root */
        if (p == g->l) {
            hbm__rb *u = g->r;
            if (hbm__rb_is_red(u)) {
                hbm__rb_set_red(p, false);
                hbm__rb_set_red(u, false);
                hbm__rb_set_red(g, true);
                z = g;
                continue;
            }
            if (z == p->r) {
                hbm__rb_rot_left(root, p);
                p = z;
            }
            hbm__rb_set_red(p, false);
            hbm__rb_set_red(g, true);
            hbm__rb_rot_right(root, g);
        } else {
            hbm__rb *u = g->l;
            if (hbm__rb_is_red(u)) {
                hbm__rb_set_red(p, false);
                hbm__rb_set_red(u, false);
                hbm__rb_set_red(g, true);
                z = g;
                continue;
            }
            if (z == p->l) {
                hbm__rb_rot_right(root, p);
                p = z;
            }
            hbm__rb_set_red(p, false);
            hbm__rb_set_red(g, true);
            hbm__rb_rot_left(root, g);
        }
        break;
    }
    hbm__rb_set_red(*root, false);
}

static inline void hbm__rb_insert(hbm__rb **root, hbm__rb *n, hbm__rb_less less)
{
    hbm__rb *parent = NULL, **link = root;
    while (*link) {
        parent = *link;
        link = less(n, parent) ? &parent->l : &parent->r;
    }
    n->l = n->r = NULL;
    n->pc = (uintptr_t)parent | 1; /* red */
    *link = n;
    hbm__rb_insert_fix(root, n);
}

/* Restore the black height after a black node left the tree; x (maybe NULL)
 * took its place under parent. */
static inline void hbm__rb_remove_fix(hbm__rb **root, hbm__rb *x, hbm__rb *parent)
{
    while (x != *root && !hbm__rb_is_red(x)) {
        if (x == parent->l) {
            hbm__rb *w = parent->r; /* exists: x's side is one black short */
            if (hbm__rb_red(w)) {
                hbm__rb_set_red(w, false);
                hbm__rb_set_red(parent, true);
                hbm__rb_rot_left(root, parent);
                w = parent->r;
            }
            if (!hbm__rb_is_red(w->l) && !hbm__rb_is_red(w->r)) {
                hbm__rb_set_red(w, true);
                x = parent;
                parent = hbm__rb_parent(x);
                continue;
            }
            if (!hbm__rb_is_red(w->r)) {
                hbm__rb_set_red(w->l, false);
                hbm__rb_set_red(w, true);
                hbm__rb_rot_right(root, w);
                w = parent->r;
            }
            hbm__rb_set_red(w, hbm__rb_red(parent));
            hbm__rb_set_red(parent, false);
            hbm__rb_set_red(w->r, false);
            hbm__rb_rot_left(root, parent);
        } else {
            hbm__rb *w = parent->l;
            if (hbm__rb_red(w)) {
                hbm__rb_set_red(w, false);
                hbm__rb_set_red(parent, true);
                hbm__rb_rot_right(root, parent);
                w = parent->l;
            }
            if (!hbm__rb_is_red(w->l) && !hbm__rb_is_red(w->r)) {
                hbm__rb_set_red(w, true);
                x = parent;
                parent = hbm__rb_parent(x);
                continue;
            }
            if (!hbm__rb_is_red(w->l)) {
                hbm__rb_set_red(w->r, false);
                hbm__rb_set_red(w, true);
                hbm__rb_rot_left(root, w);
                w = parent->l;
            }
            hbm__rb_set_red(w, hbm__rb_red(parent));
            hbm__rb_set_red(parent, false);
            hbm__rb_set_red(w->l, false);
            hbm__rb_rot_right(root, parent);
        }
        x = *root;
        break;
    }
    if (x)
        hbm__rb_set_red(x, false);
}

/* Unlink z, which must be in the tree. No comparison is made. */
static inline void hbm__rb_remove(hbm__rb **root, hbm__rb *z)
{
    hbm__rb *child, *parent;
    bool was_red;
    if (!z->l || !z->r) {
        child = z->l ? z->l : z->r;
        parent = hbm__rb_parent(z);
        was_red = hbm__rb_red(z);
        if (child)
            hbm__rb_set_parent(child, parent);
        hbm__rb_replace(root, parent, z, child);
    } else {
        /* Two children: z's successor y takes z's place and colour. */
        hbm__rb *y = z->r;
        while (y->l)
            y = y->l;
        was_red = hbm__rb_red(y);
        child = y->r;
        if (hbm__rb_parent(y) == z) {
            parent = y;
        } else {
            parent = hbm__rb_parent(y);
            parent->l = child;
            if (child)
                hbm__rb_set_parent(child, parent);
            y->r = z->r;
            hbm__rb_set_parent(z->r, y);
        }
        y->l = z->l;
        hbm__rb_set_parent(z->l, y);
        y->pc = z->pc; /* z's parent and colour */
        hbm__rb_replace(root, hbm__rb_parent(z), z, y);
    }
    if (!was_red)
        hbm__rb_remove_fix(root, child, parent);
}

/* Smallest node not before key. */
static inline hbm__rb *hbm__rb_lower_bound(hbm__rb *t, const hbm__rb *key, hbm__rb_less less)
{
    hbm__rb *best = NULL;
    while (t) {
        if (less(t, key)) {
            t = t->r;
        } else {
            best = t;
            t = t->l;
        }
    }
    return best;
}

/* Smallest node after key. */
static inline hbm__rb *hbm__rb_upper_bound(hbm__rb *t, const hbm__rb *key, hbm__rb_less less)
{
    hbm__rb *best = NULL;
    while (t) {
        if (less(key, t)) {
            best = t;
            t = t->l;
        } else {
            t = t->r;
        }
    }
    return best;
}

/* Largest node before key. */
static inline hbm__rb *hbm__rb_before(hbm__rb *t, const hbm__rb *key, hbm__rb_less less)
{
    hbm__rb *best = NULL;
    while (t) {
        if (less(t, key)) {
            best = t;
            t = t->r;
        } else {
            t = t->l;
        }
    }
    return best;
}

static inline hbm__rb *hbm__rb_first(hbm__rb *t)
{
    while (t && t->l)
        t = t->l;
    return t;
}

static inline hbm__rb *hbm__rb_last(hbm__rb *t)
{
    while (t && t->r)
        t = t->r;
    return t;
}

/* In-order successor and predecessor of a node in the tree, or NULL. */
static inline hbm__rb *hbm__rb_next(const hbm__rb *n)
{
    if (n->r)
        return hbm__rb_first(n->r);
    while (hbm__rb_parent(n) && n == hbm__rb_parent(n)->r)
        n = hbm__rb_parent(n);
    return hbm__rb_parent(n);
}

static inline hbm__rb *hbm__rb_prev(const hbm__rb *n)
{
    if (n->l)
        return hbm__rb_last(n->l);
    while (hbm__rb_parent(n) && n == hbm__rb_parent(n)->l)
        n = hbm__rb_parent(n);
    return hbm__rb_parent(n);
}

/* The shape rules below t (for the validator and the tests): parent links
 * agree, no red node has a red child, every path has the same number of
 * black nodes. Returns that black height, or -1 where a rule is broken. */
static inline int hbm__rb_verify(const hbm__rb *t, const hbm__rb *parent)
{
    if (!t)
        return 0;
    if (hbm__rb_parent(t) != parent || (hbm__rb_red(t) && (hbm__rb_is_red(t->l) || hbm__rb_is_red(t->r))) ||
        (!parent && hbm__rb_red(t)))
        return -1;
    int hl = hbm__rb_verify(t->l, t), hr = hbm__rb_verify(t->r, t);
    if (hl < 0 || hl != hr)
        return -1;
    return hl + !hbm__rb_red(t);
}

#endif /* HBM_RB_H */
