/*
 * doctor.h: `hbmalloc doctor`: what is wrong with this machine's device
 * memory or communication setup, or with a training log, why, and what to do
 * next. doctor_env.c gathers the environment (backends, versions, npu-smi,
 * nvidia-smi, allocator settings), doctor_log.c recognises known failures in a
 * log, doctor_advice.c checks settings and proves one on a trace, findings.c keeps
 * what they find, doctor.c orders the findings and prints them for people or as JSON.
 */
#ifndef HBM_DOCTOR_H
#define HBM_DOCTOR_H

#include <stddef.h>
#include <stdio.h>

#include "findings.h"

/* The command: hbmalloc doctor [--log FILE]... [--json] [--no-env] [--root DIR] [--torch V] [--torch-npu V]
 * [--trace FILE [--capacity SIZE] [--device N]]. Exit status 0, 1 or 2 (also when --no-env leaves nothing to
 * check). */
int doctor_main(int argc, char **argv);

/* The environment under root ("/" normally; a test tree in tests). */
void doctor_env(doctor *d, const char *root);
/* The Python a job would run (HBMALLOC_PYTHON, else python3 on PATH): the torch and torch_npu it imports, their
 * builds, and whether hbmalloc.torch.use() accepts them; their versions serve the settings advice when no log or
 * option gave one. */
void doctor_python(doctor *d);
/* When no device runtime loaded: said under "Not checked" (and the verdict says what it covers), never a bare "No
 * problems found". */
void doctor_unchecked(doctor *d);
/* One log file; 0, or -1 with err set (it cannot be opened, or is a device, a directory or a socket). A read error
 * partway is a finding (log-unreadable), never the end of the log. Lines are read up to 64 KiB each. */
int doctor_log(doctor *d, const char *path, char *err, size_t errlen);
/* What one --log names (doctor_inputs.c): a file or pipe, every regular file directly in a folder, or the files a
 * quoted pattern matches (glob(3)), in natural order; 0, or -1 with err set (nothing matches, a folder without
 * files, a file that cannot be read). */
int doctor_log_arg(doctor *d, const char *arg, char *err, size_t errlen);
/* The same from an open stream; name is what the findings cite. 0, or -1 when host memory ran out. */
int doctor_log_stream(doctor *d, FILE *fp, const char *name, char *err, size_t errlen);

/* The line vLLM's sleep mode logs after a sleep ("Sleep mode freed X GiB memory, Y GiB memory is still in use."):
 * what stayed in use, and its growth per process (doctor_sleep.c). 1 when the line was one. */
int doctor_sleep_line(doctor *d, const char *path, long lineno, const char *line);
/* A PyTorch or torch_npu version, or the probe warning only some releases print, in one log line. */
void doctor_log_versions(doctor *d, const char *path, long lineno, const char *line);
/* The settings variables set here, checked as the user's release reads them on this device: refusals, what a
 * lenient parser made of them, expandable segments the device cannot do, garbage collection that never runs.
 * Runs after the environment and the logs. */
void doctor_settings(doctor *d);
/* Replay a snapshot or trace under the sweep's grid on the device the findings describe (dialect, virtual
 * memory, capacity: the OOM message's, else `capacity`), the user's setting as the baseline: a finding with the
 * proven setting. device: a snapshot's device, or TRACE_DEVICE_ANY (its only one). 0, or -1 with err set. */
int doctor_prove(doctor *d, const char *trace_path, const char *capacity, int device, char *err, size_t errlen);
/* Whether the job the doctor looks at runs torch_npu, and what says so (a log line, an NPU out-of-memory message,
 * an Ascend machine, PYTORCH_NPU_ALLOC_CONF); NULL when nothing does. Advice for CUDA is not given to such a job. */
const char *doctor_on_npu(const doctor *d);

/* Versions: -1, 0, 1 as a <, ==, > b, by torch_npu's grammar (24.1.rc2, 23.0.RC3, 7.3.0.1.231). */
int doctor_vercmp(const char *a, const char *b);
/* Is v inside one of the ranges "[lo,hi],[lo,hi]"? 1 yes, 0 no, -1 unparsable. A trailing '.' on hi means any
 * version starting with it. */
int doctor_in_ranges(const char *v, const char *ranges);
/* Headroom for a collective library's buffers (doctor_advice.c, issue #40 item 2): HCCL_BUFFSIZE in MB as this
 * process sees it (200 when unset or not a number; *set says which); what one communicator of lib ("HCCL" or "NCCL")
 * needs left free, MiB, with why in basis; and the advice line that exports hbm_headroom_mb with it, after lead. */
long doctor_hccl_buffsize_mb(int *set);
long doctor_headroom_mb(const char *lib, char *basis, size_t len);
void doctor_headroom_next(finding *f, const char *lib, const char *lead);
/* "20.00 MiB", "79.15 GiB", "0 bytes" at s: bytes, and the length read (0 when not a size). logsize.c. */
double doctor_size(const char *s, size_t *len);
/* PyTorch's size format for a size read from a log; sizes no device has (a garbled log) are printed, not converted
 * (a double beyond uint64_t is undefined to convert). */
void doctor_format_size(double bytes, char *buf, size_t len);

#endif
