/*
 * commands.h: every command's table of options and help (run/options.h), and `hbmalloc help` (docs/TOOL.md,
 * "Options").
 */
#ifndef HBM_TOOLS_COMMANDS_H
#define HBM_TOOLS_COMMANDS_H

#include <stddef.h>
#include <stdio.h>

#include "run/options.h"

/* In the order the help lists them. */
extern const cli_cmd cli_commands[];
extern const size_t cli_ncommands;

/* The command of that name, or NULL. */
const cli_cmd *cli_command(const char *name);

/* `hbmalloc --help`: every command's help, then the documents' names. */
void usage_all(FILE *f);
/* Plain `hbmalloc`: a line per command. */
void short_usage(FILE *f);
/* A command hbmalloc does not have: the nearest one, and the short usage, on stderr. */
void unknown_command(const char *cmd);
/* `hbmalloc help [COMMAND|DOC]`: argv after "help". 0, or 2 (no such command or document: the nearest). */
int help_main(int argc, char **argv);

#endif
