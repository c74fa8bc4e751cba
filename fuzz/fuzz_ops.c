/*
 * fuzz_ops.c: an operation-sequence fuzzer over the public API on the sim
 * (host-backed, so blocks are written and checked): malloc, free,
 * record_stream, empty_cache, memory fraction, private pools, held streams
 * and device faults, with the validator after every operation.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hbmalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LIVE 32

static const char *settings[] = {"",
                                 "expandable_segments:True",
                                 "max_split_size_mb:20",
                                 "garbage_collection_threshold:0.5,per_process_memory_fraction:0.9",
                                 "roundup_power2_divisions:[1:2,>:4],large_segment_size_mb:24",
                                 "expandable_segments:True,hbm_remap_free_pages:True",
                                 "release_lock_on_cudamalloc:True",
                                 "max_split_size_mb:32,expandable_segments:True"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    hbm_backend *b;
    hbm_allocator *a;
    char err[512];
    const char *spec = data[0] & 0x80 ? "sim:capacity=256MiB,memory=host" : "sim:capacity=512MiB";
    if (hbm_backend_open(&b, spec, err, sizeof err) != HBM_OK ||
        hbm_create(&a, b, 0, settings[data[0] & 7], err, sizeof err) != HBM_OK)
        abort();
    hbm_sim_state st;
    hbm_sim_get_state(b, &st);
    int host = st.host_backed;
    struct {
        unsigned char *p;
        size_t n;
        unsigned char pat;
    } live[LIVE] = {{0}};
    hbm_mempool mp;
    hbm_mempool_create(a, &mp);
    int routed = 0;
    for (size_t i = 1; i + 3 < size; i += 4) {
        uint8_t op = data[i], x = data[i + 1];
        uint16_t y = (uint16_t)(data[i + 2] | data[i + 3] << 8);
        int k = x % LIVE;
        hbm_status rc = HBM_OK;
        switch (op % 10) {
        case 0:
        case 1:
        case 2:
            if (!live[k].p) {
                size_t n = (op & 0x10) ? (size_t)y << 10 : (size_t)y + 1; /* up to 64 MiB, or small */
                if (host && n > (8 << 20))
                    n = 8 << 20;
                rc = hbm_malloc(a, n, x % 3, (void **)&live[k].p);
                if (rc == HBM_OK && live[k].p) {
                    live[k].n = n;
                    live[k].pat = (unsigned char)(y | 1);
                    if (host)
                        memset(live[k].p, live[k].pat, n);
                }
            }
            break;
        case 3:
        case 4:
            if (live[k].p) {
                if (host)
                    for (size_t j = 0; j < live[k].n; j += 4093)
                        if (live[k].p[j] != live[k].pat)
                            abort(); /* someone else wrote into this block */
                rc = hbm_free(a, live[k].p);
                if (rc != HBM_OK)
                    abort();
                live[k].p = NULL;
            } else {
                /* Misuse: a pointer that is not a live block start must be refused, changing nothing. */
                void *q = (void *)(uintptr_t)(0x100000000000ull + ((uint64_t)y << 12) + (x & 1) * 512);
                if (hbm_block_size(a, q) == 0 && hbm_free(a, q) == HBM_OK)
                    abort();
            }
            break;
        case 5:
            if (live[k].p)
                rc = hbm_record_stream(a, live[k].p, 3 + x % 2);
            break;
        case 6: rc = hbm_empty_cache(a); break;
        case 7: hbm_sim_hold(b, 0, 3 + x % 2, y & 1); break;
        case 8:
            if (routed)
                rc = hbm_mempool_end(a, mp);
            else
                rc = hbm_mempool_begin_stream(a, mp, x % 3);
            routed = !routed;
            break;
        case 9: {
            hbm_sim_clear_faults(b);
            hbm_sim_fault f = {.call = (int)(y % HBM_SIM_CALLS),
                               .nth = 1 + (x & 3),
                               .min_size = 0,
                               .max_size = SIZE_MAX,
                               .oom = (y & 0x100) != 0};
            if (f.call != HBM_SIM_INFO)
                hbm_sim_add_fault(b, &f);
            break;
        }
        }
        if (rc != HBM_OK && rc != HBM_ERR_OOM && rc != HBM_ERR_BACKEND)
            abort();
        if (hbm_check(a, err, sizeof err))
            abort();
    }
    hbm_sim_clear_faults(b);
    for (int k = 0; k < LIVE; k++)
        if (live[k].p && hbm_free(a, live[k].p) != HBM_OK)
            abort();
    if (routed)
        hbm_mempool_end(a, mp);
    hbm_mempool_release(a, mp);
    if (hbm_empty_cache(a) != HBM_OK || hbm_check(a, NULL, 0))
        abort();
    hbm_destroy(a);
    hbm_sim_state c;
    hbm_sim_get_state(b, &c);
    if (c.live_allocations || c.live_reservations || c.live_handles || c.mapped_pages || c.live_events)
        abort(); /* destroy left something on the device */
    hbm_backend_close(b);
    return 0;
}
