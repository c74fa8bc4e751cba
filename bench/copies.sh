#!/usr/bin/env bash
# Instructions per replayed event at 1, 4 and 16 copies of each trace, an empty_cache after each copy (issue #38 item
# 5: the cost per event must not grow with the number of segments a replay makes and gives back). Each trace is
# written once as the calls the replay loop makes (bench_instr TRACE dump), then K copies of it are written one
# after another, each copy's blocks under ids of its own and left live at its end (the live set grows with K, as a
# long job's does), then replayed under callgrind (bench_instr, as hbmalloc replay runs it). HBM_BENCH_CONF applies.
# usage: bench/copies.sh BENCH_INSTR TRACE...   prints one Markdown row per trace: events, then 1x, 4x, 16x and 16x/1x
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 BENCH_INSTR TRACE..." >&2; exit 2; }
bin=$1
shift
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
count() { # FILE -> instructions per event
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null "$bin" "$1" 2>&1 |
        awk '/^events / { e = $2 } /Collected :/ { i = $4 } END { if (e) printf "%.1f", i / e; else print "-" }'
}
printf '| trace | events | 1x | 4x | 16x | 16x / 1x |\n|---|---|---|---|---|---|\n'
for t in "$@"; do
    dev=0
    case "$t" in *torch1x-segments*) dev=1 ;; esac # that snapshot holds device 1 only
    if ! HBM_BENCH_DEVICE=$dev "$bin" "$t" dump "$work/calls.trace" >/dev/null 2>&1; then
        echo "| $(basename "$t") | unreadable | | | | |"
        continue
    fi
    row=()
    for k in 1 4 16; do
        awk -v k="$k" '
            /^[af] / { if ($2 + 1 > span) span = $2 + 1 }
            /^[afe]( |$)/ { line[n++] = $0 }
            END {
                print "hbmtrace 1"
                for (c = 0; c < k; c++) {
                    for (i = 0; i < n; i++) {
                        split(line[i], f, " ")
                        if (f[1] == "a") print "a", f[2] + c * span, f[3], f[4]
                        else if (f[1] == "f") print "f", f[2] + c * span
                        else print "e"
                    }
                    print "e"
                }
            }' "$work/calls.trace" >"$work/copies.trace"
        row+=("$(count "$work/copies.trace")")
    done
    printf '| %s | %d | %s | %s | %s | %s |\n' "$(basename "$t")" "$(grep -c '^[afe]' "$work/calls.trace")" "${row[@]}" \
        "$(awk -v a="${row[0]}" -v b="${row[2]}" 'BEGIN { printf "%.2f", b / a }')"
done
