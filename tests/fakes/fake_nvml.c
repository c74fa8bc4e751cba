/*
 * fake_nvml.c: a stand-in libnvidia-ml.so for the cuda backend's per-process memory query (src/backend/nvml.c),
 * written from NVIDIA's NVML API reference (nvml.h, "Device Queries"), as PyTorch uses it
 * (pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp reportProcessMemoryInfo at eb42ad6eca0c):
 *   - nvmlInit_v2 must come first: every other call answers NVML_ERROR_UNINITIALIZED (1) before it.
 *   - nvmlDeviceGetHandleByPciBusId_v2 takes "domain:bus:device.function" in hex (the domain may be left out);
 *     an unknown bus id is NVML_ERROR_NOT_FOUND (6).
 *   - nvmlDeviceGetComputeRunningProcesses (the unversioned export: nvmlProcessInfo_v1_t entries {pid,
 *     usedGpuMemory}): *infoCount in is the array's size; when the processes do not fit it is set to how many there
 *     are and the call answers NVML_ERROR_INSUFFICIENT_SIZE (7) with nothing written; else *infoCount is how many
 *     were written. usedGpuMemory may be NVML_VALUE_NOT_AVAILABLE (~0ull) (Windows WDDM, some containers).
 * What it cannot model: the processes' figures moving on their own, MIG instances, PIDs of another namespace
 * beyond the test giving them (the test sets the list).
 */
#include <stdio.h>
#include <string.h>

#define API __attribute__((visibility("default")))
enum { SUCCESS = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_FOUND = 6, INSUFFICIENT_SIZE = 7 };
#define MAXP 64

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
} proc_v1;

static struct {
    int init;
    unsigned bus[4]; /* the bus of NVML's device i */
    int ndev;
    proc_v1 procs[4][MAXP];
    unsigned nprocs[4];
    long asks; /* calls of GetComputeRunningProcesses */
} N = {.bus = {0x3b, 0x5e, 0x86, 0xaf}, .ndev = 4};

/* Controls for the tests: the processes on the device at `bus`, and how many asks were made. */
API int fake_nvml_set(unsigned bus, const unsigned *pids, const unsigned long long *bytes, unsigned n)
{
    for (int d = 0; d < N.ndev; d++)
        if (N.bus[d] == bus && n <= MAXP) {
            for (unsigned i = 0; i < n; i++)
                N.procs[d][i] = (proc_v1){pids[i], bytes[i]};
            N.nprocs[d] = n;
            return 0;
        }
    return -1;
}
API long fake_nvml_asks(void) { return N.asks; }

API int nvmlInit_v2(void)
{
    N.init = 1;
    return SUCCESS;
}

API int nvmlDeviceGetHandleByPciBusId_v2(const char *id, void **dev)
{
    unsigned dom = 0, bus = 0, slot = 0, fn = 0;
    if (!N.init)
        return UNINITIALIZED;
    if (!id || !dev)
        return INVALID_ARGUMENT;
    if (sscanf(id, "%x:%x:%x.%x", &dom, &bus, &slot, &fn) != 4 && sscanf(id, "%x:%x.%x", &bus, &slot, &fn) != 3)
        return INVALID_ARGUMENT;
    for (int d = 0; d < N.ndev; d++)
        if (N.bus[d] == bus) {
            *dev = &N.procs[d];
            return SUCCESS;
        }
    return NOT_FOUND;
}

API int nvmlDeviceGetComputeRunningProcesses(void *dev, unsigned *count, proc_v1 *infos)
{
    if (!N.init)
        return UNINITIALIZED;
    if (!dev || !count)
        return INVALID_ARGUMENT;
    N.asks++;
    int d = (int)(((proc_v1(*)[MAXP])dev) - N.procs);
    if (*count < N.nprocs[d]) {
        *count = N.nprocs[d];
        return INSUFFICIENT_SIZE;
    }
    if (N.nprocs[d] && !infos)
        return INVALID_ARGUMENT;
    memcpy(infos, N.procs[d], N.nprocs[d] * sizeof *infos);
    *count = N.nprocs[d];
    return SUCCESS;
}
