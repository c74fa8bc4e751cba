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
A pool's sleep and wake (hbmalloc's snapshots: `sleep` / `wake` entries, one per
run of pages, with the pool's `tag` and `backup`) -> `z` / `w` of pool 0, the runs
of one sleep together: the snapshot does not say which pool each allocation went
to, so they are drawn by `hbmalloc view`, not replayed (docs/TRACE_FORMAT.md).
"""
import argparse
import hashlib
import pickle
import sys


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name}: not a plain snapshot")


def tag_word(tag):
    """A tag as the text format writes it: '-' when not known, else its UTF-8 bytes with blanks, '#', '%', controls
    and non-ASCII as %XX."""
    if tag is None:
        return "-"
    return "".join(chr(b) if 0x21 <= b <= 0x7e and b not in b"#%" else "%%%02X" % b for b in tag.encode()) or "-"


def nap_line(key, size):
    act, tag, backup = key
    return f"{'z' if act == 'sleep' else 'w'} 0 {size} {tag_word(tag)}{' backup' if backup else ''}\n"


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
    nap = None  # the sleep or wake being written: its runs follow one another
    for k, e in enumerate(events):
        act = e["action"]
        if act in ("sleep", "wake"):
            key = (act, e.get("tag"), bool(e.get("backup")))
            if nap and nap[0] == key and nap[2] == k - 1:
                nap[1] += e["size"]
                nap[2] = k
                continue
            if nap:
                out.write(nap_line(*nap[:2]))
            nap = [key, e["size"], k]
            continue
        if nap:
            out.write(nap_line(*nap[:2]))
            nap = None
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
    if nap:
        out.write(nap_line(*nap[:2]))
    out.close()
    print(f"{args.output}: {len(pre)} pre-existing blocks, {next_id} allocations, {skipped} unknown frees skipped",
          file=sys.stderr)


if __name__ == "__main__":
    main()
