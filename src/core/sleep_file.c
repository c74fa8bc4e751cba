/*
 * sleep_file.c: a sleeping pool's backup in a file (hbm_sleep_opts.backup_dir; docs/SLEEP.md, "A backup in a
 * file").
 *
 * For jobs whose host memory cannot hold the backup: the live bytes go through two pinned buffers of one piece each
 * into a file, and come back the same way. The file is made with mkostemp in the caller's folder and unlinked at
 * once: it has no name while the pool sleeps, so nothing is left behind by a job that dies, and its room goes back
 * when the wake closes it. Its whole size is taken before the first copy (posix_fallocate): a disk too small refuses
 * the sleep with the pool still awake, instead of failing half-way.
 *
 * Why write() and read() rather than mmap: a write to a full or failing disk through a mapping is a SIGBUS in the
 * copying thread, where pwrite returns ENOSPC or EIO, which become the sleep's or the wake's message; the pieces are
 * large (64 MiB), so the copies through the kernel cost what a mapping's page faults would.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "core/errors.h"
#include "core/sleep_file.h"
#include "util/util.h"

hbm_status hbm__bfile_open(hbm_allocator *a, hbm__bfile *f, const char *dir, uint64_t size)
{
    f->open = false;
    char path[4096 + 32];
    if (!dir || !*dir || strlen(dir) >= sizeof f->dir) {
        hbm__set_error(a, "the backup's folder is empty or longer than %zu bytes", sizeof f->dir - 1);
        return HBM_ERR_INVALID;
    }
    snprintf(path, sizeof path, "%s/hbmalloc-backup-XXXXXX", dir);
    int fd = mkostemp(path, O_CLOEXEC);
    if (fd < 0) {
        hbm__set_error(a, "no backup file could be made in %s: %s", dir, strerror(errno));
        return HBM_ERR_BACKEND;
    }
    (void)unlink(path); /* nameless from now on: a job that dies leaves nothing behind */
    char s_size[32];
    hbm__format_size(size, s_size, sizeof s_size);
    /* Past the process's file-size limit the kernel sends SIGXFSZ, whose default ends the process: refused first. */
    struct rlimit lim;
    if (getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY && size > (uint64_t)lim.rlim_cur) {
        char s_lim[32];
        hbm__format_size((uint64_t)lim.rlim_cur, s_lim, sizeof s_lim);
        hbm__set_error(a,
                       "the backup file in %s could not take its %s: %s (the process's file-size limit, ulimit -f, "
                       "is %s)",
                       dir, s_size, strerror(EFBIG), s_lim);
        close(fd);
        return HBM_ERR_OOM;
    }
    int err = EINTR;
    while (err == EINTR)
        err = size ? posix_fallocate(fd, 0, (off_t)size) : 0;
    if (err) {
        hbm__set_error(a, "the backup file in %s could not take its %s: %s", dir, s_size, strerror(err));
        close(fd);
        return err == ENOSPC || err == EFBIG ? HBM_ERR_OOM : HBM_ERR_BACKEND;
    }
    f->open = true;
    f->fd = fd;
    f->size = size;
    snprintf(f->dir, sizeof f->dir, "%s", dir);
    return HBM_OK;
}

/* n bytes at off, all of them (a short transfer goes on; EINTR is tried again). */
static hbm_status transfer(hbm_allocator *a, const hbm__bfile *f, uint64_t off, char *p, size_t n, bool out)
{
    while (n) {
        ssize_t k = out ? pwrite(f->fd, p, n, (off_t)off) : pread(f->fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            const char *why = k < 0 ? strerror(errno) : out ? "nothing was written" : "the file ends before it";
            hbm__set_error(a, "%s the backup file in %s at offset %llu: %s", out ? "writing" : "reading", f->dir,
                           (unsigned long long)off, why);
            return HBM_ERR_BACKEND;
        }
        p += k, off += (uint64_t)k, n -= (size_t)k;
    }
    return HBM_OK;
}

hbm_status hbm__bfile_write(hbm_allocator *a, const hbm__bfile *f, uint64_t off, const void *p, size_t n)
{
    return transfer(a, f, off, (char *)p, n, true); /* only read from */
}

hbm_status hbm__bfile_read(hbm_allocator *a, const hbm__bfile *f, uint64_t off, void *p, size_t n)
{
    return transfer(a, f, off, p, n, false);
}

void hbm__bfile_close(hbm__bfile *f)
{
    if (f->open)
        close(f->fd);
    f->open = false;
    f->size = 0;
}
