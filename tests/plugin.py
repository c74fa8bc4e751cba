"""The PyTorch plug-in without PyTorch: its entry points through ctypes, as CUDAPluggableAllocator calls
them, and the helper's stats/snapshot. usage: plugin.py LIB PLUGIN_DIR SNAPSHOT_PATH"""
import ctypes
import os
import pickle
import sys

lib_path, plugin_dir, snap = sys.argv[1:4]
sys.path.insert(0, plugin_dir)
import hbmalloc_torch as h  # noqa: E402

# The NPU run: torch_npu's 32-byte pad per request, and settings from PYTORCH_NPU_ALLOC_CONF.
pad = int(os.environ.get("HBM_EXPECT_PAD", "0"))
expect_expandable = os.environ.get("HBM_EXPECT_EXPANDABLE")
if expect_expandable:
    os.environ.pop("HBMALLOC_CONF", None)
lib = h.library(lib_path)
h.record_history(1000)
ptrs = [lib.hbm_torch_alloc(n, 0, None) for n in (1 << 20, 3 << 20, 100 << 20)]
assert all(ptrs), "allocation failed: " + lib.hbm_torch_error().decode()
s = h.stats()
assert s["allocation.all.current"] == 3, s["allocation.all.current"]
assert s["allocated_bytes.all.current"] == (1 << 20) + (3 << 20) + (100 << 20) + 3 * pad, s["allocated_bytes.all.current"]
if expect_expandable:
    assert s["expandable_segments"] == int(expect_expandable), s["expandable_segments"]
assert s["requested_bytes.all.peak"] == (104 << 20)
lib.hbm_torch_free(ptrs[1], 3 << 20, 0, None)
assert h.stats()["allocation.all.current"] == 2
# Out of memory: NULL back (PyTorch raises), the allocator's message on stderr.
assert not lib.hbm_torch_alloc(1 << 40, 0, None)
assert h.stats()["num_ooms"] == 1
h.snapshot(snap)
d = pickle.load(open(snap, "rb"))
# Small and large pool; with the NPU pad the 1 MiB request is over the small-pool limit, so one pool.
assert len(d["segments"]) >= (1 if pad else 2) and d["device_traces"][0][0]["action"] in ("alloc", "segment_alloc", "segment_map")
for p in (ptrs[0], ptrs[2]):
    lib.hbm_torch_free(p, 0, 0, None)
assert h.empty_cache() == 0
assert h.stats()["reserved_bytes.all.current"] == 0
print("ok")
