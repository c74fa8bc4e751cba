/*
 * fake_dcmi.c: a stand-in libdcmi.so for the acl backend's per-process memory query (src/backend/dcmi.c), written
 * from Huawei's DCMI API reference (hiascend.com: dcmi_init, dcmi_get_card_id_device_id_from_logicid,
 * dcmi_get_device_resource_info; HDK 24.1 to 26.10):
 *   - dcmi_init first: every other call answers an error before it (the reference's return codes: not 0).
 *   - the NPU of a logical id is (card, chip): here logical id L is card L / 2, chip L % 2 (two chips per card, as an
 *     Atlas 300I Duo or an A3 board has), so a caller that took the logical id for the card reads another NPU.
 *   - dcmi_get_device_resource_info fills at most 32 struct dcmi_proc_mem_info {int proc_id; unsigned long
 *     proc_mem_usage;} and their count: the PIDs the host's, bytes the device-side OS memory plus what the process
 *     allocated; an unknown (card, chip) is an error.
 *   - a refusal, as the reference's support tables give for some products and users (fake_dcmi_set(..., -1)).
 * What it cannot model: the list of an ordinary container's processes only, more than 32 processes, figures that
 * move on their own, the real error codes' values.
 */
#include <string.h>

#define API __attribute__((visibility("default")))
#define MAXP 32
#define CARDS 4

struct dcmi_proc_mem_info {
    int proc_id;
    unsigned long proc_mem_usage;
};

static struct {
    int init, refuse;
    struct dcmi_proc_mem_info procs[CARDS][2][MAXP];
    int nprocs[CARDS][2];
    long asks;
} D;

/* Controls for the tests: the processes of the NPU of logical id `logic` (n < 0: the query is refused). */
API int fake_dcmi_set(int logic, const int *pids, const unsigned long *bytes, int n)
{
    if (logic < 0 || logic >= 2 * CARDS || n > MAXP)
        return -1;
    D.refuse = n < 0;
    for (int i = 0; i < n; i++)
        D.procs[logic / 2][logic % 2][i] = (struct dcmi_proc_mem_info){pids[i], bytes[i]};
    D.nprocs[logic / 2][logic % 2] = n < 0 ? 0 : n;
    return 0;
}
API long fake_dcmi_asks(void) { return D.asks; }

API int dcmi_init(void)
{
    D.init = 1;
    return 0;
}

API int dcmi_get_card_id_device_id_from_logicid(int *card_id, int *device_id, unsigned int logic)
{
    if (!D.init)
        return -8001;
    if (!card_id || !device_id || logic >= 2 * CARDS)
        return -8002;
    *card_id = (int)logic / 2;
    *device_id = (int)logic % 2;
    return 0;
}

API int dcmi_get_device_resource_info(int card_id, int device_id, struct dcmi_proc_mem_info *info, int *num)
{
    if (!D.init)
        return -8001;
    if (card_id < 0 || card_id >= CARDS || device_id < 0 || device_id > 1 || !info || !num)
        return -8002;
    D.asks++;
    if (D.refuse)
        return -8255;
    *num = D.nprocs[card_id][device_id];
    memcpy(info, D.procs[card_id][device_id], (size_t)*num * sizeof *info);
    return 0;
}
