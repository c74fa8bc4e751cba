/* sleep_file.h: a sleeping pool's backup in a file (sleep_file.c). */
#ifndef HBM_CORE_SLEEP_FILE_H
#define HBM_CORE_SLEEP_FILE_H

#include "core/types.h"

typedef struct hbm__bfile {
    bool open; /* false (a zeroed one too): none */
    int fd;
    uint64_t size;  /* the bytes set aside for it */
    char dir[4096]; /* the folder it was made in, for messages */
} hbm__bfile;

/* A file of `size` bytes in `dir`, made, unlinked at once and its room taken (posix_fallocate), so that a full disk
 * refuses the sleep before anything is copied. On failure *f is closed and the message names dir and the reason. */
hbm_status hbm__bfile_open(hbm_allocator *a, hbm__bfile *f, const char *dir, uint64_t size);
/* n bytes at offset off, written from p or read into p; a failure sets the message (the folder, the offset, the
 * system's reason). */
hbm_status hbm__bfile_write(hbm_allocator *a, const hbm__bfile *f, uint64_t off, const void *p, size_t n);
hbm_status hbm__bfile_read(hbm_allocator *a, const hbm__bfile *f, uint64_t off, void *p, size_t n);
/* Closed: its room goes back to the file system. */
void hbm__bfile_close(hbm__bfile *f);

#endif
