/* test_publish_signals.c: the signal handlers that remove a process's published records when SIGTERM, SIGINT or SIGHUP ends
 * it (src/io/publish_signals.c): the process still dies of the signal, once, whether the kernel calls the handler
 * or an application's handler chains to it (with and without SA_NODEFER, or a thread that takes the signal with
 * sigwait); a handler or an ignored signal of the application's is kept; a library unloaded by dlclose leaves no
 * handler behind; and SIGINT is left to Python (built twice: test_publish_signals_python links libpython, or, where its
 * files are missing, defines a stand-in Py_IsInitialized, and runs only that test).
 *
 * A handler is installed once per process, at its first record, so every case runs in a forked child of a parent
 * that never publishes; the parent reads how the child ended, and kills a child still running after TIMEOUT_S (a
 * handler that loops) so that the test fails instead of hanging. Each test works in a folder of its own
 * (HBMALLOC_TOP_DIR). */
#ifdef HBM_TEST_PYTHON
#define PY_SSIZE_T_CLEAN
#include <Python.h> /* first, as Python's documentation asks: it defines _GNU_SOURCE */
#else
#define _GNU_SOURCE /* RTLD_NOLOAD */
#endif
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#define TIMEOUT_S 10
#define SURVIVED 99 /* a child's exit status: the signal did not end it */

static char dir[64];

/* What a child tells its parent besides its exit status: shared with it (MAP_SHARED, made before the fork). */
struct shared {
    _Atomic int calls;    /* the application's handler ran this many times */
    _Atomic int unloaded; /* dlclose unmapped the library (dlopen RTLD_NOLOAD found it no more) */
};
static struct shared *shared;

static int make_dir(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/hbm-pubsig-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    setenv("HBMALLOC_TOP_DIR", dir, 1);
    memset(shared, 0, sizeof *shared);
    return 0;
}

static int remove_dir(void **state)
{
    (void)state;
    remove_records_dir(dir);
    unsetenv("HBMALLOC_TOP_DIR");
    return 0;
}

static int records(void)
{
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        n += !strncmp(e->d_name, "hbmalloc-", 9);
    if (d)
        closedir(d);
    return n;
}

/* In a child: a published allocator on the sim (its first record installs the handlers); NULL said on stderr. */
static hbm_allocator *publish(void)
{
    hbm_allocator *a = NULL;
    char err[512];
    if (hbm_open(&a, "sim:capacity=1GiB", 0, "hbm_publish:True", err, sizeof err) != HBM_OK) {
        fprintf(stderr, "child: hbm_open: %s\n", err);
        return NULL;
    }
    if (records() != 1) {
        fprintf(stderr, "child: %d records, not 1\n", records());
        return NULL;
    }
    return a;
}

static void (*handler_of(int sig))(int)
{
    struct sigaction cur;
    sigaction(sig, NULL, &cur);
    return cur.sa_handler;
}

/* Runs fn in a child; its wait status. A child still running after TIMEOUT_S is killed (SIGKILL) and said so. */
static int run_child(int (*fn)(int), int arg)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(fn(arg));
    int status = 0;
    struct timespec tick = {0, 10 * 1000 * 1000};
    for (int waited = 0; waitpid(pid, &status, WNOHANG) == 0; waited++) {
        if (waited == TIMEOUT_S * 100) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            printf("child still running after %d s (the application's handler ran %d times): killed\n", TIMEOUT_S,
                   shared->calls);
            break;
        }
        nanosleep(&tick, NULL);
    }
    return status;
}

/* The child died of sig, not of another signal, a timeout or an exit; said so when not. */
static void assert_died_of(int status, int sig)
{
    if (WIFSIGNALED(status))
        printf("child ended by signal %d (%s)\n", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        printf("child exited with status %d%s\n", WEXITSTATUS(status),
               WEXITSTATUS(status) == SURVIVED ? " (the signal did not end it)" : "");
    fflush(stdout); /* before cmocka's report of a failure, on stderr */
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), sig);
}

#ifndef HBM_TEST_PYTHON_ONLY
static int raise_at_default(int sig)
{
    if (!publish())
        return 1;
    raise(sig);
    return SURVIVED;
}

static void a_signal_at_its_default_removes_the_records_and_still_ends_the_process(void **state)
{
    (void)state;
    const int sigs[] = {SIGTERM, SIGINT, SIGHUP}; /* SIGINT too: no Python in this process */
    for (int i = 0; i < 3; i++) {
        assert_died_of(run_child(raise_at_default, sigs[i]), sigs[i]);
        assert_int_equal(records(), 0);
    }
}

static int raise_ignored(int sig)
{
    signal(sig, SIG_IGN); /* nohup */
    hbm_allocator *a = publish();
    if (!a)
        return 1;
    if (handler_of(sig) != SIG_IGN)
        return 2;
    raise(sig);
    hbm_destroy(a);
    return 0;
}

static void an_ignored_sighup_stays_ignored(void **state)
{
    (void)state;
    int status = run_child(raise_ignored, SIGHUP);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(records(), 0);
}

static void count_call(int sig)
{
    (void)sig;
    shared->calls++;
}

/* The application's handler, there before hbmalloc's first record: kept, it runs, the process goes on. */
static int handler_first(int sig)
{
    signal(sig, count_call);
    hbm_allocator *a = publish();
    if (!a)
        return 1;
    if (handler_of(sig) != count_call)
        return 2;
    raise(sig);
    hbm_destroy(a);
    return shared->calls == 1 ? 0 : 3;
}

static void an_application_handler_installed_first_is_kept(void **state)
{
    (void)state;
    int status = run_child(handler_first, SIGTERM);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_int_equal(shared->calls, 1);
    assert_int_equal(records(), 0);
}

/* The application's handler, installed after hbmalloc's: it does its work and chains to the handler it replaced,
 * as one that honours the previous disposition does. */
static struct sigaction replaced;

static void chain_to_replaced(int sig)
{
    shared->calls++;
    replaced.sa_handler(sig);
}

static int handler_later_chains(int flags)
{
    if (!publish())
        return 1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = chain_to_replaced;
    sa.sa_flags = flags;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, &replaced);
    if (replaced.sa_handler == SIG_DFL || replaced.sa_handler == SIG_IGN)
        return 2; /* hbmalloc installed nothing */
    raise(SIGTERM);
    return SURVIVED;
}

static void chained_to(int flags)
{
    assert_died_of(run_child(handler_later_chains, flags), SIGTERM);
    assert_int_equal(shared->calls, 1);
    assert_int_equal(records(), 0);
}

/* The signal blocked while the application's handler runs: delivered when it returns. */
static void a_handler_installed_later_that_chains_to_ours_ends_the_process_once(void **state)
{
    (void)state;
    chained_to(0);
}

/* Not blocked: delivered inside raise, where the default action ends the process at once. */
static void a_handler_with_sa_nodefer_that_chains_to_ours_ends_the_process_once(void **state)
{
    (void)state;
    chained_to(SA_NODEFER);
}

/* A thread that takes SIGTERM with sigwait and calls the handler it found installed (hbmalloc's). */
static int sigwait_calls_ours(int unused)
{
    (void)unused;
    if (!publish())
        return 1;
    struct sigaction ours;
    sigaction(SIGTERM, NULL, &ours);
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &term, NULL);
    raise(SIGTERM);
    for (;;) {
        int sig;
        if (sigwait(&term, &sig))
            return 2;
        if (++shared->calls > 1000)
            return 3; /* the raised signal comes back for ever */
        ours.sa_handler(sig);
    }
}

static void a_thread_that_sigwaits_and_calls_our_handler_ends_the_process(void **state)
{
    (void)state;
    int status = run_child(sigwait_calls_ours, 0);
    printf("the handler was called %d times from sigwait\n", shared->calls);
    assert_died_of(status, SIGTERM);
    assert_int_equal(records(), 0);
}

/* libhbmalloc.so loaded with dlopen, used (a published record), its allocator destroyed, dlclose'd; then SIGTERM. */
static int dlclose_then(int replace_ours)
{
    void *h = dlopen(HBM_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "child: %s\n", dlerror());
        return 1;
    }
    hbm_status (*open_)(hbm_allocator **, const char *, int, const char *, char *, size_t);
    hbm_status (*destroy)(hbm_allocator *);
    *(void **)&open_ = dlsym(h, "hbm_open");
    *(void **)&destroy = dlsym(h, "hbm_destroy");
    hbm_allocator *a = NULL;
    char err[512];
    if (!open_ || !destroy || open_(&a, "sim:capacity=1GiB", 0, "hbm_publish:True", err, sizeof err) != HBM_OK ||
        records() != 1)
        return 2;
    if (handler_of(SIGTERM) == SIG_DFL)
        return 3; /* the library installed nothing */
    if (replace_ours)
        signal(SIGTERM, count_call);
    destroy(a);
    /* The refresher thread (src/io/publish.c) ends within half a second of the last record: dlclose before then
     * would unmap the code it runs. */
    sleep(1);
    dlclose(h);
    shared->unloaded = dlopen(HBM_SHARED_LIB, RTLD_NOW | RTLD_NOLOAD) == NULL;
    if (replace_ours) /* the application's is kept; the library's own, on SIGHUP, is gone */
        return handler_of(SIGTERM) == count_call && handler_of(SIGHUP) == SIG_DFL ? 0 : 4;
    raise(SIGTERM);
    return SURVIVED;
}

static void after_dlclose_a_signal_finds_no_handler_of_the_library(void **state)
{
    (void)state;
    int status = run_child(dlclose_then, 0);
    printf("dlclose %s the library\n", shared->unloaded ? "unloaded" : "did not unload");
    assert_true(shared->unloaded);   /* else this test proves nothing: no code was unmapped */
    assert_died_of(status, SIGTERM); /* not SIGSEGV in a handler that is gone */
    assert_int_equal(records(), 0);
}

static void dlclose_keeps_a_handler_the_application_installed_over_ours(void **state)
{
    (void)state;
    int status = run_child(dlclose_then, 1);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}
#endif /* HBM_TEST_PYTHON_ONLY */

#ifdef HBM_TEST_PYTHON_ONLY
#ifndef HBM_TEST_PYTHON
/* No libpython here: this stand-in is what hbmalloc looks for (dlsym, this executable exports it). */
int Py_IsInitialized(void);
int Py_IsInitialized(void) { return 0; }
#endif

/* A host that embeds Python publishes first, then starts the interpreter. CPython installs its SIGINT handler
 * (KeyboardInterrupt) only where SIGINT is SIG_DFL then (Modules/signalmodule.c, signal_get_set_handlers); SIGTERM,
 * which Python leaves alone, is still hbmalloc's. */
static int publish_then_python(int unused)
{
    (void)unused;
    if (!publish())
        return 1;
    if (handler_of(SIGTERM) == SIG_DFL)
        return 3;
    bool sigint_default = handler_of(SIGINT) == SIG_DFL; /* the precondition of CPython's check */
    if (!sigint_default)
        fprintf(stderr, "child: SIGINT is not at its default after publishing: Py_Initialize leaves it\n");
#ifdef HBM_TEST_PYTHON
    Py_Initialize();
    if (PyRun_SimpleString("import signal\n"
                           "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler, \\\n"
                           "    'SIGINT is not Python\\'s: %r' % signal.getsignal(signal.SIGINT)\n"
                           "caught = False\n"
                           "try:\n"
                           "    signal.raise_signal(signal.SIGINT)\n"
                           "except KeyboardInterrupt:\n"
                           "    caught = True\n"
                           "assert caught, 'no KeyboardInterrupt'\n"))
        return 4;
    Py_FinalizeEx();
#endif
    if (!sigint_default)
        return 2;
    raise(SIGTERM); /* still hbmalloc's: the records go */
    return SURVIVED;
}

static void sigint_is_left_at_its_default_for_python(void **state)
{
    (void)state;
    assert_died_of(run_child(publish_then_python, 0), SIGTERM);
    assert_int_equal(records(), 0);
}
#endif

int main(void)
{
    shared = mmap(NULL, sizeof *shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED)
        return 1;
    const struct CMUnitTest tests[] = {
#ifndef HBM_TEST_PYTHON_ONLY
        cmocka_unit_test_setup_teardown(a_signal_at_its_default_removes_the_records_and_still_ends_the_process,
                                        make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(an_ignored_sighup_stays_ignored, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(an_application_handler_installed_first_is_kept, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(a_handler_installed_later_that_chains_to_ours_ends_the_process_once, make_dir,
                                        remove_dir),
        cmocka_unit_test_setup_teardown(a_handler_with_sa_nodefer_that_chains_to_ours_ends_the_process_once, make_dir,
                                        remove_dir),
        cmocka_unit_test_setup_teardown(a_thread_that_sigwaits_and_calls_our_handler_ends_the_process, make_dir,
                                        remove_dir),
        cmocka_unit_test_setup_teardown(after_dlclose_a_signal_finds_no_handler_of_the_library, make_dir, remove_dir),
        cmocka_unit_test_setup_teardown(dlclose_keeps_a_handler_the_application_installed_over_ours, make_dir,
                                        remove_dir),
#else
        cmocka_unit_test_setup_teardown(sigint_is_left_at_its_default_for_python, make_dir, remove_dir),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
