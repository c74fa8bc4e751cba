"""The plug-in without PyTorch: the helper's entry points through ctypes on the configured backend (sim, the fake
CUDA driver, the fake AscendCL runtime): allocation, statistics, OOM text, history with Python stacks and labels,
snapshots. usage: plugin.py LIB PLUGIN_DIR SNAPSHOT_PATH (LIB and PLUGIN_DIR empty: the installed package)"""
import os
import pickle
import sys

lib_path, plugin_dir, snap = sys.argv[1:4]
import glob  # noqa: E402
import tempfile  # noqa: E402
top_dir = tempfile.mkdtemp(prefix="hbm-plugin-top-")
os.environ["HBMALLOC_TOP_DIR"] = top_dir  # where the plug-in publishes for hbmalloc top (on by default)
import atexit  # noqa: E402
import shutil  # noqa: E402
atexit.register(shutil.rmtree, top_dir, True)
if plugin_dir:  # "": the installed package (tests/cli/package.sh)
    sys.path.insert(0, plugin_dir)
import hbmalloc_torch as h  # noqa: E402

# The NPU run: torch_npu's 32-byte pad per request, and settings from PYTORCH_NPU_ALLOC_CONF.
pad = int(os.environ.get("HBM_EXPECT_PAD", "0"))
npu = pad > 0
expect_expandable = os.environ.get("HBM_EXPECT_EXPANDABLE")
if expect_expandable:
    os.environ.pop("HBMALLOC_CONF", None)
lib = h.library(lib_path or None)
# On the fake CUDA driver: the calling thread has no context, and every call of the plug-in must leave it so (the
# device guard gives the caller's context back, NULL included: docs/CONTRACTS.md, cuCtxGetCurrent/cuCtxSetCurrent).
fake_cuda = None
backend = os.environ.get("HBMALLOC_BACKEND", "")
if backend.startswith("cuda:lib="):
    import ctypes
    fake_cuda = ctypes.CDLL(backend[len("cuda:lib="):])


def no_context_left(what):
    if fake_cuda is not None:
        assert fake_cuda.fake_cuda_current() == -1, "%s left a CUDA context current on the thread" % what
if not lib_path:  # found by itself, in the installed package
    import hbmalloc
    assert os.path.dirname(lib.path) == hbmalloc.lib_dir(), (lib.path, hbmalloc.lib_dir())
assert lib.build == "generic", lib.build
assert lib.hbm_torch_device_used(0) == 0
assert h.stats()["allocation.all.current"] == 0  # statistics of an unused device: zeros, nothing created
assert lib.hbm_torch_device_used(0) == 0
h.record_history(1000, stacks=True)


def layer_forward(n):  # the frame the snapshot must show for these allocations
    return lib.hbm_torch_raw_alloc(n, 0, None)


ptrs = [layer_forward(n) for n in (1 << 20, 3 << 20, 100 << 20)]
assert all(ptrs), "allocation failed: " + h._error()
no_context_left("alloc")
# The plug-in published this device's allocator without being asked (hbm_publish, docs/MONITOR.md): one record,
# named for this user, process and device, readable by this user only.
recs = glob.glob(os.path.join(top_dir, "hbmalloc-%d-%d-0-*" % (os.geteuid(), os.getpid())))
assert len(recs) == 1 and os.stat(recs[0]).st_mode & 0o777 == 0o600, (recs, os.listdir(top_dir))
with h.label("optimizer"):
    with h.label("inner"):
        inner = lib.hbm_torch_raw_alloc(8192, 0, None)
    assert lib.hbm_torch_get_label() == b"optimizer"
    opt = lib.hbm_torch_raw_alloc(4096, 0, None)
assert lib.hbm_torch_get_label() == b""
s = h.stats()
assert s["allocation.all.current"] == 5, s["allocation.all.current"]
assert s["allocated_bytes.all.current"] == (1 << 20) + (3 << 20) + (100 << 20) + 8192 + 4096 + 5 * pad, \
    s["allocated_bytes.all.current"]
if expect_expandable:
    assert s["expandable_segments"] == int(expect_expandable), s["expandable_segments"]
assert s["requested_bytes.all.peak"] == (104 << 20) + 8192 + 4096
lib.hbm_torch_free(ptrs[1], 3 << 20, 0, None)
assert h.stats()["allocation.all.current"] == 4
# Out of memory: NULL here (hbm_torch_alloc throws instead), the framework's own text then hbmalloc's.
assert not lib.hbm_torch_raw_alloc(1 << 40, 0, None)
err = h._error()
assert err.startswith("NPU out of memory. Tried to allocate " if npu else "CUDA out of memory. Tried to allocate "), err
assert "\nhbmalloc: out of memory on " in err, err
assert h.stats()["num_ooms"] == 1
h.snapshot(snap)
d = pickle.load(open(snap, "rb"))
# Small and large pool; with the NPU pad the 1 MiB request is over the small-pool limit, so one pool.
assert len(d["segments"]) >= (1 if pad else 2)
trace = d["device_traces"][0]
assert trace[0]["action"] in ("alloc", "segment_alloc", "segment_map")
allocs = [e for e in trace if e["action"] == "alloc"]
assert len(allocs) == 5, [e["action"] for e in trace]
me = os.path.abspath(__file__)
for e in allocs[:3]:  # innermost first: layer_forward, then the list comprehension, then <module>
    f = e["frames"]
    assert f[0]["name"] == "layer_forward" and os.path.abspath(f[0]["filename"]) == me, f[:2]
    assert f[0]["line"] == layer_forward.__code__.co_firstlineno + 1, f[0]  # its raw_alloc line
    assert f[-1]["name"] == "<module>", f[-1]
assert allocs[3]["frames"][0] == {"name": "inner", "filename": "", "line": 0}, allocs[3]["frames"][:2]
assert allocs[4]["frames"][0]["name"] == "optimizer" and allocs[4]["frames"][1]["name"] == "<module>"
# The live blocks carry their allocation's frames too (the "Allocator State History" view).
blocks = [b for seg in d["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
assert len(blocks) == 4 and all(b["frames"] for b in blocks), blocks
# History off: no stacks taken, no more entries.
h.record_history(0, stacks=False)
x = lib.hbm_torch_raw_alloc(4096, 0, None)
lib.hbm_torch_free(x, 0, 0, None)
for p in (ptrs[0], ptrs[2], inner, opt):
    lib.hbm_torch_free(p, 0, 0, None)
assert h.empty_cache() == 0
assert h.stats()["reserved_bytes.all.current"] == 0
no_context_left("free and empty_cache")
# Peer access (hbm_backend_enable_peer), which torch's pluggable allocator never forwards: a device and itself need
# nothing; a device that does not exist is refused with the reason.
h.enable_peer(0, 0)
try:
    h.enable_peer(0, 4096)
    raise AssertionError("enable_peer accepted device 4096")
except RuntimeError as e:
    assert "no device 0 or 4096" in str(e), e
no_context_left("enable_peer")


# Step boundaries (hbm_step): step() counts; hook_optimizer calls it after each optimizer.step, through torch's
# register_step_post_hook where the optimizer has it (torch >= 2.0), else by wrapping step (torch 1.13).
class OldOptimizer:
    def __init__(self):
        self.calls = 0

    def step(self, closure=None):
        self.calls += 1
        return "loss"


class NewOptimizer(OldOptimizer):
    def __init__(self):
        super().__init__()
        self.hooks = []

    def register_step_post_hook(self, hook):
        self.hooks.append(hook)
        return self

    def step(self, closure=None):
        out = super().step(closure)
        for hook in self.hooks:
            hook(self, (), {})
        return out


steps = h.stats()["steps"]
h.step()
assert h.stats()["steps"] == steps + 1
old, new = OldOptimizer(), NewOptimizer()
handle = h.hook_optimizer(old)
assert old.step() == "loss" and old.calls == 1 and h.stats()["steps"] == steps + 2
handle.remove()
old.step()
assert h.stats()["steps"] == steps + 2  # unhooked
h.hook_optimizer(new)
new.step()
new.step()
assert new.calls == 2 and h.stats()["steps"] == steps + 4
print("ok")
