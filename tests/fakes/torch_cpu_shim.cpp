/* torch_cpu_shim.cpp (test only): makes the plug-in's alloc/free torch's CPU allocator, calling them as
 * CUDAPluggableAllocator::allocate does (alloc_fn_(size, device, stream) through a pointer, its result stored
 * in the DataPtr, no NULL check), so a CPU-only torch runs real ops through hbm_torch_alloc and its Python
 * bindings translate what it throws (torch/csrc/Exceptions.h CATCH_CORE_ERRORS). */
#include <dlfcn.h>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>

namespace
{
using AllocFn = void *(size_t, int, void *);
using FreeFn = void(void *, size_t, int, void *);
AllocFn *alloc_fn;
FreeFn *free_fn;

void deleter(void *p) { free_fn(p, 0, 0, nullptr); }

struct PluginAsCPU final : c10::Allocator {
    c10::DataPtr allocate(size_t n) const override
    {
        void *p = alloc_fn(n, 0, nullptr);
        return {p, p, &deleter, c10::Device(c10::DeviceType::CPU)};
    }
    c10::DeleterFnPtr raw_deleter() const override { return &deleter; }
};
PluginAsCPU instance;
} // namespace

extern "C" __attribute__((visibility("default"))) int hbm_test_install(const char *plugin)
{
    void *h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return -1;
    alloc_fn = reinterpret_cast<AllocFn *>(dlsym(h, "hbm_torch_alloc"));
    free_fn = reinterpret_cast<FreeFn *>(dlsym(h, "hbm_torch_free"));
    if (!alloc_fn || !free_fn)
        return -1;
    c10::SetCPUAllocator(&instance, 100);
    return 0;
}
