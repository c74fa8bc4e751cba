/* test_torch_hooks.cpp: the plug-in called exactly as torch's and torch_npu's pluggable-allocator classes
 * call it, on the simulated device. Python hands a hook over as an integer address (ctypes) and the C++
 * binding reinterpret_casts it to the hook's function type into a std::function
 * (torch/csrc/cuda/Module.cpp `_CUDAPluggableAllocator.set_*`, torch_npu/csrc/npu/Module.cpp); the class then
 * calls the std::function (torch/csrc/cuda/CUDAPluggableAllocator.cpp; torch_npu NPUPluggableAllocator.cpp):
 *   malloc:     void* r = alloc_fn_(size, device, stream); allocation_metadata_.emplace(r, {size, device, stream})
 *   raw_delete: look the metadata up, then free_fn_(ptr, size, device, stream)
 * `Host` below does the same, with the same types. usage: test_torch_hooks LIB [c10|generic] [cuda|npu] */
#include <dlfcn.h>
#include <setjmp.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>

#ifdef HBM_TEST_C10
#include <c10/util/Exception.h> /* before cmocka.h: its fail() macro would rename std::ios::fail */
#endif

extern "C" {
#include <cmocka.h>
}

static void *lib;
static bool npu;

/* The frameworks' types. */
struct CUstream_st;
using cuda_stream = CUstream_st *;
using MempoolId_t = std::pair<unsigned long long, unsigned long long>;

template <typename F> static F *sym(const char *name)
{
    void *p = dlsym(lib, name);
    if (!p)
        fail_msg("the plug-in does not export %s", name);
    return reinterpret_cast<F *>(p); /* as Module.cpp: reinterpret_cast<FuncType*>(func_ptr) */
}

/* The helper's entry points (ctypes in Python; plain C calls here). */
static long (*stats_text)(int, char *, long);
static int (*record_history)(long, int);
static int (*snapshot)(int, const char *);
static long (*pool_ids)(int, uint64_t *, long);
static int (*device_used)(int);

static long stat(const char *name)
{
    char buf[16384];
    long n = stats_text(0, buf, sizeof buf);
    assert_true(n > 0 && n < (long)sizeof buf);
    size_t len = strlen(name);
    for (char *line = buf; *line;) {
        char *eol = strchr(line, '\n');
        if (!strncmp(line, name, len) && line[len] == ' ')
            return atol(line + len + 1);
        line = eol ? eol + 1 : line + strlen(line);
    }
    fail_msg("no statistic %s", name);
    return -1;
}

/* What CUDAPluggableAllocator / NPUPluggableAllocator do with alloc and free. The stream type is
 * cudaStream_t for CUDA and aclrtStream (void *) for torch_npu; both are one pointer. */
struct Host {
    std::function<void *(size_t, int, cuda_stream)> alloc_fn;
    std::function<void(void *, size_t, int, cuda_stream)> free_fn;
    struct Meta {
        size_t size;
        int device;
        cuda_stream stream;
    };
    std::map<void *, Meta> metadata;

    Host()
    {
        using Alloc = void *(size_t, int, cuda_stream);
        using Free = void(void *, size_t, int, cuda_stream);
        alloc_fn = sym<Alloc>("hbm_torch_alloc");
        free_fn = sym<Free>("hbm_torch_free");
    }
    void *malloc(size_t size, int device, cuda_stream stream)
    {
        void *r = alloc_fn(size, device, stream); /* no NULL check: that is the point */
        metadata.emplace(r, Meta{size, device, stream});
        return r;
    }
    void raw_delete(void *ptr)
    {
        auto it = metadata.find(ptr);
        assert_true(it != metadata.end());
        Meta m = it->second;
        metadata.erase(it);
        free_fn(ptr, m.size, m.device, m.stream);
    }
};

static cuda_stream S(uintptr_t v) { return reinterpret_cast<cuda_stream>(v); }

/* The framework's OOM message, then hbmalloc's. */
static void check_oom_text(const std::string &what)
{
    if (npu) {
        assert_int_equal(what.rfind("NPU out of memory. Tried to allocate ", 0), 0);
        assert_true(what.find(" reserved in total by PyTorch).If reserved memory is >> allocated memory try setting "
                              "max_split_size_mb to avoid fragmentation.") != std::string::npos);
    } else {
        assert_int_equal(what.rfind("CUDA out of memory. Tried to allocate ", 0), 0);
        assert_true(what.find(" is reserved by PyTorch but unallocated. If reserved but unallocated memory is large "
                              "try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation. "
                              " See documentation") != std::string::npos);
    }
    assert_true(what.find("\nhbmalloc: out of memory on sim device 0.") != std::string::npos);
}

static void oom_throws_the_frameworks_exception_and_the_allocator_stays_usable(void **state)
{
    (void)state;
    Host h;
    void *small = h.malloc(1 << 20, 0, nullptr);
    assert_non_null(small);
    bool caught = false;
    try {
        h.malloc(size_t(1) << 40, 0, nullptr); /* 1 TiB on a 1 GiB device */
    }
#ifdef HBM_TEST_C10
    catch (const c10::OutOfMemoryError &e) {
        caught = true;
        check_oom_text(e.what_without_backtrace());
    }
#else
    catch (const std::runtime_error &e) {
        caught = true;
        check_oom_text(e.what());
    }
#endif
    assert_true(caught);
    assert_int_equal(h.metadata.size(), 1); /* nothing was stored for the failed request */
    assert_int_equal(stat("num_ooms"), 1);
    /* Still usable: allocate, free, and the statistics agree. */
    void *p = h.malloc(100 << 20, 0, nullptr);
    assert_non_null(p);
    assert_int_equal(stat("allocation.all.current"), 2);
    h.raw_delete(p);
    h.raw_delete(small);
    assert_int_equal(stat("allocation.all.current"), 0);
    /* 1 EiB and more: PyTorch's separate wording. */
    try {
        h.malloc(size_t(1) << 61, 0, nullptr);
        fail_msg("no exception for 2 EiB");
    } catch (const std::exception &e) {
        std::string w = e.what();
        assert_true(w.find(npu ? "NPU out of memory. Tried to allocate more than 1EB memory."
                               : "CUDA out of memory. Tried to allocate more than 1EB memory.") != std::string::npos);
    }
    /* Size 0 gives NULL, as PyTorch's own allocator, and frees as a no-op. */
    void *z = h.malloc(0, 0, nullptr);
    assert_null(z);
    h.raw_delete(z);
}

static void init_takes_a_device_count_and_creates_nothing(void **state)
{
    (void)state;
    auto init = std::function<void(int)>(sym<void(int)>("hbm_torch_init"));
    init(1); /* CUDAHooks::init -> CUDACachingAllocator::init(num_devices) */
    assert_int_equal(device_used(0), 0);
    Host h;
    void *p = h.malloc(4096, 0, nullptr);
    assert_int_equal(device_used(0), 1);
    h.raw_delete(p);
}

static void reset_and_memory_fraction_hooks(void **state)
{
    (void)state;
    Host h;
    void *p = h.malloc(300 << 20, 0, nullptr);
    h.raw_delete(p);
    assert_true(stat("reserved_bytes.all.current") >= (300 << 20));
    if (npu) {
        auto reset = std::function<void(bool)>(sym<void(bool)>("hbm_torch_reset")); /* emptyCache(check_error) */
        reset(true);
    } else {
        auto reset = std::function<void()>(sym<void()>("hbm_torch_cuda_reset")); /* torch.cuda.empty_cache() */
        reset();
    }
    assert_int_equal(stat("reserved_bytes.all.current"), 0);
    auto fraction = std::function<void(double, int)>(sym<void(double, int)>("hbm_torch_memory_fraction"));
    fraction(0.25, 0); /* of 1 GiB */
    auto get = sym<double(int)>("hbm_torch_get_memory_fraction");
    assert_true(get(0) == 0.25);
    try {
        h.malloc(300 << 20, 0, nullptr);
        fail_msg("no exception past the fraction");
    } catch (const std::exception &e) {
        assert_true(std::string(e.what()).find("256.00 MiB allowed; ") != std::string::npos);
    }
    fraction(1.0, 0);
    p = h.malloc(300 << 20, 0, nullptr);
    h.raw_delete(p);
}

static void record_stream_keeps_a_block_until_the_stream_is_done(void **state)
{
    (void)state;
    if (npu)
        skip(); /* torch_npu's record_stream hook takes an NPUStream by value: not set (see PYTORCH.md) */
    Host h;
    auto record =
        std::function<void(void *, cuda_stream)>(sym<void(void *, cuda_stream)>("hbm_torch_record_stream_fn"));
    void *p = h.malloc(5 << 20, 0, S(0x11));
    record(p, S(0x22)); /* Tensor.record_stream -> CUDAPluggableAllocator::recordStream -> record_stream_fn_(ptr, s) */
    long active = stat("active_bytes.all.current");
    h.raw_delete(p);
    assert_int_equal(stat("active_bytes.all.current"), active); /* pending on stream 0x22's event */
    assert_int_equal(stat("allocated_bytes.all.current"), active - (5 << 20));
    void *q = h.malloc(4096, 0, S(0x11)); /* the next malloc finds the event complete */
    assert_int_equal(stat("active_bytes.all.current"), active - (5 << 20) + 4096);
    h.raw_delete(q);
    record(nullptr, S(0x22)); /* ignored, as PyTorch ignores null data pointers */
}

static void base_alloc_gives_the_device_allocation(void **state)
{
    (void)state;
    Host h;
    assert_int_equal(sym<int(void)>("hbm_torch_empty_cache")(), 0); /* a fresh segment for the two blocks */
    auto base = std::function<void *(void *, size_t *)>(sym<void *(void *, size_t *)>("hbm_torch_base_alloc"));
    void *a = h.malloc(3 << 20, 0, nullptr), *b = h.malloc(3 << 20, 0, nullptr);
    size_t sa = 0, sb = 0;
    void *ba = base(a, &sa), *bb = base(b, &sb);
    assert_ptr_equal(ba, bb); /* two blocks of one 20 MiB segment */
    assert_int_equal(sa, 20 << 20);
    assert_true((char *)a >= (char *)ba && (char *)b < (char *)ba + sa);
    bool threw = false;
    try {
        base((char *)a + 512, &sa);
    } catch (const std::exception &e) {
        threw = std::string(e.what()).find("not a live block") != std::string::npos;
    }
    assert_true(threw);
    h.raw_delete(a);
    h.raw_delete(b);
}

static void device_stats_hook_matches_torch_npus_struct(void **state)
{
    (void)state;
    /* torch_npu/csrc/core/npu/NPUCachingAllocator.h (v6.0.rc1-pytorch2.1.0 .. v26.2.0-beta.1-pytorch2.12.0), written
     * here as torch_npu declares it, so a field out of order in the plug-in's C struct fails this test. */
    struct Stat {
        int64_t current = 0, peak = 0, allocated = 0, freed = 0;
    };
    using StatArray = std::array<Stat, 3>;
    struct DeviceStats {
        StatArray allocation, segment, active, inactive_split;
        StatArray allocated_bytes, reserved_bytes, active_bytes, inactive_split_bytes, requested_bytes;
        int64_t num_alloc_retries = 0;
        int64_t num_ooms = 0;
        Stat oversize_allocations;
        Stat oversize_segments;
        int64_t max_split_size = 0;
    };
    auto get = std::function<DeviceStats(int)>(sym<DeviceStats(int)>("hbm_torch_npu_device_stats"));
    auto reset_peak = std::function<void(int)>(sym<void(int)>("hbm_torch_reset_peak"));
    Host h;
    void *p = h.malloc(7 << 20, 0, nullptr), *q = h.malloc(1000, 0, nullptr);
    try {
        h.malloc(size_t(1) << 40, 0, nullptr);
    } catch (const std::exception &) {
    }
    h.raw_delete(q);
    DeviceStats s = get(0);
    assert_true(s.num_ooms >= 1);
    const char *kinds[3] = {"all", "small_pool", "large_pool"};
    for (int k = 0; k < 3; k++) {
        char n[80];
        struct {
            const char *name;
            const StatArray *arr;
        } arrays[] = {{"allocation", &s.allocation},
                      {"segment", &s.segment},
                      {"active", &s.active},
                      {"inactive_split", &s.inactive_split},
                      {"allocated_bytes", &s.allocated_bytes},
                      {"reserved_bytes", &s.reserved_bytes},
                      {"active_bytes", &s.active_bytes},
                      {"inactive_split_bytes", &s.inactive_split_bytes},
                      {"requested_bytes", &s.requested_bytes}};
        for (auto &a : arrays) {
            snprintf(n, sizeof n, "%s.%s.current", a.name, kinds[k]);
            assert_int_equal((*a.arr)[k].current, stat(n));
            snprintf(n, sizeof n, "%s.%s.peak", a.name, kinds[k]);
            assert_int_equal((*a.arr)[k].peak, stat(n));
            snprintf(n, sizeof n, "%s.%s.allocated", a.name, kinds[k]);
            assert_int_equal((*a.arr)[k].allocated, stat(n));
            snprintf(n, sizeof n, "%s.%s.freed", a.name, kinds[k]);
            assert_int_equal((*a.arr)[k].freed, stat(n));
        }
    }
    assert_int_equal(s.num_ooms, stat("num_ooms"));
    assert_int_equal(s.num_alloc_retries, stat("num_alloc_retries"));
    assert_int_equal(s.oversize_allocations.current, stat("oversize_allocations.current"));
    assert_int_equal(s.oversize_segments.peak, stat("oversize_segments.peak"));
    assert_int_equal(s.max_split_size, -1);
    assert_true(s.allocated_bytes[0].peak > s.allocated_bytes[0].current);
    reset_peak(0); /* torch.npu.reset_peak_memory_stats */
    s = get(0);
    assert_int_equal(s.allocated_bytes[0].peak, s.allocated_bytes[0].current);
    h.raw_delete(p);
    s = get(5); /* a device that does not exist (or never allocated): zeros */
    assert_int_equal(s.allocation[0].allocated, 0);
    assert_int_equal(s.max_split_size, -1);
}

/* ---- graph pools ---- */

using Filter = std::function<bool(cuda_stream)>;
using Begin = void(int, MempoolId_t, Filter);
using EndOrRelease = void(int, MempoolId_t);

/* Device 0's snapshot as the helper writes it (JSON). */
static std::string snapshot_json()
{
    char path[] = "/tmp/hbm_hooks_XXXXXX.json";
    int fd = mkstemps(path, 5);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(snapshot(0, path), 0);
    FILE *f = fopen(path, "r");
    std::string js;
    char buf[65536];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        js.append(buf, n);
    fclose(f);
    unlink(path);
    return js;
}

static bool in_graph_pool(void *p)
{
    std::string js = snapshot_json();
    /* Each segment's entry: "address":A,...,"segment_pool_id":[0,id] */
    uint64_t ids[3 * 8];
    long np = pool_ids(0, ids, 8);
    size_t at = 0;
    while ((at = js.find("{\"device\":0,\"address\":", at)) != std::string::npos) {
        at += strlen("{\"device\":0,\"address\":");
        unsigned long long addr = strtoull(js.c_str() + at, nullptr, 10);
        size_t ts = js.find("\"total_size\":", at);
        unsigned long long size = strtoull(js.c_str() + ts + 13, nullptr, 10);
        size_t pid = js.find("\"segment_pool_id\":[0,", at);
        unsigned long long pool = strtoull(js.c_str() + pid + 21, nullptr, 10);
        if ((uintptr_t)p >= addr && (uintptr_t)p < addr + size) {
            for (long i = 0; i < np; i++)
                if (ids[3 * i] == pool)
                    return true;
            return false;
        }
    }
    fail_msg("pointer %p is in no segment", p);
    return false;
}

static void graph_pool_hooks_keep_captured_blocks_out_of_eager_use(void **state)
{
    (void)state;
    auto begin = std::function<Begin>(sym<Begin>("hbm_torch_begin_allocate_to_pool"));
    auto end = std::function<EndOrRelease>(sym<EndOrRelease>("hbm_torch_end_allocate_to_pool"));
    auto release = std::function<EndOrRelease>(sym<EndOrRelease>("hbm_torch_release_pool"));
    Host h;
    assert_int_equal(sym<int(void)>("hbm_torch_empty_cache")(), 0);
    assert_int_equal(stat("reserved_bytes.all.current"), 0); /* every earlier test freed what it allocated */
    cuda_stream capture = S(0x77);
    MempoolId_t id{0, 1}; /* graph_pool_handle(): {0, uid} */
    /* CUDAGraph::capture_begin: the filter asks whether the stream is the one being captured. */
    int calls = 0;
    begin(0, id, [&](cuda_stream s) {
        calls++;
        return s == capture;
    });
    assert_int_equal(sym<int(int)>("hbm_torch_captures_underway")(0), 1);
    void *g1 = h.malloc(6 << 20, 0, capture), *g2 = h.malloc(2 << 20, 0, capture);
    void *e1 = h.malloc(2 << 20, 0, S(0x11)); /* another stream during the capture: the default pools */
    assert_true(calls >= 3);
    assert_true(in_graph_pool(g1) && in_graph_pool(g2));
    assert_false(in_graph_pool(e1));
    h.raw_delete(g2); /* freed inside the capture: back to the graph's pool */
    end(0, id);       /* capture_end */
    assert_int_equal(sym<int(int)>("hbm_torch_captures_underway")(0), 0);
    /* Eager tensors after the capture never get the graph's memory, freed or not. */
    for (int i = 0; i < 4; i++) {
        void *e = h.malloc(2 << 20, 0, capture);
        assert_false(in_graph_pool(e));
        h.raw_delete(e);
    }
    /* A second graph sharing the pool (graph.capture_begin(pool=...)): uses 2, released twice. */
    begin(0, id, [&](cuda_stream s) { return s == capture; });
    void *g3 = h.malloc(1 << 20, 0, capture);
    assert_true(in_graph_pool(g3));
    end(0, id);
    release(0, id); /* the first graph's reset: the second still holds the pool */
    assert_int_equal(pool_ids(0, nullptr, 0), 1);
    h.raw_delete(g1);
    h.raw_delete(g3);
    release(0, id);
    assert_int_equal(pool_ids(0, nullptr, 0), 0);
    assert_int_equal(sym<int(void)>("hbm_torch_empty_cache")(), 0);
    assert_int_equal(stat("reserved_bytes.all.current"), 20 << 20); /* e1's segment alone */
    h.raw_delete(e1);
    /* Misuse: a clear exception, nothing changed. */
    bool threw = false;
    try {
        end(0, MempoolId_t{0, 99});
    } catch (const std::exception &e) {
        threw = std::string(e.what()).find("not currently recording to mempool (0, 99)") != std::string::npos;
    }
    assert_true(threw);
    threw = false;
    try {
        release(0, MempoolId_t{0, 99});
    } catch (const std::exception &e) {
        threw = std::string(e.what()).find("unknown mempool (0, 99)") != std::string::npos;
    }
    assert_true(threw);
}

static void a_throwing_filter_means_not_this_pool(void **state)
{
    (void)state;
    auto begin = std::function<Begin>(sym<Begin>("hbm_torch_begin_allocate_to_pool"));
    auto end = std::function<EndOrRelease>(sym<EndOrRelease>("hbm_torch_end_allocate_to_pool"));
    auto release = std::function<EndOrRelease>(sym<EndOrRelease>("hbm_torch_release_pool"));
    Host h;
    MempoolId_t id{5, 0}; /* capture_begin's own id: {capture id, 0} */
    begin(0, id, [](cuda_stream) -> bool { throw std::runtime_error("cudaStreamGetCaptureInfo failed"); });
    void *p = h.malloc(1 << 20, 0, S(0x77));
    assert_false(in_graph_pool(p));
    h.raw_delete(p);
    end(0, id);
    release(0, id);
    assert_int_equal(pool_ids(0, nullptr, 0), 0);
}

static void python_stacks_are_off_outside_python(void **state)
{
    (void)state;
    /* No interpreter in this process: asking for stacks must not crash, and gives none. */
    assert_int_equal(sym<int(void)>("hbm_torch_stacks_available")(), 0);
    assert_int_equal(record_history(100, 1), 0);
    assert_int_equal(sym<int(const char *)>("hbm_torch_set_label")("forward"), 0);
    Host h;
    void *p = h.malloc(4096, 0, nullptr);
    std::string js = snapshot_json();
    assert_true(js.find("\"frames\":[{\"name\":\"forward\",\"filename\":\"\",\"line\":0}]") != std::string::npos);
    sym<int(const char *)>("hbm_torch_set_label")(nullptr);
    assert_int_equal(record_history(0, 0), 0);
    h.raw_delete(p);
}

/* Pools that sleep (docs/SLEEP.md), with use(): hbmalloc.torch.pool(tag) routes the thread's allocations into the
 * tag's pool, and a graph captured inside gets a private pool of the same tag, so sleep(tag) puts both to sleep and
 * wake(tag) brings both back (torch_memory_saver's cuda_graph region); an allocation routed into the sleeping pool
 * throws, with the reason. */
static void a_graph_captured_inside_a_pool_sleeps_with_its_tag(void **state)
{
    (void)state;
    auto begin = std::function<Begin>(sym<Begin>("hbm_torch_begin_allocate_to_pool"));
    auto end = std::function<EndOrRelease>(sym<EndOrRelease>("hbm_torch_end_allocate_to_pool"));
    auto release = std::function<EndOrRelease>(sym<EndOrRelease>("hbm_torch_release_pool"));
    auto enter = sym<int(const char *, int, int)>("hbm_torch_pool_enter");
    auto leave = sym<int(void)>("hbm_torch_pool_exit");
    auto sleep_ = sym<int(const char *, size_t, void *, void *)>("hbm_torch_sleep");
    auto wake_ = sym<int(const char *, int, void *, void *)>("hbm_torch_wake");
    Host h;
    assert_int_equal(enter("cuda_graph", 1, 0), 0);
    void *x = h.malloc(3 << 20, 0, S(0x11)); /* the graph's static input, made before the capture */
    cuda_stream capture = S(0x79);
    MempoolId_t id{0, 7};
    begin(0, id, [&](cuda_stream s) { return s == capture; });
    void *g = h.malloc(6 << 20, 0, capture); /* the graph's own pool */
    end(0, id);
    assert_int_equal(leave(), 0);
    assert_true(in_graph_pool(g));
    long reserved = stat("reserved_bytes.all.current");
    assert_int_equal(sleep_("cuda_graph", 0, nullptr, nullptr), 2);
    assert_int_equal(stat("asleep_pools"), 2);
    assert_int_equal(stat("reserved_bytes.all.current"), reserved - 40 * (1 << 20)); /* one 20 MiB page each */
    assert_int_equal(enter("cuda_graph", 1, 0), 0);
    bool threw = false;
    try {
        h.malloc(1 << 20, 0, S(0x11));
    } catch (const std::exception &e) {
        threw = std::string(e.what()).find("('cuda_graph') is asleep") != std::string::npos;
    }
    assert_true(threw);
    assert_int_equal(leave(), 0);
    assert_int_equal(wake_("cuda_graph", 0, nullptr, nullptr), 2);
    assert_int_equal(stat("asleep_pools"), 0);
    assert_int_equal(stat("reserved_bytes.all.current"), reserved);
    h.raw_delete(g);
    h.raw_delete(x);
    release(0, id);
}

/* A graph deleted whose output is still held keeps its pool (released, not empty): it still sleeps and wakes with
 * its tag, released awake or asleep (issue #37 item 6: sleep and wake raised "released already" until the next
 * empty_cache, and a pool released asleep never woke). And every pool of a device counts, however many graphs made
 * one: with 300 of them made first, a tag's pool is still found (item 7: the plug-in read the oldest 256, and
 * sleep("late") returned 0). */
static void released_and_late_pools_still_sleep_with_their_tag(void **state)
{
    (void)state;
    auto begin = std::function<Begin>(sym<Begin>("hbm_torch_begin_allocate_to_pool"));
    auto end = std::function<EndOrRelease>(sym<EndOrRelease>("hbm_torch_end_allocate_to_pool"));
    auto release = std::function<EndOrRelease>(sym<EndOrRelease>("hbm_torch_release_pool"));
    auto enter = sym<int(const char *, int, int)>("hbm_torch_pool_enter");
    auto leave = sym<int(void)>("hbm_torch_pool_exit");
    auto sleep_ = sym<int(const char *, size_t, void *, void *)>("hbm_torch_sleep");
    auto wake_ = sym<int(const char *, int, void *, void *)>("hbm_torch_wake");
    Host h;
    cuda_stream capture = S(0x7a);
    auto graph = [&](uint64_t n, size_t bytes) { /* a graph captured inside the thread's pool(tag), if any */
                                                 MempoolId_t id{0, n};
                                                 begin(0, id, [&](cuda_stream s) { return s == capture; });
                                                 void *out = bytes ? h.malloc(bytes, 0, capture) : nullptr;
                                                 end(0, id);
                                                 return out;
    };
    assert_int_equal(enter("released", 1, 0), 0);
    void *out = graph(801, 4 << 20);
    void *out2 = graph(802, 4 << 20);
    assert_int_equal(leave(), 0);
    release(0, MempoolId_t{0, 801});                              /* the graph deleted, its output held */
    assert_int_equal(sleep_("released", 0, nullptr, nullptr), 3); /* the tag's own pool and the graphs' */
    release(0, MempoolId_t{0, 802});                              /* deleted while asleep */
    assert_int_equal(wake_("released", 0, nullptr, nullptr), 3);
    assert_int_equal(stat("asleep_pools"), 0);
    h.raw_delete(out);
    h.raw_delete(out2);
    for (uint64_t n = 0; n < 300; n++) /* 300 graph pools (empty: no address space needed) */
        graph(1000 + n, 0);
    assert_int_equal(enter("late", 0, 0), 0);
    void *late = h.malloc(2 << 20, 0, S(0x11));
    assert_int_equal(leave(), 0);
    assert_int_equal(sleep_("late", 0, nullptr, nullptr), 1);
    assert_int_equal(stat("asleep_pools"), 1);
    assert_int_equal(wake_("late", 0, nullptr, nullptr), 1);
    h.raw_delete(late);
    for (uint64_t n = 0; n < 300; n++)
        release(0, MempoolId_t{0, 1000 + n});
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s LIB generic|c10 [npu]\n", argv[0]);
        return 2;
    }
    npu = argc > 3 && !strcmp(argv[3], "npu");
    lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "%s\n", dlerror());
        return 1;
    }
    stats_text = sym<long(int, char *, long)>("hbm_torch_stats");
    record_history = sym<int(long, int)>("hbm_torch_record_history");
    snapshot = sym<int(int, const char *)>("hbm_torch_snapshot");
    pool_ids = sym<long(int, uint64_t *, long)>("hbm_torch_pool_ids");
    device_used = sym<int(int)>("hbm_torch_device_used");
    const char *build = sym<const char *(void)>("hbm_torch_build")();
    if (strncmp(build, argv[2], strlen(argv[2]))) {
        fprintf(stderr, "the plug-in is a '%s' build, not %s\n", build, argv[2]);
        return 1;
    }
    /* init first: it must not create the device's allocator. */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(init_takes_a_device_count_and_creates_nothing),
        cmocka_unit_test(oom_throws_the_frameworks_exception_and_the_allocator_stays_usable),
        cmocka_unit_test(reset_and_memory_fraction_hooks),
        cmocka_unit_test(record_stream_keeps_a_block_until_the_stream_is_done),
        cmocka_unit_test(base_alloc_gives_the_device_allocation),
        cmocka_unit_test(device_stats_hook_matches_torch_npus_struct),
        cmocka_unit_test(graph_pool_hooks_keep_captured_blocks_out_of_eager_use),
        cmocka_unit_test(a_throwing_filter_means_not_this_pool),
        cmocka_unit_test(python_stacks_are_off_outside_python),
        cmocka_unit_test(a_graph_captured_inside_a_pool_sleeps_with_its_tag),
        cmocka_unit_test(released_and_late_pools_still_sleep_with_their_tag),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
