/*
 * findings.h: the doctor's findings and facts (findings.c): what every part of `hbmalloc doctor` adds to, and
 * the command prints.
 */
#ifndef HBM_DOCTOR_FINDINGS_H
#define HBM_DOCTOR_FINDINGS_H

#include <stddef.h>
#include <stdio.h>

enum { SEV_INFO = 0, SEV_WARNING = 1, SEV_ERROR = 2 };

#define DOC_MAX_NEXT 7
/* Findings whose title names the failing call and its code (hccl-error, acl-error): calls of one code listed apart,
 * then counted in the last of that code; titles of one id in all, then counted in the id's last (doctor_log.c's
 * seen: a log of a million distinct failing calls stays a few findings, read in linear time). */
#define DOC_MAX_TITLES 16
#define DOC_MAX_CODES 256

typedef struct finding {
    int severity;
    char id[40]; /* stable identifier for machines: "npu-oom-fragmentation", "hccl-error", ... */
    char title[480];
    char evidence[640]; /* FILE:LINE: the line, or where in the environment */
    int count;          /* times seen (logs), at most INT_MAX */
    long other_titles;  /* lines of other calls (or codes) counted here past the bounds above (doctor_log.c) */
    long code;          /* the call's result its title names (LONG_MIN: none) */
    char why[1400];
    char next[DOC_MAX_NEXT][520];
    int nnext;
    long order;        /* position for a stable sort within a severity */
    int cause;         /* explains other findings: ranked before them */
    char explains[80]; /* their numbers once ordered: "2 and 3" */
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
    int npu_vmm; /* 1 yes, 0 no, -1 unknown */
    char npu_vmm_why[300];
    int cuda_vmm;             /* 1 yes, 0 no, -1 unknown */
    char driver[64];          /* Ascend driver (HDK) version, if known */
    int ascend;               /* an Ascend machine: version files or a runtime seen */
    int runtimes_loaded;      /* device runtimes that loaded (CUDA driver, AscendCL) */
    char not_checked[2][400]; /* what could not be checked, and how to check it: never "no problems" silently */
    int nnot_checked;
    /* What the logs (or --torch / --torch-npu) say about the framework. */
    char torch_version[40], torch_npu_version[40];
    char torch_from[300], torch_npu_from[300]; /* where each came from */
    int npu_version_inferred;                  /* from a warning only one release line prints */
    int probe_failed;                          /* a log shows torch_npu's virtual-memory probe failing */
    char probe_failed_at[300];
    int oom_npu;         /* an NPU out-of-memory message was seen */
    double oom_capacity; /* its device's total capacity, bytes (0: unknown) */
    /* What each process's sleeps left in use (doctor_sleep.c), up to 32 processes; findings by index + 1. */
    struct doctor_sleeps {
        long pid; /* -1: the log names none */
        int n;
        double first, last, low, high; /* GiB still in use after its first, last, least and most sleep */
        int fell;                      /* a sleep left less than the one before it, by more than noise */
        int growth;                    /* its growth finding, index + 1 (0: none yet) */
    } sleeps[32];
    int nsleeps;
    int sleep_finding; /* the finding of what sleeps left in use, index + 1 (0: none yet) */
    /* Every rank's evidence (doctor_ranks.c): made by the first log line, freed by doctor_free through the
     * destructor its owner sets (findings.c does not call into the log readers). */
    struct doctor_ranks *ranks;
    void (*ranks_free)(struct doctor_ranks *);
} doctor;

void doctor_init(doctor *d);
void doctor_free(doctor *d);
finding *doctor_add(doctor *d, int severity, const char *id);
void doctor_next(finding *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The finding's evidence: "PATH:LINE: the line" (the path cut at 200 bytes, the line up to a word). */
void doctor_evidence(finding *f, const char *path, long line, const char *text);
void doctor_fact(doctor *d, const char *section, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
