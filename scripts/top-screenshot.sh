#!/bin/sh
# The screenshots of docs/MONITOR.md: `hbmalloc top` in a tmux pane of a private tmux server, at 150 columns and
# resized to 80, over four ranks of a stand-in job (the PyTorch plug-in, loaded as torch loads it, on the simulated
# device with two devices, allocating in steps). The pane's text is drawn as an SVG (DejaVu Sans Mono) and rendered
# by librsvg's rsvg-convert.
# usage: scripts/top-screenshot.sh HBMALLOC PLUGIN OUTDIR   (e.g. build/hbmalloc build/libhbmalloc_torch.so
#        docs/images: writes top.png, top-80.png and the texts top.txt, top-80.txt)
set -eu
bin=$1 plugin=$2 out=$3
tmp=$(mktemp -d)
pids=""
tm() { tmux -S "$tmp/tmux" -f /dev/null "$@"; }
trap 'tm kill-server 2>/dev/null || true; [ -z "$pids" ] || kill $pids 2>/dev/null || true; rm -rf "$tmp"' EXIT
export HBMALLOC_TOP_DIR="$tmp/records"
mkdir -m 700 "$HBMALLOC_TOP_DIR"
cat >"$tmp/job.py" <<'PY'
import ctypes, math, os, sys, time
lib = ctypes.CDLL(sys.argv[1])
lib.hbm_torch_raw_alloc.restype = ctypes.c_void_p
lib.hbm_torch_raw_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.hbm_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
rank, MiB = int(os.environ["RANK"]), 1 << 20
dev = rank // 2
weights = [lib.hbm_torch_raw_alloc((300 + 37 * rank) * MiB, dev, None) for _ in range(8)]
step = 0
while True:
    acts = [lib.hbm_torch_raw_alloc((120 + 17 * i + 11 * rank) * MiB, dev, None)
            for i in range(6 + int(4 * (1 + math.sin(step / 3 + rank))))]
    time.sleep(0.35)
    for p in acts:
        lib.hbm_torch_free(p, 0, dev, None)
    if step % 5 == 4:
        lib.hbm_torch_empty_cache()
    step += 1
    time.sleep(0.35)
PY
# Each rank's runtime context and communicators hold 600 MiB beside hbmalloc (the OUTSIDE column); rank 3 shares its
# device with another process of 2 GiB.
for r in 0 1 2 3; do
    others=$([ $r -eq 3 ] && echo 2GiB || echo 0)
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=4 HBMALLOC_QUIET=1 \
        HBMALLOC_BACKEND=sim:capacity=80GiB,devices=2,context=600MiB,others=$others python3 "$tmp/job.py" "$plugin" &
    pids="$pids $!"
done
sleep 1
tm new-session -d -s top -x 150 -y 14 \
    "env -i PATH='$PATH' TERM=screen LANG=C.UTF-8 HBMALLOC_TOP_DIR='$HBMALLOC_TOP_DIR' '$bin' top --interval 0.5"
sleep 6
tm capture-pane -p -t top >"$out/top.txt"
tm resize-window -t top -x 80 -y 14
sleep 0.3
tm capture-pane -p -t top >"$out/top-80.txt"
for f in top:150 top-80:80; do
    python3 - "$out/${f%:*}.txt" "$tmp/${f%:*}.svg" "${f#*:}" <<'PY'
import html, sys
src, out, cols = sys.argv[1], sys.argv[2], int(sys.argv[3])
lines = open(src, encoding="utf-8").read().rstrip("\n").split("\n")
while lines and not lines[-1].strip():
    lines.pop()
size, cw, lh, pad = 14, 8.43, 19, 12
w, h = int(cols * cw + 2 * pad), int(len(lines) * lh + 2 * pad)
o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d">' % (w, h, w, h),
     '<rect width="100%" height="100%" fill="#1e1e1e"/>',
     '<g font-family="DejaVu Sans Mono" font-size="%d" fill="#d4d4d4">' % size]
for i, l in enumerate(lines):
    style = ' font-weight="bold" fill="#ffffff"' if l.startswith(("RANK", "hbmalloc top")) else ""
    style = ' fill="#9cdcfe"' if l.startswith("total") else style
    if l:
        o.append('<text x="%d" y="%d" xml:space="preserve" textLength="%.1f" lengthAdjust="spacingAndGlyphs"%s>%s'
                 '</text>' % (pad, pad + (i + 1) * lh - 5, len(l) * cw, style, html.escape(l)))
o.append("</g></svg>")
open(out, "w").write("\n".join(o))
PY
    rsvg-convert "$tmp/${f%:*}.svg" -o "$out/${f%:*}.png"
done
echo "wrote $out/top.png, $out/top-80.png"
