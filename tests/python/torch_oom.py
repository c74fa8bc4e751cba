"""Out of memory inside a real torch: the plug-in's alloc installed as torch's CPU allocator (torch_cpu_shim.cpp)
on a host-backed simulated device, then real ops. usage: torch_oom.py SHIM PLUGIN c10|generic

c10: the plug-in built against this torch's headers throws c10::OutOfMemoryError, which torch's bindings turn into
torch.cuda.OutOfMemoryError; generic: a std::runtime_error, which they turn into RuntimeError. Either way the text
starts as PyTorch's own, and the allocator keeps working after it. With HBMALLOC_OOM_DUMP_DIR set, as a torchrun job
sets it for every rank, each OOM also leaves this rank's snapshot there (src/io/oom_dump.c), at most three."""
import atexit
import ctypes
import os
import pickle
import shutil
import sys
import tempfile

import torch

shim_path, plugin_path, kind = sys.argv[1:4]
dumps = tempfile.mkdtemp(prefix="hbm-oomdump-")
atexit.register(shutil.rmtree, dumps, True)  # also when an assertion fails
os.environ["HBMALLOC_OOM_DUMP_DIR"] = dumps  # read when the device's allocator is made, at the first allocation
os.environ["RANK"] = "1"
shim = ctypes.CDLL(shim_path)
assert shim.hbm_test_install(plugin_path.encode()) == 0, "cannot install the plug-in as torch's CPU allocator"
plugin = ctypes.CDLL(plugin_path)
plugin.hbm_torch_stats.restype = ctypes.c_long


def stat(name):
    buf = ctypes.create_string_buffer(1 << 16)
    assert plugin.hbm_torch_stats(0, buf, len(buf)) > 0
    return dict((k, int(v)) for k, v in (line.split() for line in buf.value.decode().splitlines()))[name]


x = torch.arange(1000, dtype=torch.float32)  # through hbm_torch_alloc now
assert stat("allocation.all.current") >= 1
assert float(x.sum()) == 499500.0
try:
    torch.empty(1 << 40, dtype=torch.uint8)  # 1 TiB on a 512 MiB device
    raise AssertionError("no exception")
except RuntimeError as e:
    text = str(e)
    oom_type = isinstance(e, torch.cuda.OutOfMemoryError)
assert text.startswith("CUDA out of memory. Tried to allocate 1024.00 GiB. GPU 0 has a total capacity of 512.00 MiB"), text
assert "\nhbmalloc: out of memory on sim device 0." in text, text
# reportProcessMemoryInfo's lines where PyTorch puts them, right after "is free. " (pytorch/pytorch
# c10/cuda/CUDACachingAllocator.cpp at eb42ad6eca0c: proc_info between device_free and allowed_info): the simulated
# device lists this process (its blocks and its 64 MiB context) and process 4242 with 32 MiB, as NVML would.
free_end = text.index(" is free. ") + len(" is free. ")
procs = text[free_end:text.index("Of the allocated memory")]
assert "Including non-PyTorch memory, this process has " in procs, text
assert "Process 4242 has 32.00 MiB memory in use. " in procs, text
assert "hbmalloc: " in text and "32.00 MiB by other processes (process 4242 32.00 MiB)" in text, text
if kind == "c10":
    assert oom_type, "c10::OutOfMemoryError should surface as torch.cuda.OutOfMemoryError"
else:
    assert not oom_type, "a std::runtime_error surfaces as a plain RuntimeError"
assert stat("num_ooms") == 1
# The rank's snapshot, written before the error reached torch: a pickle as torch's _dump_snapshot writes it, holding x.
first = "hbmalloc-oom-rank1-dev0-pid%d-1.pickle" % os.getpid()
assert os.listdir(dumps) == [first], os.listdir(dumps)
with open(os.path.join(dumps, first), "rb") as f:
    snap = pickle.load(f)
blocks = [b for seg in snap["segments"] for b in seg["blocks"]]
assert any(b["address"] == x.data_ptr() and b["state"] == "active_allocated" for b in blocks), blocks
# A batch-size finder's loop: halve until it fits, then train on.
n = 1 << 40
while True:
    try:
        y = torch.ones(n // 8, dtype=torch.float64)
        break
    except RuntimeError as e:
        assert "CUDA out of memory." in str(e)
        n //= 2
assert n <= 512 << 20 and float(y[:4].sum()) == 4.0
# Thirteen OOMs in all (1 TiB, then 1 TiB down to 512 MiB), three snapshots: the first ones (the default bound).
assert stat("num_ooms") == 13
assert sorted(os.listdir(dumps)) == ["hbmalloc-oom-rank1-dev0-pid%d-%d.pickle" % (os.getpid(), i) for i in (1, 2, 3)]
z = (x * 2).sum()
assert float(z) == 999000.0
print("ok:", kind, type(e).__name__ if False else "", "fits at", n >> 20, "MiB")
