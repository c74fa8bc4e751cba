#!/usr/bin/python3
"""hbmalloc view of several ranks' snapshots (-o OUT.svg / OUT.png): columns side by side on one scale.

usage: tests/python/view_ranks.py HBMALLOC SOURCE_DIR OUT_DIR

Three ranks' snapshots, written by `hbmalloc replay --snapshot` from the first 1000 and 2000 lines of a bundled trace
(examples/cs336-lm-ctx512-forward.trace: a Transformer LM's forward pass): ranks 0 and 1 at the same point, rank 2
further on, holding more. The picture is checked as a person looks at it: rendered by rsvg-convert, each column's
reserved ink (its fill and stroke) measured in pixels. The column of the larger rank is the taller, each column's
height is its peak on the one axis (the same pixels per byte for every column), equal ranks are equally tall, and
each is labelled by the rank its file name gives, in the order given. Exit status: the number of failed checks.
"""
import os
import subprocess
import sys
import xml.dom.minidom

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import png_ink  # noqa: E402
from checks import check, failed  # noqa: E402  (tests/python/checks.py)

BIN, SRC, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(OUT, exist_ok=True)


def run(*args):
    r = subprocess.run([BIN] + list(args), capture_output=True, text=True)
    if r.returncode != 0:
        print(r.stdout + r.stderr)
    return r


trace = os.path.join(SRC, "examples", "cs336-lm-ctx512-forward.trace")
lines = open(trace).read().splitlines(True)
snaps, peaks = [], []
for rank, n in ((0, 1000), (1, 1000), (2, 2000)):
    part = os.path.join(OUT, "part%d.trace" % rank)
    with open(part, "w") as f:
        f.writelines(lines[:n])
    snap = os.path.join(OUT, "snap_rank%d.pickle" % rank)
    r = run("replay", part, "--conf", "", "--snapshot", snap)
    check("snapshot_rank%d" % rank, r.returncode == 0 and os.path.exists(snap), r.stderr)
    snaps.append(snap)
# The peaks the view must draw: each snapshot replayed alone (the recording's settings, its start).
for snap in snaps:
    r = run("replay", snap)
    peak = [l for l in r.stdout.splitlines() if l.startswith("peak reserved:")]
    peaks.append(int(peak[0].split("(")[1].split()[0]) if peak else 0)
check("rank2_holds_more", peaks[2] > 1.2 * peaks[0] and peaks[0] == peaks[1], str(peaks))

svg, png = os.path.join(OUT, "ranks.svg"), os.path.join(OUT, "ranks.png")
r = run("view", *snaps, "-o", svg)
check("view_svg", r.returncode == 0 and "wrote" in r.stdout, r.stderr)
r = run("view", *snaps, "-o", png)
check("view_png", r.returncode == 0, r.stderr)

doc = xml.dom.minidom.parse(svg)
root = doc.documentElement
cols = [g for g in doc.getElementsByTagName("g") if g.getAttribute("class") == "rank"]
check("three_columns", len(cols) == 3, "%d" % len(cols))
ranks = [int(g.getAttribute("data-rank")) for g in cols]
check("columns_in_the_order_given", ranks == [0, 1, 2], str(ranks))
labels = [t.firstChild.data for t in doc.getElementsByTagName("text") if t.getAttribute("class") == "ranklabel"]
check("labelled_by_rank", labels == ["rank 0", "rank 1", "rank 2"], str(labels))
drawn = [int(g.getAttribute("data-peak-reserved")) for g in cols]
check("peaks_are_the_replays", drawn == peaks, "%s against %s" % (drawn, peaks))
x = [(float(g.getAttribute("data-x0")), float(g.getAttribute("data-x1"))) for g in cols]
check("side_by_side", all(a[1] < b[0] for a, b in zip(x, x[1:])) and len({round(b - a) for a, b in x}) == 1, str(x))
outl = [g.getAttribute("data-rank") for g in cols
        if any(t.getAttribute("class") == "outlier" for t in g.getElementsByTagName("text"))]
check("the_larger_rank_is_marked", outl == ["2"], str(outl))

# The picture as rendered: per column, the topmost row of reserved ink (its fill #f6c3b5 or stroke #e4572e: red well
# above blue), against the plot's bottom.
w, h, bpp, rows = png_ink.decode(png)
top, bottom, ymax = float(root.getAttribute("data-plot-top")), float(root.getAttribute("data-plot-bottom")), \
    float(root.getAttribute("data-ymax"))


def reddish(line, px):
    r, g, b = line[px * bpp], line[px * bpp + 1], line[px * bpp + 2]
    return r > 180 and r - b > 40 and r - g > 30


heights = []
for x0, x1 in x:
    first = None
    for y in range(int(top) - 2, int(bottom) + 1):
        if any(reddish(rows[y], px) for px in range(int(x0) + 2, int(x1) - 1)):
            first = y
            break
    heights.append(bottom - first if first is not None else 0)
check("the_larger_rank_is_the_taller_column", heights[2] == max(heights) and heights[2] > 1.2 * heights[0],
      str(heights))
check("equal_ranks_equally_tall", abs(heights[0] - heights[1]) <= 1, str(heights))
# One scale: every column's height is its peak in the axis's pixels per byte (within 3 pixels: strokes, rounding).
want = [p / ymax * (bottom - top) for p in peaks]
check("one_scale_for_all", all(abs(a - b) <= 3 for a, b in zip(heights, want)),
      "heights %s, peaks on the axis %s" % (heights, [round(v, 1) for v in want]))

# Several settings of one trace stay a page (.html): only several files are ranks.
r = run("view", snaps[0], "--conf", "", "--conf", "expandable_segments:True", "-o", os.path.join(OUT, "ab.svg"))
check("settings_apart_need_a_page", r.returncode == 2 and "drawn as a page" in r.stderr, r.stderr)

print("view_ranks: %d failed" % failed())
sys.exit(failed())
