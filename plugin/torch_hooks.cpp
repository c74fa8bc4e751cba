/*
 * torch_hooks.cpp: the plug-in's hooks whose host interface is C++ (the one
 * C++ unit of hbmalloc; everything it does is in torch_plugin.c):
 *
 *   - hbm_torch_alloc, CUDAPluggableAllocator's and NPUPluggableAllocator's
 *     alloc: both store what it returns in the tensor without a NULL check
 *     (CUDAPluggableAllocator::malloc, NPUPluggableAllocator::malloc), so out
 *     of memory must be an exception, never NULL. Built against the installed
 *     torch's headers (HBM_TORCH_C10) it throws c10::OutOfMemoryError, which
 *     Python sees as torch.OutOfMemoryError (torch.cuda.OutOfMemoryError);
 *     otherwise a std::runtime_error, which Python sees as RuntimeError. The
 *     text is the framework's own OOM message followed by hbmalloc's.
 *   - hbm_torch_base_alloc (set_base_alloc_fn): getBaseAllocation, throwing as
 *     PyTorch's does for expandable segments.
 *   - the graph-pool hooks set_begin_allocate_to_pool, set_end_allocate_to_pool_fn
 *     and set_release_pool: void(int, MempoolId_t, std::function<bool(stream)>)
 *     and void(int, MempoolId_t), mapped to hbmalloc's capture routing.
 *
 * The types are the frameworks' own: MempoolId_t is std::pair<unsigned long
 * long, unsigned long long> (c10/cuda/CUDAGraphsC10Utils.h, torch_npu
 * NPUGraphsUtils.h); the stream is cudaStream_t (struct CUstream_st *) or
 * aclrtStream (void *). Nothing may unwind through the C core: the filter is
 * called from it, so its exceptions stop at the trampoline.
 */
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "torch_plugin.h"

#ifdef HBM_TORCH_C10
#include <c10/util/Exception.h>
#endif

#ifdef HBM_PLUGIN_NPU
using hbm_torch_stream = void *; /* aclrtStream */
#else
struct CUstream_st;
using hbm_torch_stream = CUstream_st *; /* cudaStream_t */
#endif
using hbm_torch_mempool_id = std::pair<unsigned long long, unsigned long long>;
using hbm_torch_filter = std::function<bool(hbm_torch_stream)>;

namespace
{

[[noreturn]] void throw_oom(const char *msg)
{
#ifdef HBM_TORCH_C10
    C10_THROW_ERROR(OutOfMemoryError, msg);
#else
    throw std::runtime_error(msg);
#endif
}

[[noreturn]] void throw_error(const char *msg)
{
#ifdef HBM_TORCH_C10
    C10_THROW_ERROR(Error, msg);
#else
    throw std::runtime_error(msg);
#endif
}

/* The core calls the filter under its lock: whatever the filter throws means "not this pool". */
int call_filter(void *ctx, hbm_stream stream)
{
    try {
        return (*static_cast<hbm_torch_filter *>(ctx))(reinterpret_cast<hbm_torch_stream>(stream)) ? 1 : 0;
    } catch (...) {
        return 0;
    }
}

} // namespace

extern "C" {

HBM_TORCH_EXPORT void *hbm_torch_alloc(size_t size, int device, hbm_torch_stream stream);
HBM_TORCH_EXPORT void *hbm_torch_base_alloc(void *ptr, size_t *size);
HBM_TORCH_EXPORT void hbm_torch_begin_allocate_to_pool(int device, hbm_torch_mempool_id id, hbm_torch_filter filter);
HBM_TORCH_EXPORT void hbm_torch_end_allocate_to_pool(int device, hbm_torch_mempool_id id);
HBM_TORCH_EXPORT void hbm_torch_release_pool(int device, hbm_torch_mempool_id id);
HBM_TORCH_EXPORT const char *hbm_torch_build(void);

/* alloc(size, device, stream): a pointer, or an exception. Size 0 gives NULL, as PyTorch's own allocator. */
HBM_TORCH_EXPORT void *hbm_torch_alloc(size_t size, int device, hbm_torch_stream stream)
{
    void *p = nullptr;
    char msg[4096];
    int rc = hbm_torch__malloc(size, device, stream, &p, msg, sizeof msg);
    if (rc == 1)
        throw_oom(msg);
    if (rc != 0)
        throw_error(msg);
    return p;
}

HBM_TORCH_EXPORT void *hbm_torch_base_alloc(void *ptr, size_t *size)
{
    void *base = nullptr;
    size_t n = 0;
    char msg[2048];
    if (hbm_torch__base(ptr, &base, &n, msg, sizeof msg) != 0)
        throw_error(msg);
    if (size)
        *size = n;
    return base;
}

/* CUDAGraph::capture_begin / NPUGraph::capture_begin: allocations on the streams the filter accepts go to
 * the graph's private pool until the end hook. The filter is kept on the heap until then. */
HBM_TORCH_EXPORT void hbm_torch_begin_allocate_to_pool(int device, hbm_torch_mempool_id id, hbm_torch_filter filter)
{
    auto *keep = new hbm_torch_filter(std::move(filter));
    char msg[2048];
    if (hbm_torch__pool_begin(device, id.first, id.second, call_filter, keep, msg, sizeof msg) != 0) {
        delete keep;
        throw_error(msg);
    }
}

HBM_TORCH_EXPORT void hbm_torch_end_allocate_to_pool(int device, hbm_torch_mempool_id id)
{
    void *ctx = nullptr;
    char msg[2048];
    int rc = hbm_torch__pool_end(device, id.first, id.second, &ctx, msg, sizeof msg);
    delete static_cast<hbm_torch_filter *>(ctx);
    if (rc != 0)
        throw_error(msg);
}

/* Graph reset / destruction: torch's last use of the pool; its memory returns once its blocks are freed. */
HBM_TORCH_EXPORT void hbm_torch_release_pool(int device, hbm_torch_mempool_id id)
{
    char msg[2048];
    if (hbm_torch__pool_release(device, id.first, id.second, msg, sizeof msg) != 0)
        throw_error(msg);
}

/* torch_npu's c10_npu::npuSynchronizeDevice(bool) (NPUStream.h, exported from libtorch_npu.so), called with
 * check_error false: it may still throw on a device fault (CHECK_AND_THROW_ERROR_WITH_SPECIFIC_MESSAGE), and nothing
 * may unwind through the C core. 0: done; 1: it reported a failure; 2: it threw. */
int hbm_torch__call_bool_fn(void *fn)
{
    try {
        return reinterpret_cast<bool (*)(bool)>(fn)(false) ? 0 : 1;
    } catch (...) {
        return 2;
    }
}

/* What hbmalloc_torch.use() checks before loading a build: "c10 <torch version> <cxx11 abi>" or "generic". */
HBM_TORCH_EXPORT const char *hbm_torch_build(void)
{
#ifdef HBM_TORCH_C10
    return "c10 " HBM_TORCH_VERSION " " HBM_TORCH_CXX11_ABI;
#else
    return "generic";
#endif
}

} // extern "C"
