/* test_fork.c: fork() while other threads are inside the allocator (fork.c): the child finds every lock free and
 * every structure whole, whatever the other threads were doing (issue #15 item 12: the child deadlocked). */
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

enum { FORKS = 200, PATIENCE_S = 60 };

/* Shared with the children (MAP_SHARED): the step a child is at, so that a child that never ends is named. */
static volatile int *stage;

typedef struct worker {
    hbm_allocator *a;
    hbm_devices *set;
    volatile int stop;
} worker;

/* Busy inside the allocator: segments come and go (device calls under both locks), blocks split and merge. */
static void *churn(void *arg)
{
    worker *w = arg;
    for (unsigned i = 0; !w->stop; i++) {
        void *p = NULL, *q = NULL;
        if (hbm_malloc(w->a, (i % 5 + 1) * 3 * MiB, 0, &p) == HBM_OK && hbm_malloc(w->a, 4096, 0, &q) == HBM_OK)
            hbm_free(w->a, q);
        hbm_free(w->a, p);
        if (i % 16 == 0)
            hbm_empty_cache(w->a);
        void *r = NULL;
        if (hbm_devices_malloc(w->set, (int)(i % 2), 1 * MiB, 0, &r) == HBM_OK)
            hbm_devices_free(w->set, (int)(i % 2), r);
    }
    return NULL;
}

/* Prints what the kernel says a child that did not end is doing: its state (R running, S asleep), and the system
 * call it sleeps in (the first number; 202 is futex on x86-64: a lock). */
static void describe(pid_t pid)
{
    static const char *files[] = {"stat", "syscall", "wchan"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[64], text[512] = "";
        snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, files[i]);
        FILE *f = fopen(path, "r");
        if (f) {
            size_t n = fread(text, 1, sizeof text - 1, f);
            text[n] = 0;
            fclose(f);
        }
        fprintf(stderr, "  child %d %s: %s\n", (int)pid, files[i], text);
    }
}

/* Waits for the child; one still running after PATIENCE_S seconds (a deadlock, not a slow machine) is described,
 * killed and counted as hung. */
static int wait_child(pid_t pid, int *status)
{
    struct timespec start, now, nap = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (;;) {
        pid_t got = waitpid(pid, status, WNOHANG);
        if (got == pid)
            return 0;
        assert_int_equal(got, 0);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec >= PATIENCE_S) {
            fprintf(stderr, "child %d still running after %d s, at step %d of 5\n", (int)pid, PATIENCE_S, *stage);
            describe(pid);
            kill(pid, SIGKILL);
            assert_int_equal(waitpid(pid, status, 0), pid);
            return 1;
        }
        nanosleep(&nap, NULL);
    }
}

/* In the child: the same allocator, the device set and a new allocator all work; the validator passes. */
static int child_uses_everything(worker *w)
{
    void *p = NULL, *r = NULL;
    *stage = 1;
    if (hbm_malloc(w->a, 5 * MiB, 0, &p) != HBM_OK || hbm_free(w->a, p) != HBM_OK || hbm_empty_cache(w->a) != HBM_OK)
        return 1;
    *stage = 2;
    if (hbm_check(w->a, NULL, 0) != 0)
        return 2;
    *stage = 3;
    if (hbm_devices_malloc(w->set, 1, 2 * MiB, 0, &r) != HBM_OK || hbm_devices_free(w->set, 1, r) != HBM_OK)
        return 3;
    *stage = 4;
    hbm_allocator *fresh;
    char err[256];
    if (hbm_open(&fresh, "sim:capacity=1GiB", 0, "", err, sizeof err) != HBM_OK)
        return 4;
    hbm_destroy(fresh);
    *stage = 5;
    return 0;
}

static void a_child_forked_mid_call_finds_the_allocator_usable(void **st)
{
    (void)st;
    worker w = {0};
    char err[256];
    assert_int_equal(hbm_open(&w.a, "sim:capacity=4GiB", 0, "", err, sizeof err), HBM_OK);
    assert_int_equal(hbm_devices_open(&w.set, "sim:capacity=1GiB,devices=2", "", err, sizeof err), HBM_OK);
    stage = mmap(NULL, sizeof *stage, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(stage != MAP_FAILED);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, &w), 0);
    int hung = 0, failed = 0;
    for (int k = 0; k < FORKS && !failed; k++) { /* the first failure ends the loop */
        *stage = 0;
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(child_uses_everything(&w));
        int status;
        hung += wait_child(pid, &status);
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
        if (failed)
            fprintf(stderr, "fork %d: the child %s %d at step %d\n", k,
                    WIFEXITED(status) ? "returned" : "died of signal",
                    WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status), *stage);
    }
    w.stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(hung, 0);
    assert_int_equal(failed, 0);
    assert_int_equal(hbm_check(w.a, NULL, 0), 0);
    assert_int_equal(hbm_destroy(w.a), HBM_OK);
    assert_int_equal(hbm_devices_close(w.set), HBM_OK);
    munmap((void *)stage, sizeof *stage);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_child_forked_mid_call_finds_the_allocator_usable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
