/* fuzz_doctor.c: hbmalloc doctor's log recognisers, its ranks' timeline and version parsers on arbitrary bytes. Logs come from users'
 * jobs: nothing in them may crash the doctor or make it read out of bounds. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "doctor/doctor.h"
#include "doctor/doctor_ranks.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!size)
        return 0;
    FILE *fp = fmemopen((void *)data, size, "rb");
    if (!fp)
        return 0;
    doctor d;
    doctor_init(&d);
    d.npu_vmm = data[0] & 1 ? 0 : -1;
    char err[256];
    doctor_log_stream(&d, fp, "fuzz.log", err, sizeof err);
    fclose(fp);
    doctor_ranks_report(&d); /* the ranks' timeline from whatever prefixes and times the bytes held */
    FILE *sink = fopen("/dev/null", "w");
    if (sink) {
        doctor_ranks_json(&d, sink);
        fclose(sink);
    }
    for (size_t i = 0; i < d.n; i++) /* every finding is a terminated string of its own */
        if (!memchr(d.f[i].title, 0, sizeof d.f[i].title) || !memchr(d.f[i].why, 0, sizeof d.f[i].why))
            __builtin_trap();
    doctor_free(&d);
    /* The first line as a version, the rest as a range list. */
    char v[128], r[512];
    size_t nl = 0;
    while (nl < size && data[nl] != '\n')
        nl++;
    snprintf(v, sizeof v, "%.*s", (int)(nl < 127 ? nl : 127), (const char *)data);
    size_t rest = nl < size ? size - nl - 1 : 0;
    snprintf(r, sizeof r, "%.*s", (int)(rest < 511 ? rest : 511), (const char *)data + (nl < size ? nl + 1 : size));
    if (memchr(v, 0, strlen(v) + 1) && memchr(r, 0, strlen(r) + 1)) {
        doctor_vercmp(v, r);
        doctor_in_ranges(v, r);
        size_t n;
        doctor_size(v, &n);
    }
    return 0;
}
