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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, failed  # noqa: E402  (tests/python/checks.py)

BIN, SRC, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(OUT, exist_ok=True)
UNIT = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40, "PiB": 1 << 50}


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


def polylines(doc):
    """The curves by id: their points, as drawn."""
    out = {}
    for pl in doc.getElementsByTagName("polyline"):
        pts = pl.getAttribute("points").split()
        out[pl.getAttribute("id")] = [tuple(float(v) for v in pt.split(",")) for pt in pts]
    return out


def label_box(doc):
    """The peak's label: its text and its box (x0, y0, x1, y1), 7 pixels a character at 12 pixels (DejaVu Sans and
    Helvetica draw none wider than 7.6, digits about 7), from 12 above its baseline to 3 under it (descenders)."""
    for t in doc.getElementsByTagName("text"):
        text = "".join(n.data if n.nodeType == n.TEXT_NODE else n.firstChild.data for n in t.childNodes)
        if text.startswith("peak reserved "):
            x, y, w = float(t.getAttribute("x")), float(t.getAttribute("y")), 7.0 * len(text)
            x0 = {"end": x - w, "middle": x - w / 2}.get(t.getAttribute("text-anchor"), x)
            return text, (x0, y - 12, x0 + w, y + 3)
    return None, None


def crossings(doc):
    """The curves that pass through the peak's label ('' when none): a segment between two points of a curve that
    meets the label's box (the stroke's half width around it)."""
    text, (x0, y0, x1, y1) = label_box(doc)
    hit = []
    for name, pts in polylines(doc).items():
        for (ax, ay), (bx, by) in zip(pts, pts[1:] or pts):
            if max(ax, bx) >= x0 and min(ax, bx) <= x1 and max(ay, by) + 0.75 >= y0 and min(ay, by) - 0.75 <= y1:
                hit.append("%s at x %.0f..%.0f, y %.1f..%.1f" % (name, ax, bx, ay, by))
                break
    return "" if not hit else "%r at %s crosses %s" % (text, (x0, y0, x1, y1), "; ".join(hit))


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
    check(name + "_peak_label_clear_of_the_curves", not crossings(doc), crossings(doc))
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
# (issue #36 item 9) While a pool sleeps its blocks stay allocated on pages given back, which reserved does not
# count: the allocated curve is what is in memory, never above reserved, and the sleeping blocks are a curve of
# their own (allocated = in memory + asleep: 120 MiB at the peak, 80 of them asleep); the axis holds both.
attr = doc.documentElement.getAttribute
peaks = {k: int(attr("data-peak-" + k) or -1) for k in ("allocated", "reserved", "in-memory", "asleep")}
check("sleep_peaks_apart", peaks == {"allocated": 125829120, "reserved": 83886080, "in-memory": 83886080,
                                     "asleep": 83886080}, "%s" % peaks)
ys = byte_ticks(texts(doc, "ytick"))
check("sleep_axis_holds_the_curves", isinstance(ys, list) and ys[-1] >= max(peaks.values()) - peaks["allocated"]
      + max(peaks["in-memory"], peaks["asleep"], peaks["reserved"]), "ticks %s, peaks %s" % (ys, peaks))
curves = polylines(doc)
above = [(x, a, r) for (x, a), (_, r) in zip(curves.get("allocated", []), curves.get("reserved", [])) if a < r - 0.05]
check("sleep_allocated_in_memory_under_reserved", curves.get("asleep") and not above,
      "curves %s; allocated above reserved at %s" % (sorted(curves), above[:3]))
body = open(svg).read()
check("sleep_legend", ">a pool put to sleep<" in body and ">woken (hollow: not replayed)<" in body and
      re.search(r">allocated in memory \(peak 80\.00 MiB\)<", body) and ">asleep (peak 80.00 MiB)<" in body,
      "legend: %s" % re.findall(r'<text x="\d+" y="74">([^<]*)<', body))
check("sleep_title", "peak allocated 120.00 MiB (80.00 MiB of it asleep), peak reserved 80.00 MiB" in body,
      "no split of peak allocated in the title")
# The peak's label where no curve is: a pool asleep while another allocates, the events close together (40 of them),
# so that the allocation rises where the label would stand beside the peak.
crowd = os.path.join(OUT, "crowded.trace")
with open(crowd, "w") as f:
    f.write("hbmtrace 1\nu 1\na 1 83886080\nu 0\nz 1 83886080 w\na 2 41943040\n" + "e\n" * 35)
svg = os.path.join(OUT, "crowded.svg")
r = subprocess.run([BIN, "view", crowd, "--conf", "", "-o", svg], capture_output=True, text=True)
check("crowded_written", r.returncode == 0, r.stderr)
doc = xml.dom.minidom.parse(svg)
check("crowded_peak_label_clear_of_the_curves", not crossings(doc), crossings(doc))
# A wake that is the trace's last event has its marker in the plot, at that event.
last = os.path.join(OUT, "wake-last.trace")
with open(last, "w") as f:
    f.write("hbmtrace 1\nu 1\na 1 83886080\nu 0\nz 1 83886080 w\na 2 1000\nw 1 83886080 w\n")
svg = os.path.join(OUT, "wake-last.svg")
r = subprocess.run([BIN, "view", last, "--conf", "", "-o", svg], capture_output=True, text=True)
doc = xml.dom.minidom.parse(svg)
marks = [(g.getAttribute("data-kind"), int(g.getAttribute("data-event")),
          float(g.getElementsByTagName("line")[0].getAttribute("x1"))) for g in doc.getElementsByTagName("g")
         if g.getAttribute("class") == "nap"]
xs = {int(t.firstChild.data): float(t.getAttribute("x")) for t in doc.getElementsByTagName("text")
      if t.getAttribute("class") == "xtick"}
check("wake_last_marked_in_the_plot", r.returncode == 0 and marks and marks[-1][:2] == ("wake", 5) and
      110 < marks[-1][2] < 110 + 1040 and abs(marks[-1][2] - xs.get(5, -9)) < 0.5,
      "markers %s, event ticks at %s" % (marks, xs))

# The same figures in replay's report (docs/MONITOR.md, "Terms"): peak allocated said as in memory and asleep, the
# peak in memory, reserved against it; the device calls against num_device_alloc / num_device_free, and why.
rep = subprocess.run([BIN, "replay", nap, "--conf", ""], capture_output=True, text=True).stdout
check("replay_peak_allocated_split", re.search(r"^peak allocated: +120\.00 MiB \(125829120 bytes\): 40\.00 MiB in "
                                               r"memory and 80\.00 MiB asleep", rep, re.M) is not None, rep)
check("replay_peak_in_memory", re.search(r"^peak in memory: +80\.00 MiB \(83886080 bytes\)", rep, re.M) is not None and
      re.search(r"^reserved/allocated: 1\.0000 \(peak reserved / peak in memory\)", rep, re.M) is not None, rep)
check("replay_device_runs_explained", re.search(r"^device calls: .*\(num_device_alloc (\d+), num_device_free (\d+)\)\n"
                                                r" +\(the device calls count a page each for map and unmap; "
                                                r"num_device_alloc and num_device_free count as PyTorch does: .*the "
                                                r"wakes mapped 1 run again, the sleeps gave 1 back\)$", rep, re.M)
      is not None, rep)

# A recording whose start state alone exceeds the device (issue #36, from replay_seed): the view says so, with
# replay's figures, instead of an out-of-memory "at event 0" with an empty reason; the picture is marked.
seeded = os.path.join(SRC, "tests", "data", "layoutediting-torch1x-segments.pickle")
svg = os.path.join(OUT, "unfit.svg")
r = subprocess.run([BIN, "view", seeded, "--capacity", "2GiB", "-o", svg], capture_output=True, text=True)
check("unfit_said", r.returncode == 1 and "the recorded state itself exceeds the capacity: the recording began with "
      "3.40 GiB reserved" in r.stderr and "): ;" not in r.stderr and "at event 0" not in r.stderr, r.stderr)
check("unfit_marked", "NOT REPLAYED: the recorded start does not fit" in open(svg).read(), "no mark in the picture")
print("%d check(s) failed" % failed() if failed() else "all view_svg checks passed")
sys.exit(min(failed(), 100))
