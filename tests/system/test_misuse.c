/* test_misuse.c: bad pointers are reported with a code and a message, and leave the allocator intact. */
#include <unistd.h>

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

static void destroy_reports_what_it_could_not_give_back(void **st)
{
    (void)st;
    /* Issue #15 item 11: a driver call failing during teardown left memory behind in silence. */
    const char *settings[] = {"", "expandable_segments:True"};
    for (int k = 0; k < 2; k++) {
        hbm_backend *b;
        hbm_allocator *a;
        char err[512], msg[768];
        assert_int_equal(hbm_backend_open(&b, "sim:capacity=8GiB", err, sizeof err), HBM_OK);
        /* A clean teardown: HBM_OK, no message, nothing left on the device. */
        assert_int_equal(hbm_create(&a, b, 0, settings[k], err, sizeof err), HBM_OK);
        void *p = must_malloc(a, 20 * MiB, 0), *q = must_malloc(a, 30 * MiB, 0);
        (void)p, (void)q;
        assert_int_equal(hbm_destroy_report(a, msg, sizeof msg), HBM_OK);
        assert_string_equal(msg, "");
        hbm__sim_counters c;
        hbm__sim_get_counters(hbm__sim_ctx(b), &c);
        assert_int_equal(c.live_allocations + c.live_handles + c.live_reservations, 0);
        /* Every free (whole segments) or release (expandable) fails: said, with the first driver error. */
        assert_int_equal(hbm_create(&a, b, 0, settings[k], err, sizeof err), HBM_OK);
        p = must_malloc(a, 20 * MiB, 0), q = must_malloc(a, 30 * MiB, 0);
        hbm__sim_fault f = {.kind = k ? HBM__OP_RELEASE : HBM__OP_FREE,
                            .nth = 0,
                            .min_size = 0,
                            .max_size = SIZE_MAX,
                            .code = HBM__SIM_ERR_DEVICE};
        assert_int_equal(hbm__sim_add_fault(hbm__sim_ctx(b), &f), 0);
        assert_int_equal(hbm_destroy_report(a, msg, sizeof msg), HBM_ERR_BACKEND);
        hbm__sim_get_counters(hbm__sim_ctx(b), &c);
        if (k == 0) {
            assert_int_equal(c.live_allocations, 2);
            assert_non_null(strstr(msg, "hbm_destroy: 2 device calls failed while giving memory back (50.00 MiB"));
        } else {
            assert_true(c.live_handles > 0);
            char want[64];
            snprintf(want, sizeof want, "hbm_destroy: %llu device calls failed", (unsigned long long)c.live_handles);
            assert_non_null(strstr(msg, want));
        }
        assert_non_null(strstr(msg, "may remain on device 0"));
        assert_non_null(strstr(msg, "first: sim device 0:"));
        /* hbm_destroy says the same on stderr. */
        hbm__sim_clear_faults(hbm__sim_ctx(b));
        assert_int_equal(hbm_create(&a, b, 0, settings[k], err, sizeof err), HBM_OK);
        must_malloc(a, 20 * MiB, 0);
        assert_int_equal(hbm__sim_add_fault(hbm__sim_ctx(b), &f), 0);
        char path[] = "/tmp/hbm_destroy_XXXXXX";
        int fd = mkstemp(path), saved = dup(2);
        assert_true(fd >= 0 && saved >= 0);
        dup2(fd, 2);
        const char *quiet = getenv("HBMALLOC_QUIET");
        unsetenv("HBMALLOC_QUIET");
        hbm_status rc = hbm_destroy(a);
        if (quiet)
            setenv("HBMALLOC_QUIET", quiet, 1);
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        char text[1024] = "";
        ssize_t n = pread(fd, text, sizeof text - 1, 0);
        close(fd);
        unlink(path);
        assert_int_equal(rc, HBM_ERR_BACKEND);
        assert_true(n > 0);
        assert_non_null(strstr(text, "hbmalloc: warning: hbm_destroy: 1 device call failed"));
        hbm_backend_close(b);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(double_free_is_reported_and_changes_nothing),
        cmocka_unit_test(foreign_pointers_are_reported),
        cmocka_unit_test(interior_pointers_are_reported),
        cmocka_unit_test(null_handles_are_invalid_not_fatal),
        cmocka_unit_test(destroy_reports_what_it_could_not_give_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
