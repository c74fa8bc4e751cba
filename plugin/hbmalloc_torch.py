"""hbmalloc for PyTorch: swap the CUDA caching allocator for hbmalloc, and read its stats.

    import hbmalloc_torch
    hbmalloc_torch.use()            # before the first CUDA allocation
    ...
    hbmalloc_torch.stats()          # {"allocated_bytes.all.peak": ..., ...} like torch.cuda.memory_stats()
    hbmalloc_torch.snapshot("s.pickle")   # opens in pytorch.org/memory_viz

Settings come from HBMALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF. The library is found next to this file, or
at HBMALLOC_TORCH_LIB. Only the standard library and torch are used; torch is imported by use() alone, so the
stats functions work without it (e.g. with HBMALLOC_BACKEND=sim for a dry run).
"""
import ctypes
import os

_lib = None


def library(path=None):
    """Load (once) and return the plug-in's shared library."""
    global _lib
    if _lib is None:
        path = path or os.environ.get("HBMALLOC_TORCH_LIB") or os.path.join(
            os.path.dirname(os.path.abspath(__file__)), "libhbmalloc_torch.so")
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
        _lib = lib
        _lib.path = path
    return _lib


def use(path=None):
    """Make hbmalloc PyTorch's CUDA allocator. Call before anything allocates on the GPU."""
    import torch

    lib = library(path)
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
    return library().hbm_torch_record_stream(ptr, tensor.device.index or 0, stream.cuda_stream)


def set_memory_fraction(fraction, device=0):
    return library().hbm_torch_set_memory_fraction(float(fraction), device)
