/*
 * top.h: `hbmalloc top`, the allocators of this user's running jobs, live (docs/MONITOR.md). It reads the
 * records processes publish (hbm_publish, hbm_record_read) and prints them as a refreshed table, JSON, CSV
 * lines or a Prometheus text file.
 */
#ifndef HBM_TOOLS_TOP_H
#define HBM_TOOLS_TOP_H

/* argv after "top". Exit status: 0, or 2 for bad usage or an unreadable folder. */
int top_main(int argc, char **argv);

#endif
