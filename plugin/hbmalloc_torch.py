"""hbmalloc for PyTorch: swap the CUDA or NPU caching allocator for hbmalloc, and read its stats.

    import hbmalloc_torch
    hbmalloc_torch.use()            # before the first GPU/NPU allocation; "npu" when torch_npu is installed
    ...
    hbmalloc_torch.stats()          # {"allocated_bytes.all.peak": ..., ...} like torch.cuda.memory_stats()
    hbmalloc_torch.snapshot("s.pickle")   # opens in pytorch.org/memory_viz

Settings come from HBMALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF (CUDA) or PYTORCH_NPU_ALLOC_CONF (Ascend). The
library (libhbmalloc_torch.so for CUDA, libhbmalloc_torch_npu.so for torch_npu) is found next to this file, or at
HBMALLOC_TORCH_LIB. Only the standard library and torch (and torch_npu) are used; they are imported by use()
alone, so the stats functions work without them (e.g. with HBMALLOC_BACKEND=sim for a dry run).
"""
import ctypes
import importlib.util
import os
import sys

_lib = None


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


def library(path=None, device=None):
    """Load (once) and return the plug-in's shared library for `device` ("cuda" or "npu")."""
    global _lib
    if _lib is None:
        name = "libhbmalloc_torch_npu.so" if (device or device_type()) == "npu" else "libhbmalloc_torch.so"
        path = path or os.environ.get("HBMALLOC_TORCH_LIB") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), name)
        lib = ctypes.CDLL(path)
        lib.hbm_torch_alloc.restype = ctypes.c_void_p
        lib.hbm_torch_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        lib.hbm_torch_free.restype = None
        lib.hbm_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
        lib.hbm_torch_stats.restype = ctypes.c_long
        lib.hbm_torch_stats.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_long]
        lib.hbm_torch_snapshot.argtypes = [ctypes.c_int, ctypes.c_char_p]
        lib.hbm_torch_record_history.argtypes = [ctypes.c_int, ctypes.c_long]
        lib.hbm_torch_record_stream.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
        lib.hbm_torch_set_memory_fraction.argtypes = [ctypes.c_double, ctypes.c_int]
        lib.hbm_torch_error.restype = ctypes.c_char_p
        for hook in ("hbm_torch_init", "hbm_torch_reset", "hbm_torch_memory_fraction"):
            getattr(lib, hook).restype = None
        _lib = lib
        _lib.path = path
    return _lib


def _address(lib, name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


def use(path=None, device=None):
    """Make hbmalloc the framework's device allocator. Call before anything allocates on the device.

    device: "cuda" (torch.cuda.memory.CUDAPluggableAllocator) or "npu" (torch_npu's NPUPluggableAllocator,
    with the init, reset = empty_cache and memory-fraction hooks); by default "npu" when torch_npu is installed.
    """
    device = device or device_type()
    lib = library(path, device)
    if device == "npu":
        import torch  # noqa: F401  (torch_npu needs torch imported first)
        import torch_npu

        memory = torch_npu.npu.memory
        alloc = memory.NPUPluggableAllocator(lib.path, "hbm_torch_alloc", "hbm_torch_free")
        raw = alloc.allocator()
        raw.set_init_fn(_address(lib, "hbm_torch_init"))
        raw.set_reset_fn(_address(lib, "hbm_torch_reset"))
        raw.set_memory_fraction_fn(_address(lib, "hbm_torch_memory_fraction"))
        memory.change_current_allocator(alloc)
        return alloc
    import torch

    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib.path, "hbm_torch_alloc", "hbm_torch_free")
    torch.cuda.memory.change_current_allocator(alloc)
    return alloc


def stats(device=0):
    """hbmalloc's statistics under torch.cuda.memory_stats() names."""
    lib = library()
    n = lib.hbm_torch_stats(device, None, 0)
    if n < 0:
        raise RuntimeError(lib.hbm_torch_error().decode())
    buf = ctypes.create_string_buffer(n + 1)
    lib.hbm_torch_stats(device, buf, n + 1)
    out = {}
    for line in buf.value.decode().splitlines():
        name, value = line.split()
        out[name] = int(value)
    return out


def record_history(max_entries=100000, device=0):
    """Keep the newest max_entries trace entries (alloc, free, segment events) for snapshot()."""
    if library().hbm_torch_record_history(device, max_entries) != 0:
        raise RuntimeError(library().hbm_torch_error().decode())


def snapshot(path, device=0):
    """Write a PyTorch-format memory snapshot (.pickle, or .json)."""
    if library().hbm_torch_snapshot(device, path.encode()) != 0:
        raise RuntimeError("hbmalloc: could not write the snapshot " + path)


def empty_cache():
    """Return every whole free segment to the device, on every device."""
    return library().hbm_torch_empty_cache()


def record_stream(tensor, stream):
    """Like Tensor.record_stream, for hbmalloc: the block waits for `stream` before reuse."""
    ptr = tensor.untyped_storage().data_ptr()
    handle = stream.npu_stream if hasattr(stream, "npu_stream") else stream.cuda_stream
    return library().hbm_torch_record_stream(ptr, tensor.device.index or 0, handle)


def set_memory_fraction(fraction, device=0):
    return library().hbm_torch_set_memory_fraction(float(fraction), device)
