/*
 * env.c: the environment, read in one place: the table of every variable the library reads (env.h), and the one
 * getenv of src/. Owns no state: each call reads the variable as it is now.
 */
#include "util/env.h"

#include <errno.h>
#include <stdlib.h>

static const char *const names[HBM__ENV_VARS] = {
    [HBM__ENV_CONF] = "HBMALLOC_CONF",
    [HBM__ENV_PYTORCH_CUDA_CONF] = "PYTORCH_CUDA_ALLOC_CONF",
    [HBM__ENV_PYTORCH_NPU_CONF] = "PYTORCH_NPU_ALLOC_CONF",
    [HBM__ENV_PYTORCH_CONF] = "PYTORCH_ALLOC_CONF",
    [HBM__ENV_TORCH_VERSION] = "HBMALLOC_TORCH_VERSION",
    [HBM__ENV_TORCH_NPU_VERSION] = "HBMALLOC_TORCH_NPU_VERSION",
    [HBM__ENV_QUIET] = "HBMALLOC_QUIET",
    [HBM__ENV_TOP_DIR] = "HBMALLOC_TOP_DIR",
    [HBM__ENV_RANK] = "RANK",
    [HBM__ENV_RANK_ID] = "RANK_ID",
    [HBM__ENV_LOCAL_RANK] = "LOCAL_RANK",
    [HBM__ENV_WORLD_SIZE] = "WORLD_SIZE",
    [HBM__ENV_RANK_SIZE] = "RANK_SIZE",
    [HBM__ENV_LIBCUDA] = "HBMALLOC_LIBCUDA",
    [HBM__ENV_LIBASCENDCL] = "HBMALLOC_LIBASCENDCL",
    [HBM__ENV_PATH] = "PATH",
    [HBM__ENV_OOM_DUMP_DIR] = "HBMALLOC_OOM_DUMP_DIR",
    [HBM__ENV_OOM_DUMP_MAX] = "HBMALLOC_OOM_DUMP_MAX",
    [HBM__ENV_OOM_DUMP_MAX_MB] = "HBMALLOC_OOM_DUMP_MAX_MB",
};

const char *hbm__env(hbm__env_var v) { return v < HBM__ENV_VARS ? getenv(names[v]) : NULL; }

const char *hbm__env_name(hbm__env_var v) { return v < HBM__ENV_VARS ? names[v] : ""; }

long long hbm__env_count(hbm__env_var v)
{
    const char *s = hbm__env(v);
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    return *end || x < 0 || errno || (*s < '0' || *s > '9') ? -2 : x;
}

long long hbm__env_count_or(hbm__env_var v, hbm__env_var alt)
{
    long long x = hbm__env_count(v);
    if (x < 0)
        x = hbm__env_count(alt);
    return x < 0 ? -1 : x;
}
