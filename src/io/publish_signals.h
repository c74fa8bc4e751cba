/*
 * publish_signals.h: the published records of a process that a signal ends, removed on its way out
 * (publish_signals.c). publish.c is the only caller.
 */
#ifndef HBM_PUBLISH_SIGNALS_H
#define HBM_PUBLISH_SIGNALS_H

/* Once, at the first record: a handler for SIGTERM, SIGINT and SIGHUP where the process left them at their
 * default (the signal would end it without atexit); a signal the application handles or ignores is not touched. */
void hbm__pubsig_install(void);
/* A record of this process made, or about to be removed: its path, for the handler. */
void hbm__pubsig_add(const char *path);
void hbm__pubsig_remove(const char *path);

#endif
