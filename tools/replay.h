/*
 * replay.h: feed a trace to a fresh allocator and summarise what happened.
 */
#ifndef HBM_TOOLS_REPLAY_H
#define HBM_TOOLS_REPLAY_H

#include <stdio.h>

#include "hbmalloc.h"
#include "trace.h"

typedef struct replay_opts {
    const char *backend_spec; /* "sim:capacity=80GiB" */
    const char *settings;     /* NULL: environment */
    int check_every;          /* run the validator after every event */
    int settings_from_trace;  /* settings are the recording's */
    int quiet;                /* no capability warnings on stderr */
    const char *snapshot_path; /* write the allocator's snapshot (with history) at the end or at OOM */
    int seed;                 /* begin from the recorded start state where the trace has one (its own settings) */
    char env_overridden[400]; /* a settings variable the recorded settings replace, for the report */
    const char *steps_note;   /* how the step events were put in (--steps), for the report */
} replay_opts;

/* One step of a trace with step events (s, or --steps): what the step plan did in it. */
typedef struct replay_step {
    uint64_t allocs;
    int64_t hits, misses, unplanned; /* plan statistics over the step */
    uint64_t peak_reserved, peak_live; /* reserved bytes, and requested bytes live, at their highest in the step */
    int planned;                       /* a plan was in force when the step began */
} replay_step;

#define REPLAY_STEPS 64 /* steps reported one by one; the rest only in the totals */

typedef struct replay_result {
    hbm_stats stats;
    hbm_device_counters dev;
    size_t events_done;
    int oom;                  /* 1 if an allocation failed with OOM */
    size_t oom_event;         /* index of the failing event */
    uint32_t oom_line;
    char message[2048];       /* OOM or error text */
    int check_failures;
    double wall_s;
    char settings[700];       /* 'STRING' (SOURCE; read as RELEASE): what the allocator ran */
    int seeded;               /* began from the recorded start state */
    size_t nsteps;            /* steps begun (step events + 1), when the trace has step events; else 0 */
    replay_step step[REPLAY_STEPS];
} replay_result;

/* One event of t on a: hbm_malloc, hbm_free, hbm_empty_cache or hbm_step. */
hbm_status replay_event(hbm_allocator *a, const trace_event *e, void **slot);
/* What a slot holds between a block's EV_PENDING and its EV_FREE on the sim: the block is freed, its free waits on
 * the held stream (replay_event). */
extern char replay_pending_mark;
#define PENDING_MARK ((void *)&replay_pending_mark)

/* What an allocator runs: "'STRING' (from SOURCE, read as RELEASE)", or "the defaults (...)". */
void replay_settings_line(hbm_allocator *a, char *out, size_t len);
/* A backend spec for people: "sim, 80.00 GiB" for "sim:capacity=85899345920". */
void replay_device_line(const char *spec, char *out, size_t len);
/* The trace's recorded start state (t->rec.seedable) into a, each seeded block's pointer into its slot; the
 * first t->rec.preexisting events are then done. 0, or 1 (OOM) / 2 with r->message set. */
int replay_seed(hbm_allocator *a, const trace *t, void **slot, replay_result *r);
/* 0: ran clean; 1: OOM; 2: bad input or setup error (message says why). */
int replay_run(const trace *t, const replay_opts *o, replay_result *r);
void replay_print(FILE *out, const char *name, const trace *t, const replay_opts *o, const replay_result *r);
/* Bisect the smallest capacity (to 1 MiB) on which the trace runs without OOM; prints it. 0 ok, 2 error. */
int replay_min_capacity(const trace *t, const replay_opts *o, const char *backend, FILE *out);

#endif
