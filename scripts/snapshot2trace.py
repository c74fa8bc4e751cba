#!/usr/bin/env python3
"""Convert a PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot)
into hbmalloc's text trace format (docs/TRACE_FORMAT.md).

Uses only the standard library and refuses any pickle that names a global
(class or function), so loading cannot run code. The C importer of the traces
issue will replace this script; it exists to produce the bundled examples.

Replay order: `alloc` -> `a`, `free_completed` -> `f`, and a `free_requested`
that its `free_completed` does not follow at once (the block had record_stream
uses) -> `p` (a pending free, completed by the `f`). Blocks that were live
before recording started (they sit in the snapshot's segments but have no
alloc event) are allocated first, so the replay sees the same live memory.
Frees of addresses the trace never allocated are skipped and counted.
"""
import argparse
import hashlib
import pickle
import sys


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name}: not a plain snapshot")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("snapshot")
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--origin", default="", help="text for the header comment")
    args = ap.parse_args()

    raw = open(args.snapshot, "rb").read()
    snap = SafeUnpickler(__import__("io").BytesIO(raw)).load()
    if isinstance(snap, list):
        snap = {"segments": snap, "device_traces": []}
    traces = snap.get("device_traces") or []
    events = traces[args.device] if args.device < len(traces) else []

    # Which addresses are live at the end according to the trace alone.
    live = {}
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_completed":
            live.pop(e["addr"], None)
    pre = []
    for seg in snap.get("segments", []):
        if seg.get("device", 0) != args.device:
            continue
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] == "active_allocated" and addr not in live:
                pre.append((addr, b.get("requested_size", b["size"]) or b["size"], seg.get("stream", 0)))
            addr += b["size"]

    out = open(args.output, "w")
    out.write("hbmtrace 1\n")
    out.write(f"# converted from {args.snapshot.split('/')[-1]} (sha256 {hashlib.sha256(raw).hexdigest()[:16]})\n")
    if args.origin:
        out.write(f"# origin: {args.origin}\n")
    out.write(f"# {len(pre)} blocks live before recording began come first\n")
    next_id = 0
    ids = {}
    for addr, size, stream in pre:
        ids[addr] = next_id
        out.write(f"a {next_id} {size} {stream}\n")
        next_id += 1
    skipped = 0
    for k, e in enumerate(events):
        act = e["action"]
        if act == "alloc":
            ids[e["addr"]] = next_id
            out.write(f"a {next_id} {e['size']} {e.get('stream', 0)}\n")
            next_id += 1
        elif act == "free_requested":
            nxt = events[k + 1] if k + 1 < len(events) else None
            if e["addr"] in ids and not (nxt and nxt["action"] == "free_completed" and nxt["addr"] == e["addr"]):
                out.write(f"p {ids[e['addr']]}\n")
        elif act == "free_completed":
            i = ids.pop(e["addr"], None)
            if i is None:
                skipped += 1
                continue
            out.write(f"f {i}\n")
    out.close()
    print(f"{args.output}: {len(pre)} pre-existing blocks, {next_id} allocations, {skipped} unknown frees skipped",
          file=sys.stderr)


if __name__ == "__main__":
    main()
