/* registry.h: the table of policies (registry.c), which the public API's create consults. */
#ifndef HBM_POLICY_REGISTRY_H
#define HBM_POLICY_REGISTRY_H

#include "core/policy_ops.h"

/* The policy the settings ask for, made at create: HBM_OK (a->pol NULL: the caching engine alone), or an error
 * with its message in err. */
hbm_status hbm__policy_create(hbm_allocator *a, char *err, size_t errlen);

#endif
