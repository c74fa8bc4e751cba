/*
 * read_any.c: trace_read_any, the one entry to every trace reader: a file is told apart by its content (a pickle, a
 * JSON snapshot, an RMM log, a lifetime CSV, hbmalloc's text), handed to its reader, and a file that is no trace is
 * said for what it is (empty, compressed, an archive, binary, text that is no trace). The readers build their traces
 * with trace.c's builder; nothing calls back here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trace.h"
#include "util.h"

#define FORMATS_READ                                                                                         \
    "hbmalloc reads hbmtrace text (docs/TRACE_FORMAT.md), PyTorch / torch_npu memory snapshots (the pickle " \
    "torch.cuda.memory._dump_snapshot writes, or hbmalloc's --snapshot pickle or JSON), RMM "                \
    "logging_resource_adaptor CSVs and tensor-lifetime CSVs (id,lower,upper,size)"

/* A zip whose first member is ".../data.pkl": what torch.save writes (a checkpoint, or saved tensors). */
static int torch_save_archive(const unsigned char *d, size_t len)
{
    if (len < 30)
        return 0;
    size_t n = (size_t)d[26] | (size_t)d[27] << 8; /* the first local header's name length */
    return n >= 8 && 30 + n <= len && !memcmp(d + 30 + n - 8, "data.pkl", 8);
}

/* What a file that is no trace is, by its content, and what to do with it; NULL for a file to parse. */
static const char *not_a_trace(const unsigned char *d, size_t len)
{
    if (len == 0)
        return "is empty: no events to replay";
    if (len >= 2 && d[0] == 0x1f && d[1] == 0x8b)
        return "is gzip-compressed: decompress it first (gzip -dc FILE > FILE.pickle), then pass the result";
    if (len >= 4 && !memcmp(d, "PK\3\4", 4) && torch_save_archive(d, len))
        return "is a torch.save archive (a checkpoint, or saved tensors): it holds no memory snapshot. Record one with "
               "torch.cuda.memory._record_memory_history() and write it with "
               "torch.cuda.memory._dump_snapshot('snapshot.pickle') (torch.npu.memory_snapshot on torch_npu): that is "
               "a plain pickle hbmalloc reads";
    if (len >= 4 && !memcmp(d, "PK\3\4", 4))
        return "is a zip archive: hbmalloc reads the snapshot or trace itself; if one is inside, extract it first "
               "(unzip)";
    size_t sample = len < 4096 ? len : 4096, odd = 0;
    for (size_t k = 0; k < sample; k++)
        odd += d[k] == 0 || (d[k] < 0x20 && d[k] != '\t' && d[k] != '\n' && d[k] != '\r');
    if (odd)
        return "is binary and not a snapshot pickle: " FORMATS_READ;
    return NULL;
}

/* Text that is no trace (a README, a log): its first line that is not blank or a '#' comment does not start with an
 * event letter alone (docs/TRACE_FORMAT.md). 0: it may be a trace (the reader says where it is wrong). */
static int text_is_no_trace(const char *d, size_t len, size_t *lineno, char *first, size_t firstlen)
{
    size_t line = 1;
    for (size_t i = 0; i < len; line++) {
        size_t end = i;
        while (end < len && d[end] != '\n' && d[end] != '\r')
            end++;
        size_t k = i;
        while (k < end && (d[k] == ' ' || d[k] == '\t'))
            k++;
        if (k < end && d[k] != '#') {
            int event = strchr("afpesuzw", d[k]) && (k + 1 == end || d[k + 1] == ' ' || d[k + 1] == '\t');
            if (event || (end - k >= 8 && !memcmp(d + k, "hbmtrace", 8))) /* an event, or the optional header */
                return 0;
            *lineno = line;
            size_t n = end - k < firstlen - 1 ? end - k : firstlen - 1;
            n = hbm__utf8_cut(d + k, n);
            for (size_t c = 0; c < n; c++)
                first[c] = (unsigned char)d[k + c] < 0x20 ? ' ' : d[k + c];
            first[n] = 0;
            return 1;
        }
        i = end;
        if (i < len && d[i] == '\r' && i + 1 < len && d[i + 1] == '\n')
            i++;
        if (i < len)
            i++;
        else
            break;
    }
    return 0;
}

int trace_read_any(const char *path, int device, trace *t, char *err, size_t errlen)
{
    unsigned char *data;
    size_t len;
    if (trace_slurp(path, &data, &len, err, errlen))
        return -1;
    int rc;
    size_t bom = trace_bom((const char *)data, len);
    const unsigned char *all = data; /* freed below */
    data += bom, len -= bom;
    size_t lead = 0; /* JSON: a snapshot as hbm_snapshot_save writes it, or torch's _snapshot() dumped */
    while (lead < len && (data[lead] == ' ' || data[lead] == '\t' || data[lead] == '\n' || data[lead] == '\r'))
        lead++;
    int json = lead < len && (data[lead] == '{' || data[lead] == '[');
    const char *what = (len > 0 && data[0] == 0x80) || json ? NULL : not_a_trace(data, len);
    if (what) {
        snprintf(err, errlen, "%s %s", path, what);
        rc = -1;
    } else if (len > 0 && data[0] == 0x80)
        rc = trace_read_pickle_mem(path, data, len, device, t, err, errlen);
    else if (json)
        rc = trace_read_json_mem(path, data, len, device, t, err, errlen);
    else if (len >= 12 && !memcmp(data, "Thread,Time,", 12))
        rc = trace_read_rmm_mem(path, (const char *)data, len, t, err, errlen);
    else if (trace_is_lifetimes((const char *)data, len))
        rc = trace_read_lifetimes_mem(path, (const char *)data, len, t, err, errlen);
    else if (memchr(data, ',', strcspn((const char *)data, "\n")) &&
             !memchr(data, ' ', strcspn((const char *)data, "\n")) &&
             ((data[0] >= 'a' && data[0] <= 'z') || (data[0] >= 'A' && data[0] <= 'Z'))) {
        snprintf(err, errlen,
                 "%s is a CSV whose header '%.*s' is not one hbmalloc reads: RMM logs "
                 "(Thread,Time,Action,Pointer,Size[,Stream]) and tensor lifetimes (id,lower,upper,size[,...])",
                 path, (int)(strcspn((const char *)data, "\r\n") > 80 ? 80 : strcspn((const char *)data, "\r\n")),
                 data);
        rc = -1;
    } else {
        size_t lineno = 0;
        char first[64];
        if (text_is_no_trace((const char *)data, len, &lineno, first, sizeof first)) {
            snprintf(err, errlen, "%s is not a trace: its line %zu ('%s%s') is not an event. %s", path, lineno, first,
                     strlen(first) == sizeof first - 1 ? "..." : "", FORMATS_READ);
            rc = -1;
        } else {
            rc = trace_read_text_mem(path, (const char *)data, len, t, err, errlen);
        }
    }
    if (!rc)
        t->bytes = len + bom;
    free((void *)all);
    return rc;
}
