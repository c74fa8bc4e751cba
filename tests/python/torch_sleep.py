"""hbmalloc.torch.pool(), sleep() and wake() inside stand-in torch / torch_npu modules that follow the frameworks' own
call paths (cited), on the host-backed simulated device with virtual memory (device memory is host memory there, so
contents are checked byte for byte, and the device's free memory is the sim's).

usage: torch_sleep.py LIB PLUGIN_DIR MODE, MODE one of
  2.9         torch's own allocator global, pool() through torch.cuda.MemPool with hbmalloc as the pool's allocator
  2.6         the same, refused: torch 2.6 releases a pool's segment with cudaFree unless the pool is the releasing
              thread's active MemPoolContext
  npu-2.13    torch_npu 2.13 (the PyTorch 2.13 line, master): torch_npu.npu.MemPool with hbmalloc as the pool's
              allocator
  npu-26.1.0  refused: torch_npu below 2.13 (v26.1.0, and v26.2.0-beta.1 on the 2.7.1-2.12 lines) releases a pool's
              segments with aclrtFree
  use-2.9     hbmalloc.torch.use() first: pool() routes the thread's allocations (the alloc hook) into the pool

What the stand-in native allocator models of CUDACachingAllocator / NPUCachingAllocator for a MemPool with a custom
allocator (torch main, inferred for 2.8+ from the stored copies docs/CONTRACTS.md names; torch_npu master
NPUCachingAllocator.cpp:2997-3001, 3208-3214): a segment is obtained with the pool allocator's raw_alloc(size) ->
alloc_fn(size, current device, current stream), a NULL return is cudaErrorMemoryAllocation (allocPrimitive), sizes
are get_allocation_size's (2 MiB, 20 MiB, rounded to 2 MiB), freed tensors stay cached in the pool, and segments go
back through raw_delete -> free_fn(ptr, size, device, stream recorded at alloc) when the pool is emptied
(~MemPool: releasePool then emptyCache(id)). Not modelled: splitting a segment between tensors, streams other than
the current one, graph capture."""
import ctypes
import gc
import os
import sys
import tempfile
import types

lib_path, plugin_dir, mode = sys.argv[1:4]
os.environ.pop("HBMALLOC_CONF", None)
if plugin_dir:
    sys.path.insert(0, plugin_dir)
npu = mode.startswith("npu")
use_mode = mode.startswith("use-")
version = {"2.9": (2, 9), "2.6": (2, 6), "use-2.9": (2, 9), "npu-2.13": (2, 13), "npu-26.1.0": (2, 10)}[mode]
MiB = 1 << 20
seen = {"raw_alloc": [], "raw_delete": [], "hooks": {}}


# ---- the native caching allocator's private-pool path ----

def allocation_size(n):
    # get_allocation_size (CUDACachingAllocator.cpp v2.6; the same rule at main): kSmallSize 1 MiB -> kSmallBuffer
    # 2 MiB; below kMinLargeAlloc 10 MiB -> kLargeBuffer 20 MiB; else rounded up to kRoundLarge 2 MiB.
    if n <= MiB:
        return 2 * MiB
    if n < 10 * MiB:
        return 20 * MiB
    return (n + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)


class Pluggable:
    """CUDAPluggableAllocator (memory.py; CUDAPluggableAllocator.cpp): the functions named in the .so, looked up with
    dlsym; raw_alloc(n) -> alloc_fn(n, current device, current stream) (v2.6:130-135), raw_delete(p) ->
    free_fn(p, size, device, stream recorded at alloc) (v2.6:145-160). NPUPluggableAllocator the same."""

    def __init__(self, path, alloc_name, free_name):
        so = ctypes.CDLL(path)
        self.alloc_fn = getattr(so, alloc_name)
        self.alloc_fn.restype = ctypes.c_void_p
        self.alloc_fn.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        self.free_fn = getattr(so, free_name)
        self.free_fn.restype = None
        self.free_fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
        self.meta = {}
        self.names = (alloc_name, free_name)
        self._raw = types.SimpleNamespace(**{s: (lambda n: lambda fn: seen["hooks"].__setitem__(n, fn))(s) for s in (
            "set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_base_alloc_fn", "set_record_stream_fn",
            "set_begin_allocate_to_pool", "set_end_allocate_to_pool_fn", "set_release_pool")}, owner=self)

    def allocator(self):
        return self._raw

    def raw_alloc(self, n):
        p = self.alloc_fn(n, state["device"], None)
        if p:
            self.meta[p] = (n, state["device"], None)
        seen["raw_alloc"].append((n, p))
        return p

    def raw_delete(self, p):
        if p not in self.meta:
            raise RuntimeError("Trying to free a pointer not allocated here")
        n, dev, stream = self.meta.pop(p)
        seen["raw_delete"].append(p)
        self.free_fn(p, n, dev, stream)


class OutOfMemoryError(RuntimeError):
    pass


class MemPool:
    """MemPool(allocator) (memory.py main: super().__init__(allocator, True, ...); MemPool.cpp: createOrIncrefPool with
    the allocator, which the PrivatePool owns from 2.8 on)."""
    ids = 0

    def __init__(self, allocator=None):
        state["init"] = True  # MemPool.cpp: device_lazy_init
        MemPool.ids += 1
        self.id = (0, MemPool.ids)
        self.allocator = allocator.owner
        self.cached = []  # (ptr, size): segments whose tensor was freed

    def malloc(self, n):
        # get_free_block in the pool, else alloc_block -> allocPrimitive -> raw_alloc; NULL: free cached, retry, OOM.
        fit = sorted((s, p) for p, s in self.cached if s >= n)
        if fit:
            s, p = fit[0]
            self.cached.remove((p, s))
            return p, s
        size = allocation_size(n)
        p = self.allocator.raw_alloc(size)
        if not p:
            self.empty_cache()
            p = self.allocator.raw_alloc(size)
        if not p:
            raise OutOfMemoryError("CUDA out of memory. Tried to allocate %d bytes" % size)
        return p, size

    def empty_cache(self):
        # release_cached_blocks for this pool: release_block -> raw_delete (main: the pool's own allocator).
        for p, s in self.cached:
            self.allocator.raw_delete(p)
        self.cached = []

    def __del__(self):
        # ~MemPool: releasePool, then emptyCache(id) (CUDACachingAllocator.cpp v2.6:4007-4012; MemPool.cpp main).
        self.empty_cache()


state = {"device": 0, "init": False, "routed": [], "swapped": None}


class Tensor:
    """A tensor of n bytes: from the pool the thread routes to (beginAllocateCurrentThreadToPool), else from the
    global allocator (hbmalloc's alloc hook after use(), else plain host memory standing for torch's own)."""

    def __init__(self, n):
        self.n = n
        if state["routed"]:
            self.pool = state["routed"][-1]
            self.ptr, self.size = self.pool.malloc(n)
        elif state["swapped"] is not None:
            self.pool = None
            self.ptr = lib.hbm_torch_raw_alloc(n, state["device"], None)  # the alloc hook's path, without the throw
            if not self.ptr:
                raise RuntimeError(hbm._error())
        else:
            self.pool, self.buf = None, ctypes.create_string_buffer(n)
            self.ptr = ctypes.addressof(self.buf)

    def data_ptr(self):
        return self.ptr

    def free(self):
        if self.pool is not None:
            self.pool.cached.append((self.ptr, self.size))
            self.pool = None  # a dead tensor holds no pool
        elif state["swapped"] is not None:
            lib.hbm_torch_free(self.ptr, self.n, state["device"], None)


def use_mem_pool(pool, device=None):
    # memory.py main: _cuda_beginAllocateCurrentThreadToPool(device, pool.id); yield; finally
    # _cuda_endAllocateToPool and _cuda_releasePool.
    import contextlib

    @contextlib.contextmanager
    def ctx():
        state["routed"].append(pool)
        try:
            yield
        finally:
            state["routed"].pop()
    return ctx()


# ---- torch / torch_npu modules ----

torch = types.ModuleType("torch")
torch.__version__ = "%d.%d.0" % version
torch._C = types.ModuleType("torch._C")
torch._C._GLIBCXX_USE_CXX11_ABI = True
cuda = types.ModuleType("torch.cuda")
cuda.memory = types.ModuleType("torch.cuda.memory")
cuda.is_initialized = lambda: state["init"]
cuda._lazy_init = lambda: state.__setitem__("init", True)
cuda.current_device = lambda: state["device"]
cuda.memory.memory_stats = types.SimpleNamespace(__doc__="")


def change_current_allocator(a):
    # CUDAPluggableAllocator.cpp v2.6:393-401: refused once the allocator is initialised.
    if state["init"]:
        raise RuntimeError("Can't swap an already initialized allocator")
    state["swapped"] = a


if not npu:
    cuda.memory.CUDAPluggableAllocator = Pluggable
    cuda.memory.change_current_allocator = change_current_allocator
    if version >= (2, 5):  # MemPool from 2.5 (docs 2.5); its allocator owned by the pool from 2.8
        cuda.MemPool = cuda.memory.MemPool = MemPool
        cuda.use_mem_pool = cuda.memory.use_mem_pool = use_mem_pool
torch.cuda = cuda
sys.modules.update({"torch": torch, "torch._C": torch._C, "torch.cuda": cuda, "torch.cuda.memory": cuda.memory})
if npu:
    tn = types.ModuleType("torch_npu")
    tn.__version__ = "%d.%d.0" % version
    tn._C = types.ModuleType("torch_npu._C")
    tn.npu = types.ModuleType("torch_npu.npu")
    tn.npu.memory = types.ModuleType("torch_npu.npu.memory")
    tn.npu.memory.NPUPluggableAllocator = Pluggable
    tn.npu.current_device = lambda: state["device"]
    tn.npu.is_initialized = lambda: state["init"]
    # torch_npu.npu.MemPool / use_mem_pool: from 7.0.0 (memory.py 7.0.0:647-694; master :778, :823).
    tn.npu.MemPool = tn.npu.memory.MemPool = MemPool
    tn.npu.use_mem_pool = tn.npu.memory.use_mem_pool = use_mem_pool
    sys.modules.update({"torch_npu": tn, "torch_npu.npu": tn.npu, "torch_npu.npu.memory": tn.npu.memory})

import hbmalloc.torch as hbm  # noqa: E402

lib = hbm.library(lib_path, "npu" if npu else "cuda")


def fill(t, seed):
    ctypes.memmove(t.data_ptr(), bytes((i * 7 + seed) & 0xff for i in range(256)) * (t.n // 256), t.n)


def same(t, seed):
    return ctypes.string_at(t.data_ptr(), t.n) == bytes((i * 7 + seed) & 0xff for i in range(256)) * (t.n // 256)


def refused_tag(call, tag, *named):
    """call(tag) of a tag no pool() made raises ValueError naming the tags there are (issue #36 item 6: it returned 0,
    and a misspelt tag left the memory it meant to free held)."""
    try:
        call(tag)
    except ValueError as e:
        text = str(e)
        assert "%s(%r): no pool is tagged %r" % (call.__name__, tag, tag) in text, text
        for t in named:
            assert repr(t) in text, (t, text)
        return text
    raise AssertionError("%s(%r) of an unknown tag did not raise" % (call.__name__, tag))


if mode in ("2.6", "npu-26.1.0"):
    assert "no tag is made yet" in refused_tag(hbm.sleep, "weights")
    try:
        with hbm.pool("weights", backup=True):
            raise AssertionError("pool() accepted a release that frees pool segments itself")
    except RuntimeError as e:
        text = str(e)
        assert "pool() without use() needs" in text, text
        assert ("aclrtFree" in text) if npu else ("MemPoolContext" in text and "cudaFree" in text), text
        assert "use()" in text, text
    print("ok")
    sys.exit(0)

if use_mode:
    hbm.use(lib_path, device="cuda")
    state["init"] = True

# Weights (backup) and a KV cache (discarded), beside tensors of the global allocator, which a training loop uses.
other = Tensor(8 * MiB)
fill(other, 9)
with hbm.pool("weights", backup=True):
    w = [Tensor(n) for n in (3 * MiB, 512 * 1024, 30 * MiB)]
with hbm.pool("kv_cache"):
    kv = Tensor(40 * MiB)
for i, t in enumerate(w):
    fill(t, i)
fill(kv, 5)
if not use_mode:
    # torch asked hbmalloc for whole segments, with the pool's own entry point (one per tag).
    assert [n for n, p in seen["raw_alloc"]] == [20 * MiB, 2 * MiB, 30 * MiB, 40 * MiB], seen["raw_alloc"]
    names = {(p.allocator.names[0]) for (_, _, _), (p, _) in hbm._mempools.items()}
    assert names == {"hbm_torch_pool_alloc_0", "hbm_torch_pool_alloc_1"}, names
info = {p["tag"]: p for p in hbm.pools()}
assert set(info) == {"weights", "kv_cache"}, info
assert info["weights"]["state"] == "awake" and info["weights"]["backup"] and not info["kv_cache"]["backup"]
free0, total = hbm.mem_get_info(0)
reserved = info["weights"]["reserved_bytes"] + info["kv_cache"]["reserved_bytes"]
addrs = [t.data_ptr() for t in w] + [kv.data_ptr()]

# A misspelt tag is an error naming the tags, in sleep() and wake(); nothing is put to sleep.
refused_tag(hbm.sleep, "weigths", "weights", "kv_cache")
refused_tag(hbm.wake, "kv", "weights", "kv_cache")
assert {p["tag"]: p["state"] for p in hbm.pools()} == {"weights": "awake", "kv_cache": "awake"}

# A tag with a tab or a newline is refused with the reason (it made pools() raise on every call after, its line split
# at the tab), and so is an empty one; pools() still reads (issue #37 item 10).
for bad, why in (("a\tb", "no control characters"), ("kv\n", "no control characters"), ("", "an empty tag")):
    try:
        with hbm.pool(bad):
            pass
        raise AssertionError("pool(%r) was not refused" % bad)
    except RuntimeError as e:
        assert why in str(e), str(e)
assert {p["tag"]: p["state"] for p in hbm.pools()} == {"weights": "awake", "kv_cache": "awake"}

steps = []
assert hbm.sleep(progress=lambda done, total: steps.append((done, total)), chunk_mb=16) == 2
assert steps and steps[-1][0] == steps[-1][1] == info["weights"]["live_bytes"], steps
free1, _ = hbm.mem_get_info(0)
assert free1 == free0 + reserved, (free0, free1, reserved)  # mem_get_info: the pools' pages are the device's again
info = {p["tag"]: p for p in hbm.pools()}
assert info["weights"]["state"] == info["kv_cache"]["state"] == "asleep", info
assert info["weights"]["reserved_bytes"] == 0 and info["weights"]["backup_bytes"] > 0
assert same(other, 9)  # the global allocator's tensors are untouched
# Entering a sleeping tag is refused with the way out; so is an allocation routed into it (use()).
try:
    with hbm.pool("weights", backup=True):
        raise AssertionError("entered a sleeping pool")
except RuntimeError as e:
    assert "is asleep: wake('weights')" in str(e), str(e)
if use_mode:
    lib.hbm_torch_pool_enter(b"kv_cache", 0, 0)
    assert not lib.hbm_torch_raw_alloc(MiB, 0, None)
    assert "('kv_cache') is asleep" in hbm._error(), hbm._error()
    lib.hbm_torch_pool_exit()
if use_mode:  # the other phase (hbmalloc's default pools here) uses the memory the sleep gave back
    big = Tensor(reserved - 4 * MiB)
    big.free()
    assert lib.hbm_torch_empty_cache() == 0

assert hbm.wake("weights") == 1
assert {p["tag"]: p["state"] for p in hbm.pools()} == {"weights": "awake", "kv_cache": "asleep"}
assert hbm.wake() == 2  # kv_cache; weights is awake already
assert [t.data_ptr() for t in w] + [kv.data_ptr()] == addrs  # every tensor where it was
for i, t in enumerate(w):
    assert same(t, i), "weights tensor %d lost its contents" % i
fill(kv, 6)  # the KV cache is usable again (its old contents undefined)
assert same(kv, 6)
assert hbm.mem_get_info(0)[0] == free0
for cycle in range(5):  # an RL loop: the pinned buffers are reused
    hbm.sleep("weights")
    hbm.wake("weights")
assert all(same(t, i) for i, t in enumerate(w))
p = {q["tag"]: q for q in hbm.pools()}["weights"]
assert p["sleeps"] == 6 and p["wakes"] == 6 and p["host_bytes"] >= p["live_bytes"], p

# A choice per sleep (issue #37 item 1): the KV cache (a discard tag) backed up this once, and kept; the weights (a
# backup tag) discarded this once (vLLM's level 2), then backed up but woken without the restore (RL weight sync: new
# weights are loaded right after); a bad choice refused before anything sleeps.
fill(kv, 7)
assert hbm.sleep("kv_cache", backup=True) == 1
p = {q["tag"]: q for q in hbm.pools()}["kv_cache"]
assert p["backup_bytes"] == p["live_bytes"] >= kv.n and not p["backup"], p
assert hbm.wake("kv_cache") == 1 and same(kv, 7)
assert hbm.sleep("weights", backup=False) == 1
p = {q["tag"]: q for q in hbm.pools()}["weights"]
assert p["state"] == "asleep" and p["backup_bytes"] == 0 and p["backup"], p
assert hbm.wake("weights") == 1
assert hbm.sleep("weights") == 1 and {q["tag"]: q for q in hbm.pools()}["weights"]["backup_bytes"] > 0
assert hbm.wake("weights", restore=False) == 1
p = {q["tag"]: q for q in hbm.pools()}["weights"]
assert p["state"] == "awake" and p["backup_bytes"] == 0, p
for i, t in enumerate(w):  # the new weights
    fill(t, i + 20)
try:
    hbm.sleep("weights", backup="yes")
    raise AssertionError("sleep(backup='yes') was not refused")
except ValueError as e:
    assert "None (as the tag was made), True or False" in str(e), str(e)
assert {q["tag"]: q["state"] for q in hbm.pools()} == {"weights": "awake", "kv_cache": "awake"}
assert hbm.sleep("weights") == 1 and hbm.wake("weights") == 1
assert all(same(t, i + 20) for i, t in enumerate(w))

# A backup in a file, with a checksum (issue #37 items 4, 5): through two pinned pieces of chunk_mb into a nameless
# file of the folder, back byte for byte; the pinned buffers kept are two pieces, not the backup. A folder that
# cannot hold the backup raises with the pool awake.
folder = tempfile.mkdtemp()
for cycle in range(2):
    assert hbm.sleep("weights", chunk_mb=2, checksum=True, backup_dir=folder) == 1
    p = {q["tag"]: q for q in hbm.pools()}["weights"]
    assert p["state"] == "asleep" and p["file_bytes"] == p["backup_bytes"] == p["live_bytes"], p
    assert p["host_bytes"] == 4 * MiB, p
    assert os.listdir(folder) == [], os.listdir(folder)
    assert hbm.wake("weights") == 1
    assert all(same(t, i + 20) for i, t in enumerate(w))
    assert {q["tag"]: q for q in hbm.pools()}["weights"]["file_bytes"] == 0
try:
    hbm.sleep("weights", backup_dir=os.path.join(folder, "missing"))
    raise AssertionError("a backup into a missing folder slept")
except RuntimeError as e:
    assert "no backup could be made (no backup file could be made in %s/missing" % folder in str(e), str(e)
    assert "the pool stays awake" in str(e), str(e)
assert {q["tag"]: q["state"] for q in hbm.pools()}["weights"] == "awake"
assert all(same(t, i + 20) for i, t in enumerate(w))
os.rmdir(folder)

# Collectives (issue #37 item 3): a tag pinned for a collective library refuses to sleep with the reason, on every
# device and nothing put to sleep, until unpinned; what the environment shows is refused or warned before anything.
hbm.pin("weights", "ncclCommRegister by the test")
try:
    hbm.sleep("weights")
    raise AssertionError("a pinned pool slept")
except RuntimeError as e:
    assert "pool 'weights' is pinned (hbm_pool_pin, 1 time): ncclCommRegister by the test" in str(e), str(e)
assert {q["tag"]: q["state"] for q in hbm.pools()} == {"weights": "awake", "kv_cache": "awake"}
hbm.unpin("weights")
try:
    hbm.unpin("weights")
    raise AssertionError("unpin of a pool not pinned")
except RuntimeError as e:
    assert "is not pinned" in str(e), str(e)
assert hbm.sleep("weights") == 1 and hbm.wake("weights") == 1
hook = {"TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "True"}
refuse, warn = hbm._collective_risks("w", hook, True, False, True)
assert len(refuse) == 1 and "ProcessGroupNCCL registers every segment" in refuse[0] and not warn, (refuse, warn)
assert hbm._collective_risks("w", hook, False, False, True) == ([], [])  # use(): torch's hook is not ours
assert hbm._collective_risks("w", dict(hook, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"), True, False,
                             True) == ([], [])  # ProcessGroupNCCL turns the hook off with expandable segments
assert hbm._collective_risks("w", {"TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK": "0"}, True, False, True) == ([], [])
refuse, warn = hbm._collective_risks("w", {}, False, True, True)
assert not refuse and len(warn) == 1 and "NCCL_GRAPH_REGISTER" in warn[0], (refuse, warn)
assert hbm._collective_risks("w", {"NCCL_GRAPH_REGISTER": "0"}, False, True, True) == ([], [])
assert hbm._collective_risks("w", {}, False, True, False) == ([], [])  # no NCCL in the process
if not use_mode:  # the environment's refusal, through sleep() itself
    os.environ["TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"] = "1"
    try:
        hbm.sleep("kv_cache")
        raise AssertionError("slept with torch's NCCL registration hook on")
    except RuntimeError as e:
        assert "sleep('kv_cache'): TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1" in str(e), str(e)
    del os.environ["TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"]
    assert {q["tag"]: q["state"] for q in hbm.pools()}["kv_cache"] == "awake"

# Tensors die; the pool is emptied through raw_delete (torch's release_block), so the pages go back to the device.
for t in w + [kv]:
    t.free()
other.free()
if not use_mode:
    hbm._mempools.clear()
    gc.collect()
    assert len(seen["raw_delete"]) == 4, seen["raw_delete"]
    assert lib.hbm_torch_empty_cache() == 0
    assert hbm.mem_get_info(0)[0] > free0

# What still holds memory (issue #37 item 2): the KV cache asleep, the weights left awake. resident() agrees with
# pools() and mem_get_info(), and its sentence names the awake pool and what the sleep gave back.
with hbm.pool("weights", backup=True):
    w = [Tensor(30 * MiB)]
with hbm.pool("kv_cache"):
    kv = Tensor(40 * MiB)
assert hbm.sleep("kv_cache") == 1
p = {q["tag"]: q for q in hbm.pools()}
(r,) = hbm.resident()
assert hbm.resident(0) == [r] and hbm.resident(5) == [], (r, hbm.resident(5))
free, total = hbm.mem_get_info(0)
assert r["device"] == 0 and r["device_total"] == total and r["device_used"] == total - free, r
assert r["outside"] == max(r["device_used"] - r["reserved"], 0), r
assert r["asleep_pools"] == 1 and r["asleep_bytes"] == p["kv_cache"]["asleep_bytes"] > 0 and r["asleep_reserved"] == 0
assert r["awake_pools"] == 1 and r["awake_reserved"] == p["weights"]["reserved_bytes"] > 0, r
assert r["awake_live"] == p["weights"]["live_bytes"] and r["awake_tags"].startswith("weights "), r
assert r["reserved"] == r["awake_reserved"] + r["graph_reserved"] + r["default_reserved"], r
assert r["text"].startswith("device 0: ") and "in 1 awake pool (weights " in r["text"], r["text"]
assert r["text"].endswith("; 1 pool asleep gave back %.2f MiB" % (r["asleep_bytes"] / MiB)), r["text"]
# Memory outside hbmalloc (issue #40 item 1): the 64 MiB of this process's own and the 128 MiB of another process's
# the simulated device holds beside hbmalloc, split by process where the runtime tells it (not on the NPU), and kept
# in the statistics' keys.
(o,) = hbm.outside()
assert hbm.outside(0) and hbm.outside(5) == [], hbm.outside(5)
assert o["device"] == 0 and o["outside"] == 192 * MiB == o["device_used"] - o["reserved"], o
if mode.startswith("npu"):
    assert o["process_outside"] is None and o["others"] is None, o
    assert o["text"].endswith("(the runtime does not tell it by process)"), o["text"]
else:
    assert o["process_outside"] == 64 * MiB and o["others"] == 128 * MiB, o
    assert "64.00 MiB by this process" in o["text"] and "128.00 MiB by other processes" in o["text"], o["text"]
flat = hbm.stats(0)
assert flat["outside_bytes"] == 192 * MiB and flat["device_used_bytes"] == o["device_used"], flat
assert flat["outside_others_bytes"] == (-1 if mode.startswith("npu") else 128 * MiB), flat
assert hbm.wake("kv_cache") == 1 and hbm.resident()[0]["asleep_pools"] == 0
for t in w + [kv]:
    t.free()
print("ok")
