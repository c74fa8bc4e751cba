/* A runtime embedding hbmalloc: allocate on a simulated 16 GiB device, print stats. */
#include <hbmalloc.h>
#include <stdio.h>

int main(void)
{
    char err[512];
    hbm_allocator *a;
    if (hbm_open(&a, "sim:capacity=16GiB", 0, "max_split_size_mb:256", err, sizeof err) != HBM_OK) {
        fprintf(stderr, "hbm_open: %s\n", err);
        return 1;
    }
    void *blocks[8];
    for (int i = 0; i < 8; i++) {
        if (hbm_malloc(a, (size_t)(i + 1) << 22, 0, &blocks[i]) != HBM_OK) {
            fprintf(stderr, "hbm_malloc: %s\n", hbm_last_error(a));
            return 1;
        }
    }
    for (int i = 0; i < 8; i += 2)
        hbm_free(a, blocks[i]);
    hbm_stats s;
    hbm_get_stats(a, &s);
    printf("hbmalloc %s: allocated %lld bytes, reserved %lld bytes, %lld device allocations\n", HBM_VERSION_STRING,
           (long long)s.allocated_bytes[HBM_POOL_ALL].current, (long long)s.reserved_bytes[HBM_POOL_ALL].current,
           (long long)s.num_device_alloc);
    if (hbm_free(a, blocks[0]) != HBM_ERR_DOUBLE_FREE) {
        fprintf(stderr, "double free not reported\n");
        return 1;
    }
    printf("double free reported: %s\n", hbm_last_error(a));
    int bad = hbm_check(a, err, sizeof err);
    hbm_destroy(a);
    return bad ? 1 : 0;
}
