/*
 * torch_plugin.c: the entry points a pluggable allocator exports, built twice:
 * libhbmalloc_torch.so for torch.cuda.memory.CUDAPluggableAllocator (default
 * backend "cuda") and libhbmalloc_torch_npu.so for torch_npu's
 * NPUPluggableAllocator (default backend "acl"). Both frameworks call
 * alloc(ssize_t size, int device, stream) and free(ptr, size, device, stream);
 * torch_npu also takes the C-compatible hooks init(int device),
 * reset(bool check_error) (its empty_cache) and memory_fraction(double, int).
 * Stats, snapshot, history, empty_cache and record_stream are there for the
 * Python helper (hbmalloc_torch.py) to reach by ctypes.
 *
 * One allocator per device, created on first use, on the backend named by
 * HBMALLOC_BACKEND (else the build's default); settings from HBMALLOC_CONF,
 * else the framework's variable for that backend (PYTORCH_CUDA_ALLOC_CONF or
 * PYTORCH_NPU_ALLOC_CONF). The framework turns a NULL from alloc into its
 * OutOfMemoryError; the allocator's own message (request, capacity, reserved
 * but unallocated, advice) goes to stderr first, so the user sees it.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "hbmalloc.h"

#define EXPORT __attribute__((visibility("default")))

#ifndef HBM_PLUGIN_BACKEND
#define HBM_PLUGIN_BACKEND "cuda"
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static hbm_devices *devices; /* the plug-in's one process-wide state: PyTorch calls plain functions */
static char open_error[1024];

static void open_devices(void)
{
    const char *spec = getenv("HBMALLOC_BACKEND");
    if (hbm_devices_open(&devices, spec && *spec ? spec : HBM_PLUGIN_BACKEND, NULL, open_error, sizeof open_error) != HBM_OK)
        devices = NULL;
}

static hbm_allocator *allocator(int device)
{
    pthread_once(&once, open_devices);
    if (!devices) {
        fprintf(stderr, "hbmalloc: %s\n", open_error);
        return NULL;
    }
    hbm_allocator *a = hbm_devices_get(devices, device);
    if (!a)
        fprintf(stderr, "hbmalloc: %s\n", hbm_devices_error(devices));
    return a;
}

EXPORT void *hbm_torch_alloc(ssize_t size, int device, void *stream);
EXPORT void hbm_torch_free(void *ptr, ssize_t size, int device, void *stream);
EXPORT int hbm_torch_empty_cache(void);
EXPORT int hbm_torch_record_stream(void *ptr, int device, void *stream);
EXPORT int hbm_torch_set_memory_fraction(double fraction, int device);
EXPORT long hbm_torch_stats(int device, char *buf, long len);
EXPORT int hbm_torch_record_history(int device, long max_entries);
EXPORT int hbm_torch_snapshot(int device, const char *path);
EXPORT const char *hbm_torch_error(void);
EXPORT void hbm_torch_init(int device);
EXPORT void hbm_torch_reset(bool check_error);
EXPORT void hbm_torch_memory_fraction(double fraction, int device);

EXPORT void *hbm_torch_alloc(ssize_t size, int device, void *stream)
{
    hbm_allocator *a = allocator(device);
    void *p = NULL;
    if (!a || size < 0)
        return NULL;
    hbm_status rc = hbm_malloc(a, (size_t)size, (hbm_stream)(uintptr_t)stream, &p);
    if (rc != HBM_OK) {
        char msg[1600];
        hbm_copy_last_error(a, msg, sizeof msg);
        fprintf(stderr, "hbmalloc: %s\n", msg);
        return NULL;
    }
    return p;
}

EXPORT void hbm_torch_free(void *ptr, ssize_t size, int device, void *stream)
{
    (void)size;
    (void)stream;
    pthread_once(&once, open_devices);
    if (devices && hbm_devices_free(devices, device, ptr) != HBM_OK)
        fprintf(stderr, "hbmalloc: %s\n", hbm_devices_error(devices));
}

EXPORT int hbm_torch_empty_cache(void)
{
    pthread_once(&once, open_devices);
    int rc = 0;
    for (int d = 0; devices && d < hbm_devices_count(devices); d++) {
        hbm_allocator *a = hbm_devices_get(devices, d);
        if (a && hbm_empty_cache(a) != HBM_OK)
            rc = -1;
    }
    return rc;
}

EXPORT int hbm_torch_record_stream(void *ptr, int device, void *stream)
{
    hbm_allocator *a = allocator(device);
    return a ? (int)hbm_record_stream(a, ptr, (hbm_stream)(uintptr_t)stream) : -1;
}

EXPORT int hbm_torch_set_memory_fraction(double fraction, int device)
{
    hbm_allocator *a = allocator(device);
    return a ? (int)hbm_set_memory_fraction(a, fraction) : -1;
}

/* "name value" lines under memory_stats() names; returns the length (or the length needed). */
EXPORT long hbm_torch_stats(int device, char *buf, long len)
{
    hbm_allocator *a = allocator(device);
    if (!a)
        return -1;
    hbm_stats s;
    hbm_get_stats(a, &s);
    hbm_stat_entry e[HBM_STAT_ENTRIES];
    int n = hbm_stats_flatten(&s, e, HBM_STAT_ENTRIES);
    long need = 0;
    for (int i = 0; i < n; i++) {
        int w = snprintf(buf && need < len ? buf + need : NULL, buf && need < len ? (size_t)(len - need) : 0,
                         "%s %lld\n", e[i].name, (long long)e[i].value);
        need += w;
    }
    return need;
}

EXPORT int hbm_torch_record_history(int device, long max_entries)
{
    hbm_allocator *a = allocator(device);
    return a && max_entries >= 0 ? (int)hbm_history_enable(a, (size_t)max_entries) : -1;
}

EXPORT int hbm_torch_snapshot(int device, const char *path)
{
    hbm_allocator *a = allocator(device);
    if (!a || !path)
        return -1;
    hbm_snapshot *s;
    char err[512];
    if (hbm_snapshot_take(a, &s) != HBM_OK)
        return -1;
    size_t n = strlen(path);
    hbm_status rc = hbm_snapshot_save(s, path, n > 5 && !strcmp(path + n - 5, ".json") ? HBM_SNAPSHOT_JSON
                                                                                       : HBM_SNAPSHOT_PICKLE,
                                      err, sizeof err);
    hbm_snapshot_free(s);
    if (rc != HBM_OK)
        fprintf(stderr, "hbmalloc: %s\n", err);
    return rc == HBM_OK ? 0 : -1;
}

EXPORT const char *hbm_torch_error(void)
{
    pthread_once(&once, open_devices);
    return devices ? hbm_devices_error(devices) : open_error;
}

/* torch_npu's set_init_fn: called once per device before its first allocation. */
EXPORT void hbm_torch_init(int device) { (void)allocator(device); }

/* torch_npu's set_reset_fn: its empty_cache(check_error). */
EXPORT void hbm_torch_reset(bool check_error)
{
    if (hbm_torch_empty_cache() != 0 && check_error)
        fprintf(stderr, "hbmalloc: empty_cache failed: %s\n", hbm_torch_error());
}

/* torch_npu's set_memory_fraction_fn: no status to return, so a refusal is said on stderr. */
EXPORT void hbm_torch_memory_fraction(double fraction, int device)
{
    hbm_allocator *a = allocator(device);
    if (a && hbm_set_memory_fraction(a, fraction) != HBM_OK)
        fprintf(stderr, "hbmalloc: %s\n", hbm_last_error(a));
}
