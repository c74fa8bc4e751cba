"""hbmalloc for PyTorch and torch_npu: swap the CUDA or NPU caching allocator for hbmalloc.

    import hbmalloc.torch as hbm   # the same module as `import hbmalloc_torch` (its first name)
    hbm.use()               # before the first GPU/NPU allocation; "npu" when torch_npu is installed
    ...                     # train as usual: torch.cuda.memory_stats(), empty_cache(), memory_summary(),
                            # _record_memory_history(), _snapshot(), CUDA graphs and OutOfMemoryError work
    with hbm.label("optimizer"):   # a category for the allocations made inside
        opt.step()

    with hbm.pool("weights", backup=True):  # pools that sleep (docs/SLEEP.md), with or without use()
        model = make_model()
    hbm.sleep("weights"); ...; hbm.wake("weights")   # the memory goes back to the device in between

What use() does, and why, is in docs/PYTORCH.md: it registers every hook the framework's pluggable-allocator
class has (init, reset = empty_cache, memory fraction, base allocation, record_stream on CUDA, device stats and
reset-peak on torch_npu, the graph-pool hooks), routes the Python memory API (torch._C's statistics, history and
snapshot functions, which raise or are undefined under a pluggable allocator) to hbmalloc, sets
MULTI_STREAM_MEMORY_REUSE=2 for HCCL on torch_npu, and warns about torch.compile(mode="reduce-overhead").

Settings come from HBMALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF (CUDA) or PYTORCH_NPU_ALLOC_CONF (Ascend). The
library is found in the package's lib/ (pip), in an installed CMake tree's lib/, or at HBMALLOC_TORCH_LIB. Only the standard
library is imported at load; torch and torch_npu only by use(), so the helper's own functions work without them
(with HBMALLOC_BACKEND=sim for a dry run).
"""
import contextlib
import ctypes
import glob
import importlib.util
import os
import pickle
import re
import sys
import tempfile
import warnings

# Oldest releases use() accepts, and why (docs/PYTORCH.md has the table).
MIN_TORCH = (2, 0)        # torch.cuda.memory.CUDAPluggableAllocator
MIN_TORCH_NPU = (2, 1)    # torch_npu.npu.memory.NPUPluggableAllocator (v6.0.rc1-pytorch2.1.0)
# pool() without use(): torch's MemPool with hbmalloc as its allocator. Below these releases torch frees a pool's
# segments itself in some paths, never asking hbmalloc (docs/SLEEP.md, "Which releases"): torch before 2.8 routes
# the release by the thread's active MemPoolContext (CUDACachingAllocator.cpp v2.6:2923-2950; issue #146431; fixed
# when the pool came to own its allocator, PR #154746, 2.8); torch_npu below 2.13 (torch_npu.__version__, the
# PyTorch line it is built for) always releases with aclrtFree, v26.2.0-beta.1 on the 2.7.1-2.12 lines included
# (NPUCachingAllocator.cpp v7.0.0:2678-2686, v26.1.0:2858-2873, v26.2.0-beta.1-pytorch2.12.0:2989); the 2.13 line
# and master call the pool's allocator (master:3208-3214, commit c1d204968).
MIN_TORCH_MEMPOOL = (2, 8)
MIN_TORCH_NPU_MEMPOOL = (2, 13)
# torch_npu releases whose DeviceStats is torch_npu's own struct (NPUCachingAllocator.h), the layout
# hbm_torch_npu_device_stats returns: every tagged release up to the 2.12 line; 2.13 uses torch's
# c10::CachingDeviceAllocator::DeviceStats, whose layout depends on the torch version.
NPU_STATS_V1_BELOW = (2, 13)

_lib = None
_state = {"device": None, "routed": False, "warned": set()}
_POOLS = ("all", "small_pool", "large_pool")
_ARRAYS = ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes", "active_bytes",
           "inactive_split_bytes", "requested_bytes")


def _version(v):
    """(major, minor) of a version string: "2.1.0.post8" -> (2, 1), "2.6.0a0+git" -> (2, 6)."""
    m = re.match(r"(\d+)\.(\d+)", str(v))
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def device_type():
    """"npu" when torch_npu is installed (or HBMALLOC_TORCH_DEVICE=npu), else "cuda"."""
    forced = os.environ.get("HBMALLOC_TORCH_DEVICE")
    if forced:
        if forced not in ("cuda", "npu"):
            raise ValueError("HBMALLOC_TORCH_DEVICE must be cuda or npu, not %r" % forced)
        return forced
    if "torch_npu" in sys.modules:
        return "npu"
    return "npu" if importlib.util.find_spec("torch_npu") is not None else "cuda"


_PROGRESS = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64)


def _declare(lib):
    c = ctypes
    lib.hbm_torch_raw_alloc.restype = c.c_void_p
    lib.hbm_torch_raw_alloc.argtypes = [c.c_size_t, c.c_int, c.c_void_p]
    lib.hbm_torch_free.restype = None
    lib.hbm_torch_free.argtypes = [c.c_void_p, c.c_size_t, c.c_int, c.c_void_p]
    lib.hbm_torch_stats.restype = c.c_long
    lib.hbm_torch_stats.argtypes = [c.c_int, c.c_char_p, c.c_long]
    lib.hbm_torch_snapshot.argtypes = [c.c_int, c.c_char_p]
    lib.hbm_torch_record_history.argtypes = [c.c_long, c.c_int]
    lib.hbm_torch_record_stream.argtypes = [c.c_void_p, c.c_int, c.c_void_p]
    if hasattr(lib, "hbm_torch_record_stream_npu"):
        lib.hbm_torch_record_stream_npu.argtypes = [c.c_void_p, c.c_int, c.c_longlong, c.c_int, c.c_int]
    lib.hbm_torch_set_memory_fraction.argtypes = [c.c_double, c.c_int]
    lib.hbm_torch_get_memory_fraction.restype = c.c_double
    lib.hbm_torch_get_memory_fraction.argtypes = [c.c_int]
    lib.hbm_torch_pool_ids.restype = c.c_long
    lib.hbm_torch_pool_ids.argtypes = [c.c_int, c.POINTER(c.c_uint64), c.c_long]
    lib.hbm_torch_set_label.argtypes = [c.c_char_p]
    lib.hbm_torch_get_label.restype = c.c_char_p
    lib.hbm_torch_error.restype = c.c_char_p
    lib.hbm_torch_npu_release.restype = c.c_char_p
    lib.hbm_torch_npu_release.argtypes = [c.c_char_p]
    lib.hbm_torch_build.restype = c.c_char_p
    lib.hbm_torch_pool_enter.argtypes = [c.c_char_p, c.c_int, c.c_int]
    lib.hbm_torch_pool_slot.argtypes = [c.c_char_p, c.c_int]
    lib.hbm_torch_pool_state.argtypes = [c.c_char_p]
    lib.hbm_torch_sleep.argtypes = [c.c_char_p, c.c_size_t, _PROGRESS, c.c_void_p]
    lib.hbm_torch_wake.argtypes = [c.c_char_p, c.c_int, _PROGRESS, c.c_void_p]
    lib.hbm_torch_sleep_as.argtypes = [c.c_char_p, c.c_size_t, c.c_int, c.c_int, c.c_char_p, _PROGRESS, c.c_void_p]
    lib.hbm_torch_wake_as.argtypes = [c.c_char_p, c.c_int, c.c_int, _PROGRESS, c.c_void_p]
    lib.hbm_torch_pin.argtypes = [c.c_char_p, c.c_char_p, c.c_int]
    lib.hbm_torch_pools.restype = c.c_long
    lib.hbm_torch_pools.argtypes = [c.c_char_p, c.c_long]
    lib.hbm_torch_resident.restype = c.c_long
    lib.hbm_torch_resident.argtypes = [c.c_int, c.c_char_p, c.c_long]
    lib.hbm_torch_outside.restype = c.c_long
    lib.hbm_torch_outside.argtypes = [c.c_int, c.c_char_p, c.c_long]
    lib.hbm_torch_mem_info.argtypes = [c.c_int, c.POINTER(c.c_size_t), c.POINTER(c.c_size_t)]
    lib.hbm_torch_enable_peer.argtypes = [c.c_int, c.c_int]
    for hook in ("hbm_torch_init", "hbm_torch_reset", "hbm_torch_memory_fraction", "hbm_torch_cuda_reset",
                 "hbm_torch_record_stream_fn", "hbm_torch_reset_peak"):
        getattr(lib, hook).restype = None


def _candidates(device):
    """Library files to try, best first: the build for the imported torch (typed OutOfMemoryError), then the
    generic one; in the installed package (hbmalloc/lib, what pip installs), then an installed CMake tree's lib/
    (share/hbmalloc/hbmalloc -> lib)."""
    npu = device == "npu"
    names = ["libhbmalloc_torch_npu.so" if npu else "libhbmalloc_torch.so"]
    if "torch" in sys.modules:
        names.insert(0, "libhbmalloc_torch_npu_c10.so" if npu else "libhbmalloc_torch_c10.so")
    here = os.path.dirname(os.path.abspath(__file__))
    top = os.path.join(here, "..", "..", "..")
    dirs = [os.path.join(here, "lib")] + sorted(glob.glob(os.path.join(top, "lib*"))) + \
        sorted(glob.glob(os.path.join(top, "lib", "*-linux-gnu")))  # CMAKE_INSTALL_LIBDIR
    return [os.path.normpath(os.path.join(d, n)) for n in names for d in dirs]


def _wanted_build():
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    return "c10 %s %d" % (torch.__version__, int(torch._C._GLIBCXX_USE_CXX11_ABI))


def library(path=None, device=None):
    """Load (once) and return the plug-in for `device` ("cuda" or "npu").

    A build against torch's headers (libhbmalloc_torch_c10.so) is used only when it was built for the imported
    torch (version and C++ ABI); otherwise the generic build, whose OOM is a RuntimeError with PyTorch's text."""
    global _lib
    if _lib is not None:
        return _lib
    device = device or device_type()
    explicit = path or os.environ.get("HBMALLOC_TORCH_LIB")
    tried = []
    for p in [explicit] if explicit else _candidates(device):
        if not os.path.exists(p):
            tried.append(p + " (missing)")
            continue
        try:
            lib = ctypes.CDLL(p)
        except OSError as e:
            tried.append("%s (%s)" % (p, e))
            continue
        lib.hbm_torch_build.restype = ctypes.c_char_p
        build = lib.hbm_torch_build().decode()
        want = _wanted_build()
        if build.startswith("c10") and not explicit and build != want:
            tried.append("%s (built for torch %s, this is %s)" % (p, build[4:], want[4:] if want else "none"))
            continue
        _declare(lib)
        lib.path, lib.build = p, build
        _lib = lib
        return lib
    raise OSError("hbmalloc: no plug-in library for %s; tried: %s. Build it (cmake --build build) or set "
                  "HBMALLOC_TORCH_LIB" % (device, "; ".join(tried)))


def _address(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def _warn_once(key, text):
    if key not in _state["warned"]:
        _state["warned"].add(key)
        warnings.warn("hbmalloc: " + text, RuntimeWarning, stacklevel=3)


# ---- use() ----

def _need(name, what):
    """Imports a framework module for use(), or says what is missing (this package does not depend on torch)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        raise ImportError("hbmalloc.torch.use() needs %s, and `import %s` failed here (%s, Python %s). Install it "
                          "in this environment; hbmalloc itself (the `hbmalloc` command, its doctor) works without "
                          "it" % (what, name, e, sys.executable), name=name) from e


def _framework_refusal(device, torch):
    """Why use() refuses the installed framework (its release has no pluggable allocator), or None."""
    if device == "npu":
        torch_npu = sys.modules.get("torch_npu") or importlib.import_module("torch_npu")
        fw_version = getattr(torch_npu, "__version__", "0")
        if _version(fw_version) < MIN_TORCH_NPU or not hasattr(torch_npu.npu.memory, "NPUPluggableAllocator"):
            return ("hbmalloc needs torch_npu >= %d.%d (NPUPluggableAllocator); installed %s. Install "
                    "torch_npu 2.1.0 or later with the torch release of the same number (torch_npu 2.x.y "
                    "goes with torch 2.x.y) and the CANN it names, e.g. pip install torch==2.6.0 "
                    "torch_npu==2.6.0; graph capture needs a v26.0.0 release or later (2.7.1.post4, "
                    "2.8.0.post4, 2.9.0.post2, 2.10.0; https://gitee.com/ascend/pytorch lists them)"
                    % (MIN_TORCH_NPU + (fw_version,)))
        return None
    if _version(torch.__version__) < MIN_TORCH or not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
        return ("hbmalloc needs torch >= %d.%d (CUDAPluggableAllocator); installed %s. Install "
                "torch 2.0 or later (2.3 or later for CUDA graphs), the wheel for your CUDA "
                "(https://pytorch.org/get-started/locally/), e.g. pip install 'torch>=2.3' in this "
                "venv: it comes before a system torch such as Debian 12's python3-torch (1.13)"
                % (MIN_TORCH + (torch.__version__,)))
    return None


def would_accept(device=None):
    """(True, "") when use() would accept the installed framework, else (False, why): what `hbmalloc doctor` asks
    (it imports the framework, nothing more: no allocator is swapped)."""
    device = device or device_type()
    try:
        torch = importlib.import_module("torch")
        refused = _framework_refusal(device, torch)
    except ImportError as e:
        return False, "import failed: %s" % e
    return (refused is None), (refused or "")


def use(path=None, device=None, oom_dump_dir=None):
    """Make hbmalloc the framework's device allocator. Call before anything allocates on the device.

    device: "cuda" (torch.cuda.memory.CUDAPluggableAllocator) or "npu" (torch_npu's NPUPluggableAllocator);
    by default "npu" when torch_npu is installed. oom_dump_dir: at each out-of-memory, this rank's snapshot goes
    there as hbmalloc-oom-rank{RANK}-dev{DEVICE}-pid{PID}-{N}.pickle (docs/PYTORCH.md, "Snapshots where the OOM
    happened"); it wins over HBMALLOC_OOM_DUMP_DIR, which does the same with no code (torchrun: every rank); ""
    turns it off; None leaves the variable to decide. Returns the pluggable allocator object."""
    device = device or device_type()
    torch = _need("torch", "PyTorch")
    if device == "npu":
        _need("torch_npu", "torch_npu (Ascend's PyTorch adapter)")
    _refuse_if_initialized(device, torch)
    refused = _framework_refusal(device, torch)
    if refused:
        raise RuntimeError(refused)
    if oom_dump_dir is not None:
        # Read by the library when it makes each device's allocator, at the first allocation (src/io/oom_dump.c):
        # the folder this process names now, whatever folder it is in then.
        folder = os.fsdecode(os.fspath(oom_dump_dir))
        os.environ["HBMALLOC_OOM_DUMP_DIR"] = os.path.abspath(folder) if folder else ""
    if device == "npu":
        torch_npu = sys.modules["torch_npu"]
        fw_version = getattr(torch_npu, "__version__", "0")
        memory = torch_npu.npu.memory
        # PYTORCH_NPU_ALLOC_CONF is read as this torch_npu release reads it (docs/CONFIGURATION.md).
        os.environ.setdefault("HBMALLOC_TORCH_NPU_VERSION", fw_version)
        lib = library(path, device)
        alloc = memory.NPUPluggableAllocator(lib.path, "hbm_torch_alloc", "hbm_torch_free")
    else:
        memory = torch.cuda.memory
        os.environ.setdefault("HBMALLOC_TORCH_VERSION", torch.__version__)
        lib = library(path, device)
        alloc = memory.CUDAPluggableAllocator(lib.path, "hbm_torch_alloc", "hbm_torch_free")
    if not lib.build.startswith("c10"):
        _warn_once("generic", "this plug-in was not built against torch %s's headers: out of memory raises "
                   "RuntimeError (with PyTorch's \"%s out of memory.\" text), not OutOfMemoryError. What that costs: "
                   "torch's own fallbacks catch only c10::OutOfMemoryError (cuDNN tries another algorithm, or halves "
                   "its workspace: aten/src/ATen/native/cudnn/Conv_v7.cpp, Conv_v8.cpp), so there an out-of-memory "
                   "stops the job instead, and `except torch.OutOfMemoryError` does not catch it. Rebuild hbmalloc "
                   "with this Python's torch installed (pip install --no-build-isolation ., or cmake -DHBM_PYTHON=%s) "
                   "for the typed exception"
                   % (torch.__version__, "NPU" if device == "npu" else "CUDA", sys.executable))
    raw = alloc.allocator()
    hooks = _hooks(device, raw, lib, torch)
    try:
        memory.change_current_allocator(alloc)
    except RuntimeError as e:  # "Can't swap an already initialized allocator" (CUDAPluggableAllocator.cpp)
        raise RuntimeError(_too_late(device, str(e))) from e
    _state.update(device=device, hooks=hooks, alloc=alloc)
    _route_memory_api(device, torch, lib, hooks)
    if device == "npu":
        if not hooks.get("set_record_stream_fn"):
            _hccl_reuse_mode()
        _route_npu_record_stream(torch, lib)
    _guard_compile(torch)
    return alloc


# ---- what initialised the framework's allocator before use() ----

_first_init = {}  # device type -> "file:line in function" of the call that initialised it, when seen


def _watch_init(torch):
    """torch.cuda._lazy_init (torch_npu.npu._lazy_init) is what every initialising call goes through: set_device(),
    current_device(), mem_get_info(), a tensor made on the device (torch/cuda/__init__.py; C++ callers reach it through
    torch::utils::device_lazy_init, which looks the attribute up at call time). Wrapped while it has not run yet, it
    records where the first call came from, so that a refused use() can name it."""
    for dev, mod in (("cuda", getattr(torch, "cuda", None)), ("npu", sys.modules.get("torch_npu.npu"))):
        init = getattr(mod, "_lazy_init", None) if mod is not None else None
        if init is None or getattr(init, "_hbmalloc", False) or _initialized(dev, torch):
            continue

        def lazy_init(*args, _init=init, _dev=dev, **kwargs):
            if _dev not in _first_init:
                _first_init[_dev] = _caller()
            return _init(*args, **kwargs)
        lazy_init._hbmalloc = True
        mod._lazy_init = lazy_init


def _caller():
    """The innermost frame outside torch, torch_npu and this module: the user's line."""
    import traceback
    skip = ("torch", "torch_npu", "hbmalloc", "importlib")
    for frame in reversed(traceback.extract_stack()[:-2]):
        parts = os.path.normpath(frame.filename).split(os.sep)
        if not any(p in skip or p == "hbmalloc_torch.py" for p in parts[-3:-1] + parts[-1:]):
            return "%s:%d in %s (%s)" % (frame.filename, frame.lineno, frame.name, (frame.line or "").strip())
    return None


def _initialized(device, torch):
    try:
        if device == "npu":
            return bool(sys.modules["torch_npu"].npu.is_initialized())
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


def _too_late(device, why=None):
    dev = "torch_npu.npu" if device == "npu" else "torch.cuda"
    first = _first_init.get(device)
    ran = ("it was first initialised at %s" % first) if first else (
        "something ran first that initialises it: %s.set_device(), current_device(), mem_get_info(), init(), "
        "_record_memory_history(), a tensor or a stream on the device" % dev)
    return ("hbmalloc: use() must run before %s is initialised, and %s. The framework's allocator cannot be swapped "
            "once initialised%s. Move `hbmalloc.torch.use()` above that line (in a DDP script: before "
            "%s.set_device(local_rank) and init_process_group)" % (dev, ran, " (%s)" % why if why else "", dev))


def _refuse_if_initialized(device, torch):
    if _initialized(device, torch):
        raise RuntimeError(_too_late(device))


def _hooks(device, raw, lib, torch):
    """Set every hook the installed framework has; returns {hook: set or why not}."""
    a = lambda name: _address(lib, name)  # noqa: E731
    if device == "npu":
        import torch_npu
        plan = [("set_init_fn", "hbm_torch_init"), ("set_reset_fn", "hbm_torch_reset"),
                ("set_memory_fraction_fn", "hbm_torch_memory_fraction"), ("set_base_alloc_fn", "hbm_torch_base_alloc"),
                ("set_reset_peak_status_fn", "hbm_torch_reset_peak")]
        if _version(torch_npu.__version__) < NPU_STATS_V1_BELOW:
            plan.append(("set_get_device_stats_fn", "hbm_torch_npu_device_stats"))
        if _npu_record_stream_is_c(lib, torch_npu.__version__):
            plan.append(("set_record_stream_fn", "hbm_torch_record_stream_fn"))
        else:
            _warn_once("npu-stats", "torch_npu %s takes c10::CachingDeviceAllocator::DeviceStats from the device-stats "
                       "hook, a layout hbmalloc does not know for this torch: the hook is not set (C++ callers of "
                       "getDeviceStats get torch_npu's warning); torch.npu.memory_stats() and its relatives are "
                       "answered by hbmalloc" % torch_npu.__version__)
    else:
        plan = [("set_init_fn", "hbm_torch_init"), ("set_reset_fn", "hbm_torch_cuda_reset"),
                ("set_memory_fraction_fn", "hbm_torch_memory_fraction"), ("set_base_alloc_fn", "hbm_torch_base_alloc"),
                ("set_record_stream_fn", "hbm_torch_record_stream_fn")]
    plan += [("set_begin_allocate_to_pool", "hbm_torch_begin_allocate_to_pool"),
             ("set_end_allocate_to_pool_fn", "hbm_torch_end_allocate_to_pool"),
             ("set_release_pool", "hbm_torch_release_pool")]
    done = {}
    for setter, fn in plan:
        if hasattr(raw, setter):
            getattr(raw, setter)(a(fn))
            done[setter] = fn
        else:
            done[setter] = None
    if not done["set_begin_allocate_to_pool"]:
        _block_graph_capture(device, torch)
    return done


def _npu_record_stream_is_c(lib, version):
    """torch_npu's 6.0.x releases (v6.0.rc1 to v6.0.0.1, the 2.1 to 2.4 lines) take set_record_stream_fn as
    void(void*, aclrtStream): a C hook (NPUPluggableAllocator.h; torch_npu/csrc/npu/Module.cpp, `using FuncType =
    void(void*, aclrtStream)`). From 7.0.0 it is void(void*, c10_npu::NPUStream), which no C function can take.
    The release is the one hbmalloc's table names for the version (src/conf/npu_releases.inc)."""
    tag = lib.hbm_torch_npu_release(str(version).encode())
    return bool(tag) and tag.decode().startswith("v6.0.")


def _block_graph_capture(device, torch):
    """No pool hooks: memory a graph captures would go back to the general cache and could be handed to eager
    tensors that replays then overwrite. Refuse the capture, clearly, instead."""
    if device == "npu":
        import torch_npu
        graph_cls = getattr(torch_npu.npu, "NPUGraph", None)
        need, have = "torch_npu with NPUPluggableAllocator.set_begin_allocate_to_pool (26.0.0 and later)", \
            torch_npu.__version__
    else:
        graph_cls = getattr(torch.cuda, "CUDAGraph", None)
        need, have = "torch >= 2.3 (CUDAPluggableAllocator.set_begin_allocate_to_pool)", torch.__version__
    if graph_cls is None or getattr(graph_cls.capture_begin, "_hbmalloc_blocked", False):
        return

    def capture_begin(self, *args, **kwargs):
        raise RuntimeError("hbmalloc: graph capture needs the pluggable allocator's graph-pool hooks, which %s has "
                           "not (it needs %s): without them captured memory could be handed to eager tensors. "
                           "Upgrade, or capture graphs without hbmalloc" % (have, need))
    capture_begin._hbmalloc_blocked = True
    graph_cls.capture_begin = capture_begin


def _hccl_reuse_mode():
    """torch_npu's ProcessGroupHCCL keeps collective inputs alive with recordStream/eraseStream under
    MULTI_STREAM_MEMORY_REUSE 1 (its default) and 3; hbmalloc cannot receive torch_npu's recordStream (its hook
    takes an NPUStream by value), so use 2: stash the tensors until the work completes (OptionsManager.cpp)."""
    mode = os.environ.get("MULTI_STREAM_MEMORY_REUSE")
    if mode is None:
        os.environ["MULTI_STREAM_MEMORY_REUSE"] = "2"
    elif mode.strip() != "2":
        _warn_once("hccl", "MULTI_STREAM_MEMORY_REUSE=%s makes HCCL collectives rely on recordStream, which "
                   "torch_npu cannot pass to a pluggable allocator: a collective's input could be reused while HCCL "
                   "still reads it. Set MULTI_STREAM_MEMORY_REUSE=2 (hbmalloc doctor checks it)" % mode)


def _route_npu_record_stream(torch, lib):
    """Tensor.record_stream on an NPU tensor reaches torch_npu's hook, which hbmalloc cannot take: route the
    Python call to hbmalloc (C++ callers, HCCL, are covered by MULTI_STREAM_MEMORY_REUSE=2)."""
    original = torch.Tensor.record_stream
    if getattr(original, "_hbmalloc", False):
        return

    def record_stream(self, stream):
        if self.device.type == "npu":
            return globals()["record_stream"](self, stream)
        return original(self, stream)
    record_stream._hbmalloc = True
    torch.Tensor.record_stream = record_stream


def _guard_compile(torch):
    """torch.compile(mode="reduce-overhead") records CUDA graphs through CUDA graph trees, which call
    torch._C._cuda_getCheckpointState: no pluggable allocator has a hook for it, so it fails at the first graph."""
    text = ("torch.compile with CUDA graphs (mode=\"reduce-overhead\" or \"max-autotune\") needs "
            "getCheckpointState, which no pluggable allocator supports: it fails at the first recorded graph. Use "
            "mode=\"default\" or \"max-autotune-no-cudagraphs\" with hbmalloc")
    inductor = sys.modules.get("torch._inductor.config")
    if inductor is not None and getattr(getattr(inductor, "triton", None), "cudagraphs", False):
        _warn_once("compile", text)
    compile_fn = getattr(torch, "compile", None)
    if compile_fn is None or getattr(compile_fn, "_hbmalloc", False):
        return

    def compile(*args, **kwargs):
        mode = kwargs.get("mode")
        options = kwargs.get("options") or {}
        if mode in ("reduce-overhead", "max-autotune") or options.get("triton.cudagraphs"):
            _warn_once("compile", text)
        return compile_fn(*args, **kwargs)
    compile._hbmalloc = True
    compile.__doc__ = compile_fn.__doc__
    torch.compile = compile


# ---- the memory API, routed ----

def _nested_stats(device, extra=()):
    """torch._C._cuda_memoryStats' dict (torch/csrc/cuda/Module.cpp THCPModule_memoryStats) from hbmalloc's
    statistics: the stat arrays by pool, the oversize stats, the counters; `extra` names counters this
    torch has that hbmalloc keeps at 0."""
    flat = stats(device)
    stat = lambda pre: {k: flat["%s.%s" % (pre, k)] for k in ("current", "peak", "allocated", "freed")}  # noqa
    out = {name: {pool: stat("%s.%s" % (name, pool)) for pool in _POOLS} for name in _ARRAYS}
    out["oversize_allocations"] = stat("oversize_allocations")
    out["oversize_segments"] = stat("oversize_segments")
    for k in ("num_alloc_retries", "num_ooms", "max_split_size", "num_sync_all_streams", "num_device_alloc",
              "num_device_free"):
        out[k] = flat[k]
    for k in extra:
        out[k] = 0
    return out


def _device_index(device):
    if device is None:
        return _current_device()
    return int(getattr(device, "index", device) if getattr(device, "index", device) is not None else 0)


def _current_device():
    torch = sys.modules.get("torch")
    try:
        if _state["device"] == "npu":
            return torch.npu.current_device()
        return torch.cuda.current_device()
    except Exception:
        return 0


def _route_memory_api(device, torch, lib, hooks):
    """Replace the C functions behind torch.cuda.memory's (torch_npu.npu.memory's) statistics, history and
    snapshot functions: the Python functions above them keep their own semantics (argument checks, flattening,
    memory_summary's table) and read hbmalloc's figures."""
    if device == "npu":
        import torch_npu
        c, pre = torch_npu._C, "_npu_"
        doc = getattr(getattr(torch_npu.npu.memory, "memory_stats", None), "__doc__", "") or ""
        native_stats = bool(hooks.get("set_get_device_stats_fn"))
    else:
        c, pre = torch._C, "_cuda_"
        doc = getattr(getattr(torch.cuda.memory, "memory_stats", None), "__doc__", "") or ""
        native_stats = False
    extra = tuple(k for k in ("num_oom_rejections",) if k in doc)
    routes = {
        "resetAccumulatedMemoryStats": lambda d=None: reset_accumulated_memory_stats(_device_index(d)),
        "getMemoryFraction": lambda d=None: lib.hbm_torch_get_memory_fraction(_device_index(d)),
        "memorySnapshot": lambda *a, **k: _torch_snapshot(*a, **k),
        "record_memory_history": _record_history_new,
        "record_memory_history_legacy": _record_history_legacy,
        "recordMemoryHistory": _record_history_legacy,
    }
    if not native_stats:  # torch_npu with the device-stats hook builds the dict natively
        routes["memoryStats"] = lambda d=None: _nested_stats(_device_index(d), extra)
        routes["resetPeakMemoryStats"] = lambda d=None: reset_peak_memory_stats(_device_index(d))
    for name, fn in routes.items():
        fn.__name__ = pre + name
        setattr(c, pre + name, fn)
    _route_accelerator(device, torch, extra)
    _state["routed"] = True


def _route_accelerator(device, torch, extra):
    """torch.accelerator's memory API (torch/accelerator/memory.py, 2.8 and later) looks its torch._C functions up at
    call time and asks _accelerator_isAllocatorInitialized() first; those reach the allocator c10::GetAllocator
    holds, torch's own, which change_current_allocator does not replace and which is never initialised under a
    pluggable allocator: memory_stats() would be {}, memory_allocated() 0, empty_cache() nothing, and the resets
    raise "did you call init?". Each is answered by hbmalloc while the current accelerator is this device type."""
    def route(name, ours):
        orig = getattr(torch._C, name, None)
        if orig is None or getattr(orig, "_hbmalloc", False):
            return

        def routed(*args, _orig=orig, **kwargs):
            return ours(*args, **kwargs) if _accelerator_is(device, torch) else _orig(*args, **kwargs)
        routed._hbmalloc = True
        routed.__name__ = name
        setattr(torch._C, name, routed)
    route("_accelerator_isAllocatorInitialized", lambda: True)
    route("_accelerator_getDeviceStats", lambda d=None: _nested_stats(_device_index(d), extra))
    route("_accelerator_emptyCache", lambda: empty_cache() and None)
    route("_accelerator_resetPeakStats", lambda d=None: reset_peak_memory_stats(_device_index(d)))
    route("_accelerator_resetAccumulatedStats", lambda d=None: reset_accumulated_memory_stats(_device_index(d)))


def _accelerator_is(device, torch):
    try:
        return torch.accelerator.current_accelerator().type == device
    except Exception:
        return False


def _record_history_new(enabled=None, context=None, stacks="all", max_entries=0, *args, **kwargs):
    """torch._C._cuda_record_memory_history(enabled, context, stacks, max_entries, ...): enabled None (off),
    "state" (live blocks keep their stacks, no history) or "all"; context None, "state", "alloc" or "all"
    (hbmalloc labels allocations, and their frees carry the label); stacks "python" or "all" (Python frames)."""
    if enabled is None:
        return record_history(0, stacks=False)
    return record_history(0 if enabled == "state" else max(int(max_entries), 1), stacks=context is not None)


def _record_history_legacy(enabled, record_context=True, trace_alloc_max_entries=1, *args, **kwargs):
    """The bool form (torch._C._cuda_record_memory_history_legacy / 1.13's _cuda_recordMemoryHistory)."""
    if not enabled:
        return record_history(0, stacks=False)
    return record_history(max(int(trace_alloc_max_entries), 1), stacks=bool(record_context))


def _torch_snapshot(*args, **kwargs):
    """torch._C._cuda_memorySnapshot, called as each release calls it: with no argument (2.6 and before,
    memory.py:517-527, 816-890), with None or a pool id (id0, id1), or from 2.11 with (id0, id1, include_traces)
    (memory_snapshot(mempool_id=None, include_traces=True) passes (0, 0, include_traces) for all pools). Every device's
    segments and traces in one dict, private pools named by torch's ids; with a pool id, only that pool's segments;
    include_traces False leaves the traces out."""
    want = args[0] if args else kwargs.get("mempool_id")
    include_traces = True
    if want is not None:
        want = tuple(want)
        if len(want) == 3:
            include_traces = bool(want[2])
        want = want[:2] if want[:2] != (0, 0) else None
    lib = library()
    out = {"segments": [], "device_traces": [], "allocator_settings": {}}
    for d in range(max(lib.hbm_torch_device_count(), 0)):
        if not lib.hbm_torch_device_used(d):
            out["device_traces"].append([])
            continue
        snap = _snapshot_dict(d)
        ids = _pool_ids(d)
        for seg in snap["segments"]:
            seg["segment_pool_id"] = ids.get(seg["segment_pool_id"][1], (0, 0))
            if want is None or seg["segment_pool_id"] == want:
                out["segments"].append(seg)
        traces = snap["device_traces"]
        out["device_traces"].append(traces[d] if d < len(traces) and include_traces else [])
        out["allocator_settings"] = snap.get("allocator_settings", {})
    return out


def _pool_ids(device):
    lib = library()
    n = lib.hbm_torch_pool_ids(device, None, 0)
    buf = (ctypes.c_uint64 * (3 * max(n, 1)))()
    n = lib.hbm_torch_pool_ids(device, buf, n)
    return {buf[3 * i]: (buf[3 * i + 1], buf[3 * i + 2]) for i in range(n)}


def _snapshot_dict(device):
    fd, path = tempfile.mkstemp(suffix=".pickle")
    os.close(fd)
    try:
        if library().hbm_torch_snapshot(device, path.encode()) != 0:
            raise RuntimeError("hbmalloc: snapshot of device %d: %s" % (device, _error()))
        with open(path, "rb") as f:
            return pickle.load(f)
    finally:
        os.unlink(path)


# ---- the helper's own functions (no torch needed) ----

def _error():
    return library().hbm_torch_error().decode(errors="replace")


def stats(device=0):
    """hbmalloc's statistics of a device, under torch.cuda.memory_stats() names (flat)."""
    lib = library()
    n = lib.hbm_torch_stats(device, None, 0)
    if n < 0:
        raise RuntimeError("hbmalloc: " + _error())
    buf = ctypes.create_string_buffer(n + 1)
    lib.hbm_torch_stats(device, buf, n + 1)
    out = {}
    for line in buf.value.decode().splitlines():
        name, value = line.split()
        out[name] = int(value)
    return out


def reset_peak_memory_stats(device=0):
    library().hbm_torch_reset_peak_stats(device)


def reset_accumulated_memory_stats(device=0):
    library().hbm_torch_reset_accumulated_stats(device)


def record_history(max_entries=100000, stacks=True):
    """Keep the newest max_entries trace entries (0: none) on every device; with stacks, label every allocation
    with its Python call stack (PyTorch's stacks="python"), which snapshots show as frames."""
    if library().hbm_torch_record_history(int(max_entries), 1 if stacks else 0) != 0:
        raise RuntimeError("hbmalloc: " + _error())


def snapshot(path, device=0):
    """Write a PyTorch-format memory snapshot of one device (.pickle opens in pytorch.org/memory_viz; or .json)."""
    if library().hbm_torch_snapshot(device, os.fsencode(path)) != 0:
        raise RuntimeError("hbmalloc: could not write the snapshot %s: %s" % (path, _error()))


@contextlib.contextmanager
def label(name):
    """Allocations made by this thread inside the block carry `name` (a category; the first frame of their stack
    in snapshots). Nests; cheap (one string per allocation, no stack walk unless history asks for stacks)."""
    lib = library()
    prev = lib.hbm_torch_get_label()
    if lib.hbm_torch_set_label(str(name).encode()) != 0:
        raise ValueError("hbmalloc: label %r: at most 4096 bytes" % (name,))
    try:
        yield
    finally:
        lib.hbm_torch_set_label(prev if prev else None)


def empty_cache():
    """Return every whole free segment to the device, on every device."""
    return library().hbm_torch_empty_cache()


def step():
    """A training step ended: counted in stats()["steps"]; with HBMALLOC_CONF=hbm_step_plan:True the allocator
    learns the step's allocations and serves later steps from a plan (docs/CONFIGURATION.md). Call it once per
    step, after optimizer.step(), or let hook_optimizer() do it."""
    if library().hbm_torch_step() != 0:
        raise RuntimeError("hbmalloc: " + _error())


def hook_optimizer(optimizer):
    """Call step() after every optimizer.step(): through Optimizer.register_step_post_hook where torch has it
    (2.0 and later), else by wrapping this optimizer's step method. Returns a handle whose remove() undoes it."""
    if hasattr(optimizer, "register_step_post_hook"):
        return optimizer.register_step_post_hook(lambda *args, **kwargs: step())
    inner = optimizer.step

    def stepped(*args, **kwargs):
        out = inner(*args, **kwargs)
        step()
        return out

    optimizer.step = stepped

    class _Handle:
        def remove(self):
            if optimizer.step is stepped:
                optimizer.step = inner

    return _Handle()


def record_stream(tensor, stream):
    """Like Tensor.record_stream, for hbmalloc: the block waits for `stream` before reuse."""
    ptr = tensor.untyped_storage().data_ptr()
    lib = library()
    device = tensor.device.index or 0
    npu = hasattr(stream, "npu_stream")
    if npu and hasattr(stream, "stream_id") and hasattr(lib, "hbm_torch_record_stream_npu"):
        # The stream's parts, not stream.npu_stream: that empties torch_npu's task queue (NPUStream::stream()), and
        # the plug-in needs the NPUStream to record the block's events through the queue when it is freed.
        rc = lib.hbm_torch_record_stream_npu(ptr, device, int(stream.stream_id), int(stream.device_index),
                                             int(stream.device_type))
        if rc == 0:
            return
        if rc != -2:
            raise RuntimeError("hbmalloc: " + _error())
    handle = stream.npu_stream if npu else stream.cuda_stream
    if lib.hbm_torch_record_stream(ptr, device, handle) != 0:
        raise RuntimeError("hbmalloc: " + _error())


def enable_peer(device, peer):
    """Let GPU `peer` read and write the expandable-segment pages of GPU `device`, those mapped now and later. Pages
    are granted to their own GPU and to the peers enabled so: PyTorch's own allocator enables one when a copy first
    crosses from `peer` to `device`, but under a pluggable allocator torch never tells hbmalloc. So the plug-in's
    default backend, cuda:peers=capable, grants every GPU that can reach a page; with HBMALLOC_BACKEND=cuda only the
    owner and the peers enabled here are granted (less mapping work on 8-GPU nodes): before copying a tensor from
    cuda:0 into one on cuda:1 (the copy runs on cuda:0 and writes cuda:1's pages), call enable_peer(1, 0); both ways:
    enable_peer(0, 1) too. Nothing to do without expandable_segments:True, on Ascend and on the simulated device."""
    if library().hbm_torch_enable_peer(int(device), int(peer)) != 0:
        raise RuntimeError("hbmalloc: " + _error())


def set_memory_fraction(fraction, device=0):
    if library().hbm_torch_set_memory_fraction(float(fraction), device) != 0:
        raise ValueError("hbmalloc: " + _error())


# ---- pools that sleep and wake (docs/SLEEP.md) ----

_mempools = {}  # (device type, tag, device index) -> (MemPool, its pluggable allocator): torch keeps neither alive
_tags = {}  # the tags pool() made, in order (a dict as an ordered set): named when sleep() or wake() is given another
_POOL_FIELDS = ("device", "id", "tag", "backup", "state", "live_bytes", "reserved_bytes", "asleep_bytes",
                "backup_bytes", "host_bytes", "sleeps", "wakes", "sleep_ns", "sleep_device_ns", "sleep_calls",
                "wake_ns", "wake_device_ns", "wake_calls", "file_bytes")
_STATES = ("awake", "asleep", "falling asleep", "waking")


def _mempool_api(device, torch):
    """torch.cuda (torch_npu.npu) with MemPool, use_mem_pool and the pluggable-allocator class, or why not."""
    if device == "npu":
        torch_npu = _need("torch_npu", "torch_npu (Ascend's PyTorch adapter)")
        mod, have, need = torch_npu.npu, torch_npu.__version__, MIN_TORCH_NPU_MEMPOOL
        cls = getattr(torch_npu.npu.memory, "NPUPluggableAllocator", None)
        why = ("torch_npu below 2.13 (every line up to PyTorch 2.12, v26.2.0-beta.1 included) gives a pool's "
               "segments back with aclrtFree, never through the pool's allocator (NPUCachingAllocator.cpp "
               "release_block, v7.0.0:2678-2686, v26.2.0-beta.1-pytorch2.12.0:2989); the 2.13 line and master call "
               "it (commit c1d204968)")
    else:
        mod, have, need = torch.cuda, torch.__version__, MIN_TORCH_MEMPOOL
        cls = getattr(torch.cuda.memory, "CUDAPluggableAllocator", None)
        why = ("torch before 2.8 gives a pool's segment back through the pool's allocator only while that pool is the "
               "releasing thread's active MemPoolContext, else with cudaFree (CUDACachingAllocator.cpp "
               "v2.6:2923-2950; pytorch issue #146431, fixed by PR #154746)")
    if _version(have) < need or cls is None or not hasattr(mod, "MemPool") or not hasattr(mod, "use_mem_pool"):
        raise RuntimeError("hbmalloc: pool() without use() needs %s >= %d.%d (installed: %s): %s, and hbmalloc's "
                           "pages would be freed by a call that is not hbmalloc's. Call hbmalloc.torch.use() first "
                           "(hbmalloc then serves every allocation, its pools sleep the same way), or upgrade"
                           % ("torch_npu" if device == "npu" else "torch", need[0], need[1], have, why))
    return mod, cls


@contextlib.contextmanager
def pool(tag, backup=False):
    """Allocations made inside come from hbmalloc's pool `tag`, which sleep(tag) and wake(tag) put to sleep and
    wake. backup=True: its contents survive a sleep (copied to pinned host memory); False: they come back undefined
    (a KV cache). With use() the calling thread's allocations are routed into it, and a graph captured inside gets a
    pool of the same tag; without use() it is torch's MemPool (use_mem_pool) with hbmalloc as the pool's allocator,
    and torch's own allocator serves everything else (torch >= 2.8, torch_npu >= 2.13). A tag keeps its backup
    setting; a sleeping tag refuses to be entered."""
    lib = library()
    name = str(tag).encode()
    if lib.hbm_torch_pool_state(name) > 0:
        raise RuntimeError("hbmalloc: pool %r is asleep: wake(%r) before allocating into it (its tensors must not "
                           "be touched while it sleeps)" % (tag, tag))
    if _state.get("hooks") is not None:  # use(): hbmalloc is the framework's allocator
        if lib.hbm_torch_pool_enter(name, 1 if backup else 0, _current_device()) != 0:
            raise RuntimeError("hbmalloc: " + _error())
        _tags[str(tag)] = None
        try:
            yield
        finally:
            if lib.hbm_torch_pool_exit() != 0:
                raise RuntimeError("hbmalloc: " + _error())
        return
    device = device_type()
    torch = _need("torch", "PyTorch")
    mod, cls = _mempool_api(device, torch)
    slot = lib.hbm_torch_pool_slot(name, 1 if backup else 0)
    if slot < 0:
        raise RuntimeError("hbmalloc: " + _error())
    _tags[str(tag)] = None
    key = (device, str(tag), mod.current_device())
    if key not in _mempools:
        alloc = cls(lib.path, "hbm_torch_pool_alloc_%d" % slot, "hbm_torch_pool_free")
        _mempools[key] = (mod.MemPool(alloc.allocator()), alloc)
    with mod.use_mem_pool(_mempools[key][0]):
        yield


def _progress(fn):
    return _PROGRESS(lambda ctx, done, total: fn(done, total)) if fn else _PROGRESS()


def _known_tag(call, tag):
    """sleep(tag) and wake(tag) of a tag that no pool() made: a misspelt tag would otherwise put nothing to sleep and
    return 0, and the memory the caller meant to free would stay held. ValueError naming the tags there are."""
    if tag is None or library().hbm_torch_pool_state(str(tag).encode()) >= 0:
        return
    known = dict(_tags)
    known.update((p["tag"], None) for p in pools())
    have = "the tags are " + ", ".join(repr(t) for t in known) if known else "no tag is made yet"
    raise ValueError("hbmalloc: %s(%r): no pool is tagged %r; %s (pool(tag) makes a tag; %s() alone: every tagged "
                     "pool)" % (call, tag, str(tag), have, call))


def pin(tag, reason):
    """Say that pool `tag`'s memory was handed to a collective library (ProcessGroupNCCL.register_mem_pool on its
    MemPool, ncclCommRegister, a symmetric-memory rendezvous): NCCL/HCCL keep pointing at its physical pages, which a
    sleep would give back (hangs or wrong results after the wake). Until unpin(tag), sleep(tag) raises RuntimeError with
    `reason`; graph pools captured inside pool(tag) later are pinned too. hbmalloc cannot see such a registration by
    itself (docs/SLEEP.md, "Collectives")."""
    if library().hbm_torch_pin(str(tag).encode(), str(reason).encode(), 1) != 0:
        raise RuntimeError("hbmalloc: pin(%r): %s" % (tag, _error()))


def unpin(tag):
    """Undo one pin(tag), once the collective library has let go of the pool's memory (deregistered it)."""
    if library().hbm_torch_pin(str(tag).encode(), None, 0) != 0:
        raise RuntimeError("hbmalloc: unpin(%r): %s" % (tag, _error()))


_TRUE = ("y", "yes", "1", "t", "true")  # torch's getCvarBool (torch/csrc/distributed/c10d/Utils.hpp)
_warned = set()


def _collective_risks(tag, env, mempool_mode, graph_pools, nccl):
    """What the environment says a sleep of pool `tag` would do to NCCL: (refusals, warnings), each a sentence.
    mempool_mode: torch's own allocator serves the job (no use()); graph_pools: graphs were captured inside pool(tag);
    nccl: NCCL is in the process. What hbmalloc cannot see (a registration the job made itself) is pin()'s."""
    refuse, warn = [], []
    hook = env.get("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK", "0").strip().lower() in _TRUE
    expandable = "expandable_segments:true" in env.get("PYTORCH_CUDA_ALLOC_CONF", "").replace(" ", "").lower()
    if hook and mempool_mode and not expandable:
        refuse.append("TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=%s: ProcessGroupNCCL registers every segment of "
                      "torch's allocator with NCCL (ncclCommRegister from its allocator trace hook, "
                      "ProcessGroupNCCL.cpp), the segments of pool(%r)'s MemPool included, and NCCL would keep the "
                      "pages this sleep gives back: unset it, or keep the pool out of collectives (vLLM refuses the "
                      "same combination)" % (env["TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"], tag))
    if graph_pools and nccl and env.get("NCCL_GRAPH_REGISTER", "1").strip() != "0":
        warn.append("NCCL registers the buffers of collectives captured in CUDA graphs (NCCL_GRAPH_REGISTER, on unless "
                    "0): a graph captured inside pool(%r) whose collectives NCCL registered keeps pointing at the pages "
                    "this sleep gives back (hangs or wrong results after the wake; torch_memory_saver's README, vLLM's "
                    "sleep mode). Set NCCL_GRAPH_REGISTER=0 before NCCL starts, or capture collectives outside "
                    "pool(%r)" % (tag, tag))
    return refuse, warn


def _nccl_in_process():
    """Whether libnccl is mapped into this process (torch.distributed loads it at the first NCCL communicator)."""
    try:
        with open("/proc/self/maps") as f:
            return any("libnccl" in line for line in f)
    except OSError:
        return False


def _check_collectives(tag):
    """Refuse or warn (once per tag and reason) before sleep(tag), from _collective_risks."""
    infos = [p for p in pools() if tag is None or p["tag"] == tag]
    for t in sorted({p["tag"] for p in infos}):
        mine = [p for p in infos if p["tag"] == t]
        graph_pools = len(mine) > len({p["device"] for p in mine})  # a pool per device, more: graphs captured inside
        refuse, warn = _collective_risks(t, os.environ, _state.get("hooks") is None, graph_pools, _nccl_in_process())
        if refuse:
            raise RuntimeError("hbmalloc: sleep(%r): %s. Nothing was put to sleep" % (t, refuse[0]))
        for w in warn:
            if (t, w) not in _warned:
                _warned.add((t, w))
                warnings.warn("hbmalloc: sleep(%r): %s" % (t, w), RuntimeWarning, stacklevel=3)


def sleep(tag=None, progress=None, chunk_mb=64, backup=None, checksum=False, backup_dir=None):
    """Put pool `tag` (None: every tagged pool) to sleep on every device: the device's work is waited for, the live
    tensors of backup pools are copied to pinned host memory in pieces of chunk_mb (progress(done, total) after each),
    then every physical page of the pool goes back to the device; each tensor keeps its address. Its tensors must not
    be touched until wake() (docs/SLEEP.md says what each device does if they are). backup: None, as pool(tag, backup)
    made the tag; True, copy this time (vLLM's sleep level 1); False, discard this time (level 2: the weights are
    reloaded or synced after the wake). checksum=True: each piece of the backup is checksummed once copied and wake()
    checks it before copying anything back (a RuntimeError naming the pool and the piece if host memory changed; the
    pool stays asleep). backup_dir="/scratch": the backup goes to a nameless file in that folder through two pinned
    buffers of chunk_mb, for jobs whose host memory cannot hold it (its room is taken first: a full disk raises with
    the pool awake; wake() reads it back and closes it). Returns the pools put to sleep; a tag that no pool() made
    raises ValueError naming the tags there are."""
    _known_tag("sleep", tag)
    _check_collectives(tag)
    if backup not in (None, True, False):
        raise ValueError("hbmalloc: sleep(backup=%r): None (as the tag was made), True or False" % (backup,))
    cb = _progress(progress)
    mode = 0 if backup is None else 1 if backup else 2  # hbm_sleep_backup
    folder = None if backup_dir is None else os.fsencode(os.fspath(backup_dir))
    n = library().hbm_torch_sleep_as(str(tag).encode() if tag is not None else None, int(chunk_mb) << 20, mode,
                                     1 if checksum else 0, folder, cb, None)
    if n < 0:
        raise RuntimeError("hbmalloc: sleep(%r): %s" % (tag, _error()))
    return n


def wake(tag=None, progress=None, keep_host_buffers=True, restore=True):
    """Wake pool `tag` (None: every tagged pool): new pages at the same addresses, backups copied back. CUDA and NPU
    graphs captured before the sleep replay as before. keep_host_buffers: the pinned buffers stay for the next sleep
    (pinning is the slow part of a backup). restore=False: the backups are dropped, not copied back, the tensors
    undefined (an RL job loads new weights right after the wake). On failure (the device is full) the pool stays
    asleep, nothing lost. A tag that no pool() made raises ValueError, as in sleep()."""
    _known_tag("wake", tag)
    cb = _progress(progress)
    n = library().hbm_torch_wake_as(str(tag).encode() if tag is not None else None, 0 if keep_host_buffers else 1,
                                    0 if restore else 1, cb, None)
    if n < 0:
        raise RuntimeError("hbmalloc: wake(%r): %s" % (tag, _error()))
    return n


def _text_lines(what, entry):
    """The lines of a plug-in entry that writes text into (buf, len) and returns the length it needs: asked with no
    room first, then again while it needs more (pools made, a sentence grown, between the two calls)."""
    n = entry(None, 0)
    while True:
        if n < 0:
            raise RuntimeError("hbmalloc: %s: %s" % (what, _error()))
        buf = ctypes.create_string_buffer(n + 1)
        need = entry(buf, n + 1)
        if need <= n:
            return buf.value.decode(errors="replace").splitlines()
        n = need


def pools():
    """Every tagged pool of every device in use: its state ("awake", "asleep"), live, reserved and asleep bytes, its
    backup and pinned host memory, and what the last sleep and wake cost (wall and device time in ns, device calls)."""
    out = []
    for line in _text_lines("pools()", library().hbm_torch_pools):
        vals = line.split("\t")
        d = {k: (v if k == "tag" else int(v)) for k, v in zip(_POOL_FIELDS, vals)}
        d["backup"] = bool(d["backup"])
        d["state"] = _STATES[d["state"]] if 0 <= d["state"] < len(_STATES) else str(d["state"])
        out.append(d)
    return out


_RESIDENT_FIELDS = ("device", "device_total", "device_used", "outside", "reserved", "asleep_reserved", "asleep_bytes",
                    "awake_reserved", "awake_live", "graph_reserved", "graph_live", "default_reserved", "default_live",
                    "cache", "releasable", "asleep_pools", "awake_pools", "graph_pools", "awake_tags", "text")


def resident(device=None):
    """What still holds each device's memory, for the devices in use (or `device` alone), one dict each: the
    runtime's device_total and device_used, hbmalloc's reserved bytes by holder (asleep_reserved and asleep_bytes of
    sleeping pools, awake_reserved/_live of tagged pools awake, graph_reserved/_live of untagged private pools,
    default_reserved/_live, cache and what empty_cache gives back of it, releasable), outside (used - reserved: other
    processes, the runtime's context, communicators; None with device_used when the runtime's query failed), the
    count of each kind of pool, awake_tags, and text: one sentence, the largest holder first (docs/SLEEP.md)."""
    dev = -1 if device is None else int(device)
    out = []
    for line in _text_lines("resident()", lambda buf, n: library().hbm_torch_resident(dev, buf, n)):
        vals = line.split("\t")
        d = {k: (v if k in ("awake_tags", "text") else int(v)) for k, v in zip(_RESIDENT_FIELDS, vals)}
        for k in ("device_used", "outside"):
            d[k] = None if d[k] < 0 else d[k]
        out.append(d)
    return out


_OUTSIDE_FIELDS = ("device", "device_total", "device_used", "reserved", "outside", "process_bytes", "process_outside",
                   "others", "text")


def outside(device=None):
    """Device memory hbmalloc does not hold, measured now, for the devices in use (or `device` alone), one dict
    each: the runtime's device_total and device_used, hbmalloc's reserved, outside (used - reserved: the runtime's
    context, NCCL/HCCL buffers, other processes), and where the runtime tells memory by process (CUDA: NVML; NPU:
    DCMI) process_bytes, process_outside (this process's part of outside) and others (other processes'); None
    where unknown; text: one sentence (docs/MONITOR.md, "Memory outside the allocator"). The statistics' keys
    outside_bytes, outside_process_bytes, outside_others_bytes and device_used_bytes keep the last measurement."""
    dev = -1 if device is None else int(device)
    out = []
    for line in _text_lines("outside()", lambda buf, n: library().hbm_torch_outside(dev, buf, n)):
        d = {k: (v if k == "text" else int(v)) for k, v in zip(_OUTSIDE_FIELDS, line.split("\t"))}
        for k in _OUTSIDE_FIELDS[2:-1]:
            d[k] = None if d[k] < 0 else d[k]
        out.append(d)
    return out


def mem_get_info(device=0):
    """(free, total) bytes of the device as its runtime reports them (what torch.cuda.mem_get_info() gives)."""
    f, t = ctypes.c_size_t(), ctypes.c_size_t()
    if library().hbm_torch_mem_info(device, ctypes.byref(f), ctypes.byref(t)) != 0:
        raise RuntimeError("hbmalloc: " + _error())
    return f.value, t.value


if "torch" in sys.modules:  # torch imported before this module: watch what initialises the device (_watch_init)
    _watch_init(sys.modules["torch"])
