#!/usr/bin/python3
"""The view's page in a real browser: headless Chromium driven over the DevTools protocol (python3-websocket).

usage: tests/python/browser.py HBMALLOC SOURCE_DIR OUT_DIR

Writes pages with `hbmalloc view`, loads each from disk and checks: no console error, no exception, no request
that leaves the file (network); the hover tooltip of the largest allocation's band names the allocation the trace
made at that event; the slider and the arrow keys move the selection and the figures follow (the live
allocations counted from the trace itself, the peak reserved from `hbmalloc replay`); an out-of-memory run opens
at its last event, marked. Keeps screenshots (OUT_DIR/*.png) and the timings (time to first paint, frames while
scrubbing) in OUT_DIR/browser.txt. Exit status: the number of failed checks.
"""
import json
import os
import pickle
import re
import subprocess
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cdp import Browser  # noqa: E402  (tests/python/cdp.py)
from checks import check, failed  # noqa: E402  (tests/python/checks.py)

BIN, SRC, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(OUT, exist_ok=True)
notes = []


def trace_events(path):
    """The hbmtrace's events: (kind, id, size) in order."""
    ev = []
    for line in open(path):
        f = line.split()
        if f and f[0] in ("a", "f", "e", "s"):
            ev.append((f[0], f[1] if len(f) > 1 else None, int(f[2]) if f[0] == "a" else 0))
    return ev


def live_after(ev, i):
    live = set()
    for kind, ident, _ in ev[:i + 1]:
        if kind == "a":
            live.add(ident)
        elif kind == "f":
            live.discard(ident)
    return len(live)


def replay_value(trace, conf, what):
    out = subprocess.run([BIN, "replay", trace, "--conf", conf], capture_output=True, text=True).stdout
    return int(re.search(r"^%s: .*\((\d+) bytes\)" % what, out, re.M).group(1))


def png_size(png):
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")


def figures(b):
    return b.js("Object.fromEntries([...document.querySelectorAll('#figures td')]"
                ".map(td => [td.dataset.key, Number(td.dataset.value)]))")


def hover_at(b, pt, from_bottom=None):
    """Moves the mouse to page point pt (scrolled into view; from_bottom: that far above the window's bottom edge);
    the tooltip's text."""
    h = b.js("document.documentElement.clientHeight")
    b.js("window.scrollTo(0, %d)" % max(pt["y"] - (400 if from_bottom is None else h - from_bottom), 0))
    sx, sy = b.js("[window.scrollX, window.scrollY]")
    b.mouse("moved", pt["x"] - sx, pt["y"] - sy)
    return b.js("(() => { const t = document.getElementById('tip'); return t.style.display === 'block' ? t.textContent : ''; })()")


def frame(b):
    """Waits for the page to draw a frame (what the wheel does is drawn in the next one)."""
    b.js("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")


def overflow(b):
    """What sticks out of the window on the right: the page, or a part of it ('' when nothing)."""
    return b.js("""(() => { const w = document.documentElement.clientWidth, out = [];
        if (document.documentElement.scrollWidth > w) out.push('the page, ' + document.documentElement.scrollWidth + ' > ' + w);
        for (const e of document.querySelectorAll('canvas, table, pre, .bar, #events, h1, p'))
          if (e.getBoundingClientRect().right > w + 0.5 && e.offsetParent) out.push((e.id || e.tagName) + ' to ' + e.getBoundingClientRect().right);
        for (const e of document.querySelectorAll('.wide')) if (e.scrollWidth > e.clientWidth) out.push('a table scrolls: ' + e.firstChild.id);
        return out.join('; '); })()""")


def labels_apart(b):
    """The curves' labels (peaks, capacity, out of memory): inside their chart, no two overlapping ('' when so)."""
    lab = b.js("hbmView.labels()")
    boxes = lab["boxes"]
    for k, a in enumerate(boxes):
        if a["x"] < 0 or a["y"] < 0 or a["x"] + a["w"] > lab["width"] or a["y"] + a["h"] > lab["height"]:
            return "%r at %s, outside the %d x %d chart" % (a["text"], a, lab["width"], lab["height"])
        for c in boxes[k + 1:]:
            if a["x"] < c["x"] + c["w"] and c["x"] < a["x"] + a["w"] and a["y"] < c["y"] + c["h"] and c["y"] < a["y"] + a["h"]:
                return "%r overlaps %r" % (a["text"], c["text"])
    return "" if boxes else "no labels"


def labels_clear(b):
    """The curves' labels clear of the curves as drawn ('' when so): each curve a step from one pixel column to the
    next (cols, as drawUsageBase strokes it), against each label's box, the stroke's half width around it."""
    curves = b.js("cols.map((c, k) => c.map((col, i) => [k, i, col.map(([x, v]) => [x, yU(v)])]))")
    boxes = b.js("hbmView.labels()")["boxes"]
    for a in boxes:
        x0, y0, x1, y1 = a["x"], a["y"], a["x"] + a["w"], a["y"] + a["h"]
        for run in curves:
            for k, i, pts in run:
                for (xa, ya), (xb, yb) in zip(pts, pts[1:]):
                    horizontal = xb >= x0 and xa <= x1 and y0 - 0.75 <= ya <= y1 + 0.75
                    vertical = x0 <= xb <= x1 and max(ya, yb) + 0.75 >= y0 and min(ya, yb) - 0.75 <= y1
                    if horizontal or vertical:
                        return "%r at %s crosses run %s's %s curve at x %.1f..%.1f, y %.1f..%.1f" % (
                            a["text"], [round(v, 1) for v in (x0, y0, x1, y1)], "ABCDEFGH"[k],
                            ["reserved", "allocated", "asleep"][i], xa, xb, ya, yb)
    return ""


def words_broken(b):
    """The words of the table of runs that a line break cuts ('' when none): each word of a cell (between spaces or a
    break after a setting's comma) on one line."""
    return "; ".join(b.js("""(() => { const bad = [];
        for (const td of document.querySelectorAll('#abtable td')) {
          const t = td.firstChild; if (!t || t.nodeType !== 3) continue;
          const re = /[^ \u200b]+/g; let m;
          while ((m = re.exec(t.data))) {
            const r = document.createRange(); r.setStart(t, m.index); r.setEnd(t, m.index + m[0].length);
            const tops = new Set([...r.getClientRects()].filter(q => q.width > 0).map(q => Math.round(q.top)));
            if (tops.size > 1) bad.push(JSON.stringify(m[0]) + ' on ' + tops.size + ' lines');
          }
        }
        return bad; })()"""))


def nap_pixel(b, k, chart):
    """The colour drawn at the middle of marker k's triangle in a chart (the canvas's own pixel)."""
    return b.js("""(() => { const c = document.getElementById('%s'), r = c.getBoundingClientRect(), d = window.devicePixelRatio || 1;
        const p = hbmView.napPoint(%d, '%s'), x = (p.x - window.scrollX - r.left) * d, y = (p.y - window.scrollY - r.top) * d;
        const o = document.createElement('canvas'), g = o.getContext('2d', {willReadFrequently: true}); /* (the chart's
        own context read twice would warn on the console) */
        o.width = o.height = 1; g.drawImage(c, Math.round(x), Math.round(y), 1, 1, 0, 0, 1, 1);
        return Array.from(g.getImageData(0, 0, 1, 1).data.slice(0, 3)); })()"""
                % (chart, k, chart))


def tip_inside(b):
    """The tooltip shown lies inside the window and its text inside it ('' when so)."""
    return b.js("""(() => { const t = document.getElementById('tip'), r = t.getBoundingClientRect();
        const w = document.documentElement.clientWidth, h = document.documentElement.clientHeight;
        if (t.style.display !== 'block') return 'no tooltip';
        if (r.left < 0 || r.top < 0 || r.right > w || r.bottom > h)
          return 'the tooltip at ' + JSON.stringify(r) + ' in a window of ' + w + ' x ' + h;
        if (t.scrollWidth > t.clientWidth) return 'its text is ' + t.scrollWidth + ' wide in ' + t.clientWidth;
        return ''; })()""")


trace = os.path.join(SRC, "examples", "cpu-transformer-trainstep.trace")
page = os.path.join(OUT, "view.html")
subprocess.run([BIN, "view", trace, "--conf", "", "-o", page], check=True, stdout=subprocess.DEVNULL)
ev = trace_events(trace)
b = Browser()
try:
    t0 = time.time()
    b.open(page)
    load_s = time.time() - t0
    ready = b.js("hbmView.readyMs")
    notes.append("view.html (%s, %d events, %d bytes): loaded in %.2f s, everything drawn %.0f ms after navigation"
                 % (os.path.basename(trace), len(ev), os.path.getsize(page), load_s, ready))
    probs = b.problems()
    check("page_loads_clean", not probs, "; ".join(probs))

    # The figures at the moment the page opens on: the peak reserved, which replay reports.
    fig = figures(b)
    peak = replay_value(trace, "", "peak reserved")
    check("opens_at_peak_reserved", fig.get("reserved") == peak, "figures %s, replay's peak %d" % (fig, peak))
    sel = b.js("hbmView.selected()")
    check("live_allocations_at_peak", fig.get("live allocations") == live_after(ev, sel - 1),
          "page %s, trace %d after event %d" % (fig.get("live allocations"), live_after(ev, sel - 1), sel - 1))
    b.screenshot(os.path.join(OUT, "view.png"))

    # Hover the largest allocation's band: the tooltip names an allocation of the trace at that event.
    i = b.js("hbmView.largest()")
    pt = b.js("hbmView.bandPoint(%d)" % i)
    b.js("window.scrollTo(0, %d)" % max(pt["y"] - 400, 0))
    sx, sy = b.js("[window.scrollX, window.scrollY]")
    b.call("Input.dispatchMouseEvent", type="mouseMoved", x=pt["x"] - sx, y=pt["y"] - sy)
    tip = b.js("(() => { const t = document.getElementById('tip'); return t.style.display === 'block' ? t.textContent : ''; })()")
    m = re.search(r"(\d+) bytes requested\)\nmade at event (\d+)", tip or "")
    ok = bool(m) and ev[int(m.group(2))][0] == "a" and ev[int(m.group(2))][2] == int(m.group(1))
    check("hover_names_the_allocation", ok, "tooltip %r" % tip)
    biggest = max(s for k, _, s in ev if k == "a")
    check("hover_largest_band_is_largest_request", bool(m) and int(m.group(1)) == biggest,
          "tooltip %r, largest request %d" % (tip, biggest))
    b.screenshot(os.path.join(OUT, "view-hover.png"))

    # The slider: focused, the arrow keys step it one event; the figures follow.
    b.js("window.scrollTo(0, 0); document.getElementById('ev').focus()")
    before = b.js("hbmView.selected()")
    b.key("ArrowLeft", "ArrowLeft", 37)
    after = b.js("hbmView.selected()")
    fig = figures(b)
    check("arrow_key_steps_back", after == before - 1, "selected %s -> %s" % (before, after))
    check("figures_follow_the_slider", fig.get("live allocations") == live_after(ev, after - 1),
          "page %s, trace %d" % (fig.get("live allocations"), live_after(ev, after - 1)))
    b.js("document.getElementById('ev').blur()")
    b.key("End", "End", 35)
    last = b.js("hbmView.selected()")
    check("end_key_goes_to_the_last_event", last == len(ev), "selected %s of %d" % (last, len(ev)))
    check("figures_at_the_end", figures(b).get("live allocations") == live_after(ev, len(ev) - 1),
          "page %s, trace %d" % (figures(b).get("live allocations"), live_after(ev, len(ev) - 1)))
    # Scrubbing: 200 moves of the slider, the frames they take.
    ms = b.js("""(async () => { const s = document.getElementById('ev'); let t = [];
        for (let k = 0; k < 200; k++) { const t0 = performance.now();
          s.value = String(Number(s.min) + Math.floor((Number(s.max) - Number(s.min)) * k / 199));
          s.dispatchEvent(new Event('input')); await new Promise(r => requestAnimationFrame(r));
          t.push(performance.now() - t0); }
        t.sort((a, b) => a - b); return [t[100], t[190]]; })()""")
    notes.append("scrubbing the slider: median %.1f ms per frame, 95th percentile %.1f ms" % (ms[0], ms[1]))
    probs = b.problems()
    check("no_errors_while_driven", not probs, "; ".join(probs))

    # An out-of-memory run: the page opens at the last event before it, marked.
    oom = os.path.join(OUT, "view-oom.html")
    r = subprocess.run([BIN, "view", trace, "--conf", "", "--capacity", "200MiB", "-o", oom],
                       capture_output=True, text=True)
    check("oom_view_exit_1", r.returncode == 1, r.stderr)
    m = re.search(r"out of memory at event (\d+)", r.stderr)
    b.open(oom)
    probs = b.problems()
    check("oom_page_loads_clean", not probs, "; ".join(probs))
    text = b.js("document.getElementById('oomline').textContent")
    check("oom_marked", bool(m) and ("OUT OF MEMORY at event " + m.group(1)) in text, "oomline %r" % text)
    sel = b.js("hbmView.selected()")
    check("oom_opens_before_the_failure", bool(m) and sel == int(m.group(1)),
          "selected %s, OOM at %s" % (sel, m and m.group(1)))
    check("oom_button", b.js("!document.getElementById('to-oom').disabled"), "disabled")
    png = b.screenshot(os.path.join(OUT, "view-oom.png"))
    w, h = png_size(png)
    check("screenshot_decodes", w == 1280 and h > 800, "%dx%d" % (w, h))

    # Other runs: a PyTorch snapshot begun mid-run (its start state seeded), expandable segments (mapped runs), an
    # empty_cache in the trace. At 60 moments across each, the map agrees with the allocator's statistics (the page
    # says so on the console otherwise).
    cases = [("seeded", os.path.join(SRC, "tests", "data", "linear-10k-50k-grad.pickle"), []),
             ("expandable", os.path.join(SRC, "examples", "finetune-varlen.trace"),
              ["--conf", "expandable_segments:True"]),
             ("empty_cache", os.path.join(OUT, "empty.trace"), ["--conf", ""])]
    with open(cases[2][1], "w") as f:
        f.write("hbmtrace 1\na 1 3000000\na 2 5000000\nf 1\ne\na 3 100\nf 2\ne\nf 3\n")
    for name, path, extra in cases:
        out = os.path.join(OUT, "view-%s.html" % name)
        subprocess.run([BIN, "view", path, *extra, "-o", out], check=True, stdout=subprocess.DEVNULL)
        b.open(out)
        b.js("(() => { for (let k = 0; k <= 60; k++) hbmView.select(hbmView.first() + Math.round((hbmView.last() - hbmView.first()) * k / 60)); })()")
        probs = b.problems()
        check("map_agrees_" + name, not probs, "; ".join(probs))
        b.js("hbmView.select(hbmView.peak())")
        b.screenshot(os.path.join(OUT, "view-%s.png" % name))
    # A PyTorch snapshot's frames and times: the tooltip of its largest allocation shows the Python frames of the
    # allocation the snapshot made there (profile_grad.py line 8: read from the file with Python's pickle), and the
    # x axis can be time; hovering still works on it.
    snap = os.path.join(SRC, "tests", "data", "linear-10k-50k-grad.pickle")
    b.open(os.path.join(OUT, "view-seeded.html"))

    def hover_largest():
        i = b.js("hbmView.largest()")
        pt = b.js("hbmView.bandPoint(%d)" % i)
        b.js("window.scrollTo(0, %d)" % max(pt["y"] - 400, 0))
        sx, sy = b.js("[window.scrollX, window.scrollY]")
        b.call("Input.dispatchMouseEvent", type="mouseMoved", x=pt["x"] - sx, y=pt["y"] - sy)
        return b.js("(() => { const t = document.getElementById('tip'); return t.style.display === 'block' ? t.textContent : ''; })()")
    tip = hover_largest()
    check("frames_in_tooltip", "profile_grad.py:8)" in tip and "C++ frames not shown" in tip and "(+" in tip,
          "tooltip %r" % tip)
    check("time_axis_offered", b.js("!document.getElementById('xchoice').hidden"), "no x-axis chooser")
    b.js("(() => { const s = document.getElementById('xaxis'); s.value = 'time'; s.dispatchEvent(new Event('change')); })()")
    tip2 = hover_largest()
    check("time_axis_hover", tip2 == tip and not b.problems(), "tooltip %r, problems %s" % (tip2, b.problems()))
    b.screenshot(os.path.join(OUT, "view-time.png"))
    b.open(page)
    check("no_time_axis_without_times", b.js("document.getElementById('xchoice').hidden"), "chooser shown")
    b.open(os.path.join(OUT, "view-empty_cache.html"))
    b.js("hbmView.select(6)")  # after event 5: block 2 holds the 20 MiB segment
    fig = figures(b)
    check("segment_held", fig.get("reserved") == 20971520 + 2097152 and fig.get("segments") == 2, "%s" % fig)
    b.js("hbmView.select(7)")  # after event 6, the second empty_cache: only the small pool's 2 MiB is left
    fig = figures(b)
    check("empty_cache_releases", fig.get("reserved") == 2097152 and fig.get("segments") == 1, "%s" % fig)

    # A pending free (a block freed while another stream still used it: `p` in the trace, PyTorch's free_requested
    # before its free_completed): between the two the map shows the block pending, not allocated and not free, and
    # the figures agree with the allocator's statistics (allocated falls at the request); the whole page and the
    # page of moments alike; the band's tooltip says so.
    pend = os.path.join(OUT, "pending.trace")
    with open(pend, "w") as f:
        f.write("hbmtrace 1\na 1 3000000\na 2 5000000\np 1\na 3 1000\na 4 3000000\nf 1\na 5 3000000\n"
                "f 2\nf 3\nf 4\nf 5\n")
    for name, extra in (("pending", []), ("pending-moments", ["--detail", "1"])):
        out = os.path.join(OUT, "view-%s.html" % name)
        subprocess.run([BIN, "view", pend, "--conf", "", *extra, "-o", out], check=True, stdout=subprocess.DEVNULL)
        b.open(out)
        b.js("hbmView.select(5)")  # after event 4 (a 4): block 1's free requested at event 2, not completed
        fig = figures(b)
        check(name + "_figures", fig.get("pending free") == 3000320 and fig.get("allocated") == 5000192 + 1024 + 3000320,
              "%s" % fig)
        b.js("hbmView.select(7)")  # after event 6: its use done, the block reused by allocation 5
        fig = figures(b)
        check(name + "_completed", fig.get("pending free") == 0, "%s" % fig)
        b.js("(() => { for (let p = hbmView.first(); p <= hbmView.last(); p++) hbmView.select(p); })()")
        check(name + "_agrees", not b.problems(), "; ".join(b.problems()))
    b.open(os.path.join(OUT, "view-pending.html"))
    b.js("hbmView.select(5)")
    tip = hover_at(b, b.js("hbmView.bandPoint(0)"))
    check("pending_tooltip", "its free requested at event 2" in tip and "that use done at event 5" in tip,
          "tooltip %r" % tip)
    b.screenshot(os.path.join(OUT, "view-pending.png"))

    # Unmapped pages between mapped ones: expandable segments, the middle block freed and empty_cache unmapping it.
    # The two mapped runs are one segment with a 30 MiB gap (a mark, not to scale), on both kinds of page; the
    # gap's tooltip says what it is.
    holes = os.path.join(OUT, "holes.trace")
    with open(holes, "w") as f:
        f.write("hbmtrace 1\na 1 41943040\na 2 41943040\na 3 41943040\nf 2\ne\na 4 1048576\nf 1\nf 3\nf 4\n")
    for name, extra in (("unmapped", []), ("unmapped-moments", ["--detail", "1"])):
        out = os.path.join(OUT, "view-%s.html" % name)
        subprocess.run([BIN, "view", holes, "--conf", "expandable_segments:True", *extra, "-o", out], check=True,
                       stdout=subprocess.DEVNULL)
        b.open(out)
        b.js("hbmView.select(5)")  # after event 4, the empty_cache
        fig = figures(b)
        check(name + "_gap", fig.get("unmapped gaps") == 41943040 and fig.get("segments") == 1
              and fig.get("reserved") == 2 * 41943040, "%s" % fig)
        b.js("hbmView.select(4)")  # before it: one run mapped whole, no gap
        fig = figures(b)
        check(name + "_no_gap_before", fig.get("unmapped gaps") == 0 and fig.get("segments") == 1, "%s" % fig)
        b.js("(() => { for (let p = hbmView.first(); p <= hbmView.last(); p++) hbmView.select(p); })()")
        check(name + "_agrees", not b.problems(), "; ".join(b.problems()))
    b.open(os.path.join(OUT, "view-unmapped.html"))
    b.js("hbmView.select(5)")
    tip = hover_at(b, b.js("hbmView.gapPoint()"))
    check("unmapped_tooltip", tip.startswith("unmapped: 40.00 MiB of address space"), "tooltip %r" % tip)
    b.screenshot(os.path.join(OUT, "view-unmapped.png"))

    # Pools that sleep and wake (issue #31 item 4, docs/SLEEP.md): an RL loop's weights (a pool with backup) and KV
    # cache (discard) put to sleep while the other phase trains in the memory they gave back, three times. The trace
    # says which pool each allocation went to (`u`), so its sleeps and wakes are replayed (hbm_pool_sleep / wake):
    # each is a marker on every chart's time axis whose tooltip names the pool, its bytes and its backup; the events
    # list names them; while they sleep the figures count their pages apart (asleep, not reserved) and their blocks
    # as allocated, kept in the map at their addresses (a mark each, hovered), at every event and at the moments of
    # a large run alike. Their snapshot (`replay --snapshot`) cannot place its allocations in pools: drawn, hollow,
    # not replayed.
    W, KV = 40 << 20, 60 << 20
    rl = ["hbmtrace 1", "u 1"] + ["a %d %d" % (k, W) for k in range(1, 5)] + ["u 2", "a 5 %d" % KV, "a 6 %d" % KV, "u 0"]
    nid, naps = 100, []
    for it in range(3):
        ids = list(range(nid, nid + 6))  # the rollout's activations
        rl += ["a %d %d" % (i, (8 + 4 * k) << 20) for k, i in enumerate(ids)] + ["f %d" % i for i in ids]
        naps += [len(rl), len(rl) + 1]
        rl += ["z 1 %d weights backup" % (4 * W), "z 2 %d kv%%20cache" % (2 * KV)]
        ids = list(range(nid + 6, nid + 14))  # the other model's training step
        rl += ["a %d %d" % (i, 50 << 20) for i in ids] + ["f %d" % i for i in ids] + ["e"]
        naps += [len(rl), len(rl) + 1]
        rl += ["w 1 %d weights backup" % (4 * W), "w 2 %d kv%%20cache" % (2 * KV)]
        nid += 14
    sleep_trace = os.path.join(OUT, "sleep.trace")
    with open(sleep_trace, "w") as f:
        f.write("\n".join(rl) + "\n")
    event_of = [k - 1 for k in naps]  # the trace's lines (after the header) are its events
    asleep_at = event_of[1] + 2  # after the first training allocation: both pools asleep
    for name, extra in (("sleep", []), ("sleep-moments", ["--detail", "1"])):
        out = os.path.join(OUT, "view-%s.html" % name)
        subprocess.run([BIN, "view", sleep_trace, "--conf", "", *extra, "-o", out], check=True, stdout=subprocess.DEVNULL)
        b.open(out)
        check(name + "_page_clean", not b.problems(), "; ".join(b.problems()))
        check(name + "_markers", b.js("hbmView.naps()") == [e + 1 for e in event_of], "%s, trace %s"
              % (b.js("hbmView.naps()"), [e + 1 for e in event_of]))
        b.js("hbmView.select(%d)" % (asleep_at + 1))
        fig = figures(b)
        at = b.js("hbmView.selected()")
        if name == "sleep":
            check(name + "_figures_asleep", fig.get("asleep") == 4 * W + 2 * KV and fig.get("allocated asleep") ==
                  4 * W + 2 * KV and fig.get("unallocated") == fig["reserved"] - (fig["allocated"] - 4 * W - 2 * KV),
                  "%s" % fig)
        else:  # the nearest moment: asleep too when it falls between the sleeps and the wakes
            inside = event_of[1] + 1 < at <= event_of[2]
            check(name + "_figures_asleep", not inside or fig.get("allocated") >= 4 * W + 2 * KV, "%s at %d" % (fig, at))
        b.js("(() => { for (let p = hbmView.first(); p <= hbmView.last(); p++) hbmView.select(p); })()")
        check(name + "_map_agrees", not b.problems(), "; ".join(b.problems()))
    b.open(os.path.join(OUT, "view-sleep.html"))
    b.js("hbmView.select(%d)" % (asleep_at + 1))
    for k, chart in enumerate(("usage", "timeline", "segtl")):
        tip = hover_at(b, b.js("hbmView.napPoint(%d, '%s')" % (k % 2, chart)))
        want = ["sleep of pool 'weights'", "backup: its live blocks copied to host memory first", "at event %d" % event_of[0],
                "replayed (hbm_pool_sleep): reserved ", "160.00 MiB of pages given back in the recording"] if k % 2 == 0 else \
               ["sleep of pool 'kv cache'", "discard: its blocks' contents given up", "at event %d" % event_of[1],
                "120.00 MiB of pages given back in the recording"]
        check("sleep_marker_tooltip_" + chart, all(w in tip for w in want), "tooltip %r" % tip)
    for chart in ("usage", "timeline", "segtl"):  # drawn: a filled triangle, a sleep's purple, a wake's green
        got = [nap_pixel(b, k, chart) for k in (0, 2)]
        check("markers_drawn_" + chart, got == [[0x6a, 0x3d, 0x9a], [0x1b, 0x9e, 0x77]], "%s" % got)
        # (issue #36 item 13) the trace ends with a wake: its marker is drawn at the plot's right edge, whole
        last = len(naps) - 1
        got = nap_pixel(b, last, chart)
        check("last_wake_drawn_" + chart, all(abs(g - w) <= 4 for g, w in zip(got, [0x1b, 0x9e, 0x77])) and
              abs(b.js("hbmView.napPoint(%d, '%s').x - document.getElementById('%s').getBoundingClientRect().left - "
                       "window.scrollX" % (last, chart, chart)) - b.js("hbmView.plotRight")) < 1, "%s" % got)
    # (issue #36 item 9) allocated = in memory + asleep: the allocated curve is what is in memory, never above
    # reserved; the sleeping blocks have a curve of their own; the labels stand clear of every curve.
    over = b.js("(() => { const S = D.series; if (!S.in_memory || !S.asleep) return 'no in_memory or asleep series'; "
                "for (let j = 0; j < S.reserved.length; j++) if (S.in_memory[j] > S.reserved[j] || "
                "S.in_memory[j] + S.asleep[j] !== S.allocated[j]) return 'point ' + j; return ''; })()")
    check("sleep_in_memory_under_reserved", not over, over)
    check("sleep_labels_clear", not labels_clear(b), labels_clear(b))
    tip = hover_at(b, b.js("hbmView.napPoint(2, 'usage')"))
    check("wake_marker_tooltip", tip.startswith("wake of pool 'weights'\nbackup: its live blocks copied back") and
          "160.00 MiB mapped again in the recording" in tip, "tooltip %r" % tip)
    b.js("hbmView.select(%d)" % (event_of[0] + 1))
    row = b.js("document.querySelector('#events .sel').textContent")
    check("sleep_event_row", row == "event %d: sleep: pool 'weights' (backup): reserved \u2212160.00 MiB (the recording: "
          "160.00 MiB given back)" % event_of[0], "row %r" % row)
    b.js("hbmView.select(%d)" % (asleep_at + 1))
    tip = hover_at(b, b.js("hbmView.asleepPoint()"))
    check("asleep_pages_in_the_map", re.match(r"asleep: \d+\.\d\d MiB of pages at 0x[0-9a-f]+ of pool '(weights|kv cache)', "
                                              r"given back at event %d" % event_of[0 if "weights" in tip else 1], tip)
          is not None and "keep their addresses in them" in tip, "tooltip %r" % tip)
    pt = b.js("hbmView.napPoint(0, 'usage')")
    hover_at(b, pt, b.js("document.documentElement.clientHeight") - pt["y"])  # (at the page's top: the screenshot)
    b.screenshot(os.path.join(OUT, "view-sleep.png"))
    check("sleep_clean", not b.problems(), "; ".join(b.problems()))
    snap_json = os.path.join(OUT, "sleep.json")
    subprocess.run([BIN, "replay", sleep_trace, "--conf", "", "--snapshot", snap_json], check=True, stdout=subprocess.DEVNULL)
    out = os.path.join(OUT, "view-sleep-snapshot.html")
    subprocess.run([BIN, "view", snap_json, "--conf", "", "-o", out], check=True, stdout=subprocess.DEVNULL)
    b.open(out)
    check("snapshot_sleeps_drawn", len(b.js("hbmView.naps()")) == 12 and b.js("D.naps.placed.every(v => !v)"),
          "%s" % b.js("D.naps"))
    check("snapshot_markers_hollow", nap_pixel(b, 0, "usage") == [255, 255, 255], "%s" % nap_pixel(b, 0, "usage"))
    tip = hover_at(b, b.js("hbmView.napPoint(0, 'usage')"))
    check("snapshot_sleep_tooltip", tip.startswith("sleep of pool 'weights'") and "160.00 MiB of pages given back in the "
          "recording; drawn, not replayed" in tip, "tooltip %r" % tip)
    b.js("(() => { for (let p = hbmView.first(); p <= hbmView.last(); p++) hbmView.select(p); })()")
    check("snapshot_sleeps_clean", not b.problems(), "; ".join(b.problems()))

    # A run with more allocations than the page holds whole (--detail 100 makes the CPU trace one): the map at
    # moments, drawn by hbmalloc; the figures there the same as the whole page's at the same event.
    b.open(page)
    whole = {}
    for p in (b.js("hbmView.peak()"), 2001, 4444):
        b.js("hbmView.select(%d)" % p)
        whole[p] = figures(b)
    large = os.path.join(OUT, "view-large.html")
    subprocess.run([BIN, "view", trace, "--conf", "", "--detail", "100", "-o", large], check=True,
                   stdout=subprocess.DEVNULL)
    b.open(large)
    check("large_page_clean", not b.problems(), "; ".join(b.problems()))
    check("large_opens_at_peak", figures(b) == whole[b.js("hbmView.peak()")],
          "large %s, whole %s" % (figures(b), whole[b.js("hbmView.peak()")]))
    b.js("(() => { for (let k = 0; k <= 60; k++) hbmView.select(hbmView.first() + Math.round((hbmView.last() - hbmView.first()) * k / 60)); })()")
    check("large_moments_agree", not b.problems(), "; ".join(b.problems()))
    at = b.js("hbmView.select(2001), hbmView.selected()")
    fig = figures(b)
    check("large_snaps_to_a_moment", abs(at - 2001) <= len(ev) / 399 + 1 and fig["live allocations"] == live_after(ev, at - 1),
          "selected %s, figures %s, trace %d" % (at, fig, live_after(ev, at - 1)))
    b.js("document.getElementById('ev').blur()")
    b.key("ArrowRight", "ArrowRight", 39)
    nxt = b.js("hbmView.selected()")
    check("large_arrow_goes_to_the_next_moment", at < nxt <= at + len(ev) / 399 + 1, "%s -> %s" % (at, nxt))
    b.screenshot(os.path.join(OUT, "view-large.png"))

    # A/B: one trace under two settings on shared axes, a row each in the table of differences with replay's peak;
    # the run chooser shows B's segments at B's peak.
    ab = os.path.join(OUT, "view-ab.html")
    confs = ["", "expandable_segments:True"]
    subprocess.run([BIN, "view", trace, "--conf", confs[0], "--conf", confs[1], "-o", ab], check=True,
                   stdout=subprocess.DEVNULL)
    b.open(ab)
    probs = b.problems()
    check("ab_page_loads_clean", not probs, "; ".join(probs))
    rows = b.js("[...document.querySelectorAll('#abtable tr[data-run]')].map(r => Number(r.dataset.peakReserved))")
    want = [replay_value(trace, c, "peak reserved") for c in confs]
    check("ab_table_peaks", rows == want, "table %s, replay %s" % (rows, want))
    b.js("(() => { const s = document.getElementById('run'); s.value = '1'; s.dispatchEvent(new Event('change')); })()")
    fig = figures(b)
    check("ab_second_run_shown", fig.get("reserved") == want[1], "figures %s, replay %d" % (fig, want[1]))
    check("ab_no_errors", not b.problems(), "; ".join(b.problems()))
    b.screenshot(os.path.join(OUT, "view-ab.png"))
    # Before and after: two traces.
    two = os.path.join(OUT, "view-two.html")
    other = os.path.join(SRC, "examples", "cs336-lm-ctx512-forward.trace")
    subprocess.run([BIN, "view", trace, other, "--conf", "", "-o", two], check=True, stdout=subprocess.DEVNULL)
    b.open(two)
    rows = b.js("[...document.querySelectorAll('#abtable tr[data-run]')].map(r => Number(r.dataset.peakReserved))")
    want = [replay_value(t, "", "peak reserved") for t in (trace, other)]
    check("two_traces_table", rows == want, "table %s, replay %s" % (rows, want))
    check("two_traces_clean", not b.problems(), "; ".join(b.problems()))

    # A/B on the time axis: one snapshot under two settings shares its times (a position is drawn at the same x in
    # both runs, and not where the event axis puts it: the snapshot's events are not evenly spaced in time); two
    # snapshots, before and after, are laid from their own first events over the longer one's span.
    abt = os.path.join(OUT, "view-ab-time.html")
    subprocess.run([BIN, "view", snap, "--conf", "", "--conf", "expandable_segments:True", "-o", abt], check=True,
                   stdout=subprocess.DEVNULL)
    b.open(abt)
    check("ab_time_axis_offered", b.js("!document.getElementById('xchoice').hidden"), "no x-axis chooser")
    lo, hi = b.js("[hbmView.first(), hbmView.last()]")
    ps = [lo + (hi - lo) * k // 8 for k in range(9)]
    ev_x = b.js("%s.map(p => hbmView.x(p, 0))" % ps)
    b.js("(() => { const s = document.getElementById('xaxis'); s.value = 'time'; s.dispatchEvent(new Event('change')); })()")
    xs = b.js("[0, 1].map(k => %s.map(p => hbmView.x(p, k)))" % ps)
    check("ab_time_shared", xs[0] == xs[1] and xs[0] != ev_x and xs[0] == sorted(xs[0]),
          "run A %s, run B %s, on events %s" % (xs[0], xs[1], ev_x))
    check("ab_time_clean", not b.problems(), "; ".join(b.problems()))
    b.screenshot(os.path.join(OUT, "view-ab-time.png"))
    replayed = os.path.join(OUT, "replayed.pickle")
    subprocess.run([BIN, "replay", other, "--snapshot", replayed], check=True, stdout=subprocess.DEVNULL)
    two = os.path.join(OUT, "view-two-time.html")
    subprocess.run([BIN, "view", snap, replayed, "--conf", "", "-o", two], check=True, stdout=subprocess.DEVNULL)
    b.open(two)
    check("two_snapshots_time_axis_offered", b.js("!document.getElementById('xchoice').hidden"), "no x-axis chooser")
    b.js("(() => { const s = document.getElementById('xaxis'); s.value = 'time'; s.dispatchEvent(new Event('change')); })()")
    ends = b.js("[0, 1].map(k => { hbmView.setRun(k); return [hbmView.x(hbmView.first(), k), hbmView.x(hbmView.last(), k)]; })")
    starts_ok = ends[0][0] == ends[1][0]
    check("two_snapshots_from_their_starts", starts_ok and max(ends[0][1], ends[1][1]) == b.js("hbmView.plotRight"),
          "run A %s, run B %s" % (ends[0], ends[1]))
    check("two_snapshots_clean", not b.problems(), "; ".join(b.problems()))
    b.screenshot(os.path.join(OUT, "view-two-time.png"))

    # sweep --html: the settings ranked first and the user's own, their peaks those the sweep ranked them by.
    sw = os.path.join(OUT, "sweep.html")
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64")
    env.pop("HBMALLOC_CONF", None)
    r = subprocess.run([BIN, "sweep", trace, "--no-progress", "--html", sw], capture_output=True, text=True, env=env)
    check("sweep_html_written", r.returncode == 0 and "wrote " + sw in r.stdout, r.stdout[-300:] + r.stderr)
    ranked = json.loads(subprocess.run([BIN, "sweep", trace, "--no-progress", "--json"], capture_output=True,
                                       text=True, env=env).stdout)["results"]
    b.open(sw)
    check("sweep_page_clean", not b.problems(), "; ".join(b.problems()))
    got = b.js("RUNS.map(R => [R.label, R.stats.peak_reserved])")
    want = [["rank %d: %s%s" % (x["rank"], x["settings"] or "(defaults)", " (yours)" if x["yours"] else ""),
             x["peak_reserved"]] for x in ranked if x["same_as_rank"] == 0][:4]
    check("sweep_page_ranks", got[:len(want)] == want and any(g[0].endswith("(yours)") for g in got),
          "page %s, sweep %s" % (got, want))
    b.screenshot(os.path.join(OUT, "sweep.png"))
    check("sweep_labels_apart", not labels_apart(b), labels_apart(b))

    # Zoom (issue #29 item 8). cs336-lm-ctx128-fullstep's largest allocation, 157 MiB for 3 of 12,989 events, is a
    # fraction of a pixel wide on the whole run. Dragging across the curves from 3 events before it to 3 after
    # shows that stretch in every chart; the timeline's bands are chosen again among the allocations live there
    # (some were not bands before); the allocation is hovered with its own tooltip, the trace's request at that
    # event. Ctrl+wheel zooms, Shift+wheel pans, "whole run" goes back.
    cs = os.path.join(SRC, "examples", "cs336-lm-ctx128-fullstep.trace")
    csp = os.path.join(OUT, "view-cs336.html")
    subprocess.run([BIN, "view", cs, "--conf", "", "-o", csp], check=True, stdout=subprocess.DEVNULL)
    cev = trace_events(cs)
    b.open(csp)
    big = b.js("hbmView.largest()")
    start, end = b.js("[D.allocs.start[%d], D.allocs.end[%d]]" % (big, big))
    whole = b.js("hbmView.bands()")
    check("zoom_opens_on_the_whole_run", b.js("hbmView.window()") is None and big in whole, "window %s" % b.js("hbmView.window()"))
    for around in (400, 3):  # 9 events are less than a pixel of the whole run: 800 first, then 9 of those
        x0, x1, y = b.js("(() => { window.scrollTo(0, 0); const r = document.getElementById('usage').getBoundingClientRect(); "
                         "return [r.left + hbmView.x(%d, 0), r.left + hbmView.x(%d, 0), r.top + 150]; })()"
                         % (start - around, end + around))
        b.mouse("pressed", x0, y)
        b.mouse("moved", (x0 + x1) / 2, y, buttons=1)
        b.mouse("moved", x1, y, buttons=1)
        b.mouse("released", x1, y)
    win = b.js("hbmView.window()")
    check("zoom_drag_shows_that_stretch", win is not None and abs(win[0] - (start - 3)) <= 1 and abs(win[1] - (end + 3)) <= 1,
          "window %s, dragged over %d .. %d" % (win, start - 3, end + 3))
    bands = b.js("hbmView.bands()")
    live = b.js("hbmView.bands().every(k => D.allocs.start[k] <= %d && D.allocs.end[k] > %d)" % (win[1], win[0])) if win else False
    check("zoom_chooses_the_bands_again", live and big in bands and set(bands) - set(whole),
          "%d bands, %d not bands before, all live in view: %s" % (len(bands), len(set(bands) - set(whole)), live))
    tip = hover_at(b, b.js("hbmView.bandPoint(%d)" % big))
    m = re.match(r"allocation #%d: [\d.]+ MiB block \((\d+) bytes requested\)\nmade at event (\d+)" % big, tip)
    check("zoom_largest_allocation_hovered", bool(m) and int(m.group(1)) == max(sz for k, _, sz in cev if k == "a")
          and cev[int(m.group(2))][0] == "a" and cev[int(m.group(2))][2] == int(m.group(1)), "tooltip %r" % tip)
    pt = b.js("hbmView.bandPoint(%d)" % big)  # (hovered with the page at its top: the screenshot does not scroll it)
    hover_at(b, pt, b.js("document.documentElement.clientHeight") - pt["y"])
    b.screenshot(os.path.join(OUT, "view-zoom.png"))
    b.js("window.scrollTo(0, 0)")
    r = b.js("(() => { const r = document.getElementById('timeline').getBoundingClientRect(); return [r.left + 600, r.top + 100]; })()")
    b.mouse("wheel", r[0], r[1], deltaX=0, deltaY=600, modifiers=2)  # Ctrl+wheel down: out
    frame(b)
    wider = b.js("hbmView.window()")
    check("zoom_ctrl_wheel", wider is not None and wider[1] - wider[0] > win[1] - win[0], "%s after %s" % (wider, win))
    b.mouse("wheel", r[0], r[1], deltaX=0, deltaY=200, modifiers=8)  # Shift+wheel: later
    frame(b)
    later = b.js("hbmView.window()")
    check("zoom_shift_wheel_pans", later is not None and later[0] > wider[0] and later[1] - later[0] == wider[1] - wider[0],
          "%s after %s" % (later, wider))
    b.js("document.getElementById('zoom-all').click()")
    check("zoom_whole_run_again", b.js("hbmView.window()") is None and b.js("hbmView.bands()") == whole, "window %s"
          % b.js("hbmView.window()"))
    check("zoom_clean", not b.problems(), "; ".join(b.problems()))

    # Unallocated and fragmentation (item 9), the terms of docs/TOOL.md: the figures at a moment, and the table of
    # runs at each run's peak reserved, the same numbers.
    b.js("hbmView.select(hbmView.peak())")
    fig = figures(b)
    check("figures_terms", fig["unallocated"] == fig["reserved"] - fig["allocated"] and
          abs(fig["fragmentation"] - (1 - fig["largest free block"] / fig["cached free"])) < 1e-12, "%s" % fig)
    b.open(ab)
    head = b.js("[...document.querySelectorAll('#abtable th')].map(t => t.textContent)")
    check("ab_table_terms", "unallocated at peak" in head and "fragmentation at peak" in head, "%s" % head)
    for k in range(2):
        b.js("hbmView.setRun(%d); hbmView.select(hbmView.peak())" % k)
        fig = figures(b)
        row = b.js("(() => { const d = document.querySelector('#abtable tr[data-run=\"%d\"]').dataset; "
                   "return [Number(d.unallocAtPeak), Number(d.fragAtPeak)]; })()" % k)
        check("ab_table_terms_" + "AB"[k], row[0] == fig["unallocated"] and abs(row[1] - fig["fragmentation"]) < 1e-12,
              "table %s, figures at the peak %s" % (row, fig))
    # The A/B labels (item 10): the runs' equal peaks one label, no two overlapping; each run's settings line once.
    check("ab_labels_apart", not labels_apart(b), labels_apart(b))
    check("ab_labels_clear", not labels_clear(b), labels_clear(b))  # (issue #36 item 13)
    text = b.js("document.body.innerText + [...document.querySelectorAll('option')].map(o => o.textContent).join('\\n')")
    counts = [text.count(st) for st in b.js("RUNS.map(R => R.settings)")]
    check("ab_settings_once", counts == [1, 1], "each run's settings line shown %s times" % counts)

    # The events (item 11, memory_viz's allocator state history): a row per event saying what it did; a click on a
    # row goes to the state after that event (the figures follow); the row of an allocation names its request.
    b.open(page)
    e = next(k for k in range(2000, len(ev)) if ev[k][0] == "a")
    b.js("hbmView.select(%d)" % (e - 4))
    row = b.js("(() => { const d = document.querySelector('#events [data-p=\"%d\"]'); d.scrollIntoView({block: 'center'}); "
               "const r = d.getBoundingClientRect(); return [r.left + 40, r.top + r.height / 2, d.textContent]; })()" % (e + 1))
    b.mouse("pressed", row[0], row[1])
    b.mouse("released", row[0], row[1])
    fig = figures(b)
    check("event_click_goes_there", b.js("hbmView.selected()") == e + 1 and fig["live allocations"] == live_after(ev, e),
          "selected %s, figures %s, trace %d after event %d" % (b.js("hbmView.selected()"), fig, live_after(ev, e), e))
    check("event_row_says_what", re.match(r"event %d: alloc #\d+ .*\(%d B requested\)" % (e, ev[e][2]), row[2]) is not None,
          "row %r, trace %s" % (row[2], ev[e]))
    check("event_row_marked", b.js("document.querySelector('#events .sel').dataset.p") == str(e + 1), "")
    f = next(k for k in range(e, len(ev)) if ev[k][0] == "f")
    b.js("hbmView.select(%d)" % (f + 1))
    text = b.js("document.querySelector('#events .sel').textContent")
    check("event_row_free", re.match(r"event %d: free #\d+" % f, text) is not None, "row %r" % text)
    b.screenshot(os.path.join(OUT, "view-events.png"))
    # The active cached segment timeline (item 11): the empty_cache trace's 20 MiB segment, reserved at event 0 and
    # released by the empty_cache at event 6, hovered; that event's row says so.
    b.open(os.path.join(OUT, "view-empty_cache.html"))
    tip = hover_at(b, b.js("hbmView.segPoint(hbmView.largestSeg())"))
    check("segment_timeline_hover", tip.startswith("segment: 20.00 MiB at 0x") and "reserved at event 0," in tip
          and "released at event 6 " in tip, "tooltip %r" % tip)
    b.js("hbmView.select(7)")
    text = b.js("document.querySelector('#events .sel').textContent")
    check("event_row_empty_cache", text.startswith("event 6: empty_cache: segment_free 20.00 MiB"), "row %r" % text)
    # A large run's list is its moments.
    b.open(large)
    b.js("hbmView.select(hbmView.first())")
    row = b.js("(() => { const d = document.querySelectorAll('#events [data-p]')[1]; d.scrollIntoView({block: 'center'}); "
               "const r = d.getBoundingClientRect(); return [r.left + 40, r.top + r.height / 2, Number(d.dataset.p)]; })()")
    b.mouse("pressed", row[0], row[1])
    b.mouse("released", row[0], row[1])
    check("large_event_list_moments", b.js("hbmView.selected()") == row[2] and b.js("RUNS[0].moments[1].p") == row[2],
          "selected %s, row %s" % (b.js("hbmView.selected()"), row[2]))
    check("events_clean", not b.problems(), "; ".join(b.problems()))

    # A window 900 pixels wide (item 10): nothing sticks out, the curves' labels inside their chart and apart; a
    # tooltip of long frame paths (a snapshot's files renamed into deep folders) stays inside the window, its text
    # inside it, also hovered at the window's bottom edge.
    snapd = pickle.load(open(snap, "rb"))  # tests/data: plain data, read with Python's own pickle
    deep = "/" + "/".join("a_folder_name_with_no_space_to_break_at_%d" % k for k in range(6))
    for fr in [f for e in snapd["device_traces"][0] for f in e.get("frames", [])] + \
              [f for g in snapd["segments"] for f in g.get("frames", []) + [x for blk in g["blocks"] for x in blk.get("frames", [])]]:
        if fr.get("filename", "").endswith(".py"):
            fr["filename"] = deep + "/" + os.path.basename(fr["filename"])
    longp = os.path.join(OUT, "long-frames.pickle")
    with open(longp, "wb") as f:
        pickle.dump(snapd, f, protocol=4)
    longv = os.path.join(OUT, "view-long-frames.html")
    subprocess.run([BIN, "view", longp, "-o", longv], check=True, stdout=subprocess.DEVNULL)
    b.width(900)
    for name, path in (("view", page), ("cs336", csp), ("ab", ab), ("large", large), ("sweep", sw), ("long", longv)):
        b.open(path)
        check("narrow_%s_fits" % name, not overflow(b), overflow(b))
        check("narrow_%s_labels_apart" % name, not labels_apart(b), labels_apart(b))
        check("narrow_%s_labels_clear" % name, not labels_clear(b), labels_clear(b))
        if name in ("ab", "sweep"):  # (issue #36 item 13) a setting is never broken inside
            check("narrow_%s_table_words_whole" % name, not words_broken(b), words_broken(b))
        if name == "cs336":
            b.screenshot(os.path.join(OUT, "view-900.png"))
    for where in (None, 30):
        tip = hover_at(b, b.js("hbmView.bandPoint(hbmView.largest())"), where)
        check("narrow_tooltip_inside" + ("_at_the_bottom" if where else ""), deep in tip and not tip_inside(b),
              tip_inside(b) or "tooltip %r" % tip[:200])
    b.screenshot(os.path.join(OUT, "view-900-tooltip.png"))
    check("narrow_clean", not b.problems(), "; ".join(b.problems()))
    b.width(None)
finally:
    b.close()

with open(os.path.join(OUT, "browser.txt"), "w") as f:
    f.write("\n".join(notes) + "\n")
print("\n".join(notes))
sys.exit(min(failed(), 100))
