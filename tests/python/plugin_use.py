"""hbmalloc_torch.use() without torch: stand-in torch / torch_npu modules shaped as the real ones (the setters of
torch/csrc/cuda/Module.cpp's _CUDAPluggableAllocator and torch_npu/csrc/npu/Module.cpp's NPUPluggableAllocator, the
torch._C functions torch.cuda.memory calls, CUDAGraph, torch.compile) record what use() registers; the C-typed
hooks are then called through the very addresses it passed, as the frameworks call them, and the routed memory API
is compared with hbmalloc's statistics. (The C++-typed hooks are called with their real types by test_torch_hooks.)

usage: plugin_use.py LIB PLUGIN_DIR MODE, MODE one of
  cuda      torch 2.6 with every hook
  cuda-old  torch 2.1: no graph-pool hooks, so graph capture is refused
  torch1    torch 1.13: use() refuses
  npu       torch_npu 2.6.0.post1 (own DeviceStats layout, no pool hooks)
  npu213    torch_npu 2.13.0 (c10 DeviceStats: the stats hook is not set, the Python API is routed)"""
import atexit
import ctypes
import os
import pickle
import shutil
import sys
import tempfile
import types
import warnings

lib_path, plugin_dir, mode = sys.argv[1:4]
os.environ.pop("HBMALLOC_CONF", None)
os.environ.pop("MULTI_STREAM_MEMORY_REUSE", None)
if plugin_dir:  # "": the installed package (tests/cli/package.sh)
    sys.path.insert(0, plugin_dir)
npu = mode.startswith("npu")
calls = {}


class Unsupported(RuntimeError):
    pass


def unsupported(what):
    def f(*args, **kwargs):
        raise Unsupported("CUDAPluggableAllocator does not yet support %s" % what)
    return f


class Raw:
    """The pybind object allocator() returns: one setter per hook of this framework version."""

    def __init__(self, setters):
        for name in setters:
            setattr(self, name, (lambda n: lambda fn: calls.__setitem__(n, fn))(name))


CUDA_SETTERS = ["set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_base_alloc_fn", "set_record_stream_fn"]
POOL_SETTERS = ["set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool"]
NPU_SETTERS = ["set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_base_alloc_fn", "set_record_stream_fn",
               "set_erase_stream_fn", "set_get_device_stats_fn", "set_reset_peak_status_fn"]


def pluggable(setters):
    class Pluggable:
        def __init__(self, path, alloc_name, free_name):
            calls["ctor"] = (path, alloc_name, free_name)
            self._raw = Raw(setters)

        def allocator(self):
            return self._raw
    return Pluggable


class Graph:
    def capture_begin(self, *args, **kwargs):
        calls["capture_begin"] = True


def flatten(nested):
    out = {}

    def rec(prefix, obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                rec(prefix + "." + k if prefix else k, v)
        else:
            out[prefix] = obj
    rec("", nested)
    return out


torch = types.ModuleType("torch")
torch.__version__ = {"cuda": "2.6.0+cu124", "cuda-old": "2.1.2", "torch1": "1.13.1"}.get(mode, "2.6.0")
torch._C = types.ModuleType("torch._C")
torch._C._GLIBCXX_USE_CXX11_ABI = True
for name in ("memoryStats", "resetPeakMemoryStats", "resetAccumulatedMemoryStats", "getMemoryFraction",
             "memorySnapshot", "record_memory_history"):
    setattr(torch._C, "_cuda_" + name, unsupported(name))
torch.Tensor = type("Tensor", (), {"record_stream": lambda self, s: calls.__setitem__("native_record_stream", s)})
torch.compile = lambda *a, **k: "compiled"
memory = types.SimpleNamespace(
    change_current_allocator=lambda a: calls.__setitem__("current", a),
    memory_stats=types.SimpleNamespace(__doc__="... num_oom_rejections: ..."))
setters = CUDA_SETTERS + ([] if mode in ("cuda-old",) else POOL_SETTERS)
if mode != "torch1":
    memory.CUDAPluggableAllocator = pluggable(setters)
torch.cuda = types.SimpleNamespace(memory=memory, CUDAGraph=Graph, current_device=lambda: 0)
sys.modules["torch"] = torch
sys.modules["torch._C"] = torch._C

if npu:
    torch_npu = types.ModuleType("torch_npu")
    torch_npu.__version__ = "2.13.0" if mode == "npu213" else "2.6.0.post1"
    torch_npu._C = types.ModuleType("torch_npu._C")
    for name in ("memoryStats", "resetPeakMemoryStats", "resetAccumulatedMemoryStats", "getMemoryFraction",
                 "memorySnapshot", "record_memory_history"):
        setattr(torch_npu._C, "_npu_" + name, unsupported(name))
    npu_memory = types.SimpleNamespace(
        NPUPluggableAllocator=pluggable(NPU_SETTERS + (POOL_SETTERS if mode == "npu213" else [])),
        change_current_allocator=lambda a: calls.__setitem__("current", a),
        memory_stats=types.SimpleNamespace(__doc__=""))
    torch_npu.npu = types.SimpleNamespace(memory=npu_memory, NPUGraph=Graph, current_device=lambda: 0)
    torch.npu = torch_npu.npu
    sys.modules["torch_npu"] = torch_npu

import hbmalloc_torch as h  # noqa: E402

if mode == "torch1":
    try:
        h.use(lib_path, device="cuda")
        raise AssertionError("use() accepted torch 1.13")
    except RuntimeError as e:
        assert "needs torch >= 2.0 (CUDAPluggableAllocator); installed 1.13.1" in str(e), e
    print("ok")
    sys.exit(0)

dumps = tempfile.mkdtemp(prefix="hbm-oomdump-")  # use(oom_dump_dir=): this rank's snapshot at each OOM
atexit.register(shutil.rmtree, dumps, True)  # also when an assertion fails
os.environ["RANK"] = "3"  # as torchrun sets it for a worker
os.environ["HBMALLOC_OOM_DUMP_DIR"] = "/nonexistent"  # the argument wins over the variable
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    alloc = h.use(lib_path, device="npu" if npu else "cuda", oom_dump_dir=dumps)
said = [str(w.message) for w in caught]
assert calls["current"] is alloc
# The framework's variable is read as this release reads it (src/conf/conf.c default_release).
if npu:
    assert os.environ["HBMALLOC_TORCH_NPU_VERSION"] == torch_npu.__version__, os.environ
else:
    assert os.environ["HBMALLOC_TORCH_VERSION"] == torch.__version__, os.environ
path, alloc_name, free_name = calls["ctor"]
assert path == lib_path and (alloc_name, free_name) == ("hbm_torch_alloc", "hbm_torch_free"), calls["ctor"]
assert any("out of memory raises RuntimeError" in s for s in said), said  # a generic build: said once

dl = ctypes.CDLL(lib_path)


def addr(name):
    return ctypes.cast(getattr(dl, name), ctypes.c_void_p).value


expected = {"set_init_fn": "hbm_torch_init", "set_memory_fraction_fn": "hbm_torch_memory_fraction",
            "set_base_alloc_fn": "hbm_torch_base_alloc"}
if npu:
    expected.update(set_reset_fn="hbm_torch_reset", set_reset_peak_status_fn="hbm_torch_reset_peak")
    if mode == "npu":
        expected["set_get_device_stats_fn"] = "hbm_torch_npu_device_stats"
    else:
        expected.update(set_begin_allocate_to_pool="hbm_torch_begin_allocate_to_pool",
                        set_end_allocate_to_pool_fn="hbm_torch_end_allocate_to_pool",
                        set_release_pool="hbm_torch_release_pool")
else:
    expected.update(set_reset_fn="hbm_torch_cuda_reset", set_record_stream_fn="hbm_torch_record_stream_fn")
    if mode == "cuda":
        expected.update(set_begin_allocate_to_pool="hbm_torch_begin_allocate_to_pool",
                        set_end_allocate_to_pool_fn="hbm_torch_end_allocate_to_pool",
                        set_release_pool="hbm_torch_release_pool")
for setter, fn in expected.items():
    assert calls.get(setter) == addr(fn), (setter, fn, calls.get(setter))
# Not set: record/erase stream on torch_npu (an NPUStream by value); the stats hook on torch_npu 2.13.
for setter in ("set_record_stream_fn", "set_erase_stream_fn") if npu else ():
    assert setter not in calls, setter
if mode == "npu213":
    assert "set_get_device_stats_fn" not in calls
    assert any("c10::CachingDeviceAllocator::DeviceStats" in s for s in said), said

# The C-typed hooks, called through the addresses use() passed, with the frameworks' types.
init = ctypes.CFUNCTYPE(None, ctypes.c_int)(calls["set_init_fn"])
fraction = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int)(calls["set_memory_fraction_fn"])
init(1)  # the device count
lib = h.library()
assert lib.hbm_torch_device_used(0) == 0
p = lib.hbm_torch_raw_alloc(50 << 20, 0, None)
assert p, h._error()
if npu:
    reset = ctypes.CFUNCTYPE(None, ctypes.c_bool)(calls["set_reset_fn"])
    assert h.stats()["allocated_bytes.all.current"] == (50 << 20) + 512  # torch_npu's 32-byte pad, rounded
else:
    reset = ctypes.CFUNCTYPE(None)(calls["set_reset_fn"])
    record = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(calls["set_record_stream_fn"])
    record(p, 0x5)
lib.hbm_torch_free(p, 50 << 20, 0, None)
assert h.stats()["reserved_bytes.all.current"] > 0
reset(True) if npu else reset()  # empty_cache
assert h.stats()["reserved_bytes.all.current"] == 0
fraction(0.25, 0)  # of the 1 GiB device
assert not lib.hbm_torch_raw_alloc(300 << 20, 0, None)
assert "256.00 MiB allowed; " in h._error()
assert h._error().startswith(("NPU" if npu else "CUDA") + " out of memory. Tried to allocate 30"), h._error()
# The OOM left this rank's snapshot (src/io/oom_dump.c), a pickle as torch's _dump_snapshot writes it, and nothing else.
assert os.listdir(dumps) == ["hbmalloc-oom-rank3-dev0-pid%d-1.pickle" % os.getpid()], os.listdir(dumps)
with open(os.path.join(dumps, os.listdir(dumps)[0]), "rb") as f:
    dumped = pickle.load(f)
assert set(dumped) >= {"segments", "device_traces", "allocator_settings"} and dumped["segments"] == [], dumped
fraction(1.0, 0)

# The routed memory API: what torch.cuda.memory_stats() & co. reach (torch._C._cuda_* / torch_npu._C._npu_*).
c, pre = (torch_npu._C, "_npu_") if npu else (torch._C, "_cuda_")
keep = [lib.hbm_torch_raw_alloc(n, 0, None) for n in (3 << 20, 4096, 30 << 20)]
native_stats = mode == "npu"  # torch_npu builds the dict itself from the device-stats hook
if native_stats:
    assert getattr(c, pre + "memoryStats").__qualname__.startswith("unsupported")  # left to torch_npu
    import ctypes as C

    class Stat(C.Structure):
        _fields_ = [(n, C.c_int64) for n in ("current", "peak", "allocated", "freed")]

    class DeviceStats(C.Structure):  # torch_npu's NPUCachingAllocator.h DeviceStats
        _fields_ = [(n, Stat * 3) for n in ("allocation", "segment", "active", "inactive_split", "allocated_bytes",
                                            "reserved_bytes", "active_bytes", "inactive_split_bytes",
                                            "requested_bytes")] + \
                   [("num_alloc_retries", C.c_int64), ("num_ooms", C.c_int64), ("oversize_allocations", Stat),
                    ("oversize_segments", Stat), ("max_split_size", C.c_int64)]
    get = C.CFUNCTYPE(DeviceStats, C.c_int)(calls["set_get_device_stats_fn"])
    ds = get(0)
    flat = h.stats()
    assert ds.allocated_bytes[0].current == flat["allocated_bytes.all.current"]
    assert ds.reserved_bytes[2].peak == flat["reserved_bytes.large_pool.peak"]
    assert ds.requested_bytes[1].allocated == flat["requested_bytes.small_pool.allocated"]
    assert ds.num_ooms == flat["num_ooms"] == 1 and ds.max_split_size == -1
    reset_peak = C.CFUNCTYPE(None, C.c_int)(calls["set_reset_peak_status_fn"])
    reset_peak(0)
    assert h.stats()["allocated_bytes.all.peak"] == h.stats()["allocated_bytes.all.current"]
else:
    nested = getattr(c, pre + "memoryStats")(0)
    keys = {"allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes",
            "inactive_split_bytes", "requested_bytes", "oversize_allocations", "oversize_segments",
            "num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams", "num_device_alloc",
            "num_device_free"}
    if not npu:  # this stand-in torch's memory_stats docstring names num_oom_rejections
        keys.add("num_oom_rejections")
    assert set(nested) == keys, set(nested) ^ keys
    assert set(nested["allocated_bytes"]) == {"all", "small_pool", "large_pool"}
    flat = flatten(nested)
    mine = h.stats()
    for k, v in flat.items():
        assert k == "num_oom_rejections" or mine[k] == v, (k, mine.get(k), v)
    assert flat["allocation.all.current"] == 3 and flat["num_ooms"] == 1 and flat["max_split_size"] == -1
    assert all(type(v) is int for v in flat.values())
    getattr(c, pre + "resetPeakMemoryStats")(0)
    s = flatten(getattr(c, pre + "memoryStats")(0))
    assert s["allocated_bytes.all.peak"] == s["allocated_bytes.all.current"]
getattr(c, pre + "resetAccumulatedMemoryStats")(0)
assert h.stats()["allocation.all.allocated"] == 0 and h.stats()["num_ooms"] == 0
assert getattr(c, pre + "getMemoryFraction")(0) == 1.0
fraction(0.5, 0)
assert getattr(c, pre + "getMemoryFraction")(0) == 0.5
fraction(1.0, 0)

# History with Python stacks, then a snapshot in torch's _snapshot() form.
getattr(c, pre + "record_memory_history")("all", "all", "python", 1000)


def attention_block():
    return lib.hbm_torch_raw_alloc(5 << 20, 0, None)


q = attention_block()
snap = getattr(c, pre + "memorySnapshot")(None)
assert set(snap) >= {"segments", "device_traces", "allocator_settings"}, set(snap)
assert len(snap["device_traces"]) == lib.hbm_torch_device_count()
last_alloc = [e for e in snap["device_traces"][0] if e["action"] == "alloc"][-1]
assert last_alloc["frames"][0]["name"] == "attention_block", last_alloc["frames"][:2]
assert all(seg["segment_pool_id"] == (0, 0) for seg in snap["segments"])
getattr(c, pre + "record_memory_history")(None, None, "all", 0)
for x in keep + [q]:
    lib.hbm_torch_free(x, 0, 0, None)

# Graph capture: with the pool hooks, CUDAGraph is left alone; without them it is refused.
graph_hooks = "set_begin_allocate_to_pool" in calls
capture_cls = torch_npu.npu.NPUGraph if npu else torch.cuda.CUDAGraph
if graph_hooks:
    capture_cls().capture_begin()
    assert calls["capture_begin"]
else:
    try:
        capture_cls().capture_begin()
        raise AssertionError("graph capture was not refused")
    except RuntimeError as e:
        assert "graph-pool hooks" in str(e) and "capture_begin" not in calls, e

# torch.compile with CUDA graphs: one warning, and compile still runs.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    assert torch.compile(lambda x: x, mode="reduce-overhead") == "compiled"
    torch.compile(lambda x: x, mode="reduce-overhead")
    torch.compile(lambda x: x)
said = [str(w.message) for w in caught]
assert len([s for s in said if "getCheckpointState" in s]) == 1, said

if npu:
    # HCCL: MULTI_STREAM_MEMORY_REUSE=2 set, as torch_npu cannot pass recordStream to a pluggable allocator.
    assert os.environ["MULTI_STREAM_MEMORY_REUSE"] == "2"
    # Tensor.record_stream on an NPU tensor is routed to hbmalloc (from Python).
    t = types.SimpleNamespace(device=types.SimpleNamespace(type="npu", index=0))
    t.untyped_storage = lambda: types.SimpleNamespace(data_ptr=lambda: r)
    r = lib.hbm_torch_raw_alloc(2 << 20, 0, None)
    torch.Tensor.record_stream(t, types.SimpleNamespace(npu_stream=0x9))
    assert "native_record_stream" not in calls
    active = h.stats()["active_bytes.all.current"]
    lib.hbm_torch_free(r, 0, 0, None)
    assert h.stats()["active_bytes.all.current"] == active  # pending on stream 0x9
print("ok")
