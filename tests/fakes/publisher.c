/* publisher.c: a process that publishes its allocator for tests/cli/top.sh. On the sim backend (HBMALLOC_TOP_DIR
 * from the environment, hbm_publish:True), it allocates and frees a pattern that leaves a fragmented cache and
 * one OOM, publishes that state (again, so as not to wait for the refresher), writes its own statistics
 * (hbm_get_stats, and the largest free block from a snapshot) as JSON to OUT, and then waits, allocations held,
 * until killed or until its standard input closes.
 * usage: publisher OUT [SCALE [ALLOCATORS]]   (SCALE multiplies the sizes, default 1; ALLOCATORS: that many
 * published allocators of device 0, default 1, OUT describing the first). HBM_PUBLISHER_NAME: the process's name
 * (prctl PR_SET_NAME, any bytes: what top must show safely). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "hbmalloc.h"

#define MiB ((size_t)1 << 20)

static int die(const char *what, hbm_allocator *a)
{
    fprintf(stderr, "publisher: %s: %s\n", what, a ? hbm_last_error(a) : "");
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    size_t scale = argc > 2 ? strtoul(argv[2], NULL, 10) : 1;
    int count = argc > 3 ? atoi(argv[3]) : 1;
    const char *name = getenv("HBM_PUBLISHER_NAME");
    if (name)
        prctl(PR_SET_NAME, name, 0, 0, 0);
    hbm_allocator *a = NULL, *more[8] = {0};
    char err[512];
    if (count < 1 || count > 9)
        return 2;
    for (int i = 0; i < count; i++) {
        hbm_allocator **x = i ? &more[i - 1] : &a;
        if (hbm_open(x, "sim:capacity=8GiB", 0, "hbm_publish:True", err, sizeof err) != HBM_OK) {
            fprintf(stderr, "publisher: %s\n", err);
            return 1;
        }
        if (hbm_warning(*x)[0])
            fprintf(stderr, "publisher: %s\n", hbm_warning(*x));
    }
    void *p[8] = {0}, *big = NULL;
    for (int i = 0; i < 8; i++)
        if (hbm_malloc(a, (size_t)(i + 1) * 37 * MiB * scale, 0, &p[i]) != HBM_OK)
            return die("malloc", a);
    for (int i = 0; i < 8; i += 2) /* every other one freed: cached, split segments */
        hbm_free(a, p[i]);
    void *small;
    if (hbm_malloc(a, 5 * MiB, 0, &small) != HBM_OK) /* a cache hit: no segment change */
        return die("malloc", a);
    if (hbm_malloc(a, 64 * 1024 * MiB, 0, &big) != HBM_ERR_OOM)
        return die("expected an OOM", a);
    /* The record as of now, without waiting for the refresher (a loaded machine may delay it): published again. */
    if (hbm_publish(a, 0) != HBM_OK || hbm_publish(a, 1) != HBM_OK)
        return die("hbm_publish", a);
    hbm_stats s;
    hbm_get_stats(a, &s);
    hbm_snapshot *snap;
    if (hbm_snapshot_take(a, &snap) != HBM_OK)
        return die("snapshot", a);
    unsigned long long largest = 0;
    for (size_t i = 0; i < snap->nblocks; i++)
        if (snap->blocks[i].state == HBM_BLOCK_INACTIVE && snap->blocks[i].size > largest)
            largest = snap->blocks[i].size;
    hbm_snapshot_free(snap);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return die("cannot write OUT", NULL);
    fprintf(f,
            "{\"pid\": %ld, \"allocated_bytes\": %lld, \"reserved_bytes\": %lld, \"active_bytes\": %lld, "
            "\"requested_bytes\": %lld, \"inactive_split_bytes\": %lld, \"peak_allocated_bytes\": %lld, "
            "\"peak_reserved_bytes\": %lld, \"largest_free_bytes\": %llu, \"allocation\": %lld, \"segment\": %lld, "
            "\"active\": %lld, \"inactive_split\": %lld, \"num_ooms\": %lld, \"num_alloc_retries\": %lld, "
            "\"num_device_alloc\": %lld, \"num_device_free\": %lld, \"expandable_segments\": %s}\n",
            (long)getpid(), (long long)s.allocated_bytes[0].current, (long long)s.reserved_bytes[0].current,
            (long long)s.active_bytes[0].current, (long long)s.requested_bytes[0].current,
            (long long)s.inactive_split_bytes[0].current, (long long)s.allocated_bytes[0].peak,
            (long long)s.reserved_bytes[0].peak, largest, (long long)s.allocation[0].current,
            (long long)s.segment[0].current, (long long)s.active[0].current, (long long)s.inactive_split[0].current,
            (long long)s.num_ooms, (long long)s.num_alloc_retries, (long long)s.num_device_alloc,
            (long long)s.num_device_free, s.expandable_segments ? "true" : "false");
    fclose(f);
    rename(tmp, argv[1]); /* whole, for the test's poll */
    char c;
    while (read(0, &c, 1) > 0) /* until stdin closes (or a signal ends the process) */
        ;
    for (int i = 1; i < 8; i += 2)
        hbm_free(a, p[i]);
    hbm_free(a, small);
    for (int i = 0; i + 1 < count; i++)
        hbm_destroy(more[i]);
    return hbm_destroy(a) == HBM_OK ? 0 : 1;
}
