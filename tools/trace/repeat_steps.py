#!/usr/bin/env python3
"""Lengthen a training trace by repeating its last whole step: the trace is cut after `from + k*period`
allocations (k as large as fits) and the step [cut - period, cut) is appended `--times` times, each copy's blocks
under fresh ids, a free of a block the step before allocated naming that step's copy. With `--mark` an `s` line
goes at every step boundary. The period and start come from `hbmalloc replay TRACE --steps auto`.
usage: repeat_steps.py TRACE --from N --period P --times K [--mark] > OUT"""
import argparse
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--from", dest="start", type=int, required=True)
    ap.add_argument("--period", type=int, required=True)
    ap.add_argument("--times", type=int, required=True)
    ap.add_argument("--mark", action="store_true")
    o = ap.parse_args()
    events = []  # (kind, id, size)
    for line in open(o.trace):
        f = line.split("#")[0].split()
        if not f or f[0] not in ("a", "f"):  # the header; steps, empty_cache and pending frees are not repeated
            continue
        events.append((f[0], int(f[1]) if len(f) > 1 else 0, int(f[2]) if len(f) > 2 else 0))
    nalloc = sum(e[0] == "a" for e in events)
    steps = (nalloc - o.start) // o.period
    if steps < 1:
        sys.exit("repeat_steps: no whole step of %d allocations after allocation %d" % (o.period, o.start))
    cut = o.start + steps * o.period
    first = cut - o.period  # the step to repeat: allocations [first, cut)
    out, k, live = [], 0, {}  # live: id -> allocation index
    step_events = []  # (kind, relative allocation index of the block, size)
    for kind, bid, size in events:
        if kind == "a":
            if k == cut:
                break
            if o.mark and k >= o.start and (k - o.start) % o.period == 0 and k:
                out.append("s")
            live[bid] = k
            k += 1
        if kind == "e":
            continue
        if k > first or (kind == "a" and k - 1 >= first):
            rel = (live[bid] - first) if kind == "f" else k - 1 - first
            if kind == "f" and rel < -o.period:
                sys.exit("repeat_steps: a free in the repeated step of a block older than the step before it")
            step_events.append((kind, rel, size))
        out.append("a %d %d" % (bid, size) if kind == "a" else "f %d" % bid)
        if kind == "f":
            del live[bid]
    # The original ids of the blocks the last step allocated and that are still live: the first copy frees them.
    last_ids = {idx - first: bid for bid, idx in live.items() if idx >= first}
    base = 1 << 40
    for c in range(o.times):
        if o.mark:
            out.append("s")
        for kind, rel, size in step_events:
            if kind == "a":
                out.append("a %d %d" % (base + c * o.period + rel, size))
            elif rel >= 0:
                out.append("f %d" % (base + c * o.period + rel))
            elif c == 0:
                out.append("f %d" % last_ids[rel + o.period])
            else:
                out.append("f %d" % (base + (c - 1) * o.period + rel + o.period))
    print("hbmtrace 1")
    print("# %s cut after %d allocations, its last step (%d allocations) repeated %d times (tools/trace/repeat_steps.py)"
          % (o.trace, cut, o.period, o.times))
    print("\n".join(out))


main()
