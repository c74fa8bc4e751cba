/* test_windows.c: the window explorer (issue #35). Every place where hbmalloc opens its lock in the middle of an
 * operation to wait for a framework's launch queue, or to call the caller's progress callback (docs/CONTRACTS.md,
 * "Waiting with the lock open"), is reached on the fake AscendCL runtime with a host queue of this test's own; at
 * exactly that point other threads run each operation, and each pair of them at once: malloc, a pool's malloc,
 * free, a free of a block other streams still use, empty_cache, sleep, wake, a pool's release, and a free on a
 * thread of the queue's own (torch_npu's release thread: it may not wait). After each run: no violation of the
 * device's work (fake_acl: memory unmapped or freed under queued work, a block handed out while another stream
 * still uses it, work on memory that is not mapped), the validator, no wait that held the lock (the counter, and a
 * probe thread that must get the lock while the queue drains), no operation that did not finish (a deadlock), the
 * results consistent with the pool's state (a malloc that succeeded got mapped memory; a refused one found the pool
 * asleep) and the pool's backup intact after it wakes. */
#include "helpers.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <time.h>

/* ---- the fake runtime ---- */

static struct {
    void *lib;
    void (*reset)(void);
    void (*set)(const char *, long);
    void (*outstanding)(long[7]);
    long (*violations)(char *, size_t);
    int (*launch)(void *, void *, size_t);
    int (*first_use)(void *, void *, size_t);
    int (*poke)(void *, const void *, size_t);
    int (*peek)(void *, void *, size_t);
    int (*init)(const char *);
    int (*finalize)(void);
    int (*set_device)(int);
    int (*reset_device)(int);
    int (*get_context)(void **);
    int (*set_context)(void *);
    int (*sync_device)(void);
    int (*create_event)(void **);
    int (*record_event)(void *, void *);
    int (*query_event)(void *, int *);
    int (*destroy_event)(void *);
} F;

static int load(void)
{
    F.lib = dlopen(HBM_FAKE_ACL, RTLD_NOW | RTLD_LOCAL);
    if (!F.lib)
        return -1;
    struct {
        void **fn;
        const char *name;
    } syms[] = {
        {(void **)&F.reset, "fake_acl_reset"},
        {(void **)&F.set, "fake_acl_set"},
        {(void **)&F.outstanding, "fake_acl_outstanding"},
        {(void **)&F.violations, "fake_acl_violations"},
        {(void **)&F.launch, "fake_acl_launch"},
        {(void **)&F.first_use, "fake_acl_first_use"},
        {(void **)&F.poke, "fake_acl_poke"},
        {(void **)&F.peek, "fake_acl_peek"},
        {(void **)&F.init, "aclInit"},
        {(void **)&F.finalize, "aclFinalize"},
        {(void **)&F.set_device, "aclrtSetDevice"},
        {(void **)&F.reset_device, "aclrtResetDevice"},
        {(void **)&F.get_context, "aclrtGetCurrentContext"},
        {(void **)&F.set_context, "aclrtSetCurrentContext"},
        {(void **)&F.sync_device, "aclrtSynchronizeDevice"},
        {(void **)&F.create_event, "aclrtCreateEvent"},
        {(void **)&F.record_event, "aclrtRecordEvent"},
        {(void **)&F.query_event, "aclrtQueryEventStatus"},
        {(void **)&F.destroy_event, "aclrtDestroyEvent"},
    };
    for (size_t i = 0; i < sizeof syms / sizeof *syms; i++)
        if (!(*syms[i].fn = dlsym(F.lib, syms[i].name)))
            return -1;
    return 0;
}

/* ---- one run: a scenario, and the operations injected at one of its points ---- */

enum {
    OP_MALLOC,
    OP_POOL_MALLOC,
    OP_FREE,
    OP_STREAM_FREE,
    OP_EMPTY_CACHE,
    OP_SLEEP,
    OP_WAKE,
    OP_RELEASE,
    OP_QUEUE_THREAD_FREE,
    NOPS
};
static const char *const op_names[NOPS] = {
    "malloc", "pool malloc", "free",         "record_stream free",        "empty_cache",
    "sleep",  "wake",        "pool release", "free on the release thread"};

/* The streams: the scenario's, the injected operations', and another stream that uses blocks (record_stream). */
#define S_MAIN ((hbm_stream)5)
#define S_OPS ((hbm_stream)6)
#define S_OTHER ((hbm_stream)7)
/* The pool's kept block: 1 MiB, a small-pool block (the pool's free 2 MiB below is a large-pool one), backed up in 4
 * pieces. (4 MiB made the explorer 3.5 times as long, the same 918 interleavings: issue #38 item 8.) */
#define KEPT MiB
enum { PATIENCE_S = 10, MAX_GOT = 8 };

typedef struct run {
    hbm_backend *b;
    hbm_allocator *a;
    void *ctx; /* the device's context, set on every thread of the run */
    hbm_mempool pool;
    int released;
    void *kept; /* a block of the pool with a pattern, kept to the end: the backup must bring it back */
    unsigned char *pattern;
    void *spare[NOPS][2]; /* the blocks the frees free: one for each of a pair's two operations */
    void *got[MAX_GOT];   /* what the injected mallocs got */
    int ngot;
    pthread_t main;
    int points, arm_at, narm, arm[2];
    int stuck; /* threads still blocked when the run ended (a deadlock): joined at its end */
    pthread_t stuck_t[8];
    pthread_mutex_t mu;
    char failure[600];
} run;

static __thread int queue_thread; /* this thread is one of the queue's own (torch_npu's release thread) */

static void note(run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(run *r, const char *fmt, ...)
{
    pthread_mutex_lock(&r->mu);
    if (!r->failure[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->failure, sizeof r->failure, fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&r->mu);
}

/* A thread of the run, joined within PATIENCE_S seconds or left to end later (then the run fails). */
typedef struct job {
    run *r;
    void (*fn)(run *, int);
    int arg;
    int done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
} job;

static void *job_main(void *p)
{
    job *j = p;
    if (j->r->ctx)
        F.set_context(j->r->ctx); /* the device's context, as every torch_npu thread has it */
    j->fn(j->r, j->arg);
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    pthread_cond_signal(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* Runs n jobs at once; returns how many did not finish in time (their threads are kept for the run's end, their
 * job structures leaked on purpose: the thread still uses them). */
static int run_jobs(run *r, void (*fn)(run *, int), const int *args, int n)
{
    job *j[2];
    pthread_t t[2];
    for (int i = 0; i < n; i++) {
        j[i] = calloc(1, sizeof *j[i]);
        *j[i] = (job){.r = r, .fn = fn, .arg = args[i]};
        pthread_mutex_init(&j[i]->mu, NULL);
        pthread_cond_init(&j[i]->cv, NULL);
        assert_int_equal(pthread_create(&t[i], NULL, job_main, j[i]), 0);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += PATIENCE_S;
    int late = 0;
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&j[i]->mu);
        int rc = 0;
        while (!j[i]->done && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&j[i]->cv, &j[i]->mu, &until);
        int done = j[i]->done;
        pthread_mutex_unlock(&j[i]->mu);
        if (done) {
            pthread_join(t[i], NULL);
            pthread_mutex_destroy(&j[i]->mu);
            pthread_cond_destroy(&j[i]->cv);
            free(j[i]);
        } else {
            late++;
            pthread_mutex_lock(&r->mu);
            if (r->stuck < 8)
                r->stuck_t[r->stuck++] = t[i];
            pthread_mutex_unlock(&r->mu);
        }
    }
    return late;
}

/* ---- the injected operations (each on a thread of its own) ---- */

static void keep(run *r, void *p)
{
    pthread_mutex_lock(&r->mu);
    if (r->ngot < MAX_GOT)
        r->got[r->ngot++] = p;
    pthread_mutex_unlock(&r->mu);
}

static int pool_state(run *r)
{
    hbm_pool_info info;
    return hbm_pool_info_get(r->a, r->pool, &info) == HBM_OK ? (int)info.state : -1;
}

/* code: the operation, plus NOPS for the second of a pair (its own block to free). */
static void do_op(run *r, int code)
{
    int op = code % NOPS, slot = code / NOPS;
    void *p = NULL;
    hbm_status rc = HBM_OK;
    switch (op) {
    case OP_MALLOC:
    case OP_POOL_MALLOC:
        rc = op == OP_MALLOC ? hbm_malloc(r->a, 3 * MiB, S_OPS, &p)
                             : hbm_mempool_malloc(r->a, r->pool, 3 * MiB, S_OPS, &p);
        if (rc == HBM_OK) {
            /* A block of the pool is not used when the other operation puts the pool to sleep: whether the use
             * comes before the sleep's last wait is the caller's race (touching a sleeping pool's block is the
             * user's error, docs/SLEEP.md), which the fake runtime would report as broken work. */
            int sleeper = op == OP_POOL_MALLOC && r->narm == 2 && (r->arm[0] == OP_SLEEP || r->arm[1] == OP_SLEEP);
            if (!sleeper && F.first_use((void *)S_OPS, p, 3 * MiB))
                note(r, "%s: the block it got cannot be used", op_names[op]);
            keep(r, p);
        } else if (rc != HBM_ERR_ASLEEP && rc != HBM_ERR_INVALID && rc != HBM_ERR_OOM) {
            note(r, "%s: %s (%s)", op_names[op], hbm_status_name(rc), hbm_last_error(r->a));
        }
        return;
    case OP_FREE:
    case OP_STREAM_FREE:
    case OP_QUEUE_THREAD_FREE:
        queue_thread = op == OP_QUEUE_THREAD_FREE;
        rc = hbm_free(r->a, r->spare[op][slot]);
        r->spare[op][slot] = NULL; /* gone either way (a failure is noted) */
        break;
    case OP_EMPTY_CACHE: rc = hbm_empty_cache(r->a); break;
    case OP_SLEEP:
    case OP_WAKE:
        rc = op == OP_SLEEP ? hbm_pool_sleep(r->a, r->pool, NULL) : hbm_pool_wake(r->a, r->pool, NULL);
        if (rc == HBM_ERR_INVALID) /* refused: the pool is falling asleep or waking (another thread's) */
            rc = HBM_OK;
        break;
    case OP_RELEASE:
        rc = hbm_mempool_release(r->a, r->pool);
        if (rc == HBM_ERR_POOL_BUSY || rc == HBM_OK)
            r->released = 1, rc = HBM_OK; /* kept while its blocks live */
        else if (rc == HBM_ERR_INVALID && r->narm == 2 && r->arm[0] == OP_RELEASE && r->arm[1] == OP_RELEASE)
            rc = HBM_OK; /* released twice: the second is refused */
        break;
    }
    if (rc != HBM_OK)
        note(r, "%s: %s (%s)", op_names[op], hbm_status_name(rc), hbm_last_error(r->a));
}

static void op_job(run *r, int op) { do_op(r, op); }

/* ---- the host queue: every drain and every progress call is a point ---- */

static void probe_job(run *r, int unused)
{
    (void)unused;
    hbm_device_counters c;
    hbm_get_device_counters(r->a, &c); /* takes the allocator's lock */
}

/* A point of the scenario's thread: the armed operations run there, on other threads, and must finish. */
static void at_point(run *r, const char *where)
{
    if (!pthread_equal(pthread_self(), r->main))
        return;
    ++r->points; /* arm_at -1: the first progress callback */
    if (r->points != r->arm_at && !(r->arm_at == -1 && strstr(where, "progress") && (r->arm_at = r->points)))
        return;
    int codes[2] = {r->arm[0], r->arm[1] + NOPS};
    int late = run_jobs(r, op_job, codes, r->narm);
    if (late)
        note(r, "point %d (%s): %s%s%s did not finish within %d s (a deadlock)", r->points, where, op_names[r->arm[0]],
             r->narm > 1 ? " + " : "", r->narm > 1 ? op_names[r->arm[1]] : "", PATIENCE_S);
}

static int drain(void *ctx)
{
    run *r = ctx;
    if (queue_thread)
        note(r, "a drain on a thread of the queue's own (it waits for itself)");
    int zero = 0;
    if (run_jobs(r, probe_job, &zero, 1))
        note(r, "the queue was drained with hbmalloc's lock held (another thread could not take it in %d s)",
             PATIENCE_S);
    at_point(r, "a wait for the queue");
    return F.sync_device();
}

static int may_wait(void *ctx)
{
    (void)ctx;
    return !queue_thread;
}

static int event_record(void *ctx, int device, hbm_stream stream, void **ev)
{
    run *r = ctx;
    (void)device;
    if (queue_thread)
        note(r, "an event queued from a thread of the queue's own");
    if (F.create_event(ev))
        return -1;
    return F.record_event(*ev, (void *)stream) ? -1 : 0;
}

static int event_query(void *ctx, void *ev)
{
    (void)ctx;
    int status = 0;
    return F.query_event(ev, &status) ? -1 : status == 1;
}

static void event_release(void *ctx, void *ev)
{
    (void)ctx;
    F.destroy_event(ev);
}

static void progress(void *ctx, uint64_t done, uint64_t total)
{
    (void)done, (void)total;
    at_point(ctx, "a progress callback");
}

static hbm_sleep_opts opts_of(run *r)
{
    return (hbm_sleep_opts){.chunk_bytes = KEPT / 4, .progress = progress, .ctx = r};
}

/* ---- the scenarios: an operation that reaches one or more windows ---- */

static void *must_pool_malloc(run *r, size_t size)
{
    void *p = NULL;
    hbm_status rc = hbm_mempool_malloc(r->a, r->pool, size, S_MAIN, &p);
    if (rc != HBM_OK)
        fail_msg("setup: pool malloc of %zu bytes: %s (%s)", size, hbm_status_name(rc), hbm_last_error(r->a));
    return p;
}

/* A block freed after work was launched on it: the next wait before memory goes back is due. */
static void dirty(run *r, size_t size)
{
    void *p = must_malloc(r->a, size, S_MAIN);
    assert_int_equal(F.launch((void *)S_MAIN, p, size), 0);
    assert_int_equal(hbm_free(r->a, p), HBM_OK);
}

/* A malloc into the pool: a success got mapped memory of an awake pool; a refusal found it asleep (defect 1: an
 * allocation landed in a pool another thread had put to sleep during the wait). */
static void check_pool_malloc(run *r, hbm_status rc, void *p, size_t size)
{
    int state = pool_state(r);
    if (rc == HBM_OK) {
        if (state != HBM_POOL_AWAKE)
            note(r, "the pool's malloc succeeded in a pool that is %s", state == HBM_POOL_ASLEEP ? "asleep" : "busy");
        if (F.first_use((void *)S_MAIN, p, size))
            note(r, "the pool's malloc returned memory that cannot be used");
        keep(r, p);
    } else if (!(rc == HBM_ERR_ASLEEP && state == HBM_POOL_ASLEEP) && !(rc == HBM_ERR_INVALID && r->released)) {
        note(r, "the pool's malloc: %s with the pool in state %d (%s)", hbm_status_name(rc), state,
             hbm_last_error(r->a));
    }
}

static void pool_malloc_action(run *r, size_t size)
{
    void *p = NULL;
    hbm_status rc = hbm_mempool_malloc(r->a, r->pool, size, S_MAIN, &p);
    check_pool_malloc(r, rc, p, size);
}

static void gc_setup(run *r)
{
    assert_int_equal(hbm_set_memory_fraction(r->a, 0.25), HBM_OK); /* 256 MiB; collected above 128 MiB */
    void *p[3];
    for (int i = 0; i < 3; i++) {
        p[i] = must_malloc(r->a, 48 * MiB, S_MAIN);
        assert_int_equal(F.launch((void *)S_MAIN, p[i], 48 * MiB), 0);
    }
    for (int i = 0; i < 3; i++)
        assert_int_equal(hbm_free(r->a, p[i]), HBM_OK);
}
static void gc_action(run *r) { pool_malloc_action(r, 24 * MiB); }

static void remap_action(run *r) { pool_malloc_action(r, 24 * MiB); }

static void oom_setup(run *r) { dirty(r, 100 * MiB); } /* cached: the 80 MiB below fits only once it goes back */
static void oom_action(run *r) { pool_malloc_action(r, 80 * MiB); }

static void empty_action(run *r)
{
    hbm_status rc = hbm_empty_cache(r->a);
    if (rc != HBM_OK)
        note(r, "empty_cache: %s (%s)", hbm_status_name(rc), hbm_last_error(r->a));
}

static void trim_action(run *r)
{
    hbm_status rc = hbm_mempool_trim(r->a, r->pool);
    if (rc != HBM_OK && !(rc == HBM_ERR_ASLEEP && pool_state(r) == HBM_POOL_ASLEEP) &&
        !(rc == HBM_ERR_INVALID && r->released))
        note(r, "trim: %s (%s)", hbm_status_name(rc), hbm_last_error(r->a));
}

static void sleep_action(run *r)
{
    hbm_sleep_opts o = opts_of(r);
    hbm_status rc = hbm_pool_sleep(r->a, r->pool, &o);
    if (rc != HBM_OK || pool_state(r) != HBM_POOL_ASLEEP)
        note(r, "sleep: %s, the pool in state %d (%s)", hbm_status_name(rc), pool_state(r), hbm_last_error(r->a));
}

static void wake_setup(run *r)
{
    hbm_sleep_opts o = {.chunk_bytes = KEPT / 4}; /* the backup's pieces, which the wake copies back one by one */
    assert_int_equal(hbm_pool_sleep(r->a, r->pool, &o), HBM_OK);
}
static void wake_action(run *r)
{
    hbm_sleep_opts o = opts_of(r);
    hbm_status rc = hbm_pool_wake(r->a, r->pool, &o);
    if (rc != HBM_OK || pool_state(r) != HBM_POOL_AWAKE)
        note(r, "wake: %s, the pool in state %d (%s)", hbm_status_name(rc), pool_state(r), hbm_last_error(r->a));
}

typedef struct scenario {
    const char *name, *settings;
    long memory;
    void (*setup)(run *);
    void (*action)(run *);
} scenario;

static const scenario scenarios[] = {
    {"a pool's malloc, garbage collection due", "garbage_collection_threshold:0.5", 1L << 30, gc_setup, gc_action},
    {"a pool's malloc, free pages remapped", "expandable_segments:True,hbm_remap_free_pages:True", 1L << 30, NULL,
     remap_action},
    {"a pool's malloc, out of memory then retried", "", 160L << 20, oom_setup, oom_action},
    {"empty_cache", "", 1L << 30, NULL, empty_action},
    {"a pool's trim", "", 1L << 30, NULL, trim_action},
    {"sleep with a backup and progress", "", 1L << 30, NULL, sleep_action},
    {"wake with a backup and progress", "", 1L << 30, wake_setup, wake_action},
};
enum { NSCEN = sizeof scenarios / sizeof *scenarios };

static void prepare(run *r, const scenario *sc)
{
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->main = pthread_self();
    queue_thread = 0;
    F.reset();
    F.set("memory", sc->memory);
    assert_int_equal(F.init(NULL), 0); /* what torch_npu has done before it allocates */
    assert_int_equal(F.set_device(0), 0);
    assert_int_equal(F.get_context(&r->ctx), 0);
    char err[600], spec[600];
    snprintf(spec, sizeof spec, "acl:lib=%s", HBM_FAKE_ACL);
    if (hbm_backend_open(&r->b, spec, err, sizeof err) != HBM_OK)
        fail_msg("%s", err);
    hbm_host_queue q = {.ctx = r,
                        .flush = drain,
                        .sync_device = drain,
                        .event_record = event_record,
                        .event_query = event_query,
                        .event_release = event_release,
                        .may_wait = may_wait};
    assert_int_equal(hbm_backend_set_host_queue(r->b, &q), HBM_OK);
    if (hbm_create(&r->a, r->b, 0, sc->settings, err, sizeof err) != HBM_OK)
        fail_msg("%s", err);
    assert_int_equal(hbm_mempool_create(r->a, &r->pool), HBM_OK);
    assert_int_equal(hbm_pool_tag(r->a, r->pool, "weights", 1), HBM_OK);
    r->kept = must_pool_malloc(r, KEPT);
    r->pattern = malloc(KEPT);
    for (size_t i = 0; i < KEPT; i++)
        r->pattern[i] = (unsigned char)(i * 7 + (i >> 12));
    assert_int_equal(F.poke(r->kept, r->pattern, KEPT), 0);
    assert_int_equal(F.first_use((void *)S_MAIN, r->kept, KEPT), 0);
    void *cached = must_pool_malloc(r, 2 * MiB); /* free memory of the pool: what a trim gives back */
    assert_int_equal(F.launch((void *)S_MAIN, cached, 2 * MiB), 0);
    assert_int_equal(hbm_free(r->a, cached), HBM_OK);
    for (int op = OP_FREE; op < NOPS; op++) {
        if (op != OP_FREE && op != OP_STREAM_FREE && op != OP_QUEUE_THREAD_FREE)
            continue;
        for (int k = 0; k < 2; k++) {
            void *p = r->spare[op][k] = must_malloc(r->a, 2 * MiB, S_MAIN);
            assert_int_equal(F.first_use((void *)S_MAIN, p, 2 * MiB), 0);
            if (op != OP_FREE) { /* used by another stream too, still at work when it is freed */
                assert_int_equal(hbm_record_stream(r->a, p, S_OTHER), HBM_OK);
                assert_int_equal(F.launch((void *)S_OTHER, p, 2 * MiB), 0);
            }
        }
    }
    if (sc->setup)
        sc->setup(r);
    dirty(r, 8 * MiB);
    r->points = 0; /* the setup's waits are not the scenario's points */
}

/* Everything the run must have kept true; then everything goes back and the runtime is left empty. */
static void finish(run *r, const char *what)
{
    for (int i = 0; i < r->stuck; i++)
        pthread_join(r->stuck_t[i], NULL);
    char first[512];
    if (F.violations(first, sizeof first))
        note(r, "the device's work was broken: %s", first);
    char report[512];
    if (hbm_check(r->a, report, sizeof report))
        note(r, "the validator: %s", report);
    hbm_device_counters c;
    hbm_get_device_counters(r->a, &c);
    if (c.locked_queue_waits)
        note(r, "%llu waits would have held the lock", (unsigned long long)c.locked_queue_waits);
    queue_thread = 0;
    /* A released pool cannot be woken (its id is gone: hbm_pool_wake's refusal); its live blocks stay asleep. */
    int asleep = pool_state(r) == HBM_POOL_ASLEEP || (r->released && pool_state(r) < 0);
    if (asleep && !r->released) {
        hbm_status rc = hbm_pool_wake(r->a, r->pool, NULL);
        if (rc != HBM_OK)
            note(r, "the last wake: %s (%s)", hbm_status_name(rc), hbm_last_error(r->a));
    }
    unsigned char *back = malloc(KEPT);
    if ((!asleep || !r->released) && (F.peek(r->kept, back, KEPT) || memcmp(back, r->pattern, KEPT)))
        note(r, "the pool's kept block lost its contents");
    free(back);
    if (r->failure[0])
        fail_msg("%s: %s", what, r->failure);
    assert_int_equal(hbm_free(r->a, r->kept), HBM_OK);
    for (int op = 0; op < NOPS; op++)
        for (int k = 0; k < 2; k++)
            if (r->spare[op][k])
                assert_int_equal(hbm_free(r->a, r->spare[op][k]), HBM_OK);
    for (int i = 0; i < r->ngot; i++)
        assert_int_equal(hbm_free(r->a, r->got[i]), HBM_OK);
    if (!r->released)
        assert_int_equal(hbm_mempool_release(r->a, r->pool), HBM_OK);
    assert_int_equal(hbm_destroy(r->a), HBM_OK);
    hbm_backend_close(r->b);
    assert_int_equal(F.reset_device(0), 0);
    assert_int_equal(F.finalize(), 0);
    long o[7];
    F.outstanding(o);
    for (int i = 0; i < 7; i++)
        if (o[i])
            fail_msg("%s: the fake runtime still holds something (field %d: %ld)", what, i, o[i]);
    free(r->pattern);
    pthread_mutex_destroy(&r->mu);
}

/* One run: the scenario with `n` operations armed at its point `at` (0: none); returns its points. */
static int run_once(const scenario *sc, int at, const int *ops, int n)
{
    run r;
    prepare(&r, sc);
    r.arm_at = at;
    r.narm = n;
    for (int i = 0; i < n; i++)
        r.arm[i] = ops[i];
    sc->action(&r);
    int points = r.points;
    char what[300];
    snprintf(what, sizeof what, "%s, point %d of %d, %s%s%s", sc->name, at, points, n ? op_names[ops[0]] : "nothing",
             n > 1 ? " + " : "", n > 1 ? op_names[ops[1]] : "");
    finish(&r, what);
    return points;
}

/* ---- the tests ---- */

static int setup(void **st)
{
    (void)st;
    setenv("HBMALLOC_QUIET", "1", 1);
    unsetenv("PYTORCH_NPU_ALLOC_CONF");
    unsetenv("HBMALLOC_CONF");
    return load();
}

static int teardown(void **st)
{
    (void)st;
    dlclose(F.lib);
    return 0;
}

/* Each scenario reaches the windows it should: the explorer below would otherwise walk nothing. */
static void every_scenario_reaches_a_window(void **st)
{
    (void)st;
    static const int least[NSCEN] = {1, 1, 1, 1, 1, 4, 4}; /* sleep: its first wait, 4 progress calls, ... */
    for (int s = 0; s < NSCEN; s++) {
        int points = run_once(&scenarios[s], 0, NULL, 0);
        if (points < least[s])
            fail_msg("%s: %d points, expected at least %d", scenarios[s].name, points, least[s]);
    }
}

/* Defect 1 of issue #35: a pool's malloc waited for the queue with the lock open (garbage collection; remapping
 * free pages) after it had found the pool awake; another thread put the pool to sleep meanwhile, and the malloc
 * mapped pages into it and returned a block on memory the sleep had unmapped. It must be refused instead. */
static void a_pool_put_to_sleep_while_a_malloc_waits_refuses_it(void **st)
{
    (void)st;
    int sleep_op = OP_SLEEP;
    run_once(&scenarios[0], 1, &sleep_op, 1); /* garbage collection */
    run_once(&scenarios[1], 1, &sleep_op, 1); /* free pages remapped */
}

/* Defect 2: a block freed (other streams at work on it) during a sleep's progress callback, whose lock is open,
 * made the next backup copy drain the queue with the lock held: a hang if the queue's worker needs the lock. */
static void a_free_during_a_sleeps_progress_callback_drains_nothing_under_the_lock(void **st)
{
    (void)st;
    int free_op = OP_STREAM_FREE;
    run_once(&scenarios[5], -1, &free_op, 1); /* at the first progress callback */
}

/* Every point of every scenario x every operation, and every pair of operations at once. HBM_WINDOWS_PAIRS=0 walks
 * the single operations only (the ThreadSanitizer build: ten times slower). */
static void every_window_survives_every_operation(void **st)
{
    (void)st;
    const char *e = getenv("HBM_WINDOWS_PAIRS");
    int pairs = !e || strcmp(e, "0");
    long runs = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int s = 0; s < NSCEN; s++) {
        int points = run_once(&scenarios[s], 0, NULL, 0);
        for (int at = 1; at <= points; at++)
            for (int i = 0; i < NOPS; i++)
                for (int j = pairs ? i : NOPS; j <= NOPS; j++) { /* j == NOPS: i alone */
                    int ops[2] = {i, j};
                    run_once(&scenarios[s], at, ops, j == NOPS ? 1 : 2);
                    runs++;
                }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    printf("window explorer: %ld interleavings in %.1f s\n", runs,
           (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_scenario_reaches_a_window),
        cmocka_unit_test(a_pool_put_to_sleep_while_a_malloc_waits_refuses_it),
        cmocka_unit_test(a_free_during_a_sleeps_progress_callback_drains_nothing_under_the_lock),
        cmocka_unit_test(every_window_survives_every_operation),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
