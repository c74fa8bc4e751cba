#!/usr/bin/env bash
# Offline plans (hbmalloc plan) on every shared trace: the plan's height / peak live requested bytes, the best
# greedy order's, the evaluations the search made and the time. Geometric mean and max over the 11 PyTorch GPU
# snapshots and the 7 MindSpore SOMAS graphs (issue #16's groups); the MiniMalloc and other traces listed apart.
# usage: bench/plan.sh [HBMALLOC_BINARY] [TRACES_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/hbmalloc}
shared=${2:-$here/../shared/traces}
row() { # group file
    local start end out
    start=$(date +%s.%N)
    out=$("$bin" plan "$2" --json)
    end=$(date +%s.%N)
    python3 -c "import json,sys; d=json.loads(sys.argv[1]); g=d['greedy_height']/d['peak_live']
print(sys.argv[2], sys.argv[3], d['allocations'], '%.4f' % g, '%.4f' % d['ratio'], d['evaluations'], '%.1f' % float(sys.argv[4]))" \
        "$out" "$1" "$(basename "$2" | sed 's/\.[a-z]*$//')" "$(echo "$end - $start" | bc)"
}
{
    for f in "$shared"/pytorch-snapshot/*.pickle; do row gpu "$f"; done
    for f in "$shared"/lifetimes/mindspore-somas/*.csv; do row somas "$f"; done
    for f in "$shared"/lifetimes/minimalloc-asplos2024/*.csv "$shared"/lifetimes/iree/*.csv; do row other "$f"; done
    row other "$here/examples/cpu-transformer-trainstep.trace"
    row other "$here/examples/finetune-varlen.trace"
} | python3 -c "
import sys, math
rows = [l.split() for l in sys.stdin]
print('| trace | group | allocations | greedy (best of 8) | plan | evaluations | seconds |')
print('|---|---|---|---|---|---|---|')
for g, name, n, gr, pl, ev, s in rows:
    print(f'| {name} | {g} | {n} | {gr} | {pl} | {ev} | {s} |')
print()
for grp in ('gpu', 'somas'):
    r = [float(x[4]) for x in rows if x[0] == grp]
    gmean = math.exp(sum(math.log(x) for x in r) / len(r))
    print(f'{grp}: {len(r)} traces, plan gmean {gmean:.4f}, max {max(r):.4f}')
both = [float(x[4]) for x in rows if x[0] in ('gpu', 'somas')]
print(f'the 18: plan gmean {math.exp(sum(math.log(x) for x in both) / len(both)):.4f}, max {max(both):.4f}')
"
