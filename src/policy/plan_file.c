/*
 * plan_file.c: the hbm_plan_file policy: a plan written by `hbmalloc plan TRACE -o FILE` (docs/TRACE_FORMAT.md,
 * "Plan files"), read at create, served from the region: allocation k of the region's stream goes to the plan's
 * offset k when it fits in the planned size and that range is free, else the region's best fit (STAlloc's workflow:
 * plan a recorded run, start the next with the plan). Owns reading the file; the region is arena.c's, the take of a
 * planned range plan.c's.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "policy/arena.h"
#include "util/util.h"

/* Reads conf.plan_file (a->lock not needed: at create). HBM_OK, or HBM_ERR_CONF with "FILE:LINE: what" in err. */
static hbm_status plan_load(hbm_allocator *a, hbm__plan *pl, char *err, size_t errlen)
{
    const char *path = a->conf.plan_file;
    /* Opened without blocking (a FIFO blocks in open() until a writer comes, maybe never) and read only when it is
     * a regular file (a device or a pipe could block or never end). */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    int regular = fd >= 0 && !fstat(fd, &st) && S_ISREG(st.st_mode);
    FILE *f = regular ? fdopen(fd, "r") : NULL;
    if (!f) {
        snprintf(err, errlen, "hbm_plan_file: cannot open %.200s%s", path,
                 fd >= 0 && !regular ? " (not a regular file)" : "");
        if (fd >= 0)
            close(fd);
        return HBM_ERR_CONF;
    }
    char line[256];
    size_t lineno = 0, cap[4] = {0};           /* of plan_off, plan_size, start_at, end_at */
    uint32_t *start_at = NULL, *end_at = NULL; /* lifetimes, for plan_neighbours */
    int header = 0;
    hbm_status rc = HBM_OK;
    const char *why = NULL;
    while (!why && fgets(line, sizeof line, f)) {
        lineno++;
        if (!strchr(line, '\n') && !feof(f)) {
            why = "line too long";
            break;
        }
        if (line[0] == '#' || line[0] == '\n')
            continue;
        unsigned long long k, off, size, start, end;
        char extra;
        if (!header) {
            if (strcmp(line, "hbmplan 1\n") && strcmp(line, "hbmplan 1"))
                why = "not a plan file (its first line must be 'hbmplan 1')";
            header = 1;
        } else if (!pl->height) {
            if (sscanf(line, "height %llu %c", &size, &extra) != 1 || !size || size > (1ull << 56))
                why = "expected 'height BYTES' (1 to 2^56)";
            else
                pl->height = size;
        } else if (sscanf(line, "%llu %llu %llu %llu %llu %c", &k, &off, &size, &start, &end, &extra) != 5) {
            why = "expected 'alloc offset size start end'";
        } else if (k != pl->n) {
            why = "allocations must be numbered 0, 1, 2, ... in order";
        } else if (!size || size % 512 || off % 512 || off > pl->height || size > pl->height - off) {
            why = "offset and size must be multiples of 512 inside the height";
        } else if (start >= end || end > UINT32_MAX) {
            why = "the lifetime [start, end) must be a non-empty range of event numbers";
        } else {
            size_t need = pl->n + 1;
            if (hbm__grow((void **)&pl->off, &cap[0], need, sizeof *pl->off) ||
                hbm__grow((void **)&pl->size, &cap[1], need, sizeof *pl->size) ||
                hbm__grow((void **)&start_at, &cap[2], need, sizeof *start_at) ||
                hbm__grow((void **)&end_at, &cap[3], need, sizeof *end_at)) {
                rc = HBM_ERR_NOMEM;
                why = "out of host memory";
                break;
            }
            pl->off[pl->n] = off;
            start_at[pl->n] = (uint32_t)start;
            end_at[pl->n] = (uint32_t)end;
            pl->size[pl->n++] = size;
        }
    }
    if (!why && ferror(f))
        why = "read error";
    if (!why && !pl->height)
        why = "no height line";
    fclose(f);
    if (!why && hbm__plan_neighbours(pl, start_at, end_at)) {
        rc = HBM_ERR_NOMEM;
        why = "out of host memory";
    }
    free(start_at);
    free(end_at);
    if (why) {
        snprintf(err, errlen, "hbm_plan_file: %.200s:%zu: %s", path, lineno, why);
        hbm__plan_clear(pl);
        return rc != HBM_OK ? rc : HBM_ERR_CONF;
    }
    hbm__plan_lazy(a, pl); /* the region is served lazily while the plan is in force */
    return HBM_OK;
}

static hbm__block *plan_file_serve(hbm_allocator *a, hbm_stream stream, size_t size, uint64_t *note)
{
    (void)note;
    if (__builtin_expect(!a->region_seg, 0) && hbm__rp(a)->wanted)
        hbm__region_make(a, stream);
    if (!a->region_seg || stream != a->region_stream)
        return NULL;
    hbm__plan *pl = hbm__plan_of(a);
    hbm__block *b = pl->n ? hbm__plan_block(a, pl, size) : NULL;
    return b ? b : hbm__region_best_fit(a, stream, size);
}

static const hbm__policy_ops plan_file_ops = {
    .name = "hbm_plan_file",
    .serve = plan_file_serve,
    .stats = hbm__region_policy_stats,
    .validate = hbm__region_policy_validate,
    .teardown = hbm__region_policy_teardown,
};

hbm_status hbm__plan_file_policy_create(hbm_allocator *a, char *err, size_t errlen)
{
    hbm__region_policy *rp = hbm__region_policy_new(a, &plan_file_ops, sizeof *rp);
    if (!rp) {
        snprintf(err, errlen, "out of host memory");
        return HBM_ERR_NOMEM;
    }
    return plan_load(a, &rp->plan, err, errlen);
}
