#!/usr/bin/env bash
# Build the libFuzzer targets (clang, ASan + UBSan) and run each from the committed seed corpora
# (copied: the run does not change the repository).
# usage: scripts/fuzz.sh [SECONDS]   random seed, SECONDS per target (make fuzz: 600)
#        scripts/fuzz.sh ci          fixed seed and run counts, so that a test run is repeatable on one machine
#                                    (a finding reproduces, and is not luck of timing): 40-55 s each, two at a
#                                    time on 2 cores (measured 2026-12-06). Another machine may take another
#                                    path: libFuzzer reads a corpus folder in the file system's order (CI found
#                                    a crash at fuzz_doctor's run 182,300 that 400,000 here had not). A finding
#                                    is copied to fuzz/findings: add it to the corpus when it is mended.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
declare -A ci_runs=([conf]=300000 [trace]=90000 [pickle]=8000 [ops]=400 [doctor]=400000)
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHBM_FUZZ=ON -DHBM_TESTS=OFF -DHBM_BENCH=OFF \
    -DHBM_SANITIZE=address,undefined >/dev/null
cmake --build build-fuzz -j"$(nproc)" --target fuzz_conf fuzz_trace fuzz_pickle fuzz_ops fuzz_doctor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# One target: its summary (and, when it fails, its log's end) in $work/$t.out; exit status 1 when it failed.
fuzz_one() { # TARGET
    local t=$1 limit dict=""
    mkdir -p "$work/$t" "$work/$t-crash"
    cp -r fuzz/corpus/$t/. "$work/$t/"
    if [ "$secs" = ci ]; then
        limit="-runs=${ci_runs[$t]} -seed=1"
        echo "fuzz_$t: ${ci_runs[$t]} runs, seed 1, from $(ls fuzz/corpus/$t | wc -l) seeds"
    else
        limit="-max_total_time=$secs"
        echo "fuzz_$t: ${secs}s from $(ls fuzz/corpus/$t | wc -l) seeds"
    fi
    [ -f "fuzz/$t.dict" ] && dict="-dict=fuzz/$t.dict"
    local start=$SECONDS rc=0
    # shellcheck disable=SC2086
    HBMALLOC_QUIET=1 ASAN_OPTIONS=detect_leaks=1 "build-fuzz/fuzz/fuzz_$t" "$work/$t" $limit $dict \
        -max_len=65536 -rss_limit_mb=2048 -timeout=30 -artifact_prefix="$work/$t-crash/" -print_final_stats=1 \
        >"$work/$t.log" 2>&1 || rc=1
    if [ $rc -ne 0 ]; then
        echo "fuzz_$t FAILED:"; tail -40 "$work/$t.log"
        mkdir -p fuzz/findings && cp "$work/$t-crash/"* fuzz/findings/ 2>/dev/null || true
    fi
    grep -E "INFO: Seed:|stat::number_of_executed_units|stat::peak_rss_mb|^Done" "$work/$t.log" | sed "s/^/  /" || true
    echo "  $((SECONDS - start)) s"
    return $rc
}
# The targets run side by side, as many at once as there are cores (each is one process on one core); their
# reports come in the targets' order.
status=0 running=0
targets=(conf trace pickle ops doctor)
for t in "${targets[@]}"; do
    if [ "$running" -ge "$(nproc)" ]; then
        wait -n || status=1
        running=$((running - 1))
    fi
    fuzz_one "$t" >"$work/$t.out" 2>&1 &
    running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
    wait -n || status=1
    running=$((running - 1))
done
for t in "${targets[@]}"; do cat "$work/$t.out"; done
exit $status
