/* fuzz_replay.h: what the trace fuzzers do with a trace that read: replay it (when small enough to keep the
 * fuzzer fast) on a simulated device with the validator at the end, abort if it fails, and free it. Small traces
 * also get their steps found (--steps auto) and are replayed under the step plan on a device without virtual
 * memory, the validator after every event. */
#ifndef HBM_FUZZ_REPLAY_H
#define HBM_FUZZ_REPLAY_H

#include <stdlib.h>

#include <string.h>

#include "run/replay.h"
#include "trace/steps.h"
#include "trace/trace.h"

static inline void fuzz_replay_and_free(trace *t)
{
    if (t->n < 20000) {
        replay_opts o = {.backend_spec = "sim:capacity=4GiB", .settings = "", .quiet = 1};
        replay_result r;
        if (replay_run(t, &o, &r) == 2 && r.check_failures)
            abort(); /* the validator failed */
    }
    char msg[300];
    if (t->allocs <= 500 && trace_mark_steps(t, "auto", msg, sizeof msg) == 0) { /* small: the fuzzer stays fast */
        replay_opts o = {.backend_spec = "sim:capacity=1GiB,vmm=off",
                         .settings = "hbm_step_plan:True",
                         .quiet = 1,
                         .check_every = t->n < 1000};
        replay_result r;
        if (replay_run(t, &o, &r) == 2 && r.check_failures)
            abort(); /* the validator failed under the step plan */
    } else if (t->allocs <= 500 && !strstr(msg, "no repeating step") && !strstr(msg, "already")) {
        abort(); /* the only refusals: no repeat, or steps marked already */
    }
    trace_free(t);
}

#endif
