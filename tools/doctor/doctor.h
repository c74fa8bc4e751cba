/*
 * doctor.h: `hbmalloc doctor`: what is wrong with this machine's device
 * memory or communication setup, or with a training log, why, and what to do
 * next. doctor_env.c gathers the environment (backends, versions, npu-smi,
 * nvidia-smi, allocator settings), doctor_log.c recognises known failures in a
 * log, doctor.c orders the findings and prints them for people or as JSON.
 */
#ifndef HBM_DOCTOR_H
#define HBM_DOCTOR_H

#include <stddef.h>
#include <stdio.h>

enum { SEV_INFO = 0, SEV_WARNING = 1, SEV_ERROR = 2 };

#define DOC_MAX_NEXT 7

typedef struct finding {
    int severity;
    char id[40];         /* stable identifier for machines: "npu-oom-fragmentation", "hccl-error", ... */
    char title[480];
    char evidence[640];  /* FILE:LINE: the line, or where in the environment */
    int count;           /* times seen (logs) */
    char why[1400];
    char next[DOC_MAX_NEXT][520];
    int nnext;
    long order;          /* position for a stable sort within a severity */
    int cause;           /* explains other findings: ranked before them */
    char explains[80];   /* their numbers once ordered: "2 and 3" */
} finding;

typedef struct fact {
    char section[24]; /* "cuda", "acl", "ascend", "nvidia", "settings", "variables" */
    char key[64];
    char value[400];
} fact;

typedef struct doctor {
    finding *f;
    size_t n, cap;
    fact *facts;
    size_t nfacts, capfacts;
    /* What the environment says, for advice that depends on it. */
    int npu_vmm;         /* 1 yes, 0 no, -1 unknown */
    char npu_vmm_why[300];
    int cuda_vmm;        /* 1 yes, 0 no, -1 unknown */
    char driver[64];     /* Ascend driver (HDK) version, if known */
    int ascend;          /* an Ascend machine: version files or a runtime seen */
    int runtimes_loaded; /* device runtimes that loaded (CUDA driver, AscendCL) */
    char not_checked[2][400]; /* what could not be checked, and how to check it: never "no problems" silently */
    int nnot_checked;
    /* What the logs (or --torch / --torch-npu) say about the framework. */
    char torch_version[40], torch_npu_version[40];
    char torch_from[300], torch_npu_from[300]; /* where each came from */
    int npu_version_inferred;                  /* from a warning only one release line prints */
    int probe_failed;                          /* a log shows torch_npu's virtual-memory probe failing */
    char probe_failed_at[300];
    int oom_npu;                               /* an NPU out-of-memory message was seen */
    double oom_capacity;                       /* its device's total capacity, bytes (0: unknown) */
} doctor;

void doctor_init(doctor *d);
void doctor_free(doctor *d);
finding *doctor_add(doctor *d, int severity, const char *id);
void doctor_next(finding *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void doctor_fact(doctor *d, const char *section, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The command: hbmalloc doctor [--log FILE]... [--json] [--no-env] [--root DIR] [--torch V] [--torch-npu V]
 * [--trace FILE [--capacity SIZE]]. Exit status 0, 1 or 2. */
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
/* The same from an open stream; name is what the findings cite. 0, or -1 when host memory ran out. */
int doctor_log_stream(doctor *d, FILE *fp, const char *name, char *err, size_t errlen);

/* A PyTorch or torch_npu version, or the probe warning only some releases print, in one log line. */
void doctor_log_versions(doctor *d, const char *path, long lineno, const char *line);
/* The settings variables set here, checked as the user's release reads them on this device: refusals, what a
 * lenient parser made of them, expandable segments the device cannot do, garbage collection that never runs.
 * Runs after the environment and the logs. */
void doctor_settings(doctor *d);
/* Replay a snapshot or trace under the sweep's grid on the device the findings describe (dialect, virtual
 * memory, capacity: the OOM message's, else `capacity`), the user's setting as the baseline: a finding with the
 * proven setting. 0, or -1 with err set. */
int doctor_prove(doctor *d, const char *trace_path, const char *capacity, char *err, size_t errlen);

/* Versions: -1, 0, 1 as a <, ==, > b, by torch_npu's grammar (24.1.rc2, 23.0.RC3, 7.3.0.1.231). */
int doctor_vercmp(const char *a, const char *b);
/* Is v inside one of the ranges "[lo,hi],[lo,hi]"? 1 yes, 0 no, -1 unparsable. A trailing '.' on hi means any
 * version starting with it. */
int doctor_in_ranges(const char *v, const char *ranges);
/* "20.00 MiB", "79.15 GiB", "0 bytes" at s: bytes, and the length read (0 when not a size). */
double doctor_size(const char *s, size_t *len);

#endif
