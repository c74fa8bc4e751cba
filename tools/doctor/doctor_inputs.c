/*
 * doctor_inputs.c: what one `--log` argument names, for `hbmalloc doctor` (issue #40 item 3): a file or a pipe; a
 * folder, whose regular files directly inside are read (not its subfolders: a folder of logs often holds other jobs'
 * and earlier attempts' beside it, and a pattern says exactly which: for torchrun's --log-dir layout, any run
 * folder, attempt_0, any local rank's folder, stderr.log); or a pattern the shell left alone (quoted), expanded here
 * with glob(3). Files are read in natural order (worker_2.log before worker_10.log), each by doctor_log
 * (doctor_log.c) one line at a time, so a folder of any size takes no more memory than its largest line.
 */
#define _GNU_SOURCE /* strverscmp */
#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "util.h"
#include "doctor.h"

#define MAX_NAMES 65536 /* files one argument may name */

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static int add(names *ns, const char *path)
{
    if (ns->n >= MAX_NAMES || hbm__grow((void **)&ns->v, &ns->cap, ns->n + 1, sizeof *ns->v))
        return -1;
    if (!(ns->v[ns->n] = strdup(path)))
        return -1;
    ns->n++;
    return 0;
}

static void drop(names *ns)
{
    for (size_t i = 0; i < ns->n; i++)
        free(ns->v[i]);
    free(ns->v);
}

static int natural(const void *a, const void *b) { return strverscmp(*(char *const *)a, *(char *const *)b); }

/* The regular files directly inside dir (hidden ones left out), or -1 with err set. */
static int folder(const char *dir, names *ns, char *err, size_t errlen)
{
    DIR *dp = opendir(dir);
    if (!dp) {
        snprintf(err, errlen, "cannot open log folder %.300s: %s", dir, strerror(errno));
        return -1;
    }
    size_t before = ns->n;
    struct dirent *de;
    char path[4200];
    while ((de = readdir(dp))) {
        struct stat st;
        if (de->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s%s%s", dir, dir[0] && dir[strlen(dir) - 1] == '/' ? "" : "/", de->d_name);
        if (stat(path, &st) || !S_ISREG(st.st_mode))
            continue;
        if (add(ns, path)) {
            closedir(dp);
            snprintf(err, errlen, "log folder %.300s: more than %d files, or out of host memory", dir, MAX_NAMES);
            return -1;
        }
    }
    closedir(dp);
    if (ns->n == before) {
        snprintf(err, errlen,
                 "log folder %.300s has no log file directly inside (its subfolders are not read: name them with a "
                 "quoted pattern, e.g. '%.300s/*/attempt_0/*/stderr.log' for torchrun's --log-dir)",
                 dir, dir);
        return -1;
    }
    qsort(ns->v + before, ns->n - before, sizeof *ns->v, natural);
    return 0;
}

int doctor_log_arg(doctor *d, const char *arg, char *err, size_t errlen)
{
    struct stat st;
    names ns = {NULL, 0, 0};
    int rc = 0;
    if (!stat(arg, &st) && S_ISDIR(st.st_mode)) {
        rc = folder(arg, &ns, err, errlen);
    } else if (stat(arg, &st) && strpbrk(arg, "*?[")) {
        glob_t g;
        int grc = glob(arg, 0, NULL, &g);
        if (grc == GLOB_NOMATCH) {
            snprintf(err, errlen, "no file matches the log pattern %.300s", arg);
            rc = -1;
        } else if (grc) {
            snprintf(err, errlen, "cannot expand the log pattern %.300s: %s", arg,
                     grc == GLOB_NOSPACE ? "out of host memory" : "a folder could not be read");
            rc = -1;
        } else {
            for (size_t i = 0; i < g.gl_pathc && !rc; i++) {
                if (!stat(g.gl_pathv[i], &st) && S_ISDIR(st.st_mode))
                    rc = folder(g.gl_pathv[i], &ns, err, errlen);
                else if (add(&ns, g.gl_pathv[i])) {
                    snprintf(err, errlen, "log pattern %.300s: more than %d files, or out of host memory", arg,
                             MAX_NAMES);
                    rc = -1;
                }
            }
            globfree(&g);
            if (!rc)
                qsort(ns.v, ns.n, sizeof *ns.v, natural);
        }
    } else {
        return doctor_log(d, arg, err, errlen);
    }
    for (size_t i = 0; i < ns.n && !rc; i++)
        rc = doctor_log(d, ns.v[i], err, errlen);
    drop(&ns);
    return rc;
}
