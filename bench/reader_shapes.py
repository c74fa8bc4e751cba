#!/usr/bin/env python3
"""Inputs built to cost the trace readers time or memory (issues #15 and #28), for bench/readers.sh and, scaled
down, the fuzzers' seeds (fuzz/corpus/pickle, fuzz/corpus/trace). Standard library only.

usage: bench/reader_shapes.py OUTDIR [--scale S]   S = 1: the sizes of the issues (up to 10 MB); 0.006: seeds
under the fuzzers' 64 KiB
"""
import argparse
import os
import pickle
import struct


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)

    def n(count):
        return max(2, int(count * a.scale))

    def dump(name, obj):
        with open(os.path.join(a.out, name + ".pickle"), "wb") as f:
            pickle.dump(obj, f, protocol=4)

    def raw(name, data):
        with open(os.path.join(a.out, name), "wb") as f:
            f.write(data)

    # #15 item 2: memo references repeating a segment and its blocks (4e8 blocks if walked as copies).
    blk = {"size": 512, "requested_size": 512, "state": "active_allocated"}
    k = n(20000)
    seg = {"device": 0, "address": 1 << 30, "total_size": 512 * k, "stream": 0, "blocks": [blk] * k}
    dump("hostile-memo-repeats", {"segments": [seg] * k, "device_traces": [[]]})
    # #15 item 3: one dict of 50,000 keys shared by 200,000 events.
    big = {f"k{i}": i for i in range(n(50000))}
    big.update({"action": "segment_alloc", "addr": 4096, "size": 2 << 20, "stream": 0})
    dump("hostile-shared-dict", {"segments": [], "device_traces": [[big] * n(200000)]})

    # #28 item 10: every event a memo reference to one alloc or one free whose frame has a 16,000-character name
    # (417 KB; 56 s before): refused now, as memo references repeating events are.
    frame = {"name": "f" * 16000, "filename": "x.py", "line": 1}
    alloc = {"action": "alloc", "addr": 1 << 20, "size": 512, "stream": 0, "frames": [frame]}
    free = {"action": "free_completed", "addr": 1 << 20, "size": 512, "stream": 0, "frames": [frame]}
    dump("hostile-long-frame", {"segments": [], "device_traces": [[alloc, free] * n(100000)]})
    # The same frame under distinct allocations, each with a fresh frames list (as PyTorch pickles them): read,
    # one stack text built.
    ev = [{"action": "alloc", "addr": (1 << 20) + 512 * i, "size": 512, "stream": 0, "frames": [frame]}
          for i in range(n(20000))]
    dump("hostile-long-frame-allocs", {"segments": [], "device_traces": [ev]})
    # Distinct frames naming one long string (their lines differ): every stack distinct; the text built is bounded.
    name = "g" * 16000
    ev = [{"action": "alloc", "addr": (1 << 20) + 512 * i, "size": 512, "stream": 0,
           "frames": [{"name": name, "filename": "y.py", "line": i}]} for i in range(n(20000))]
    dump("hostile-distinct-frames", {"segments": [], "device_traces": [ev]})

    # #28 item 11: memory per byte.
    size = n(10 ** 7)
    raw("hostile-nested-tuple1.pickle", b"\x80\x04N" + b"\x85" * size + b".")
    raw("hostile-empty-lists.pickle", b"\x80\x04" + b"]" * size + b".")
    # A memo index far past the values: LONG_BINPUT sizes the memo table by it.
    idx = size + 8
    raw("hostile-memo-index.pickle", b"\x80\x04N" + b"r" + struct.pack("<I", idx) + b"X" + struct.pack("<I", size)
        + b"s" * size + b".")
    a2 = {"action": "alloc", "addr": 1 << 20, "size": 512, "stream": 0}
    f2 = {"action": "free_completed", "addr": 1 << 20, "size": 512, "stream": 0}
    dump("hostile-memo-events", {"segments": [], "device_traces": [[a2, f2] * n(2000000)]})
    raw("hostile-lifetimes.csv", b"id,lower,upper,size\n" + b",0,1,1\n" * n(10 ** 6))
    raw("hostile-allocs.trace", b"".join(b"a %d 1\n" % i for i in range(n(10 ** 6))))
    raw("hostile-empty-cache.trace", b"e\n" * n(5 * 10 ** 6))

    # #28 item 14: line ends and a byte order mark (read, never dropped).
    lines = n(10 ** 5)
    raw("cr-only.trace", b"".join(b"a %d 512\rf %d\r" % (i, i) for i in range(lines)))
    raw("bom.trace", b"\xef\xbb\xbf" + b"".join(b"a %d 512\r\nf %d\r\n" % (i, i) for i in range(lines)))
    raw("bom-cr-lifetimes.csv", b"\xef\xbb\xbfid,lower,upper,size\r" +
        b"".join(b"%d,%d,%d,512\r" % (i, i, i + 2) for i in range(lines)))


if __name__ == "__main__":
    main()
