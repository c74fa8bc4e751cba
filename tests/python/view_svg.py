#!/usr/bin/python3
"""hbmalloc view's static picture (-o OUT.svg): round ticks and the map's scale and figures.

usage: tests/python/view_svg.py HBMALLOC SOURCE_DIR OUT_DIR

For the bundled traces, a PyTorch snapshot begun mid-run and an out-of-memory run: the byte axis steps by 2^k
bytes from "0" to the first tick at or above peak reserved, each label a whole number of one binary unit; the event
axis steps by 1, 2 or 5 times a power of ten; the segment map has a ruler of round ticks and a line giving the row's
size, and its title gives unallocated (reserved - allocated, with its share of reserved) and fragmentation
(1 - largest free block / cached free) in the terms of docs/TOOL.md. Exit status: the number of failed checks.
"""
import os
import re
import subprocess
import sys
import xml.dom.minidom

BIN, SRC, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(OUT, exist_ok=True)
UNIT = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}
fails = 0


def check(name, ok, detail=""):
    global fails
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    if not ok:
        fails += 1


def texts(doc, cls):
    return [t.firstChild.data for t in doc.getElementsByTagName("text") if t.getAttribute("class") == cls]


def byte_ticks(labels):
    """The values of round byte ticks, or a reason they are not round."""
    if not labels or labels[0] != "0":
        return "the first tick is %r, not '0'" % (labels[:1],)
    vals, unit = [0], None
    for s in labels[1:]:
        m = re.fullmatch(r"(\d+) (B|KiB|MiB|GiB|TiB|PiB)", s)
        if not m or (unit and m.group(2) != unit):
            return "%r is not a whole number of the axis's unit" % s
        unit = m.group(2)
        vals.append(int(m.group(1)) * UNIT[unit])
    step = vals[1] - vals[0] if len(vals) > 1 else 0
    if step <= 0 or step & (step - 1) or any(b - a != step for a, b in zip(vals, vals[1:])):
        return "steps %s are not one power of two" % [b - a for a, b in zip(vals, vals[1:])]
    return vals


def round_decimal(step):
    while step % 10 == 0:
        step //= 10
    return step in (1, 2, 5)


cases = [("cpu", [os.path.join(SRC, "examples", "cpu-transformer-trainstep.trace"), "--conf", ""], 0),
         ("cs336", [os.path.join(SRC, "examples", "cs336-lm-ctx128-fullstep.trace"), "--conf", ""], 0),
         ("seeded", [os.path.join(SRC, "tests", "data", "linear-10k-50k-grad.pickle")], 0),
         ("oom", [os.path.join(SRC, "examples", "cs336-lm-ctx128-fullstep.trace"), "--conf", "", "--capacity",
                  "40GiB"], 1)]
for name, args, want_rc in cases:
    svg = os.path.join(OUT, name + ".svg")
    r = subprocess.run([BIN, "view", *args, "-o", svg], capture_output=True, text=True)
    check(name + "_written", r.returncode == want_rc, r.stderr)
    doc = xml.dom.minidom.parse(svg)
    peak = int(doc.documentElement.getAttribute("data-peak-reserved"))
    ys = byte_ticks(texts(doc, "ytick"))
    check(name + "_byte_axis_round", isinstance(ys, list), "%s: %s" % (ys, texts(doc, "ytick")))
    if isinstance(ys, list):
        check(name + "_byte_axis_holds_the_peak", ys[-1] >= peak > ys[-2] and 3 <= len(ys) <= 7,
              "ticks %s, peak %d" % (ys, peak))
    xs = [int(t) for t in texts(doc, "xtick")]
    steps = {b - a for a, b in zip(xs, xs[1:])}
    check(name + "_event_axis_round", len(steps) == 1 and round_decimal(steps.pop()) and xs[0] % (xs[1] - xs[0]) == 0
          and 3 <= len(xs) <= 9, "ticks %s" % xs)
    ms = byte_ticks(texts(doc, "mtick"))
    check(name + "_map_ruler_round", isinstance(ms, list) and len(ms) >= 3, "%s: %s" % (ms, texts(doc, "mtick")))
    body = open(svg).read()
    check(name + "_map_scale", re.search(r"a row is [\d.]+ (bytes|KiB|MiB|GiB), ticks every \d+ (B|KiB|MiB|GiB)",
                                          body) is not None, "no scale line")
    t = re.search(r'<text id="maptitle".*?</text>', body)
    title = re.sub(r"<[^>]+>", "", t.group(0)) if t else "no map title"
    m = re.search(r"unallocated ([\d.]+ \w+) \(([\d.]+)% of reserved\); fragmentation ([\d.]+)% \(largest free block "
                  r"[\d.]+ \w+ of ([\d.]+ \w+) cached free\)", title)
    check(name + "_map_terms", m is not None, title)
# A pool's sleeps and wakes (docs/SLEEP.md): a marker each over the curves, its title the pool, the recording's bytes
# and the backup, hollow when the trace cannot place it; allocated memory passes reserved while a pool sleeps (its
# blocks stay allocated), so the byte axis holds peak allocated too; a map at a peak while a pool sleeps leaves its
# pages out, counted apart.
nap = os.path.join(OUT, "sleep.trace")
with open(nap, "w") as f:
    f.write("hbmtrace 1\nu 1\na 1 83886080\nu 0\nz 1 83886080 weights backup\na 2 41943040\nf 2\ne\n"
            "w 1 83886080 weights backup\nz 0 2097152 old\n")
svg = os.path.join(OUT, "sleep.svg")
r = subprocess.run([BIN, "view", nap, "--conf", "", "-o", svg], capture_output=True, text=True)
check("sleep_written", r.returncode == 0, r.stderr)
doc = xml.dom.minidom.parse(svg)
marks = [(g.getAttribute("data-kind"), g.getAttribute("data-event"), g.getElementsByTagName("title")[0].firstChild.data,
          g.getElementsByTagName("path")[0].getAttribute("fill")) for g in doc.getElementsByTagName("g")
         if g.getAttribute("class") == "nap"]
check("sleep_markers", marks == [
    ("sleep", "3", "sleep of pool 'weights' (backup) at event 3; 80.00 MiB given back in the recording", "#6a3d9a"),
    ("wake", "7", "wake of pool 'weights' (backup) at event 7; 80.00 MiB mapped again in the recording", "#1b9e77"),
    ("sleep", "8", "sleep of pool 'old' (discard) at event 8; 2.00 MiB given back in the recording; drawn, not replayed "
     "(the trace does not say which pool)", "white")], "%s" % marks)
peak_alloc = int(doc.documentElement.getAttribute("data-peak-allocated"))
ys = byte_ticks(texts(doc, "ytick"))
check("sleep_axis_holds_peak_allocated", isinstance(ys, list) and ys[-1] >= peak_alloc >
      int(doc.documentElement.getAttribute("data-peak-reserved")), "ticks %s, peak allocated %d" % (ys, peak_alloc))
body = open(svg).read()
check("sleep_legend", ">a pool put to sleep<" in body and ">woken (hollow: not replayed)<" in body, "no legend")
print("%d check(s) failed" % fails if fails else "all view_svg checks passed")
sys.exit(min(fails, 100))
