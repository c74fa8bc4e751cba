/* helpers.h: shared fixtures for the cmocka suites. */
#ifndef HBM_TEST_HELPERS_H
#define HBM_TEST_HELPERS_H

#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "hbmalloc.h"
#include "core/device.h"
#include "conf/conf.h"
#include "core/engine.h"
#include "core/expandable.h"
#include "core/history.h"
#include "core/labels.h"
#include "core/segments.h"
#include "core/sleep.h"
#include "core/stats.h"
#include "core/events.h"
#include "core/mempools.h"
#include "core/types.h"
#include "core/policy_ops.h"
#include "core/region.h"
#include "policy/arena.h"
#include "policy/step_period.h"
#include "backend/sim.h"

/* 1 in a build with AddressSanitizer or ThreadSanitizer (gcc's macros, clang's __has_feature), where a test repeats
 * only what gives new evidence there: the code run under the sanitizer, not each logical check again. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HBM_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define HBM_TEST_SANITIZED 1
#endif
#endif
#ifndef HBM_TEST_SANITIZED
#define HBM_TEST_SANITIZED 0
#endif

#define MiB ((size_t)1 << 20)
#define GiB ((size_t)1 << 30)

/* A test's folder of records emptied (every entry but "." and "..") and removed: the publishing tests' teardown. */
static inline void remove_records_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[512];
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* The path of the (last) published record in a folder of records into path ("" when there is none). */
static inline void record_path(const char *dir, char *path, size_t len)
{
    DIR *d = opendir(dir);
    path[0] = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (!strncmp(e->d_name, "hbmalloc-", 9))
            snprintf(path, len, "%s/%s", dir, e->d_name);
    if (d)
        closedir(d);
}

/* The published record in dir once its refresher has measured memory outside hbmalloc (outside_ns set), read every
 * 50 ms for at most 10 s (the record as last read otherwise). */
static inline hbm_record record_measured(const char *dir)
{
    char path[600];
    record_path(dir, path, sizeof path);
    hbm_record r = {0};
    for (int i = 0; i < 200 && !r.outside_ns; i++) {
        assert_int_equal(hbm_record_read(path, &r, NULL, 0), HBM_OK);
        if (!r.outside_ns)
            nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    return r;
}

/* Open an allocator on a private sim; fails the test on error. */
static inline hbm_allocator *open_sim(const char *spec, const char *settings)
{
    hbm_allocator *a = NULL;
    char err[512];
    hbm_status rc = hbm_open(&a, spec, 0, settings ? settings : "", err, sizeof err);
    if (rc != HBM_OK)
        fail_msg("hbm_open(%s, %s): %s", spec, settings ? settings : "", err);
    return a;
}

/* The validator must pass. */
#define assert_valid(a)                                          \
    do {                                                         \
        char rep_[2048];                                         \
        int n_ = hbm_check((a), rep_, sizeof rep_);              \
        if (n_)                                                  \
            fail_msg("validator: %d violations:\n%s", n_, rep_); \
    } while (0)

static inline hbm_stats stats_of(hbm_allocator *a)
{
    hbm_stats s;
    assert_int_equal(hbm_get_stats(a, &s), HBM_OK);
    return s;
}

static inline void *must_malloc(hbm_allocator *a, size_t n, hbm_stream s)
{
    void *p = NULL;
    hbm_status rc = hbm_malloc(a, n, s, &p);
    if (rc != HBM_OK)
        fail_msg("hbm_malloc(%zu) = %s: %s", n, hbm_status_name(rc), hbm_last_error(a));
    return p;
}

static inline void *sim_of(hbm_allocator *a) { return hbm__sim_ctx(a->backend); }

/* The entries of a folder, "." and ".." aside (dir_entries("/proc/self/fd"): the open files, the one that reads
 * them included). */
static inline int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return n;
}

/* xorshift64*: the property tests' random numbers (seed it by setting rng_state). */
static uint64_t rng_state;
static inline uint64_t rnd(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545F4914F6CDD1Dull;
}

/* After hbm_destroy: the device holds nothing of the allocator's any more. */
static inline void assert_sim_empty(hbm_backend *b)
{
    hbm__sim_counters c;
    hbm__sim_get_counters(hbm__sim_ctx(b), &c);
    assert_int_equal(c.live_allocations, 0);
    assert_int_equal(c.live_reservations, 0);
    assert_int_equal(c.live_handles, 0);
    assert_int_equal(c.mapped_pages, 0);
    assert_int_equal(c.live_bytes, 0);
    assert_int_equal(c.live_events, 0);
    assert_int_equal(c.live_host, 0);
}


/* Where a call first (last: 1) appears, as a word, in a fake runtime's log of calls; -1 when it does not. */
static inline long log_at(const char *log, const char *call, int last)
{
    long found = -1;
    size_t k = strlen(call);
    for (const char *p = log; (p = strstr(p, call)); p += k)
        if ((p == log || p[-1] == ' ') && p[k] == ' ') {
            found = p - log;
            if (!last)
                break;
        }
    return found;
}

/* How many times a call appears in such a log. */
static inline long log_count(const char *log, const char *call)
{
    long n = 0;
    size_t k = strlen(call);
    for (const char *p = log; (p = strstr(p, call)); p += k)
        n += (p == log || p[-1] == ' ') && p[k] == ' ';
    return n;
}

/* The fault-sweep workload of the real-backend tests (CUDA, ACL): twelve allocations on two streams with
 * record_stream and an empty_cache half-way, the validator after each step. A failure must be HBM_ERR_BACKEND
 * whose message holds `expect`. live[6] keeps what is still allocated (the caller frees it). Returns the failures. */
static inline int fault_workload(hbm_allocator *a, const char *expect, void *live[6])
{
    int errors = 0;
    for (int i = 0; i < 12; i++) {
        void *p;
        hbm_status rc = hbm_malloc(a, (size_t)(i % 3 + 1) * 9 * MiB, i % 2, &p);
        if (rc == HBM_OK) {
            if (i % 2 && hbm_record_stream(a, p, 7) != HBM_OK)
                errors++;
            if (live[i % 6])
                hbm_free(a, live[i % 6]);
            live[i % 6] = p;
        } else {
            assert_int_equal(rc, HBM_ERR_BACKEND);
            if (!strstr(hbm_last_error(a), expect))
                fail_msg("expected \"%s\" in: %s", expect, hbm_last_error(a));
            errors++;
        }
        if (i == 6 && hbm_empty_cache(a) != HBM_OK)
            errors++;
        assert_valid(a);
    }
    return errors;
}

#endif
