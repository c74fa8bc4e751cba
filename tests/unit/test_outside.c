/* test_outside.c: device memory hbmalloc does not hold (src/core/outside.c, hbm_outside_get), on the simulated
 * device: context=SIZE is this process's memory outside hbmalloc (its runtime context, communicators' buffers),
 * others=SIZE other processes', reported under others_pid as NVML reports a process (docs/SIM.md). */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"
#include "backend/sim.h"
#include "core/types.h"

static hbm_outside measure(hbm_allocator *a)
{
    hbm_outside o;
    assert_int_equal(hbm_outside_get(a, &o), HBM_OK);
    assert_true(o.ns > 0);
    /* What the statistics say is the measurement itself. */
    hbm_stats s = stats_of(a);
    assert_int_equal(s.device_used_bytes, o.device_used);
    assert_int_equal(s.outside_bytes, o.outside);
    assert_int_equal(s.outside_process_bytes, o.process_outside);
    assert_int_equal(s.outside_others_bytes, o.others);
    return o;
}

static const char *said(const hbm_outside *o)
{
    static char buf[1024];
    size_t n = hbm_outside_describe(o, buf, sizeof buf);
    assert_int_equal(n, strlen(buf));
    return buf;
}

/* The split: hbmalloc's 100 MiB, this process's 300 MiB beside it (a communicator's buffers), another
 * process's 1 GiB. Every figure is exact, and the sentence names each holder. */
static void outside_memory_is_split_between_this_process_and_the_others(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB,context=300MiB,others=1GiB,others_pid=777", "");
    hbm_stats before = stats_of(a); /* nothing measured yet: unknown, not 0 */
    assert_int_equal(before.outside_bytes, -1);
    assert_int_equal(before.device_used_bytes, -1);
    void *p = must_malloc(a, 100 * MiB, 0);
    hbm_outside o = measure(a);
    assert_int_equal(o.reserved, 100 * MiB);
    assert_int_equal(o.device_used, 100 * MiB + 300 * MiB + GiB);
    assert_int_equal(o.outside, 300 * MiB + GiB);
    assert_int_equal(o.process_bytes, 400 * MiB);
    assert_int_equal(o.process_outside, 300 * MiB);
    assert_int_equal(o.others, GiB);
    assert_int_equal(o.nprocs, 2);
    assert_int_equal(o.procs[0].pid, 777); /* the largest first */
    assert_int_equal(o.procs[0].bytes, GiB);
    assert_int_equal(o.procs[1].pid, getpid());
    const char *text = said(&o);
    assert_non_null(strstr(text, "1.29 GiB of the device is in use outside hbmalloc: 300.00 MiB by this process"));
    assert_non_null(strstr(text, "1024.00 MiB by other processes (process 777 1024.00 MiB)"));
    hbm_free(a, p);
    hbm_destroy(a);
}

/* AscendCL tells the device's figures only: outside is known, its split is not, and the sentence says so. */
static void a_runtime_without_process_figures_leaves_the_split_unknown(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB,context=300MiB,others=1GiB,processes=off", "");
    hbm_outside o = measure(a);
    assert_int_equal(o.outside, 300 * MiB + GiB);
    assert_int_equal(o.process_bytes, -1);
    assert_int_equal(o.process_outside, -1);
    assert_int_equal(o.others, -1);
    assert_int_equal(o.nprocs, 0);
    assert_non_null(strstr(said(&o), "(the runtime does not tell it by process)"));
    hbm_destroy(a);
}

/* A real GPU's driver holds memory NVML charges to no process (some hundreds of MiB): it is in outside, in neither
 * part, and the sentence says it, so the parts never pass for the whole. */
static void memory_charged_to_no_process_is_outside_but_in_neither_part(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB,context=100MiB,others=1GiB,driver=300MiB", "");
    hbm_outside o = measure(a);
    assert_int_equal(o.outside, 100 * MiB + GiB + 300 * MiB);
    assert_int_equal(o.process_outside, 100 * MiB);
    assert_int_equal(o.others, GiB);
    assert_non_null(strstr(said(&o), ", 300.00 MiB charged to no process (the driver's own)"));
    hbm_destroy(a);
}

/* Memory outside grows while the job runs (a communicator made, another job started): each measurement sees it, the
 * statistics keep the last one, and a failed device query is an unknown figure, not an error of the call. */
static void each_measurement_sees_memory_that_came_since(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB", "");
    hbm_outside o = measure(a);
    assert_int_equal(o.outside, 0);
    assert_int_equal(o.others, 0);
    void *ctx = sim_of(a);
    assert_int_equal(hbm__sim_set_outside(ctx, 0, 512 * MiB, 2 * GiB), 0);
    assert_int_equal(stats_of(a).outside_bytes, 0); /* not measured again yet */
    o = measure(a);
    assert_int_equal(o.outside, 512 * MiB + 2 * GiB);
    assert_int_equal(o.process_outside, 512 * MiB);
    assert_int_equal(o.others, 2 * GiB);
    hbm__sim_fault f = {
        .kind = HBM__OP_INFO, .nth = 1, .min_size = 0, .max_size = SIZE_MAX, .code = HBM__SIM_ERR_INJECTED};
    hbm__sim_add_fault(ctx, &f);
    o = measure(a);
    assert_int_equal(o.device_used, -1);
    assert_int_equal(o.outside, -1);
    assert_non_null(strstr(said(&o), "unknown"));
    hbm_destroy(a);
}

static void *measure_in_thread(void *a)
{
    hbm_outside o;
    return hbm_outside_get(a, &o) == HBM_OK ? a : NULL;
}

static void *malloc_in_thread(void *a)
{
    void *p = NULL;
    return hbm_malloc(a, 100 * MiB, 0, &p) == HBM_OK ? p : NULL;
}

/* NVML can take milliseconds on a busy node: hbm_outside_get (and so the record's refresh) asks for the processes
 * without the allocator's lock, so the job's mallocs never wait for it. The simulated query is held while a malloc
 * runs on another thread: the malloc ends (within 10 s) while the query still waits; asked under the lock, it would
 * not. */
static void the_process_query_waits_without_the_allocators_lock(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=8GiB,others=1GiB", "");
    void *ctx = sim_of(a);
    hbm__sim_hold_processes(ctx, 1);
    pthread_t measure, job;
    assert_int_equal(pthread_create(&measure, NULL, measure_in_thread, a), 0);
    for (int i = 0; i < 1000 && hbm__sim_hold_processes(ctx, 1) == 0; i++) /* until the query waits */
        nanosleep(&(struct timespec){0, 10000000}, NULL);
    assert_int_equal(hbm__sim_hold_processes(ctx, 1), 1);
    assert_int_equal(pthread_create(&job, NULL, malloc_in_thread, a), 0);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 10;
    void *p = NULL;
    int rc = pthread_timedjoin_np(job, &p, &deadline);
    hbm__sim_hold_processes(ctx, 0); /* the query goes on, whatever happened */
    if (rc)
        pthread_join(job, &p);
    assert_int_equal(rc, 0); /* the malloc did not wait for the query */
    assert_non_null(p);
    void *got;
    assert_int_equal(pthread_join(measure, &got), 0);
    assert_ptr_equal(got, a);
    hbm_free(a, p);
    hbm_destroy(a);
}

/* The OOM message says who holds the rest, as PyTorch's names this process and the others (NVML's figures), and
 * the OOM's figures carry the split for the plug-ins' framework message. */
static void the_oom_message_names_this_process_and_the_others(void **st)
{
    (void)st;
    hbm_allocator *a = open_sim("sim:capacity=1GiB,context=200MiB,others=300MiB,others_pid=31337", "");
    void *p;
    assert_int_equal(hbm_malloc(a, 600 * MiB, 0, &p), HBM_ERR_OOM);
    const char *msg = hbm_last_error(a);
    assert_non_null(strstr(msg, "500.00 MiB of the device is in use outside hbmalloc: 200.00 MiB by this process"));
    assert_non_null(strstr(msg, "300.00 MiB by other processes (process 31337 300.00 MiB)"));
    hbm_oom_info oom;
    assert_int_equal(hbm_copy_last_oom(a, &oom, NULL, 0), HBM_OK);
    assert_int_equal(oom.outside.process_outside, 200 * MiB);
    assert_int_equal(oom.outside.others, 300 * MiB);
    assert_int_equal(stats_of(a).outside_others_bytes, 300 * MiB); /* the OOM measured it */
    hbm_destroy(a);
}

/* The published record measures memory outside at each refresh (twice a second), so `hbmalloc top` and the
 * Prometheus file follow a communicator's buffers growing with no call of the job's. Bounded wait: 10 s. */
static void the_published_record_follows_memory_outside(void **st)
{
    (void)st;
    char dir[] = "/tmp/hbm-outside-XXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("HBMALLOC_TOP_DIR", dir, 1);
    hbm_allocator *a = open_sim("sim:capacity=8GiB,others=1GiB", "");
    assert_int_equal(hbm_publish(a, 1), HBM_OK);
    assert_int_equal(hbm__sim_set_outside(sim_of(a), 0, 256 * MiB, GiB), 0);
    char path[600];
    record_path(dir, path, sizeof path);
    hbm_record r = {0};
    char why[256];
    for (int i = 0; i < 200; i++) {
        assert_int_equal(hbm_record_read(path, &r, why, sizeof why), HBM_OK);
        if (r.outside_bytes == 256 * MiB + GiB)
            break;
        nanosleep(&(struct timespec){0, 50000000}, NULL);
    }
    assert_int_equal(r.outside_bytes, 256 * MiB + GiB);
    assert_int_equal(r.outside_process_bytes, 256 * MiB);
    assert_int_equal(r.outside_others_bytes, GiB);
    assert_int_equal(r.device_used_bytes, 256 * MiB + GiB);
    assert_true(r.outside_ns > 0);
    hbm_destroy(a);
    remove_records_dir(dir);
    unsetenv("HBMALLOC_TOP_DIR");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(outside_memory_is_split_between_this_process_and_the_others),
        cmocka_unit_test(a_runtime_without_process_figures_leaves_the_split_unknown),
        cmocka_unit_test(memory_charged_to_no_process_is_outside_but_in_neither_part),
        cmocka_unit_test(each_measurement_sees_memory_that_came_since),
        cmocka_unit_test(the_oom_message_names_this_process_and_the_others),
        cmocka_unit_test(the_process_query_waits_without_the_allocators_lock),
        cmocka_unit_test(the_published_record_follows_memory_outside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
