#!/usr/bin/env bash
# The step plan (hbm_step_plan) on the multi-step traces, on a simulated device without virtual memory (firmware
# 22.0.3, the field report's): steps found by --steps auto; the share of the allocations of the whole steps after
# the first plan that the plan served, the worst such step; peak reserved / peak live requested over the whole run
# and the smallest capacity it runs in / peak live, against PyTorch's policy (the default) in the same run.
# The real CPU trace has three steps; a copy of it lengthened by eight more of its last step
# (tools/trace/repeat_steps.py) shows the steady state.
# usage: bench/stepplan.sh HBMALLOC [TRACE...]   (default: the repository's two multi-step examples and the copy)
set -euo pipefail
bin=$1
shift
here=$(cd "$(dirname "$0")/.." && pwd)
if [ $# -eq 0 ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    python3 "$here/tools/trace/repeat_steps.py" "$here/examples/cpu-transformer-trainstep.trace" --from 548 --period 1000 \
        --times 8 > "$tmp/cpu-transformer-trainstep-x8.trace"
    set -- "$here/examples/cpu-transformer-trainstep.trace" "$tmp/cpu-transformer-trainstep-x8.trace" \
        "$here/examples/finetune-varlen.trace"
fi
be=sim:firmware=22.0.3
printf '| trace | steps | served (whole steps after a plan) | worst step | plans made | peak reserved / peak live: default | step plan | the last whole step, step plan | min capacity / peak live: default | step plan | unmarked: steps found, all allocations served |\n'
printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
for t in "$@"; do
    plan=$("$bin" replay "$t" --steps auto --backend "$be" --conf hbm_step_plan:True)
    base=$("$bin" replay "$t" --steps auto --backend "$be" --conf "")
    live=$(printf '%s\n' "$plan" | sed -n 's/^peak requested: .*(\([0-9]*\) bytes)/\1/p')
    ratio() { printf '%s\n' "$1" | sed -n 's/^peak reserved: .*(\([0-9]*\) bytes)/\1/p' | awk -v l="$live" '{ printf "%.4f", $1 / l }'; }
    mincap() { # conf
        "$bin" replay "$t" --steps auto --backend "$be" --conf "$1" --min-capacity |
            sed -n 's/^minimum capacity: .*(\([0-9]*\) bytes.*/\1/p' | awk -v l="$live" '{ printf "%.4f", $1 / l }'
    }
    served=$(printf '%s\n' "$plan" | sed -n 's/.*the whole steps after a plan: \([0-9.]*%\).*(the worst step \([0-9.]*%\)).*/\1 | \2/p')
    steps=$(printf '%s\n' "$plan" | sed -n 's/^steps: *\([0-9]*\) .*/\1/p')
    plans=$(printf '%s\n' "$plan" | sed -n 's/^step plan: .*, \([0-9]*\) plans* made.*/\1/p')
    # The per-step table's second last row (the last may be cut short): its peak reserved over the run's peak live.
    last=$(printf '%s\n' "$plan" | awk -v l="$live" '
        /^  step  allocs/ { on = 1; next }
        on && /^ +[0-9]+\+? / { prev = cur; cur = $6 " " $7 }
        on && !/^ +[0-9]+\+? / { on = 0 }
        END { split(prev, v, " "); m = v[2] == "GiB" ? 2^30 : v[2] == "MiB" ? 2^20 : v[2] == "KiB" ? 2^10 : 1
              printf "%.4f", v[1] * m / l }')
    # Without step events: the allocator finds the steps; the share of all allocations its plans served.
    found=$("$bin" replay "$t" --backend "$be" --conf hbm_step_plan:True --stats | awk '
        /^steps / { s = $2 } /^plan_hits / { h = $2 } /^plan_misses / { m = $2 } /^plan_unplanned / { u = $2 }
        /^events replayed:/ { } /^allocation.all.allocated / { n = $2 }
        END { printf "%d, %.1f%%", s, n ? 100 * h / n : 0 }')
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$(basename "$t" .trace)" "$steps" "$served" \
        "$plans" "$(ratio "$base")" "$(ratio "$plan")" "$last" "$(mincap "")" "$(mincap hbm_step_plan:True)" "$found"
done
