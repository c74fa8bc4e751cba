/* dcmi.h: device memory by process through Ascend's DCMI (dcmi.c), for the acl backend. */
#ifndef HBM_BACKEND_DCMI_H
#define HBM_BACKEND_DCMI_H

#include "backend.h"

/* The processes holding memory on the NPU of logical id logic_id (npu-smi's, which ASCEND_RT_VISIBLE_DEVICES lists),
 * DCMI loaded from path (NULL or "": libdcmi.so, else /usr/local/dcmi/libdcmi.so) at the first call: up to cap into
 * out, *n how many there are. 0, or -1 when DCMI is missing, refuses or does not know the device. Thread-safe. */
int hbm__dcmi_proc_mem(const char *path, int logic_id, hbm__proc_use *out, size_t cap, size_t *n);

#endif
