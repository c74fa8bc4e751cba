"""The routed memory API under real torch Python code: Debian's torch 1.13 (CPU) torch/cuda/memory.py functions
(memory_stats, memory_allocated, max_memory_reserved, reset_peak_memory_stats, memory_summary, ...) and
torch/cuda/_memory_viz.py, over the torch._C functions hbmalloc_torch routes to hbmalloc.
usage: torch_memory_api.py LIB PLUGIN_DIR   (both empty: the installed package)

torch 1.13 has no CUDAPluggableAllocator (use() refuses it), so the routing is installed on its own here, and CUDA
counts as initialised (a CPU build has no device): everything above torch._C is torch's own code."""
import os
import sys

import torch

lib_path, plugin_dir = sys.argv[1:3]
if plugin_dir:  # "": the installed package (tests/cli/package.sh)
    sys.path.insert(0, plugin_dir)
import hbmalloc_torch as h  # noqa: E402

lib = h.library(lib_path or None)
if not lib_path:  # found by itself, in the installed package
    import hbmalloc
    assert os.path.dirname(lib.path) == hbmalloc.lib_dir(), (lib.path, hbmalloc.lib_dir())
h._state["device"] = "cuda"
h._route_memory_api("cuda", torch, lib, {})
torch.cuda.memory.is_initialized = lambda: True
torch.cuda.current_device = lambda: 0

mem = torch.cuda.memory
assert mem.memory_stats(0)["allocated_bytes.all.current"] == 0  # not allocated yet: zeros, as PyTorch's
p = [lib.hbm_torch_raw_alloc(n, 0, None) for n in (100 << 20, 3 << 20, 512, 700 << 10)]
lib.hbm_torch_free(p[1], 0, 0, None)
assert not lib.hbm_torch_raw_alloc(1 << 40, 0, None)  # an OOM, counted
mine = h.stats(0)
theirs = mem.memory_stats(0)  # torch's flattening of the routed nested dict
for k, v in theirs.items():
    assert mine[k] == v, (k, mine[k], v)
missing = set(mine) - set(theirs) - {"expandable_segments", "num_expandable_segments", "arena_bytes", "plan_height", "plan_hits", "plan_unplanned", "plan_replans", "steps",
                                   "plan_misses", "asleep_pools", "asleep_bytes", "backup_bytes", "device_used_bytes",
                                   "outside_bytes", "outside_process_bytes", "outside_others_bytes"}
assert not missing, missing  # every PyTorch statistic hbmalloc keeps reaches torch's dict
assert theirs["num_ooms"] == 1 and theirs["allocation.all.current"] == 3
assert mem.memory_allocated(0) == mine["allocated_bytes.all.current"]
assert mem.max_memory_allocated(0) == mine["allocated_bytes.all.peak"]
assert mem.memory_reserved(0) == mine["reserved_bytes.all.current"]
assert mem.max_memory_reserved(0) == mine["reserved_bytes.all.peak"]
summary = mem.memory_summary(0)
assert "PyTorch CUDA memory summary" in summary and "Allocated memory" in summary, summary
assert "CUDA OOMs: 1" in summary, summary
mem.reset_peak_memory_stats(0)
assert mem.max_memory_allocated(0) == mem.memory_allocated(0)
mem.reset_accumulated_memory_stats(0)
assert mem.memory_stats(0)["num_ooms"] == 0 and mem.memory_stats(0)["allocation.all.allocated"] == 0
# 1.13's history switch (_cuda_recordMemoryHistory(enabled)), then the snapshot torch's viz tools read.
torch._C._cuda_recordMemoryHistory(True)
q = lib.hbm_torch_raw_alloc(8 << 20, 0, None)
snap = torch._C._cuda_memorySnapshot()
segs = snap["segments"]
st = torch.cuda._memory_viz.stats(segs)  # asserts each segment's blocks add up to its size
assert st["segments"] == len(segs) >= 2 and st["total_size"].value == h.stats(0)["reserved_bytes.all.current"], st
lines = torch.cuda._memory_viz.segments(segs, format_flamegraph=lambda s: s)
assert lines.count("active_allocated") == 4, lines
for x in (p[0], p[2], p[3], q):
    lib.hbm_torch_free(x, 0, 0, None)
print("ok")
