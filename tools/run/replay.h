/*
 * replay.h: feed a trace to a fresh allocator and summarise what happened.
 */
#ifndef HBM_TOOLS_REPLAY_H
#define HBM_TOOLS_REPLAY_H

#include <stdio.h>

#include "hbmalloc.h"
#include "trace/trace.h"

typedef struct replay_opts {
    const char *backend_spec;  /* "sim:capacity=80GiB" */
    const char *settings;      /* NULL: environment */
    int check_every;           /* run the validator after every event */
    int settings_from_trace;   /* settings are the recording's */
    int quiet;                 /* no capability warnings on stderr */
    const char *snapshot_path; /* write the allocator's snapshot (with history) at the end or at OOM */
    int seed;                  /* begin from the recorded start state where the trace has one (its own settings) */
    char env_overridden[400];  /* a settings variable the recorded settings replace, for the report */
    const char *steps_note;    /* how the step events were put in (--steps), for the report */
    const char *framework;     /* whose settings, and why (dialect.c's dialect_line), for the report; NULL: not said */
} replay_opts;

/* One step of a trace with step events (s, or --steps): what the step plan did in it. */
typedef struct replay_step {
    uint64_t allocs;
    int64_t hits, misses, unplanned;   /* plan statistics over the step */
    uint64_t peak_reserved, peak_live; /* reserved bytes, and requested bytes live, at their highest in the step */
    int planned;                       /* a plan was in force when the step began */
} replay_step;

#define REPLAY_STEPS 64 /* steps reported one by one; the rest only in the totals */

/* A trace's sleeps and wakes as replayed: what reserved memory did at them, beside what the recording says. */
typedef struct replay_naps {
    uint64_t slept, woke;         /* the replayed sleeps' pages put to sleep, the wakes' pages mapped again */
    uint64_t fell;                /* reserved bytes given back at the sleeps: their pages, and cached free pages */
    uint64_t rec_slept, rec_woke; /* the recording's bytes of those same events */
    uint64_t drawn; /* the recording's bytes at the sleeps not replayed (of pools the trace cannot place) */
    /* A sleeping pool's blocks stay allocated on pages given back: allocated bytes = in memory + asleep. */
    uint64_t peak_awake;           /* allocated bytes in memory (less the blocks asleep), at their highest */
    uint64_t asleep_at_peak;       /* the blocks asleep when allocated bytes peaked */
    int64_t nap_allocs, nap_frees; /* num_device_alloc and num_device_free of the wakes and sleeps (runs of pages) */
} replay_naps;

typedef struct replay_result {
    hbm_stats stats;
    hbm_device_counters dev;
    size_t events_done;
    int oom;          /* 1 if an allocation failed with OOM */
    size_t oom_event; /* index of the failing event */
    uint32_t oom_line;
    char message[2048]; /* OOM or error text */
    int check_failures;
    double wall_s;
    char settings[700]; /* 'STRING' (SOURCE; read as RELEASE): what the allocator ran */
    int seeded;         /* began from the recorded start state */
    int start_unfit;    /* the recorded start state itself did not fit the device (message says by how much) */
    size_t nsteps;      /* steps begun (step events + 1), when the trace has step events; else 0 */
    replay_step step[REPLAY_STEPS];
    replay_naps naps;
    char late_warning[512]; /* what hbm_warning gained during the replay (a step plan refused, an arena given up) */
} replay_result;

/* The private pools of a trace (t->pools) as a replay made them: pool k + 1 of the events is id[k]. */
typedef struct replay_pools {
    hbm_mempool *id;
    size_t n;
    uint32_t current; /* where allocations go (EV_POOL): a pool's index + 1, 0: the default pools */
} replay_pools;

/* Makes t's private pools on a, each tagged as its sleeps and wakes say (before its first allocation, as a tagged
 * pool must be): 0, or -1 with msg set. */
int replay_pools_open(hbm_allocator *a, const trace *t, replay_pools *p, char *msg, size_t len);
void replay_pools_close(replay_pools *p);
/* One event of t on a: hbm_malloc, hbm_free, hbm_empty_cache, hbm_step; with pools (from replay_pools_open),
 * hbm_mempool_begin_thread / end, hbm_pool_sleep and hbm_pool_wake. A sleep or wake of a pool the trace does not
 * place is not replayed (docs/TRACE_FORMAT.md). */
hbm_status replay_event(hbm_allocator *a, const trace_event *e, void **slot, replay_pools *pools);
/* The allocated bytes of sleeping pools, followed event by event (replay_asleep_note after each): a block's pool is
 * where allocations went when it was made (EV_POOL), each pool's allocated bytes the change in allocated bytes at its
 * allocations and frees. For a trace with sleeps or wakes; for another, nothing is kept and bytes stays 0. */
typedef struct replay_asleep {
    uint32_t *pool;   /* each slot's pool: an index in t->pools + 1 (0: the default pools) */
    uint64_t *held;   /* each pool's allocated bytes, by the same index */
    uint8_t *asleep;  /* each pool asleep */
    size_t npools;    /* t->npools */
    uint32_t current; /* where allocations go now */
    int64_t last;     /* allocated bytes after the event noted last */
    uint64_t bytes;   /* allocated bytes of the pools asleep now */
} replay_asleep;
/* From `allocated` bytes (a seeded start's blocks are in the default pools): 0, or -1 (out of host memory). */
int replay_asleep_open(replay_asleep *z, const trace *t, int64_t allocated);
/* Event e ran with status st, leaving `allocated` bytes allocated. */
void replay_asleep_note(replay_asleep *z, const trace_event *e, hbm_status st, int64_t allocated);
void replay_asleep_close(replay_asleep *z);
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
