/*
 * doctor_ranks.h: every rank's evidence at once (doctor_ranks.c, issue #40 item 3): which rank each log line comes
 * from and when it was written, the failures the log reader recognises per rank, and after the logs the rank that
 * failed first, what it was, and whether the timing shows the other ranks' collective errors to be its consequence.
 */
#ifndef HBM_DOCTOR_RANKS_H
#define HBM_DOCTOR_RANKS_H

#include <stddef.h>
#include <stdio.h>

#include "findings.h"

/* One line of the log called name (a new name, or line 1, starts a new file, whose name may give its rank): its
 * rank (the prefixes launchers add, else the file's), time, host, process, and the job facts it states. Returns the
 * length of the rank prefixes at the line's start: the rest is the line as the rank wrote it. Memory is bounded
 * whatever the log's size (DOCTOR.md, "Several ranks"). */
size_t doctor_ranks_line(doctor *d, const char *name, long lineno, const char *line);
/* The log reader recognised a failure on the current line: finding fi (new or merged), the line's own title. */
void doctor_ranks_event(doctor *d, size_t fi, const char *title);
/* The current line's out-of-memory message showed rbu bytes reserved but unallocated (negative: not shown). */
void doctor_ranks_oom_figure(doctor *d, double rbu);
/* After the logs: the timeline finding, mixed jobs, missing ranks, and the headroom advice for a communicator that
 * failed after an out-of-memory message showed a large cache. Before the findings are ordered. */
void doctor_ranks_report(doctor *d);
/* ,"ranks":{...} for --json (nothing when no log was read). */
void doctor_ranks_json(const doctor *d, FILE *out);

#endif
