/*
 * options.c: the parsing every command shares, read from its table of options (options.h), and its help printed
 * from the same table. GNU's two forms of a value, `--capacity 40GiB` and `--capacity=40GiB`, are one to every
 * command; an option the command does not have is refused with the nearest one it has (as a mistyped command gets
 * the nearest command), or the commands that have it; a missing value names the option and what it takes. Owns no
 * option's meaning: each command reads its own, from the list this returns.
 */
#include "options.h"

#include <string.h>

#include "util.h"

#define CLI_NAME_WIDTH 20 /* an option and its value; the help begins after it */

static const cli_opt *find_opt(const cli_cmd *c, const char *name, size_t len)
{
    for (const cli_opt *o = c->opts; o && o->name; o++)
        if (strlen(o->name) == len && !strncmp(o->name, name, len))
            return o;
    return NULL;
}

/* The one option of c that name (at least "--" and two letters) begins, for `--cap`; NULL when none or several. */
static const char *only_prefix(const cli_cmd *c, const char *name)
{
    const char *found = NULL;
    size_t len = strlen(name);
    if (len < 4 || strncmp(name, "--", 2))
        return NULL;
    for (const cli_opt *o = c->opts; o && o->name; o++)
        if (o->help && !strncmp(o->name, name, len)) {
            if (found)
                return NULL;
            found = o->name;
        }
    return found;
}

/* An option c does not have: the nearest it has (listed ones and --help), else the commands of all that have it. */
static void unknown_option(const cli_cmd *c, const cli_cmd *all, size_t nall, const char *name)
{
    const char *names[64];
    size_t n = 0;
    for (const cli_opt *o = c->opts; o && o->name && n < 63; o++)
        if (o->help)
            names[n++] = o->name;
    names[n++] = "--help";
    const char *near = hbm__nearest(name, names, n);
    if (!near)
        near = only_prefix(c, name);
    if (near) {
        fprintf(stderr, "hbmalloc %s: unknown option '%s': did you mean '%s'? (hbmalloc %s --help lists its options)\n",
                c->name, name, near, c->name);
        return;
    }
    char others[200];
    hbm__sbuf sb;
    hbm__sb_init(&sb, others, sizeof others);
    for (size_t i = 0; i < nall; i++) {
        const cli_opt *o = all[i].name != c->name ? find_opt(&all[i], name, strlen(name)) : NULL;
        if (o && o->help)
            hbm__sb_printf(&sb, "%s%s", sb.len ? ", " : "", all[i].name);
    }
    if (sb.len)
        fprintf(stderr,
                "hbmalloc %s: unknown option '%s': an option of hbmalloc %s, not of %s (hbmalloc %s --help "
                "lists its options)\n",
                c->name, name, others, c->name, c->name);
    else
        fprintf(stderr, "hbmalloc %s: unknown option '%s' (hbmalloc %s --help lists its options)\n", c->name, name,
                c->name);
}

int cli_args(const cli_cmd *c, const cli_cmd *all, size_t nall, int argc, char **argv, char **out, int *outc)
{
    int n = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (a[0] != '-' || !a[1]) { /* an operand (a trace, a settings string; "-" too) */
            out[n++] = a;
            continue;
        }
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            cli_help(stdout, c);
            return 1;
        }
        /* --name=value: GNU getopt_long's other form of a value (a single-dash option has none) */
        char *eq = a[1] == '-' ? strchr(a, '=') : NULL;
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_opt *o = find_opt(c, a, len);
        if (!o) {
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)len, a);
            unknown_option(c, all, nall, name);
            return 2;
        }
        if (!o->value) {
            if (eq) {
                fprintf(stderr, "hbmalloc %s: %s takes no value: '%s'\n", c->name, o->name, a);
                return 2;
            }
            out[n++] = a;
        } else if (eq) {
            *eq = '\0';
            out[n++] = a;
            out[n++] = eq + 1;
        } else if (i + 1 < argc) {
            out[n++] = a;
            out[n++] = argv[++i];
        } else if (a[1] == '-') {
            fprintf(stderr, "hbmalloc %s: %s needs a value: %s %s or %s=%s\n", c->name, a, a, o->value, a, o->value);
            return 2;
        } else {
            fprintf(stderr, "hbmalloc %s: %s needs a value: %s %s\n", c->name, a, a, o->value);
            return 2;
        }
    }
    out[n] = NULL;
    *outc = n;
    return 0;
}

void cli_help(FILE *f, const cli_cmd *c)
{
    int any = 0;
    for (const cli_opt *o = c->opts; o && o->name; o++)
        any |= o->help != NULL;
    fprintf(f, "usage: hbmalloc %s%s%s%s\n%s\n", c->name, c->args[0] ? " " : "", c->args, any ? " [options]" : "",
            c->what);
    for (const cli_opt *o = c->opts; o && o->name; o++) {
        if (!o->help)
            continue;
        char name[64];
        snprintf(name, sizeof name, "%s%s%s", o->name, o->value ? " " : "", o->value ? o->value : "");
        fprintf(f, "  %-*s %s\n", CLI_NAME_WIDTH, name, o->help);
    }
    if (c->notes)
        fputs(c->notes, f);
}
