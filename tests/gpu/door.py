#!/usr/bin/env python3
"""The PyTorch door on a real GPU, for scripts/gpu-check.sh: each promise of docs/PYTORCH.md checked inside torch.

    gpu_door.py native OUTDIR      PyTorch's own allocator: the memory_stats() key set, for comparison
    gpu_door.py hbmalloc OUTDIR    hbmalloc_torch.use(), then every check

Prints one JSON line per check: {"check", "ok", "detail"}. Runs in a fresh process (the allocator is chosen before
anything touches the GPU). HBMALLOC_TORCH_LIB names the plug-in (the c10 build when it was made)."""
import json
import os
import sys
import traceback


def report(check, ok, detail=""):
    print(json.dumps({"check": check, "ok": bool(ok), "detail": str(detail)[:400]}), flush=True)


def main():
    mode, outdir = sys.argv[1:3]
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "python"))
    if mode == "hbmalloc":
        import hbmalloc_torch
        hbmalloc_torch.use(os.environ.get("HBMALLOC_TORCH_LIB"))
        report("use", True, hbmalloc_torch.library().build)
    import torch
    dev = torch.device("cuda")
    x = torch.ones(1 << 20, device=dev)
    keys = sorted(torch.cuda.memory_stats())
    if mode == "native":
        with open(os.path.join(outdir, "native-keys.json"), "w") as f:
            json.dump(keys, f)
        report("native-keys", True, len(keys))
        return
    checks = [("oom", check_oom), ("memory_stats", check_stats), ("empty_cache", check_empty_cache),
              ("record_stream", check_record_stream), ("cuda_graph", check_graph), ("compile", check_compile),
              ("snapshot_frames", check_snapshot), ("history_defaults", check_history_defaults),
              ("context_after_empty_cache", check_context), ("accelerator", check_accelerator),
              ("waits_per_step", check_waits_per_step)]
    for name, fn in checks:
        try:
            ok, detail = fn(torch, hbmalloc_torch, outdir)
        except Exception as e:  # a check that breaks is reported, the next still runs
            ok, detail = False, "%s: %s | %s" % (type(e).__name__, e, traceback.format_exc(limit=2))
        report(name, ok, detail)
    del x


def check_oom(torch, h, outdir):
    free, total = torch.cuda.mem_get_info()
    try:
        torch.empty(total * 2, dtype=torch.uint8, device="cuda")
        return False, "no exception"
    except torch.cuda.OutOfMemoryError as e:
        kind, text = "torch.cuda.OutOfMemoryError", str(e)
    except RuntimeError as e:
        kind, text = "RuntimeError", str(e)
    # Training goes on: a few steps of a small model.
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(5):
        loss = model(torch.randn(64, 512, device="cuda")).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    ok = text.startswith("CUDA out of memory. Tried to allocate") and "\nhbmalloc:" in text and \
        torch.isfinite(loss).item() and (kind != "RuntimeError" or h.library().build == "generic")
    return ok, "%s; then 5 training steps, loss %.4f" % (kind, loss.item())


def check_stats(torch, h, outdir):
    native = json.load(open(os.path.join(outdir, "native-keys.json")))
    theirs = torch.cuda.memory_stats()
    mine = h.stats(torch.cuda.current_device())
    missing, extra = sorted(set(native) - set(theirs)), sorted(set(theirs) - set(native))
    wrong = [k for k, v in theirs.items() if k in mine and mine[k] != v]
    ok = not missing and not wrong and torch.cuda.memory_allocated() == mine["allocated_bytes.all.current"]
    return ok, "missing %s, extra %s, differing %s; max_memory_reserved %d" % (
        missing, extra, wrong[:5], torch.cuda.max_memory_reserved())


def check_empty_cache(torch, h, outdir):
    big = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    del big
    torch.cuda.synchronize()
    before = torch.cuda.mem_get_info()[0]
    torch.cuda.empty_cache()
    after = torch.cuda.mem_get_info()[0]
    return after - before >= (1 << 30), "free %d MiB -> %d MiB" % (before >> 20, after >> 20)


def check_record_stream(torch, h, outdir):
    side = torch.cuda.Stream()
    a = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    ptr = a.data_ptr()
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)  # keep the side stream busy (~1 s)
        a.add_(1)
    a.record_stream(side)
    del a
    # Freed but its event not complete: still active, no longer allocated (PyTorch's free_block decrements active;
    # hbmalloc makes active from allocation and the pending blocks when memory_stats() reads it, core/stats.c).
    s = torch.cuda.memory_stats()
    pending = s["active_bytes.all.current"] - s["allocated_bytes.all.current"]
    b = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    reused_early = b.data_ptr() == ptr
    peak_over = torch.cuda.memory_stats()["active_bytes.all.peak"] - torch.cuda.memory_allocated()
    side.synchronize()
    del b
    c = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    reused_after = c.data_ptr() == ptr
    s = torch.cuda.memory_stats()
    settled = s["active_bytes.all.current"] == s["allocated_bytes.all.current"]
    ok = not reused_early and pending == 64 << 20 and peak_over >= 64 << 20 and settled
    return ok, "reused while the stream ran: %s; after it finished: %s; active - allocated while pending: %d MiB, " \
        "active peak - allocated: %d MiB, equal once complete: %s" % (reused_early, reused_after, pending >> 20,
                                                                      peak_over >> 20, settled)


# hbm_device_counters (include/hbmalloc.h), field by field: what hbm_torch_device_counters fills.
_COUNTERS = ("malloc_calls", "free_calls", "info_calls", "map_calls", "unmap_calls", "vmm_calls", "sync_calls",
             "event_calls", "failed_calls", "device_ns", "host_calls", "copy_calls", "copy_bytes", "device_waits",
             "queue_events", "unrecorded_uses", "locked_queue_waits")


def device_counters(h, device):
    import ctypes

    class Counters(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in _COUNTERS]
    c = Counters()
    if h.library().hbm_torch_device_counters(device, ctypes.byref(c)) != 0:
        raise RuntimeError("no allocator on device %d yet" % device)
    return {n: getattr(c, n) for n in _COUNTERS}


def check_waits_per_step(torch, h, outdir):
    """Issue #35: device-wide waits (and stream or event synchronizations) per training step while 50 blocks a step
    are used by a side stream and freed with record_stream (prefetch, comm/compute overlap): none in steady state,
    as PyTorch's allocator, which records events for such frees (insert_events)."""
    side = torch.cuda.Stream()
    model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(4)]).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    dev = torch.cuda.current_device()
    waits, syncs = [], []
    for step in range(13):
        before = device_counters(h, dev)
        bufs = []
        for _ in range(50):
            b = torch.empty(1 << 20, device="cuda")
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                b.mul_(2)
            b.record_stream(side)
            bufs.append(b)
        loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        del bufs
        after = device_counters(h, dev)
        waits.append(after["device_waits"] - before["device_waits"])
        syncs.append(after["sync_calls"] - before["sync_calls"])
    torch.cuda.synchronize()
    ok = sum(waits[3:]) == 0 and sum(syncs[3:]) == 0
    return ok, "device-wide waits per step: %s; stream/event synchronizations per step: %s (3 warm-up steps)" % (
        waits, syncs)


def check_graph(torch, h, outdir):
    static_in = torch.zeros(1 << 20, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up, as torch.cuda.graph's docs ask
        for _ in range(3):
            static_out = static_in * 2 + 1
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tmp = static_in * 2
        static_out = tmp + 1
        del tmp  # freed inside the capture: stays in the graph's pool
    graph_pool = [p for p in h._pool_ids(0).values()]
    eager = [torch.empty(1 << 20, device="cuda") for _ in range(8)]  # must not land in the graph's memory
    snap = torch.cuda.memory._snapshot()
    in_pool = sum(1 for t in eager for seg in snap["segments"]
                  if seg["segment_pool_id"] in graph_pool and seg["address"] <= t.data_ptr() < seg["address"] +
                  seg["total_size"])
    results = []
    for v in (1.0, 5.0):
        static_in.fill_(v)
        g.replay()
        torch.cuda.synchronize()
        results.append(static_out[0].item())
    reserved = torch.cuda.memory_reserved()
    del static_out, eager
    g.reset()
    torch.cuda.empty_cache()
    freed = reserved - torch.cuda.memory_reserved()
    ok = results == [3.0, 11.0] and in_pool == 0 and freed > 0 and not h._pool_ids(0)
    return ok, "replays %s, eager tensors in the graph pool %d, released at reset %d MiB" % (results, in_pool,
                                                                                            freed >> 20)


def check_compile(torch, h, outdir):
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 1)).cuda()
    step = torch.compile(model)  # default mode: no CUDA graphs
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(5):
        loss = step(torch.randn(128, 256, device="cuda")).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return all(map(lambda v: v == v, losses)), "losses %s" % ["%.4f" % v for v in losses]


def check_snapshot(torch, h, outdir):
    torch.cuda.memory._record_memory_history(max_entries=10000)

    def make_activation():
        return torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    t = make_activation()
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._dump_snapshot(os.path.join(outdir, "door-snapshot.pickle"))
    torch.cuda.memory._record_memory_history(enabled=None)
    allocs = [e for e in snap["device_traces"][torch.cuda.current_device()] if e["action"] == "alloc"]
    names = [f["name"] for f in allocs[-1]["frames"]] if allocs else []
    del t
    return "make_activation" in names, "frames of the last alloc: %s" % names[:4]


def check_history_defaults(torch, h, outdir):
    """_record_memory_history() with torch's defaults (max_entries=sys.maxsize, memory.py): entries recorded."""
    torch.cuda.memory._record_memory_history()
    keep = [torch.empty(n << 20, dtype=torch.uint8, device="cuda") for n in (1, 2, 3)]
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    allocs = [e for e in snap["device_traces"][torch.cuda.current_device()] if e["action"] == "alloc"]
    del keep
    return len(allocs) >= 3, "%d alloc entries recorded" % len(allocs)


def check_context(torch, h, outdir):
    """The caller's CUDA context and device are the same after empty_cache() (hbmalloc's device guard restores them:
    docs/CONTRACTS.md, cuCtxGetCurrent / cuCtxSetCurrent)."""
    import ctypes
    cu = ctypes.CDLL("libcuda.so.1")
    get = cu.cuCtxGetCurrent
    get.argtypes = [ctypes.POINTER(ctypes.c_void_p)]

    def current():
        ctx = ctypes.c_void_p()
        rc = get(ctypes.byref(ctx))
        return rc, ctx.value

    t = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    del t
    before, dev = current(), torch.cuda.current_device()
    torch.cuda.empty_cache()
    h.empty_cache()
    after = current()
    x = torch.ones(16, device="cuda").sum().item()  # the next op runs where it should
    return before == after and torch.cuda.current_device() == dev and x == 16.0, \
        "context %s -> %s, device %d" % (before, after, dev)


def check_accelerator(torch, h, outdir):
    """torch.accelerator's memory API (2.8 and later) answers with hbmalloc's figures."""
    acc = getattr(torch, "accelerator", None)
    if acc is None or not hasattr(acc, "memory_allocated"):
        return True, "torch %s has no torch.accelerator memory API" % torch.__version__
    t = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    a, c = acc.memory_allocated(), torch.cuda.memory_allocated()
    del t
    return a == c > 0, "accelerator %d, cuda %d" % (a, c)


if __name__ == "__main__":
    main()
