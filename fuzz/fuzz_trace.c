/* fuzz_trace.c: the trace readers (text, RMM CSV, lifetime CSV, PyTorch pickle); what parses is planned (the plan
 * checked) and replayed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hbmalloc.h"
#include "fuzz_replay.h"
#include "run/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    trace t;
    /* Exact-size copies, so a read one byte past the input is caught. */
    char *text = malloc(size ? size : 1);
    memcpy(text, data, size);
    for (int format = 0; format < 4; format++) {
        int rc = format == 0   ? trace_read_text_mem("f", text, size, &t, err, sizeof err)
                 : format == 1 ? trace_read_rmm_mem("f", text, size, &t, err, sizeof err)
                 : format == 2 ? trace_read_lifetimes_mem("f", text, size, &t, err, sizeof err)
                               : trace_read_pickle_mem("f", (const unsigned char *)text, size, 0, &t, err, sizeof err);
        if (rc) {
            if (!err[0])
                abort(); /* a rejection always says why */
            continue;
        }
        if (t.allocs <= 300) { /* the planner: what it returns is a valid placement, never below peak live */
            plan p;
            plan_opts po = {.budget = 4, .seed = 1};
            if (plan_build(&t, &po, &p, err, sizeof err) == 0) {
                if (plan_check(&p, err, sizeof err) || p.height < p.peak_live_rounded ||
                    p.peak_live_rounded < p.peak_live)
                    abort();
                plan_free(&p);
            } else if (!strstr(err, "2^62")) {
                abort(); /* the only refusal: sizes no device holds */
            }
        }
        fuzz_replay_and_free(&t);
    }
    free(text);
    return 0;
}
