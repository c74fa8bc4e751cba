/*
 * steps.h: step boundaries for traces that do not mark them. A training loop
 * repeats its allocations step after step; `--steps auto` finds the repeat
 * (the longest end of the trace whose allocations repeat with one period, by
 * size and by which earlier allocations each frees, or, when sizes change from
 * step to step as with variable-length batches, by the frees alone) and puts a
 * step event (hbm_step) at every period; `--steps N` puts one every N
 * allocations.
 */
#ifndef HBM_TOOLS_STEPS_H
#define HBM_TOOLS_STEPS_H

#include <stddef.h>

#include "trace.h"

/* Inserts EV_STEP events into t as `how` ("auto" or a whole number of allocations) says. 0 with what was done in
 * msg; -1 with why not (no repeat found, a trace that marks its steps already, a bad number, no host memory). */
int trace_mark_steps(trace *t, const char *how, char *msg, size_t msglen);

#endif
