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

typedef struct hbm__rb {
    struct hbm__rb *l, *r, *p;
    bool red;
} hbm__rb;

/* The ordering: true when a sorts before b. Keys are unique. */
typedef bool (*hbm__rb_less)(const hbm__rb *a, const hbm__rb *b);

static inline bool hbm__rb_is_red(const hbm__rb *n) { return n && n->red; }

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
        y->l->p = x;
    y->p = x->p;
    hbm__rb_replace(root, x->p, x, y);
    y->l = x;
    x->p = y;
}

static inline void hbm__rb_rot_right(hbm__rb **root, hbm__rb *x)
{
    hbm__rb *y = x->l;
    x->l = y->r;
    if (y->r)
        y->r->p = x;
    y->p = x->p;
    hbm__rb_replace(root, x->p, x, y);
    y->r = x;
    x->p = y;
}

/* Restore the colours after linking red node z as a leaf. */
static inline void hbm__rb_insert_fix(hbm__rb **root, hbm__rb *z)
{
    hbm__rb *p;
    while ((p = z->p) && p->red) {
        hbm__rb *g = p->p; /* exists: a red node is never the root */
        if (p == g->l) {
            hbm__rb *u = g->r;
            if (hbm__rb_is_red(u)) {
                p->red = u->red = false;
                g->red = true;
                z = g;
                continue;
            }
            if (z == p->r) {
                hbm__rb_rot_left(root, p);
                p = z;
            }
            p->red = false;
            g->red = true;
            hbm__rb_rot_right(root, g);
        } else {
            hbm__rb *u = g->l;
            if (hbm__rb_is_red(u)) {
                p->red = u->red = false;
                g->red = true;
                z = g;
                continue;
            }
            if (z == p->l) {
                hbm__rb_rot_right(root, p);
                p = z;
            }
            p->red = false;
            g->red = true;
            hbm__rb_rot_left(root, g);
        }
        break;
    }
    (*root)->red = false;
}

static inline void hbm__rb_insert(hbm__rb **root, hbm__rb *n, hbm__rb_less less)
{
    hbm__rb *parent = NULL, **link = root;
    while (*link) {
        parent = *link;
        link = less(n, parent) ? &parent->l : &parent->r;
    }
    n->l = n->r = NULL;
    n->p = parent;
    n->red = true;
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
            if (w->red) {
                w->red = false;
                parent->red = true;
                hbm__rb_rot_left(root, parent);
                w = parent->r;
            }
            if (!hbm__rb_is_red(w->l) && !hbm__rb_is_red(w->r)) {
                w->red = true;
                x = parent;
                parent = x->p;
                continue;
            }
            if (!hbm__rb_is_red(w->r)) {
                w->l->red = false;
                w->red = true;
                hbm__rb_rot_right(root, w);
                w = parent->r;
            }
            w->red = parent->red;
            parent->red = false;
            w->r->red = false;
            hbm__rb_rot_left(root, parent);
        } else {
            hbm__rb *w = parent->l;
            if (w->red) {
                w->red = false;
                parent->red = true;
                hbm__rb_rot_right(root, parent);
                w = parent->l;
            }
            if (!hbm__rb_is_red(w->l) && !hbm__rb_is_red(w->r)) {
                w->red = true;
                x = parent;
                parent = x->p;
                continue;
            }
            if (!hbm__rb_is_red(w->l)) {
                w->r->red = false;
                w->red = true;
                hbm__rb_rot_left(root, w);
                w = parent->l;
            }
            w->red = parent->red;
            parent->red = false;
            w->l->red = false;
            hbm__rb_rot_right(root, parent);
        }
        x = *root;
        break;
    }
    if (x)
        x->red = false;
}

/* Unlink z, which must be in the tree. No comparison is made. */
static inline void hbm__rb_remove(hbm__rb **root, hbm__rb *z)
{
    hbm__rb *child, *parent;
    bool was_red;
    if (!z->l || !z->r) {
        child = z->l ? z->l : z->r;
        parent = z->p;
        was_red = z->red;
        if (child)
            child->p = parent;
        hbm__rb_replace(root, parent, z, child);
    } else {
        /* Two children: z's successor y takes z's place and colour. */
        hbm__rb *y = z->r;
        while (y->l)
            y = y->l;
        was_red = y->red;
        child = y->r;
        if (y->p == z) {
            parent = y;
        } else {
            parent = y->p;
            parent->l = child;
            if (child)
                child->p = parent;
            y->r = z->r;
            z->r->p = y;
        }
        y->l = z->l;
        z->l->p = y;
        y->p = z->p;
        y->red = z->red;
        hbm__rb_replace(root, z->p, z, y);
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
    while (n->p && n == n->p->r)
        n = n->p;
    return n->p;
}

static inline hbm__rb *hbm__rb_prev(const hbm__rb *n)
{
    if (n->l)
        return hbm__rb_last(n->l);
    while (n->p && n == n->p->l)
        n = n->p;
    return n->p;
}

/* The shape rules below t (for the validator and the tests): parent links
 * agree, no red node has a red child, every path has the same number of
 * black nodes. Returns that black height, or -1 where a rule is broken. */
static inline int hbm__rb_verify(const hbm__rb *t, const hbm__rb *parent)
{
    if (!t)
        return 0;
    if (t->p != parent || (t->red && (hbm__rb_is_red(t->l) || hbm__rb_is_red(t->r))) || (!parent && t->red))
        return -1;
    int hl = hbm__rb_verify(t->l, t), hr = hbm__rb_verify(t->r, t);
    if (hl < 0 || hl != hr)
        return -1;
    return hl + !t->red;
}

#endif /* HBM_RB_H */
