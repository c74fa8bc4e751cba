/*
 * doctor_log.c: known failures in a training log, for `hbmalloc doctor --log`.
 * PyTorch / torch_npu / hbmalloc out-of-memory messages (the numbers parsed:
 * request, capacity, free, allocated, reserved, reserved-but-unallocated), the
 * torch_npu expandable-segments warnings, HCCL and NCCL errors with what the
 * code means and a checklist, AscendCL error codes, and driver/firmware
 * mismatch lines. One finding per kind of failure, with how often it was seen
 * and the first line that showed it.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util.h"
#include "doctor.h"
#include "doctor_ranks.h"
#include "wrap.h"
#include "trace/trace.h"

/* The size just after `phrase` in line (e.g. "Tried to allocate "), or -1. */
static double size_after(const char *line, const char *phrase)
{
    const char *p = strstr(line, phrase);
    size_t n;
    if (!p)
        return -1;
    double v = doctor_size(p + strlen(phrase), &n);
    return n ? v : -1;
}

/* The size just before `phrase` (e.g. " total capacity"), or -1. */
static double size_before(const char *line, const char *phrase)
{
    const char *p = strstr(line, phrase);
    if (!p)
        return -1;
    const char *q = p;
    while (q > line && q[-1] == ' ')
        q--;
    while (q > line && isalpha((unsigned char)q[-1]))
        q--;
    while (q > line && q[-1] == ' ')
        q--;
    while (q > line && (isdigit((unsigned char)q[-1]) || q[-1] == '.'))
        q--;
    size_t n;
    double v = doctor_size(q, &n);
    return n && q + n <= p ? v : -1;
}

typedef struct where {
    const char *path;
    long line;
    const char *text;
} where;

/* A line's code, for the findings whose title names a call and its code (seen's fold). */
#define NO_CODE LONG_MIN

/* A finding for this kind, merged with an earlier one of the same id and title (out-of-memory: the same id). A
 * kind whose title names the failing call (hccl-error, acl-error: code is the call's result) keeps DOC_MAX_TITLES
 * calls of one code apart, then counts the rest of that code in its last finding: same code, same severity and
 * reason. Past DOC_MAX_CODES titles of one id (a log of thousands of codes), the rest are counted in the id's last
 * finding, which takes the more severe of the two. The rank's event carries the line's own title either way. */
static finding *seen(doctor *d, const where *w, int severity, const char *id, const char *title, long code)
{
    int by_id = !strncmp(id, "oom-", 4), titles = 0, same_code = 0;
    size_t last = 0, last_code = 0;
    for (size_t i = 0; i < d->n; i++) {
        if (strcmp(d->f[i].id, id))
            continue;
        titles++, last = i;
        if (code != NO_CODE && d->f[i].code == code)
            same_code++, last_code = i;
        if (by_id ? !strncmp(d->f[i].title, title, 4) /* "NPU " or "GPU " */ : !strcmp(d->f[i].title, title)) {
            d->f[i].count += d->f[i].count < INT_MAX;
            doctor_ranks_event(d, i, title);
            return NULL;
        }
    }
    if (same_code >= DOC_MAX_TITLES || titles >= DOC_MAX_CODES) {
        size_t into = same_code >= DOC_MAX_TITLES ? last_code : last;
        d->f[into].other_titles++;
        d->f[into].severity = severity > d->f[into].severity ? severity : d->f[into].severity;
        doctor_ranks_event(d, into, title);
        return NULL;
    }
    finding *f = doctor_add(d, severity, id);
    snprintf(f->title, sizeof f->title, "%s", title);
    f->code = code;
    doctor_evidence(f, w->path, w->line, w->text);
    if (d->n && f == &d->f[d->n - 1])
        doctor_ranks_event(d, d->n - 1, title);
    return f;
}

static int has(const char *line, const char *s) { return strstr(line, s) != NULL; }

/* ---- out of memory ---- */

/* The last part of every OOM message the doctor reads: once it is there, the figures are all there. */
static int oom_complete(const char *text)
{
    return strstr(text, "reserved in total by PyTorch") || strstr(text, "is reserved by PyTorch but unallocated") ||
           strstr(text, "is reserved but unallocated") || strstr(text, "more than 1EB");
}

static int oom_start(const char *line) { return has(line, "out of memory") && has(line, "Tried to allocate"); }

/* How many of the message's figures can be read from text (the request, capacity, free, allocated, reserved). */
static int oom_figures(const char *text)
{
    return (size_after(text, "Tried to allocate ") >= 0) +
           (size_after(text, "total capacity of ") >= 0 || size_before(text, " total capacity") >= 0) +
           (size_after(text, "of which ") >= 0 || size_before(text, " free;") >= 0) +
           (size_before(text, " is allocated by") >= 0 || size_before(text, " already allocated") >= 0) +
           (size_before(text, " reserved in total by PyTorch") >= 0 ||
            size_before(text, " is reserved by PyTorch but unallocated") >= 0 ||
            size_before(text, " is reserved but unallocated") >= 0);
}

/* A message the log cut (wrapped, or lost its end): no conclusion from half the figures. */
static void oom_unreadable(doctor *d, const where *w, const char *line)
{
    int npu = strstr(line, "NPU out of memory") != NULL;
    finding *f = seen(d, w, SEV_WARNING, "oom-unreadable",
                      npu ? "NPU out of memory, but the message is cut in the log: its figures cannot all be read"
                          : "GPU out of memory, but the message is cut in the log: its figures cannot all be read",
                      NO_CODE);
    if (!f)
        return;
    snprintf(f->why, sizeof f->why,
             "The out-of-memory message starts here but its end (the reserved memory) is "
             "neither on this line nor on the next few: the log wrapped or truncated it. Without the reserved and "
             "allocated figures, fragmentation cannot be told from a device that is too small, so the doctor draws "
             "no conclusion.");
    doctor_next(f, "give the doctor the whole message: the process's own stderr, or the log without line wrapping");
}

static void oom(doctor *d, const where *w, const char *line)
{
    int npu = strstr(line, "NPU out of memory") != NULL;
    int ours = strstr(line, "out of memory on ") != NULL && strstr(line, "by hbmalloc") != NULL;
    double req = size_after(line, "Tried to allocate ");
    if (req < 0)
        return;
    double total = size_after(line, "total capacity of ");
    if (total < 0)
        total = size_after(line, "total capacty of ");
    if (total < 0)
        total = size_before(line, " total capacity");
    double freeb = size_after(line, "of which ");
    if (freeb < 0)
        freeb = size_before(line, " free;");
    double alloc = size_before(line, " is allocated by");
    if (alloc < 0)
        alloc = size_before(line, " already allocated");
    double rbu = size_before(line, " is reserved by PyTorch but unallocated");
    if (rbu < 0)
        rbu = size_before(line, " is reserved but unallocated");
    double reserved = size_before(line, " reserved in total by PyTorch");
    if (rbu < 0 && reserved >= 0 && alloc >= 0)
        rbu = reserved - alloc;
    if (reserved < 0 && rbu >= 0 && alloc >= 0)
        reserved = alloc + rbu;
    double in_use = size_before(line, " memory in use");
    doctor_ranks_oom_figure(d, rbu);
    const char *who = ours ? "hbmalloc" : npu ? "torch_npu" : "PyTorch";
    const char *var = npu || strstr(line, "acl device") ? "PYTORCH_NPU_ALLOC_CONF" : "PYTORCH_CUDA_ALLOC_CONF";
    int is_npu = var[8] == 'N';
    char s_req[32], s_total[32], s_free[32], s_alloc[32], s_res[32], s_rbu[32], s_other[32];
    doctor_format_size(req, s_req, sizeof s_req);
    doctor_format_size(total, s_total, sizeof s_total);
    doctor_format_size(freeb, s_free, sizeof s_free);
    doctor_format_size(alloc, s_alloc, sizeof s_alloc);
    doctor_format_size(reserved, s_res, sizeof s_res);
    doctor_format_size(rbu, s_rbu, sizeof s_rbu);
    double other = -1;
    if (in_use >= 0 && reserved >= 0)
        other = in_use - reserved; /* this process, outside the caching allocator */
    else if (total >= 0 && freeb >= 0 && reserved >= 0)
        other = total - freeb - reserved; /* everything that is neither free nor the allocator's */
    doctor_format_size(other, s_other, sizeof s_other);
    int frag = rbu >= 0 && rbu >= req && rbu > 0;
    char title[320];
    if (frag)
        snprintf(title, sizeof title,
                 "%s out of memory with %s reserved but unallocated: fragmentation (a %s request "
                 "failed)",
                 is_npu ? "NPU" : "GPU", s_rbu, s_req);
    else
        snprintf(title, sizeof title, "%s out of memory: the live tensors do not fit (a %s request failed)",
                 is_npu ? "NPU" : "GPU", s_req);
    finding *f = seen(d, w, SEV_ERROR, frag ? "oom-fragmentation" : "oom-capacity", title, NO_CODE);
    if (!f)
        return;
    char pct[32] = "?";
    if (reserved > 0 && rbu >= 0)
        snprintf(pct, sizeof pct, "%.0f%%", 100.0 * rbu / reserved);
    snprintf(f->why, sizeof f->why,
             "The device has %s in all, %s of it free. %s's caching allocator held %s: %s in live tensors and %s "
             "(%s of what it held) cached in free blocks but not handed out. %s%s%s",
             total >= 0 ? s_total : "an unknown amount", freeb >= 0 ? s_free : "an unknown amount", who,
             reserved >= 0 ? s_res : "?", alloc >= 0 ? s_alloc : "?", rbu >= 0 ? s_rbu : "?", pct,
             frag ? "The cached free memory is at least the size of the request, so the memory exists but is split "
                    "into pieces none of which fits: fragmentation."
                  : "Even the cached free memory could not hold the request: the job needs more than this device.",
             other > 0 ? " Outside the caching allocator, about " : "", other > 0 ? s_other : "");
    if (other > 0) {
        size_t n = strlen(f->why);
        snprintf(f->why + n, sizeof f->why - n, " of device memory is used by %s.",
                 is_npu ? "other processes, the runtime and HCCL's communication buffers (2 x HCCL_BUFFSIZE MB per "
                          "communicator)"
                        : "other processes, the CUDA context and NCCL's buffers");
    }
    if (is_npu)
        d->oom_npu = 1;
    if (total > 0 && total <= (double)TRACE_MAX_BYTES &&
        d->oom_capacity <= 0) /* 2^48: no device has more (a replay's) */
        d->oom_capacity = total;
    int no_vmm = is_npu ? (d->npu_vmm == 0 || d->probe_failed) : d->cuda_vmm == 0;
    char qlog[600];
    hbm__shell_quote(w->path, qlog, sizeof qlog);
    if (frag) {
        if (no_vmm) {
            doctor_next(f,
                        "expandable segments would cure this but this %s cannot do them (%s); which "
                        "max_split_size_mb / garbage_collection_threshold values help this job cannot be read from "
                        "a log: replay a snapshot of it (below), or give it to the doctor with this log:\n$ hbmalloc "
                        "doctor --trace oom.pickle --log %s",
                        is_npu ? "NPU" : "GPU",
                        is_npu ? (d->npu_vmm_why[0] ? d->npu_vmm_why : "the log shows the virtual-memory probe failing")
                               : "no CUDA virtual memory management",
                        qlog);
        } else {
            doctor_next(f,
                        "export %s='expandable_segments:True' (grows segments in place: reserved stays close to "
                        "allocated; what %s's own out-of-memory message advises)%s",
                        var, who,
                        is_npu ? "; torch_npu 2.13 and later refuse it together with max_split_size_mb or "
                                 "garbage_collection_threshold, and it needs Ascend HDK >= 23.0.0 (run hbmalloc doctor "
                                 "on the machine)"
                               : "");
        }
    } else {
        doctor_next(f, "make the live data smaller: smaller micro-batch or sequence length, activation checkpointing, "
                       "mixed precision, or shard the model over more devices");
        if (other > 0.05 * total && total > 0)
            doctor_next(f,
                        "%s is held outside this allocator: look at the process table of %s for other jobs on the "
                        "device%s",
                        s_other, is_npu ? "npu-smi info" : "nvidia-smi",
                        is_npu ? ", and lower HCCL_BUFFSIZE if many communicators are created" : "");
    }
    /* The capacity as one --capacity argument: "60.97GiB" (or bytes below 1 KiB). */
    char s_cap[40];
    const char *sp = strchr(s_total, ' ');
    if (sp && sp[1] != 'b')
        snprintf(s_cap, sizeof s_cap, "%.*s%s", (int)(sp - s_total), s_total, sp + 1);
    else
        snprintf(s_cap, sizeof s_cap, "%.0f", total);
    const char *ver = is_npu ? d->torch_npu_version : d->torch_version;
    char sweep_cmd[300];
    if (total > 0)
        snprintf(sweep_cmd, sizeof sweep_cmd,
                 "\n$ hbmalloc sweep oom.pickle --capacity %s --backend sim:dialect=%s%s%s%s", s_cap,
                 is_npu ? "npu" : "cuda", no_vmm ? ",vmm=off" : "",
                 ver[0] ? (is_npu ? " --torch-npu " : " --torch ") : "", ver[0] ? ver : "");
    else /* no capacity known: a template, not a command */
        snprintf(sweep_cmd, sizeof sweep_cmd, " hbmalloc sweep oom.pickle --capacity SIZE --backend sim:dialect=%s%s",
                 is_npu ? "npu" : "cuda", no_vmm ? ",vmm=off" : "");
    doctor_next(f,
                "measure instead of guessing: record a snapshot (%s.memory._record_memory_history(max_entries="
                "100000) ... %s.memory._dump_snapshot(\"oom.pickle\")); this ranks the settings against yours:%s"
                "\nand this says what capacity the job needs:\n$ hbmalloc replay oom.pickle --min-capacity "
                "--backend sim:dialect=%s%s",
                is_npu ? "torch_npu.npu" : "torch.cuda", is_npu ? "torch_npu.npu" : "torch.cuda", sweep_cmd,
                is_npu ? "npu" : "cuda", no_vmm ? ",vmm=off" : "");
}

/* ---- HCCL ---- */

static const char *const hccl_names[] = {"HCCL_SUCCESS",
                                         "HCCL_E_PARA",
                                         "HCCL_E_PTR",
                                         "HCCL_E_MEMORY",
                                         "HCCL_E_INTERNAL",
                                         "HCCL_E_NOT_SUPPORT",
                                         "HCCL_E_NOT_FOUND",
                                         "HCCL_E_UNAVAIL",
                                         "HCCL_E_SYSCALL",
                                         "HCCL_E_TIMEOUT",
                                         "HCCL_E_OPEN_FILE_FAILURE",
                                         "HCCL_E_TCP_CONNECT",
                                         "HCCL_E_ROCE_CONNECT",
                                         "HCCL_E_TCP_TRANSFER",
                                         "HCCL_E_ROCE_TRANSFER",
                                         "HCCL_E_RUNTIME",
                                         "HCCL_E_DRV",
                                         "HCCL_E_PROFILING",
                                         "HCCL_E_CCE",
                                         "HCCL_E_NETWORK",
                                         "HCCL_E_AGAIN",
                                         "HCCL_E_REMOTE",
                                         "HCCL_E_SUSPENDING",
                                         "HCCL_E_OPRETRY_FAIL",
                                         "HCCL_E_OOM"};
static const char *const hccl_meaning[] = {"success",
                                           "a parameter is wrong",
                                           "an empty (NULL) pointer",
                                           "memory error",
                                           "internal error",
                                           "not supported",
                                           "not found",
                                           "resource unavailable",
                                           "a system call failed",
                                           "timed out",
                                           "a file could not be opened",
                                           "TCP connection failed",
                                           "RoCE connection failed",
                                           "TCP transfer failed",
                                           "RoCE transfer failed",
                                           "a runtime (AscendCL) call failed",
                                           "a driver call failed",
                                           "profiling error",
                                           "CCE error",
                                           "network error",
                                           "try again",
                                           "error on a remote rank",
                                           "suspending",
                                           "operation retry failed",
                                           "out of memory"};

/* HCCL found no device memory for a communicator's buffers (HCCL_E_OOM): what to leave free, sized from
 * HCCL_BUFFSIZE as this process sees it (MB, default 200; each communicator takes 2 x HCCL_BUFFSIZE: CANN 8.0's
 * environment variable reference, envref_07_0080). With hbmalloc as the allocator the headroom keeps it free
 * (hbm_headroom_mb: docs/CONFIGURATION.md); without, the memory fraction does. */
static void hccl_oom_next(finding *f)
{
    int set;
    long mb = doctor_hccl_buffsize_mb(&set);
    doctor_next(f, "lower HCCL_BUFFSIZE (MB, %s %ld) or leave more memory free (memory fraction)",
                set ? "here" : "default", mb);
    doctor_headroom_next(f, "HCCL", "");
}

static void hccl(doctor *d, const where *w, const char *func, int code)
{
    char title[320];
    const char *name = code >= 0 && code <= 24 ? hccl_names[code] : "an unknown HcclResult";
    snprintf(title, sizeof title, "HCCL error: %s returned %d (%s)", func, code, name);
    finding *f = seen(d, w, SEV_ERROR, "hccl-error", title, code);
    if (!f)
        return;
    snprintf(
        f->why, sizeof f->why, "%s is %s, \"%s\" (hccl_types.h). %s", name,
        code >= 0 && code <= 24 ? "HcclResult" : "not a known code", code >= 0 && code <= 24 ? hccl_meaning[code] : "?",
        code == 2 ? "No official page ties error 2 of HcclGetRootInfo to one cause; candidates, unconfirmed: the "
                    "process had no device set when the communicator was created (torch.npu.set_device(local_rank) "
                    "must come before init_process_group), an earlier runtime failure left a resource NULL (look "
                    "for 207000 / 'driver and firmware packages do not match' or an expandable-segments warning "
                    "above it), or the driver, firmware, CANN and torch_npu versions do not match."
        : code == 7 || code == 11 ? "Usually a port conflict: another job (or a previous run that has not "
                                    "released its sockets) holds HCCL's ports ('Failed to bind the IP port')."
        : code == 9  ? "A peer did not arrive in time: one rank crashed or started late, or the network between "
                       "nodes is blocked."
        : code == 15 ? "A runtime call inside HCCL failed: the EE/EL lines around it name the runtime error "
                       "(device ids, ASCEND_RT_VISIBLE_DEVICES)."
        : code == 19 ? "The network setup is wrong: rank table, HCCL_IF_IP / interface, or (in containers) no "
                       "/etc/passwd entry for the user."
        : code == 24 ? "HCCL could not get device memory for its buffers (2 x HCCL_BUFFSIZE MB per communicator)."
                     : "");
    doctor_next(f, "run the same job on one card: if it works there, the device and memory are fine and the problem "
                   "is communication");
    doctor_next(f, "npu-smi info on every node: every card Health OK, and no leftover processes holding the cards");
    doctor_next(f, "dmesg | tail -50 and the device logs (~/ascend/log or /var/log/npu/slog) for driver errors at the "
                   "time of the failure");
    doctor_next(f, "versions must match on every node: driver, firmware (npu-smi info -t board -i 0: Compatibility : "
                   "OK), CANN toolkit, torch_npu; hbmalloc doctor shows them");
    if (code == 7 || code == 11)
        doctor_next(f, "free the ports or move HCCL's: export HCCL_HOST_SOCKET_PORT_RANGE=auto (or a free range)");
    else if (code == 9)
        doctor_next(f, "raise HCCL_CONNECT_TIMEOUT and look for the first rank that failed");
    else if (code == 24)
        hccl_oom_next(f);
    else if (code == 2)
        doctor_next(f, "set the device before creating the process group: torch.npu.set_device(local_rank)");
}

/* ---- one line ---- */

static void acl_code(doctor *d, const where *w, const char *func, int code)
{
    const char *name = hbm_backend_error_name("acl", code);
    char title[320];
    snprintf(title, sizeof title, "NPU runtime error: %s returned %d (%s)", func, code, name ? name : "unknown code");
    finding *f = seen(d, w, code == 207000 ? SEV_WARNING : SEV_ERROR, "acl-error", title, code);
    if (!f)
        return;
    snprintf(f->why, sizeof f->why, "AscendCL error %d is %s.%s", code, name ? name : "not in the known table",
             code == 207000 ? " The runtime refuses a feature: usually the driver and firmware do not match, or the "
                              "driver is older than the feature (virtual memory needs Ascend HDK 23.0.0)."
             : code == 207001 || code == 207018 ? " The device is out of memory."
             : code == 507054                   ? " An uncorrectable HBM error: the card needs attention."
                                                : "");
    doctor_next(f, "the lines after it (EE..../EL.... codes) carry the runtime's own message; ASCEND_LAUNCH_BLOCKING=1 "
                   "makes the failing operator report where it happens");
    if (code == 207000)
        doctor_next(f, "run hbmalloc doctor on the machine: it compares the driver, firmware and their compatible "
                       "ranges");
}

static const char *after_spaces(const char *p)
{
    while (*p == ' ' || *p == ':')
        p++;
    return p;
}

/* torch_npu's "<tag> F(args), error code is N": the function name (up to a char of stop) and N (-1 if absent). */
static int function_error(const char *line, const char *tag, const char *stop, char *func, size_t len, int *code)
{
    const char *t = strstr(line, tag);
    if (!t)
        return 0;
    const char *p = after_spaces(t + strlen(tag));
    size_t n = strcspn(p, stop);
    const char *c = strstr(p, "error code is ");
    snprintf(func, len, "%.*s", (int)hbm__utf8_cut(p, n < 70 ? n : 70), p);
    *code = c ? atoi(c + 14) : -1;
    return 1;
}

/* Failures recognised by fixed text alone: any of the patterns, one finding with fixed advice. The "early" ones
 * are tried before the HCCL/ACL/NCCL lines (their text can carry those names), the others after. */
typedef struct known_line {
    int early, severity;
    const char *patterns[4];
    const char *id, *title, *why;
    const char *next[3];
} known_line;

static const known_line known[] = {
    {1,
     SEV_ERROR,
     {"expandable_segments feature is not supportted", "expandable_segments feature is not supported",
      "expandable_segments setting failure"},
     "expandable-ignored",
     "torch_npu turned expandable segments off: the device refused virtual memory",
     "torch_npu probes aclrtReserveMemAddress when it reads the settings; on failure it prints this and runs with "
     "expandable_segments:False, so fragmentation stays and out-of-memory errors can follow. The probe fails when the "
     "driver (HDK) is older than 23.0.0 or the driver and firmware packages do not match (the runtime answers 207000, "
     "ACL_ERROR_RT_FEATURE_NOT_SUPPORT).",
     {"run hbmalloc doctor on the machine (no --log): it reads the driver, firmware and their compatible ranges and "
      "says which",
      "upgrade to a matching driver and firmware pair, Ascend HDK >= 23.0.0; npu-smi info -t board -i 0 must say "
      "Compatibility : OK",
      "meanwhile remove expandable_segments from PYTORCH_NPU_ALLOC_CONF (it is off anyway), and to choose "
      "max_split_size_mb / garbage_collection_threshold replay a snapshot of the job on this device: hbmalloc doctor "
      "--trace SNAPSHOT.pickle"}},
    {1,
     SEV_ERROR,
     {"driver and firmware packages do not match", "get device uuid failed"},
     "ascend-driver-firmware-mismatch",
     "the runtime reports that the driver and firmware packages do not match",
     "A driver paired with a firmware outside its compatible_version_fw range refuses virtual memory (no expandable "
     "segments) and device-UUID/IPC calls that multi-card runs need (207000).",
     {"compare cat /usr/local/Ascend/driver/version.info (compatible_version_fw) with "
      "/usr/local/Ascend/firmware/version.info (Version), or run hbmalloc doctor there",
      "install the matching driver or firmware and reboot"}},
    {0,
     SEV_ERROR,
     {"CUDA driver version is insufficient for CUDA runtime version", "Driver/library version mismatch",
      "forward compatibility was attempted", "couldn't communicate with the NVIDIA driver"},
     "cuda-driver-mismatch",
     "the NVIDIA driver does not match the CUDA runtime or the kernel module",
     "The user-space libraries, the kernel module and the CUDA runtime the framework was built with must agree; a "
     "driver upgrade without a reboot, or a container whose CUDA is newer than the host driver, gives this.",
     {"nvidia-smi: its Driver Version and CUDA Version are what the host offers; the framework's CUDA "
      "(torch.version.cuda) must not be newer",
      "after a driver upgrade, reboot (or reload the nvidia kernel modules)"}},
    {0,
     SEV_WARNING,
     {"expandable_segments not supported on this platform"},
     "expandable-ignored-cuda",
     "PyTorch ignored expandable_segments:True on this platform",
     "This PyTorch build or platform has no CUDA virtual-memory support (built without the driver API, or not "
     "Linux/CUDA), so segments are whole and fragmentation stays.",
     {"use a PyTorch build for Linux with CUDA >= 11.x, or hbmalloc's plug-in (libhbmalloc_torch.so), which detects "
      "virtual memory at run time",
      "otherwise tune max_split_size_mb with hbmalloc sweep SNAPSHOT --no-expandable"}},
};

/* The first known line of this phase (early or not) that matches: 1 when one did. */
static int known_match(doctor *d, const where *w, const char *line, int early)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        const known_line *k = &known[i];
        int hit = 0;
        for (int j = 0; j < 4 && k->patterns[j] && !hit; j++)
            hit = has(line, k->patterns[j]);
        if (k->early != early || !hit)
            continue;
        finding *f = seen(d, w, k->severity, k->id, k->title, NO_CODE);
        if (f) {
            snprintf(f->why, sizeof f->why, "%s", k->why);
            for (int j = 0; j < 3 && k->next[j]; j++)
                doctor_next(f, "%s", k->next[j]);
        }
        return 1;
    }
    return 0;
}

/* NCCL's result classes: the text of its message or the enum name, and what it usually means. */
static const struct {
    const char *text, *name, *why;
} nccl_classes[] = {
    {"unhandled system error", "ncclSystemError",
     "A system call or external library failed: sockets, shared memory (/dev/shm too small in containers), or the "
     "network."},
    {"unhandled cuda error", "ncclUnhandledCudaError",
     "A CUDA call inside NCCL failed: often out of device memory for NCCL's buffers, or a device fault (Xid)."},
    {"remote process exited", "ncclRemoteError", "Another rank died or the network dropped."},
    {"invalid usage", "ncclInvalidUsage",
     "The ranks called collectives inconsistently (order, sizes or devices differ)."},
    {"internal error", "ncclInternalError", "NCCL failed; its own log says where."},
};

/* NCCL found no device memory. Its own words: CUDACHECK's WARN("Cuda failure '%s'") and CUCHECK's WARN("Cuda failure
 * %d '%s'") with CUDA's "out of memory" (NVIDIA/nccl/src/include/checks.h:18 and cudawrap.h:37 at nccl4py-v0.3.1),
 * alloc.h's WARN("Failed to CUDA malloc|calloc %ld bytes") (:462, :493); torch repeats the first on a line of its own
 * after ncclUnhandledCudaError, under "Last error:" (getNcclErrorDetailStr, pytorch/pytorch's
 * torch/csrc/distributed/c10d/NCCLUtils.cpp: interpret + "\nLast error:\n" + ncclGetLastError()). The cause line
 * stands alone, so it is recognised alone: "Cuda failure" is NCCL's phrase. */
static int nccl_oom(doctor *d, const where *w, const char *line)
{
    if (!(has(line, "Cuda failure") && has(line, "'out of memory'")) &&
        !(has(line, "NCCL WARN") && (has(line, "Failed to CUDA malloc") || has(line, "Failed to CUDA calloc"))))
        return 0;
    finding *f =
        seen(d, w, SEV_ERROR, "nccl-error", "NCCL out of device memory: no room for a communicator's buffers", NO_CODE);
    if (f) {
        snprintf(f->why, sizeof f->why,
                 "NCCL allocates its buffers with the CUDA runtime or driver, outside the framework's caching "
                 "allocator, when a communicator is created or first used, and CUDA answered 'out of memory' (NCCL's "
                 "CUDACHECK / CUCHECK; in torch's message ncclUnhandledCudaError, the cause on its 'Last error:' "
                 "line). The caching allocator keeps what it freed for reuse, so the device can look used although "
                 "the tensors need less.");
        doctor_next(f, "rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ALLOC for the sizes NCCL asked for");
        doctor_next(f, "create the process groups before the model and data fill the device, or release the cache "
                       "first (torch.cuda.empty_cache()) where they are created lazily");
        doctor_headroom_next(f, "NCCL", "");
    }
    return 1;
}

/* A collective the process group's watchdog gave up on: "[Rank N] Watchdog caught collective operation timeout:
 * WorkNCCL(SeqNum=.., OpType=.., Timeout(ms)=600000) ran for 600081 milliseconds before timing out."
 * (pytorch/pytorch's torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, WorkNCCL::checkTimeout; a public log's build
 * prints it from ProcessGroupNCCL.cpp:629, SOURCES.md). torch_npu's ProcessGroupHCCL is modelled on it: a line that
 * names WorkHCCL is taken as HCCL's (not checked against its source). Usually not a fault of its own: a peer stopped
 * calling collectives (doctor_ranks.c orders the ranks' failures). */
static int watchdog_timeout(doctor *d, const where *w, const char *line)
{
    if (!has(line, "Watchdog caught collective operation timeout"))
        return 0;
    int hc = has(line, "WorkHCCL");
    finding *f = seen(d, w, SEV_ERROR, hc ? "hccl-error" : "nccl-error",
                      hc ? "HCCL error: a collective timed out (the process group's watchdog)"
                         : "NCCL error: a collective timed out (the process group's watchdog)",
                      NO_CODE);
    if (f) {
        snprintf(f->why, sizeof f->why,
                 "A collective did not finish within the process group's timeout (Timeout(ms) in the line; "
                 "PyTorch's default for NCCL is 10 minutes): a peer stopped calling collectives because it failed "
                 "or hangs, or the ranks called different collectives. The peer's own failure is the cause: give "
                 "the doctor every rank's log to find it.");
        doctor_next(f, "hbmalloc doctor --no-env --log 'logs/*.log' (every rank's log, quoted: the doctor expands "
                       "the pattern) names the rank that failed first");
        doctor_next(f, "TORCH_NCCL_TRACE_BUFFER_SIZE=2000 keeps the flight recorder's trace of the stuck collective");
    }
    return 1;
}

/* HCCL's execution timeout in its own log (plog): "[ERROR] HCCL(pid,name):YYYY-MM-DD-HH:MM:SS.mmm.uuu
 * [task_exception_handler.cc:908] [tid][TaskExecStage][Timeout][Host]Task run failed, ..."
 * (hicann/hccl/docs/zh/user_guide/fault_diagnosis/task_exec_stage.md:118-120 at 09300b70). Other plog ERROR lines
 * are left to the lines around them. */
static int hccl_plog_timeout(doctor *d, const where *w, const char *line)
{
    if (!has(line, "[ERROR] HCCL(") || !has(line, "[Timeout]"))
        return 0;
    finding *f = seen(d, w, SEV_ERROR, "hccl-error", "HCCL error: a collective timed out (TaskExecStage)", NO_CODE);
    if (f) {
        snprintf(f->why, sizeof f->why,
                 "HCCL waited HCCL_EXEC_TIMEOUT (default 1836 s) for a peer: one rank stopped calling collectives "
                 "(it failed first, or hangs), or the ranks called different collectives, sizes or types "
                 "(hicann/hccl's fault diagnosis, TaskExecStage). The first failure in time across the ranks is "
                 "the cause.");
        doctor_next(f, "give the doctor every rank's log and plog: hbmalloc doctor --no-env --log 'worker_*.log' "
                       "--log ~/ascend/log/debug/plog");
    }
    return 1;
}

static int nccl(doctor *d, const where *w, const char *line)
{
    if (nccl_oom(d, w, line) || watchdog_timeout(d, w, line) || hccl_plog_timeout(d, w, line))
        return 1;
    size_t n = sizeof nccl_classes / sizeof nccl_classes[0], k = 0;
    int named = 0; /* an NCCL line says "NCCL error" or an enum name; the plain texts alone are too common */
    for (size_t i = 0; i < n; i++)
        named |= has(line, nccl_classes[i].name);
    if (!named && !has(line, "NCCL error"))
        return 0;
    while (k < n && !has(line, nccl_classes[k].text) && !has(line, nccl_classes[k].name))
        k++;
    char title[320];
    snprintf(title, sizeof title, "NCCL error: %s", k < n ? nccl_classes[k].name : "an NCCL error");
    finding *f = seen(d, w, SEV_ERROR, "nccl-error", title, NO_CODE);
    if (f) {
        snprintf(f->why, sizeof f->why, "%s", k < n ? nccl_classes[k].why : "NCCL failed; its own log says where.");
        doctor_next(f, "rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET) for the reason");
        doctor_next(f, "run on one GPU to separate the device from communication; nvidia-smi on every node; "
                       "dmesg | grep -i xid for device faults");
        doctor_next(f, "versions must match on every node: driver, CUDA, NCCL, torch");
    }
    return 1;
}

static void one_line(doctor *d, const where *w, const char *line)
{
    doctor_log_versions(d, w->path, w->line, line);
    if (oom_start(line)) {
        if (oom_complete(line))
            oom(d, w, line);
        else
            oom_unreadable(d, w, line);
        return;
    }
    if (known_match(d, w, line, 1) || doctor_sleep_line(d, w->path, w->line, line))
        return;
    char func[80];
    int code;
    const char *h;
    if (function_error(line, "HCCL function error", "( ,", func, sizeof func, &code)) {
        hccl(d, w, func, code);
        return;
    }
    const char *hf = strstr(line, "Hccl");
    if (hf && (h = strstr(hf, " fail, error:"))) { /* "HcclCommInitRootInfo fail, error:2" */
        snprintf(func, sizeof func, "%.*s", (int)hbm__utf8_cut(hf, (size_t)(h - hf) < 70 ? (size_t)(h - hf) : 70), hf);
        hccl(d, w, func, atoi(h + 13));
        return;
    }
    if (function_error(line, "NPU function error:", "(", func, sizeof func, &code)) {
        acl_code(d, w, func, code);
        return;
    }
    if (nccl(d, w, line))
        return;
    known_match(d, w, line, 0);
}

/* The lines after an OOM message's first one, read ahead to find its end; lines not part of it are then
 * read as any other. */
#define OOM_LOOKAHEAD 8

typedef struct ahead {
    char *line[OOM_LOOKAHEAD];
    size_t len[OOM_LOOKAHEAD];
    int n;
} ahead;

/* An OOM message wrapped over lines: the first k lines after `first` that complete it, joined in buf (with a
 * space where the log broke at a word boundary, without one where it cut a word: whichever reads more figures). */
static int join_oom(const char *first, const ahead *a, char *buf, size_t cap)
{
    for (int k = 1; k <= a->n; k++) {
        char *with = malloc(cap), *without = malloc(cap);
        if (!with || !without) {
            free(with);
            free(without);
            return 0;
        }
        hbm__sbuf s1, s2;
        hbm__sb_init(&s1, with, cap);
        hbm__sb_init(&s2, without, cap);
        size_t fl = strcspn(first, "\r\n");
        hbm__sb_printf(&s1, "%.*s", (int)fl, first);
        hbm__sb_printf(&s2, "%.*s", (int)fl, first);
        for (int i = 0; i < k; i++) {
            size_t l = strcspn(a->line[i], "\r\n");
            hbm__sb_printf(&s1, " %.*s", (int)l, a->line[i]);
            hbm__sb_printf(&s2, "%.*s", (int)l, a->line[i]);
        }
        int done = oom_complete(with) || oom_complete(without);
        if (done)
            snprintf(buf, cap, "%s", oom_figures(without) > oom_figures(with) ? without : with);
        free(with);
        free(without);
        if (done)
            return k;
    }
    return 0;
}

/* One line of the log into buf (at most LOG_LINE - 1 bytes, NUL-terminated; the rest of a longer line is skipped:
 * /dev/zero or a binary file has no line ends, and a line grown without bound ran out of memory, which getline
 * reported as the end of the file). Its length, or -1 at the end of the file or a read error (ferror). */
#define LOG_LINE (1 << 16)

static ssize_t read_line(FILE *fp, char *buf)
{
    size_t n = 0;
    int c = EOF, any = 0;
    while ((c = getc_unlocked(fp)) != EOF) {
        any = 1;
        if (n + 1 < LOG_LINE)
            buf[n++] = (char)c;
        if (c == '\n')
            break;
    }
    buf[n] = 0;
    return any ? (ssize_t)n : -1;
}

/* A read error is a finding, never "no problems": what was read before it is reported, and so is where it stopped. */
static void read_error(doctor *d, const char *name, long line, int errnum)
{
    finding *f = doctor_add(d, SEV_ERROR, "log-unreadable");
    size_t plen = strlen(name);
    plen = hbm__utf8_cut(name, plen > 200 ? 200 : plen);
    snprintf(f->title, sizeof f->title, "the log could not be read to its end: %s", strerror(errnum));
    snprintf(f->evidence, sizeof f->evidence, "%.*s:%ld: the read failed (%s)", (int)plen, name, line,
             strerror(errnum));
    snprintf(f->why, sizeof f->why,
             "what follows that line was not examined: the findings above are of the lines "
             "before it, and the log may hold more");
    doctor_next(f, "check that the file is whole and readable (a disk error, a file cut by a full disk, a network "
                   "file system that went away), then run the doctor again");
}

int doctor_log_stream(doctor *d, FILE *fp, const char *name, char *err, size_t errlen)
{
    char *line = malloc(LOG_LINE);
    ssize_t n;
    where w = {name, 0, NULL};
    ahead a = {{NULL}, {0}, 0};
    if (!line) {
        snprintf(err, errlen, "out of host memory reading log %.300s", name);
        return -1;
    }
    for (;;) {
        if (a.n) { /* lines read ahead and not part of an OOM message */
            n = (ssize_t)a.len[0];
            memcpy(line, a.line[0], (size_t)n + 1);
            free(a.line[0]);
            memmove(a.line, a.line + 1, (size_t)(a.n - 1) * sizeof *a.line);
            memmove(a.len, a.len + 1, (size_t)(a.n - 1) * sizeof *a.len);
            a.n--;
        } else if ((n = read_line(fp, line)) < 0) {
            break;
        }
        w.line++;
        if (memchr(line, 0, (size_t)n)) /* binary: a line with a NUL is not text */
            continue;
        w.text = line; /* quoted whole; matched without the rank prefixes launchers add (doctor_ranks.c) */
        const char *body = line + doctor_ranks_line(d, name, w.line, line);
        if (oom_start(body) && !oom_complete(body)) {
            char *more = malloc(LOG_LINE);
            while (more && a.n < OOM_LOOKAHEAD) {
                ssize_t m = read_line(fp, more);
                char *copy = m < 0 ? NULL : malloc((size_t)m + 1);
                if (!copy)
                    break;
                memcpy(copy, more, (size_t)m + 1);
                a.line[a.n] = copy;
                a.len[a.n++] = (size_t)m;
            }
            free(more);
            size_t jcap = (size_t)n + 16;
            for (int i = 0; i < a.n; i++)
                jcap += a.len[i] + 1;
            char *joined = malloc(jcap);
            int k = joined ? join_oom(body, &a, joined, jcap) : 0;
            if (k) {
                oom(d, &w, joined);
                for (int i = 0; i < k; i++) /* the continuation lines are the message, not findings of their own */
                    free(a.line[i]);
                memmove(a.line, a.line + k, (size_t)(a.n - k) * sizeof *a.line);
                memmove(a.len, a.len + k, (size_t)(a.n - k) * sizeof *a.len);
                a.n -= k;
                w.line += k;
                free(joined);
                continue;
            }
            free(joined);
        }
        one_line(d, &w, body);
    }
    int bad = ferror(fp), errnum = errno;
    free(line);
    for (int i = 0; i < a.n; i++)
        free(a.line[i]);
    if (bad)
        read_error(d, name, w.line + 1, errnum ? errnum : EIO);
    return 0;
}

int doctor_log(doctor *d, const char *path, char *err, size_t errlen)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        snprintf(err, errlen, "cannot open log %.300s: %s", path, strerror(errno));
        return -1;
    }
    const char *what = trace_not_a_file(fileno(fp));
    if (what) { /* /dev/zero never ends: not a log */
        snprintf(err, errlen, "log %.300s is not a regular file (%s): give a log file (a pipe is read too)", path,
                 what);
        fclose(fp);
        return -1;
    }
    int rc = doctor_log_stream(d, fp, path, err, errlen);
    fclose(fp);
    return rc;
}
