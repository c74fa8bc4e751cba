/*
 * dcmi.c: device memory by process on Ascend NPUs, through DCMI (the driver's management library, which npu-smi
 * uses), loaded at run time: the acl backend's proc_mem (docs/CONTRACTS.md, the DCMI rows). AscendCL itself tells
 * memory per device only (aclrtGetMemInfo).
 *
 * Read from Huawei's DCMI API reference (hiascend.com, "dcmi_get_device_resource_info", "dcmi_get_card_id_device_id_
 * from_logicid"; Atlas A2/A3 HDK 24.1 to 26.10): dcmi_init once; the NPU is named by (card, chip), found from the
 * device's logical id (the id npu-smi shows, which ASCEND_RT_VISIBLE_DEVICES lists); dcmi_get_device_resource_info
 * fills at most 32 struct dcmi_proc_mem_info {int proc_id; unsigned long proc_mem_usage;} (bytes: "the device-side
 * OS memory and the memory the process allocated", PIDs of the host's namespace) and their count.
 *
 * What DCMI does not give: in an ordinary container the PIDs are the host's (this process is then not found: no
 * split, outside.c) and only that container's processes are listed; some products and users are refused (the
 * reference's support tables: Atlas 200I A2 says no for every deployment); more than 32 processes are not listed. The
 * library is loaded once per process, looked for as libdcmi.so (LD_LIBRARY_PATH, as CANN's set_env.sh sets it) and
 * then in /usr/local/dcmi (the driver's install), and never closed.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "dcmi.h"

#define DCMI_MAX_PROCS 32 /* the reference's bound of proc_num */

struct dcmi_proc_mem_info {
    int proc_id;
    unsigned long proc_mem_usage;
};

static struct {
    pthread_mutex_t lock;
    char tried[512]; /* the library last looked for and not found ("": none yet) */
    void *lib;
    int (*init)(void);
    int (*card_chip)(int *, int *, unsigned int);
    int (*procs)(int, int, struct dcmi_proc_mem_info *, int *);
} dc = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void *load(const char *path)
{
    if (path && *path)
        return dlopen(path, RTLD_NOW | RTLD_LOCAL);
    void *lib = dlopen("libdcmi.so", RTLD_NOW | RTLD_LOCAL);
    return lib ? lib : dlopen("/usr/local/dcmi/libdcmi.so", RTLD_NOW | RTLD_LOCAL);
}

/* Load and initialise DCMI once per process (a library that failed is not looked for again under the same name);
 * 0 when usable. */
static int dcmi_ready(const char *path)
{
    pthread_mutex_lock(&dc.lock);
    const char *name = path && *path ? path : "libdcmi.so";
    if (!dc.lib && strcmp(dc.tried, name)) {
        snprintf(dc.tried, sizeof dc.tried, "%s", name);
        void *lib = load(path);
        if (lib) {
            *(void **)&dc.init = dlsym(lib, "dcmi_init");
            *(void **)&dc.card_chip = dlsym(lib, "dcmi_get_card_id_device_id_from_logicid");
            *(void **)&dc.procs = dlsym(lib, "dcmi_get_device_resource_info");
            if (dc.init && dc.card_chip && dc.procs && dc.init() == 0)
                dc.lib = lib;
            else
                dlclose(lib);
        }
    }
    int ok = dc.lib != NULL;
    pthread_mutex_unlock(&dc.lock);
    return ok ? 0 : -1;
}

int hbm__dcmi_proc_mem(const char *path, int logic_id, hbm__proc_use *out, size_t cap, size_t *n)
{
    int card = 0, chip = 0, num = 0;
    struct dcmi_proc_mem_info p[DCMI_MAX_PROCS];
    if (logic_id < 0 || dcmi_ready(path) || dc.card_chip(&card, &chip, (unsigned int)logic_id) != 0 ||
        dc.procs(card, chip, p, &num) != 0 || num < 0)
        return -1;
    if (num > DCMI_MAX_PROCS) /* never, by the reference: taken as its bound */
        num = DCMI_MAX_PROCS;
    for (int i = 0; i < num && (size_t)i < cap; i++)
        out[i] = (hbm__proc_use){p[i].proc_id, p[i].proc_mem_usage};
    *n = (size_t)num;
    return 0;
}
