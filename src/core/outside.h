/* outside.h: device memory hbmalloc does not hold (outside.c). */
#ifndef HBM_CORE_OUTSIDE_H
#define HBM_CORE_OUTSIDE_H

#include "core/types.h"

/* With a->lock held: o from one memory query of the device (used, reserved, outside; -1 when the query fails, the
 * capacity then the one read at create), its per-process figures -1 (unknown). */
void hbm__outside_device(hbm_allocator *a, hbm_outside *o);
/* o's per-process figures from the backend's per-process query (none: left -1); o->reserved set. Needs no lock
 * (callers holding it make the job's threads wait for the runtime's answer: an OOM, a sleep). */
void hbm__outside_processes(hbm_allocator *a, hbm_outside *o);
/* With a->lock held: o becomes the last measurement (its ns set now when 0). */
void hbm__outside_note(hbm_allocator *a, const hbm_outside *o);
/* With a->lock held: the last measurement into s's outside figures (-1 when never measured). */
void hbm__outside_stats(const hbm_allocator *a, hbm_stats *s);

#endif
