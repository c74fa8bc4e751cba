#!/usr/bin/env bash
# The step plan's planning cost (issue #38 item 6): callgrind's count of the instructions spent making plans at step
# boundaries (make_plan in src/policy/step_plan.c, inclusive: the planner, the judgement against the cache, the
# plan's indexes), per call (a plan made or refused) and per
# allocation of the step planned, on the repository's multi-step traces and on steps of 1,000, 10,000 and 100,000
# allocations written by bench/synth_steps.py; steps found by --steps auto, a simulated device without virtual
# memory (firmware 22.0.3), hbm_step_plan:True. With OLD, a build from before the sweep (790bf66) in the same run,
# up to 10,000 allocations a step (its search is O(n^2): at 100,000 it would run for hours under callgrind).
# usage: bench/planning.sh HBMALLOC [OLD_HBMALLOC]     (Release builds)
set -euo pipefail
bin=$1
old=${2:-}
here=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 "$here/tools/trace/repeat_steps.py" "$here/examples/cpu-transformer-trainstep.trace" --from 548 --period 1000 \
    --times 8 >"$tmp/cpu-transformer-trainstep-x8.trace"
for n in 1000 10000 100000; do
    python3 "$here/bench/synth_steps.py" --allocs "$n" >"$tmp/synth-$n.trace"
done
cost() { # BINARY TRACE: "instructions calls allocations-per-step"
    local per
    per=$("$1" replay "$2" --steps auto --backend sim:firmware=22.0.3 --conf hbm_step_plan:True |
        sed -n 's/^steps: .* every \([0-9]*\) allocations.*/\1/p')
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" --toggle-collect=make_plan "$1" replay "$2" \
        --steps auto --backend sim:firmware=22.0.3 --conf hbm_step_plan:True >/dev/null 2>"$tmp/vg"
    # make_plan's calls, plans made and plans refused (never_above_the_cache) alike, from callgrind's call lines
    printf '%s %s %s\n' "$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$tmp/vg")" "$(awk -v name=make_plan '
        /^c?fn=\(/ { split($0, f, /[()]/); if ($2 == name) id[f[2]] = 1 }
        /^cfn=\(/ { split($0, f, /[()]/); cur = (f[2] in id) }
        /^calls=/ && cur { split($0, c, /[= ]/); n += c[2]; cur = 0 }
        END { print n + 0 }' "$tmp/cg")" "$per"
}
printf '| trace | allocations a step | plans made or refused: before | after | instructions per plan: before | after | per allocation of the step: before | after |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for t in "$here/examples/cpu-transformer-trainstep.trace" "$tmp/cpu-transformer-trainstep-x8.trace" \
    "$here/examples/finetune-varlen.trace" "$tmp"/synth-1000.trace "$tmp"/synth-10000.trace "$tmp"/synth-100000.trace; do
    read -r ir plans per <<<"$(cost "$bin" "$t")"
    name=$(basename "$t" .trace)
    if [ -n "$old" ] && [[ $t != *synth-100000* ]]; then
        read -r oir oplans _ <<<"$(cost "$old" "$t")"
        printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$per" "$oplans" "$plans" "$((oir / oplans))" \
            "$((ir / plans))" "$((oir / oplans / per))" "$((ir / plans / per))"
    else
        printf '| %s | %s | not run | %s | not run | %s | not run | %s |\n' "$name" "$per" "$plans" "$((ir / plans))" \
            "$((ir / plans / per))"
    fi
done
