/* resident.h: what holds a device's memory while pools sleep (resident.c). */
#ifndef HBM_CORE_RESIDENT_H
#define HBM_CORE_RESIDENT_H

#include "core/types.h"

/* At the end of a sleep or a wake, with a->lock held: when a's statistics are published, what holds the device's
 * memory is noted for the record (one memory query of the runtime); otherwise nothing. */
void hbm__resident_note(hbm_allocator *a);

#endif
