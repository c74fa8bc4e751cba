#!/usr/bin/env python3
"""Convert a tensor-lifetime CSV (id,lower,upper,size[,offset]: a static memory-planning
problem, as in ../shared/traces/lifetimes) into hbmalloc's text trace format.

Each tensor is allocated at time `lower` and freed at `upper` (taken as exclusive:
[lower, upper)); at equal times frees come before allocations, and ties keep file order.
Rows with size 0 are skipped (the allocator returns no memory for them).
"""
import argparse
import csv
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    rows = []
    with open(a.csv, newline="") as f:
        r = csv.DictReader(f)
        for line, row in enumerate(r, start=2):
            try:
                rows.append((int(row["id"]), int(row["lower"]), int(row["upper"]), int(row["size"])))
            except (KeyError, ValueError) as e:
                sys.exit(f"{a.csv}:{line}: bad row ({e})")
    events = []
    for n, (tid, lo, hi, size) in enumerate(rows):
        if size <= 0:
            continue
        if hi <= lo:
            hi = lo + 1
        events.append((lo, 1, n, "a", n, size))
        events.append((hi, 0, n, "f", n, 0))
    events.sort()
    with open(a.output, "w") as out:
        out.write("hbmtrace 1\n")
        out.write(f"# converted from {a.csv.split('/')[-1]}: alloc at lower, free at upper\n")
        for _, _, _, kind, i, size in events:
            out.write(f"a {i} {size}\n" if kind == "a" else f"f {i}\n")


if __name__ == "__main__":
    main()
