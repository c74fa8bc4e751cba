"""What labelling allocations costs in the PyTorch plug-in: alloc + free pairs through ctypes (the GIL released
around the call, as torch's bindings release it around an op) on the simulated device, per mode:
  plain          history off
  history        the trace ring on, no labels
  label          hbmalloc_torch.label("step") around the loop (one interned string per allocation)
  stacks d=N     history with Python stacks (PyTorch's stacks="python"), the call made N frames deep
Prints the median ns per pair over the runs and the difference to "plain" in the same run.
usage: stack_capture.py LIB PLUGIN_DIR [PAIRS] [RUNS]"""
import os
import statistics
import sys
import time

lib_path, plugin_dir = sys.argv[1:3]
pairs = int(sys.argv[3]) if len(sys.argv) > 3 else 20000
runs = int(sys.argv[4]) if len(sys.argv) > 4 else 7
os.environ.setdefault("HBMALLOC_BACKEND", "sim:capacity=8GiB")
os.environ["HBMALLOC_CONF"] = ""
sys.path.insert(0, plugin_dir)
import hbmalloc_torch as h  # noqa: E402

lib = h.library(lib_path)
alloc, free = lib.hbm_torch_raw_alloc, lib.hbm_torch_free


def loop(n):
    for _ in range(n):
        p = alloc(4096, 0, None)
        free(p, 4096, 0, None)


def deep(depth, n):
    return deep(depth - 1, n) if depth > 1 else loop(n)


def setup(entries, stacks, category):
    def apply():
        h.record_history(entries, stacks=stacks)
        lib.hbm_torch_set_label(category)
    return apply


modes = [("plain", setup(0, False, None), lambda: loop(pairs)),
         ("history", setup(100000, False, None), lambda: loop(pairs)),
         ("history + label", setup(100000, False, b"step"), lambda: loop(pairs))]
for depth in (1, 10, 40):
    modes.append(("history + stacks d=%d" % (depth + 2), setup(100000, True, None),
                  (lambda d: lambda: deep(d, pairs))(depth)))
# Interleaved: every run measures every mode once, in a rotated order, so that a slow spell of this shared
# machine spreads over all modes instead of landing on one.
times = {name: [] for name, _, _ in modes}
for r in range(runs):
    for i in range(len(modes)):
        name, apply, fn = modes[(i + r) % len(modes)]
        apply()
        fn()  # warm the label and stack caches
        t0 = time.perf_counter_ns()
        fn()
        times[name].append((time.perf_counter_ns() - t0) / pairs)
setup(0, False, None)()
base = statistics.median(times["plain"])
print("%-24s %12s %14s" % ("mode", "ns / pair", "added ns"))
for name, _, _ in modes:
    ns = statistics.median(times[name])
    print("%-24s %12.0f %14.0f" % (name, ns, ns - base))
