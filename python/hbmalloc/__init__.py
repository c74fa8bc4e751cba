"""hbmalloc: a caching allocator for accelerator memory (the HBM of GPUs and NPUs).

    import hbmalloc.torch as hbm
    hbm.use()            # PyTorch (CUDA) or torch_npu: hbmalloc becomes the device allocator

The command-line tool (replay, sweep, view, plan, doctor, top) is `hbmalloc` on PATH, or `python -m hbmalloc`.
torch is not needed to import this package or run the tool; hbmalloc.torch imports it when use() is called."""
import os

__version__ = "0.1.0"  # setup.py checks it against HBM_VERSION_STRING of include/hbmalloc.h

_here = os.path.dirname(os.path.abspath(__file__))


def lib_dir():
    """The folder of the plug-in libraries in an installed package (hbmalloc/lib)."""
    return os.path.join(_here, "lib")


def cli_path():
    """The path of the hbmalloc command-line binary shipped in the package, or None in a source tree."""
    p = os.path.join(_here, "bin", "hbmalloc")
    return p if os.access(p, os.X_OK) else None
