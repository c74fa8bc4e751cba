/*
 * replay.c: runs a trace's alloc/free sequence, per stream as recorded,
 * against a fresh allocator through the public API, and prints a summary.
 * Owns no policy; all numbers come from hbm_get_stats and the device counters.
 */
#include "replay.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void describe_field(const char *desc, const char *key, char *out, size_t len)
{
    const char *p = strstr(desc, key);
    out[0] = 0;
    if (p) {
        p += strlen(key);
        snprintf(out, len, "%.*s", (int)strcspn(p, "\n"), p);
    }
}

void replay_settings_line(hbm_allocator *a, char *out, size_t len)
{
    char *desc = malloc(8192);
    if (!desc) {
        snprintf(out, len, "?");
        return;
    }
    hbm_settings_describe(a, desc, 8192);
    char src[64], str[560], rel[160];
    describe_field(desc, "\nsource: ", src, sizeof src);
    describe_field(desc, "\nstring: ", str, sizeof str);
    describe_field(desc, "\nread as: ", rel, sizeof rel);
    size_t n = strlen(str);
    if (n >= 2 && str[0] == '"' && str[n - 1] == '"') { /* describe quotes it */
        memmove(str, str + 1, n - 2);
        str[n - 2] = 0;
    }
    if (!strcmp(src, "explicit"))
        snprintf(src, sizeof src, "--conf");
    int n0;
    if (!str[0])
        n0 = snprintf(out, len, "the defaults (%s)", !src[0] || !strcmp(src, "default") ? "no settings given" : src);
    else
        n0 = snprintf(out, len, "'%s' (from %s, read as %s)", str, src, rel);
    /* What a lenient parser made of it, one line each. */
    const char *w = strstr(desc, "\nwarnings:\n");
    for (const char *p = w ? w + 11 : NULL; p && *p && n0 >= 0 && (size_t)n0 < len;) {
        size_t k = strcspn(p, "\n");
        n0 += snprintf(out + n0, len - (size_t)n0, "\n                    note: %.*s", (int)k, p);
        p += k + (p[k] == '\n');
    }
    free(desc);
}

void replay_device_line(const char *spec, char *out, size_t len)
{
    const char *c = strstr(spec, "capacity=");
    char *end;
    unsigned long long cap = c ? strtoull(c + 9, &end, 10) : 0;
    if (!c || (*end && *end != ',')) {
        snprintf(out, len, "%s", spec);
        return;
    }
    char h[32];
    hbm__format_size(cap, h, sizeof h);
    snprintf(out, len, "%s (capacity %s)", spec, h);
}

/* The recorded start state does not fit the device: said with both figures. No event of the job ran: the recording
 * itself needs more than this device, which is what the report says instead of its empty figures. */
static void start_unfit(hbm_allocator *a, const trace *t, size_t seg, replay_result *r)
{
    size_t free_bytes = 0, total = 0;
    hbm_usage u = {0};
    hbm_mem_get_info(a, &free_bytes, &total);
    hbm_memory_usage(a, &u);
    uint64_t start = t->rec.start_reserved > 0 ? (uint64_t)t->rec.start_reserved : 0;
    char need[32], cap[32], held[32];
    hbm__format_size(start, need, sizeof need);
    hbm__format_size(total, cap, sizeof cap);
    hbm__format_size(u.reserved, held, sizeof held);
    r->start_unfit = 1;
    if (start > total)
        snprintf(
            r->message, sizeof r->message,
            "the recorded state itself exceeds the capacity: the recording began with %s reserved (%llu bytes, "
            "%zu segments), the device has %s (%zu bytes): no event was replayed. The recorded state alone needs %s; "
            "--min-capacity finds the capacity the whole recording needs",
            need, (unsigned long long)start, t->rec.nseed_segments, cap, total, need);
    else
        snprintf(r->message, sizeof r->message,
                 "the recorded state does not fit this device: the recording began with %s reserved (%llu bytes, %zu "
                 "segments); segment %zu of them could not be reserved with %s reserved already, on a device of %s "
                 "(%zu bytes)%s%s",
                 need, (unsigned long long)start, t->rec.nseed_segments, seg + 1, held, cap, total,
                 hbm_last_error(a)[0] ? ": " : "", hbm_last_error(a));
}

int replay_seed(hbm_allocator *a, const trace *t, void **slot, replay_result *r)
{
    size_t most = 0;
    for (size_t s = 0; s < t->rec.nseed_segments; s++)
        if (t->rec.seed_segments[s].n > most)
            most = t->rec.seed_segments[s].n;
    size_t *buf = malloc((3 * most + 1) * sizeof *buf);
    void **ptrs = malloc((most + 1) * sizeof *ptrs);
    int rc = 0;
    if (!buf || !ptrs) {
        snprintf(r->message, sizeof r->message, "out of host memory");
        rc = 2;
    }
    for (size_t s = 0; !rc && s < t->rec.nseed_segments; s++) {
        const trace_seed_segment *ss = &t->rec.seed_segments[s];
        size_t *off = buf, *size = buf + most, *req = buf + 2 * most;
        for (uint32_t k = 0; k < ss->n; k++) {
            const trace_seed_block *sb = &t->rec.seed_blocks[ss->first + k];
            off[k] = sb->offset;
            size[k] = sb->size;
            req[k] = sb->requested;
        }
        hbm_status st = hbm_seed_segment(a, ss->size, ss->stream, ss->small, ss->n, off, size, req, ptrs);
        if (st == HBM_ERR_OOM) {
            start_unfit(a, t, s, r);
            r->oom = 1; /* an allocation failed, as the view marks it; replay_print says what instead */
            rc = 1;
            break;
        }
        if (st != HBM_OK) {
            snprintf(r->message, sizeof r->message, "rebuilding the recorded start (segment %zu of %zu): %s", s + 1,
                     t->rec.nseed_segments, hbm_last_error(a));
            rc = 2;
            break;
        }
        for (uint32_t k = 0; k < ss->n; k++)
            slot[t->rec.seed_blocks[ss->first + k].slot] = ptrs[k];
    }
    free(buf);
    free(ptrs);
    return rc;
}

int replay_pools_open(hbm_allocator *a, const trace *t, replay_pools *p, char *msg, size_t len)
{
    memset(p, 0, sizeof *p);
    if (!t->npools)
        return 0;
    if (!(p->id = calloc(t->npools, sizeof *p->id))) {
        snprintf(msg, len, "out of host memory");
        return -1;
    }
    for (; p->n < t->npools; p->n++) {
        const trace_pool *tp = &t->pools[p->n];
        hbm_status st = hbm_mempool_create(a, &p->id[p->n]);
        if (st == HBM_OK && tp->tag)
            st = hbm_pool_tag(a, p->id[p->n], t->meta.texts[tp->tag], tp->backup);
        if (st != HBM_OK) {
            snprintf(msg, len, "pool %llu (line %u)%s%.64s%s: %s", (unsigned long long)tp->number, tp->line,
                     tp->tag ? " '" : "", tp->tag ? t->meta.texts[tp->tag] : "", tp->tag ? "'" : "", hbm_last_error(a));
            return -1;
        }
    }
    return 0;
}

void replay_pools_close(replay_pools *p)
{
    free(p->id);
    memset(p, 0, sizeof *p);
}

/* The pages of the pool of a sleep or wake event that sleep now (0: a pool the trace does not place). */
static uint64_t asleep_of(hbm_allocator *a, const trace_event *e, const replay_pools *pools)
{
    hbm_pool_info pi;
    return e->stream && e->stream <= pools->n && hbm_pool_info_get(a, pools->id[e->stream - 1], &pi) == HBM_OK
               ? pi.asleep_bytes
               : 0;
}

/* What a sleep or wake event did (the pool's asleep pages and reserved memory before and after it ran), beside
 * what the recording says. */
static void note_nap(replay_naps *n, const trace_event *e, uint64_t asleep0, uint64_t asleep1, uint64_t resv0,
                     uint64_t resv1)
{
    if (!e->stream) {
        n->drawn += e->kind == EV_SLEEP ? e->size : 0;
    } else if (e->kind == EV_SLEEP) {
        n->slept += asleep1 > asleep0 ? asleep1 - asleep0 : 0;
        n->fell += resv0 > resv1 ? resv0 - resv1 : 0;
        n->rec_slept += e->size;
    } else {
        n->woke += resv1 > resv0 ? resv1 - resv0 : 0;
        n->rec_woke += e->size;
    }
}

int replay_asleep_open(replay_asleep *z, const trace *t, int64_t allocated)
{
    memset(z, 0, sizeof *z);
    z->last = allocated;
    if (!t->sleeps && !t->wakes)
        return 0;
    z->npools = t->npools;
    z->pool = calloc(t->nslots ? t->nslots : 1, sizeof *z->pool);
    z->held = calloc(t->npools + 1, sizeof *z->held);
    z->asleep = calloc(t->npools + 1, 1);
    if (z->pool && z->held && z->asleep)
        return 0;
    replay_asleep_close(z);
    return -1;
}

void replay_asleep_note(replay_asleep *z, const trace_event *e, hbm_status st, int64_t allocated)
{
    int64_t d = allocated - z->last; /* the block the event allocated or freed */
    z->last = allocated;
    if (!z->pool)
        return;
    uint32_t k = e->kind == EV_ALLOC || e->kind == EV_FREE || e->kind == EV_PENDING ? z->pool[e->slot] : 0;
    if (e->kind == EV_ALLOC && st == HBM_OK)
        k = z->pool[e->slot] = z->current;
    if (d && k) {
        z->held[k] += (uint64_t)d; /* (a fall wraps, as it must) */
        if (z->asleep[k])
            z->bytes += (uint64_t)d; /* a sleeping pool's block freed */
    }
    uint32_t p = e->stream <= z->npools ? (uint32_t)e->stream : 0;
    if (e->kind == EV_POOL && st == HBM_OK)
        z->current = p; /* as replay_event's pool_event */
    if ((e->kind == EV_SLEEP || e->kind == EV_WAKE) && p && st == HBM_OK && z->asleep[p] != (e->kind == EV_SLEEP)) {
        z->asleep[p] = e->kind == EV_SLEEP;
        z->bytes = z->asleep[p] ? z->bytes + z->held[p] : z->bytes - z->held[p];
    }
}

void replay_asleep_close(replay_asleep *z)
{
    free(z->pool);
    free(z->held);
    free(z->asleep);
    memset(z, 0, sizeof *z);
}

/* num_device_alloc and num_device_free now. */
static void device_runs(hbm_allocator *a, int64_t out[2])
{
    hbm_stats s;
    hbm_get_stats(a, &s);
    out[0] = s.num_device_alloc;
    out[1] = s.num_device_free;
}

/* The plan's hits, misses and unplanned allocations of the step under way (since at_start). */
static void plan_counts(hbm_allocator *a, replay_step *cur, const hbm_stats *at_start)
{
    hbm_stats now;
    hbm_get_stats(a, &now);
    cur->hits += now.plan_hits - at_start->plan_hits;
    cur->misses += now.plan_misses - at_start->plan_misses;
    cur->unplanned += now.plan_unplanned - at_start->plan_unplanned;
}

int replay_run(const trace *t, const replay_opts *o, replay_result *r)
{
    memset(r, 0, sizeof *r);
    hbm_allocator *a;
    hbm_status st = hbm_open(&a, o->backend_spec, 0, o->settings, r->message, sizeof r->message);
    if (st != HBM_OK)
        return 2;
    hbm_set_single_thread(a); /* this thread alone uses it (sweep runs one allocator per thread) */
    size_t said_at_create = strlen(hbm_warning(a));
    if (!o->quiet)
        replay_settings_line(a, r->settings, sizeof r->settings);
    if (o->snapshot_path && hbm_history_enable(a, t->n * 3 + 1024) != HBM_OK) {
        snprintf(r->message, sizeof r->message, "out of host memory for the history");
        hbm_destroy(a);
        return 2;
    }
    void **slot = calloc(t->nslots ? t->nslots : 1, sizeof *slot);
    if (!slot) {
        snprintf(r->message, sizeof r->message, "out of host memory");
        hbm_destroy(a);
        return 2;
    }
    replay_pools pools;
    if (replay_pools_open(a, t, &pools, r->message, sizeof r->message)) {
        replay_pools_close(&pools);
        free(slot);
        hbm_destroy(a);
        return 2;
    }
    int rc = 0;
    double t0 = now_s();
    size_t first = 0;
    if (o->seed && t->rec.seedable) {
        /* Begin where the recording began: its segments, with the blocks live in them. */
        rc = replay_seed(a, t, slot, r);
        if (rc) {
            free(slot);
            hbm_destroy(a);
            return rc;
        }
        first = t->rec.preexisting;
        r->seeded = 1;
        r->events_done = first;
    }
    int stepped = 0;
    for (size_t i = first; i < t->n && !stepped; i++)
        stepped = t->ev[i].kind == EV_STEP;
    replay_step *cur = stepped ? &r->step[0] : NULL;
    r->nsteps = stepped;
    hbm_stats at_start = {0};
    replay_asleep z; /* the blocks of sleeping pools: allocated, in no memory (a trace with sleeps) */
    hbm_usage u = {0};
    hbm_memory_usage(a, &u);
    if (replay_asleep_open(&z, t, (int64_t)u.allocated)) {
        snprintf(r->message, sizeof r->message, "out of host memory");
        rc = 2;
    }
    uint64_t most = u.allocated;
    r->naps.peak_awake = u.allocated;
    for (size_t i = first; i < t->n && rc != 2; i++) {
        const trace_event *e = &t->ev[i];
        if (cur && e->kind == EV_STEP) /* the step's plan statistics, and the next step's start */
            plan_counts(a, cur, &at_start);
        int nap = e->kind == EV_SLEEP || e->kind == EV_WAKE;
        hbm_usage u0 = {0};
        int64_t runs0[2] = {0, 0}, runs1[2];
        uint64_t asleep0 = nap ? asleep_of(a, e, &pools) : 0;
        if (nap) {
            hbm_memory_usage(a, &u0);
            device_runs(a, runs0);
        }
        st = replay_event(a, e, slot, &pools);
        if ((nap || cur || z.pool) && st == HBM_OK)
            hbm_memory_usage(a, &u);
        if (nap && st == HBM_OK) {
            note_nap(&r->naps, e, asleep0, asleep_of(a, e, &pools), u0.reserved, u.reserved);
            device_runs(a, runs1);
            r->naps.nap_allocs += runs1[0] - runs0[0];
            r->naps.nap_frees += runs1[1] - runs0[1];
        }
        if (z.pool) {
            replay_asleep_note(&z, e, st, (int64_t)u.allocated);
            if (u.allocated - z.bytes > r->naps.peak_awake)
                r->naps.peak_awake = u.allocated - z.bytes;
            if (u.allocated > most) {
                most = u.allocated;
                r->naps.asleep_at_peak = z.bytes;
            }
        }
        if (cur && st == HBM_OK) {
            if (e->kind == EV_STEP) {
                hbm_get_stats(a, &at_start);
                cur = r->nsteps < REPLAY_STEPS ? &r->step[r->nsteps] : &r->step[REPLAY_STEPS - 1];
                if (r->nsteps++ < REPLAY_STEPS) /* past the table, the last row sums the rest */
                    memset(cur, 0, sizeof *cur);
                cur->planned |= u.plan_positions > 0;
            }
            cur->allocs += e->kind == EV_ALLOC;
            if (u.reserved > cur->peak_reserved)
                cur->peak_reserved = u.reserved;
            if (u.requested > cur->peak_live)
                cur->peak_live = u.requested;
        }
        if (st != HBM_OK) {
            snprintf(r->message, sizeof r->message, "%s", hbm_last_error(a));
            if (st == HBM_ERR_OOM) {
                r->oom = 1;
                r->oom_event = i;
                r->oom_line = e->line;
                rc = 1;
            } else {
                rc = 2;
            }
            break;
        }
        r->events_done++;
        if (o->check_every) {
            char rep[512];
            if (hbm_check(a, rep, sizeof rep)) {
                r->check_failures++;
                snprintf(r->message, sizeof r->message, "validator failed after event %zu (line %u): %s", i, e->line,
                         rep);
                rc = 2;
                break;
            }
        }
    }
    if (cur)
        plan_counts(a, cur, &at_start);
    replay_asleep_close(&z);
    r->wall_s = now_s() - t0;
    if (o->snapshot_path) {
        hbm_snapshot *snap;
        char err[512];
        size_t n = strlen(o->snapshot_path);
        hbm_snapshot_format fmt = n > 5 && !strcmp(o->snapshot_path + n - 5, ".json") ? HBM_SNAPSHOT_JSON
                                                                                      : HBM_SNAPSHOT_PICKLE;
        if (hbm_snapshot_take(a, &snap) != HBM_OK || hbm_snapshot_save(snap, o->snapshot_path, fmt, err, sizeof err)) {
            snprintf(r->message, sizeof r->message, "could not write the snapshot %s", o->snapshot_path);
            rc = 2;
        }
        hbm_snapshot_free(snap);
    }
    hbm_get_stats(a, &r->stats);
    hbm_get_device_counters(a, &r->dev);
    const char *late = hbm_warning(a) + said_at_create;
    snprintf(r->late_warning, sizeof r->late_warning, "%s", late + (late[0] == ';' ? 2 : 0));
    if (rc == 0 && !o->check_every) {
        char rep[512];
        if (hbm_check(a, rep, sizeof rep)) {
            r->check_failures++;
            snprintf(r->message, sizeof r->message, "validator failed at the end: %s", rep);
            rc = 2;
        }
    }
    free(slot);
    replay_pools_close(&pools);
    hbm_destroy(a);
    return rc;
}

/* The stream a pending free's block is used on (its own, held until the free completes): past every stream a
 * trace names in practice, one per slot so that each block's use completes on its own. */
char replay_pending_mark;

#define PENDING_STREAM(slot) (((hbm_stream)1 << 62) + (slot))

/* EV_POOL, EV_SLEEP and EV_WAKE: pool k + 1 of the trace is pools->id[k]; pool 0 of a sleep or a wake is one the
 * trace does not place (a snapshot's history does not say which pool an allocation went to: sleeping a pool without
 * its blocks would give back nothing the recording did), so it is drawn, not replayed. */
static hbm_status pool_event(hbm_allocator *a, const trace_event *e, replay_pools *pools)
{
    hbm_mempool id = pools && e->stream && e->stream <= pools->n ? pools->id[e->stream - 1] : 0;
    if (e->kind == EV_POOL) {
        hbm_status st = pools && pools->current ? hbm_mempool_end(a, pools->id[pools->current - 1]) : HBM_OK;
        if (st == HBM_OK && id)
            st = hbm_mempool_begin_thread(a, id);
        if (pools)
            pools->current = st == HBM_OK && id ? (uint32_t)e->stream : 0;
        return st;
    }
    if (!id)
        return HBM_OK;
    return e->kind == EV_SLEEP ? hbm_pool_sleep(a, id, NULL) : hbm_pool_wake(a, id, NULL);
}

hbm_status replay_event(hbm_allocator *a, const trace_event *e, void **slot, replay_pools *pools)
{
    hbm_status st;
    switch (e->kind) {
    case EV_ALLOC: return hbm_malloc(a, (size_t)e->size, e->stream, &slot[e->slot]);
    case EV_PENDING:
        /* PyTorch's free of a block other streams use: an event recorded on the use's stream, the block reusable
         * when it completes (at the EV_FREE that follows). On the sim that stream is held until then; another
         * backend cannot hold it, so there the block is freed at the EV_FREE (reused at the same point; the
         * allocated bytes fall then instead of now). */
        if (!slot[e->slot] || hbm_sim_hold_stream(a, PENDING_STREAM(e->slot), 1) != HBM_OK)
            return HBM_OK;
        if ((st = hbm_record_stream(a, slot[e->slot], PENDING_STREAM(e->slot))) != HBM_OK ||
            (st = hbm_free(a, slot[e->slot])) != HBM_OK)
            return st;
        slot[e->slot] = PENDING_MARK;
        return HBM_OK;
    case EV_FREE:
        if (slot[e->slot] == PENDING_MARK) { /* the use completes: the allocator sees it at its next poll */
            slot[e->slot] = NULL;
            return hbm_sim_hold_stream(a, PENDING_STREAM(e->slot), 0);
        }
        st = hbm_free(a, slot[e->slot]);
        slot[e->slot] = NULL;
        return st;
    case EV_STEP: return hbm_step(a);
    case EV_EMPTY_CACHE: return hbm_empty_cache(a);
    default: return pool_event(a, e, pools);
    }
}

/* What the step plan served over the whole steps after a plan. */
static void print_plan(FILE *out, const replay_result *r)
{
    const hbm_stats *s = &r->stats;
    uint64_t served = 0, tried = 0;
    double worst = 100.0;
    for (size_t i = 0; i < r->nsteps && i < REPLAY_STEPS; i++) {
        const replay_step *p = &r->step[i];
        uint64_t n = (uint64_t)(p->hits + p->misses + p->unplanned);
        if (!p->planned || !n || i + 1 == r->nsteps) /* the last step may be cut short */
            continue;
        served += (uint64_t)p->hits;
        tried += p->allocs;
        if (100.0 * (double)p->hits / (double)p->allocs < worst)
            worst = 100.0 * (double)p->hits / (double)p->allocs;
    }
    char h[32];
    hbm__format_size((uint64_t)s->plan_height, h, sizeof h);
    fprintf(out,
            "step plan:          height %s, %lld plan%s made; %lld allocations served at their planned offset, "
            "%lld missed, %lld unplanned\n",
            h, (long long)s->plan_replans, s->plan_replans == 1 ? "" : "s", (long long)s->plan_hits,
            (long long)s->plan_misses, (long long)s->plan_unplanned);
    if (tried)
        fprintf(out,
                "                    the whole steps after a plan: %.1f%% of their allocations served from it "
                "(the worst step %.1f%%)\n",
                100.0 * (double)served / (double)tried, worst);
    if (r->late_warning[0])
        fprintf(out, "                    %s\n", r->late_warning);
}

/* The steps one by one: what the step plan served, and the footprint of each (with or without a plan). */
static void print_steps(FILE *out, const replay_opts *o, const replay_result *r)
{
    const hbm_stats *s = &r->stats;
    fprintf(out, "steps:              %zu (%s)\n", r->nsteps, o->steps_note ? o->steps_note : "the trace's s events");
    if (s->plan_replans || s->plan_hits)
        print_plan(out, r);
    fprintf(out, "  step  allocs   served  missed  unplanned  peak reserved  peak live   ratio\n");
    for (size_t i = 0; i < r->nsteps && i < REPLAY_STEPS; i++) {
        const replay_step *p = &r->step[i];
        char pr[32], pl[32];
        hbm__format_size(p->peak_reserved, pr, sizeof pr);
        hbm__format_size(p->peak_live, pl, sizeof pl);
        fprintf(out, "  %4zu%s %7llu %8lld %7lld %10lld %14s %10s %7.4f\n", i,
                i == REPLAY_STEPS - 1 && r->nsteps > REPLAY_STEPS ? "+" : " ", (unsigned long long)p->allocs,
                (long long)p->hits, (long long)p->misses, (long long)p->unplanned, pr, pl,
                p->peak_live ? (double)p->peak_reserved / (double)p->peak_live : 0.0);
    }
}

/* The sleeps and wakes: replayed (a pool the trace places), what reserved memory did at them against the recording;
 * or drawn only, and why. */
static void print_naps(FILE *out, const trace *t, const replay_result *r)
{
    const replay_naps *n = &r->naps;
    char slept[32], woke[32], fell[32], rs[32], rw[32], dr[32];
    hbm__format_size(n->slept, slept, sizeof slept);
    hbm__format_size(n->woke, woke, sizeof woke);
    hbm__format_size(n->fell, fell, sizeof fell);
    hbm__format_size(n->rec_slept, rs, sizeof rs);
    hbm__format_size(n->rec_woke, rw, sizeof rw);
    hbm__format_size(n->drawn, dr, sizeof dr);
    uint64_t placed = t->sleeps + t->wakes - t->unplaced;
    fprintf(out, "sleep and wake:     ");
    if (placed)
        fprintf(out,
                "%llu of %llu replayed (hbm_pool_sleep, hbm_pool_wake on the pools the trace names): %s of pages "
                "put to sleep, %s mapped again (the recording: %s and %s); reserved fell by %s at the sleeps "
                "(their cached free pages too)\n",
                (unsigned long long)placed, (unsigned long long)(t->sleeps + t->wakes), slept, woke, rs, rw, fell);
    if (t->unplaced)
        fprintf(out,
                "%s%llu drawn by view, not replayed: the trace does not say which pool each allocation went to "
                "(a snapshot's history does not); the recording gave back %s at those sleeps\n",
                placed ? "                    " : "", (unsigned long long)t->unplaced, dr);
}

/* Peak allocated while pools sleep: in memory and asleep then, and the most ever in memory. */
static void print_asleep(FILE *out, const replay_result *r)
{
    const hbm_stat *al = &r->stats.allocated_bytes[HBM_POOL_ALL];
    const replay_naps *n = &r->naps;
    char pa[32], mem[32], zz[32], top[32];
    hbm__format_size((uint64_t)al->peak, pa, sizeof pa);
    hbm__format_size((uint64_t)al->peak - n->asleep_at_peak, mem, sizeof mem);
    hbm__format_size(n->asleep_at_peak, zz, sizeof zz);
    hbm__format_size(n->peak_awake, top, sizeof top);
    fprintf(out,
            "peak allocated:     %s (%lld bytes): %s in memory and %s asleep (blocks of sleeping pools: allocated, "
            "on pages given back, which reserved does not count)\n",
            pa, (long long)al->peak, mem, zz);
    fprintf(out, "peak in memory:     %s (%llu bytes): allocated less the blocks asleep, at its highest\n", top,
            (unsigned long long)n->peak_awake);
}

/* The device calls against num_device_alloc and num_device_free, where they differ: why. */
static void print_runs(FILE *out, const replay_result *r)
{
    const hbm_stats *s = &r->stats;
    if (s->num_device_alloc == (int64_t)r->dev.malloc_calls && s->num_device_free == (int64_t)r->dev.free_calls)
        return;
    char failed[64] = "", naps[160] = "";
    if (r->dev.failed_calls)
        snprintf(failed, sizeof failed, ", and the %llu that failed", (unsigned long long)r->dev.failed_calls);
    if (r->naps.nap_allocs || r->naps.nap_frees)
        snprintf(naps, sizeof naps, "; the wakes mapped %lld run%s again, the sleeps gave %lld back",
                 (long long)r->naps.nap_allocs, r->naps.nap_allocs == 1 ? "" : "s", (long long)r->naps.nap_frees);
    fprintf(out,
            "                    (the device calls count a page each for map and unmap%s; num_device_alloc and "
            "num_device_free count as PyTorch does: a segment allocated or freed, or a run of pages mapped or "
            "unmapped together%s)\n",
            failed, naps);
}

void replay_print(FILE *out, const char *name, const trace *t, const replay_opts *o, const replay_result *r)
{
    char pa[32], pr[32], preq[32];
    const hbm_stats *s = &r->stats;
    hbm__format_size((uint64_t)s->allocated_bytes[HBM_POOL_ALL].peak, pa, sizeof pa);
    hbm__format_size((uint64_t)s->reserved_bytes[HBM_POOL_ALL].peak, pr, sizeof pr);
    hbm__format_size((uint64_t)s->requested_bytes[HBM_POOL_ALL].peak, preq, sizeof preq);
    /* While a pool sleeps its blocks stay allocated and its pages are not reserved: allocated is then said as in
     * memory and asleep, and reserved is weighed against what is in memory. */
    int asleep = (t->sleeps || t->wakes) && r->naps.peak_awake < (uint64_t)s->allocated_bytes[HBM_POOL_ALL].peak;
    double held = asleep ? (double)r->naps.peak_awake : (double)s->allocated_bytes[HBM_POOL_ALL].peak;
    double ratio = held > 0 ? (double)s->reserved_bytes[HBM_POOL_ALL].peak / held : 0.0;
    char pend[80] = "";
    if (t->pending)
        snprintf(pend, sizeof pend, " (%llu pending first: another stream used the block)",
                 (unsigned long long)t->pending);
    char naps[80] = "";
    if (t->sleeps || t->wakes)
        snprintf(naps, sizeof naps, "; %llu sleep%s, %llu wake%s", (unsigned long long)t->sleeps,
                 t->sleeps == 1 ? "" : "s", (unsigned long long)t->wakes, t->wakes == 1 ? "" : "s");
    fprintf(out, "trace:              %s (%zu events: %llu alloc, %llu free%s%s; %zu stream%s)\n", name, t->n,
            (unsigned long long)t->allocs, (unsigned long long)t->frees, pend, naps, t->nstreams,
            t->nstreams == 1 ? "" : "s");
    char dev[300];
    replay_device_line(o->backend_spec, dev, sizeof dev);
    fprintf(out, "device:             %s\n", dev);
    if (o->settings_from_trace)
        fprintf(out, "settings:           %s%s%s (what the snapshot's allocator ran, from its recorded settings)\n",
                o->settings && o->settings[0] ? "'" : "", o->settings && o->settings[0] ? o->settings : "the defaults",
                o->settings && o->settings[0] ? "'" : "");
    else
        fprintf(out, "settings:           %s\n", r->settings[0] ? r->settings : "?");
    if (o->framework)
        fprintf(out, "framework:          %s\n", o->framework);
    if (o->settings_from_trace && t->rec.settings_dropped[0])
        fprintf(out,
                "                    note: the recorded '%s' is not applied: settings read from a file never "
                "name files (give it with --conf)\n",
                t->rec.settings_dropped);
    if (o->settings_from_trace && o->env_overridden[0])
        fprintf(out, "                    note: %s from the environment is not used (--conf chooses)\n",
                o->env_overridden);
    if (t->rec.blind && t->rec.preexisting) {
        char er[32];
        hbm__format_size((uint64_t)t->rec.end_reserved, er, sizeof er);
        fprintf(out,
                "recording:          began with %llu blocks live (%llu of them freed during it); the segments then "
                "are unknown (its history records allocations but no segment events; %s reserved at its end): "
                "the replay begins from an empty device with those blocks allocated first\n",
                (unsigned long long)t->rec.preexisting, (unsigned long long)t->rec.freed_preexisting, er);
    } else if (t->rec.preexisting || t->rec.start_reserved) {
        char sr[32];
        hbm__format_size((uint64_t)(t->rec.start_reserved > 0 ? t->rec.start_reserved : 0), sr, sizeof sr);
        fprintf(out, "recording:          began with %s reserved and %llu blocks live (%llu of them freed during it)",
                sr, (unsigned long long)t->rec.preexisting, (unsigned long long)t->rec.freed_preexisting);
        if (r->seeded)
            fprintf(out, "; the replay begins from that state (%zu segments rebuilt)\n", t->rec.nseed_segments);
        else if (r->start_unfit)
            fprintf(out, "; the replay was to begin from that state, which does not fit this device\n");
        else if (t->rec.seedable)
            fprintf(out, "; the replay begins from an empty device with those blocks allocated first (%s)\n",
                    o->settings_from_trace ? "--fresh-start"
                                           : "other settings than the recording's: its cached "
                                             "segments followed its own");
        else
            fprintf(out,
                    "; that state cannot be rebuilt: %s; the replay begins from an empty device with the blocks "
                    "allocated first, so peak reserved can differ from the recording's by up to %s\n",
                    t->rec.start_note, sr);
    }
    if (t->rec.skipped_frees)
        fprintf(out, "                    %llu frees of blocks the history cannot place were skipped\n",
                (unsigned long long)t->rec.skipped_frees);
    if (t->meta.dropped)
        fprintf(out,
                "stacks:             those of %llu frames lists not kept: the stack text built passed 2 characters "
                "per byte of the snapshot (docs/TOOL.md)\n",
                (unsigned long long)t->meta.dropped);
    if (r->start_unfit) { /* no event ran: no peaks, no OOM count, no comparison with the recording */
        fprintf(out, "not replayed:       %s\n", r->message);
        return;
    }
    fprintf(out, "events replayed:    %zu of %zu\n", r->events_done, t->n);
    fprintf(out, "peak requested:     %s (%lld bytes)\n", preq, (long long)s->requested_bytes[HBM_POOL_ALL].peak);
    if (asleep)
        print_asleep(out, r);
    else
        fprintf(out, "peak allocated:     %s (%lld bytes)\n", pa, (long long)s->allocated_bytes[HBM_POOL_ALL].peak);
    fprintf(out, "peak reserved:      %s (%lld bytes)\n", pr, (long long)s->reserved_bytes[HBM_POOL_ALL].peak);
    fprintf(out, "reserved/allocated: %.4f%s\n", ratio, asleep ? " (peak reserved / peak in memory)" : "");
    if (t->rec.present) {
        char rp[32];
        hbm__format_size((uint64_t)t->rec.peak_reserved, rp, sizeof rp);
        fprintf(out,
                "recorded:           peak reserved %s (%lld bytes) by the allocator that made the snapshot, %llu "
                "segments at the end; hbmalloc %+.2f%%\n",
                rp, (long long)t->rec.peak_reserved, (unsigned long long)t->rec.segments_end,
                t->rec.peak_reserved
                    ? 100.0 * ((double)s->reserved_bytes[HBM_POOL_ALL].peak - (double)t->rec.peak_reserved) /
                          (double)t->rec.peak_reserved
                    : 0.0);
    }
    if (t->sleeps || t->wakes)
        print_naps(out, t, r);
    fprintf(out,
            "device calls:       %llu malloc, %llu free, %llu map, %llu unmap, %llu other "
            "(num_device_alloc %lld, num_device_free %lld)\n",
            (unsigned long long)r->dev.malloc_calls, (unsigned long long)r->dev.free_calls,
            (unsigned long long)r->dev.map_calls, (unsigned long long)r->dev.unmap_calls,
            (unsigned long long)(r->dev.vmm_calls + r->dev.sync_calls + r->dev.info_calls),
            (long long)s->num_device_alloc, (long long)s->num_device_free);
    print_runs(out, r);
    fprintf(out, "expandable segments: %s\n", s->expandable_segments ? "on" : "off");
    fprintf(out, "device time:        %.3f ms (%s)\n", (double)r->dev.device_ns / 1e6,
            strncmp(o->backend_spec, "sim", 3) ? "measured" : "modelled");
    fprintf(out, "alloc retries:      %lld\n", (long long)s->num_alloc_retries);
    fprintf(out, "OOMs:               %lld\n", (long long)s->num_ooms);
    if (r->nsteps)
        print_steps(out, o, r);
    fprintf(out, "replay time:        %.3f s (%.2f M events/s)\n", r->wall_s,
            r->wall_s > 0 ? (double)r->events_done / r->wall_s / 1e6 : 0.0);
    if (r->oom)
        fprintf(out, "OOM at event %zu (line %u): %s\n", r->oom_event, r->oom_line, r->message);
    else if (r->message[0])
        fprintf(out, "error: %s\n", r->message);
}

/* The most bytes the trace holds live at once, as requested, on the device: the blocks of a pool that sleeps hold
 * none (its pages were given back) until it wakes. */
static uint64_t peak_live(const trace *t)
{
    uint64_t *size = calloc(t->nslots ? t->nslots : 1, sizeof *size), live = 0, peak = 0;
    uint32_t *pool = calloc(t->nslots ? t->nslots : 1, sizeof *pool), in = 0; /* each block's pool (index + 1) */
    uint64_t *held = calloc(t->npools + 1, sizeof *held);                     /* each pool's live bytes */
    uint8_t *asleep = calloc(t->npools + 1, 1);
    for (size_t i = 0; size && pool && held && asleep && i < t->n; i++) {
        const trace_event *e = &t->ev[i];
        if (e->kind == EV_ALLOC) {
            size[e->slot] = e->size;
            pool[e->slot] = in;
            held[in] += e->size;
            live += e->size;
            if (live > peak)
                peak = live;
        } else if (e->kind == EV_FREE) {
            held[pool[e->slot]] -= size[e->slot];
            if (!asleep[pool[e->slot]])
                live -= size[e->slot];
            size[e->slot] = 0;
        } else if (e->kind == EV_POOL) {
            in = (uint32_t)e->stream;
        } else if ((e->kind == EV_SLEEP || e->kind == EV_WAKE) && e->stream &&
                   asleep[e->stream] != (e->kind == EV_SLEEP)) {
            asleep[e->stream] = e->kind == EV_SLEEP;
            live = asleep[e->stream] ? live - held[e->stream] : live + held[e->stream];
        }
    }
    free(size);
    free(pool);
    free(held);
    free(asleep);
    return peak;
}

/* One replay of t on `backend` with capacity cap: 0 clean, 1 OOM, 2 error (printed). */
static int try_capacity(const trace *t, replay_opts *q, char *spec, size_t speclen, const char *backend, uint64_t cap,
                        replay_result *r)
{
    snprintf(spec, speclen, "%s%scapacity=%llu", backend, backend[3] ? "," : ":", (unsigned long long)cap);
    int res = replay_run(t, q, r);
    if (res == 2)
        fprintf(stderr, "hbmalloc replay: %s\n", r->message);
    return res;
}

int replay_min_capacity(const trace *t, const replay_opts *o, const char *backend, FILE *out)
{
    /* Bisect between a capacity below the trace's peak live bytes (which no setting runs in) and one that runs,
     * found by doubling from peak live. No huge probe device: expandable segments reserve 9/8 of the capacity of
     * address space per pool and stream, which an 8 TiB device cannot give twice. */
    char spec[1024];
    replay_opts q = *o;
    replay_result r;
    q.backend_spec = spec;
    const uint64_t step = 1 << 20, limit = (uint64_t)4 << 40;
    uint64_t live = peak_live(t);
    uint64_t lo = live / step * step, hi = (live + live / 4 + step - 1) / step * step;
    lo = lo >= step ? lo - step : 0; /* strictly below peak live: cannot run */
    if (hi < 64 * step)
        hi = 64 * step;
    int runs = 0;
    for (;;) {
        int res = try_capacity(t, &q, spec, sizeof spec, backend, hi, &r);
        runs++;
        if (res == 2)
            return 2;
        if (res == 0)
            break;
        lo = hi;
        if (hi >= limit) {
            fprintf(stderr, "hbmalloc replay: the trace does not run on any capacity up to 4 TiB: %s\n", r.message);
            return 2;
        }
        hi *= 2;
    }
    /* Invariant: hi runs clean; lo does not. */
    while (hi - lo > step) {
        uint64_t mid = (lo + (hi - lo) / 2) / step * step;
        int res = try_capacity(t, &q, spec, sizeof spec, backend, mid, &r);
        runs++;
        if (res == 2)
            return 2;
        if (res == 0)
            hi = mid;
        else
            lo = mid;
    }
    char h[32];
    hbm__format_size(hi, h, sizeof h);
    fprintf(out, "minimum capacity:   %s (%llu bytes, to 1 MiB; %d replays) with settings %s\n", h,
            (unsigned long long)hi, runs,
            o->settings ? (o->settings[0] ? o->settings : "(defaults)") : "(environment)");
    return 0;
}
