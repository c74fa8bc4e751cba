/* test_misuse.c: bad pointers are reported with a code and a message, and leave the allocator intact. */
#include "helpers.h"

static void expect_rejected(hbm_allocator *a, void *ptr, hbm_status code, const char *text)
{
    hbm_stats before = stats_of(a), after;
    hbm_status rc = hbm_free(a, ptr);
    if (rc != code)
        fail_msg("hbm_free(%p) = %s, expected %s (%s)", ptr, hbm_status_name(rc), hbm_status_name(code),
                 hbm_last_error(a));
    if (!strstr(hbm_last_error(a), text))
        fail_msg("message '%s' lacks '%s'", hbm_last_error(a), text);
    after = stats_of(a);
    assert_memory_equal(&before, &after, sizeof before);
    assert_valid(a);
}

static void double_free_is_reported_and_changes_nothing(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    void *keep = must_malloc(a, 4096, 0);
    void *p = must_malloc(a, 4096, 0);
    must_malloc(a, 4096, 0);
    assert_int_equal(hbm_free(a, p), HBM_OK);
    expect_rejected(a, p, HBM_ERR_DOUBLE_FREE, "double free");
    /* Once merged into a neighbour, the pointer is still inside a free block. */
    assert_int_equal(hbm_free(a, keep), HBM_OK);
    expect_rejected(a, p, HBM_ERR_DOUBLE_FREE, "already freed");
    hbm_destroy(a);
}

static void foreign_pointers_are_reported(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    hbm_allocator *b = open_sim("sim", "");
    must_malloc(a, 4096, 0);
    int on_stack;
    expect_rejected(a, &on_stack, HBM_ERR_FOREIGN_PTR, "not allocated by this allocator");
    expect_rejected(a, (void *)(uintptr_t)0x1234, HBM_ERR_FOREIGN_PTR, "0x1234");
    /* A pointer of a segment that went back to the device is foreign now. */
    void *p = must_malloc(a, 30 * MiB, 0);
    hbm_free(a, p);
    hbm_empty_cache(a);
    expect_rejected(a, p, HBM_ERR_FOREIGN_PTR, "already returned to the device");
    /* A pointer live in another allocator is foreign here. */
    must_malloc(b, 10 * GiB, 0);
    void *q = must_malloc(b, 50 * MiB, 0);
    expect_rejected(a, q, HBM_ERR_FOREIGN_PTR, "not allocated");
    assert_int_equal(hbm_free(b, q), HBM_OK);
    hbm_destroy(a);
    hbm_destroy(b);
}

static void interior_pointers_are_reported(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    char *p = must_malloc(a, 8192, 0);
    expect_rejected(a, p + 512, HBM_ERR_INTERIOR_PTR, "512 bytes inside a live block");
    expect_rejected(a, p + 1, HBM_ERR_INTERIOR_PTR, "not at its start");
    assert_int_equal(hbm_free(a, p), HBM_OK);
    hbm_destroy(a);
}

static void null_handles_are_invalid_not_fatal(void **st)
{
    (void)st;
    hbm_stats s;
    assert_int_equal(hbm_free(NULL, (void *)0x1000), HBM_ERR_INVALID);
    assert_int_equal(hbm_empty_cache(NULL), HBM_ERR_INVALID);
    assert_int_equal(hbm_get_stats(NULL, &s), HBM_ERR_INVALID);
    assert_int_equal(hbm_set_memory_fraction(NULL, 0.5), HBM_ERR_INVALID);
    assert_int_equal(hbm_block_size(NULL, (void *)0x1000), 0);
    assert_int_equal(hbm_check(NULL, NULL, 0), 1);
    hbm_destroy(NULL);
    hbm_backend_close(NULL);
    assert_string_equal(hbm_status_name(HBM_ERR_DOUBLE_FREE), "HBM_ERR_DOUBLE_FREE");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(double_free_is_reported_and_changes_nothing),
        cmocka_unit_test(foreign_pointers_are_reported),
        cmocka_unit_test(interior_pointers_are_reported),
        cmocka_unit_test(null_handles_are_invalid_not_fatal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
