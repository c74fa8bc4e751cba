/*
 * which.h: whether a program is on PATH, for the commands that run one (the doctor's npu-smi and nvidia-smi, the
 * view's rsvg-convert) and must say so when it is missing rather than fail obscurely.
 */
#ifndef HBM_TOOLS_WHICH_H
#define HBM_TOOLS_WHICH_H

/* 1 when an executable `prog` is in a folder of PATH (empty entries skipped), else 0. */
int tool_on_path(const char *prog);

#endif
