#!/usr/bin/env bash
# Instructions per replayed event, counted by callgrind (deterministic, unlike the clock on this shared
# machine): the replay loop only, as hbmalloc replay runs it and with the allocator's lock taken.
# usage: bench/instructions.sh BENCH_INSTR TRACE...
set -euo pipefail
bin=$1
shift
printf '| trace | events | instructions/event, as replay runs it | with the lock |\n|---|---|---|---|\n'
count() { # trace [locked] -> "events instructions"
    local out
    out=$(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null "$bin" "$@" 2>&1)
    printf '%s\n' "$out" | awk '/^events / { e = $2 } /Collected :/ { i = $4 } END { print e, i }'
}
for t in "$@"; do
    read -r e i < <(count "$t")
    read -r _ l < <(count "$t" locked)
    awk -v n="$(basename "$t")" -v e="$e" -v i="$i" -v l="$l" \
        'BEGIN { printf "| %s | %d | %.0f | %.0f |\n", n, e / 3, i / e, l / e }'
done
