/*
 * nvml.c: device memory by process on NVIDIA devices, through NVML, loaded at run time (the cuda backend's
 * proc_mem; docs/CONTRACTS.md, the NVML rows).
 *
 * Read as PyTorch reads it for its OOM message (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp,
 * reportProcessMemoryInfo, at eb42ad6eca0c; the entry points c10/cuda/driver_api.h C10_NVML_DRIVER_API): dlopen
 * libnvidia-ml.so.1, nvmlInit_v2 once, the device by its PCI bus id (nvmlDeviceGetHandleByPciBusId_v2: NVML numbers
 * devices its own way, CUDA_VISIBLE_DEVICES does not renumber them), then nvmlDeviceGetComputeRunningProcesses — the
 * unversioned export, whose entries are nvmlProcessInfo_v1_t {unsigned int pid; unsigned long long usedGpuMemory}
 * — asked again with a larger array while it answers NVML_ERROR_INSUFFICIENT_SIZE.
 *
 * What NVML does not give: in a container with its own PID namespace the PIDs are the host's, so this process is
 * not found by getpid() (outside.c then makes no split); on some drivers (Windows WDDM, MIG without privilege)
 * usedGpuMemory is NVML_VALUE_NOT_AVAILABLE: passed on as HBM__PROC_UNKNOWN, so the sum it is part of is unknown. NVML is thread-safe (its documentation,
 * "Thread Safety"); the library is loaded once per process and never closed.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml.h"

/* nvml.h (NVIDIA's, not installed here): nvmlReturn_t values and the v1 process entry. */
enum { NVML_SUCCESS = 0, NVML_ERROR_INSUFFICIENT_SIZE = 7 };
#define NVML_VALUE_NOT_AVAILABLE (~0ull)
typedef struct nvml_proc_v1 {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} nvml_proc_v1;
typedef void *nvml_device;

static struct {
    pthread_mutex_t lock;
    char tried[512]; /* the library last looked for and not found ("" : none yet) */
    void *lib;
    int (*init)(void);
    int (*by_pci)(const char *, nvml_device *);
    int (*procs)(nvml_device, unsigned int *, nvml_proc_v1 *);
} nv = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Load and initialise NVML once per process (a library that failed is not looked for again under the same name);
 * 0 when usable. */
static int nvml_ready(const char *path)
{
    pthread_mutex_lock(&nv.lock);
    path = path && *path ? path : "libnvidia-ml.so.1";
    if (!nv.lib && strcmp(nv.tried, path)) {
        snprintf(nv.tried, sizeof nv.tried, "%s", path);
        void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (lib) {
            *(void **)&nv.init = dlsym(lib, "nvmlInit_v2");
            *(void **)&nv.by_pci = dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2");
            *(void **)&nv.procs = dlsym(lib, "nvmlDeviceGetComputeRunningProcesses");
            if (nv.init && nv.by_pci && nv.procs && nv.init() == NVML_SUCCESS)
                nv.lib = lib;
            else
                dlclose(lib);
        }
    }
    int ok = nv.lib != NULL;
    pthread_mutex_unlock(&nv.lock);
    return ok ? 0 : -1;
}

int hbm__nvml_proc_mem(const char *path, const char *pci_bus_id, hbm__proc_use *out, size_t cap, size_t *n)
{
    nvml_device dev = NULL;
    if (nvml_ready(path) || nv.by_pci(pci_bus_id, &dev) != NVML_SUCCESS)
        return -1;
    unsigned int size = 16;
    nvml_proc_v1 *p = NULL;
    int rc;
    for (int tries = 0;; tries++) { /* the list may grow between two asks: a few tries, then give up */
        nvml_proc_v1 *q = realloc(p, (size ? size : 1) * sizeof *p);
        if (!q) {
            free(p);
            return -1;
        }
        p = q;
        unsigned int asked = size;
        rc = nv.procs(dev, &size, p);
        if (rc != NVML_ERROR_INSUFFICIENT_SIZE || tries == 4)
            break;
        if (size <= asked)
            size = asked * 2;
    }
    if (rc != NVML_SUCCESS) {
        free(p);
        return -1;
    }
    size_t k = 0;
    for (unsigned int i = 0; i < size; i++, k++)
        if (k < cap)
            out[k] = (hbm__proc_use){(int64_t)p[i].pid, p[i].usedGpuMemory == NVML_VALUE_NOT_AVAILABLE
                                                            ? HBM__PROC_UNKNOWN
                                                            : p[i].usedGpuMemory};
    free(p);
    *n = k;
    return 0;
}
