"""hbmalloc.torch.use() inside stand-in torch / torch_npu modules that follow the frameworks' real call paths, one
release at a time: what the Python API passes to torch._C (torch_npu._C), which checks it makes first, and what the
native side does under a pluggable allocator. Each behaviour names the file and line of the release it imitates;
where a release was not read at its tag the citation says so (docs/CONTRACTS.md, "torch (the CUDA plug-in").

usage: torch_paths.py LIB PLUGIN_DIR RELEASE, RELEASE one of
  2.3 2.6 2.9 2.11     PyTorch (CUDA) at that release
  late-2.6             PyTorch 2.6, with torch.cuda.set_device() called before use() (DDP scripts do)
  npu-6.0.rc2          torch_npu 2.1.0.post6 (v6.0.rc2-pytorch2.1.0): the record-stream hook takes an aclrtStream
  npu-26.1.0           torch_npu 2.10.0 line (v26.1.0): memory_snapshot() without argument
The allocations a tensor would make are made through the plug-in's alloc entry (hbm_torch_raw_alloc: the same path
as the C++ alloc hook, which throws instead of returning NULL and cannot be called from ctypes)."""
import collections
import ctypes
import os
import sys
import types
import warnings

lib_path, plugin_dir, release = sys.argv[1:4]
os.environ.pop("HBMALLOC_CONF", None)
os.environ.pop("MULTI_STREAM_MEMORY_REUSE", None)
if plugin_dir:
    sys.path.insert(0, plugin_dir)
npu = release.startswith("npu-")
late = release == "late-2.6"
torch_release = {"2.3": (2, 3), "2.6": (2, 6), "late-2.6": (2, 6), "2.9": (2, 9), "2.11": (2, 11)}.get(release, (2, 6))
dl = ctypes.CDLL(lib_path)
seen = {"history": [], "snapshot_args": [], "hooks": {}}


class Unsupported(RuntimeError):
    pass


def flatten(nested, prefix=""):
    out = {}
    for k, v in nested.items():
        if isinstance(v, dict):
            out.update(flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


# ---- torch (c10 + torch._C + torch.cuda + torch.accelerator) ----

state = {"initialized": False, "swapped": None, "device": 0}
torch = types.ModuleType("torch")
torch.__version__ = "%d.%d.0" % torch_release
C = types.ModuleType("torch._C")
torch._C = C
C._GLIBCXX_USE_CXX11_ABI = True


def native_unsupported(what):
    # CUDAPluggableAllocator.cpp (v2.6): the methods with no hook raise "does not yet support X".
    def f(*args, **kwargs):
        raise Unsupported("CUDAPluggableAllocator does not yet support %s" % what)
    return f


C._cuda_memoryStats = native_unsupported("getDeviceStats")
C._cuda_resetPeakMemoryStats = native_unsupported("resetPeakStats")
C._cuda_resetAccumulatedMemoryStats = native_unsupported("resetAccumulatedStats")
C._cuda_getMemoryFraction = native_unsupported("getMemoryFraction")
C._cuda_memorySnapshot = native_unsupported("snapshot")
C._cuda_record_memory_history = native_unsupported("recordHistory")
C._cuda_record_memory_history_legacy = native_unsupported("recordHistory")


def cuda_empty_cache_native():
    # Module.cpp THCPModule_emptyCache -> CUDAPluggableAllocator::emptyCache -> reset_fn_() when set (v2.6:170-175).
    fn = seen["hooks"].get("set_reset_fn")
    if fn:
        ctypes.CFUNCTYPE(None)(fn)()


C._cuda_emptyCache = cuda_empty_cache_native


def lazy_init():
    # torch/cuda/__init__.py (v2.6:289-319) _lazy_init -> torch._C._cuda_init -> CUDAHooks::init ->
    # CUDACachingAllocator::init(num_devices) (CUDAHooks.cpp:86-97): the current allocator's init, the pluggable one's
    # init_fn_(device_count) when swapped (CUDAPluggableAllocator.cpp:163-168).
    if state["initialized"]:
        return
    state["initialized"] = True
    fn = seen["hooks"].get("set_init_fn")
    if state["swapped"] is not None and fn:
        ctypes.CFUNCTYPE(None, ctypes.c_int)(fn)(1)


cuda = types.ModuleType("torch.cuda")
cuda._lazy_init = lazy_init
cuda.is_initialized = lambda: state["initialized"]
cuda.is_available = lambda: True


# These two are compiled as torch's own file, as their frames are in a real torch (hbmalloc names the caller's line,
# the first frame outside torch).
_ns = {"sys": sys, "state": state}
exec(compile("""
def set_device(device):
    # __init__.py:464-476 -> _cuda_setDevice -> Module.cpp:85-95 THCPModule_setDevice_wrap:
    # torch::utils::device_lazy_init(kCUDA) looks torch.cuda._lazy_init up at call time (device_lazy_init.cpp:19-55).
    sys.modules["torch.cuda"]._lazy_init()
    state["device"] = int(device)


def current_device():
    sys.modules["torch.cuda"]._lazy_init()  # __init__.py:969-972
    return state["device"]
""", os.path.join(os.sep, "site-packages", "torch", "cuda", "__init__.py"), "exec"), _ns)
cuda.set_device = _ns["set_device"]
cuda.current_device = _ns["current_device"]
memory = types.ModuleType("torch.cuda.memory")
cuda.memory = memory


class CUDAPluggableAllocator:
    # memory.py (v2.6:938-976): _cuda_customAllocator(alloc, free); its allocator() has one setter per hook bound in
    # Module.cpp (v2.6:1135-1180).
    def __init__(self, path, alloc_name, free_name):
        self.path, self.names = path, (alloc_name, free_name)
        setters = ["set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_base_alloc_fn", "set_record_stream_fn",
                   "set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool"]
        self._raw = types.SimpleNamespace(**{s: (lambda n: lambda fn: seen["hooks"].__setitem__(n, fn))(s)
                                            for s in setters})

    def allocator(self):
        return self._raw


def change_current_allocator(allocator):
    # memory.py:979-990 -> _cuda_changeCurrentAllocator -> CUDAPluggableAllocator.cpp:393-401:
    # TORCH_CHECK(!allocator.load()->initialized(), "Can't swap an already initialized allocator").
    if state["initialized"]:
        raise RuntimeError("Can't swap an already initialized allocator")
    state["swapped"] = allocator


def memory_stats_as_nested_dict(device=None):
    # memory.py (v2.6:252-258): {} before CUDA is initialised, else _cuda_memoryStats(device).
    if not is_initialized_cuda():
        return {}
    return C._cuda_memoryStats(state["device"] if device is None else device)


def is_initialized_cuda():
    return sys.modules["torch.cuda"].is_initialized()


def memory_stats(device=None):
    # memory.py (v2.6:170-249): the nested dict flattened, keys sorted.
    return collections.OrderedDict(sorted(flatten(memory_stats_as_nested_dict(device)).items()))


def empty_cache():
    # memory.py (v2.6:153-167): only when initialised.
    if is_initialized_cuda():
        C._cuda_emptyCache()


def _record_memory_history(enabled="all", *args, **kwargs):
    # memory.py v2.6:758-800 (v2.3 the same, from the 2.3 docs' _modules): a bool goes to the legacy form.
    if isinstance(enabled, bool):
        return _record_memory_history_legacy(enabled, *args, **kwargs)
    return _record_memory_history_impl(enabled, *args, **kwargs)


def _record_memory_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1,
                                  trace_alloc_record_context=False, device=None, record_context_cpp=False):
    C._cuda_record_memory_history_legacy(enabled, record_context, trace_alloc_max_entries, trace_alloc_record_context,
                                         record_context_cpp)


def _record_memory_history_impl(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None,
                                clear_history=False, compile_context=False, global_record_annotations=False,
                                skip_actions=None):
    # The default max_entries is sys.maxsize in every release read (v2.3, v2.6:803-810, the 2.8-2.10 copy, main);
    # device is never passed on. Positional arguments to the binding: 4 up to 2.6, 7 from the 2.8-2.10 copy
    # (clear_history, compile_context, global_record_annotations; inferred, not read at a tag), 8 from 2.11
    # (skip_actions as a list; inferred from the 2.11 docs and the stored copy of Jan 2026).
    args = [enabled, context, stacks, max_entries]
    if torch_release >= (2, 9):
        args += [clear_history, compile_context, global_record_annotations]
    if torch_release >= (2, 11):
        args += [skip_actions if skip_actions is not None else []]
    seen["history"].append(tuple(args))
    C._cuda_record_memory_history(*args)


def memory_snapshot(mempool_id=None, include_traces=True):
    # v2.3 and v2.6 (memory.py:517-527): _cuda_memorySnapshot()["segments"], no argument (METH_NOARGS,
    # Module.cpp:1907). The 2.8-2.10 copy: _cuda_memorySnapshot(mempool_id). 2.11 (PR #172672, docs 2.11):
    # _cuda_memorySnapshot((0, 0, include_traces)) or (id0, id1, include_traces).
    if torch_release <= (2, 6):
        return C._cuda_memorySnapshot()["segments"]
    if torch_release < (2, 11):
        return C._cuda_memorySnapshot(mempool_id)["segments"]
    if mempool_id is None:
        return C._cuda_memorySnapshot((0, 0, include_traces))["segments"]
    return C._cuda_memorySnapshot((mempool_id[0], mempool_id[1], include_traces))["segments"]


def _snapshot(device=None):
    # v2.6 memory.py:816-890: _cuda_memorySnapshot(); later (main): _cuda_memorySnapshot(None).
    return C._cuda_memorySnapshot() if torch_release <= (2, 6) else C._cuda_memorySnapshot(None)


for name, fn in (("CUDAPluggableAllocator", CUDAPluggableAllocator), ("change_current_allocator",
                 change_current_allocator), ("memory_stats", memory_stats), ("empty_cache", empty_cache),
                 ("memory_stats_as_nested_dict", memory_stats_as_nested_dict),
                 ("_record_memory_history", _record_memory_history), ("memory_snapshot", memory_snapshot),
                 ("_snapshot", _snapshot)):
    setattr(memory, name, fn)
    setattr(cuda, name, fn)
memory.memory_stats.__doc__ = "... num_oom_rejections ..." if torch_release >= (2, 9) else "..."
cuda.memory_allocated = lambda device=None: memory_stats(device).get("allocated_bytes.all.current", 0)
torch.cuda = cuda
torch.Tensor = type("Tensor", (), {"record_stream": lambda self, s: None})
torch.compile = lambda *a, **k: "compiled"

if torch_release >= (2, 9):
    # torch.accelerator's memory API appeared in 2.8 (the 2.8 docs have it, 2.7's not). Each function looks its
    # torch._C name up at call time (torch/accelerator/memory.py, stored copy 0726cc33). The native side is torch's
    # own allocator, c10::GetAllocator(kCUDA), which change_current_allocator does not replace
    # (CUDAPluggableAllocator.cpp: allocator.store only): under a pluggable allocator it is never initialised, so
    # isAllocatorInitialized is False and its resets raise (CUDACachingAllocator.cpp v2.6:3658-3665).
    def native_reset(device_index=None):
        raise RuntimeError("Invalid device argument %s: did you call init?" % device_index)
    C._accelerator_isAllocatorInitialized = lambda: False
    C._accelerator_getDeviceStats = lambda device_index=None: native_reset(device_index)
    C._accelerator_emptyCache = lambda: None
    C._accelerator_resetPeakStats = native_reset
    C._accelerator_resetAccumulatedStats = native_reset
    accelerator = types.ModuleType("torch.accelerator")
    accelerator.current_accelerator = lambda: types.SimpleNamespace(type="cuda")
    accelerator.current_device_index = lambda: state["device"]
    amem = types.ModuleType("torch.accelerator.memory")

    def a_memory_stats(device_index=None):
        if not torch._C._accelerator_isAllocatorInitialized():
            return collections.OrderedDict()
        idx = state["device"] if device_index is None else device_index
        return collections.OrderedDict(sorted(flatten(torch._C._accelerator_getDeviceStats(idx)).items()))

    def a_empty_cache():
        if not torch._C._accelerator_isAllocatorInitialized():
            return
        torch._C._accelerator_emptyCache()

    amem.memory_stats = a_memory_stats
    amem.memory_allocated = lambda d=None: a_memory_stats(d).get("allocated_bytes.all.current", 0)
    amem.max_memory_allocated = lambda d=None: a_memory_stats(d).get("allocated_bytes.all.peak", 0)
    amem.memory_reserved = lambda d=None: a_memory_stats(d).get("reserved_bytes.all.current", 0)
    amem.empty_cache = a_empty_cache
    amem.reset_peak_memory_stats = lambda d=None: torch._C._accelerator_resetPeakStats(
        state["device"] if d is None else d)  # no initialised check (memory.py, despite its docstring)
    for k in ("memory_stats", "memory_allocated", "max_memory_allocated", "memory_reserved", "empty_cache",
              "reset_peak_memory_stats"):
        setattr(accelerator, k, getattr(amem, k))
    accelerator.memory = amem
    torch.accelerator = accelerator
    sys.modules["torch.accelerator"] = accelerator

sys.modules["torch"] = torch
sys.modules["torch._C"] = C
sys.modules["torch.cuda"] = cuda
sys.modules["torch.cuda.memory"] = memory

# ---- torch_npu ----
if npu:
    npu_version = {"npu-6.0.rc2": "2.1.0.post6", "npu-26.1.0": "2.10.0"}[release]
    tn = types.ModuleType("torch_npu")
    tn.__version__ = npu_version
    tn._C = types.ModuleType("torch_npu._C")
    for name in ("memoryStats", "resetPeakMemoryStats", "resetAccumulatedMemoryStats", "getMemoryFraction",
                 "memorySnapshot", "record_memory_history"):
        setattr(tn._C, "_npu_" + name, native_unsupported(name))
    npu_state = {"initialized": False}
    npu_mod = types.ModuleType("torch_npu.npu")
    npu_mod._lazy_init = lambda: npu_state.__setitem__("initialized", True)
    npu_mod.is_initialized = lambda: npu_state["initialized"]
    npu_mod.current_device = lambda: 0
    npu_memory = types.ModuleType("torch_npu.npu.memory")

    class NPUPluggableAllocator(CUDAPluggableAllocator):
        # torch_npu/csrc/npu/Module.cpp: 6.0.x binds set_record_stream_fn as void(void*, aclrtStream); 7.0.0 and
        # later as void(void*, c10_npu::NPUStream) (master Module.cpp:400).
        def __init__(self, path, alloc_name, free_name):
            super().__init__(path, alloc_name, free_name)
            for s in ("set_erase_stream_fn", "set_get_device_stats_fn", "set_reset_peak_status_fn"):
                setattr(self._raw, s, (lambda n: lambda fn: seen["hooks"].__setitem__(n, fn))(s))

    def npu_record_memory_history(enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None):
        # torch_npu/npu/memory.py v6.0.rc2:673-680 (v26.1.0:878-886, master:891-899): _lazy_init, then
        # _npu_record_memory_history(enabled, context, stacks, max_entries), max_entries sys.maxsize by default.
        sys.modules["torch_npu.npu"]._lazy_init()
        seen["history"].append((enabled, context, stacks, max_entries))
        tn._C._npu_record_memory_history(enabled, context, stacks, max_entries)

    def npu_memory_snapshot():
        # v6.0.rc2 memory.py:414-424 and v26.1.0:543-553: _npu_memorySnapshot()["segments"], no argument.
        return tn._C._npu_memorySnapshot()["segments"]

    npu_memory.NPUPluggableAllocator = NPUPluggableAllocator
    npu_memory.change_current_allocator = change_current_allocator
    npu_memory._record_memory_history = npu_record_memory_history
    npu_memory.memory_snapshot = npu_memory_snapshot
    npu_memory.memory_stats = types.SimpleNamespace(__doc__="")
    npu_mod.memory = npu_memory
    npu_mod.NPUGraph = type("NPUGraph", (), {"capture_begin": lambda self, *a, **k: None})
    tn.npu = npu_mod
    torch.npu = npu_mod
    sys.modules["torch_npu"] = tn
    sys.modules["torch_npu.npu"] = npu_mod

import hbmalloc.torch as hbm  # noqa: E402  (torch imported first: use() can name what initialised the device)

if late:
    # A DDP script's order: set_device before use(). The refusal names this line and says what to move.
    line = sys._getframe().f_lineno + 1
    torch.cuda.set_device(0)
    try:
        hbm.use(lib_path, device="cuda")
        raise AssertionError("use() accepted a torch whose allocator was initialised")
    except RuntimeError as e:
        text = str(e)
        assert "must run before torch.cuda is initialised" in text, text
        assert "torch_paths.py:%d" % line in text, text  # the set_device line
        assert "torch.cuda.set_device(0)" in text and "Move `hbmalloc.torch.use()` above that line" in text, text
    print("ok")
    sys.exit(0)

with warnings.catch_warnings(record=True):
    warnings.simplefilter("always")
    hbm.use(lib_path, device="npu" if npu else "cuda")
lib = hbm.library()
if npu:
    # 6.0.x: the C record-stream hook is set (and HCCL keeps its own MULTI_STREAM_MEMORY_REUSE); later: not.
    c_hook = release == "npu-6.0.rc2"
    assert ("set_record_stream_fn" in seen["hooks"]) == c_hook, seen["hooks"]
    if c_hook:
        assert seen["hooks"]["set_record_stream_fn"] == ctypes.cast(dl.hbm_torch_record_stream_fn, ctypes.c_void_p).value
        assert "MULTI_STREAM_MEMORY_REUSE" not in os.environ
    else:
        assert os.environ["MULTI_STREAM_MEMORY_REUSE"] == "2"
    sys.modules["torch_npu.npu"]._lazy_init()
else:
    torch.cuda.set_device(0)  # after use(): initialises the pluggable allocator (its init hook)

# _record_memory_history() with no arguments: every memory_viz tutorial's first call. torch passes
# max_entries=sys.maxsize; hbmalloc records.
if npu:
    sys.modules["torch_npu.npu"].memory._record_memory_history()
else:
    torch.cuda.memory._record_memory_history()
assert seen["history"][-1][3] == sys.maxsize, seen["history"]


def forward_layer(n):
    return lib.hbm_torch_raw_alloc(n, 0, None)


ptrs = [forward_layer(n) for n in (3 << 20, 4096, 30 << 20)]
assert all(ptrs), hbm._error()
if npu:
    segs = sys.modules["torch_npu.npu"].memory.memory_snapshot()
    snap = sys.modules["torch_npu"]._C._npu_memorySnapshot()
else:
    segs = torch.cuda.memory_snapshot()
    snap = torch.cuda.memory._snapshot()
assert len(segs) >= 2, segs  # the small and the large pool
allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
assert len(allocs) == 3 and allocs[0]["frames"][0]["name"] == "forward_layer", allocs[:1]
if torch_release >= (2, 11) and not npu:
    # 2.11: memory_snapshot(include_traces=False) passes (0, 0, False): the segments, not the traces.
    lean = C._cuda_memorySnapshot((0, 0, False))
    assert lean["segments"] and lean["device_traces"] == [[]], lean["device_traces"]
if not npu:
    assert torch.cuda.memory_stats()["allocated_bytes.all.current"] == (3 << 20) + 4096 + (30 << 20)
if torch_release >= (2, 9) and not npu:
    # torch.accelerator answers from hbmalloc: before use() routed it, {} and 0.
    acc = torch.accelerator
    st = acc.memory_stats()
    assert st["allocated_bytes.all.current"] == (3 << 20) + 4096 + (30 << 20), st
    assert acc.memory_allocated() == st["allocated_bytes.all.current"]
    assert acc.memory_reserved() == hbm.stats()["reserved_bytes.all.current"] > 0
    lib.hbm_torch_free(ptrs.pop(), 0, 0, None)
    reserved = acc.memory_reserved()
    acc.empty_cache()
    assert acc.memory_reserved() < reserved, (acc.memory_reserved(), reserved)
    acc.reset_peak_memory_stats()
    assert acc.max_memory_allocated() == acc.memory_allocated()
if npu:
    # Tensor.record_stream on a tensor hbmalloc did not allocate (from_blob, another allocator): skipped, as
    # torch_npu's recordStream skips a pointer its allocator does not own (NPUCachingAllocator.cpp master:3816-3843).
    foreign = types.SimpleNamespace(device=types.SimpleNamespace(type="npu", index=0),
                                    untyped_storage=lambda: types.SimpleNamespace(data_ptr=lambda: 0x7f00dead0000))
    torch.Tensor.record_stream(foreign, types.SimpleNamespace(npu_stream=0x9))
    mine = types.SimpleNamespace(device=foreign.device,
                                 untyped_storage=lambda: types.SimpleNamespace(data_ptr=lambda: ptrs[0]))
    torch.Tensor.record_stream(mine, types.SimpleNamespace(npu_stream=0x9))
for p in ptrs:
    lib.hbm_torch_free(p, 0, 0, None)
if not npu:
    torch.cuda.empty_cache()  # through the reset hook
    assert hbm.stats()["reserved_bytes.all.current"] == 0
print("ok")
