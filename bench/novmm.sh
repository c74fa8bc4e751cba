#!/usr/bin/env bash
# Footprint without virtual memory (issue #16): on the simulated device with HDK 22.0.3's firmware (no VMM), the
# smallest capacity each trace runs in, divided by its peak live requested bytes, under PyTorch's policy (whole
# segments, hbmalloc's default) and under the hbm_arena policy (the arena sized to the whole device, so the
# capacity is the arena the trace needs); beside them the offline plan's height (hbmalloc plan), the bound a
# plan learned from the run can reach, and that plan written to a file and served by the allocator
# (hbm_plan_file) in a replay of the trace that made it (peak reserved, and the smallest capacity that replay runs
# in). Geometric mean and max over the 11 PyTorch GPU snapshots and the 7
# MindSpore SOMAS graphs. Snapshots replay from an empty device (--fresh-start), as plan reads them.
# usage: bench/novmm.sh [HBMALLOC_BINARY] [TRACES_DIR]
set -euo pipefail
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/hbmalloc}
shared=${2:-$here/../shared/traces}
min_cap() { # trace settings -> bytes
    "$bin" replay "$1" --fresh-start --backend sim:firmware=22.0.3 --conf "$2" --min-capacity \
        | sed -n 's/^minimum capacity: .*(\([0-9]*\) bytes.*/\1/p'
}
{
    for f in "$shared"/pytorch-snapshot/*.pickle "$shared"/lifetimes/mindspore-somas/*.csv; do
        case $f in *.pickle) g=gpu ;; *) g=somas ;; esac
        plan=$("$bin" plan "$f" --json)
        live=$(printf '%s' "$plan" | sed 's/.*"peak_live":\([0-9]*\).*/\1/')
        height=$(printf '%s' "$plan" | sed 's/.*"height":\([0-9]*\).*/\1/')
        "$bin" plan "$f" -o "$tmp/p.plan" >/dev/null
        served=$("$bin" replay "$f" --fresh-start --backend sim:firmware=22.0.3 --conf "hbm_plan_file:$tmp/p.plan" |
            sed -n 's/^peak reserved: .*(\([0-9]*\) bytes).*/\1/p')
        echo "$g $(basename "$f" | sed 's/\.[a-z]*$//') $live $(min_cap "$f" "") $(min_cap "$f" hbm_arena_fraction:1) $height $served \
$(min_cap "$f" "hbm_plan_file:$tmp/p.plan")"
    done
} | python3 -c "
import sys, math
rows = [l.split() for l in sys.stdin]
print('| trace | group | peak live | whole segments (default) | hbm_arena | offline plan | the plan file served (replay) | its smallest capacity |')
print('|---|---|---|---|---|---|---|---|')
for g, n, live, d, a, p, s, m in rows:
    live = int(live)
    print(f'| {n} | {g} | {live / 2**20:.1f} MiB | {int(d) / live:.4f} | {int(a) / live:.4f} | {int(p) / live:.4f} | {int(s) / live:.4f} | {int(m) / live:.4f} |')
print()
print('| group (gmean / max) | whole segments (default) | hbm_arena | offline plan | the plan file served | its smallest capacity |')
print('|---|---|---|---|---|---|')
def stat(sel, col):
    r = [int(x[col]) / int(x[2]) for x in rows if sel(x)]
    return math.exp(sum(map(math.log, r)) / len(r)), max(r)
for name, sel in (('11 GPU snapshots', lambda x: x[0] == 'gpu'), ('7 SOMAS graphs', lambda x: x[0] == 'somas'),
                  ('all 18', lambda x: True)):
    cells = ' | '.join('%.4f / %.4f' % stat(sel, c) for c in (3, 4, 5, 6, 7))
    print(f'| {name} | {cells} |')
"
