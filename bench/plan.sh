#!/usr/bin/env bash
# Offline plans (hbmalloc plan) on every shared trace: the plan's height / peak live requested bytes, the best
# greedy order's, the evaluations the search made and the time. Geometric mean and max over the 11 PyTorch GPU
# snapshots and the 7 MindSpore SOMAS graphs (issue #16's groups); the MiniMalloc and other traces listed apart.
# The last column: the share of the 2 MiB pages below the plan's height that some planned allocation covers (how
# much of a region reserved whole one pass of the plan touches; docs/POLICY.md, the step plan with virtual memory).
# usage: bench/plan.sh [HBMALLOC_BINARY] [TRACES_DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/hbmalloc}
shared=${2:-$here/../shared/traces}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
row() { # group file
    local start end out
    start=$(date +%s.%N)
    out=$("$bin" plan "$2" --json -o "$tmp/plan")
    end=$(date +%s.%N)
    python3 -c "import json,sys; d=json.loads(sys.argv[1]); g=d['greedy_height']/d['peak_live']
P = 2 << 20
pages = set()
for line in open(sys.argv[5]):
    f = line.split()
    if f and f[0].isdigit():
        off, size = int(f[1]), int(f[2])
        pages.update(range(off // P, (off + size - 1) // P + 1))
used = len(pages) / -(-d['height'] // P)
print(sys.argv[2], sys.argv[3], d['allocations'], '%.4f' % g, '%.4f' % d['ratio'], d['evaluations'], '%.1f' % float(sys.argv[4]),
      '%.1f%%' % (100 * used))" \
        "$out" "$1" "$(basename "$2" | sed 's/\.[a-z]*$//')" "$(echo "$end - $start" | bc)" "$tmp/plan"
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
print('| trace | group | allocations | greedy (best of 8) | plan | evaluations | seconds | 2 MiB pages used |')
print('|---|---|---|---|---|---|---|---|')
for g, name, n, gr, pl, ev, s, used in rows:
    print(f'| {name} | {g} | {n} | {gr} | {pl} | {ev} | {s} | {used} |')
print()
for grp in ('gpu', 'somas'):
    r = [float(x[4]) for x in rows if x[0] == grp]
    gmean = math.exp(sum(math.log(x) for x in r) / len(r))
    print(f'{grp}: {len(r)} traces, plan gmean {gmean:.4f}, max {max(r):.4f}')
both = [float(x[4]) for x in rows if x[0] in ('gpu', 'somas')]
print(f'the 18: plan gmean {math.exp(sum(math.log(x) for x in both) / len(both)):.4f}, max {max(both):.4f}')
"
