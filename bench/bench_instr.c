/*
 * bench_instr.c: the replay loop for instruction counting. Replays a trace
 * three times, each on a fresh allocator, with callgrind's instrumentation on
 * only around the loop (allocator creation and teardown excluded). Run under
 * bench/instructions.sh, which divides callgrind's total by the events.
 *
 * usage: valgrind --tool=callgrind --instr-atstart=no bench_instr TRACE [locked]
 *   locked: take the allocator's lock on every call, as a program sharing it
 *   would (default: as hbmalloc replay and sweep run it, single-threaded)
 * usage: bench_instr TRACE dump OUT
 *   writes the calls the loop makes as a plain text trace (a, f and e lines only), which every version of
 *   bench_instr reads the same: bench/instr_against.sh compares two versions on it
 *   HBM_BENCH_CONF: the settings (default: none), e.g. hbm_arena_mb:65536
 *   HBM_BENCH_STEPS: step events put in as --steps does (auto, or every N allocations), for hbm_step_plan
 *   HBM_BENCH_DEVICE: the device of a snapshot to read (default 0)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <valgrind/callgrind.h>

#include "bench_util.h"
#include "hbmalloc.h"
#include "trace/steps.h"
#include "trace/trace.h"

#define RUNS 3

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_instr TRACE [locked]\n");
        return 2;
    }
    trace t;
    char err[512];
    const char *device = getenv("HBM_BENCH_DEVICE"); /* a snapshot's device other than 0 */
    if (trace_read_any(argv[1], device ? atoi(device) : 0, &t, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    const char *steps = getenv("HBM_BENCH_STEPS");
    if (steps && trace_mark_steps(&t, steps, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (argc > 3 && !strcmp(argv[2], "dump")) { /* the loop's calls (bench_replay), as d48e752's reader reads them */
        FILE *f = fopen(argv[3], "w");
        if (!f) {
            perror(argv[3]);
            return 2;
        }
        fprintf(f, "hbmtrace 1\n# the calls bench_replay makes for %s (bench_instr dump)\n", argv[1]);
        for (size_t i = 0; i < t.n; i++) {
            const trace_event *e = &t.ev[i];
            if (e->kind == EV_ALLOC)
                fprintf(f, "a %u %llu %llu\n", (unsigned)e->slot, (unsigned long long)e->size,
                        (unsigned long long)e->stream);
            else if (e->kind == EV_FREE)
                fprintf(f, "f %u\n", (unsigned)e->slot);
            else if (e->kind != EV_STEP)
                fprintf(f, "e\n");
        }
        trace_free(&t);
        return fclose(f) ? 2 : 0;
    }
    int locked = argc > 2 && !strcmp(argv[2], "locked");
    const char *settings = getenv("HBM_BENCH_CONF") ? getenv("HBM_BENCH_CONF") : "";
    void **slot = calloc(t.nslots + 1, sizeof *slot);
    for (int r = 0; r < RUNS; r++) {
        hbm_allocator *a;
        if (!slot || hbm_open(&a, "sim:capacity=1TiB", 0, settings, err, sizeof err) != HBM_OK) {
            fprintf(stderr, "%s\n", slot ? err : "out of memory");
            return 2;
        }
        if (!locked)
            hbm_set_single_thread(a);
        CALLGRIND_START_INSTRUMENTATION;
        bench_replay(a, &t, slot, 1);
        CALLGRIND_STOP_INSTRUMENTATION;
        hbm_destroy(a);
    }
    printf("events %zu\n", t.n * RUNS);
    free(slot);
    trace_free(&t);
    return 0;
}
