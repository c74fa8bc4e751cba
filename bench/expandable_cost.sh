#!/usr/bin/env bash
# What expandable segments cost a replay (issue #38 item 4): instructions per replayed event under callgrind with the
# default settings and with expandable_segments:True, the same build and the same calls (each trace written once as
# the calls the replay loop makes: bench_instr TRACE dump), and their ratio; then the ratios' geometric mean, how
# many are at most 1.1 and the largest.
# usage: bench/expandable_cost.sh BENCH_INSTR TRACE...
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BENCH_INSTR TRACE..." >&2; exit 2; }
bin=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
count() { # FILE [SETTINGS] -> instructions per event
    HBM_BENCH_CONF=${2:-} valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null "$bin" "$1" 2>&1 |
        awk '/^events / { e = $2 } /Collected :/ { i = $4 } END { if (e) printf "%.1f", i / e; else print "-" }'
}
printf '| trace | events | default | expandable | expandable / default |\n|---|---|---|---|---|\n'
for t in "$@"; do
    dev=0
    case "$t" in *torch1x-segments*) dev=1 ;; esac # that snapshot holds device 1 only
    if ! HBM_BENCH_DEVICE=$dev "$bin" "$t" dump "$work/calls.trace" >/dev/null 2>&1; then
        echo "| $(basename "$t") | unreadable | | | |"
        continue
    fi
    d=$(count "$work/calls.trace") x=$(count "$work/calls.trace" expandable_segments:True)
    printf '| %s | %d | %s | %s | %s |\n' "$(basename "$t")" "$(grep -c '^[afe]' "$work/calls.trace")" "$d" "$x" \
        "$(awk -v d="$d" -v x="$x" 'BEGIN { printf "%.2f", x / d }')"
done | tee "$work/rows"
awk -F'|' '$6 ~ /[0-9]/ { r = $6 + 0; n++; s += log(r); k += r <= 1.1; if (r > m) m = r }
    END { if (n) printf "\nexpandable / default: geometric mean %.3f over %d traces, %d at most 1.1, the largest %.2f\n",
          exp(s / n), n, k, m }' "$work/rows"
