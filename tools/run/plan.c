/*
 * plan.c: see plan.h. Turns a trace into sized lifetimes for the library's
 * planner (hbm_plan_lifetimes), checks and writes plans as text, and says how
 * to serve one (the HBMALLOC_CONF line a user pastes).
 */
#include "plan.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int overlap(const plan_buf *x, const plan_buf *y) { return x->start < y->end && y->start < x->end; }

/* 0; -1 out of host memory; -2 sizes no plan can hold (their sum passes 2^62: every offset and height is at most
 * that sum, so nothing after this check can overflow). */
static int build_buffers(const trace *t, plan *p)
{
    uint32_t *of_slot = malloc((t->nslots ? t->nslots : 1) * sizeof *of_slot);
    p->b = calloc(t->allocs ? t->allocs : 1, sizeof *p->b);
    if (!of_slot || !p->b || t->n >= UINT32_MAX) {
        free(of_slot);
        return -1;
    }
    uint64_t live = 0, live_rounded = 0, total = 0;
    const uint64_t limit = (uint64_t)1 << 62;
    for (size_t e = 0; e < t->n; e++) {
        const trace_event *ev = &t->ev[e];
        if (ev->kind == EV_ALLOC) {
            if (ev->size > limit || (total += (ev->size + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN) > limit) {
                free(of_slot);
                return -2;
            }
            plan_buf *x = &p->b[p->n];
            x->requested = ev->size;
            x->size = (ev->size + PLAN_ALIGN - 1) / PLAN_ALIGN * PLAN_ALIGN;
            if (!x->size)
                x->size = PLAN_ALIGN;
            x->start = (uint32_t)e;
            x->end = (uint32_t)t->n;
            x->alloc = (uint32_t)p->n;
            of_slot[ev->slot] = (uint32_t)p->n++;
            live += x->requested;
            live_rounded += x->size;
        } else if (ev->kind == EV_FREE) {
            plan_buf *x = &p->b[of_slot[ev->slot]];
            x->end = (uint32_t)e;
            live -= x->requested;
            live_rounded -= x->size;
        }
        if (live > p->peak_live)
            p->peak_live = live;
        if (live_rounded > p->peak_live_rounded)
            p->peak_live_rounded = live_rounded;
    }
    free(of_slot);
    return 0;
}

/* The most evaluations a budget may ask for n allocations. An evaluation places each allocation against those
 * placed, some n^2 steps: the default budget is 4*10^9 / n^2 of them (about 2 s for 7,000 allocations), and a
 * budget may ask 100 times that work, at most the planner's own 100,000. `--budget 18446744073709551615` asked
 * for 100,000 evaluations of 10^8 steps on a trace of 10,000 allocations: it never finished (issue #28 item 15). */
#define PLAN_WORK_MAX 400000000000ull
#define PLAN_BUDGET_MAX 100000ull

uint64_t plan_budget_max(size_t n)
{
    uint64_t pairs = (uint64_t)n * n, most = pairs ? PLAN_WORK_MAX / pairs : PLAN_BUDGET_MAX;
    return most < 1 ? 1 : most > PLAN_BUDGET_MAX ? PLAN_BUDGET_MAX : most;
}

int plan_build(const trace *t, const plan_opts *o, plan *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (o && o->budget > plan_budget_max(t->allocs)) {
        snprintf(err, errlen,
                 "--budget %llu: at most %llu for %llu allocations (an evaluation places each against "
                 "those placed, about n^2 steps: 100 times the default's work at most)",
                 (unsigned long long)o->budget, (unsigned long long)plan_budget_max(t->allocs),
                 (unsigned long long)t->allocs);
        return -1;
    }
    int built = build_buffers(t, out);
    if (built == -2) {
        plan_free(out);
        snprintf(err, errlen, "the allocations' sizes sum past 2^62 bytes: no device holds that, nothing to plan");
        return -1;
    }
    hbm_lifetime *l = built ? NULL : malloc((out->n ? out->n : 1) * sizeof *l);
    hbm_plan_info info;
    hbm_status rc = HBM_ERR_NOMEM;
    if (l) {
        for (size_t i = 0; i < out->n; i++)
            l[i] = (hbm_lifetime){.size = out->b[i].size, .start = out->b[i].start, .end = out->b[i].end};
        rc = hbm_plan_lifetimes(l, out->n, o ? o->budget : 0, o ? o->seed : 0, &info);
    }
    if (rc == HBM_OK) {
        for (size_t i = 0; i < out->n; i++)
            out->b[i].offset = l[i].offset;
        out->height = info.height;
        out->greedy_height = info.greedy_height;
        out->evaluations = info.evaluations;
        snprintf(out->greedy_order, sizeof out->greedy_order, "%s", info.greedy_order);
    }
    free(l);
    if (rc != HBM_OK) {
        plan_free(out);
        snprintf(err, errlen, "out of host memory planning %llu allocations", (unsigned long long)t->allocs);
        return -1;
    }
    return 0;
}

void plan_free(plan *p)
{
    free(p->b);
    memset(p, 0, sizeof *p);
}

int plan_check(const plan *p, char *err, size_t errlen)
{
    /* Sweep the events in time order: at each allocation, its range must not meet a live buffer's. Sorting
     * live buffers is not needed for a check run on test-sized plans: O(n * live). */
    for (size_t i = 0; i < p->n; i++) {
        const plan_buf *x = &p->b[i];
        if (x->offset % PLAN_ALIGN || x->offset + x->size > p->height) {
            snprintf(err, errlen, "allocation %u at %llu (+%llu) is misaligned or above the height %llu", x->alloc,
                     (unsigned long long)x->offset, (unsigned long long)x->size, (unsigned long long)p->height);
            return -1;
        }
        for (size_t j = i + 1; j < p->n; j++) {
            const plan_buf *y = &p->b[j];
            if (overlap(x, y) && x->offset < y->offset + y->size && y->offset < x->offset + x->size) {
                snprintf(err, errlen, "allocations %u and %u live at the same time and overlap", x->alloc, y->alloc);
                return -1;
            }
        }
    }
    return 0;
}

int plan_write(const plan *p, const char *source, FILE *f)
{
    fprintf(f, "hbmplan 1\n# source: %s\n", source);
    fprintf(f,
            "# %zu allocations; peak live %llu bytes (%llu rounded to %d); greedy (%s) %llu; after %llu "
            "evaluations %llu\n",
            p->n, (unsigned long long)p->peak_live, (unsigned long long)p->peak_live_rounded, PLAN_ALIGN,
            p->greedy_order, (unsigned long long)p->greedy_height, (unsigned long long)p->evaluations,
            (unsigned long long)p->height);
    fprintf(f, "height %llu\n# alloc offset size start end\n", (unsigned long long)p->height);
    for (size_t i = 0; i < p->n; i++)
        fprintf(f, "%u %llu %llu %u %u\n", p->b[i].alloc, (unsigned long long)p->b[i].offset,
                (unsigned long long)p->b[i].size, p->b[i].start, p->b[i].end);
    return ferror(f) ? -1 : 0;
}

/* The longest path hbm_plan_file takes: up to 127 characters (docs/CONFIGURATION.md, its row). */
#define PLAN_CONF_PATH_MAX 127

/* Why a settings string cannot name path (NULL: it can). HBMALLOC_CONF is read by hbmalloc's strict rules
 * (src/conf/conf.c, lex): a word ends at a space or at ',' ':' '[' ']', and a byte outside printable ASCII is
 * refused; the value is one word. */
static const char *conf_path_problem(const char *path)
{
    if (strlen(path) > PLAN_CONF_PATH_MAX)
        return "it is longer than 127 characters";
    for (const char *c = path; *c; c++) {
        if (*c == ',' || *c == ':' || *c == '[' || *c == ']')
            return *c == ',' ? "it holds ','" : *c == ':' ? "it holds ':'" : "it holds '[' or ']'";
        if ((unsigned char)*c <= ' ' || (unsigned char)*c >= 0x7f)
            return "it holds a space, or a byte outside printable ASCII";
    }
    return NULL;
}

/* s as one shell word: as it is when the shell leaves every byte alone, else in single quotes (a quote inside as
 * '\''). '~' is quoted too: bash expands it after the ':' of an assignment. */
static void put_shell_word(FILE *out, const char *s)
{
    int plain = *s != 0;
    for (const char *c = s; *c && plain; c++)
        plain = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                strchr("_-./+@%:,=", *c);
    if (plain) {
        fputs(s, out);
        return;
    }
    fputc('\'', out);
    for (const char *c = s; *c; c++)
        if (*c == '\'')
            fputs("'\\''", out);
        else
            fputc(*c, out);
    fputc('\'', out);
}

void plan_print_use(FILE *out, const char *plan_path, const char *trace_path)
{
    fprintf(out, "wrote %s\n", plan_path);
    /* The absolute path: a job is seldom started in the folder the plan was made in. The path as given when only
     * that one fits the setting. */
    char abs[PATH_MAX];
    const char *use = realpath(plan_path, abs) ? abs : plan_path, *why = conf_path_problem(use);
    const char *where = "";
    if (why && use != plan_path && !conf_path_problem(plan_path)) {
        fprintf(out, "note: the setting cannot name the file's full path (%s): it names it from this folder\n", why);
        where = " in this folder";
        use = plan_path;
        why = NULL;
    }
    if (why) {
        fprintf(out,
                "note: HBMALLOC_CONF cannot name this file (%s): a setting's value ends at a space, ',', ':', '[' "
                "or ']'.\n      Copy or link it to a path of at most %d printable ASCII characters without them, "
                "and start the job\n      with HBMALLOC_CONF=hbm_plan_file:THAT_PATH before its command\n",
                why, PLAN_CONF_PATH_MAX);
        return;
    }
    char setting[sizeof "hbm_plan_file:" + PLAN_CONF_PATH_MAX];
    snprintf(setting, sizeof setting, "hbm_plan_file:%.*s", PLAN_CONF_PATH_MAX, use); /* use fits: checked above */
    fprintf(out,
            "to serve it, start the job%s with this before its command (other HBMALLOC_CONF settings after "
            "a ','):\n  HBMALLOC_CONF=",
            where);
    put_shell_word(out, setting);
    fprintf(out, "\nto see it served (plan_hits: the allocations served at their planned offset), replay the trace "
                 "with it:\n  hbmalloc replay ");
    put_shell_word(out, trace_path);
    fputs(" --conf ", out);
    put_shell_word(out, setting);
    fputs(" --stats\n", out);
}
