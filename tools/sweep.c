/*
 * sweep.c: replay one trace under a grid of settings, in parallel, rank the
 * results and recommend a setting the target device supports.
 *
 * Default grid (48 settings in the CUDA dialect): expandable_segments
 * {False, True} x max_split_size_mb {unset, 64, 256, 1024} x
 * roundup_power2_divisions {unset, 4} x garbage_collection_threshold
 * {unset, 0.6, 0.8}. PyTorch runs garbage collection only under a memory
 * fraction below 1, so GC entries carry per_process_memory_fraction:0.99.
 * Combinations the dialect rejects (torch_npu: expandable segments with
 * max_split or GC) and expandable segments on a device without virtual
 * memory are left out, and the output says how many.
 * Ranking: runs without OOM first, then lower peak reserved, then less
 * modelled device time.
 */
#include "sweep.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../src/internal.h"
#include "../src/util.h"
#include "replay.h"

#define MAX_VALUES 8
#define MAX_KEYS 6
#define MAX_SETTINGS 4096

typedef struct axis {
    char key[48];
    char values[MAX_VALUES][32]; /* "" = unset */
    int n;
} axis;

typedef struct job {
    char conf[256];
    replay_result r;
    int rc;
} job;

typedef struct pool {
    const trace *t;
    const char *spec;
    job *jobs;
    int njobs, next, done;
    int progress;
    pthread_mutex_t lock;
} pool;

static void progress(pool *p)
{
    if (!p->progress)
        return;
    int width = 40, filled = p->done * width / p->njobs;
    fprintf(stderr, "\rsweep [%.*s%*s] %d/%d", filled, "########################################", width - filled, "",
            p->done, p->njobs);
    if (p->done == p->njobs)
        fputc('\n', stderr);
    fflush(stderr);
}

static void *worker(void *arg)
{
    pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int i = p->next < p->njobs ? p->next++ : -1;
        pthread_mutex_unlock(&p->lock);
        if (i < 0)
            return NULL;
        replay_opts o = {.backend_spec = p->spec, .settings = p->jobs[i].conf, .quiet = 1};
        p->jobs[i].rc = replay_run(p->t, &o, &p->jobs[i].r);
        pthread_mutex_lock(&p->lock);
        p->done++;
        progress(p);
        pthread_mutex_unlock(&p->lock);
    }
}

static int parse_grid(const char *g, axis *ax, int *nax, char *err, size_t errlen)
{
    /* "key=v1,v2;key2=v3,v4"; a value "-" means unset */
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", g);
    *nax = 0;
    char *save = NULL;
    for (char *part = strtok_r(buf, ";", &save); part; part = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(part, '=');
        if (!eq || *nax == MAX_KEYS) {
            snprintf(err, errlen, "--grid: expected key=v1,v2;key2=... (at most %d keys), got '%.200s'", MAX_KEYS, part);
            return -1;
        }
        *eq = 0;
        axis *a = &ax[(*nax)++];
        snprintf(a->key, sizeof a->key, "%s", part);
        a->n = 0;
        char *s2 = NULL;
        for (char *v = strtok_r(eq + 1, ",", &s2); v; v = strtok_r(NULL, ",", &s2)) {
            if (a->n == MAX_VALUES) {
                snprintf(err, errlen, "--grid: at most %d values for %.47s", MAX_VALUES, a->key);
                return -1;
            }
            snprintf(a->values[a->n++], sizeof a->values[0], "%s", strcmp(v, "-") ? v : "");
        }
        if (!a->n) {
            snprintf(err, errlen, "--grid: no values for %.47s", a->key);
            return -1;
        }
    }
    return 0;
}

static int job_cmp(const void *x, const void *y)
{
    const job *a = x, *b = y;
    int oa = a->rc != 0, ob = b->rc != 0;
    if (oa != ob)
        return oa - ob;
    int64_t ra = a->r.stats.reserved_bytes[HBM_POOL_ALL].peak, rb = b->r.stats.reserved_bytes[HBM_POOL_ALL].peak;
    if (oa && ra == rb)
        return a->r.events_done > b->r.events_done ? -1 : a->r.events_done < b->r.events_done;
    if (ra != rb)
        return ra < rb ? -1 : 1;
    return a->r.dev.device_ns < b->r.dev.device_ns ? -1 : a->r.dev.device_ns > b->r.dev.device_ns;
}

int sweep_run(const trace *t, const sweep_opts *o, FILE *out)
{
    char err[512];
    axis ax[MAX_KEYS];
    int nax = 0;
    const char *def = "expandable_segments=False,True;max_split_size_mb=-,64,256,1024;roundup_power2_divisions=-,4;"
                      "garbage_collection_threshold=-,0.6,0.8";
    if (parse_grid(o->grid ? o->grid : def, ax, &nax, err, sizeof err)) {
        fprintf(stderr, "hbmalloc sweep: %s\n", err);
        return 2;
    }
    /* What the target device can do. */
    hbm_backend *b;
    if (hbm_backend_open(&b, o->backend_spec, err, sizeof err) != HBM_OK) {
        fprintf(stderr, "hbmalloc sweep: %s\n", err);
        return 2;
    }
    hbm_dialect dialect = b->caps.dialect;
    int vmm = b->caps.has_vmm && !o->no_expandable;
    char why[256];
    snprintf(why, sizeof why, "%s", o->no_expandable ? "--no-expandable" : b->caps.vmm_why_not);
    hbm_backend_close(b);

    int total = 1;
    for (int k = 0; k < nax; k++)
        total *= ax[k].n;
    if (total > MAX_SETTINGS) {
        fprintf(stderr, "hbmalloc sweep: the grid has %d settings, at most %d\n", total, MAX_SETTINGS);
        return 2;
    }
    job *jobs = calloc((size_t)total, sizeof *jobs);
    if (!jobs)
        return 2;
    int njobs = 0, rejected = 0, unsupported = 0;
    for (int i = 0; i < total; i++) {
        char conf[256] = "";
        hbm__sbuf sb;
        hbm__sb_init(&sb, conf, sizeof conf);
        int idx = i, gc = 0, exp = 0;
        for (int k = 0; k < nax; k++) {
            const char *v = ax[k].values[idx % ax[k].n];
            idx /= ax[k].n;
            if (!*v)
                continue;
            if (!strcmp(ax[k].key, "garbage_collection_threshold"))
                gc = 1;
            if (!strcmp(ax[k].key, "expandable_segments") && !strcmp(v, "True"))
                exp = 1;
            if (!strcmp(ax[k].key, "expandable_segments") && !strcmp(v, "False"))
                continue; /* the default: leave it out of the string */
            hbm__sb_printf(&sb, "%s%s:%s", sb.len ? "," : "", ax[k].key, v);
        }
        if (gc)
            hbm__sb_printf(&sb, "%sper_process_memory_fraction:0.99", sb.len ? "," : "");
        if (exp && !vmm) {
            unsupported++;
            continue;
        }
        char out_desc[4096];
        if (hbm_settings_check(conf, dialect, out_desc, sizeof out_desc) != HBM_OK) {
            rejected++;
            continue;
        }
        snprintf(jobs[njobs++].conf, sizeof jobs[0].conf, "%s", conf);
    }
    if (njobs == 0) {
        fprintf(stderr, "hbmalloc sweep: no setting of the grid is valid for this device\n");
        free(jobs);
        return 2;
    }
    int nthreads = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nthreads < 1)
        nthreads = 1;
    if (nthreads > njobs)
        nthreads = njobs;
    pool p = {t, o->backend_spec, jobs, njobs, 0, 0, o->progress, PTHREAD_MUTEX_INITIALIZER};
    pthread_t th[256];
    if (nthreads > 256)
        nthreads = 256;
    setenv("HBMALLOC_QUIET", "1", 1);
    for (int i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, worker, &p);
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < njobs; i++)
        if (jobs[i].rc == 2) {
            fprintf(stderr, "hbmalloc sweep: setting '%s': %s\n", jobs[i].conf, jobs[i].r.message);
            free(jobs);
            return 2;
        }
    qsort(jobs, (size_t)njobs, sizeof *jobs, job_cmp);
    const char *var = dialect == HBM_DIALECT_NPU ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF";
    const job *best = &jobs[0];
    if (o->json) {
        fprintf(out, "{\"trace\":\"%s\",\"device\":\"%s\",\"settings_run\":%d,\"left_out_invalid\":%d,"
                     "\"left_out_unsupported\":%d,\"results\":[",
                o->name, o->backend_spec, njobs, rejected, unsupported);
        for (int i = 0; i < njobs; i++) {
            const job *j = &jobs[i];
            const hbm_stats *s = &j->r.stats;
            fprintf(out,
                    "%s{\"rank\":%d,\"settings\":\"%s\",\"oom\":%s,\"oom_event\":%lld,\"peak_allocated\":%lld,"
                    "\"peak_reserved\":%lld,\"reserved_over_allocated\":%.6f,\"device_allocs\":%lld,"
                    "\"device_frees\":%lld,\"device_time_ms\":%.3f}",
                    i ? "," : "", i + 1, j->conf, j->rc ? "true" : "false", j->rc ? (long long)j->r.oom_event : -1LL,
                    (long long)s->allocated_bytes[0].peak, (long long)s->reserved_bytes[0].peak,
                    s->allocated_bytes[0].peak ? (double)s->reserved_bytes[0].peak / (double)s->allocated_bytes[0].peak
                                               : 0.0,
                    (long long)s->num_device_alloc, (long long)s->num_device_free, (double)j->r.dev.device_ns / 1e6);
        }
        char quoted[700];
        hbm__shell_quote(best->conf, quoted, sizeof quoted);
        fprintf(out, "],\"recommended\":%s%s%s,\"export\":\"export %s=%s\"}\n", best->rc ? "null" : "\"",
                best->rc ? "" : best->conf, best->rc ? "" : "\"", var, quoted);
    } else {
        fprintf(out, "sweep of %s on %s: %d settings", o->name, o->backend_spec, njobs);
        if (rejected)
            fprintf(out, ", %d left out (invalid in this dialect)", rejected);
        if (unsupported)
            fprintf(out, ", %d with expandable segments left out (%s)", unsupported, why);
        fprintf(out, "\n\n%4s  %-78s %12s %12s %7s %9s %10s  %s\n", "rank", "settings", "peak alloc", "peak reserv",
                "ratio", "dev calls", "dev ms", "OOM");
        for (int i = 0; i < njobs; i++) {
            const job *j = &jobs[i];
            const hbm_stats *s = &j->r.stats;
            char pa[32], pr[32];
            hbm__format_size((uint64_t)s->allocated_bytes[0].peak, pa, sizeof pa);
            hbm__format_size((uint64_t)s->reserved_bytes[0].peak, pr, sizeof pr);
            char oom[48] = "-";
            if (j->rc)
                snprintf(oom, sizeof oom, "at event %zu", j->r.oom_event);
            fprintf(out, "%4d  %-78s %12s %12s %7.4f %9lld %10.3f  %s\n", i + 1, j->conf[0] ? j->conf : "(defaults)",
                    pa, pr,
                    s->allocated_bytes[0].peak ? (double)s->reserved_bytes[0].peak / (double)s->allocated_bytes[0].peak
                                               : 0.0,
                    (long long)(s->num_device_alloc + s->num_device_free), (double)j->r.dev.device_ns / 1e6, oom);
        }
        fputc('\n', out);
        if (best->rc)
            fprintf(out, "no setting runs this trace without OOM at this capacity; the closest is ranked first\n");
        else if (!best->conf[0])
            fprintf(out, "recommended: the defaults (no %s needed)\n", var);
        else
        {
            char quoted[700];
            hbm__shell_quote(best->conf, quoted, sizeof quoted);
            fprintf(out, "recommended:\nexport %s=%s\n", var, quoted);
        }
    }
    int rc = best->rc ? 1 : 0;
    free(jobs);
    return rc;
}
