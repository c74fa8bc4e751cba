/* fuzz_pickle.c: the snapshot readers, pickle and JSON, on snapshot-shaped inputs (seeds in fuzz/corpus/pickle are
 * real and hbmalloc-written snapshots, memo-reference shapes and JSON snapshots, a pool's sleeps among them;
 * fuzz/pickle.dict gives the fuzzer the snapshot's keys and opcodes). Every input goes to both parsers. Besides
 * crashes and undefined behaviour it checks the readers' bounds, however the memo shares values:
 * a trace read from N bytes has at most N operations (events and live blocks past one per 8 bytes are refused,
 * each making at most a few), and the stack text it reads to intern stacks is at most twice what it may build
 * (2N characters above 1 MiB, a stack of 16 KiB past it); what reads is replayed with the validator. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trace/pickle.h"
#include "fuzz_replay.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

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
    free(copy);
    return 0;
}
