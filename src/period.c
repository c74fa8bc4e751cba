/*
 * period.c: the period of a repeating sequence, for step detection (the
 * step plan's, stepplan.c, and the tools' --steps auto). Given one key per
 * allocation, the longest end of the sequence that repeats at least twice
 * with one period: the prefix function of the keys read from the end, O(n)
 * time and n words of memory.
 */
#include <stdlib.h>

#include "internal.h"

size_t hbm__period(const uint64_t *key, size_t n, size_t *len)
{
    *len = 0;
    uint32_t *pi = malloc((n ? n : 1) * sizeof *pi);
    if (!pi || n >= UINT32_MAX) {
        free(pi);
        return 0;
    }
    size_t best = 0;
    if (n)
        pi[0] = 0;
    for (size_t i = 1; i < n; i++) { /* over the keys read from the end */
        uint32_t j = pi[i - 1];
        while (j && key[n - 1 - i] != key[n - 1 - j])
            j = pi[j - 1];
        pi[i] = j + (key[n - 1 - i] == key[n - 1 - j]);
    }
    for (size_t l = n; l >= 2; l--) {
        size_t p = l - pi[l - 1];
        if (l >= 2 * p) {
            *len = l;
            best = p;
            break;
        }
    }
    free(pi);
    return best;
}

uint64_t hbm__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
