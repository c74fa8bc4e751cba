/* test_pool.c: the red-black free index and the pointer map against simple reference models. */
#include "helpers.h"

#include "core/pool.h"

#define N 4000


static hbm__segment seg[3];
static hbm__block blk[N];
static bool in[N];

/* Reference lower_bound: scan every block in the pool. */
static hbm__block *ref_lower_bound(hbm_stream stream, size_t size)
{
    hbm__block *best = NULL;
    for (int i = 0; i < N; i++) {
        if (!in[i] || blk[i].stream < stream || (blk[i].stream == stream && blk[i].size < size))
            continue;
        if (!best || hbm__block_less(&blk[i].node, &best->node))
            best = &blk[i];
    }
    return best;
}

/* Height of the tree (longest path), for the balance bound. */
static int height(const hbm__rb *t)
{
    if (!t)
        return 0;
    int l = height(t->l), r = height(t->r);
    return 1 + (l > r ? l : r);
}

static void lower_bound_matches_a_linear_scan(void **st)
{
    (void)st;
    hbm__pool p = {0};
    for (int k = 0; k < 3; k++)
        seg[k].stream = (hbm_stream)k * 5;
    for (int i = 0; i < N; i++) {
        blk[i].seg = &seg[rnd() % 3];
        blk[i].stream = blk[i].seg->stream;
        blk[i].size = (1 + rnd() % 64) * 512;
        blk[i].addr = (uintptr_t)(i + 1) * 65536;
    }
    for (int step = 0; step < 40000; step++) {
        int i = (int)(rnd() % N);
        if (in[i])
            hbm__pool_remove(&p, &blk[i]);
        else
            hbm__pool_insert(&p, &blk[i]);
        in[i] = !in[i];
        hbm_stream s = (hbm_stream)(rnd() % 3) * 5;
        size_t size = (1 + rnd() % 70) * 512;
        assert_ptr_equal(hbm__pool_lower_bound(&p, s, size), ref_lower_bound(s, size));
        if (step % 97 == 0)
            assert_true(hbm__rb_verify(p.free_tree, NULL) >= 0);
    }
    assert_true(hbm__rb_verify(p.free_tree, NULL) >= 0);
    size_t count = 0;
    hbm__block *prev = NULL;
    for (hbm__block *b = hbm__pool_first(&p); b; b = hbm__tree_next(b)) {
        if (prev) {
            assert_true(hbm__block_less(&prev->node, &b->node));
            assert_false(hbm__block_less(&b->node, &prev->node));
            assert_ptr_equal(hbm__tree_prev(b), prev);
        }
        prev = b;
        count++;
    }
    assert_int_equal(count, p.nfree);
    /* A red-black tree of n nodes is at most 2 log2(n + 1) high: 24 for 4000. */
    assert_true(height(p.free_tree) <= 24);
    /* The shape check can fail: a red root, and a red node under a red parent, are both refused. */
    hbm__rb *root = p.free_tree;
    hbm__rb_set_red(root, true);
    assert_true(hbm__rb_verify(root, NULL) < 0);
    hbm__rb_set_red(root, false);
    hbm__rb *n = root;
    while (n->l && n->l->l)
        n = n->l;
    bool was_red[2] = {hbm__rb_red(n), hbm__rb_red(n->l)};
    hbm__rb_set_red(n, true);
    hbm__rb_set_red(n->l, true);
    assert_true(hbm__rb_verify(root, NULL) < 0);
    hbm__rb_set_red(n, was_red[0]);
    hbm__rb_set_red(n->l, was_red[1]);
    assert_true(hbm__rb_verify(root, NULL) >= 0);
    /* Empty it again, removing the first, the last and the root in turn, checking as it shrinks. */
    for (int i = 0; p.nfree > 0; i++) {
        hbm__block *b = i % 3 == 0   ? hbm__pool_first(&p)
                        : i % 3 == 1 ? hbm__pool_node(hbm__rb_last(p.free_tree))
                                     : hbm__pool_node(p.free_tree);
        hbm__pool_remove(&p, b);
        in[b - blk] = false;
        if (i % 53 == 0)
            assert_true(hbm__rb_verify(p.free_tree, NULL) >= 0);
    }
    assert_null(p.free_tree);
}

static void pointer_map_matches_a_reference(void **st)
{
    (void)st;
    hbm__ptrmap m;
    assert_int_equal(hbm__ptrmap_init(&m), 0);
    static hbm__block obj[N];
    static hbm__block *ref[N];
    for (int i = 0; i < N; i++)
        obj[i].addr = (uintptr_t)(i + 1) * 512;
    for (int step = 0; step < 200000; step++) {
        int i = (int)(rnd() % N);
        uintptr_t key = (uintptr_t)(i + 1) * 512;
        if (ref[i]) {
            assert_ptr_equal(hbm__ptrmap_del(&m, key), ref[i]);
            ref[i] = NULL;
        } else {
            ref[i] = &obj[i];
            assert_int_equal(hbm__ptrmap_put(&m, ref[i]), 0);
        }
        int j = (int)(rnd() % N);
        assert_ptr_equal(hbm__ptrmap_get(&m, (uintptr_t)(j + 1) * 512), ref[j]);
    }
    size_t live = 0;
    for (int i = 0; i < N; i++)
        live += ref[i] != NULL;
    assert_int_equal(m.n, live);
    assert_true(m.n * 2 <= m.mask + 1); /* the load bound */
    assert_null(hbm__ptrmap_del(&m, 12345 * 512));
    hbm__ptrmap_free(&m);
}

int main(void)
{
    rng_state = 88172645463325252ull; /* the random blocks and operations of every test */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lower_bound_matches_a_linear_scan),
        cmocka_unit_test(pointer_map_matches_a_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
