#!/usr/bin/env bash
# Build and run every test: once in a normal build, once under AddressSanitizer + UBSan.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each phase's wall time, printed at the end (also when a phase fails: the table says how far it got).
phases=() phase_start=$SECONDS phase_name=""
phase() { # NAME: the phase that begins now ends the one before
    [ -n "$phase_name" ] && phases+=("$(printf '%6ds  %s' $((SECONDS - phase_start)) "$phase_name")")
    phase_name=$1 phase_start=$SECONDS
}
report() {
    local rc=$?
    phase ""
    echo "test.sh phases (wall time, $(nproc) cores):"
    printf '  %s\n' "${phases[@]}"
    printf '  %6ds  total, exit status %d\n' "$SECONDS" "$rc"
}
trap report EXIT
phase "packages (apt)"
scripts/deps.sh test
jobs=$(nproc)
# Debian's python3 (its torch): the plug-ins are also built against torch's headers and tested inside torch.
py=/usr/bin/python3
phase "normal build"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHBM_TESTS=ON -DHBM_WERROR=ON -DHBM_PYTHON=$py -DHBM_TORCH_C10=ON >/dev/null
cmake --build build -j"$jobs"
phase "normal tests"
ctest --test-dir build --output-on-failure -j"$jobs"
phase "ASan+UBSan build"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DHBM_SANITIZE=address,undefined -DHBM_BENCH=OFF -DHBM_TESTS=ON -DHBM_WERROR=ON \
    -DHBM_PYTHON=$py -DHBM_TORCH_C10=ON >/dev/null
cmake --build build-asan -j"$jobs"
phase "ASan+UBSan tests"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs"
phase "release builds (gcc, clang)"
# Release builds with gcc and clang, warnings as errors (users' builds have them non-fatal: HBM_WERROR is off by
# default), the library, the tool and the plug-ins.
for cc in "gcc g++" "clang clang++"; do
    set -- $cc
    CC=$1 CXX=$2 cmake -S . -B "build-release-$1" -DCMAKE_BUILD_TYPE=Release -DHBM_TESTS=OFF -DHBM_BENCH=OFF \
        -DHBM_WERROR=ON -DHBM_PYTHON=$py >/dev/null
    cmake --build "build-release-$1" -j"$jobs" >/dev/null
    echo "release build clean: $1"
done
phase "valgrind"
# valgrind memcheck of the command-line tool on real traces, and of the doctor on recorded outputs and real logs (its
# exit status 1: it found what it should). Two lanes side by side (memcheck is one thread); the reports in order.
vgdir=$(mktemp -d)
vg() { # N STATUS ARGS...: hbmalloc ARGS under memcheck (VAR=VALUE words first: its environment), exiting STATUS
    local n=$1 want=$2 rc=0 vars=()
    shift 2
    while [[ $1 == *=* ]]; do vars+=("$1"); shift; done
    env "${vars[@]}" valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite \
        build/hbmalloc "$@" >/dev/null 2>"$vgdir/$n.err" || rc=$?
    if [ "$rc" -eq "$want" ]; then
        echo "valgrind clean: hbmalloc $*" >"$vgdir/$n.out"
    else
        { cat "$vgdir/$n.err"; echo "valgrind: hbmalloc $*: exit status $rc, not $want"; } >"$vgdir/$n.out"
        return 1
    fi
}
doctor_env=(PATH="$PWD/tests/data/doctor/bin:$PATH" NPU_SMI_INFO=tests/data/doctor/npu-smi/910b3-8.txt
    NPU_SMI_BOARD=tests/data/doctor/npu-smi/board-910.txt PYTORCH_NPU_ALLOC_CONF=expandable_segments:True)
(vg 1 0 sweep examples/cs336-lm-ctx512-forward.trace --jobs 2 --no-progress \
    --grid expandable_segments=False,True &&
    vg 2 0 view examples/cs336-lm-ctx512-forward.trace -o build/vg.svg) &
lane=$!
vg 3 0 replay tests/data/linear-10k-50k-grad.pickle --snapshot build/vg.pickle &&
    vg 4 0 replay examples/cs336-lm-ctx512-forward.trace --conf expandable_segments:True &&
    vg 5 1 "${doctor_env[@]}" doctor --root tests/data/doctor/root-mismatch \
        --log tests/data/doctor/logs/field_report_constructed.log --log tests/data/doctor/logs/npu_oom_sglang_29838.log \
        --json || vg_failed=1
wait "$lane" || vg_failed=1
cat "$vgdir"/*.out
rm -rf "$vgdir"
[ -z "${vg_failed:-}" ] || exit 1
phase "fuzzing"
# Each fuzz target for a bounded, repeatable run of about a minute (make fuzz runs them long, at random).
scripts/fuzz.sh "${HBM_FUZZ_SECONDS:-ci}"
phase "ThreadSanitizer"
# Last, so that ctest's summary closes the output: the thread stress, the stream tests, the published
# statistics (a refresher thread, which measures memory outside hbmalloc), snapshots at an OOM written with the lock
# open (test_oom_dump), threads racing a pool's sleep (test_sleep) and the runtimes' doubles (the NPU
# plug-in waiting with its lock released while torch_npu's queue worker frees and allocates; the window explorer)
# under ThreadSanitizer.
cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DHBM_SANITIZE=thread -DHBM_BENCH=OFF -DHBM_WERROR=ON -DHBM_TORCH_C10=OFF >/dev/null
cmake --build build-tsan -j"$jobs" --target test_threads test_events test_mempools test_publish test_cuda test_acl test_npu_runtime \
    test_sleep test_windows test_outside test_oom_dump hbmalloc_torch_npu fake_torch_npu fake_torch_npu_noentry
# test_publish forks, and the child publishes (a thread): TSan's die_after_fork would stop it, not a race.
TSAN_OPTIONS=halt_on_error=1:die_after_fork=0 ctest --test-dir build-tsan --output-on-failure -j"$jobs" \
    -R '^(test_threads|test_events|test_mempools|test_publish|test_cuda|test_acl|npu_runtime_.*|test_sleep|test_windows|test_outside|test_oom_dump)$'
