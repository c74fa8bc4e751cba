#!/usr/bin/env python3
"""Make a training run of a one-step trace: the blocks live before the recording began (the first N allocations,
as tools/trace/snapshot2trace.py writes them and its header says) are allocated once and kept, as a model's parameters
and optimizer state are; the rest of the trace is one step, repeated --times times, each copy's blocks under fresh
ids, every block of a copy still live at its end freed there (a step's transient tensors do not outlive it), and an
`s` line at each step's end (hbm_step). The steady state of a policy that learns the step (hbm_step_plan) is then
the last step of the replay. Streams are kept.
usage: repeat_trace.py TRACE --times K > OUT"""
import argparse
import re
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--times", type=int, required=True)
    o = ap.parse_args()
    if o.times < 1:
        sys.exit("repeat_trace: --times must be 1 or more")
    persistent, events = 0, []
    for line in open(o.trace):
        m = re.match(r"# (\d+) blocks live before recording began come first", line)
        if m:
            persistent = int(m.group(1))
        f = line.split("#")[0].split()
        if not f or f[0] == "hbmtrace":
            continue
        if f[0] not in ("a", "f"):
            sys.exit("repeat_trace: only a and f lines are repeated, not %r" % line.strip())
        events.append(f)
    out = ["hbmtrace 1", "# %s: %d kept blocks, then its step %d times (tools/trace/repeat_trace.py)"
           % (o.trace.split("/")[-1], persistent, o.times)]
    nalloc, i = 0, 0
    while i < len(events) and nalloc < persistent:  # the kept blocks: the first `persistent` allocations
        if events[i][0] == "a":
            nalloc += 1
        out.append(" ".join(events[i]))
        i += 1
    kept = {e[1] for e in events[:i] if e[0] == "a"}
    step = events[i:]
    fresh = 1 << 40  # ids of the copies' blocks: above any id of the trace
    for c in range(o.times):
        live = {}
        for e in step:
            if e[0] == "a":
                new = str(fresh)
                fresh += 1
                live[e[1]] = new
                out.append("a %s %s" % (new, " ".join(e[2:])))
            elif e[1] in live:
                out.append("f %s" % live.pop(e[1]))
            elif e[1] in kept:
                if c == 0:  # a kept block freed by the step: freed once, in the first copy
                    out.append("f %s" % e[1])
            else:
                sys.exit("repeat_trace: a free of block %s, which the trace never allocated" % e[1])
        for new in live.values():  # the step's transient blocks end with it
            out.append("f %s" % new)
        out.append("s")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
