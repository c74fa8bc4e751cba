/* fuzz_conf.c: the settings grammar, both dialects; then an allocator with whatever parsed. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hbmalloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    memcpy(s, data, size);
    s[size] = 0; /* C strings end at the first NUL: what follows is not part of the setting */
    char out[4096];
    for (int d = 0; d < 2; d++) {
        hbm_status rc = hbm_settings_check(s, (hbm_dialect)d, out, sizeof out);
        if (rc != HBM_OK && rc != HBM_ERR_CONF)
            abort();
        if (rc == HBM_ERR_CONF && !out[0])
            abort(); /* an error always says why */
    }
    hbm_allocator *a;
    char err[1024];
    if (hbm_open(&a, "sim:capacity=1GiB", 0, s, err, sizeof err) == HBM_OK) {
        void *p;
        if (hbm_malloc(a, 3 << 20, 0, &p) == HBM_OK)
            hbm_free(a, p);
        if (hbm_check(a, NULL, 0))
            abort();
        hbm_destroy(a);
    }
    free(s);
    return 0;
}
