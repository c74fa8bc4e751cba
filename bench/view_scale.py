#!/usr/bin/python3
"""hbmalloc view's page at scale: write the page of a large trace, load it in headless Chromium, measure.

usage: bench/view_scale.py HBMALLOC TRACE [TRACE...]

For each trace: the page's size, `hbmalloc view`'s peak RSS and time, and in the browser the time from navigation to
everything drawn (the page's own mark), then the time per frame while the slider is scrubbed (200 moves, median and
95th percentile) and while the mouse moves over the timeline. A benchmark (run it on a quiet machine), not a test.
"""
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from cdp import Browser  # noqa: E402

BIN = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="hbm-view-scale-")
print("| trace | bytes | events | page | view: RSS, time | drawn after | scrub: median / p95 per frame | hover: median |")
print("|---|---|---|---|---|---|---|---|")
b = Browser()
try:
    for trace in sys.argv[2:]:
        page = os.path.join(tmp, "page.html")
        r = subprocess.run(["/usr/bin/time", "-f", "%M %e", BIN, "view", trace, "--conf", "", "-o", page],
                           capture_output=True, text=True)
        rss_kb, secs = r.stderr.strip().split("\n")[-1].split()
        t0 = time.time()
        b.open(page)
        drawn = b.js("hbmView.readyMs")
        events = b.js("RUNS[0].events")
        scrub = b.js("""(async () => { const s = document.getElementById('ev'); let t = [];
            for (let k = 0; k < 200; k++) { const t0 = performance.now();
              s.value = String(Number(s.min) + Math.floor((Number(s.max) - Number(s.min)) * k / 199));
              s.dispatchEvent(new Event('input')); await new Promise(r => requestAnimationFrame(r));
              t.push(performance.now() - t0); }
            t.sort((a, b) => a - b); return [t[100], t[190]]; })()""")
        hover = b.js("""(async () => { const c = document.getElementById('timeline'), r = c.getBoundingClientRect();
            let t = [];
            for (let k = 0; k < 100; k++) { const t0 = performance.now();
              c.dispatchEvent(new MouseEvent('mousemove', {clientX: r.left + 100 + k * 10, clientY: r.top + 200, bubbles: true}));
              await new Promise(r => requestAnimationFrame(r)); t.push(performance.now() - t0); }
            t.sort((a, b) => a - b); return t[50]; })()""")
        probs = b.problems()
        print("| %s | %.1f MB | %d | %.1f MB | %.0f MB, %s s | %.1f s | %.0f / %.0f ms | %.0f ms |%s"
              % (os.path.basename(trace), os.path.getsize(trace) / 1e6, events, os.path.getsize(page) / 1e6, int(rss_kb) / 1024, secs,
                 drawn / 1000, scrub[0], scrub[1], hover, " problems: " + "; ".join(probs) if probs else ""))
finally:
    b.close()
