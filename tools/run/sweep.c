/*
 * sweep.c: replay one trace under a grid of settings, in parallel, rank the
 * results and recommend a setting the target device and the user's framework
 * release accept.
 *
 * Default grid (48 settings in the CUDA dialect): expandable_segments
 * {False, True} x max_split_size_mb {unset, 64, 256, 1024} x
 * roundup_power2_divisions {unset, 4} x garbage_collection_threshold
 * {unset, 0.6, 0.8}. PyTorch runs garbage collection only under a memory
 * fraction below 1, so GC entries carry per_process_memory_fraction:0.99
 * unless the grid has a fraction axis; a GC entry whose fraction is unset or
 * 1 never collects and is left out. Strings the release refuses
 * (torch_npu: expandable segments with max_split or GC; keys newer than the
 * release) and expandable segments on a device without virtual memory are
 * left out, and the output says how many. The user's own setting (the
 * dialect's PYTORCH_* variable, or --baseline) is replayed as the release
 * runs it and shown as a row of its own. Rows with identical results are
 * listed once. Ranking: runs without OOM first, then lower peak reserved,
 * then less modelled device time, then the shorter string.
 *
 * On a device without virtual memory the default grid also runs hbmalloc's
 * arena policy (docs/POLICY.md) as a row marked for the plug-ins: the smallest
 * arena (hbm_arena_mb, to 1 MiB) with which the trace runs on this capacity,
 * found by bisection and proven by its own replay, so that the rest of the
 * device stays free for HCCL/NCCL buffers. When the trace marks training steps
 * (s events, or --steps), the step plan (hbm_step_plan) is a row of the same
 * kind. PyTorch's own allocator cannot read them: the best one's HBMALLOC_CONF
 * line is printed beside the framework's.
 */
#include "sweep.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dialect.h"
#include "util.h"

#define MAX_VALUES 8
#define MAX_KEYS 6
#define MAX_SETTINGS 4096
#define WIDTH 120 /* the report's lines fit a terminal of this width (the export line, to paste whole, apart) */


typedef struct axis {
    char key[48];
    char values[MAX_VALUES][32]; /* "" = unset */
    int n;
} axis;

typedef struct pool {
    const trace *t;
    const char *spec;
    sweep_row *rows;
    int nrows, next, done;
    int progress;
    pthread_mutex_t lock;
} pool;

static void progress(pool *p)
{
    if (!p->progress)
        return;
    int width = 40, filled = p->done * width / p->nrows;
    fprintf(stderr, "\rsweep [%.*s%*s] %d/%d", filled, "########################################", width - filled, "",
            p->done, p->nrows);
    if (p->done == p->nrows)
        fputc('\n', stderr);
    fflush(stderr);
}

static void *worker(void *arg)
{
    pool *p = arg;
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int i = p->next < p->nrows ? p->next++ : -1;
        pthread_mutex_unlock(&p->lock);
        if (i < 0)
            return NULL;
        replay_opts o = {.backend_spec = p->spec, .settings = p->rows[i].conf, .quiet = 1};
        p->rows[i].rc = replay_run(p->t, &o, &p->rows[i].r);
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
            snprintf(err, errlen, "--grid: expected key=v1,v2;key2=... (at most %d keys), got '%.200s'", MAX_KEYS,
                     part);
            return -1;
        }
        *eq = 0;
        axis *a = &ax[(*nax)++];
        snprintf(a->key, sizeof a->key, "%s", part);
        for (int k = 0; k < *nax - 1; k++)
            if (!strcmp(ax[k].key, a->key)) {
                snprintf(err, errlen, "--grid: %.47s is given twice", a->key);
                return -1;
            }
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

/* Replays at once. The trace is shared; each replay holds its own allocator, whose blocks (an hbm__block and its
 * place in the address map, some 180 bytes) are as many as the trace's most blocks live at once: 174 MB a replay
 * for a lifetime CSV of 7 MB whose million rows all live together. The replays running together keep within the
 * readers' memory bound for the file (4 MiB + 16 bytes per byte, docs/RELIABILITY.md), one at least; a trace not
 * read from a file (bytes 0) is not bounded. */
#define JOB_FLOOR ((uint64_t)256 << 10)
#define JOB_PER_SLOT 256 /* bytes a replay holds per block live at once, over-estimated */

static int jobs_in_memory(const trace *t, int want, sweep_outcome *out)
{
    uint64_t each = JOB_FLOOR + JOB_PER_SLOT * (uint64_t)t->nslots, bound = (4ull << 20) + 16 * (uint64_t)t->bytes;
    uint64_t fit = bound / each;
    out->job_bytes = each;
    if (!t->bytes || fit >= (uint64_t)want)
        return want;
    return fit ? (int)fit : 1;
}

static int64_t peak_reserved(const sweep_row *r) { return r->r.stats.reserved_bytes[HBM_POOL_ALL].peak; }

static int row_cmp(const void *x, const void *y)
{
    const sweep_row *a = x, *b = y;
    int oa = a->rc != 0, ob = b->rc != 0;
    if (oa != ob)
        return oa - ob;
    int64_t ra = peak_reserved(a), rb = peak_reserved(b);
    if (oa && ra == rb && a->r.events_done != b->r.events_done)
        return a->r.events_done > b->r.events_done ? -1 : 1;
    if (ra != rb)
        return ra < rb ? -1 : 1;
    if (a->r.dev.device_ns != b->r.dev.device_ns)
        return a->r.dev.device_ns < b->r.dev.device_ns ? -1 : 1;
    size_t la = strlen(a->conf), lb = strlen(b->conf);
    if (la != lb)
        return la < lb ? -1 : 1;
    return strcmp(a->conf, b->conf);
}

static int same_result(const sweep_row *a, const sweep_row *b)
{
    const hbm_stats *s = &a->r.stats, *t = &b->r.stats;
    return a->rc == b->rc && (!a->rc || a->r.oom_event == b->r.oom_event) &&
           s->allocated_bytes[0].peak == t->allocated_bytes[0].peak && peak_reserved(a) == peak_reserved(b) &&
           s->num_device_alloc == t->num_device_alloc && s->num_device_free == t->num_device_free &&
           a->r.dev.device_ns == b->r.dev.device_ns;
}

/* s without its per_process_memory_fraction entry. */
static void without_fraction(const char *s, char *out, size_t len)
{
    hbm__sbuf sb;
    hbm__sb_init(&sb, out, len);
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    char *save = NULL;
    for (char *e = strtok_r(buf, ",", &save); e; e = strtok_r(NULL, ",", &save))
        if (strncmp(e, "per_process_memory_fraction:", 28))
            hbm__sb_printf(&sb, "%s%s", sb.len ? "," : "", e);
}

/* Does the release read per_process_memory_fraction from its variable? Unknown release: assume not. */
static int release_reads_fraction(hbm_dialect d, const char *version)
{
    char out[4096];
    return version && *version &&
           hbm_settings_check_release(dialect_var(d), "per_process_memory_fraction:0.99", d, version, -1, out,
                                      sizeof out) == HBM_OK;
}

/* The string as the user sets it: the fraction moves into code where the release cannot read it. */
static void user_string(const char *conf, hbm_dialect d, const char *version, char *out, size_t len)
{
    if (strstr(conf, "per_process_memory_fraction:") && !release_reads_fraction(d, version))
        without_fraction(conf, out, len);
    else
        snprintf(out, len, "%s", conf);
}

static sweep_row *add_row(sweep_outcome *o, int cap, const char *conf)
{
    size_t len = strlen(conf);
    if (o->n == cap || len >= sizeof o->rows[0].conf)
        return NULL;
    sweep_row *r = &o->rows[o->n++];
    memset(r, 0, sizeof *r);
    memcpy(r->conf, conf, len + 1);
    r->same_as = -1;
    return r;
}

/* The arena row: the smallest hbm_arena_mb (to 1 MiB) in which the trace runs on this device with no other
 * device allocation, by bisection (a smaller arena plus segments is the caching policy again); the row holds
 * that size's own replay (or, when even an arena of the whole device is not enough, that one). 0, or -1 when
 * the device's capacity cannot be read. */
static int arena_row(const trace *t, const char *spec, sweep_row *row)
{
    hbm_backend *b;
    char err[256];
    size_t free_bytes = 0, total = 0;
    if (hbm_backend_open(&b, spec, err, sizeof err) != HBM_OK)
        return -1;
    int rc = hbm_backend_mem_info(b, 0, &free_bytes, &total) != HBM_OK;
    hbm_backend_close(b);
    if (rc || free_bytes < 4 * HBM__MiB)
        return -1;
    row->hbm = 1;
    sweep_row probe = *row;
    uint64_t lo = 1, hi = free_bytes / HBM__MiB; /* in MiB: hi is tried first; lo never runs */
    for (int first = 1;; first = 0) {
        uint64_t mid = first ? hi : lo + (hi - lo) / 2;
        snprintf(probe.conf, sizeof probe.conf, "hbm_arena_mb:%llu", (unsigned long long)mid);
        replay_opts o = {.backend_spec = spec, .settings = probe.conf, .quiet = 1};
        probe.rc = replay_run(t, &o, &probe.r);
        int alone = probe.rc == 0 && probe.r.stats.num_device_alloc == 1;
        if (first || alone)
            *row = probe;
        if (probe.rc == 2 || (first && !alone))
            return 0; /* the whole device is not enough for the arena alone: that row, as it ran */
        if (!first && alone)
            hi = mid;
        else if (!first)
            lo = mid;
        if (hi - lo <= 1)
            return 0;
    }
}

/* Every entry of the grid is one the newest release of the dialect reads: a misspelled key (or a value no release
 * takes) is the user's mistake, named with the key the release reads nearest (conf.c's suggestion, as --conf and
 * hbmalloc conf give it), not a setting "refused by" the release and left out. -1 with err set. */
static int grid_entries_known(const axis *ax, int nax, hbm_dialect d, char *err, size_t errlen)
{
    char entry[96], why[1024];
    for (int k = 0; k < nax; k++)
        for (int v = 0; v < ax[k].n; v++) {
            if (!ax[k].values[v][0])
                continue;
            snprintf(entry, sizeof entry, "%.47s:%.31s", ax[k].key, ax[k].values[v]);
            if (hbm_settings_check_release(dialect_var(d), entry, d, NULL, -1, why, sizeof why) != HBM_OK) {
                snprintf(err, errlen, "--grid '%s=%s': %s", ax[k].key, ax[k].values[v], why);
                return -1;
            }
        }
    return 0;
}

static void release_name(hbm_dialect d, const char *version, char *out, size_t len)
{
    char desc[4096];
    snprintf(out, len, "?");
    if (hbm_settings_check_release(dialect_var(d), "", d, version, -1, desc, sizeof desc) != HBM_OK)
        return;
    const char *p = strstr(desc, "read as: ");
    if (p)
        snprintf(out, len, "%.*s", (int)strcspn(p + 9, "\n"), p + 9);
}

int sweep_compute(const trace *t, const sweep_opts *o, sweep_outcome *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    axis ax[MAX_KEYS];
    int nax = 0;
    const char *def = "expandable_segments=False,True;max_split_size_mb=-,64,256,1024;roundup_power2_divisions=-,4;"
                      "garbage_collection_threshold=-,0.6,0.8";
    if (parse_grid(o->grid ? o->grid : def, ax, &nax, err, errlen))
        return 2;
    /* What the target device can do. */
    hbm_backend *b;
    if (hbm_backend_open(&b, o->backend_spec, err, errlen) != HBM_OK)
        return 2;
    hbm_backend_info info;
    hbm_backend_get_info(b, &info);
    out->dialect = info.dialect;
    char why[256] = "";
    out->vmm = !o->no_expandable && hbm_backend_vmm(b, 0, why, sizeof why);
    snprintf(out->why, sizeof out->why, "%s", o->no_expandable ? "--no-expandable" : why);
    hbm_backend_close(b);
    hbm_dialect d = out->dialect;
    const char *var = dialect_var(d);
    char probe[4096];
    if (o->version && *o->version &&
        hbm_settings_check_release(var, "", d, o->version, -1, probe, sizeof probe) != HBM_OK) {
        snprintf(err, errlen, "%s", probe);
        return 2;
    }
    release_name(d, o->version, out->release, sizeof out->release);
    if (grid_entries_known(ax, nax, d, err, errlen))
        return 2;

    int total = 1, frac_axis = -1;
    for (int k = 0; k < nax; k++) {
        total *= ax[k].n;
        if (!strcmp(ax[k].key, "per_process_memory_fraction"))
            frac_axis = k;
    }
    if (total > MAX_SETTINGS) {
        snprintf(err, errlen, "the grid has %d settings, at most %d", total, MAX_SETTINGS);
        return 2;
    }
    int cap = total + 2; /* the grid, the user's setting, the arena */
    out->rows = calloc((size_t)cap, sizeof *out->rows);
    if (!out->rows) {
        snprintf(err, errlen, "out of host memory");
        return 2;
    }
    for (int i = 0; i < total; i++) {
        char conf[256] = "";
        hbm__sbuf sb;
        hbm__sb_init(&sb, conf, sizeof conf);
        int idx = i, gc = 0, exp = 0;
        const char *fraction = "";
        for (int k = 0; k < nax; k++) {
            const char *v = ax[k].values[idx % ax[k].n];
            idx /= ax[k].n;
            if (k == frac_axis)
                fraction = v;
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
        if (gc && frac_axis < 0)
            hbm__sb_printf(&sb, "%sper_process_memory_fraction:0.99", sb.len ? "," : "");
        else if (gc && (!*fraction || atof(fraction) >= 1.0)) {
            out->inactive++; /* garbage collection runs only under a fraction below 1 */
            continue;
        }
        if (exp && !out->vmm) {
            out->unsupported++;
            continue;
        }
        /* As the user would set it: the release must accept that string. */
        char mine[256];
        user_string(conf, d, o->version, mine, sizeof mine);
        if (hbm_settings_check_release(var, mine, d, o->version, out->vmm, probe, sizeof probe) != HBM_OK ||
            hbm_settings_check(conf, d, probe, sizeof probe) != HBM_OK) {
            out->rejected++;
            continue;
        }
        add_row(out, cap, conf);
    }
    /* The user's own setting, as the release runs it on this device. */
    const char *from = o->baseline ? "--baseline" : var;
    const char *mine = o->baseline ? o->baseline : getenv(var);
    if (!mine && d == HBM_DIALECT_NPU && (mine = getenv("PYTORCH_ALLOC_CONF")))
        from = "PYTORCH_ALLOC_CONF";
    char eff[1024];
    if (!mine) {
        snprintf(out->baseline_note, sizeof out->baseline_note, "yours: the defaults (%s is not set)", var);
        mine = "";
    }
    if (hbm_settings_effective(var, mine, d, o->version, out->vmm, eff, sizeof eff) != HBM_OK) {
        snprintf(out->baseline_note, sizeof out->baseline_note, "yours: %s='%.200s' is refused by %s: %.300s", from,
                 mine, out->release, eff);
    } else {
        if (!out->baseline_note[0])
            snprintf(out->baseline_note, sizeof out->baseline_note, "yours: %s='%.200s'%s%.250s%s", from, mine,
                     strcmp(eff, mine) ? ", which runs as '" : "", strcmp(eff, mine) ? eff : "",
                     strcmp(eff, mine) ? "'" : "");
        int found = 0;
        for (int i = 0; i < out->n; i++)
            if (!strcmp(out->rows[i].conf, eff)) {
                out->rows[i].baseline = 1;
                found = 1;
            }
        if (!found && hbm_settings_check(eff, d, probe, sizeof probe) == HBM_OK) {
            sweep_row *r = add_row(out, cap, eff);
            if (r)
                r->baseline = 1;
        }
    }
    if (out->n == 0) {
        snprintf(err, errlen, "no setting of the grid is valid for this device and %s", out->release);
        return 2;
    }
    int nthreads = o->jobs > 0 ? o->jobs : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nthreads < 1)
        nthreads = 1;
    if (nthreads > out->n)
        nthreads = out->n;
    if (nthreads > 256)
        nthreads = 256;
    out->wanted_jobs = nthreads;
    out->jobs = nthreads = jobs_in_memory(t, nthreads, out);
    pool p = {t, o->backend_spec, out->rows, out->n, 0, 0, o->progress, PTHREAD_MUTEX_INITIALIZER};
    pthread_t th[256];
    setenv("HBMALLOC_QUIET", "1", 1);
    for (int i = 0; i < nthreads; i++)
        pthread_create(&th[i], NULL, worker, &p);
    for (int i = 0; i < nthreads; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < out->n; i++)
        if (out->rows[i].rc == 2) {
            snprintf(err, errlen, "setting '%s': %s", out->rows[i].conf, out->rows[i].r.message);
            return 2;
        }
    if (!out->vmm && !o->grid) {
        sweep_row *r = add_row(out, cap, "");
        if (r && arena_row(t, o->backend_spec, r))
            out->n--; /* the device's capacity could not be read: no row */
        int steps = 0;
        for (size_t i = 0; i < t->n && !steps; i++)
            steps = t->ev[i].kind == EV_STEP;
        if (steps && (r = add_row(out, cap, "hbm_step_plan:True"))) { /* the trace marks steps: the step plan */
            replay_opts ro = {.backend_spec = o->backend_spec, .settings = r->conf, .quiet = 1};
            r->hbm = 1;
            r->rc = replay_run(t, &ro, &r->r);
            if (r->rc == 2) {
                snprintf(err, errlen, "setting '%s': %s", r->conf, r->r.message);
                return 2;
            }
        }
    }
    qsort(out->rows, (size_t)out->n, sizeof *out->rows, row_cmp);
    for (int i = 0; i < out->n; i++) {
        for (int j = 0; j < i; j++)
            if (out->rows[j].same_as < 0 && same_result(&out->rows[i], &out->rows[j])) {
                out->rows[i].same_as = j;
                break;
            }
        /* One rank per distinct result, in order: 1, 2, 3 whatever the number of settings that share one. */
        sweep_row *r = &out->rows[i];
        r->rank = r->same_as >= 0 ? out->rows[r->same_as].rank : ++out->results;
    }
    return 0;
}

void sweep_outcome_free(sweep_outcome *out)
{
    free(out->rows);
    out->rows = NULL;
}

const sweep_row *sweep_best(const sweep_outcome *out)
{
    const sweep_row *best = NULL;
    for (int i = 0; i < out->n && !best; i++)
        if (!out->rows[i].hbm)
            best = &out->rows[i];
    if (!best || best->rc)
        return NULL;
    for (int i = 0; i < out->n; i++)
        if (out->rows[i].baseline && !out->rows[i].rc && peak_reserved(&out->rows[i]) <= peak_reserved(best))
            return &out->rows[i];
    return best;
}

static int is_step_plan(const sweep_row *row) { return !strncmp(row->conf, "hbm_step_plan", 13); }

const char *sweep_hbm_name(const sweep_row *row) { return is_step_plan(row) ? "step plan" : "arena policy"; }

const char *sweep_hbm_note(const sweep_row *row)
{
    return is_step_plan(row) ? "hbmalloc_torch.hook_optimizer(optimizer) marks the steps"
                             : "the rest of the device left to HCCL and others";
}

const sweep_row *sweep_best_hbm(const sweep_outcome *out)
{
    for (int i = 0; i < out->n; i++)
        if (out->rows[i].hbm && !out->rows[i].rc)
            return &out->rows[i];
    return NULL;
}

void sweep_advice(const sweep_outcome *out, const sweep_row *row, const char *version, char *exp, size_t explen,
                  char *code, size_t codelen)
{
    hbm_dialect d = out->dialect;
    const char *var = dialect_var(d);
    char mine[256], quoted[700];
    user_string(row->conf, d, version, mine, sizeof mine);
    if (!mine[0])
        snprintf(exp, explen, "unset %s", var);
    else {
        hbm__shell_quote(mine, quoted, sizeof quoted);
        snprintf(exp, explen, "export %s=%s", var, quoted);
    }
    code[0] = 0;
    const char *f = strstr(row->conf, "per_process_memory_fraction:");
    if (!f || strstr(mine, "per_process_memory_fraction:"))
        return;
    const char *mod = d == HBM_DIALECT_NPU ? "torch.npu" : "torch.cuda";
    int flen = (int)strcspn(f + 28, ",");
    if (version && *version)
        snprintf(code, codelen,
                 "%s.set_per_process_memory_fraction(%.*s) for each device, before the first "
                 "allocation (garbage_collection_threshold acts only under a memory fraction, and %s cannot read it "
                 "from %s)",
                 mod, flen, f + 28, out->release, var);
    else
        snprintf(code, codelen,
                 "%s.set_per_process_memory_fraction(%.*s) for each device, before the first "
                 "allocation (garbage_collection_threshold acts only under a memory fraction; releases before %s "
                 "cannot read it from %s: give --%s VERSION if yours is newer)",
                 mod, flen, f + 28, d == HBM_DIALECT_NPU ? "torch_npu v26.1.0" : "PyTorch 2.9", var,
                 d == HBM_DIALECT_NPU ? "torch-npu" : "torch");
}

/* text after prefix, then on lines indented as `indent`, none longer than WIDTH: prose broken at a space, settings
 * (no space in them) and lists of them after a ',' or ';'. */
static void put_wrapped(FILE *out, const char *prefix, const char *indent, const char *text, bool prose)
{
    size_t col = strlen(prefix), room = WIDTH;
    fputs(prefix, out);
    while (*text) {
        size_t n = strlen(text);
        if (col + n <= room) {
            fprintf(out, "%s\n", text);
            return;
        }
        size_t cut = 0, fit = room > col ? room - col : 1;
        for (size_t i = 1; i < n && i <= fit; i++)
            if (prose ? text[i] == ' ' : text[i - 1] == ',' || text[i - 1] == ';')
                cut = i;
        if (!cut) /* one word longer than the line */
            cut = strcspn(text, " ");
        fprintf(out, "%.*s\n%s", (int)cut, text, indent);
        col = strlen(indent);
        text += cut;
        while (*text == ' ')
            text++;
    }
}

/* The ranking, one line of figures per distinct result and its settings below it. */
static void print_ranking(FILE *out, const sweep_outcome *so)
{
    fprintf(out, "\n%4s  %11s  %13s  %14s  %12s  %9s  %s\n", "rank", "peak alloc", "peak reserved", "reserved/alloc",
            "device calls", "device ms", "OOM");
    for (int i = 0; i < so->n; i++) {
        const sweep_row *j = &so->rows[i];
        if (j->same_as >= 0)
            continue;
        const hbm_stats *s = &j->r.stats;
        char pa[32], pr[32], oom[48] = "-", line[400], more[200] = "";
        hbm__format_size((uint64_t)s->allocated_bytes[0].peak, pa, sizeof pa);
        hbm__format_size((uint64_t)s->reserved_bytes[0].peak, pr, sizeof pr);
        if (j->rc)
            snprintf(oom, sizeof oom, "at event %zu", j->r.oom_event);
        int yours = j->baseline, same = 0;
        for (int k = i + 1; k < so->n; k++)
            if (so->rows[k].same_as == i) {
                yours |= so->rows[k].baseline;
                same++;
            }
        const char *who = j->hbm ? "hbmalloc plug-in" : yours ? "yours" : "";
        fprintf(out, "%4d  %11s  %13s  %14.4f  %12lld  %9.3f  %-*s%s\n", j->rank, pa, pr,
                s->allocated_bytes[0].peak ? (double)s->reserved_bytes[0].peak / (double)s->allocated_bytes[0].peak
                                           : 0.0,
                (long long)(s->num_device_alloc + s->num_device_free), (double)j->r.dev.device_ns / 1e6,
                who[0] ? 16 : 0, oom, who);
        snprintf(line, sizeof line, "%s", j->conf[0] ? j->conf : "the defaults");
        put_wrapped(out, "      ", "        ", line, false);
        /* The settings with the same result: two named (and yours), the rest counted. */
        if (!same)
            continue;
        hbm__sbuf sb;
        char list[1200];
        hbm__sb_init(&sb, list, sizeof list);
        int shown = 0;
        for (int k = i + 1; k < so->n; k++) {
            const sweep_row *r = &so->rows[k];
            if (r->same_as != i || (shown >= 2 && !r->baseline))
                continue;
            hbm__sb_printf(&sb, "%s%s%s", shown ? "; " : "", r->conf[0] ? r->conf : "the defaults",
                           r->baseline ? " (yours)" : "");
            shown++;
        }
        if (same > shown)
            snprintf(more, sizeof more, "; and %d more", same - shown);
        char text[1400];
        snprintf(text, sizeof text, "%s%s", list, more);
        put_wrapped(out, "      same result: ", "        ", text, false);
    }
    fputc('\n', out);
}

int sweep_run(const trace *t, const sweep_opts *o, FILE *out)
{
    char err[768];
    sweep_outcome so;
    if (sweep_compute(t, o, &so, err, sizeof err)) {
        fprintf(stderr, "hbmalloc sweep: %s\n", err);
        sweep_outcome_free(&so);
        return 2;
    }
    const sweep_row *best = sweep_best(&so);
    const sweep_row *hbm_best = sweep_best_hbm(&so);
    const sweep_row *base = NULL;
    for (int i = 0; i < so.n; i++)
        if (so.rows[i].baseline)
            base = &so.rows[i];
    char exp[800] = "", code[600] = "";
    if (best)
        sweep_advice(&so, best, o->version, exp, sizeof exp, code, sizeof code);
    if (o->json) {
        fprintf(out, "{\"trace\":");
        hbm__json_str(out, o->name);
        fprintf(out, ",\"device\":");
        hbm__json_str(out, o->backend_spec);
        fprintf(out, ",\"release\":");
        hbm__json_str(out, so.release);
        fprintf(out, ",\"variable\":\"%s\",\"framework\":", dialect_var(so.dialect));
        hbm__json_str(out, o->framework ? o->framework : dialect_framework(so.dialect));
        fprintf(out,
                ",\"settings_run\":%d,\"distinct_results\":%d,\"left_out_invalid\":%d,\"left_out_unsupported\":%d,"
                "\"left_out_inactive\":%d,\"jobs\":%d,\"baseline\":",
                so.n, so.results, so.rejected, so.unsupported, so.inactive, so.jobs);
        hbm__json_str(out, so.baseline_note);
        fprintf(out, ",\"results\":[");
        for (int i = 0; i < so.n; i++) {
            const sweep_row *j = &so.rows[i];
            const hbm_stats *s = &j->r.stats;
            fprintf(out,
                    "%s{\"rank\":%d,\"settings\":\"%s\",\"policy\":\"%s\",\"yours\":%s,\"same_as_rank\":%d,\"oom\":%s,"
                    "\"oom_event\":%lld,"
                    "\"peak_allocated\":%lld,\"peak_reserved\":%lld,\"reserved_over_allocated\":%.6f,"
                    "\"device_allocs\":%lld,\"device_frees\":%lld,\"device_time_ms\":%.3f}",
                    i ? "," : "", j->rank, j->conf, j->hbm ? "hbmalloc" : "framework", j->baseline ? "true" : "false",
                    j->same_as < 0 ? 0 : j->rank, j->rc ? "true" : "false", j->rc ? (long long)j->r.oom_event : -1LL,
                    (long long)s->allocated_bytes[0].peak, (long long)s->reserved_bytes[0].peak,
                    s->allocated_bytes[0].peak ? (double)s->reserved_bytes[0].peak / (double)s->allocated_bytes[0].peak
                                               : 0.0,
                    (long long)s->num_device_alloc, (long long)s->num_device_free, (double)j->r.dev.device_ns / 1e6);
        }
        fprintf(out, "],\"recommended\":");
        if (best)
            hbm__json_str(out, best->conf);
        else
            fputs("null", out);
        fprintf(out, ",\"recommended_is_yours\":%s,\"export\":", best && best->baseline ? "true" : "false");
        hbm__json_str(out, exp);
        fprintf(out, ",\"code\":");
        hbm__json_str(out, code);
        fprintf(out, ",\"plugin_export\":");
        if (hbm_best)
            fprintf(out, "\"export HBMALLOC_CONF='%s'\"", hbm_best->conf);
        else
            fputs("null", out);
        fprintf(out, "}\n");
    } else {
        char dev[300], head[2000], each[32];
        hbm__sbuf sb;
        replay_device_line(o->backend_spec, dev, sizeof dev);
        hbm__sb_init(&sb, head, sizeof head);
        fprintf(out, "sweep of:        %s\ndevice:          %s\n", o->name, dev);
        if (o->framework)
            put_wrapped(out, "framework:       ", "  ", o->framework, true);
        hbm__sb_printf(&sb, "%d settings, %d distinct results", so.n, so.results);
        if (so.rejected)
            hbm__sb_printf(&sb, "; %d left out: refused by %s", so.rejected, so.release);
        if (so.unsupported)
            hbm__sb_printf(&sb, "; %d with expandable segments left out: %s", so.unsupported, so.why);
        if (so.inactive)
            hbm__sb_printf(&sb, "; %d left out: garbage_collection_threshold without a memory fraction < 1 never runs",
                           so.inactive);
        if (so.jobs < so.wanted_jobs) {
            hbm__format_size(so.job_bytes, each, sizeof each);
            hbm__sb_printf(&sb,
                           "; %d replay%s at a time, not %d: each holds up to %s (the allocator's blocks for the "
                           "%zu live at once), and together they keep within 16 bytes per byte of the trace",
                           so.jobs, so.jobs == 1 ? "" : "s", so.wanted_jobs, each, t->nslots);
        }
        put_wrapped(out, "", "  ", head, true);
        snprintf(head, sizeof head, "%s%s", so.release,
                 o->version && *o->version ? "" : ", the newest known: give --torch / --torch-npu VERSION for yours");
        put_wrapped(out, "checked against: ", "  ", head, true);
        put_wrapped(out, "", "  ", so.baseline_note, true);
        print_ranking(out, &so);
        if (!best && hbm_best)
            fprintf(out, "no setting of %s runs this trace without OOM at this capacity.\n", dialect_var(so.dialect));
        else if (!best)
            fprintf(out, "no setting runs this trace without OOM at this capacity; the closest is ranked first\n");
        else if (best->baseline)
            fprintf(out, "recommended: keep yours (no setting of the grid lowers peak reserved)\n");
        else {
            char pr[32], pb[32];
            hbm__format_size((uint64_t)peak_reserved(best), pr, sizeof pr);
            if (base && !base->rc) {
                hbm__format_size((uint64_t)peak_reserved(base), pb, sizeof pb);
                fprintf(out, "recommended, rank %d: peak reserved %s, yours %s: %.1f%% less\n", best->rank, pr, pb,
                        100.0 * (double)(peak_reserved(base) - peak_reserved(best)) / (double)peak_reserved(base));
            } else if (base) {
                fprintf(out, "recommended, rank %d: peak reserved %s; yours runs out of memory at event %zu\n",
                        best->rank, pr, base->r.oom_event);
            } else {
                fprintf(out, "recommended, rank %d: peak reserved %s\n", best->rank, pr);
            }
            fprintf(out, "%s\n", exp);
            if (code[0])
                put_wrapped(out, "and in your code: ", "  ", code, true);
        }
    }
    if (!o->json && hbm_best) {
        char pr[32], line[600];
        hbm__format_size((uint64_t)peak_reserved(hbm_best), pr, sizeof pr);
        snprintf(line, sizeof line,
                 "with the hbmalloc plug-in, the %s, rank %d: peak reserved %s; %s. PyTorch's own "
                 "allocator does not read it, hbmalloc_torch.use() does:",
                 sweep_hbm_name(hbm_best), hbm_best->rank, pr, sweep_hbm_note(hbm_best));
        put_wrapped(out, "", "  ", line, true);
        fprintf(out, "export HBMALLOC_CONF='%s'\n", hbm_best->conf);
    }
    int rc = best || hbm_best ? 0 : 1;
    if (o->after) {
        fflush(out);
        int r2 = o->after(&so, o->after_ctx);
        rc = r2 ? r2 : rc;
    }
    sweep_outcome_free(&so);
    return rc;
}
