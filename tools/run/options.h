/*
 * options.h: a command's options as one table, read by the parsing every command shares and printed as its help
 * (docs/TOOL.md, "Options").
 */
#ifndef HBM_TOOLS_OPTIONS_H
#define HBM_TOOLS_OPTIONS_H

#include <stddef.h>
#include <stdio.h>

/* One option as typed ("--capacity", "-o"), the value it takes ("SIZE"; NULL: none) and its help, one line (NULL:
 * read but not listed: an option a command reads only to say that it does not apply). */
typedef struct cli_opt {
    const char *name, *value, *help;
} cli_opt;

/* A command: its name, what follows it on the usage line ("TRACE"), what it does (one line), its options (ended by
 * a row of NULLs) and the lines printed after them (each ended by "\n"; NULL: none). */
typedef struct cli_cmd {
    const char *name, *args, *what;
    const cli_opt *opts;
    const char *notes;
} cli_cmd;

/* The widest help line (the tests hold every --help to it). */
#define CLI_COLUMNS 100

/* argv[0..argc) after command c's name, into out (room for 2 * argc + 1) as c's parser reads them: each option that
 * takes a value followed by it (`--name=value` split at its '=', which is overwritten), the rest as they were, in
 * their order; *outc their number. 0; 1 --help or -h was given (c's help printed on stdout); 2 an unknown option, a
 * value missing or given to an option that takes none (said on stderr, with the nearest option of c, or the
 * commands of all[0..nall) that take it). */
int cli_args(const cli_cmd *c, const cli_cmd *all, size_t nall, int argc, char **argv, char **out, int *outc);

/* c's help: the usage line, what it does, one aligned line per option, its notes. */
void cli_help(FILE *f, const cli_cmd *c);

#endif
