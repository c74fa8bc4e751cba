#!/usr/bin/env bash
# Fidelity: PyTorch's own peak reserved (from a snapshot's segment events) against hbmalloc's replay of the same
# snapshot with the settings it recorded, once from the state the recording began in (the default: segments and
# blocks worked back from the end through the history) and once from an empty device (--fresh-start).
# usage: bench/fidelity.sh [HBMALLOC_BINARY] [TRACES_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/hbmalloc}
shared=${2:-$here/../shared/traces}
num() { sed -n "s/^$1: .*(\([0-9]*\) bytes).*/\1/p"; }
diff_pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == b) print "0"; else printf "%+.2f%%", 100 * (a - b) / b }'; }
echo "| snapshot | reserved when recording began | PyTorch peak reserved | hbmalloc from the recorded start | difference | hbmalloc from an empty device | difference |"
echo "|---|---|---|---|---|---|---|"
for f in "$shared"/pytorch-snapshot/*.pickle; do
    seeded=$("$bin" replay "$f")
    fresh=$("$bin" replay "$f" --fresh-start)
    rec=$(printf '%s\n' "$seeded" | sed -n 's/^recorded: *peak reserved .*(\([0-9]*\) bytes).*/\1/p')
    a=$(printf '%s\n' "$seeded" | num "peak reserved")
    b=$(printf '%s\n' "$fresh" | num "peak reserved")
    start=$(printf '%s\n' "$seeded" | sed -n 's/^recording: *began with \([0-9.]* [KMGT]*i*B\) reserved.*/\1/p')
    echo "| $(basename "$f" .pickle) | ${start:-0} | $rec | $a | $(diff_pct "$a" "$rec") | $b | $(diff_pct "$b" "$rec") |"
done
