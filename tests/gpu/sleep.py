#!/usr/bin/env python3
"""Pools that sleep and wake on a real GPU, for scripts/gpu-check.sh (docs/SLEEP.md).

    gpu_sleep.py OUTDIR [BACKUP_GIB DISCARD_GIB CYCLES]      (defaults 4 8 20)

A backup pool ("weights": BACKUP_GIB of tensors of mixed sizes) and a discard pool ("kv_cache": DISCARD_GIB) made
with hbmalloc.torch.pool(), beside a training loop on torch's own allocator (pool() through torch.cuda.MemPool:
torch 2.8 and later; with an older torch the script says so and runs under use(), the loop then on hbmalloc's
default pools). A CUDA graph captured before the first sleep reads the weights. Then CYCLES times: sleep each pool
(timed, apart), train a few steps in the memory the sleep gave back, wake each (timed), check that
torch.cuda.mem_get_info() rose and fell by the pools' pages, that every weights tensor kept its address and its
contents (a fingerprint every cycle, every byte at the end against a host copy), and that the graph replays to the
same output. Then three sleeps of the weights to a file with the checksum on (HBM_SLEEP_FILE_DIR, else the temporary
folder), contents checked after each wake. Then a plain copy of the same bytes between one device tensor and pinned
host memory, each way, as the
yardstick: the summary gives each pool's sleep and wake in GiB/s and a backup's as a share of that copy. Prints JSON
lines (one per cycle, then the summary) and writes OUTDIR/sleep.md.
Must run in a fresh process: the mode is chosen before anything touches the GPU.
"""
import json
import os
import re
import statistics
import sys
import tempfile
import time


def main():
    outdir = sys.argv[1]
    backup_gib, discard_gib, cycles = (int(x) for x in (sys.argv[2:5] + ["4", "8", "20"][len(sys.argv[2:5]):]))
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(here, "..", "..", "python"))
    os.environ.setdefault("HBMALLOC_BACKEND", "cuda")
    import torch
    import hbmalloc.torch as hbm
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    mempool = m and (int(m.group(1)), int(m.group(2))) >= hbm.MIN_TORCH_MEMPOOL
    if not mempool:
        hbm.use(os.environ.get("HBMALLOC_TORCH_LIB"))
    else:
        hbm.library(os.environ.get("HBMALLOC_TORCH_LIB"), "cuda")
    dev = torch.device("cuda")
    GiB, MiB = 1 << 30, 1 << 20
    torch.manual_seed(0)

    # Weights: tensors of mixed sizes (many small ones too: a caching allocator's case), contents random.
    sizes, total = [], 0
    pattern = [64 * MiB, 16 * MiB, 4 * MiB, 1 * MiB, 256 * 1024, 8192]
    i = 0
    while total < backup_gib * GiB:
        n = pattern[i % len(pattern)]
        sizes.append(n)
        total += n
        i += 1
    with hbm.pool("weights", backup=True):
        weights = [torch.randint(-2**31, 2**31 - 1, (n // 4,), dtype=torch.int32, device=dev) for n in sizes]
    with hbm.pool("kv_cache"):
        kv = [torch.empty(GiB // 2, dtype=torch.uint8, device=dev) for _ in range(2 * discard_gib)]
    torch.cuda.synchronize()
    host_copy = [w.cpu() for w in weights]
    addrs = [w.data_ptr() for w in weights]

    def fingerprint():
        return [int(w.sum(dtype=torch.int64)) for w in weights]
    prints = fingerprint()

    # A graph that reads the weights, captured before the first sleep (its own memory in torch's graph pool, or,
    # under use(), in a pool tagged "cuda_graph" that sleeps too).
    static_a, static_b = weights[0], weights[1]
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            y = (static_a[:4096].float() * 2 + static_b[:4096].float()).sum()
    torch.cuda.current_stream().wait_stream(s)
    if mempool:
        with torch.cuda.graph(g):
            y = (static_a[:4096].float() * 2 + static_b[:4096].float()).sum()
    else:
        with hbm.pool("cuda_graph"):
            with torch.cuda.graph(g):
                y = (static_a[:4096].float() * 2 + static_b[:4096].float()).sum()
    g.replay()
    torch.cuda.synchronize()
    y_ref = float(y)

    # The other phase: a small transformer trained on torch's allocator (or hbmalloc's default pools).
    layer = torch.nn.TransformerEncoderLayer(1024, 16, 4096, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def train(steps):
        for _ in range(steps):
            xb = torch.randn(16, 512, 1024, device=dev)
            loss = model(xb).float().pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()

    train(2)
    rows = []
    ok = True
    for cycle in range(cycles):
        free0, _ = torch.cuda.mem_get_info()
        t = {}
        for tag in ("weights", "kv_cache"):
            t0 = time.perf_counter()
            hbm.sleep(tag)
            t["sleep_" + tag] = time.perf_counter() - t0
        free1, _ = torch.cuda.mem_get_info()
        # The memory the sleep gave back is the other phase's: a block of most of it, then training.
        gained = free1 - free0
        big = torch.empty(max(gained - 2 * GiB, GiB), dtype=torch.uint8, device=dev)
        big.fill_(1)
        del big
        if mempool:
            torch.cuda.empty_cache()  # torch's own cache back to the device, for the wake
        train(3)
        if not mempool:
            torch.cuda.empty_cache()
        for tag in ("weights", "kv_cache"):
            t0 = time.perf_counter()
            hbm.wake(tag)
            t["wake_" + tag] = time.perf_counter() - t0
        free2, _ = torch.cuda.mem_get_info()
        same_addr = [w.data_ptr() for w in weights] == addrs
        same_data = fingerprint() == prints
        g.replay()
        torch.cuda.synchronize()
        graph_ok = abs(float(y) - y_ref) <= 1e-3 * max(1.0, abs(y_ref))
        for k in kv:  # the KV cache is usable again at its addresses
            k.fill_(cycle & 0xff)
        torch.cuda.synchronize()
        pools = {p["tag"]: p for p in hbm.pools()}
        row = {"cycle": cycle, "free_before": free0, "free_asleep": free1, "free_after": free2,
               "gained_gib": gained / GiB, "same_addresses": same_addr, "same_contents": same_data,
               "graph_replays": graph_ok, **{k: round(v, 6) for k, v in t.items()},
               "sleep_calls": {k: p["sleep_calls"] for k, p in pools.items()},
               "wake_calls": {k: p["wake_calls"] for k, p in pools.items()},
               "pages_gib": {k: (p["reserved_bytes"]) / GiB for k, p in pools.items()}}
        ok &= same_addr and same_data and graph_ok and gained >= (backup_gib + discard_gib) * GiB * 0.99
        rows.append(row)
        print(json.dumps(row), flush=True)
    every_byte = all(torch.equal(w.cpu(), h) for w, h in zip(weights, host_copy))
    ok &= every_byte

    # A backup in a file with its checksum (issue #37 items 4, 5): two pinned pieces, the disk's speed
    # (HBM_SLEEP_FILE_DIR names the folder; the default temporary one otherwise). Contents checked after each wake.
    folder = tempfile.mkdtemp(dir=os.environ.get("HBM_SLEEP_FILE_DIR") or None)
    file_times, file_ok = [], True
    for _ in range(3):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        hbm.sleep("weights", backup_dir=folder, checksum=True)
        t1 = time.perf_counter()
        hbm.wake("weights")
        file_times.append((t1 - t0, time.perf_counter() - t1))
        file_ok &= all(torch.equal(w.cpu(), h) for w, h in zip(weights, host_copy))
    os.rmdir(folder)
    ok &= file_ok

    # The yardstick, in this run: a plain copy of the same bytes between one device tensor and pinned host memory
    # (issue #37 item 4: a backup sleep and wake should reach 80% of it; torch_memory_saver's issue #111: about 10%).
    nbytes = sum(sizes)
    dbuf = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    hbuf = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)

    def timed(fn):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        return time.perf_counter() - t0
    d2h = statistics.median(timed(lambda: hbuf.copy_(dbuf, non_blocking=True)) for _ in range(5))
    h2d = statistics.median(timed(lambda: dbuf.copy_(hbuf, non_blocking=True)) for _ in range(5))
    del dbuf, hbuf

    def per_gib(key, gib):
        vals = [r[key] for r in rows[1:]] or [rows[0][key]]  # the first sleep also pins the host buffers
        return statistics.median(vals) / gib
    summary = {
        "mode": "torch.cuda.MemPool (torch's own allocator global)" if mempool else "use() (torch %s < 2.8)" %
                torch.__version__,
        "torch": torch.__version__, "gpu": torch.cuda.get_device_name(0), "cycles": cycles,
        "backup_gib": backup_gib, "discard_gib": discard_gib,
        "sleep_s_per_gib_backup": per_gib("sleep_weights", backup_gib),
        "wake_s_per_gib_backup": per_gib("wake_weights", backup_gib),
        "sleep_s_per_gib_discard": per_gib("sleep_kv_cache", discard_gib),
        "wake_s_per_gib_discard": per_gib("wake_kv_cache", discard_gib),
        "first_sleep_s_backup": rows[0]["sleep_weights"],
        "pinned_copy_gib_s": {"d2h": nbytes / GiB / d2h, "h2d": nbytes / GiB / h2d},
        "sleep_calls": rows[-1]["sleep_calls"], "wake_calls": rows[-1]["wake_calls"],
        "gained_gib_min": min(r["gained_gib"] for r in rows), "every_byte_at_the_end": every_byte,
        "file_sleep_gib_s": backup_gib / statistics.median(t[0] for t in file_times),
        "file_wake_gib_s": backup_gib / statistics.median(t[1] for t in file_times), "file_contents_ok": file_ok,
        "ok": ok}
    summary["backup_sleep_gib_s"] = 1 / summary["sleep_s_per_gib_backup"]
    summary["backup_wake_gib_s"] = 1 / summary["wake_s_per_gib_backup"]
    summary["backup_sleep_of_pinned_copy"] = summary["backup_sleep_gib_s"] / summary["pinned_copy_gib_s"]["d2h"]
    summary["backup_wake_of_pinned_copy"] = summary["backup_wake_gib_s"] / summary["pinned_copy_gib_s"]["h2d"]
    summary["discard_sleep_gib_s"] = 1 / summary["sleep_s_per_gib_discard"]
    summary["discard_wake_gib_s"] = 1 / summary["wake_s_per_gib_discard"]
    print(json.dumps(summary), flush=True)
    lines = ["| pool | GiB | sleep s/GiB | wake s/GiB | device calls to sleep / wake |", "|---|---|---|---|---|",
             "| weights (backup) | %d | %.4f | %.4f | %s / %s |" % (
                 backup_gib, summary["sleep_s_per_gib_backup"], summary["wake_s_per_gib_backup"],
                 summary["sleep_calls"].get("weights"), summary["wake_calls"].get("weights")),
             "| kv_cache (discard) | %d | %.4f | %.4f | %s / %s |" % (
                 discard_gib, summary["sleep_s_per_gib_discard"], summary["wake_s_per_gib_discard"],
                 summary["sleep_calls"].get("kv_cache"), summary["wake_calls"].get("kv_cache")),
             "", "GiB/s: backup sleep %.1f (%.0f%% of a pinned device-to-host copy of the same bytes, %.1f GiB/s), "
             "backup wake %.1f (%.0f%% of host-to-device, %.1f GiB/s); discard sleep %.1f, discard wake %.1f "
             "(goal: a backup at 80%% or more of the pinned copy)" % (
                 summary["backup_sleep_gib_s"], 100 * summary["backup_sleep_of_pinned_copy"],
                 summary["pinned_copy_gib_s"]["d2h"], summary["backup_wake_gib_s"],
                 100 * summary["backup_wake_of_pinned_copy"], summary["pinned_copy_gib_s"]["h2d"],
                 summary["discard_sleep_gib_s"], summary["discard_wake_gib_s"]),
             "", "backup in a file (checksum on, %s): sleep %.2f GiB/s, wake %.2f GiB/s, contents %s" % (
                 os.environ.get("HBM_SLEEP_FILE_DIR") or tempfile.gettempdir(), summary["file_sleep_gib_s"],
                 summary["file_wake_gib_s"], "ok" if file_ok else "CHANGED"),
             "", "mode: %s; %s; first backup sleep %.3f s (pins the host buffers); mem_get_info rose by at least "
             "%.2f GiB at every sleep; addresses, contents (every byte at the end: %s) and the graph's replay: %s" % (
                 summary["mode"], summary["gpu"], summary["first_sleep_s_backup"], summary["gained_gib_min"],
                 "yes" if every_byte else "NO", "ok" if ok else "FAILED")]
    with open(os.path.join(outdir, "sleep.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
