/*
 * findings.c: the doctor's findings registry: what the environment probes (doctor_env.c), the log reader
 * (doctor_log.c) and the advice (doctor_advice.c) add, and the facts they gather. Owns the lists only; the command
 * (doctor.c) orders and prints them.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "findings.h"
#include "util.h"
#include "wrap.h"

void doctor_init(doctor *d)
{
    memset(d, 0, sizeof *d);
    d->npu_vmm = d->cuda_vmm = -1;
}

void doctor_free(doctor *d)
{
    if (d->ranks && d->ranks_free)
        d->ranks_free(d->ranks);
    free(d->f);
    free(d->facts);
    memset(d, 0, sizeof *d);
}

finding *doctor_add(doctor *d, int severity, const char *id)
{
    static finding spare; /* out of host memory: the finding is dropped, the run goes on */
    if (hbm__grow((void **)&d->f, &d->cap, d->n + 1, sizeof *d->f)) {
        memset(&spare, 0, sizeof spare);
        return &spare;
    }
    finding *f = &d->f[d->n];
    memset(f, 0, sizeof *f);
    f->severity = severity;
    f->order = (long)d->n++;
    f->count = 1;
    snprintf(f->id, sizeof f->id, "%s", id);
    return f;
}

void doctor_evidence(finding *f, const char *path, long line, const char *text)
{
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        n--;
    while (n && (*text == ' ' || *text == '\t'))
        text++, n--;
    size_t plen = strlen(path);
    plen = hbm__utf8_cut(path, plen > 200 ? 200 : plen); /* cuts between characters: logs are often Chinese */
    int cut;
    size_t keep = doctor_quote_len(text, n, 400, &cut); /* up to a word: a cut word reads as another word */
    snprintf(f->evidence, sizeof f->evidence, "%.*s:%ld: %.*s%s", (int)plen, path, line, (int)keep, text,
             cut ? " ..." : "");
}

void doctor_next(finding *f, const char *fmt, ...)
{
    if (f->nnext >= DOC_MAX_NEXT)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->next[f->nnext++], sizeof f->next[0], fmt, ap);
    va_end(ap);
}

void doctor_fact(doctor *d, const char *section, const char *key, const char *fmt, ...)
{
    if (hbm__grow((void **)&d->facts, &d->capfacts, d->nfacts + 1, sizeof *d->facts))
        return;
    fact *x = &d->facts[d->nfacts++];
    snprintf(x->section, sizeof x->section, "%s", section);
    snprintf(x->key, sizeof x->key, "%s", key);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(x->value, sizeof x->value, fmt, ap);
    va_end(ap);
}
