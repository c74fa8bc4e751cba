/*
 * bench_traces.c: speed of the trace tools.
 *   - pickle import: MB/s of the C snapshot reader on the given .pickle files;
 *   - replay: events per second of the replay loop (allocator creation and
 *     teardown excluded) on the given traces, one core.
 * Medians of REPS runs. usage: bench_traces FILE...
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hbmalloc.h"
#include "trace/pickle.h"
#include "trace/trace.h"
#include "bench_util.h"

#define REPS 15

static double replay_once(const trace *t, void **slot)
{
    hbm_allocator *a;
    char err[256];
    if (hbm_open(&a, "sim:capacity=1TiB", 0, "", err, sizeof err) != HBM_OK) {
        fprintf(stderr, "%s\n", err);
        exit(1);
    }
    hbm_set_single_thread(a); /* as hbmalloc replay and sweep do */
    double t0 = bench_now_s();
    bench_replay(a, t, slot, 1);
    double dt = bench_now_s() - t0;
    hbm_destroy(a);
    return dt;
}

int main(int argc, char **argv)
{
    printf("hbmalloc %s trace tools (medians of %d runs)\n\n", HBM_VERSION_STRING, REPS);
    printf("  %-44s %10s %12s %14s\n", "file", "bytes", "import MB/s", "replay Mev/s");
    for (int f = 1; f < argc; f++) {
        unsigned char *data;
        size_t len;
        char err[512];
        if (trace_slurp(argv[f], &data, &len, err, sizeof err)) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        double imp[REPS], rep[REPS];
        int is_pickle = len && data[0] == 0x80;
        trace t;
        for (int r = 0; r < REPS; r++) {
            double t0 = bench_now_s();
            int rc = is_pickle ? trace_read_pickle_mem(argv[f], data, len, 0, &t, err, sizeof err)
                               : trace_read_text_mem(argv[f], (const char *)data, len, &t, err, sizeof err);
            imp[r] = (double)len / (bench_now_s() - t0) / 1e6;
            if (rc) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            if (r < REPS - 1)
                trace_free(&t);
        }
        void **slot = calloc(t.nslots + 1, sizeof *slot);
        for (int r = 0; r < REPS; r++)
            rep[r] = (double)t.n / replay_once(&t, slot) / 1e6;
        const char *base = strrchr(argv[f], '/') ? strrchr(argv[f], '/') + 1 : argv[f];
        printf("  %-44s %10zu %12.1f %14.2f%s\n", base, len, bench_median(imp, REPS), bench_median(rep, REPS),
               is_pickle ? "" : "  (text import)");
        free(slot);
        trace_free(&t);
        free(data);
    }
    return 0;
}
