#!/usr/bin/env bash
# Reader resources: peak memory and time of `hbmalloc replay` per byte of input, on real snapshots, on a large
# snapshot hbmalloc wrote itself, and on inputs built to cost the readers time or memory (bench/reader_shapes.py:
# memo references repeating segments, events or frames, a dict shared by every event, a frame with a
# 16,000-character name, distinct frames naming it, small containers nested or repeated, a far memo index, and
# text and CSV lines of 2 to 7 bytes each making an event). Each must stay under the bounds below or be refused;
# the script exits 1 if one does not. A benchmark, not a timed test: run it on a quiet machine.
#
# The bounds (docs/RELIABILITY.md): memory 4 MiB + 16 bytes per input byte, time 0.05 s + 200 ns per byte. A
# replay also drives the allocator, whose blocks take ALLOCATOR_BLOCK bytes each (an hbm__block and its place in
# the address map, measured 178); the most blocks it holds at once (active.all.peak + inactive_split.all.peak of
# --stats) are counted apart: a line of 7 bytes that makes a live block costs the allocator 25 bytes per byte,
# whatever the reader does. The column "per byte, reader" is the rest.
# usage: bench/readers.sh [HBMALLOC_BINARY] [MORE_SNAPSHOTS...]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/hbmalloc}
shift || true
mem_per_byte=16      # peak RSS above an empty input's, per input byte, above a 4 MiB floor
ns_per_byte=200      # wall time per input byte, above a 0.05 s floor
allocator_block=200  # host bytes the allocator holds per block (178 measured), counted apart
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 "$here/tools/trace/gen_varlen_trace.py" -o "$tmp/long.trace" --steps 400 >/dev/null
"$bin" replay "$tmp/long.trace" --snapshot "$tmp/written-by-hbmalloc.pickle" >/dev/null
rm "$tmp/long.trace"
python3 "$here/bench/reader_shapes.py" "$tmp"
printf '\x80\x04N.' >"$tmp/empty.pickle"
/usr/bin/time -f "%M" -o "$tmp/time" "$bin" replay "$tmp/empty.pickle" >/dev/null 2>&1 || true
base=$(tail -1 "$tmp/time")
fail=0
# row NAME FILE COMMAND...: one row of the table (the command's peak RSS and time); blocks from its --stats when
# it is a replay, else from $blocks; the time bound is for $runs replays.
row() {
    local name=$1 f=$2 rc result kb secs
    shift 2
    bytes=$(stat -c %s "$f")
    set +e
    /usr/bin/time -f "%M %e" -o "$tmp/time" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
    set -e
    read -r kb secs < <(tail -1 "$tmp/time")
    case $rc in 0|1) result=read ;; *) result="refused: $(head -c 100 "$tmp/err" | sed 's/.*: //')" ;; esac
    if grep -q '^active.all.peak' "$tmp/out"; then
        blocks=$(awk '/^active.all.peak|^inactive_split.all.peak/ {s += $2} END {print s + 0}' "$tmp/out")
    fi
    [ "$rc" -le 1 ] || blocks=0
    local r
    r=$(awk -v kb="$kb" -v base="$base" -v b="$bytes" -v s="$secs" -v m="$mem_per_byte" -v n="$ns_per_byte" \
        -v blk="$blocks" -v ab="$allocator_block" -v runs="$runs" 'BEGIN {
        above = (kb - base) * 1024; if (above < 0) above = 0
        reader = above - blk * ab; if (reader < 0) reader = 0
        ok = (above <= 4194304 + m * b + ab * blk && s <= runs * (0.05 + n * b / 1e9))
        rate = s > 0 ? sprintf("%.0f", b / s / 1e6) : "-"
        printf "%.0f MB | %.2f | %d | %.2f | %.2f s | %.0f | %s | %s", kb / 1024, above / b, blk, reader / b, s,
               s * 1e9 / b, rate, (ok ? "ok" : "OVER") }')
    echo "| $name | $bytes | $result | $r |"
    case $r in *OVER) fail=1; echo "over the bound: $name" >&2 ;; esac
}
echo "| input | bytes | result | peak RSS | per byte | allocator's blocks | per byte, reader | time | ns per byte | MB/s | |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for f in "$here"/tests/data/*.pickle "$tmp"/*.pickle "$tmp"/*.csv "$tmp"/*.trace "$@"; do
    [ "$(basename "$f")" = empty.pickle ] && continue
    blocks=0 runs=1
    row "$(basename "$f")" "$f" "$bin" replay "$f" --stats
done
# sweep shares the trace between its replays and runs as many at once as the bound allows (each holds its own
# allocator): four asked for, on the CSV whose million rows all live at once; four replays' time.
blocks=0 runs=4
"$bin" replay "$tmp/hostile-lifetimes.csv" --stats >"$tmp/out" 2>&1 || true
blocks=$(awk '/^active.all.peak|^inactive_split.all.peak/ {s += $2} END {print s + 0}' "$tmp/out")
row "sweep --jobs 4 hostile-lifetimes.csv" "$tmp/hostile-lifetimes.csv" \
    "$bin" sweep "$tmp/hostile-lifetimes.csv" --jobs 4 --grid 'max_split_size_mb=-,64,256,1024'
echo
echo "bounds: peak RSS above an empty input <= 4 MiB + $mem_per_byte bytes per input byte + $allocator_block bytes per" \
     "allocator block; time <= 0.05 s + $ns_per_byte ns per byte"
exit $fail
