#!/usr/bin/env bash
# Instructions per replayed event of two versions on the same calls (issue #30 item 7: against d48e752): each trace
# is written once as the calls the replay loop makes (NEW/bench/bench_instr TRACE dump: a, f and e lines, which every
# version's reader reads the same), and each version's bench_instr replays that file under callgrind, unlocked, as
# hbmalloc replay runs. Then the locked cache-hit malloc+free pair (bench/bench_pair.c, the public API only: built
# against OLD's libraries when OLD has no bench_pair). HBM_BENCH_CONF (the settings) and HBM_BENCH_STEPS apply to
# both. OLD and NEW are build folders (configured with -DHBM_BENCH=ON).
# usage: bench/instr_against.sh OLD_BUILD NEW_BUILD TRACE...
# Prints one Markdown row per trace (events, old, new, the change), the geometric mean of new / old and the pair.
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 OLD_BUILD NEW_BUILD TRACE..." >&2; exit 2; }
oldb=$1 newb=$2
shift 2
old=$oldb/bench/bench_instr new=$newb/bench/bench_instr
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
count() { # bench_instr file -> instructions per event
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null "$1" "$2" 2>&1 |
        awk '/^events / { e = $2 } /Collected :/ { i = $4 } END { if (e) printf "%.1f", i / e; else print "-" }'
}
printf '| trace | events | old | new | change |\n|---|---|---|---|---|\n'
logsum=0 n=0 worse=0
for t in "$@"; do
    dev=0
    case "$t" in *torch1x-segments*) dev=1 ;; esac # that snapshot holds device 1 only
    HBM_BENCH_DEVICE=$dev "$new" "$t" dump "$work/calls.trace" >/dev/null 2>&1 || {
        echo "| $(basename "$t") | unreadable | | | |"
        continue
    }
    e=$(grep -c '^[afe]' "$work/calls.trace")
    o=$(count "$old" "$work/calls.trace")
    w=$(count "$new" "$work/calls.trace")
    read -r d l <<<"$(awk -v o="$o" -v w="$w" 'BEGIN { printf "%+.2f%% %.6f", 100 * (w - o) / o, log(w / o) }')"
    logsum=$(awk -v s="$logsum" -v l="$l" 'BEGIN { print s + l }')
    n=$((n + 1))
    awk -v o="$o" -v w="$w" 'BEGIN { exit !(w > o) }' && worse=$((worse + 1))
    printf '| %s | %d | %s | %s | %s |\n' "$(basename "$t")" "$e" "$o" "$w" "$d"
done
awk -v s="$logsum" -v n="$n" -v w="$worse" \
    'BEGIN { printf "\ngeometric mean of new/old: %+.2f%% over %d traces; %d above the old\n", 100 * (exp(s / n) - 1), n, w }'
pair_bin() { # build folder -> a bench_pair linked with its library
    if [ -x "$1/bench/bench_pair" ]; then
        echo "$1/bench/bench_pair"
        return
    fi
    local src
    src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$1/CMakeCache.txt")
    cc -O2 -I"$src/include" "$(dirname "$0")/bench_pair.c" "$1"/lib*.a -lpthread -ldl -o "$work/pair.$2"
    echo "$work/pair.$2"
}
pair() { # bench_pair -> instructions per pair
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null "$1" 2>&1 |
        awk '/^pairs / { p = $2 } /Collected :/ { i = $4 } END { printf "%.1f", i / p }'
}
po=$(pair "$(pair_bin "$oldb" old)") pn=$(pair "$(pair_bin "$newb" new)")
echo "locked cache-hit malloc+free pair (512 B): old $po, new $pn instructions"
