#!/usr/bin/env bash
# Trace tool speed: import and replay rates, and a 48-setting sweep of the largest trace.
set -euo pipefail
bench=$1 cli=$2 src=$3
shared=$src/../shared/traces
files=("$src"/examples/*.trace "$src"/tests/data/linear-10k-50k-grad.pickle)
if [ -d "$shared/pytorch-snapshot" ]; then files+=("$shared"/pytorch-snapshot/*.pickle); fi
"$bench" "${files[@]}"
largest=$(ls -S "$shared"/pytorch-snapshot/*.pickle 2>/dev/null | head -n 1 || true)
[ -n "$largest" ] || largest=$src/examples/cs336-lm-ctx128-fullstep.trace
echo
for run in 1 2 3; do
    start=$(date +%s.%N)
    "$cli" sweep "$largest" --capacity 80GiB --no-progress >/dev/null
    end=$(date +%s.%N)
    awk -v s="$start" -v e="$end" -v f="$(basename "$largest")" -v r="$run" \
        'BEGIN { printf "sweep of 48 settings over %s (%d cores): %.2f s (run %d)\n", f, '"$(nproc)"', e - s, r }'
done
