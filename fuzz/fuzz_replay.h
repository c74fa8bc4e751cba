/* fuzz_replay.h: what the trace fuzzers do with a trace that read: replay it (when small enough to keep the
 * fuzzer fast) on a simulated device with the validator at the end, abort if it fails, and free it. */
#ifndef HBM_FUZZ_REPLAY_H
#define HBM_FUZZ_REPLAY_H

#include <stdlib.h>

#include "replay.h"
#include "trace.h"

static inline void fuzz_replay_and_free(trace *t)
{
    if (t->n < 20000) {
        replay_opts o = {.backend_spec = "sim:capacity=4GiB", .settings = "", .quiet = 1};
        replay_result r;
        if (replay_run(t, &o, &r) == 2 && r.check_failures)
            abort(); /* the validator failed */
    }
    trace_free(t);
}

#endif
