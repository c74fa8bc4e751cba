/*
 * ranges.h: a set of free address ranges with first-fit placement: a request takes the lowest-addressed range long
 * enough, from its start. The simulated device's free memory (address-only mode: replays give the same addresses as
 * the sorted array it replaced) and the step plan's sweep (policy/lifetime_sweep.c) use it. Knows nothing of
 * devices, costs or lifetimes.
 *
 * Why this shape: a trace that calls empty_cache, or a sweep at a large capacity, gives back and takes thousands of
 * ranges, and the array's insertion, removal and first-fit scan were O(n) each (issue #38 item 5: 408, 712 and 789
 * instructions per event at 1, 4 and 16 copies of a trace). Here the ranges are a treap ordered by start whose
 * nodes keep the longest range below them, so a first fit, a give-back that merges with its neighbours and a new
 * range are each one or two descents: O(log n) expected. Priorities come from a fixed sequence (xorshift), so the
 * shape, like the addresses, is the same on every run.
 */
#ifndef HBM_RANGES_H
#define HBM_RANGES_H

#include <stddef.h>
#include <stdint.h>

typedef struct hbm__range_node hbm__range_node;

typedef struct hbm__ranges {
    hbm__range_node *root;
    size_t n;      /* ranges: disjoint, never adjacent (a give-back merges) */
    uint64_t prio; /* the priorities' sequence */
} hbm__ranges;

/* Takes `size` bytes from the lowest-addressed free range that holds them; *out is its start. -1: none holds them. */
int hbm__ranges_take(hbm__ranges *rs, size_t size, uintptr_t *out);
/* Gives [start, end) back (start < end, free of overlap with what is free), merged with the ranges it touches.
 * -1: no host memory for a new range (nothing changed). */
int hbm__ranges_give(hbm__ranges *rs, uintptr_t start, uintptr_t end);
/* The shape rules (for the tests): starts in order, ranges disjoint and never adjacent, each node's longest right,
 * priorities a heap. Returns the number of ranges, or -1 where a rule is broken. */
long hbm__ranges_verify(const hbm__ranges *rs);
/* Frees every range. */
void hbm__ranges_clear(hbm__ranges *rs);

#endif
