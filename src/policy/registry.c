/*
 * registry.c: the policies, one row each: the setting that asks for it and how it is made. The first row whose
 * setting is given wins (hbm_step_plan and hbm_plan_file together are refused at create, api.c); with none, the
 * caching engine (core/engine.c, PyTorch's policy) serves alone. Adding a policy: a file of src/policy/ that fills
 * an hbm__policy_ops (core/policy_ops.h), and a row here.
 */
#include "policy/registry.h"
#include "policy/arena.h"

static bool step_plan_asked(const hbm__conf *c) { return c->step_plan; }
static bool plan_file_asked(const hbm__conf *c) { return c->plan_file[0] != 0; }
static bool arena_asked(const hbm__conf *c) { return c->arena_bytes || c->arena_fraction > 0; }

static const struct {
    const char *key;
    bool (*asked)(const hbm__conf *c);
    hbm_status (*create)(hbm_allocator *a, char *err, size_t errlen);
} policies[] = {
    {"hbm_step_plan", step_plan_asked, hbm__step_plan_policy_create},
    {"hbm_plan_file", plan_file_asked, hbm__plan_file_policy_create},
    {"hbm_arena_mb / hbm_arena_fraction", arena_asked, hbm__arena_policy_create},
};

hbm_status hbm__policy_create(hbm_allocator *a, char *err, size_t errlen)
{
    for (size_t i = 0; i < sizeof policies / sizeof policies[0]; i++)
        if (policies[i].asked(&a->conf))
            return policies[i].create(a, err, errlen);
    return HBM_OK;
}
