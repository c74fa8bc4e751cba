/* which.c: tool_on_path (which.h). */
#include "which.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int tool_on_path(const char *prog)
{
    const char *path = getenv("PATH");
    if (!path)
        return 0;
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        char full[1024];
        snprintf(full, sizeof full, "%.*s/%s", (int)n, p, prog);
        if (n && access(full, X_OK) == 0)
            return 1;
        p += n + (p[n] == ':');
    }
    return 0;
}
