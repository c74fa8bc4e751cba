#!/usr/bin/env bash
# The step plan (hbm_step_plan) on the multi-step traces, on a simulated device without virtual memory (firmware
# 22.0.3, the field report's): steps found by --steps auto; the share of the allocations of the whole steps after
# the first plan that the plan served, the worst such step; peak reserved / peak live requested over the whole run
# and the smallest capacity it runs in / peak live, against PyTorch's policy (the default) in the same run.
# usage: bench/stepplan.sh HBMALLOC TRACE...
set -euo pipefail
bin=$1
shift
be=sim:firmware=22.0.3
printf '| trace | steps | served (whole steps after a plan) | worst step | plans made | peak reserved / peak live: default | step plan | min capacity / peak live: default | step plan |\n'
printf '|---|---|---|---|---|---|---|---|---|\n'
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
    printf '| %s | %s | %s | %s | %s | %s | %s | %s |\n' "$(basename "$t" .trace)" "$steps" "$served" "$plans" \
        "$(ratio "$base")" "$(ratio "$plan")" "$(mincap "")" "$(mincap hbm_step_plan:True)"
done
