#!/usr/bin/env bash
# On a machine with an NVIDIA GPU, its driver and PyTorch (about 8 minutes):
#   1. build hbmalloc;
#   2. replay the bundled traces on the real driver (cuda backend), whole and expandable segments, the
#      validator at the end of each (the unit tests need cmocka; they run too where it is installed);
#   3. the PyTorch door (tests/gpu/door.py): OOM as torch.cuda.OutOfMemoryError and training goes on,
#      memory_stats() against PyTorch's key set and hbmalloc's figures, empty_cache, record_stream, a CUDA graph,
#      torch.compile, Python frames in a snapshot, _record_memory_history() with torch's defaults recording, the
#      caller's CUDA context and device unchanged after empty_cache(), torch.accelerator's figures (docs/CONTRACTS.md),
#      device-wide waits and stream/event synchronizations per training step with 50 record_stream frees a step;
#   4. train ResNet-50 and a GPT-2-sized transformer (random weights, variable sequence lengths) under
#      PyTorch's allocator, hbmalloc, and hbmalloc with expandable segments; a table of peak reserved,
#      step time relative to PyTorch's allocator, and device allocation calls, plus their memory snapshots;
#   5. pools that sleep and wake (tests/gpu/sleep.py, docs/SLEEP.md): a 4 GiB backup pool and an 8 GiB discard
#      pool slept and woken 20 times beside a training loop on torch's own allocator: mem_get_info at each step,
#      addresses, contents and a CUDA graph's replay checked, seconds per GiB and device calls, and the GiB/s of a
#      backup and a discard sleep and wake against a pinned copy of the same bytes in the same run (goal: 80%).
# Output goes to $OUT (or ./gpu-check-out): gpu-check.md, results.jsonl, *.pickle snapshots, logs.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-check-out}
mkdir -p "$out"
log() { echo "[$(date +%T)] $*" | tee -a "$out/gpu-check.log"; }
status=0

log "build"
have_cmocka=OFF
pkg-config --exists cmocka 2>/dev/null && have_cmocka=ON
py=$(command -v python3)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHBM_TESTS=$have_cmocka -DHBM_BENCH=OFF -DHBM_PYTHON="$py" \
    >>"$out/gpu-check.log" 2>&1 && cmake --build build-gpu -j"$(nproc)" >>"$out/gpu-check.log" 2>&1 || {
    log "build failed"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$out/gpu.txt" 2>&1 || true
log "gpu: $(cat "$out/gpu.txt")"

log "replays on the real driver"
build-gpu/hbmalloc conf expandable_segments:True --backend cuda >"$out/conf.txt" 2>&1 || status=1
for t in examples/*.trace; do
    for conf in "" "expandable_segments:True"; do
        if ! build-gpu/hbmalloc replay "$t" --backend cuda --conf "$conf" >>"$out/replays.txt" 2>&1; then
            log "replay FAILED: $t [$conf]"; status=1
        fi
    done
done
grep -E "^trace|^settings|^peak reserved|^reserved/|^device time|^error|^OOM" "$out/replays.txt" | tee -a "$out/gpu-check.log"
if [ "$have_cmocka" = ON ]; then
    log "unit tests"
    ctest --test-dir build-gpu --output-on-failure >"$out/ctest.txt" 2>&1 || { log "unit tests FAILED"; status=1; }
    tail -3 "$out/ctest.txt" | tee -a "$out/gpu-check.log"
else
    log "cmocka is not installed: unit tests not run here (they run in CI against the fake driver)"
fi

# The plug-in built against this torch when CMake found it (typed OutOfMemoryError), else the generic one.
export HBMALLOC_TORCH_LIB=$PWD/build-gpu/libhbmalloc_torch.so
[ -f build-gpu/libhbmalloc_torch_c10.so ] && export HBMALLOC_TORCH_LIB=$PWD/build-gpu/libhbmalloc_torch_c10.so
log "plug-in: $HBMALLOC_TORCH_LIB"

log "the PyTorch door"
: >"$out/door.jsonl"
if timeout 60 python3 tests/gpu/door.py native "$out" >>"$out/door.jsonl" 2>"$out/door-native.log" &&
    timeout 240 python3 tests/gpu/door.py hbmalloc "$out" >>"$out/door.jsonl" 2>"$out/door-hbmalloc.log"; then
    :
else
    log "door script FAILED: $(tail -n3 "$out/door-hbmalloc.log" | tr '\n' ' ')"; status=1
fi
grep -q '"ok": false' "$out/door.jsonl" && status=1
cat "$out/door.jsonl" | tee -a "$out/gpu-check.log"

log "training loops"
: >"$out/results.jsonl"
for model in resnet50 gpt2; do
    for alloc in native hbmalloc hbmalloc-expandable; do
        if timeout 150 python3 tests/gpu/train.py "$model" "$alloc" "$out" >>"$out/results.jsonl" \
            2>"$out/train-$model-$alloc.log"; then
            log "$model / $alloc: $(tail -n1 "$out/results.jsonl")"
        else
            log "$model / $alloc FAILED: $(tail -n3 "$out/train-$model-$alloc.log" | tr '\n' ' ')"; status=1
        fi
    done
done
log "pools that sleep and wake"
if timeout 420 python3 tests/gpu/sleep.py "$out" 4 8 20 >"$out/sleep.jsonl" 2>"$out/sleep.log"; then
    log "sleep and wake: $(tail -n1 "$out/sleep.jsonl")"
else
    log "sleep and wake FAILED: $(tail -n3 "$out/sleep.log" | tr '\n' ' ') $(tail -n1 "$out/sleep.jsonl")"; status=1
fi
python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = [json.loads(l) for l in open(f"{out}/results.jsonl") if l.strip()]
base = {r["model"]: r for r in rows if r["allocator"] == "native"}
lines = ["| model | allocator | peak reserved (MiB) | peak allocated (MiB) | reserved/allocated | step time vs PyTorch | device allocs |",
         "|---|---|---|---|---|---|---|"]
for r in rows:
    b = base.get(r["model"])
    ratio = r["median_step_s"] / b["median_step_s"] if b else float("nan")
    lines.append(f"| {r['model']} | {r['allocator']} | {r['peak_reserved'] / 2**20:.0f} | {r['peak_allocated'] / 2**20:.0f} | "
                 f"{r['peak_reserved'] / max(r['peak_allocated'], 1):.3f} | {ratio:.3f} | {r['device_allocs']} |")
door = [json.loads(l) for l in open(f"{out}/door.jsonl") if l.strip()]
lines += ["", "| door check | ok | detail |", "|---|---|---|"]
lines += [f"| {d['check']} | {'yes' if d['ok'] else 'NO'} | {d['detail'].replace('|', '/')} |" for d in door]
if os.path.exists(f"{out}/sleep.md"):
    lines += ["", "Pools that sleep and wake (tests/gpu/sleep.py):", ""] + open(f"{out}/sleep.md").read().splitlines()
open(f"{out}/gpu-check.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
log "done (status $status); results in $out"
exit $status
