/*
 * publish_signals.h: the published records of a process that a signal ends, removed on its way out
 * (publish_signals.c). publish.c is the only caller.
 */
#ifndef HBM_PUBLISH_SIGNALS_H
#define HBM_PUBLISH_SIGNALS_H

/* Once, at the first record: a handler for SIGTERM, SIGINT and SIGHUP where the process left them at their
 * default (the signal would end it without atexit); a signal the application handles or ignores is not touched, nor
 * SIGINT in a process with Python (Py_Initialize takes it only at its default). Put back when the library is
 * unloaded, where still installed. */
void hbm__pubsig_install(void);
/* A record of this process made: its path, for the handler; returns its slot, or -1 (no slot free, or no memory:
 * the record is removed at exit only). */
int hbm__pubsig_add(const char *path);
/* The record in that slot (hbm__pubsig_add's) is about to be removed: the handler forgets it. A slot is named, not
 * searched for by its path, so that no thread reads a path another thread may be rewriting; a slot of another
 * process (a forked child's copy of its parent's table) is left alone. -1: nothing. */
void hbm__pubsig_remove(int slot);

#endif
