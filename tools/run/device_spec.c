/*
 * device_spec.c: --backend and --capacity into the one backend spec a command replays on. A capacity may be given
 * as --capacity or inside --backend (the doctor's suggested commands carry it there); the simulated device's own
 * parser takes the last of several, so a spec built by appending --capacity's default silently replaced the one the
 * user gave. Here there is one capacity: the one given, wherever; two different ones are refused naming both; none
 * is 80 GiB; a number without a unit too small for a device (`--capacity 80`) is refused with the size it meant.
 * The framework's dialect (dialect.c) goes into a simulated device's spec. Owns the capacity's parsing and its
 * checks; opens no device.
 */
#include "device_spec.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util.h"

/* The simulated device's largest (src/backend/sim.c, SIM_MAX_CAPACITY). */
#define SIM_CAPACITY_BYTES ((size_t)8 << 40)
#define SIM_CAPACITY_MAX "8 TiB"
#define DEFAULT_CAPACITY ((size_t)80 << 30)

/* A bare number below 1 MiB is no device's capacity but a unit left out: `--capacity 80` meant 80 GiB every time we
 * saw it, and as 80 bytes every trace ran out of memory at event 0 with no word why. Refused, with the size it likely
 * meant (in GiB; in MiB where that many GiB would pass the simulated device's limit) written into meant. A larger
 * bare number is bytes, as everywhere in hbmalloc (the doctor's commands give capacity=31675383808). */
static bool unit_left_out(const char *text, size_t cap, char *meant, size_t len)
{
    if (text[strspn(text, "0123456789.")] || cap >= ((size_t)1 << 20))
        return false;
    snprintf(meant, len, "%.40s%s", text, cap <= (SIM_CAPACITY_BYTES >> 30) ? "GiB" : "MiB");
    return true;
}

int device_capacity(const char *cmd, const char *capacity, size_t *cap)
{
    size_t digits = strspn(capacity, "0123456789.");
    const char *unit = capacity + digits;
    bool past = digits && strchr("pPeE", unit[0]) &&
                (!unit[1] || !strcasecmp(unit + 1, "b") || !strcasecmp(unit + 1, "ib"));
    if (!past && (hbm__parse_size(capacity, cap) || *cap == 0)) {
        fprintf(stderr,
                "hbmalloc %s: --capacity '%s' is not a size: a number and a unit (e.g. 80GiB, 512MiB, "
                "2TiB; a bare number is bytes)\n",
                cmd, capacity);
        return -1;
    }
    if (past || *cap > SIM_CAPACITY_BYTES) {
        fprintf(stderr, "hbmalloc %s: --capacity '%s' is more than the simulated device's limit, %s\n", cmd, capacity,
                SIM_CAPACITY_MAX);
        return -1;
    }
    char meant[64];
    if (unit_left_out(capacity, *cap, meant, sizeof meant)) {
        fprintf(stderr,
                "hbmalloc %s: --capacity %s has no unit: %s bytes is no device; did you mean --capacity %s? (a bare "
                "number is bytes)\n",
                cmd, capacity, capacity, meant);
        return -1;
    }
    if (!*unit) {
        char h[32];
        hbm__format_size(*cap, h, sizeof h);
        fprintf(stderr, "hbmalloc %s: note: --capacity %s has no unit: read as bytes, %s\n", cmd, capacity, h);
    }
    return 0;
}

/* The capacity= options of a sim spec's options (opts: after "sim:"), all one size: 0 with *cap (0: none), or -1
 * printed. The rest of the options, in their order, into rest. */
static int backend_capacity(const char *cmd, const char *opts, size_t *cap, char *rest, size_t restlen)
{
    hbm__sbuf sb;
    hbm__sb_init(&sb, rest, restlen);
    char first[64] = "";
    *cap = 0;
    for (const char *p = opts; *p;) {
        size_t len = strcspn(p, ",");
        if (len > 9 && !strncmp(p, "capacity=", 9)) {
            char val[64];
            size_t c;
            snprintf(val, sizeof val, "%.*s", (int)(len - 9), p + 9);
            if (hbm__parse_size(val, &c) || c == 0 || c > SIM_CAPACITY_BYTES) {
                fprintf(stderr,
                        "hbmalloc %s: --backend's capacity=%s is not a size from 1 byte to %s (e.g. 80GiB; a bare "
                        "number is bytes)\n",
                        cmd, val, SIM_CAPACITY_MAX);
                return -1;
            }
            char meant[64];
            if (unit_left_out(val, c, meant, sizeof meant)) {
                fprintf(stderr,
                        "hbmalloc %s: --backend's capacity=%s has no unit: %s bytes is no device; did you mean "
                        "capacity=%s? (a bare number is bytes)\n",
                        cmd, val, val, meant);
                return -1;
            }
            if (*cap && c != *cap) {
                fprintf(stderr, "hbmalloc %s: --backend gives two capacities, capacity=%s and capacity=%s: give one\n",
                        cmd, first, val);
                return -1;
            }
            *cap = c;
            snprintf(first, sizeof first, "%s", val);
        } else if (len) {
            hbm__sb_printf(&sb, "%s%.*s", sb.len ? "," : "", (int)len, p);
        }
        p += len + (p[len] == ',');
    }
    return 0;
}

int device_spec(const char *cmd, const char *backend, const char *capacity, hbm_dialect d, char *spec, size_t n,
                char *base, size_t basen)
{
    if (!strncmp(backend, "cuda", 4) && (!backend[4] || backend[4] == ':')) {
        /* A real device: its own capacity, and measured (not modelled) device time. */
        if (capacity) {
            fprintf(stderr,
                    "hbmalloc %s: --capacity %s does not apply to --backend '%s': a real device has its own "
                    "capacity\n",
                    cmd, capacity, backend);
            return -1;
        }
        snprintf(spec, n, "%s", backend);
        if (base)
            snprintf(base, basen, "%s", backend);
        return 0;
    }
    if (strncmp(backend, "sim", 3) != 0 || (backend[3] && backend[3] != ':')) {
        fprintf(stderr, "hbmalloc %s: --backend must be a sim spec (sim:...) or cuda (a real GPU)\n", cmd);
        return -1;
    }
    char rest[1024], h1[32], h2[32];
    size_t in_spec, given = 0;
    if (backend_capacity(cmd, backend[3] ? backend + 4 : "", &in_spec, rest, sizeof rest))
        return -1;
    if (capacity && device_capacity(cmd, capacity, &given))
        return -1;
    if (capacity && in_spec && given != in_spec) {
        hbm__format_size(given, h1, sizeof h1);
        hbm__format_size(in_spec, h2, sizeof h2);
        fprintf(stderr,
                "hbmalloc %s: two capacities given: --capacity %s (%s) and capacity= in --backend '%s' (%s): give "
                "one\n",
                cmd, capacity, h1, backend, h2);
        return -1;
    }
    size_t cap = capacity ? given : in_spec ? in_spec : DEFAULT_CAPACITY;
    /* The dialect: a spec's own dialect= agrees with d (dialect.c refuses otherwise); torch_npu's is written in. */
    const char *npu = d == HBM_DIALECT_NPU && !strstr(rest, "dialect=") ? "dialect=npu" : "";
    char opts[1100];
    snprintf(opts, sizeof opts, "%s%s%s", rest, rest[0] && npu[0] ? "," : "", npu);
    snprintf(spec, n, "sim:%s%scapacity=%zu", opts, opts[0] ? "," : "", cap);
    if (base)
        snprintf(base, basen, "sim%s%s", opts[0] ? ":" : "", opts);
    return 0;
}
