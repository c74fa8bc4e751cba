/*
 * test_threads.c: many threads on one allocator at once: malloc, free,
 * record_stream, empty_cache, stats and the validator, with and without
 * release_lock_on_cudamalloc. Run under ThreadSanitizer by scripts/test.sh.
 */
#include "helpers.h"

#include <pthread.h>

#define THREADS 8
#define OPS 20000
#define LIVE 64

typedef struct worker {
    hbm_allocator *a;
    uint64_t seed;
    int failures;
    char msg[256];
} worker;

static uint64_t next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void *work(void *arg)
{
    worker *w = arg;
    void *live[LIVE] = {0};
    uint64_t rng = w->seed;
    for (int op = 0; op < OPS && !w->failures; op++) {
        uint64_t r = next(&rng) % 100, slot = next(&rng) % LIVE;
        hbm_status rc = HBM_OK;
        if (r < 50 && !live[slot]) {
            size_t n = next(&rng) % 4 ? 1 + next(&rng) % (256 * 1024) : 1 + next(&rng) % (24 * MiB);
            rc = hbm_malloc(w->a, n, next(&rng) % 3, &live[slot]);
            if (rc == HBM_ERR_OOM)
                rc = HBM_OK;
        } else if (r < 90 && live[slot]) {
            rc = hbm_free(w->a, live[slot]);
            live[slot] = NULL;
        } else if (r < 96 && live[slot]) {
            rc = hbm_record_stream(w->a, live[slot], 3 + next(&rng) % 2);
        } else if (r < 97) {
            rc = hbm_empty_cache(w->a);
        } else if (r < 98) {
            hbm__sim_stream_hold(sim_of(w->a), 0, 3 + next(&rng) % 2, (int)(next(&rng) % 2));
        } else if (r < 99) {
            hbm_stats s;
            rc = hbm_get_stats(w->a, &s);
        } else if (hbm_check(w->a, w->msg, sizeof w->msg)) {
            w->failures++;
        }
        if (rc != HBM_OK) {
            hbm_copy_last_error(w->a, w->msg, sizeof w->msg);
            w->failures++;
        }
    }
    for (int i = 0; i < LIVE; i++)
        if (live[i] && hbm_free(w->a, live[i]) != HBM_OK)
            w->failures++;
    return NULL;
}

static void stress(const char *settings)
{
    hbm_allocator *a = open_sim("sim:capacity=64GiB", settings);
    pthread_t th[THREADS];
    worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){a, 0x9E3779B97F4A7C15ull * (uint64_t)(i + 1), 0, ""};
        pthread_create(&th[i], NULL, work, &w[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < THREADS; i++)
        if (w[i].failures)
            fail_msg("thread %d: %d failures, last: %s", i, w[i].failures, w[i].msg);
    assert_valid(a);
    assert_int_equal(hbm_empty_cache(a), HBM_OK);
    hbm_stats s = stats_of(a);
    assert_int_equal(s.allocated_bytes[HBM_POOL_ALL].current, 0);
    assert_int_equal(s.active_bytes[HBM_POOL_ALL].current, 0);
    assert_int_equal(s.reserved_bytes[HBM_POOL_ALL].current, s.arena_bytes); /* an arena stays */
    assert_valid(a);
    hbm_destroy(a);
}

static void eight_threads_mixed_operations(void **st)
{
    (void)st;
    stress("");
}

static void eight_threads_with_the_lock_released_around_device_malloc(void **st)
{
    (void)st;
    stress("release_lock_on_cudamalloc:True");
}

static void eight_threads_with_expandable_segments(void **st)
{
    (void)st;
    stress("expandable_segments:True");
}

static void eight_threads_with_an_arena_and_the_lock_released(void **st)
{
    (void)st;
    stress("hbm_arena_mb:1024,release_lock_on_cudamalloc:True"); /* the arena made while others run */
}

/* Frees that fail on several threads at once each keep their own message (the device set's error is per thread;
 * it was one buffer, written by every failing free: a data race ThreadSanitizer reports). */
typedef struct bad_free {
    hbm_devices *d;
    int id, ok;
} bad_free;

static void *fail_frees(void *arg)
{
    bad_free *b = arg;
    char want[64];
    b->ok = 1;
    for (int i = 0; i < 2000; i++) {
        void *p = (void *)(uintptr_t)(0x1000 + 512 * (uintptr_t)(b->id * 4096 + i));
        hbm_status rc = hbm_devices_free(b->d, 0, p);
        snprintf(want, sizeof want, "%p", p);
        if (rc == HBM_OK || !strstr(hbm_devices_error(b->d), want))
            b->ok = 0;
    }
    return NULL;
}

static void failing_frees_on_many_threads_keep_their_own_errors(void **st)
{
    (void)st;
    hbm_devices *d;
    char err[256];
    assert_int_equal(hbm_devices_open(&d, "sim:devices=2", "", err, sizeof err), HBM_OK);
    void *p;
    assert_int_equal(hbm_devices_malloc(d, 0, 4096, 0, &p), HBM_OK);
    pthread_t th[6];
    bad_free b[6];
    for (int i = 0; i < 6; i++) {
        b[i] = (bad_free){d, i, 0};
        pthread_create(&th[i], NULL, fail_frees, &b[i]);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(th[i], NULL);
        assert_true(b[i].ok);
    }
    assert_int_equal(hbm_devices_free(d, 0, p), HBM_OK);
    hbm_devices_close(d);
}

/* The allocator's lock (src/util/lock.h): eight threads add to plain counters under it, 200,000 times each, with
 * work inside long enough that they collide and sleep on the futex (its state 2): no addition is lost, every
 * thread saw the counters agree, and the lock ends free. ThreadSanitizer (scripts/test.sh) checks that a take
 * orders what the last give published. */
typedef struct counted {
    hbm__mutex *m;
    long *n, *twice;
    int disagreed;
} counted;

static void *add_under_lock(void *arg)
{
    counted *c = arg;
    for (int i = 0; i < 200000; i++) {
        hbm__mutex_take(c->m);
        long v = *c->n;
        for (volatile int k = 0; k < (i % 64 == 0 ? 200 : 1); k++) /* now and then a long hold */
            ;
        *c->n = v + 1;
        *c->twice += 2;
        c->disagreed += *c->twice != 2 * *c->n;
        hbm__mutex_give(c->m);
    }
    return NULL;
}

static void the_lock_loses_no_update_under_contention(void **st)
{
    (void)st;
    hbm__mutex m;
    hbm__mutex_init(&m);
    long n = 0, twice = 0;
    pthread_t t[THREADS];
    counted c[THREADS];
    for (int i = 0; i < THREADS; i++) {
        c[i] = (counted){&m, &n, &twice, 0};
        assert_int_equal(pthread_create(&t[i], NULL, add_under_lock, &c[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(c[i].disagreed, 0);
    }
    assert_int_equal(n, THREADS * 200000L);
    assert_int_equal(twice, 2 * n);
    assert_int_equal(m.state, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_lock_loses_no_update_under_contention),
        cmocka_unit_test(eight_threads_mixed_operations),
        cmocka_unit_test(eight_threads_with_the_lock_released_around_device_malloc),
        cmocka_unit_test(eight_threads_with_expandable_segments),
        cmocka_unit_test(eight_threads_with_an_arena_and_the_lock_released),
        cmocka_unit_test(failing_frees_on_many_threads_keep_their_own_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
