/* test_mempools.c: private pools and the routing of requests to them (src/core/mempools.c), and device sets
 * (src/devices.c). */
#include "helpers.h"

#define S1 ((hbm_stream)1)
#define S2 ((hbm_stream)2)
#define S3 ((hbm_stream)3)

static bool in_pool(hbm_allocator *a, void *p, hbm_mempool id)
{
    hbm__segment *seg = hbm__segment_find(a, (uintptr_t)p);
    return seg && seg->pool->owner && seg->pool->owner->id == id;
}

static void a_private_pool_takes_the_routed_stream_and_keeps_its_blocks(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    hbm_mempool mp;
    assert_int_equal(hbm_mempool_create(a, &mp), HBM_OK);
    assert_int_equal(hbm_mempool_begin_stream(a, mp, S1), HBM_OK);
    assert_int_equal(hbm_mempool_begin_stream(a, mp, S2), HBM_ERR_INVALID); /* already routing */
    void *x = must_malloc(a, 4096, S1);
    void *y = must_malloc(a, 4096, S2);
    assert_true(in_pool(a, x, mp));
    assert_false(in_pool(a, y, mp));
    assert_int_equal(hbm_mempool_reserved(a, mp), 2 * MiB);
    assert_int_equal(hbm_mempool_end(a, mp), HBM_OK);
    assert_int_equal(hbm_mempool_end(a, mp), HBM_ERR_INVALID); /* not routing */
    hbm_free(a, x);
    void *z = must_malloc(a, 4096, S1); /* default pool now: never the pool's free block */
    assert_false(in_pool(a, z, mp));
    assert_ptr_not_equal(z, x);
    /* Its cache survives empty_cache while the pool is held. */
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(hbm_mempool_reserved(a, mp), 2 * MiB);
    assert_int_equal(hbm_mempool_release(a, mp), HBM_OK);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(hbm_mempool_reserved(a, mp), 0);
    assert_int_equal(hbm_mempool_begin_stream(a, mp, S1), HBM_ERR_INVALID); /* gone */
    assert_valid(a);
    hbm_destroy(a);
}

static void releasing_a_pool_with_live_blocks_keeps_it_until_they_are_freed(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    hbm_mempool mp;
    hbm_mempool_create(a, &mp);
    hbm_mempool_begin_stream(a, mp, 0);
    void *p = must_malloc(a, 30 * MiB, 0);
    hbm_mempool_end(a, mp);
    assert_int_equal(hbm_mempool_release(a, mp), HBM_ERR_POOL_BUSY);
    assert_non_null(strstr(hbm_last_error(a), "1 live block"));
    assert_int_equal(hbm_mempool_release(a, mp), HBM_ERR_INVALID); /* released already */
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(hbm_mempool_reserved(a, mp), 30 * MiB); /* still live */
    assert_valid(a);
    hbm_free(a, p);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(hbm_mempool_reserved(a, mp), 0);
    assert_int_equal(stats_of(a).reserved_bytes[HBM_POOL_ALL].current, 0);
    assert_valid(a);
    hbm_destroy(a);
}

typedef struct thread_arg {
    hbm_allocator *a;
    void *p;
} thread_arg;

static void *alloc_in_thread(void *arg)
{
    thread_arg *t = arg;
    hbm_malloc(t->a, 4096, 0, &t->p);
    return NULL;
}

static void thread_routing_diverts_only_the_calling_thread(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "");
    hbm_mempool mp;
    hbm_mempool_create(a, &mp);
    assert_int_equal(hbm_mempool_begin_thread(a, mp), HBM_OK);
    void *mine = must_malloc(a, 4096, 0);
    thread_arg t = {a, NULL};
    pthread_t th;
    pthread_create(&th, NULL, alloc_in_thread, &t);
    pthread_join(th, NULL);
    hbm_mempool_end(a, mp);
    assert_true(in_pool(a, mine, mp));
    assert_non_null(t.p);
    assert_false(in_pool(a, t.p, mp));
    assert_valid(a);
    hbm_destroy(a);
}

static void pools_work_with_expandable_segments(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim", "expandable_segments:True");
    hbm_mempool mp;
    hbm_mempool_create(a, &mp);
    hbm_mempool_begin_stream(a, mp, 0);
    void *p = must_malloc(a, 30 * MiB, 0);
    hbm_mempool_end(a, mp);
    void *q = must_malloc(a, 30 * MiB, 0);
    assert_true(in_pool(a, p, mp));
    assert_false(in_pool(a, q, mp));
    assert_int_equal(stats_of(a).num_expandable_segments, 2);
    hbm_free(a, p);
    hbm_mempool_release(a, mp);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    assert_int_equal(stats_of(a).num_expandable_segments, 1);
    assert_valid(a);
    hbm_destroy(a);
}

/* ---- devices ---- */

static void each_device_has_its_allocator_and_wrong_device_frees_are_reported(void **st)
{
    (void)st;
    hbm_devices *d;
    char err[256];
    assert_int_equal(hbm_devices_open(&d, "sim:devices=2,capacity=1GiB", "", err, sizeof err), HBM_OK);
    assert_int_equal(hbm_devices_count(d), 2);
    void *p0, *p1;
    assert_int_equal(hbm_devices_malloc(d, 0, 8 * MiB, 0, &p0), HBM_OK);
    assert_int_equal(hbm_devices_malloc(d, 1, 8 * MiB, 0, &p1), HBM_OK);
    assert_ptr_not_equal(hbm_devices_get(d, 0), hbm_devices_get(d, 1));
    hbm_stats before = stats_of(hbm_devices_get(d, 1));
    assert_int_equal(hbm_devices_free(d, 1, p0), HBM_ERR_WRONG_DEVICE);
    assert_non_null(strstr(hbm_devices_error(d), "belongs to device 0"));
    hbm_stats after = stats_of(hbm_devices_get(d, 1));
    assert_memory_equal(&before, &after, sizeof before);
    assert_valid(hbm_devices_get(d, 0));
    assert_valid(hbm_devices_get(d, 1));
    assert_int_equal(hbm_devices_free(d, 0, p0), HBM_OK);
    assert_int_equal(hbm_devices_free(d, 1, p1), HBM_OK);
    void *x;
    assert_int_equal(hbm_devices_malloc(d, 5, 512, 0, &x), HBM_ERR_INVALID);
    assert_non_null(strstr(hbm_devices_error(d), "device 5 does not exist"));
    assert_null(hbm_devices_get(d, -1));
    hbm_devices_close(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_private_pool_takes_the_routed_stream_and_keeps_its_blocks),
        cmocka_unit_test(releasing_a_pool_with_live_blocks_keeps_it_until_they_are_freed),
        cmocka_unit_test(thread_routing_diverts_only_the_calling_thread),
        cmocka_unit_test(pools_work_with_expandable_segments),
        cmocka_unit_test(each_device_has_its_allocator_and_wrong_device_frees_are_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
