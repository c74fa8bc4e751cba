/* test_fork.c: fork() while other threads are inside the allocator (fork.c): the child finds every lock free and
 * every structure whole, whatever the other threads were doing (issue #15 item 12: the child deadlocked). */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

enum { FORKS = 200 };

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

/* In the child: the same allocator, the device set and a new allocator all work; the validator passes. */
static int child_uses_everything(worker *w)
{
    alarm(10); /* a deadlock ends as SIGALRM, which the parent reports */
    void *p = NULL, *r = NULL;
    if (hbm_malloc(w->a, 5 * MiB, 0, &p) != HBM_OK || hbm_free(w->a, p) != HBM_OK || hbm_empty_cache(w->a) != HBM_OK)
        return 1;
    if (hbm_check(w->a, NULL, 0) != 0)
        return 2;
    if (hbm_devices_malloc(w->set, 1, 2 * MiB, 0, &r) != HBM_OK || hbm_devices_free(w->set, 1, r) != HBM_OK)
        return 3;
    hbm_allocator *fresh;
    char err[256];
    if (hbm_open(&fresh, "sim:capacity=1GiB", 0, "", err, sizeof err) != HBM_OK)
        return 4;
    hbm_destroy(fresh);
    return 0;
}

static void a_child_forked_mid_call_finds_the_allocator_usable(void **st)
{
    (void)st;
    worker w = {0};
    char err[256];
    assert_int_equal(hbm_open(&w.a, "sim:capacity=4GiB", 0, "", err, sizeof err), HBM_OK);
    assert_int_equal(hbm_devices_open(&w.set, "sim:capacity=1GiB,devices=2", "", err, sizeof err), HBM_OK);
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&t[i], NULL, churn, &w), 0);
    int hung = 0, failed = 0;
    for (int k = 0; k < FORKS && !failed; k++) { /* the first failure ends the loop: a hang costs 10 s */
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0)
            _exit(child_uses_everything(&w));
        int status;
        assert_int_equal(waitpid(pid, &status, 0), pid);
        hung += WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM;
        failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    w.stop = 1;
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(hung, 0);
    assert_int_equal(failed, 0);
    assert_int_equal(hbm_check(w.a, NULL, 0), 0);
    assert_int_equal(hbm_destroy(w.a), HBM_OK);
    assert_int_equal(hbm_devices_close(w.set), HBM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_child_forked_mid_call_finds_the_allocator_usable),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
