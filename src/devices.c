/*
 * devices.c: one allocator per device of a backend, created on first use and
 * addressed by device index (what the PyTorch plug-ins need: alloc(size,
 * device, stream)). Owns the set and wrong-device diagnosis; no policy.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/errors.h"

#define MAX_DEVICES 64

struct hbm_devices {
    pthread_mutex_t lock; /* guards creation; each allocator has its own lock */
    hbm_backend *backend;
    char settings[512];
    bool settings_from_env;
    hbm_allocator *dev[MAX_DEVICES];
    int count;
};

/* The calling thread's last error on any device set (as errno is per thread): frees that fail at once on several
 * threads, the plug-in's free path, do not write one buffer together. */
static __thread char last_err[1024];

hbm_status hbm_devices_open(hbm_devices **out, const char *spec, const char *settings, char *err, size_t errlen)
{
    if (!out || !spec)
        return HBM_ERR_INVALID;
    *out = NULL;
    hbm_devices *d = calloc(1, sizeof *d);
    if (!d)
        return HBM_ERR_NOMEM;
    hbm_status rc = hbm_backend_open(&d->backend, spec, err, errlen);
    if (rc != HBM_OK) {
        free(d);
        return rc;
    }
    d->count = d->backend->caps.device_count < MAX_DEVICES ? d->backend->caps.device_count : MAX_DEVICES;
    d->settings_from_env = settings == NULL;
    snprintf(d->settings, sizeof d->settings, "%s", settings ? settings : "");
    pthread_mutex_init(&d->lock, NULL);
    if (hbm__fork_track(&d->lock, HBM__FORK_SET)) {
        pthread_mutex_destroy(&d->lock);
        hbm_backend_close(d->backend);
        free(d);
        snprintf(err, errlen, "out of host memory");
        return HBM_ERR_NOMEM;
    }
    *out = d;
    return HBM_OK;
}

hbm_status hbm_devices_close(hbm_devices *d)
{
    if (!d)
        return HBM_OK;
    hbm_status rc = HBM_OK;
    for (int i = 0; i < d->count; i++)
        if (hbm_destroy(d->dev[i]) != HBM_OK) /* says what stayed behind on stderr */
            rc = HBM_ERR_BACKEND;
    hbm_backend_close(d->backend);
    hbm__fork_untrack(&d->lock);
    pthread_mutex_destroy(&d->lock);
    free(d);
    return rc;
}

int hbm_devices_count(const hbm_devices *d) { return d ? d->count : 0; }

hbm_backend *hbm_devices_backend(hbm_devices *d) { return d ? d->backend : NULL; }

const char *hbm_devices_error(const hbm_devices *d) { return d ? last_err : "NULL device set"; }

hbm_allocator *hbm_devices_get(hbm_devices *d, int device)
{
    if (!d)
        return NULL;
    if (device < 0 || device >= d->count) {
        snprintf(last_err, sizeof last_err, "device %d does not exist on backend %s (it has %d device%s)", device,
                 d->backend->ops->name, d->count, d->count == 1 ? "" : "s");
        return NULL;
    }
    /* Made once, then read without the set's lock (a malloc takes the allocator's lock only): published with
     * release below, read with acquire here. */
    hbm_allocator *a = __atomic_load_n(&d->dev[device], __ATOMIC_ACQUIRE);
    if (a)
        return a;
    /* Created without the set's lock, which is never held around another (fork.c takes them in order);
     * two threads may race here: the first to publish wins and the other's is destroyed. */
    char e[900];
    if (hbm_create(&a, d->backend, device, d->settings_from_env ? NULL : d->settings, e, sizeof e) != HBM_OK) {
        snprintf(last_err, sizeof last_err, "device %d: %s", device, e);
        return NULL;
    }
    pthread_mutex_lock(&d->lock);
    hbm_allocator *won = d->dev[device];
    if (!won)
        __atomic_store_n(&d->dev[device], won = a, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&d->lock);
    if (won != a)
        hbm_destroy(a);
    return won;
}

hbm_allocator *hbm_devices_existing(hbm_devices *d, int device)
{
    if (!d || device < 0 || device >= d->count)
        return NULL;
    pthread_mutex_lock(&d->lock);
    hbm_allocator *a = d->dev[device];
    pthread_mutex_unlock(&d->lock);
    return a;
}

hbm_status hbm_devices_malloc(hbm_devices *d, int device, size_t size, hbm_stream stream, void **out)
{
    if (out)
        *out = NULL;
    hbm_allocator *a = hbm_devices_get(d, device);
    if (!a)
        return HBM_ERR_INVALID;
    hbm__err_sink = last_err;
    hbm__err_sink_len = sizeof last_err;
    hbm_status rc = hbm_malloc(a, size, stream, out);
    hbm__err_sink = NULL;
    return rc;
}

hbm_status hbm_devices_free(hbm_devices *d, int device, void *ptr)
{
    hbm_allocator *a = hbm_devices_get(d, device);
    if (!a)
        return HBM_ERR_INVALID;
    hbm__err_sink = last_err;
    hbm__err_sink_len = sizeof last_err;
    hbm_status rc = hbm_free(a, ptr);
    hbm__err_sink = NULL;
    if (rc == HBM_ERR_FOREIGN_PTR) {
        /* Not this device's: say whose it is, if it is anyone's. */
        for (int i = 0; i < d->count; i++) {
            pthread_mutex_lock(&d->lock);
            hbm_allocator *other = i == device ? NULL : d->dev[i];
            pthread_mutex_unlock(&d->lock);
            if (other && hbm_block_size(other, ptr)) {
                snprintf(last_err, sizeof last_err,
                         "free(%p) on device %d: the pointer belongs to device %d; nothing was changed", ptr, device,
                         i);
                return HBM_ERR_WRONG_DEVICE;
            }
        }
    }
    return rc;
}
