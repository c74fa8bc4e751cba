/*
 * env.h: the environment, read in one place (env.c). Every variable the library reads is a row of env.c's table;
 * nothing else in src/ calls getenv. Read at each call, not once: a program may set a variable between two
 * allocators (the tests do).
 */
#ifndef HBM_UTIL_ENV_H
#define HBM_UTIL_ENV_H

typedef enum hbm__env_var {
    HBM__ENV_CONF,              /* HBMALLOC_CONF: hbmalloc's own settings string, read strictly */
    HBM__ENV_PYTORCH_CUDA_CONF, /* PYTORCH_CUDA_ALLOC_CONF */
    HBM__ENV_PYTORCH_NPU_CONF,  /* PYTORCH_NPU_ALLOC_CONF */
    HBM__ENV_PYTORCH_CONF,      /* PYTORCH_ALLOC_CONF */
    HBM__ENV_TORCH_VERSION,     /* HBMALLOC_TORCH_VERSION: the PyTorch release a PYTORCH_* string is read as */
    HBM__ENV_TORCH_NPU_VERSION, /* HBMALLOC_TORCH_NPU_VERSION: the torch_npu release */
    HBM__ENV_QUIET,             /* HBMALLOC_QUIET: no warning on stderr */
    HBM__ENV_TOP_DIR,           /* HBMALLOC_TOP_DIR: where published records go */
    HBM__ENV_RANK,              /* RANK, else RANK_ID (torch_npu's launchers) */
    HBM__ENV_RANK_ID,
    HBM__ENV_LOCAL_RANK, /* LOCAL_RANK */
    HBM__ENV_WORLD_SIZE, /* WORLD_SIZE, else RANK_SIZE */
    HBM__ENV_RANK_SIZE,
    HBM__ENV_LIBCUDA,         /* HBMALLOC_LIBCUDA: the CUDA driver library to load */
    HBM__ENV_LIBASCENDCL,     /* HBMALLOC_LIBASCENDCL: the AscendCL library to load */
    HBM__ENV_PATH,            /* PATH: the programs the tool runs */
    HBM__ENV_OOM_DUMP_DIR,    /* HBMALLOC_OOM_DUMP_DIR: where a snapshot goes at each OOM (io/oom_dump.c) */
    HBM__ENV_OOM_DUMP_MAX,    /* HBMALLOC_OOM_DUMP_MAX: at most that many per allocator */
    HBM__ENV_OOM_DUMP_MAX_MB, /* HBMALLOC_OOM_DUMP_MAX_MB: the folder's hbmalloc-oom-* files at most that big */
    HBM__ENV_VARS
} hbm__env_var;

/* The variable's value, or NULL when it is not set. */
const char *hbm__env(hbm__env_var v);
/* Its name ("HBMALLOC_CONF"). */
const char *hbm__env_name(hbm__env_var v);
/* Its value as a decimal count (0 or more): -1 when it is unset or empty, -2 when it is not such a number. */
long long hbm__env_count(hbm__env_var v);
/* hbm__env_count(v), else hbm__env_count(alt) when v is not a count (RANK else RANK_ID, as the launchers set one);
 * -1 when neither is. One reading for the published record and the OOM dumps' names. */
long long hbm__env_count_or(hbm__env_var v, hbm__env_var alt);

#endif
