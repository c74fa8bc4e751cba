#!/usr/bin/env bash
# Peak reserved / peak allocated per trace: whole segments (PyTorch's default),
# expandable segments, expandable segments with hbm_remap_free_pages, and the
# same with 2 MiB large-pool pages (hbm_expandable_page_mb:2).
# Replays every trace with an event history in ../shared/traces (converted to
# hbmalloc's format in a scratch folder) and the bundled examples.
#
# With BENCH_PAGES (build/bench/bench_pages), also where the free memory sits at peak reserved on the traces
# still above 1.02 with the best policy.
#
# usage: bench/expandable.sh [HBMALLOC_BINARY] [TRACES_DIR] [BENCH_PAGES]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/hbmalloc}
shared=${2:-$here/../shared/traces}
pages=${3:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -d "$shared" ]; then
    for f in "$shared"/pytorch-snapshot/*.pickle; do
        [ -e "$f" ] && python3 "$here/tools/trace/snapshot2trace.py" "$f" -o "$tmp/$(basename "$f" .pickle).trace" 2>/dev/null
    done
    for f in "$shared"/lifetimes/*/*.csv; do
        [ -e "$f" ] && python3 "$here/tools/trace/lifetimes2trace.py" "$f" -o "$tmp/$(basename "$f" .csv).trace"
    done
    for f in "$shared"/generated-here/*.ev; do
        [ -e "$f" ] && cp "$f" "$tmp/$(basename "$f" .ev).trace"
    done
else
    echo "note: $shared not found; only the bundled examples" >&2
fi
cp "$here"/examples/finetune-varlen.trace "$tmp/"

bytes() { sed -n "s/^$1: .*(\([0-9]*\) bytes)$/\1/p"; }
ratio() { # trace conf
    out=$("$bin" replay "$1" --conf "$2" --capacity 1TiB)
    a=$(printf '%s\n' "$out" | bytes "peak allocated *")
    r=$(printf '%s\n' "$out" | bytes "peak reserved *")
    echo "$a $r"
}
printf '| trace | peak allocated | whole segments | expandable | expandable + remap | expandable + remap + 2 MiB pages | expandable: reserved - allocated |\n'
printf '|---|---|---|---|---|---|---|\n'
met=0 met_best=0 total=0 over=() tiny=0
best="expandable_segments:True,hbm_remap_free_pages:True,hbm_expandable_page_mb:2"
for t in "$tmp"/*.trace; do
    read -r an rn < <(ratio "$t" "")
    read -r ae re < <(ratio "$t" "expandable_segments:True")
    read -r ax rx < <(ratio "$t" "expandable_segments:True,hbm_remap_free_pages:True")
    read -r ap rp < <(ratio "$t" "$best")
    awk -v n="$(basename "$t" .trace)" -v an="$an" -v rn="$rn" -v ae="$ae" -v re="$re" -v ax="$ax" -v rx="$rx" \
        -v ap="$ap" -v rp="$rp" \
        'BEGIN { printf "| %s | %.1f MiB | %.4f | %.4f | %.4f | %.4f | %.1f MiB |\n", n, ae / 1048576, rn / an, re / ae, rx / ax, rp / ap, (re - ae) / 1048576 }'
    total=$((total + 1))
    awk -v re="$re" -v ae="$ae" 'BEGIN { exit !(re / ae <= 1.02) }' && met=$((met + 1))
    if awk -v re="$rp" -v ae="$ap" 'BEGIN { exit !(re / ae <= 1.02) }'; then
        met_best=$((met_best + 1))
    elif [ "$ap" -ge $((8 << 20)) ]; then
        over+=("$t")
    else
        tiny=$((tiny + 1))
    fi
done
echo
echo "expandable segments (PyTorch's policy): peak reserved / peak allocated <= 1.02 on $met of $total traces"
echo "with $best: <= 1.02 on $met_best of $total traces"
if [ -n "$pages" ] && [ ${#over[@]} -gt 0 ]; then
    echo
    echo "where the free memory is at peak reserved, with $best, on the traces above 1.02"
    echo "(the $tiny other traces above 1.02 peak under 8 MiB allocated: one 2 MiB page is a quarter of their peak or more):"
    echo
    "$pages" "$best" "${over[@]}"
fi
