/*
 * ranges.c: free address ranges, a treap ordered by start whose nodes keep the longest range of their subtree
 * (ranges.h says why). The functions recurse to a depth of the treap's height, O(log n)
 * expected.
 */
#include <stdlib.h>

#include "ranges.h"

struct hbm__range_node {
    uintptr_t start, end;
    size_t longest; /* the longest range in this subtree */
    uint64_t prio;  /* a node's priority is above its children's */
    hbm__range_node *l, *r;
};

static size_t length(const hbm__range_node *n) { return n->end - n->start; }

static void update(hbm__range_node *n)
{
    size_t m = length(n);
    if (n->l && n->l->longest > m)
        m = n->l->longest;
    if (n->r && n->r->longest > m)
        m = n->r->longest;
    n->longest = m;
}

/* Joins two treaps, every start in a before every start in b. */
static hbm__range_node *join(hbm__range_node *a, hbm__range_node *b)
{
    if (!a || !b)
        return a ? a : b;
    if (a->prio > b->prio) {
        a->r = join(a->r, b);
        update(a);
        return a;
    }
    b->l = join(a, b->l);
    update(b);
    return b;
}

/* Splits n into the ranges starting before key (*lo) and the others (*hi). */
static void split(hbm__range_node *n, uintptr_t key, hbm__range_node **lo, hbm__range_node **hi)
{
    if (!n) {
        *lo = *hi = NULL;
    } else if (n->start < key) {
        split(n->r, key, &n->r, hi);
        update(n);
        *lo = n;
    } else {
        split(n->l, key, lo, &n->l);
        update(n);
        *hi = n;
    }
}

static hbm__range_node *insert(hbm__range_node *n, hbm__range_node *x)
{
    if (!n)
        return x;
    if (x->prio > n->prio) {
        split(n, x->start, &x->l, &x->r);
        update(x);
        return x;
    }
    if (x->start < n->start)
        n->l = insert(n->l, x);
    else
        n->r = insert(n->r, x);
    update(n);
    return n;
}

/* Removes the range starting at key (which is there) and frees its node. */
static hbm__range_node *remove_at(hbm__range_node *n, uintptr_t key)
{
    if (key == n->start) {
        hbm__range_node *rest = join(n->l, n->r);
        free(n);
        return rest;
    }
    if (key < n->start)
        n->l = remove_at(n->l, key);
    else
        n->r = remove_at(n->r, key);
    update(n);
    return n;
}

/* Brings `longest` up to date on the path to the range starting at key, whose length changed. */
static void refresh(hbm__range_node *n, uintptr_t key)
{
    if (key < n->start)
        refresh(n->l, key);
    else if (key > n->start)
        refresh(n->r, key);
    update(n);
}

/* First fit below n, whose longest holds size: the leftmost range long enough. */
static hbm__range_node *take_at(hbm__ranges *rs, hbm__range_node *n, size_t size, uintptr_t *out)
{
    if (n->l && n->l->longest >= size) {
        n->l = take_at(rs, n->l, size, out);
    } else if (length(n) >= size) {
        *out = n->start;
        n->start += size;
        if (n->start == n->end) {
            hbm__range_node *rest = join(n->l, n->r);
            free(n);
            rs->n--;
            return rest;
        }
    } else {
        n->r = take_at(rs, n->r, size, out);
    }
    update(n);
    return n;
}

int hbm__ranges_take(hbm__ranges *rs, size_t size, uintptr_t *out)
{
    if (!rs->root || rs->root->longest < size || size == 0)
        return -1;
    rs->root = take_at(rs, rs->root, size, out);
    return 0;
}

int hbm__ranges_give(hbm__ranges *rs, uintptr_t start, uintptr_t end)
{
    hbm__range_node *prev = NULL, *next = NULL; /* the last range starting before start, the first one after */
    for (hbm__range_node *n = rs->root; n;) {
        if (n->start < start) {
            prev = n;
            n = n->r;
        } else {
            next = n;
            n = n->l;
        }
    }
    int merge_prev = prev && prev->end == start, merge_next = next && next->start == end;
    if (merge_prev && merge_next) {
        prev->end = next->end;
        rs->root = remove_at(rs->root, next->start);
        rs->n--;
        refresh(rs->root, prev->start);
    } else if (merge_prev) {
        prev->end = end;
        refresh(rs->root, prev->start);
    } else if (merge_next) {
        next->start = start; /* its place in the order is the same: nothing lies between prev's end and start */
        refresh(rs->root, start);
    } else {
        hbm__range_node *x = malloc(sizeof *x);
        if (!x)
            return -1;
        uint64_t p = rs->prio ? rs->prio : 0x9e3779b97f4a7c15ull; /* xorshift64 */
        p ^= p << 13;
        p ^= p >> 7;
        p ^= p << 17;
        rs->prio = p;
        *x = (hbm__range_node){start, end, end - start, p, NULL, NULL};
        rs->root = insert(rs->root, x);
        rs->n++;
    }
    return 0;
}

/* Checks the subtree n; *last: the end of the range before it, 0 for none. */
static long verify(const hbm__range_node *n, uintptr_t *last)
{
    if (!n)
        return 0;
    if ((n->l && n->l->prio > n->prio) || (n->r && n->r->prio > n->prio))
        return -1;
    long left = verify(n->l, last);
    if (left < 0 || n->start >= n->end || (*last && n->start <= *last))
        return -1;
    *last = n->end;
    long right = verify(n->r, last);
    size_t m = length(n);
    if (n->l && n->l->longest > m)
        m = n->l->longest;
    if (n->r && n->r->longest > m)
        m = n->r->longest;
    return right < 0 || m != n->longest ? -1 : left + 1 + right;
}

long hbm__ranges_verify(const hbm__ranges *rs)
{
    uintptr_t last = 0;
    long n = verify(rs->root, &last);
    return n >= 0 && (size_t)n == rs->n ? n : -1;
}

static void free_all(hbm__range_node *n)
{
    while (n) { /* the right spine by a loop, the left one by recursion: the depth stays the treap's height */
        free_all(n->l);
        hbm__range_node *r = n->r;
        free(n);
        n = r;
    }
}

void hbm__ranges_clear(hbm__ranges *rs)
{
    free_all(rs->root);
    rs->root = NULL;
    rs->n = 0;
}
