/*
 * ranks.h: what several ranks' files share, for the doctor's comparison of snapshots (doctor_snapshots.c) and
 * view's ranks side by side (view_ranks.c): the rank a file's name says, and the rule that names a rank an
 * outlier among its peers (docs/DOCTOR.md, "Several ranks' snapshots"). Knows nothing of what the files hold.
 */
#ifndef HBM_TOOLS_RANKS_H
#define HBM_TOOLS_RANKS_H

#include <stddef.h>

/* The rank a file's name gives (its last path component, case ignored): "rank3", "rank_3", "rank-3", "rank.3",
 * "rank=3", or a separator ('-', '_', '.') then "r3" then a separator or the end ("snap-r3.pickle"); digits only,
 * at most 7. The last such mention wins ("run_rank1/rank_12.pickle" is 12: only the base name is read). -1: none. */
int ranks_from_name(const char *path);

/* The median of v[0..n) (n >= 1), the lower of the two middle values for an even n, so that it is always one rank's
 * own value and, with two ranks, the smaller. v is not changed. */
double ranks_median(const double *v, size_t n);
/* The median absolute deviation from m: the same lower median of |v[i] - m|. */
double ranks_mad(const double *v, size_t n, double m);

/* The rule (docs/DOCTOR.md): a rank is an outlier in a figure when its value x is above the median m by more than
 * each of RANKS_RATIO - 1 of m, `floor` (the least excess that matters: RANKS_MIN_BYTES for bytes) and
 * RANKS_MAD_K x mad (a robust three standard deviations: a job whose ranks spread widely names only those far
 * outside the spread). */
#define RANKS_RATIO 1.2
#define RANKS_MIN_BYTES (1024.0 * 1024 * 1024)
#define RANKS_MAD_K (3 * 1.4826) /* 1.4826 x MAD estimates a normal spread's standard deviation */
int ranks_is_high(double x, double m, double mad, double floor);

#endif
