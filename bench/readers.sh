#!/usr/bin/env bash
# Reader resources: peak memory and time of `hbmalloc replay` per byte of input, on real snapshots, on a large
# snapshot hbmalloc wrote itself, and on hostile pickles built to multiply work (memo references repeating a
# segment and its blocks; one big dict shared by every event). Each must stay under the bounds below or be
# refused; the script exits 1 if one does not. A benchmark, not a timed test: run it on a quiet machine.
# usage: bench/readers.sh [HBMALLOC_BINARY] [MORE_SNAPSHOTS...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/hbmalloc}
shift || true
mem_per_byte=16    # peak RSS above an empty input's, per input byte, above a 4 MiB floor
ns_per_byte=200    # wall time per input byte, above a 0.05 s floor
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 "$here/scripts/gen_varlen_trace.py" -o "$tmp/long.trace" --steps 400 >/dev/null
"$bin" replay "$tmp/long.trace" --snapshot "$tmp/written-by-hbmalloc.pickle" >/dev/null
python3 - "$tmp" <<'EOF'
import pickle, sys
out = sys.argv[1]
def dump(name, obj):
    with open(f"{out}/{name}.pickle", "wb") as f:
        pickle.dump(obj, f, protocol=4)
# 20,000 references to one segment whose blocks are 20,000 references to one block: 4e8 blocks if walked as copies.
blk = {"size": 512, "requested_size": 512, "state": "active_allocated"}
seg = {"device": 0, "address": 1 << 30, "total_size": 512 * 20000, "stream": 0, "blocks": [blk] * 20000}
dump("hostile-memo-repeats", {"segments": [seg] * 20000, "device_traces": [[]]})
# One dict of 50,000 keys shared by 200,000 events: each lookup scanned it when dicts were searched linearly.
big = {f"k{i}": i for i in range(50000)}
big.update({"action": "segment_alloc", "addr": 4096, "size": 2 << 20, "stream": 0})
dump("hostile-shared-dict", {"segments": [], "device_traces": [[big] * 200000]})
EOF
printf '\x80\x04N.' >"$tmp/empty.pickle"
rss() { { /usr/bin/time -f "%M %e" "$bin" replay "$1" 2>&1 >/dev/null || true; } | tail -1; }
base=$(rss "$tmp/empty.pickle" | cut -d' ' -f1)
fail=0
echo "| input | bytes | result | peak RSS | RSS per byte (above empty) | time | ns per byte |"
echo "|---|---|---|---|---|---|---|"
for f in "$here"/tests/data/*.pickle "$tmp"/*.pickle "$@"; do
    [ "$(basename "$f")" = empty.pickle ] && continue
    bytes=$(stat -c %s "$f")
    set +e
    "$bin" replay "$f" >/dev/null 2>"$tmp/err"
    rc=$?
    set -e
    case $rc in 0|1) result=read ;; *) result="refused: $(head -c 90 "$tmp/err" | sed 's/.*: //')" ;; esac
    read -r kb secs < <(rss "$f")
    row=$(awk -v kb="$kb" -v base="$base" -v b="$bytes" -v s="$secs" -v m="$mem_per_byte" -v n="$ns_per_byte" 'BEGIN {
        per = (kb - base) * 1024 / b; ns = s * 1e9 / b
        ok = ((kb - base) * 1024 <= 4194304 + m * b && s <= 0.05 + n * b / 1e9)
        printf "%.0f MB | %.2f | %.2f s | %.0f | %s", kb / 1024, per < 0 ? 0 : per, s, ns, ok ? "ok" : "OVER" }')
    echo "| $(basename "$f") | $bytes | $result | ${row% | *} |"
    case $row in *OVER) fail=1; echo "over the bound: $f" >&2 ;; esac
done
echo
echo "bounds: peak RSS above an empty input <= 4 MiB + $mem_per_byte bytes per input byte; time <= 0.05 s + $ns_per_byte ns per byte"
exit $fail
