/*
 * api.c: the public lifecycle and query entry points: opening backends,
 * creating and destroying allocators, statistics, settings, errors.
 * Policy lives in engine.c; this file only wires handles together.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/engine.h"
#include "util/env.h"
#include "core/stats.h"
#include "core/sleep.h"
#include "core/outside.h"
#include "core/events.h"
#include "core/device.h"
#include "io/oom_dump.h"
#include "policy/registry.h"
#include "conf/releases.h"
#include "util/util.h"

static void put_err(char *err, size_t errlen, const char *msg)
{
    if (err && errlen)
        snprintf(err, errlen, "%s", msg);
}

hbm_status hbm_create(hbm_allocator **out, hbm_backend *b, int device, const char *settings, char *err, size_t errlen)
{
    char local[600];
    if (!out || !b) {
        put_err(err, errlen, "hbm_create: NULL argument");
        return HBM_ERR_INVALID;
    }
    *out = NULL;
    if (device < 0 || device >= b->caps.device_count) {
        snprintf(local, sizeof local, "hbm_create: device %d does not exist on backend %s (it has %d device%s)", device,
                 b->ops->name, b->caps.device_count, b->caps.device_count == 1 ? "" : "s");
        put_err(err, errlen, local);
        return HBM_ERR_INVALID;
    }
    /* Every failure below goes to `fail`, with its status and its message in `why`: one cleanup path. */
    const char *why = local;
    bool tracked = false; /* the lock is known to the fork handlers */
    hbm_status rc = HBM_ERR_NOMEM;
    hbm_allocator *a = calloc(1, sizeof *a);
    if (!a || hbm__ptrmap_init(&a->live)) {
        why = "out of host memory";
        goto fail;
    }
    rc = hbm__conf_load(&a->conf, settings, b->caps.dialect, local, sizeof local);
    /* Virtual memory is probed on this device only, and only when a setting depends on it (the probe may create
     * the device's context: on Ascend, aclrtSetDevice). */
    a->backend = b;
    a->device = device;
    a->vmm = -1;
    if (rc == HBM_OK && (a->conf.expandable_segments || a->conf.combo_needs_no_vmm))
        a->vmm = hbm__dev_vmm(a, a->vmm_why, sizeof a->vmm_why);
    if (rc == HBM_OK && a->conf.combo_needs_no_vmm && a->vmm == 1) {
        /* The torch_npu release named refuses this string on a device that has virtual memory. */
        snprintf(local, sizeof local,
                 "invalid settings: `max_split_size_mb` or `garbage_collection_threshold`, "
                 "cannot be enabled with `expandable_segments`, please set `expandable_segments` to `False`. (%s "
                 "refuses it on this device, which has virtual memory; from %s)",
                 a->conf.release, a->conf.source);
        rc = HBM_ERR_CONF;
    }
    if (rc == HBM_OK && a->conf.step_plan && a->conf.plan_file[0]) {
        snprintf(local, sizeof local, "hbm_step_plan and hbm_plan_file both name the plan to serve: keep one");
        rc = HBM_ERR_CONF;
    }
    if (rc != HBM_OK)
        goto fail;
    hbm__mutex_init(&a->lock);
    if (hbm__fork_track_mutex(&a->lock, HBM__FORK_ALLOCATOR)) {
        why = "out of host memory";
        rc = HBM_ERR_NOMEM;
        goto fail;
    }
    tracked = true;
    a->request_pad = b->caps.request_pad;
    a->device_waited = hbm__settle_unrecorded;
    a->free_completed = hbm__free_block;
    for (int k = 0; k < HBM__ROUNDUP_INTERVALS; k++)
        a->roundup |= a->conf.roundup_divisions[k] > 1;
    a->small.is_small = true;
    a->small.sibling = &a->large;
    a->large.sibling = &a->small;
    a->region.is_region = true;
    a->stats.max_split_size = a->conf.max_split_size == SIZE_MAX ? -1 : (int64_t)a->conf.max_split_size;
    size_t dev_free;
    rc = hbm__dev_info(a, &dev_free, &a->device_total);
    if (rc == HBM_OK)
        rc = hbm__set_fraction_locked(a, a->conf.memory_fraction);
    if (rc != HBM_OK) {
        why = a->err;
        goto fail;
    }
    a->err[0] = 0;
    if (a->conf.expandable_segments) {
        if (a->vmm == 1) {
            a->expandable = true;
        } else {
            /* Decided once, here, and said once: never a silent downgrade. */
            snprintf(a->warning, sizeof a->warning,
                     "expandable_segments:True is not supported by the %s backend on device %d: %s. Using "
                     "expandable_segments:False instead (whole segments, PyTorch's default policy). Check the "
                     "device with: hbmalloc doctor (or hbmalloc conf expandable_segments:True --backend '%s')",
                     b->ops->name, device, a->vmm_why, b->spec);
            if (!hbm__env(HBM__ENV_QUIET))
                fprintf(stderr, "hbmalloc: warning: %s\n", a->warning);
        }
    }
    /* The policy beside the caching engine, if the settings ask for one (policy/registry.c). With expandable segments
     * in force too, it works beside them (arena.c: a plan's region is made of pages, an arena alone is one device
     * allocation; POLICY.md, "The step plan"). */
    if ((rc = hbm__policy_create(a, local, sizeof local)) != HBM_OK)
        goto fail;
    a->stats.expandable_segments = a->expandable;
    if (a->conf.publish == 1 && hbm_publish(a, 1) != HBM_OK) /* monitoring never stops the job: said, not failed */
        hbm__warning_add(a, a->err);
    if (hbm__oom_dump_from_env(a) != HBM_OK) { /* nor do snapshots at an OOM (io/oom_dump.c) */
        hbm__warning_add(a, a->err);
        if (!hbm__env(HBM__ENV_QUIET))
            fprintf(stderr, "hbmalloc: warning: %s\n", a->err);
    }
    a->err[0] = 0;
    *out = a;
    return HBM_OK;
fail:
    put_err(err, errlen, why); /* before `a` goes: `why` may be its error text */
    if (a) {
        if (a->pol)
            a->pol->ops->teardown(a);
        if (tracked)
            hbm__fork_untrack(&a->lock);
        hbm__ptrmap_free(&a->live);
        free(a);
    }
    return rc;
}

hbm_status hbm_open(hbm_allocator **out, const char *backend_spec, int device, const char *settings, char *err,
                    size_t errlen)
{
    hbm_backend *b;
    hbm_status rc = hbm_backend_open(&b, backend_spec, err, errlen);
    if (rc != HBM_OK)
        return rc;
    rc = hbm_create(out, b, device, settings, err, errlen);
    if (rc != HBM_OK) {
        hbm_backend_close(b);
        return rc;
    }
    (*out)->owns_backend = true;
    return HBM_OK;
}

/* Peer access to a device's pages, for the whole backend: no allocator is needed, as PyTorch's enablePeerAccess needs
 * none. (With the other hbm_backend_* entries it would sit in core/device.c, the one caller of a backend.) */
hbm_status hbm_backend_enable_peer(hbm_backend *b, int device, int peer, char *err, size_t errlen)
{
    char none[8];
    if (!err || !errlen)
        err = none, errlen = sizeof none;
    err[0] = 0;
    int n = b ? b->caps.device_count : 0;
    if (device < 0 || device >= n || peer < 0 || peer >= n) {
        snprintf(err, errlen, "hbm_backend_enable_peer: no device %d or %d on %s (it has %d)", device, peer,
                 b ? b->ops->name : "a NULL backend", n);
        return HBM_ERR_INVALID;
    }
    if (!b->caps.has_vmm || !b->ops->vmm_peer)
        return HBM_OK; /* nothing it maps needs a grant per device */
    int rc = b->ops->vmm_peer(b->ctx, device, peer);
    if (rc) {
        snprintf(err, errlen, "%s: device %d cannot be given access to device %d's pages: %s", b->ops->name, peer,
                 device, b->ops->strerror(b->ctx, rc));
        return HBM_ERR_BACKEND;
    }
    return HBM_OK;
}

hbm_status hbm_destroy_report(hbm_allocator *a, char *msg, size_t msglen)
{
    if (msg && msglen)
        msg[0] = 0;
    if (!a)
        return HBM_OK;
    hbm_publish(a, 0);
    hbm__lock(a);
    a->tearing_down = true;
    /* Live blocks go back too: wait for the device's work first (a failure is counted and reported below; the
     * memory goes back regardless, there is nothing else to do with it). */
    a->quiet_stamp = 0; /* live blocks too: an earlier wait covered only the free ones */
    if (a->segments && hbm__dev_quiesce_open(a) != HBM_OK)
        a->quiet_stamp = hbm__free_stamp(a);
    hbm__engine_teardown(a);
    hbm__ptrmap_free(&a->live);
    hbm__unlock(a);
    hbm__fork_untrack(&a->lock);
    hbm_status rc = a->teardown_failed ? HBM_ERR_BACKEND : HBM_OK;
    if (rc != HBM_OK && msg && msglen) {
        char size[32];
        hbm__format_size(a->teardown_bytes, size, sizeof size);
        snprintf(msg, msglen,
                 "hbm_destroy: %llu device call%s failed while giving memory back (%s held by them may "
                 "remain on device %d until the process exits); first: %s",
                 (unsigned long long)a->teardown_failed, a->teardown_failed == 1 ? "" : "s", size, a->device,
                 a->teardown_first);
    }
    if (a->owns_backend)
        hbm_backend_close(a->backend);
    hbm__oom_dump_free(a);
    free(a);
    return rc;
}

hbm_status hbm_destroy(hbm_allocator *a)
{
    char msg[768];
    hbm_status rc = hbm_destroy_report(a, msg, sizeof msg);
    if (rc != HBM_OK && !hbm__env(HBM__ENV_QUIET))
        fprintf(stderr, "hbmalloc: warning: %s\n", msg);
    return rc;
}

void hbm_set_single_thread(hbm_allocator *a)
{
    hbm_publish(a, 0);           /* its refresher would take a lock no call takes any more */
    hbm_oom_dump(a, NULL, 0, 0); /* a replay's OOMs are a model's (a sweep makes them on purpose), not a job's */
    a->single_thread = true;
}

const char *hbm_last_error(const hbm_allocator *a) { return a ? a->err : "NULL allocator"; }

const char *hbm_warning(const hbm_allocator *a) { return a ? a->warning : ""; }

size_t hbm_copy_last_error(hbm_allocator *a, char *buf, size_t len)
{
    if (!a || !buf || !len)
        return 0;
    hbm__lock(a);
    snprintf(buf, len, "%s", a->err);
    hbm__unlock(a);
    return strlen(buf);
}

hbm_status hbm_copy_last_oom(hbm_allocator *a, hbm_oom_info *out, char *msg, size_t msglen)
{
    if (!a || !out)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc = a->has_oom ? HBM_OK : HBM_ERR_INVALID;
    if (rc == HBM_OK) {
        *out = a->last_oom;
        if (msg && msglen)
            snprintf(msg, msglen, "%s", a->oom_msg);
    }
    hbm__unlock(a);
    return rc;
}

hbm_status hbm_mem_get_info(hbm_allocator *a, size_t *free_bytes, size_t *total_bytes)
{
    if (!a || !free_bytes || !total_bytes)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm_status rc = hbm__dev_info(a, free_bytes, total_bytes);
    hbm__unlock(a);
    return rc;
}

hbm_status hbm_memory_usage(hbm_allocator *a, hbm_usage *out)
{
    if (!a || !out)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    *out = (hbm_usage){.allocated = (uint64_t)a->stats.allocated_bytes[HBM_POOL_ALL].current,
                       .reserved = a->total_reserved,
                       .requested = (uint64_t)a->stats.requested_bytes[HBM_POOL_ALL].current,
                       .plan_positions = 0};
    if (a->pol) {
        size_t positions = 0;
        hbm_stats scratch;
        a->pol->ops->stats(a, &scratch, &positions);
        out->plan_positions = positions;
    }
    hbm__unlock(a);
    return HBM_OK;
}

hbm_status hbm_get_stats(hbm_allocator *a, hbm_stats *out)
{
    if (!a || !out)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    a->stats.num_expandable_segments = (int64_t)a->nexpandable;
    a->stats.arena_bytes = a->region_seg ? (int64_t)a->region_seg->size : 0;
    size_t positions;
    a->stats.plan_height = 0;
    if (a->pol)
        a->pol->ops->stats(a, &a->stats, &positions);
    hbm__sleep_stats(a, &a->stats);
    hbm__stats_view(a, out);
    hbm__outside_stats(a, out);
    hbm__unlock(a);
    return HBM_OK;
}

void hbm_reset_peak_stats(hbm_allocator *a)
{
    if (!a)
        return;
    hbm__lock(a);
    int64_t pa = a->stats.allocated_bytes[HBM_POOL_ALL].peak, pr = a->stats.reserved_bytes[HBM_POOL_ALL].peak;
    if (pa > a->peak_allocated_before_reset)
        a->peak_allocated_before_reset = pa;
    if (pr > a->peak_reserved_before_reset)
        a->peak_reserved_before_reset = pr;
    hbm__stats_reset_peak(a);
    hbm__unlock(a);
}

void hbm_reset_accumulated_stats(hbm_allocator *a)
{
    if (!a)
        return;
    hbm__lock(a);
    hbm__stats_reset_accumulated(a);
    a->stat_resets++; /* the frees counted there are compared across a wait with the lock open (device.c) */
    hbm__unlock(a);
}

void hbm_get_device_counters(hbm_allocator *a, hbm_device_counters *out)
{
    if (!a || !out)
        return;
    hbm__lock(a);
    *out = a->dev;
    hbm__unlock(a);
}

hbm_status hbm_settings_check(const char *settings, hbm_dialect d, char *out, size_t outlen)
{
    hbm__conf *c = malloc(sizeof *c);
    if (!c)
        return HBM_ERR_NOMEM;
    hbm__conf_defaults(c, d);
    strcpy(c->source, settings ? "explicit" : "default");
    hbm_status rc = settings ? hbm__conf_parse(c, settings, d, out, outlen) : hbm__conf_load(c, NULL, d, out, outlen);
    if (rc == HBM_OK)
        hbm__conf_describe(c, out, outlen);
    free(c);
    return rc;
}

void hbm_settings_keys(char *out, size_t len)
{
    if (out && len)
        hbm__conf_keys(out, len);
}

hbm_status hbm_settings_check_var(const char *var, const char *settings, hbm_dialect d, char *out, size_t outlen)
{
    if (!var || !settings)
        return HBM_ERR_INVALID;
    return hbm_settings_check_release(var, settings, d, NULL, -1, out, outlen);
}

/* Parse as hbm_settings_check_release does; then describe (what 0) or the policy string (what 1). */
static hbm_status check_release(const char *var, const char *settings, hbm_dialect d, const char *version, int vmm,
                                int what, char *out, size_t outlen)
{
    if (!settings || !out || outlen == 0)
        return HBM_ERR_INVALID;
    hbm__conf *c = malloc(sizeof *c);
    if (!c)
        return HBM_ERR_NOMEM;
    hbm__conf_defaults(c, d);
    snprintf(c->source, sizeof c->source, "%s", var ? var : "explicit");
    hbm__release rel;
    hbm_status rc = HBM_OK;
    bool framework = var && !strncmp(var, "PYTORCH_", 8);
    if (framework && version && *version)
        rc = hbm__release_find(&rel, d, version, out, outlen);
    if (rc == HBM_OK)
        rc = hbm__conf_parse_release(c, settings, d, framework && version && *version ? &rel : NULL, vmm, out, outlen);
    if (rc == HBM_OK && what == 0)
        hbm__conf_describe(c, out, outlen);
    else if (rc == HBM_OK) {
        if (vmm == 0)
            c->expandable_segments = false; /* what every release runs on a device without virtual memory */
        hbm__conf_policy_string(c, out, outlen);
    }
    free(c);
    return rc;
}

hbm_status hbm_release_describe(hbm_dialect d, const char *version, char *name, size_t namelen, char *tag,
                                size_t taglen)
{
    hbm__release r;
    char err[200];
    hbm_status rc = hbm__release_find(&r, d, version, err, sizeof err);
    if (name && namelen)
        snprintf(name, namelen, "%s", rc == HBM_OK ? r.name : err);
    if (tag && taglen)
        snprintf(tag, taglen, "%s", rc == HBM_OK && r.tag ? r.tag : "");
    return rc;
}

hbm_status hbm_settings_check_release(const char *var, const char *settings, hbm_dialect d, const char *version,
                                      int vmm, char *out, size_t outlen)
{
    return check_release(var, settings, d, version, vmm, 0, out, outlen);
}

hbm_status hbm_settings_effective(const char *var, const char *settings, hbm_dialect d, const char *version, int vmm,
                                  char *out, size_t outlen)
{
    return check_release(var, settings, d, version, vmm, 1, out, outlen);
}

hbm_status hbm_settings_describe(hbm_allocator *a, char *out, size_t outlen)
{
    if (!a || !out)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    hbm__conf_describe(&a->conf, out, outlen);
    hbm__sbuf sb = {out, outlen, strlen(out)};
    if (a->vmm < 0)
        a->vmm = hbm__dev_vmm(a, a->vmm_why, sizeof a->vmm_why);
    if (a->conf.expandable_segments && !a->expandable)
        hbm__sb_printf(&sb, "expandable_segments in force: False (fallback: %s)\n", a->vmm_why);
    else
        hbm__sb_printf(&sb, "expandable_segments in force: %s\n", a->expandable ? "True" : "False");
    hbm__sb_printf(&sb, "device: %s %d (%s; virtual memory: %s)\n", a->backend->ops->name, a->device,
                   a->backend->caps.version, a->vmm ? "yes" : "no");
    hbm__unlock(a);
    return HBM_OK;
}

hbm_status hbm_step(hbm_allocator *a)
{
    if (!a)
        return HBM_ERR_INVALID;
    hbm__lock(a);
    a->stats.steps++;
    hbm_status rc = a->pol && a->pol->ops->step ? a->pol->ops->step(a) : HBM_OK;
    hbm__unlock(a);
    return rc;
}
