/*
 * device_spec.h: the device a command replays on, as one backend spec with one capacity (docs/TOOL.md, "The
 * device").
 */
#ifndef HBM_TOOLS_DEVICE_SPEC_H
#define HBM_TOOLS_DEVICE_SPEC_H

#include <stddef.h>

#include "hbmalloc.h"

/* backend (--backend: "sim[:...]" or "cuda") and capacity (--capacity, NULL when not given) into spec: a simulated
 * device's with one capacity= (the one given, wherever; 80 GiB when none is) and, for the torch_npu dialect,
 * dialect=npu; base: the same without its capacity (replay --min-capacity bisects it; NULL: not wanted). 0, or -1
 * with the reason printed for command cmd (two different capacities, one that is no size, --capacity on a real
 * device). */
int device_spec(const char *cmd, const char *backend, const char *capacity, hbm_dialect d, char *spec, size_t n,
                char *base, size_t basen);

/* --capacity's text (for command cmd) into *cap: a size with a unit up to the simulated device's limit (8 TiB); a
 * bare number is bytes, noted on stderr, and refused below 1 MiB with the size it likely meant ("did you mean
 * --capacity 80GiB?"). 0, or -1 with the reason printed. */
int device_capacity(const char *cmd, const char *capacity, size_t *cap);

#endif
