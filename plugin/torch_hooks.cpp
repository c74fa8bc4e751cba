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
#include <dlfcn.h>
#include <functional>
#include <mutex>
#include <new>
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

#ifdef HBM_PLUGIN_NPU
/* ---- torch_npu's events, recorded through its task queue ----
 *
 * A block freed while other streams used it gets one event per stream, recorded after the launches queued there
 * before the free. torch_npu's own allocator records them through its task queue (NPUCachingAllocator.cpp
 * insert_events -> NPUEvent::record -> c10_npu::queue::LaunchRecordEventTask, NPUEvent.cpp v26.1.0:115-131), and so
 * does this: c10_npu::NPUEvent is exported whole (struct C10_NPU_API NPUEvent, NPUEvent.h at every tag from
 * v2.1.0-6.0.rc1 to v26.2.0), its query() answers false until the queue has launched the record (v26.1.0:87-101,
 * NPUEventManager::IsEventRecorded). The NPUStream an event is recorded on is made from its c10::Stream parts (the
 * class holds one c10::Stream, NPUStream.h: "c10::Stream stream_", at every tag; c10::Stream is {Device{int8 type,
 * int8 index}, int64 id}); its aclrtStream comes from NPUStream::stream(bool need_empty) with false, which does not
 * empty the queue (NPUStream.cpp v26.1.0:838-846; stream() without the flag empties it). The events' storage: 256
 * bytes each, more than the class's 24 (v26.1.0) or 16 (v2.1.0-6.0.rc1). Each torch_npu call may throw (TORCH_CHECK):
 * caught here. */
namespace
{

struct npu_stream_parts {
    int8_t type, index;
    int64_t id;
};
static_assert(sizeof(npu_stream_parts) == 16, "c10::Stream is 16 bytes");

struct npu_event {
    alignas(16) unsigned char storage[256];
    int device;
    npu_event *next; /* in the free list */
};

struct npu_api {
    void (*ctor)(void *);
    void (*dtor)(void *);
    void (*record)(void *, const void *);
    bool (*query)(const void *);
    void *(*stream)(const void *, bool);
} api;

std::mutex events_mu;
npu_event *spare_events; /* completed events, recorded again (torch_npu pools its own: EventPool) */

constexpr int kStreams = 256;
struct known_stream {
    int device;
    void *acl;
    npu_stream_parts parts;
} streams[kStreams];
int nstreams;

bool find_stream(int device, void *acl, npu_stream_parts *out)
{
    std::lock_guard<std::mutex> g(events_mu);
    for (int i = 0; i < nstreams; i++)
        if (streams[i].device == device && streams[i].acl == acl) {
            *out = streams[i].parts;
            return true;
        }
    return false;
}

void note_stream(int device, void *acl, const npu_stream_parts &parts)
{
    std::lock_guard<std::mutex> g(events_mu);
    for (int i = 0; i < nstreams; i++)
        if (streams[i].device == device && streams[i].acl == acl)
            return;
    if (nstreams < kStreams)
        streams[nstreams++] = known_stream{device, acl, parts};
}

} // namespace

extern "C" {

int hbm_torch__npu_events_init(void *lib)
{
    *reinterpret_cast<void **>(&api.ctor) = dlsym(lib, "_ZN7c10_npu8NPUEventC1Ev");
    *reinterpret_cast<void **>(&api.dtor) = dlsym(lib, "_ZN7c10_npu8NPUEventD1Ev");
    *reinterpret_cast<void **>(&api.record) = dlsym(lib, "_ZN7c10_npu8NPUEvent6recordERKNS_9NPUStreamE");
    *reinterpret_cast<void **>(&api.query) = dlsym(lib, "_ZNK7c10_npu8NPUEvent5queryEv");
    *reinterpret_cast<void **>(&api.stream) = dlsym(lib, "_ZNK7c10_npu9NPUStream6streamEb");
    if (!api.ctor || !api.dtor || !api.record || !api.query || !api.stream) {
        api = npu_api{};
        return 0;
    }
    return 1;
}

int hbm_torch__npu_stream_of(int64_t id, int device_index, int device_type, void **acl)
{
    if (!api.stream)
        return -2;
    npu_stream_parts parts{static_cast<int8_t>(device_type), static_cast<int8_t>(device_index), id};
    try {
        *acl = api.stream(&parts, false);
    } catch (...) {
        return -1;
    }
    if (!*acl)
        return -1;
    note_stream(device_index, *acl, parts);
    return 0;
}

int hbm_torch__npu_event_record(void *ctx, int device, hbm_stream stream, void **event)
{
    (void)ctx;
    npu_stream_parts parts;
    if (!find_stream(device, reinterpret_cast<void *>(static_cast<uintptr_t>(stream)), &parts))
        return HBM_HOST_QUEUE_NO_STREAM;
    npu_event *e = nullptr;
    {
        std::lock_guard<std::mutex> g(events_mu);
        for (npu_event **at = &spare_events; *at; at = &(*at)->next)
            if ((*at)->device == device) {
                e = *at;
                *at = e->next;
                break;
            }
    }
    if (!e) {
        e = new (std::nothrow) npu_event();
        if (!e)
            return -1;
        e->device = device;
        try {
            api.ctor(e->storage);
        } catch (...) {
            delete e;
            return -1;
        }
    }
    try {
        api.record(e->storage, &parts);
    } catch (...) {
        try {
            api.dtor(e->storage);
        } catch (...) {
        }
        delete e;
        return -1;
    }
    *event = e;
    return 0;
}

int hbm_torch__npu_event_query(void *ctx, void *event)
{
    (void)ctx;
    try {
        return api.query(static_cast<npu_event *>(event)->storage) ? 1 : 0;
    } catch (...) {
        return -1;
    }
}

/* Completed (or the allocator is going away): kept for the next record. */
void hbm_torch__npu_event_release(void *ctx, void *event)
{
    (void)ctx;
    auto *e = static_cast<npu_event *>(event);
    std::lock_guard<std::mutex> g(events_mu);
    e->next = spare_events;
    spare_events = e;
}

} // extern "C"
#endif

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
