/* nvml.h: device memory by process through NVML (nvml.c), for the cuda backend. */
#ifndef HBM_BACKEND_NVML_H
#define HBM_BACKEND_NVML_H

#include "backend.h"

/* The processes holding memory on the device at pci_bus_id ("0000:3b:00.0", as cuDeviceGetPCIBusId writes it),
 * NVML loaded from path (NULL or "": libnvidia-ml.so.1) at the first call: up to cap into out, *n how many there
 * are. 0, or -1 when NVML is missing, fails or does not know the device. Thread-safe. */
int hbm__nvml_proc_mem(const char *path, const char *pci_bus_id, hbm__proc_use *out, size_t cap, size_t *n);

#endif
