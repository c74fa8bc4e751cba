/* fuzz_pickle.c: the snapshot readers, pickle and JSON, on snapshot-shaped inputs (seeds in fuzz/corpus/pickle are
 * real and hbmalloc-written snapshots, memo-reference shapes and JSON snapshots, a pool's sleeps among them;
 * fuzz/pickle.dict gives the fuzzer the snapshot's keys and opcodes). Every input goes to both parsers. Besides
 * crashes and undefined behaviour it checks the readers' bounds, however the memo shares values:
 * a trace read from N bytes has at most N operations (events and live blocks past one per 8 bytes are refused,
 * each making at most a few), and the stack text it reads to intern stacks is at most twice what it may build
 * (2N characters above 1 MiB, a stack of 16 KiB past it); what reads is replayed with the validator. The input is
 * also one rank's snapshot for `hbmalloc doctor --snapshot` (doctor_snapshots.c), beside a second copy and a small
 * rank of its own, so that the comparison, the outlier's differences and both reports run on what it read. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "doctor/doctor_snapshots.h"

#include "trace/pickle.h"
#include "fuzz_replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* 0, or -1 when the file cannot be written (a full disk): the doctor's step is skipped, not taken for a finding. */
static int put(const char *dir, const char *name, const void *bytes, size_t len)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int bad = fwrite(bytes, 1, len, f) != len;
    return fclose(f) || bad ? -1 : 0;
}

static char dir[4096];
static int no_dir; /* no folder could be made: the doctor's step is skipped (said once) */

static void remove_dir(void)
{
    static const char *const names[] = {"rank0.pickle", "rank1.pickle", "rank2.pickle"};
    char path[4200];
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    rmdir(dir);
}

/* The snapshot doctor on three ranks: the input twice and one segment of 1 MiB (a pickle by hand, protocol 2), in a
 * folder of its own under $TMPDIR (else /tmp; a crash leaves it behind, as libFuzzer exits without atexit). */
static void doctor_ranks(const uint8_t *data, size_t size)
{
    if (!dir[0] && !no_dir) {
        const char *tmp = getenv("TMPDIR");
        int n = snprintf(dir, sizeof dir, "%s/fuzz-snaps-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (n < 0 || (size_t)n >= sizeof dir || !mkdtemp(dir)) {
            fprintf(stderr, "fuzz_pickle: no folder for the snapshot doctor under %s: that step is skipped\n",
                    tmp && *tmp ? tmp : "/tmp");
            dir[0] = 0, no_dir = 1;
        } else {
            atexit(remove_dir);
        }
    }
    if (no_dir)
        return;
    static const char small[] = "\x80\x02}X\x08\x00\x00\x00segments]}(X\x0a\x00\x00\x00total_sizeJ\x00\x00\x10"
                                "\x00X\x06\x00\x00\x00"
                                "blocks]uas.";
    if (put(dir, "rank0.pickle", data, size) || put(dir, "rank1.pickle", data, size) ||
        put(dir, "rank2.pickle", small, sizeof small - 1))
        return;
    doctor d;
    doctor_init(&d);
    doctor_snaps s;
    doctor_snaps_init(&s);
    char err[700];
    FILE *sink = fopen("/dev/null", "w");
    if (sink && !doctor_snaps_add(&s, dir, err, sizeof err)) {
        doctor_snaps_run(&s, &d, sink);
        doctor_snaps_text(&s, sink);
        doctor_snaps_json(&s, sink);
    }
    if (sink)
        fclose(sink);
    doctor_snaps_free(&s);
    doctor_free(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    unsigned char *copy = malloc(size ? size : 1); /* exact size: a read past the input is caught */
    memcpy(copy, data, size);
    for (int json = 0; json < 2; json++) {
        pickle_doc *doc;
        err[0] = 0;
        pv *root = (json ? json_parse : pickle_parse)(copy, size, &doc, err, sizeof err);
        if (root) {
            /* Lookups agree with a linear scan for the last value of the key (Python's rule), indexed or not. */
            const pv *d = root->type == PV_DICT ? root : NULL;
            for (uint32_t i = 0; d && i < d->u.seq.n / 2 && i < 64; i++) {
                const pv *k = d->u.seq.items[2 * i];
                if (k->type != PV_STR || memchr(k->u.str.s, 0, k->u.str.len) || k->u.str.len > 100)
                    continue;
                char key[101];
                memcpy(key, k->u.str.s, k->u.str.len);
                key[k->u.str.len] = 0;
                const pv *last = NULL;
                for (uint32_t j = 0; j < d->u.seq.n / 2; j++)
                    if (pv_is_str(d->u.seq.items[2 * j], key))
                        last = d->u.seq.items[2 * j + 1];
                if (pv_get(d, key) != last)
                    abort();
            }
            pickle_free(doc);
        } else if (!err[0]) {
            abort(); /* a rejection always says why */
        }
        for (int device = 0; device < 2; device++) {
            trace t;
            err[0] = 0;
            if ((json ? trace_read_json_mem : trace_read_pickle_mem)("f", copy, size, device, &t, err, sizeof err)) {
                if (!err[0])
                    abort();
                continue;
            }
            if (t.n + t.rec.nseed_blocks + t.rec.nseed_segments > size + 16)
                abort(); /* the work was not bounded by the input */
            if (t.meta.scanned > 2 * (2 * size + (1 << 20) + 16384))
                abort(); /* stacks were built again per allocation, or past the bound */
            fuzz_replay_and_free(&t);
        }
    }
    doctor_ranks(copy, size);
    free(copy);
    return 0;
}
