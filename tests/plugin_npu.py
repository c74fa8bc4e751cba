"""hbmalloc_torch.use() for torch_npu without torch_npu: stand-in torch and torch_npu modules record what the
helper hands NPUPluggableAllocator, then the hooks are called through the very addresses it passed, as torch_npu
calls them. usage: plugin_npu.py LIB PLUGIN_DIR (HBMALLOC_LIBASCENDCL names the fake runtime)"""
import ctypes
import os
import sys
import types

lib_path, plugin_dir = sys.argv[1:3]
os.environ.pop("HBMALLOC_CONF", None)  # settings must come from PYTORCH_NPU_ALLOC_CONF
sys.path.insert(0, plugin_dir)

calls = {}


class Raw:
    def set_init_fn(self, fn):
        calls["init"] = fn

    def set_reset_fn(self, fn):
        calls["reset"] = fn

    def set_memory_fraction_fn(self, fn):
        calls["fraction"] = fn


class NPUPluggableAllocator:
    def __init__(self, path, alloc_name, free_name):
        calls["ctor"] = (path, alloc_name, free_name)
        self.raw = Raw()

    def allocator(self):
        return self.raw


memory = types.SimpleNamespace(NPUPluggableAllocator=NPUPluggableAllocator,
                               change_current_allocator=lambda a: calls.__setitem__("current", a))
torch_npu = types.ModuleType("torch_npu")
torch_npu.npu = types.SimpleNamespace(memory=memory)
sys.modules["torch"] = types.ModuleType("torch")
sys.modules["torch_npu"] = torch_npu
import hbmalloc_torch as h  # noqa: E402

assert h.device_type() == "npu"
alloc = h.use(lib_path, device="npu")
assert calls["current"] is alloc
path, alloc_name, free_name = calls["ctor"]
assert path == lib_path, path
dl = ctypes.CDLL(lib_path)  # the names torch_npu will dlsym must exist, with torch_npu's signatures
getattr(dl, alloc_name).restype = ctypes.c_void_p
getattr(dl, alloc_name).argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
getattr(dl, free_name).argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
for hook, name in (("init", "hbm_torch_init"), ("reset", "hbm_torch_reset"), ("fraction", "hbm_torch_memory_fraction")):
    assert calls[hook] == ctypes.cast(getattr(dl, name), ctypes.c_void_p).value, hook
init = ctypes.CFUNCTYPE(None, ctypes.c_int)(calls["init"])
reset = ctypes.CFUNCTYPE(None, ctypes.c_bool)(calls["reset"])
fraction = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int)(calls["fraction"])
init(0)
p = getattr(dl, alloc_name)(50 << 20, 0, None)
assert p, h.library().hbm_torch_error().decode()
s = h.stats()
assert s["expandable_segments"] == 1, "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True was not applied"
assert s["allocated_bytes.all.current"] == (50 << 20) + 512, s["allocated_bytes.all.current"]  # torch_npu's pad
getattr(dl, free_name)(p, 50 << 20, 0, None)
assert h.stats()["reserved_bytes.all.current"] > 0
reset(True)  # torch_npu's empty_cache
assert h.stats()["reserved_bytes.all.current"] == 0
fraction(0.25, 0)  # of the fake's 1 GiB: 256 MiB
assert not getattr(dl, alloc_name)(300 << 20, 0, None)
assert getattr(dl, alloc_name)(200 << 20, 0, None)
print("ok")
