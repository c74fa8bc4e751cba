/* step_period.h: repeating sequences (step_period.c), for step detection. */
#ifndef HBM_POLICY_STEP_PERIOD_H
#define HBM_POLICY_STEP_PERIOD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "hbmalloc.h"

/* The longest end of key[0..n) that repeats at least twice with one period: the period (0: none, or no host
 * memory), its length in *len. */
size_t hbm__period(const uint64_t *key, size_t n, size_t *len);
/* The repeating step of n allocations: size[k] the k-th's size, freed[k] how many allocations had been made when it
 * was freed (> n: not freed). Each allocation's key is its size and how many allocations back each block freed just
 * before it was made, or either alone (*by: HBM_STEP_BY_* bits); the longest repeating end (at least min_len, of a
 * period of at least min_period) under any of them. The period (0: none, or no host memory), its end's length. */
size_t hbm__step_period(const uint64_t *size, const uint32_t *freed, size_t n, size_t min_len, size_t min_period,
                        size_t *len, int *by);
/* Whether the live bytes at the same point of the last three periods rise or fall steadily: a repeat inside a step
 * (the layers of a forward pass keep their activations, of a backward pass free them), not a step, which comes back
 * to the live bytes it began with (a step of another length, too, rises and falls). size and freed as for
 * hbm__step_period (freed >= n: live at the end). */
bool hbm__period_accumulates(const uint64_t *size, const uint32_t *freed, size_t n, size_t period);

#endif
