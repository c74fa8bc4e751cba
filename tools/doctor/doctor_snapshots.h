/*
 * doctor_snapshots.h: `hbmalloc doctor --snapshot FILE...`: several ranks' memory snapshots compared
 * (doctor_snapshots.c). Each rank's figures (reserved, allocated, fragmentation, the largest free block, memory
 * outside the allocator where the snapshot says), the outlier ranks by ranks.h's rule, and what an outlier holds
 * that the median rank does not (its blocks grouped by size and allocating frame). docs/DOCTOR.md, "Several ranks'
 * snapshots".
 */
#ifndef HBM_DOCTOR_SNAPSHOTS_H
#define HBM_DOCTOR_SNAPSHOTS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "findings.h"

#define SNAPS_DIFF_MAX 10 /* differences listed per outlier, largest first */

/* Blocks of one size class allocated at one frame. */
typedef struct snap_group {
    uint64_t cls;      /* the class: its sizes are in (snaps_class_low(cls), cls] */
    uint32_t frame;    /* the allocating frame's text (snaps_frame), 0: the snapshot recorded none */
    uint64_t count;    /* active blocks (allocated, or freed while another stream still used them) */
    uint64_t bytes;    /* their sizes */
    uint64_t min, max; /* the smallest and largest of them */
} snap_group;

/* What an outlier holds beyond the median rank in one group: its group, and the differences. */
typedef struct snap_diff {
    snap_group g;
    int64_t dcount, dbytes;
} snap_diff;

enum { SNAP_RESERVED = 1, SNAP_UNALLOCATED = 2, SNAP_OUTSIDE = 4 }; /* the figures a rank is an outlier in */

typedef struct snap_rank {
    char *path;
    int rank;   /* from the snapshot's "rank" key, else its file name (ranks_from_name); -1: unknown */
    int device; /* the device its segments name */
    int ndevices_in_file;
    int64_t reserved, peak;  /* at the snapshot (segments asleep left out), and the most over the recorded history */
    int has_history;         /* its history has segment events: peak is over them */
    int64_t allocated;       /* active_allocated blocks */
    int64_t largest_free;    /* the largest inactive block */
    int64_t outside;         /* memory on the device outside the allocator (-1: the snapshot does not say) */
    uint64_t ooms;           /* "oom" entries in its history */
    uint64_t blocks, framed; /* active blocks, and of them those with frames */
    snap_group *g;
    size_t ng;
    int outlier; /* SNAP_* bits */
    snap_diff diff[SNAPS_DIFF_MAX];
    size_t ndiff, ndiff_all; /* listed, and all groups it holds more of */
    int64_t diff_bytes;      /* the sum over all those groups */
} snap_rank;

typedef struct doctor_snaps {
    char **paths; /* the files named, globs and folders expanded, in order */
    size_t npaths, cap_paths;
    snap_rank *r; /* those read, one per device a file holds, ordered by rank once compared */
    size_t n, cap;
    char **bad; /* "FILE: why" for each file not read, or left out */
    size_t nbad, cap_bad;
    size_t unreadable; /* of bad, the files that could not be read (the rest are duplicates, left out) */
    char **frames;     /* frame texts, interned: frame k is frames[k - 1] */
    size_t nframes, cap_frames;
    void *frame_index;
    /* The comparison */
    int use_peak;          /* every rank's history has segment events: peak is compared, else reserved */
    size_t median;         /* the median rank's index in r */
    double med[3], mad[3]; /* reserved (or peak), unallocated, outside: the median and MAD */
    size_t noutside;       /* ranks whose snapshot says how much is outside */
    size_t noutliers;
} doctor_snaps;

void doctor_snaps_init(doctor_snaps *s);
void doctor_snaps_free(doctor_snaps *s);
/* One --snapshot argument: a file, a folder (its *.pickle, *.pkl and *.json files, by name), or a glob pattern
 * (glob(3): quoted so the shell left it). 0, or -1 with err set (nothing matches, a folder that cannot be read, no
 * host memory). */
int doctor_snaps_add(doctor_snaps *s, const char *arg, char *err, size_t errlen);
/* Reads the files one at a time (memory: the largest file's parse, and each rank's groups), compares the ranks and
 * adds a finding per outlier to d. Each file not read is said on errs. 0, or -1 when host memory ran out. */
int doctor_snaps_run(doctor_snaps *s, doctor *d, FILE *errs);
/* The section for people (the table, the outliers and what differs), and the same as a JSON value. */
void doctor_snaps_text(const doctor_snaps *s, FILE *out);
void doctor_snaps_json(const doctor_snaps *s, FILE *out);
/* A frame's text (innermost user frame: "file.py:LINE:name", as torch's _memory_viz writes one); "" for 0. */
const char *snaps_frame(const doctor_snaps *s, uint32_t frame);
/* A size's class (the bound above it: four classes per power of two, as roundup_power2_divisions:4 rounds), and the
 * bound below a class. */
uint64_t snaps_class(uint64_t size);
uint64_t snaps_class_low(uint64_t cls);

#endif
