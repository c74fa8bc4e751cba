/*
 * avl.h: an intrusive AVL tree. Owns ordering and balance only; it never
 * allocates, and knows nothing of blocks: callers embed an hbm__avl and pass
 * a comparator (keys must be unique, e.g. by including the address).
 *
 * Every operation is O(log n). The functions are static inline so that a
 * constant comparator is inlined at each call site (the malloc path).
 */
#ifndef HBM_AVL_H
#define HBM_AVL_H

#include <stddef.h>

typedef struct hbm__avl {
    struct hbm__avl *l, *r;
    int h;
} hbm__avl;

typedef int (*hbm__avl_cmp)(const hbm__avl *a, const hbm__avl *b);

static inline int hbm__avl_h(const hbm__avl *t) { return t ? t->h : 0; }

static inline void hbm__avl_fix(hbm__avl *t)
{
    int hl = hbm__avl_h(t->l), hr = hbm__avl_h(t->r);
    t->h = 1 + (hl > hr ? hl : hr);
}

static inline hbm__avl *hbm__avl_rot_right(hbm__avl *t)
{
    hbm__avl *l = t->l;
    t->l = l->r;
    l->r = t;
    hbm__avl_fix(t);
    hbm__avl_fix(l);
    return l;
}

static inline hbm__avl *hbm__avl_rot_left(hbm__avl *t)
{
    hbm__avl *r = t->r;
    t->r = r->l;
    r->l = t;
    hbm__avl_fix(t);
    hbm__avl_fix(r);
    return r;
}

static inline hbm__avl *hbm__avl_balance(hbm__avl *t)
{
    int d = hbm__avl_h(t->l) - hbm__avl_h(t->r);
    if (d > 1) {
        if (hbm__avl_h(t->l->l) < hbm__avl_h(t->l->r))
            t->l = hbm__avl_rot_left(t->l);
        return hbm__avl_rot_right(t);
    }
    if (d < -1) {
        if (hbm__avl_h(t->r->r) < hbm__avl_h(t->r->l))
            t->r = hbm__avl_rot_right(t->r);
        return hbm__avl_rot_left(t);
    }
    hbm__avl_fix(t);
    return t;
}

static inline hbm__avl *hbm__avl_insert_rec(hbm__avl *t, hbm__avl *n, hbm__avl_cmp cmp)
{
    if (!t) {
        n->l = n->r = NULL;
        n->h = 1;
        return n;
    }
    /* When the child subtree keeps its height, nothing above it changes:
     * skip the rebalancing on the way up (most inserts stop low). */
    if (cmp(n, t) < 0) {
        int h = hbm__avl_h(t->l);
        t->l = hbm__avl_insert_rec(t->l, n, cmp);
        if (t->l->h == h)
            return t;
    } else {
        int h = hbm__avl_h(t->r);
        t->r = hbm__avl_insert_rec(t->r, n, cmp);
        if (t->r->h == h)
            return t;
    }
    return hbm__avl_balance(t);
}

static inline void hbm__avl_insert(hbm__avl **root, hbm__avl *n, hbm__avl_cmp cmp)
{
    *root = hbm__avl_insert_rec(*root, n, cmp);
}

static inline hbm__avl *hbm__avl_remove_min(hbm__avl *t, hbm__avl **min)
{
    if (!t->l) {
        *min = t;
        return t->r;
    }
    t->l = hbm__avl_remove_min(t->l, min);
    return hbm__avl_balance(t);
}

/* Removes the node comparing equal to n (n itself, keys being unique). */
static inline hbm__avl *hbm__avl_remove_rec(hbm__avl *t, const hbm__avl *n, hbm__avl_cmp cmp)
{
    if (!t)
        return NULL;
    int c = cmp(n, t);
    if (c < 0) {
        int h = hbm__avl_h(t->l);
        t->l = hbm__avl_remove_rec(t->l, n, cmp);
        if (hbm__avl_h(t->l) == h)
            return t;
    } else if (c > 0) {
        int h = hbm__avl_h(t->r);
        t->r = hbm__avl_remove_rec(t->r, n, cmp);
        if (hbm__avl_h(t->r) == h)
            return t;
    } else {
        hbm__avl *m;
        if (!t->l)
            return t->r;
        if (!t->r)
            return t->l;
        hbm__avl *r = hbm__avl_remove_min(t->r, &m);
        m->l = t->l;
        m->r = r;
        t = m;
    }
    return hbm__avl_balance(t);
}

static inline void hbm__avl_remove(hbm__avl **root, const hbm__avl *n, hbm__avl_cmp cmp)
{
    *root = hbm__avl_remove_rec(*root, n, cmp);
}

/* Smallest node >= key. */
static inline hbm__avl *hbm__avl_lower_bound(hbm__avl *t, const hbm__avl *key, hbm__avl_cmp cmp)
{
    hbm__avl *best = NULL;
    while (t) {
        if (cmp(t, key) >= 0) {
            best = t;
            t = t->l;
        } else {
            t = t->r;
        }
    }
    return best;
}

/* Smallest node > key. */
static inline hbm__avl *hbm__avl_upper_bound(hbm__avl *t, const hbm__avl *key, hbm__avl_cmp cmp)
{
    hbm__avl *best = NULL;
    while (t) {
        if (cmp(t, key) > 0) {
            best = t;
            t = t->l;
        } else {
            t = t->r;
        }
    }
    return best;
}

/* Largest node < key. */
static inline hbm__avl *hbm__avl_before(hbm__avl *t, const hbm__avl *key, hbm__avl_cmp cmp)
{
    hbm__avl *best = NULL;
    while (t) {
        if (cmp(t, key) < 0) {
            best = t;
            t = t->r;
        } else {
            t = t->l;
        }
    }
    return best;
}

static inline hbm__avl *hbm__avl_first(hbm__avl *t)
{
    while (t && t->l)
        t = t->l;
    return t;
}

static inline hbm__avl *hbm__avl_last(hbm__avl *t)
{
    while (t && t->r)
        t = t->r;
    return t;
}

#endif /* HBM_AVL_H */
