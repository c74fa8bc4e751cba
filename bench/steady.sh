#!/usr/bin/env bash
# The step plan's steady state on the 18 shared traces (issue #16's footprint targets), on the simulated device
# with HDK 22.0.3's firmware (no virtual memory): each one-step trace made a training run by
# tools/trace/repeat_trace.py (the blocks live before the recording began kept, as parameters are; the step repeated
# STEPS times, its blocks freed at its end, hbm_step after each), replayed with hbm_step_plan:True. Columns: peak
# live requested bytes; the last step's peak reserved / its peak live (the steady state) for the default and the
# step plan, the step plan's share of that step's allocations served from the plan; the whole run's peak reserved /
# peak live and its smallest capacity / peak live, for PyTorch's policy (the default) and the step plan; the
# offline plan's height (hbmalloc plan, every lifetime known: the bound). Geometric mean and max per group.
# With a fourth argument `vmm`: on a simulated device with virtual memory, expandable segments in force in both runs
# (expandable_segments:True against expandable_segments:True,hbm_step_plan:True).
# usage: bench/steady.sh [HBMALLOC_BINARY] [TRACES_DIR] [STEPS] [vmm]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$here/build/hbmalloc}
shared=${2:-$here/../shared/traces}
steps=${3:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
be=sim:firmware=22.0.3
base_conf=
if [ "${4:-}" = vmm ]; then
    be=sim
    base_conf=expandable_segments:True
fi
plan_conf=${base_conf:+$base_conf,}hbm_step_plan:True
bytes() { sed -n "s/^$1: .*(\([0-9]*\) bytes.*/\1/p"; }
{
    for f in "$shared"/pytorch-snapshot/*.pickle "$shared"/lifetimes/mindspore-somas/*.csv; do
        name=$(basename "$f" | sed 's/\.[a-z]*$//')
        case $f in
        *.pickle) g=gpu; python3 "$here/tools/trace/snapshot2trace.py" "$f" -o "$tmp/one.trace" >/dev/null 2>&1 ;;
        *) g=somas; python3 "$here/tools/trace/lifetimes2trace.py" "$f" -o "$tmp/one.trace" >/dev/null ;;
        esac
        python3 "$here/tools/trace/repeat_trace.py" "$tmp/one.trace" --times "$steps" >"$tmp/run.trace"
        plan=$("$bin" replay "$tmp/run.trace" --backend "$be" --conf "$plan_conf")
        base=$("$bin" replay "$tmp/run.trace" --backend "$be" --conf "$base_conf")
        live=$(printf '%s\n' "$plan" | bytes "peak requested")
        # the per-step table's last step with allocations: its ratio (peak reserved / its peak live) and served share
        laststep() { awk '
            /^  step  allocs/ { on = 1; next }
            on && /^ +[0-9]+\+? / { if ($2 > 0) { r = $10; s = $3 / $2 } }
            on && !/^ +[0-9]+\+? / { on = 0 }
            END { printf "%s %.4f", r, s }'; }
        last=$(printf '%s\n' "$plan" | laststep)
        lastbase=$(printf '%s\n' "$base" | laststep | cut -d' ' -f1)
        mincap() { "$bin" replay "$tmp/run.trace" --backend "$be" --conf "$1" --min-capacity | bytes "minimum capacity"; }
        height=$("$bin" plan "$tmp/one.trace" --json | sed 's/.*"height":\([0-9]*\).*/\1/')
        echo "$g $name $live $lastbase $last $(printf '%s\n' "$base" | bytes "peak reserved") \
$(printf '%s\n' "$plan" | bytes "peak reserved") $(mincap "$base_conf") $(mincap "$plan_conf") $height"
    done
} | python3 -c "
import sys, math
rows = [l.split() for l in sys.stdin]
print('| trace | group | peak live | last step, reserved / live: default | step plan | served | run peak: default | step plan | min capacity: default | step plan | offline plan |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for g, n, live, lb, last, served, bp, sp, bm, sm, h in rows:
    L = int(live)
    print(f'| {n} | {g} | {L / 2**20:.1f} MiB | {float(lb):.4f} | {float(last):.4f} | {100 * float(served):.1f}% | {int(bp) / L:.4f} | {int(sp) / L:.4f} | {int(bm) / L:.4f} | {int(sm) / L:.4f} | {int(h) / L:.4f} |')
print()
print('| group (gmean / max) | last step: default | step plan | run peak: default | step plan | min capacity: default | step plan | offline plan |')
print('|---|---|---|---|---|---|---|---|')
def stat(sel, col):
    r = [float(x[col]) if col in (3, 4) else int(x[col]) / int(x[2]) for x in rows if sel(x)]
    return math.exp(sum(map(math.log, r)) / len(r)), max(r)
for name, sel in (('11 GPU snapshots', lambda x: x[0] == 'gpu'), ('7 SOMAS graphs', lambda x: x[0] == 'somas'),
                  ('all 18', lambda x: True)):
    print('| %s | %s |' % (name, ' | '.join('%.4f / %.4f' % stat(sel, c) for c in (3, 4, 6, 7, 8, 9, 10))))
"
