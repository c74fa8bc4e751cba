/*
 * dialect.h: whose allocator a command speaks for -- PyTorch's, which reads PYTORCH_CUDA_ALLOC_CONF, or torch_npu's,
 * which reads PYTORCH_NPU_ALLOC_CONF -- decided by one rule for every command (docs/TOOL.md, "The framework").
 */
#ifndef HBM_TOOLS_DIALECT_H
#define HBM_TOOLS_DIALECT_H

#include <stddef.h>

#include "hbmalloc.h"
#include "trace/trace.h"

/* What a command knows, each NULL (or -1) when it does not know it. */
typedef struct dialect_evidence {
    const char *dialect;     /* --dialect cuda|npu */
    const char *torch;       /* --torch VERSION */
    const char *torch_npu;   /* --torch-npu VERSION */
    const char *backend;     /* --backend SPEC */
    const trace *t;          /* the trace read: a snapshot's recorded stacks */
    int log;                 /* what the logs say: 1 torch_npu, 0 PyTorch, -1 nothing (doctor --log) */
    const char *log_why;     /* the logs' evidence, for the report ("an NPU out-of-memory message in train.log") */
    int machine;             /* what this machine has: 1 an Ascend NPU, 0 an NVIDIA GPU, -1 unknown (doctor's probes) */
    const char *machine_why; /* its evidence ("npu-smi lists Ascend910B3") */
    int no_env;              /* the environment is not the job's (doctor --no-env): not read */
} dialect_evidence;

typedef struct dialect_choice {
    hbm_dialect d;
    const char *version; /* the release given (--torch / --torch-npu), or NULL */
    int given;           /* decided by the command line (--dialect, --torch, --torch-npu, --backend) */
    char from[256];      /* what decided it: "--torch-npu 2.1.0.post6", "the environment (...)" */
    char note[400];      /* evidence it outranked that says otherwise; "" if none */
} dialect_choice;

/* Decides by the rule: the command line (its flags must agree), the snapshot, the logs, the machine, the
 * environment, else PyTorch. 0, or -1 with err set (two flags that disagree, a version that is none). */
int dialect_decide(const dialect_evidence *e, dialect_choice *out, char *err, size_t errlen);
/* The variable the dialect's framework reads: PYTORCH_CUDA_ALLOC_CONF or PYTORCH_NPU_ALLOC_CONF. */
const char *dialect_var(hbm_dialect d);
/* "PyTorch" or "torch_npu". */
const char *dialect_framework(hbm_dialect d);
/* What a backend spec says: 1 torch_npu's (acl, npu, dialect=npu), 0 PyTorch's (cuda, dialect=cuda), -1 nothing (a
 * simulated device without dialect=). */
int dialect_of_backend(const char *spec);
/* One line for a report: "torch_npu, which reads PYTORCH_NPU_ALLOC_CONF (from --torch-npu 2.1.0.post6)". */
void dialect_line(const dialect_choice *c, char *out, size_t len);

#endif
