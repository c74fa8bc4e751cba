#!/bin/sh
# doctor.sh: `hbmalloc doctor` as a user runs it, on recorded npu-smi / nvidia-smi outputs (stand-ins on PATH),
# Ascend version files under --root, the fake AscendCL runtime and real log lines (tests/data/doctor/SOURCES.md).
# usage: doctor.sh HBMALLOC SOURCE_DIR FAKE_ACL_LIB
set -u
BIN=$1; SRC=$2; FAKEACL=$3
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
# The data through a short path: where the output names a file, its wrapping must not depend on how deep the clone
# is (CI's is deeper than a developer's; the case trace-one-device checks a path deeper than any line on purpose).
ln -s "$SRC/tests/data/doctor" "$T/d"
D=$T/d
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# A clean environment: only what each case sets.
doc() { env -i PATH="$D/bin:/usr/bin:/bin" HBMALLOC_LIBCUDA=/nonexistent/libcuda.so.1 \
        HBMALLOC_LIBASCENDCL=/nonexistent/libascendcl.so HBMALLOC_PYTHON=/nonexistent/python3 "$@"; }
# The output wraps at words to 100 columns: texts are looked for in it as one line, runs of spaces as one.
flat() { sed 's/ \\$//' "$1" | tr '\n' ' ' | tr -s ' '; } # lines joined, a command's " \\" too
has() { flat "$T/out" | grep -qF -- "$(printf '%s' "$1" | tr -s ' ')"; } # has TEXT: in $T/out
expect() { # expect RC FILE TEXT...: the exit status, then each text in the output
  want=$1; out=$2; shift 2
  [ "$rc" -eq "$want" ] || fail "$case: exit status $rc, expected $want"
  for t in "$@"; do
    flat "$out" | grep -qF -- "$(printf '%s' "$t" | tr -s ' ')" ||
      { fail "$case: missing '$t'"; sed 's/^/    /' "$out" | head -60; }
  done
}

case=healthy-910b
doc NPU_SMI_INFO=$D/npu-smi/910b3-8.txt NPU_SMI_BOARD=$D/npu-smi/board-910.txt NVIDIA_SMI_OUT=$D/nvidia-smi/h100-8.txt \
    PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256,garbage_collection_threshold:0.8 \
    "$BIN" doctor --root "$D/root-good" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "driver (HDK)             24.1.rc3" "firmware                 7.5.0.1.129" \
  "CANN toolkit             8.0.0" "npu-smi driver           23.0.7" \
  "npu                      0 910B3, health OK, memory 59985 / 65536 MB used" \
  "npu                      7 910B3, health OK, memory 3350 / 65536 MB used" \
  "NPU 3: software (driver) 23.0.5, firmware 7.1.0.7.220, compatibility OK" \
  "driver                   535.183.01" "CUDA (driver API)        12.2" \
  "gpu                      7 NVIDIA H100 80GB HBM3, 0 / 81559 MiB used" "Nothing to act on." \
  "[info] garbage_collection_threshold in PYTORCH_NPU_ALLOC_CONF acts only under a memory fraction below 1" \
  "torch.npu.set_per_process_memory_fraction(0.99)"
[ "$(grep -c '^    npu  ' "$T/out")" -eq 8 ] || fail "$case: not 8 NPUs (the process table must not count)"

# HCCL with a pluggable allocator: a reuse mode that relies on recordStream, and one torch_npu refuses.
case=hccl-reuse-mode
doc NPU_SMI_INFO=$D/npu-smi/910b3-8.txt MULTI_STREAM_MEMORY_REUSE=1 "$BIN" doctor --root "$D/root-good" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "[warning] MULTI_STREAM_MEMORY_REUSE=1: HCCL collectives rely on recordStream" \
  "export MULTI_STREAM_MEMORY_REUSE=2 (hbmalloc_torch.use() sets it when it is unset)"
doc NPU_SMI_INFO=$D/npu-smi/910b3-8.txt MULTI_STREAM_MEMORY_REUSE=7 "$BIN" doctor --root "$D/root-good" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "[error] MULTI_STREAM_MEMORY_REUSE='7' is refused"
doc NPU_SMI_INFO=$D/npu-smi/910b3-8.txt MULTI_STREAM_MEMORY_REUSE=2 "$BIN" doctor --root "$D/root-good" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "MULTI_STREAM_MEMORY_REUSE 2" "No problems found in what could be checked."
doc NPU_SMI_INFO=$D/npu-smi/910b3-8.txt "$BIN" doctor --root "$D/root-good" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "unset: torch_npu's default 1 (HCCL relies on recordStream); hbmalloc_torch.use() sets 2"

# No device runtime loads: what was not checked is said, and the verdict covers only the rest (issue #29 item 15).
case=no-runtime
doc "$BIN" doctor --root "$T" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "Not checked" "the devices: no device runtime loads here" "HBMALLOC_LIBCUDA=PATH" \
  "No problems found in what could be checked."
grep -qx "No problems found." "$T/out" && fail "$case: a bare 'No problems found.' with nothing probed"
doc "$BIN" doctor --root "$T" --json >"$T/out" 2>&1; rc=$?
grep -q '"not_checked":\["the devices: no device runtime' "$T/out" || fail "$case: no not_checked in the JSON"

# The framework the job would import (HBMALLOC_PYTHON): its release, its build, and whether use() takes it, asked
# of hbmalloc.torch when that Python has it (else the same thresholds). Stand-in torch / torch_npu packages.
case=python-framework
mkpkg() { # DIR NAME BODY: a package whose __init__.py is BODY
  mkdir -p "$1/$2"; printf '%s\n' "$3" >"$1/$2/__init__.py"; }
NS='import types'
mkpkg "$T/py-old" torch "$NS
__version__ = '1.13.0a0'
version = types.SimpleNamespace(cuda=None)
cuda = types.SimpleNamespace(memory=types.SimpleNamespace())"
mkpkg "$T/py-new" torch "$NS
__version__ = '2.6.0+cu124'
version = types.SimpleNamespace(cuda='12.4')
cuda = types.SimpleNamespace(memory=types.SimpleNamespace(CUDAPluggableAllocator=object))"
mkpkg "$T/py-new" torch_npu "$NS
__version__ = '2.6.0.post1'
npu = types.SimpleNamespace(memory=types.SimpleNamespace(NPUPluggableAllocator=object))"
doc HBMALLOC_PYTHON=python3 PYTHONPATH="$T/py-old:$SRC/python" "$BIN" doctor --root "$T" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "torch                    1.13.0a0 (a CPU build: no CUDA): hbmalloc.torch.use() refuses it" \
  "[warning] torch 1.13.0a0 cannot host hbmalloc: hbmalloc.torch.use() refuses it" \
  "hbmalloc needs torch >= 2.0 (CUDAPluggableAllocator); installed 1.13.0a0" "pip install 'torch>=2.3'"
grep -q "^    PyTorch" "$T/out" && fail "$case: a release hbmalloc does not know taken for the settings advice"
doc HBMALLOC_PYTHON=python3 PYTHONPATH="$T/py-new" "$BIN" doctor --root "$T" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "torch                    2.6.0+cu124 (built for CUDA 12.4): hbmalloc.torch.use() accepts it" \
  "torch_npu                2.6.0.post1: hbmalloc.torch.use() accepts it" \
  "PyTorch                  2.6.0+cu124 (the torch that " "torch_npu                2.6.0.post1 (the torch_npu that "
# A torch_npu job (its log) where this Python's torch is too old: what the NPU needs (torch_npu with its torch), not
# CUDA's wheel (issue #36 item 7); the job's own release when the log names it, not when it is only inferred.
case=npu-job-old-torch
doc HBMALLOC_PYTHON=python3 PYTHONPATH="$T/py-old:$SRC/python" "$BIN" doctor --root "$T" \
    --log "$D/logs/field_report_constructed.log" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "[warning] torch 1.13.0a0 cannot host hbmalloc: hbmalloc.torch.use() refuses it" \
  "the job runs torch_npu ($D/logs/field_report_constructed.log:1)" \
  "this Python imports torch 1.13.0a0 and no torch_npu" "pip install 'torch_npu>=2.1' with its torch"
for cuda in "wheel for your CUDA" "pip install 'torch>=2.3'" "get-started/locally"; do
  has "$cuda" && fail "$case: CUDA advice for a torch_npu job: '$cuda'"
done
printf 'torch_npu version: 2.1.0.post6\nRuntimeError: NPU out of memory. Tried to allocate 20.00 MiB\n' >"$T/npu.log"
doc HBMALLOC_PYTHON=python3 PYTHONPATH="$T/py-old:$SRC/python" "$BIN" doctor --root "$T" --log "$T/npu.log" \
    >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "pip install torch==2.1.0 torch_npu==2.1.0.post6 (the job's torch_npu and its torch)"
has "wheel for your CUDA" && fail "$case: CUDA advice for a torch_npu job"
mkpkg "$T/py-broken" torch "raise ImportError('libc10.so: cannot open shared object file')"
doc HBMALLOC_PYTHON=python3 PYTHONPATH="$T/py-broken" "$BIN" doctor --root "$T" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "torch                    not importable: ImportError: libc10.so: cannot open shared object file"
doc "$BIN" doctor --root "$T" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "/nonexistent/python3     not found, or failed (HBMALLOC_PYTHON names another)"

# Issue #37 item 2: what a sleep left in use, from the line vLLM's sleep mode logs after every sleep (gpu_worker.py).
# A real RL job's log (8 workers, one of them far above the others: info, exit 0) and a constructed one whose
# figure grows at every sleep of one process (a warning, exit 1).
case=sleep-left-in-use
doc "$BIN" doctor --no-env --log "$D/logs/vllm_sleep_rl_8workers.log" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "[info] After a sleep, up to 4.82 GiB stayed in use on the device (8 sleeps logged)" \
  "Process 475091 left the most, 4.82 GiB, where the least was 1.38 GiB" "hbmalloc.torch.resident() after the sleep"
has "grew from" && fail "$case: a steady figure read as growth"
doc "$BIN" doctor --no-env --log "$D/logs/vllm_sleep_growth_constructed.log" --json >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" '"id":"sleep-growth"' \
  "What a sleep leaves in use grew from 1.38 GiB to 2.23 GiB over 4 sleeps of process 20417 (least 1.38 GiB)" \
  '"count":4'
# Two workers' figures interleaved in one series (no PID in the lines): steady each, not growth.
for x in 1.38 1.90 1.38 1.90 1.38 1.90; do
  printf 'INFO [gpu_worker.py:104] Sleep mode freed 70.00 GiB memory, %s GiB memory is still in use.\n' "$x"
done >"$T/two.log"
doc "$BIN" doctor --no-env --log "$T/two.log" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "After a sleep, up to 1.90 GiB stayed in use on the device (6 sleeps logged)"
printf 'Sleep mode freed 7 GiB memory, all of it\n' >"$T/odd.log" # the words without the figures: not read
doc "$BIN" doctor --no-env --log "$T/odd.log" >"$T/out" 2>&1; rc=$?
has "stayed in use" && fail "$case: a line without the figures read as a sleep"

# An OOM message the log wrapped (cut mid-word at 100 columns, then at word boundaries at 90) reads as the one-line
# original; one whose end never comes is said to be unreadable, with no conclusion drawn.
case=oom-wrapped
doc "$BIN" doctor --no-env --log "$D/logs/npu_oom_wrapped_constructed.log" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "NPU out of memory with 419.84 MiB reserved but unallocated: fragmentation (a 22.00 MiB request failed)" \
  "seen 2 times, first at $D/logs/npu_oom_wrapped_constructed.log:2:" "10.24 GiB in live tensors"
has "the live tensors do not fit" && fail "$case: a wrapped message read as a capacity problem"
doc "$BIN" doctor --no-env --log "$D/logs/npu_oom_cut_constructed.log" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "[warning] NPU out of memory, but the message is cut in the log: its figures cannot all be read"
{ has "fragmentation (" || has "do not fit"; } && fail "$case: concluded from a cut message"

# Issue #36 item 7: the output for people fits 100 columns, wrapped at words: the JSON of the same run (never
# wrapped) is all in the text, space aside, so no word was cut or lost; no line is over 100 characters or ends in a
# space; and a log line quoted anywhere is whole, or cut where a word ends and marked " ..." (a cut had left
# "driver and firmwa)").
layout() { # layout CASE ENV... BIN doctor ARGS...: the recorded setup, as text and as JSON
  case=$1; shift
  doc "$@" >"$T/text" 2>/dev/null
  doc "$@" --json >"$T/json" 2>/dev/null
  python3 - "$T/text" "$T/json" <<'PY' || { fail "$case: layout"; sed 's/^/    /' "$T/text" | head -80; }
import json, os, re, sys
text = open(sys.argv[1], encoding="utf-8").read()
doc = json.load(open(sys.argv[2], encoding="utf-8"))
bad = []
for i, line in enumerate(text.split("\n"), 1):
    if len(line) > 100:
        bad.append("line %d has %d characters: %s" % (i, len(line), line))
    if line.endswith(" "):
        bad.append("line %d ends in a space" % i)
strings = [e["value"] for e in doc["environment"]] + doc["not_checked"]
for f in doc["findings"]:
    strings += [f["title"], f["evidence"], f["why"]] + f["next"]
squeezed = re.sub(r"\s+", "", text.replace(" \\\n", " "))  # a command continued with " \\"
for s in strings:
    if re.sub(r"\s+", "", s) not in squeezed:
        bad.append("not in the text as the JSON has it (a word cut or lost): " + s[:150])
    for m in re.finditer(r"([^\s(]+\.log):(\d+): ", s):
        if not os.path.isfile(m.group(1)):
            continue
        line = open(m.group(1), encoding="utf-8", errors="replace").read().split("\n")[int(m.group(2)) - 1]
        line = line.rstrip("\r").lstrip(" \t")
        q = s[m.end():]
        n = 0
        while n < len(line) and n < len(q) and q[n] == line[n]:
            n += 1
        if n == len(line) or (q[n:n + 4] == " ..." and line[n] == " ") or \
                (n and q[n - 1:n + 3] == " ..." and line[n - 1] == " "):
            continue
        bad.append("a quote of %s:%s cut inside a word: ...%s" % (m.group(1), m.group(2), q[max(0, n - 30):n + 10]))
for b in bad:
    print("    " + b)
sys.exit(1 if bad else 0)
PY
}
layout layout-test-sh NPU_SMI_INFO=$D/npu-smi/910b3-8.txt NPU_SMI_BOARD=$D/npu-smi/board-910.txt \
    PYTORCH_NPU_ALLOC_CONF=expandable_segments:True "$BIN" doctor --root "$D/root-mismatch" \
    --log "$D/logs/field_report_constructed.log" --log "$D/logs/npu_oom_sglang_29838.log"
set --
for l in "$D"/logs/*.log; do set -- "$@" --log "$l"; done
layout layout-every-log NPU_SMI_INFO=$D/npu-smi/910b3-8.txt NPU_SMI_BOARD=$D/npu-smi/board-910.txt \
    NVIDIA_SMI_OUT=$D/nvidia-smi/h100-8.txt PYTORCH_NPU_ALLOC_CONF=expandable_segments:True,max_split_size_mb:64 \
    HBMALLOC_PYTHON=python3 PYTHONPATH="$T/py-old:$SRC/python" "$BIN" doctor --root "$D/root-mismatch" "$@"
set --

case=inference-310p
doc NPU_SMI_INFO=$D/npu-smi/310p3.txt "$BIN" doctor --root "$T" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "npu-smi driver           23.0.rc3" "npu                      0 310P3, health OK, memory 3841 / 21527 MB used" \
  "npu                      64 310P3, health OK, memory 1764 / 21527 MB used" \
  "[info] Ascend driver (HDK) 23.0.rc3 is older than 23.0.0" "Nothing to act on."

# The field report: expandable segments asked for, a firmware outside the driver's range, HCCL error 2 in the log.
case=field-report
doc NPU_SMI_INFO=$D/npu-smi/910b3-8.txt PYTORCH_NPU_ALLOC_CONF=expandable_segments:True \
    "$BIN" doctor --root "$D/root-mismatch" --log "$D/logs/field_report_constructed.log" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "1. [error] firmware 7.3.0.1.231 is outside the range driver 24.1.rc2 accepts ([7.0.0,7.2.99])" \
  "   explains 2, 3 and 4" "PYTORCH_NPU_ALLOC_CONF asks for expandable_segments:True, which this NPU cannot do: it is ignored" \
  "the same memory use as today: unset PYTORCH_NPU_ALLOC_CONF (the defaults)" \
  "torch_npu turned expandable segments off" "HCCL error: HcclGetRootInfo returned 2 (HCCL_E_PTR)" \
  "field_report_constructed.log:2:" "its step plan (hbm_step_plan:True with hbmalloc_torch.hook_optimizer(optimizer))"

# The field report end to end (docs/DOCTOR.md): torch_npu v6.0.rc2's warnings, a wrapped fragmentation OOM and HCCL
# error 2 in the log, the user's string, HDK 22.0.3, and the bundled real trace to prove the advice on. The root
# cause comes first and names what it explains; the release is inferred from the warning only v6.0.rc2 prints, so
# the string is not called refused; every printed export pastes into sh; replayed on an NPU sim without virtual
# memory as torch_npu 2.1.0.post6 reads the variable, the proven string lowers peak reserved against the defaults
# and against the user's setting, and the string that only drops expandable segments runs as the user's does.
case=field-report-full
TRACE="$SRC/examples/cs336-lm-ctx128-fullstep.trace"
MINE='max_split_size_mb:32,garbage_collection_threshold:0.6,expandable_segments:True'
doc PYTORCH_NPU_ALLOC_CONF="$MINE" "$BIN" doctor --root "$D/root-old" --log "$D/logs/field_report_full_constructed.log" \
    --trace "$TRACE" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "1. [error] Ascend driver (HDK) 22.0.3 is older than 23.0.0" "   explains 2, 3 and 5" \
  "torch_npu                2.1.0.post6 or another v6.0.rc2 release, inferred" \
  "NPU out of memory with 6.40 GiB reserved but unallocated: fragmentation" \
  "HCCL error: HcclGetRootInfo returned 2 (HCCL_E_PTR)" \
  "on a simulated NPU of 60.97 GiB without virtual memory: " "from 58.71 GiB with yours" \
  "and in your code: torch.npu.set_per_process_memory_fraction(0.99)"
has "is refused" && fail "$case: the string is called refused, but torch_npu 2.1.0.post6 ran it"
# Without virtual memory the same sweep sizes hbmalloc's arena; its line runs the trace alone in one device allocation.
arena=$(grep -o "export HBMALLOC_CONF='hbm_arena_mb:[0-9]*'" "$T/out" | grep -o "hbm_arena_mb:[0-9]*")
[ -n "$arena" ] || fail "$case: no proven arena line"
"$BIN" replay "$TRACE" --backend sim:dialect=npu,vmm=off --capacity 60.97GiB --conf "$arena" >"$T/arena" 2>&1 ||
  fail "$case: $arena does not run the trace"
grep -q "device calls: *1 malloc, 0 free" "$T/arena" || fail "$case: $arena needed more than the arena"
has "max_split_size_mb:1024,garbage_collection_threshold:0.8" && fail "$case: typed advice"
peak() { # peak reserved bytes of a replay of TRACE under PYTORCH_NPU_ALLOC_CONF as torch_npu 2.1.0.post6 reads it
  "$@" HBMALLOC_TORCH_NPU_VERSION=2.1.0.post6 "$BIN" replay "$TRACE" --backend sim:dialect=npu,vmm=off \
    --capacity 60.97GiB | sed -n 's/^peak reserved: .*(\([0-9]*\) bytes).*/\1/p'
}
defaults=$(peak env -u PYTORCH_NPU_ALLOC_CONF)
mine=$(peak env PYTORCH_NPU_ALLOC_CONF="$MINE")
[ -n "$defaults" ] && [ -n "$mine" ] || fail "$case: no peak from the replays"
grep -n "export PYTORCH_NPU_ALLOC_CONF=" "$T/out" >"$T/exports"
: >"$T/pasted-values"
while IFS= read -r hit; do
  lineno=${hit%%:*}
  line=$(printf '%s' "$hit" | grep -o "export PYTORCH_NPU_ALLOC_CONF=.*")
  mkdir -p "$T/paste$lineno"
  value=$(cd "$T/paste$lineno" && sh -c "$line; printf '%s' \"\$PYTORCH_NPU_ALLOC_CONF\"")
  [ -z "$(ls "$T/paste$lineno")" ] || fail "$case: pasting line $lineno created files"
  code=$(sed -n "$((lineno + 1))p" "$T/out" | grep "and in your code: " |
    grep -o "set_per_process_memory_fraction([0-9.]*)" | grep -o "[0-9.]*")
  if [ -n "$code" ]; then # the proven string, with the fraction the doctor says to set in code (the release reads
    # no fraction from its variable: the string and the call together are hbmalloc's own string)
    got=$("$BIN" replay "$TRACE" --backend sim:dialect=npu,vmm=off --capacity 60.97GiB \
      --conf "$value,per_process_memory_fraction:$code" | sed -n 's/^peak reserved: .*(\([0-9]*\) bytes).*/\1/p')
    [ "$got" -lt "$defaults" ] && [ "$got" -lt "$mine" ] ||
      fail "$case: '$value' + fraction $code: peak $got, defaults $defaults, yours $mine"
  else # the string without what the device ignores: what runs today
    got=$(peak env PYTORCH_NPU_ALLOC_CONF="$value")
    [ "$got" -eq "$mine" ] || fail "$case: '$value': peak $got, not yours $mine"
  fi
  echo "$value" >>"$T/pasted-values"
done <"$T/exports"
[ "$(wc -l <"$T/pasted-values")" -ge 2 ] || fail "$case: fewer than two export lines"
has "garbage_collection_threshold is left out of that string" ||
  fail "$case: the cleanup string should drop the inactive garbage_collection_threshold and say so"
# The same run laid out for people (the layout cases above).
layout layout-field-report-full PYTORCH_NPU_ALLOC_CONF="$MINE" "$BIN" doctor --root "$D/root-old" \
    --log "$D/logs/field_report_full_constructed.log" --trace "$TRACE"

# A snapshot with one device (device 1) is proven on without naming it; the sweep line names the device it read.
case=trace-one-device
# In a folder deep enough that the path cannot fit a headline (CI's clone is deeper than a developer's): the headline
# names the file, the evidence line its whole path, the command the path quoted.
mkdir -p "$T/a-folder-whose-name-is-long-enough/to-push-the-path-past-the-width-of-a-headline"
ONE=$T/a-folder-whose-name-is-long-enough/to-push-the-path-past-the-width-of-a-headline/layoutediting-torch1x-segments.pickle
cp "$SRC/tests/data/layoutediting-torch1x-segments.pickle" "$ONE"
doc "$BIN" doctor --no-env --trace "$ONE" --capacity 80GiB >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "replayed ${ONE##*/} on a simulated GPU of 80.00 GiB" "seen: $T/a-folder-whose-name-is-long-enough/" "\$ hbmalloc sweep '$ONE' --device 1 --backend"
doc "$BIN" doctor --no-env --trace "$ONE" --capacity 80GiB --device 0 >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "device 0 has no segments or history in this snapshot (devices: 1); choose one with --device"
# --capacity is read as every command reads it: 80 with no unit is refused with its likely meaning, not replayed on
# a device of 80 bytes.
doc "$BIN" doctor --no-env --trace "$ONE" --capacity 80 >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "hbmalloc doctor: --capacity 80 has no unit: 80 bytes is no device; did you mean --capacity 80GiB?"

# A capacity no device has (a garbled log: 10^20 GiB) is not taken for the replay's device: before, it was converted
# to a size past 2^64 (undefined; x86 gave 8 EiB) and replayed on that.
printf '%s\n' "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of \
99999999999999999999 GiB of which 1.00 MiB is free. Of the allocated memory 1.00 GiB is allocated by PyTorch, and \
2.00 GiB is reserved by PyTorch but unallocated." >"$T/huge-capacity.log"
doc "$BIN" doctor --no-env --log "$T/huge-capacity.log" --trace "$ONE" >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "--trace needs the device's capacity: no out-of-memory message in a --log gives one a device can have"

case=old-hdk
doc PYTORCH_NPU_ALLOC_CONF=expandable_segments:True,roundup_power2_divisions:[256:1,512:2,\>:4] \
    "$BIN" doctor --root "$D/root-old" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "1. [error] Ascend driver (HDK) 22.0.3 is older than 23.0.0: no expandable segments" \
  "   explains 2" "2. [error] PYTORCH_NPU_ALLOC_CONF asks for expandable_segments:True" \
  "the same memory use as today: export PYTORCH_NPU_ALLOC_CONF='roundup_power2_divisions:[256:1,512:2,>:4]'"
# Pasted into a shell, the printed line sets exactly that value and creates no file (an unquoted > would).
line=$(grep -o "export PYTORCH_NPU_ALLOC_CONF=.*" "$T/out" | head -n1)
(cd "$T" && mkdir paste && cd paste && sh -c "$line; printf '%s' \"\$PYTORCH_NPU_ALLOC_CONF\"" >../pasted &&
    [ -z "$(ls)" ]) || fail "$case: the export line does not paste cleanly"
[ "$(cat "$T/pasted")" = "roundup_power2_divisions:[256:1,512:2,>:4]" ] || fail "$case: pasted value '$(cat "$T/pasted")'"

# The runtime itself, loaded: the fake CANN answers the virtual-memory probe with 207000.
case=runtime-probe
doc HBMALLOC_LIBASCENDCL="$FAKEACL" FAKE_ACL_VMM=0 FAKE_ACL_DRIVER=24.1.rc2 PYTORCH_NPU_ALLOC_CONF=expandable_segments:True \
    "$BIN" doctor --root "$T" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "loads                    yes" "AscendCL 1.15.0, driver 24.1.rc2, Ascend910B3" \
  "virtual memory           no: the probe aclrtReserveMemAddress(512 bytes) returned ACL_ERROR_RT_FEATURE_NOT_SUPPORT (207000)" \
  "sleeping pools           no: a sleep cannot keep addresses without virtual memory" \

has "asks for expandable_segments:True, which this NPU cannot do" || fail "$case: no expandable finding"
case=runtime-ok
doc HBMALLOC_LIBASCENDCL="$FAKEACL" PYTORCH_NPU_ALLOC_CONF=expandable_segments:True \
    "$BIN" doctor --root "$T" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "virtual memory           yes on every device (granularity 2048 KiB)" "No problems found." \
  "sleeping pools           yes: hbmalloc.torch.sleep() keeps every address; backups in pinned host memory"

case=bad-settings
doc PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:10 "$BIN" doctor --root "$D/root-good" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "PYTORCH_NPU_ALLOC_CONF is refused" "max_split_size_mb"
case=both-set
doc PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:64 PYTORCH_ALLOC_CONF=max_split_size_mb:64 \
    "$BIN" doctor --root "$D/root-good" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "both PYTORCH_NPU_ALLOC_CONF and PYTORCH_ALLOC_CONF are set"

# Logs alone, and hbmalloc's own out-of-memory message.
case=logs
doc "$BIN" doctor --no-env --log "$D/logs/npu_oom_vllm_ascend_19.log" --log "$D/logs/hccl_vllm_ascend_405.log" \
    --log "$D/logs/cuda_oom_pytorch_16417.log" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "NPU out of memory with 419.84 MiB reserved but unallocated" "HCCL_E_TCP_CONNECT" \
  "GPU out of memory with 194.87 MiB reserved but unallocated"
grep -q "^Environment" "$T/out" && fail "$case: --no-env printed the environment"
case=own-oom
"$BIN" replay "$SRC/examples/cs336-lm-ctx128-fullstep.trace" --capacity 2GiB >"$T/replay" 2>&1
doc "$BIN" doctor --no-env --log "$T/replay" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "GPU out of memory: the live tensors do not fit (a 100.00 MiB request failed)" "2.00 GiB in all, 30.00 MiB of it free"

case=json
doc NPU_SMI_INFO=$D/npu-smi/910b3-8.txt "$BIN" doctor --json --root "$D/root-mismatch" \
    --log "$D/logs/hccl_gpustack_2021.log" >"$T/out" 2>&1; rc=$?
[ "$rc" -eq 1 ] || fail "$case: exit status $rc"
python3 - "$T/out" <<'PY' || fail "json: not the expected document"
import json, sys
d = json.load(open(sys.argv[1]))
ids = [f["id"] for f in d["findings"]]
assert ids[0] == "ascend-driver-firmware-mismatch" and "hccl-error" in ids, ids
assert d["findings"][0]["severity"] == "error" and d["findings"][0]["next"], d["findings"][0]
assert d["findings"][0]["explains"] == str(ids.index("hccl-error") + 1), d["findings"][0]
assert any(e["section"] == "ascend" and e["key"] == "npu" for e in d["environment"])
PY

# Chinese log text cut at the evidence limit, and a byte that is not UTF-8: --json stays valid UTF-8 JSON (issue
# #15 item 5: the cut split a character, and raw bytes were copied through). Without the fix Python's strict
# UTF-8 decoding fails here.
case=json-utf8
printf '%s HCCL function error: HcclGetRootInfo(&hcclID), error code is 2\n' \
    "$(python3 -c "print('RuntimeError: 初始化通信域失败' * 40)")" >"$T/zh.log"
printf 'RuntimeError: \377\376 HcclCommInitRootInfo fail, error:7\n' >>"$T/zh.log"
doc "$BIN" doctor --json --no-env --log "$T/zh.log" >"$T/out" 2>&1; rc=$?
[ "$rc" -eq 1 ] || fail "$case: exit status $rc"
python3 - "$T/out" <<'PY' || fail "$case: not valid UTF-8 JSON with whole characters"
import json, sys
d = json.loads(open(sys.argv[1], "rb").read().decode("utf-8", errors="strict"))
ev = [f["evidence"] for f in d["findings"] if f["id"] == "hccl-error"]
assert len(ev) == 2, ev
long = [e for e in ev if "初始化" in e][0]
assert long.endswith("初始化通信域失败 ...") or long.endswith(" ...") and "\ufffd" not in long, long
assert "\ufffd\ufffd HcclCommInitRootInfo" in [e for e in ev if "Init" in e and "初始化" not in e][0], ev
PY

# npu-smi hangs (a wedged driver): the doctor kills it after HBMALLOC_DOCTOR_TIMEOUT and says so, and goes on.
case=tool-hung
start=$(date +%s)
doc NPU_SMI_HANG="$T/hung.pid" HBMALLOC_DOCTOR_TIMEOUT=1 "$BIN" doctor --root "$D/root-good" >"$T/out" 2>&1; rc=$?
took=$(( $(date +%s) - start ))
expect 1 "$T/out" "npu-smi                  did not answer within 1 s (killed)" \
  "[error] npu-smi did not answer within 1 s: the driver may be wedged" "driver (HDK)             24.1.rc3"
[ "$took" -lt 20 ] || fail "$case: took $took s"
# Killed: gone, or a zombie waiting for init to reap it (it was the shell's child, not the doctor's).
hpid=$(cat "$T/hung.pid")
state=$(sed 's/^.*) //' "/proc/$hpid/stat" 2>/dev/null | cut -c1)
if [ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]; then
  kill "$hpid"; fail "$case: the hung tool was left running (state $state)"
fi

case=usage
doc "$BIN" doctor --bogus >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "unknown option"
doc "$BIN" doctor --no-env --log "$T/missing.log" >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "cannot open log $T/missing.log: No such file or directory" # the system's reason (issue #36 item 7)
# --no-env and nothing else examines nothing: said, with bad usage's status, never "No problems found".
case=nothing-to-check
doc "$BIN" doctor --no-env >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "hbmalloc doctor: nothing was checked: --no-env leaves out this machine's environment, and no" \
  "--log, --trace or --snapshot was given"
has "No problems found" && fail "$case: 'No problems found' with nothing examined"
doc "$BIN" doctor --no-env --json >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "nothing was checked"

# Issue #28 item 13: a FIFO where a version file is expected blocked the doctor for ever (files were opened before
# they were checked); a device named as a log (/dev/zero) was read without end. Version files are opened without
# blocking and read only when regular; a log that is a device is refused by name.
case=fifo-in-root
cp -R "$D/root-good" "$T/root-fifo" && chmod -R u+w "$T/root-fifo"
rm -f "$T/root-fifo/usr/local/Ascend/driver/version.info"
mkfifo "$T/root-fifo/usr/local/Ascend/driver/version.info"
doc NPU_SMI_INFO=$D/npu-smi/910b3-8.txt timeout 60 "$BIN" doctor --root "$T/root-fifo" >"$T/out" 2>&1; rc=$?
[ "$rc" -ne 124 ] || fail "$case: blocked on the FIFO"
expect 0 "$T/out" "firmware                 7.5.0.1.129"
case=log-device
doc timeout 60 "$BIN" doctor --no-env --log /dev/zero >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "log /dev/zero is not a regular file (a device)"

# Issue #40 item 2: HCCL found no memory for a communicator's buffers (HCCL_E_OOM, a constructed line in torch_npu's
# shape, as tests/tools/test_doctor.c's): the headroom to leave is 2 x HCCL_BUFFSIZE, and the printed export, pasted
# into a shell, is a string hbmalloc reads (HBMALLOC_CONF is strict: a key it did not know would be refused).
case=hccl-oom-headroom
printf '%s\n' "[rank3]: RuntimeError: HcclCommInitRootInfo:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:102 HCCL function error: HcclCommInitRootInfo(numRanks, &rootInfo, rank, &(comm->hcclComm_)), error code is 24" >"$T/hccl-oom.log"
doc HCCL_BUFFSIZE=300 "$BIN" doctor --no-env --log "$T/hccl-oom.log" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "HcclCommInitRootInfo returned 24 (HCCL_E_OOM)" "export HBMALLOC_CONF='hbm_headroom_mb:600'"
line=$(flat "$T/out" | grep -o "export HBMALLOC_CONF='hbm_headroom_mb:[0-9]*'")
(cd "$T" && mkdir paste-headroom && cd paste-headroom && sh -c "$line; \"$BIN\" conf" >../conf-out 2>&1 &&
    [ -z "$(ls)" ]) || fail "$case: the export line does not paste and run: $(cat "$T/conf-out")"
grep -q "hbm_headroom_mb: 600" "$T/conf-out" || fail "$case: hbmalloc conf did not read it: $(cat "$T/conf-out")"

# Issue #40 item 2 for NCCL: its out-of-memory with the cause on the line after torch's "Last error:"
# (SOURCES.md): the headroom of one communicator (700 MiB; times NCCL_BUFFSIZE / 4 MiB), pasted and read back.
case=nccl-oom-headroom
doc NCCL_BUFFSIZE=16777216 "$BIN" doctor --no-env --log "$D/logs/nccl_oom_last_error_constructed.log" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "NCCL out of device memory: no room for a communicator's buffers" \
  "nccl_oom_last_error_constructed.log:7: [rank0]: Cuda failure 2 'out of memory'" \
  "export HBMALLOC_CONF='hbm_headroom_mb:2800'"
line=$(flat "$T/out" | grep -o "export HBMALLOC_CONF='hbm_headroom_mb:[0-9]*'")
(cd "$T" && mkdir paste-nccl && cd paste-nccl && sh -c "$line; \"$BIN\" conf" >../conf-out 2>&1 &&
    [ -z "$(ls)" ]) || fail "$case: the export line does not paste and run: $(cat "$T/conf-out")"
grep -q "hbm_headroom_mb: 2800" "$T/conf-out" || fail "$case: hbmalloc conf did not read it: $(cat "$T/conf-out")"

# Issue #40 item 3: several ranks. torchrun --tee of 4 GPUs in one log (prefixes [defaultN]: and [rankN]:): rank 3
# ran out of memory first, the others' watchdogs timed out 601 s later: the consequence, confirmed, ranked first.
case=ranks-torchrun-tee
doc "$BIN" doctor --no-env --log "$D/logs/ranks_torchrun_tee_constructed.log" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "1. [error] rank 3 failed first: GPU out of memory with 6.87 GiB reserved but unallocated" \
  "the collective errors of ranks 0-2 came 601 s later: its consequence" "explains 3" \
  "rank 0, 12-18 20:17:21: NCCL error: a collective timed out (the process group's watchdog)"
doc "$BIN" doctor --no-env --json --log "$D/logs/ranks_torchrun_tee_constructed.log" >"$T/out" 2>&1; rc=$?
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
ids = [f["id"] for f in d["findings"]]
assert ids[0] == "ranks-first-failure" and d["findings"][0]["explains"] == str(ids.index("nccl-error") + 1), ids
t = d["ranks"]["timeline"]
assert t["first"] == "rank 3" and t["first_kind"] == "oom" and t["consequence"] == "confirmed", t
assert t["ordered_by"] == "time" and t["window_s"] == 660, t
r = {x["label"]: x for x in d["ranks"]["ranks"]}
assert r["rank 0"]["first_failure"]["time"] == "12-18 20:17:21" and r["rank 0"]["first_failure"]["time_own"], r
assert not r["rank 3"]["first_failure"]["time_own"], r["rank 3"]' "$T/out" || fail "$case: the JSON"

# msrun's per-rank files (worker_N.log) as a folder and as a quoted pattern: the same four ranks; rank 1's
# out-of-memory has no time of its own and none after it, so the HCCL timeouts' cause is unconfirmed.
case=ranks-folder-pattern
for arg in "$D/logs/ranks_msrun_npu" "$D/logs/ranks_msrun_npu/worker_*.log"; do
  doc "$BIN" doctor --no-env --log "$arg" >"$T/out" 2>&1; rc=$?
  expect 1 "$T/out" "rank 1 failed first as far as the logs show (NPU out of memory with 6.40 GiB reserved" \
    "the collective errors of ranks 0, 2 and 3 are its consequence is unconfirmed: rank 1's failure has no time of its own" \
    "rank 0, 2025-10-24 11:48:57.509: HCCL error: a collective timed out (TaskExecStage)"
done
# Both at once (rank 0 to 3 twice: said as mixed), laid out for people as the layout cases above check.
layout layout-ranks "$BIN" doctor --no-env --log "$D/logs/ranks_msrun_npu" --log "$D/logs/ranks_torchrun_tee_constructed.log"
doc "$BIN" doctor --no-env --log "$D/logs/ranks_msrun_npu" --log "$D/logs/ranks_torchrun_tee_constructed.log" >"$T/out" 2>&1
has "rank 0 has two logs, $D/logs/ranks_msrun_npu/worker_0.log and $D/logs/ranks_torchrun_tee_constructed.log" ||
  fail "$case: the same ranks in two jobs' logs not said"
has "is unconfirmed: the logs are not all of one run of one job" || fail "$case: mixed jobs' failures ordered as one job's"
doc "$BIN" doctor --no-env --log "$D/logs/ranks_msrun_npu/nothing_*.log" >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "no file matches the log pattern $D/logs/ranks_msrun_npu/nothing_*.log"
mkdir -p "$T/empty/sub"
doc "$BIN" doctor --no-env --log "$T/empty" >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "log folder $T/empty has no log file directly inside (its subfolders are not read"

# Gigabytes of logs are streamed: a generated log, 500 failures of each of a thousand ranks (115 MB), through a pipe
# is read with the doctor's peak RSS under 32 MB (every failure kept would take 350 MB), in a few seconds.
case=ranks-streamed
python3 - "$BIN" <<'PY' || fail "$case: $(cat "$T/big-out" 2>/dev/null | tail -3)"
import resource, subprocess, sys, time
start = time.time()
p = subprocess.Popen([sys.argv[1], "doctor", "--no-env", "--json", "--log", "/dev/stdin"], stdin=subprocess.PIPE,
                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
line = ("[rank%d]:[E1218 20:%02d:%02d.426415540 ProcessGroupNCCL.cpp:629] [Rank %d] Watchdog caught collective "
        "operation timeout: WorkNCCL(SeqNum=%d, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600081 milliseconds "
        "before timing out.\n")
for b in range(50):
    p.stdin.write("".join(line % (i % 1000, i // 60000 % 60, i // 1000 % 60, i % 1000, i)
                          for i in range(b * 10000, (b + 1) * 10000)).encode())
p.stdin.close()
out = p.stdout.read()
assert p.wait() == 1, p.returncode
import json
d = json.loads(out)["ranks"]
assert len(d["ranks"]) == 1000 and d["ranks"][999]["failures_more"] == 496, d["ranks"][999]
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB
took = time.time() - start
assert rss < 32 * 1024, "peak RSS %d KiB" % rss
assert took < 60, "took %.1f s" % took
PY

# Issue #40 item 3: every rank's snapshot at once. Four ranks' dumps, named as hbm_oom_dump names them, written by
# `hbmalloc replay --snapshot` from a real trace (examples/cs336-lm-ctx512-forward.trace, a Transformer LM's forward
# pass): ranks 0-2 at its line 1000, rank 3 at line 2000, holding more; a file in the folder that is not a snapshot.
# The outlier is named with what it holds more, the file not read is said (exit 2, the rest compared), the printed
# view command runs as printed and draws the two ranks; JSON for machines; one rank alone has nothing to compare.
case=ranks-snapshots
mkdir "$T/ranks"
for r in 0 1 2 3; do
  n=1000; [ $r -eq 3 ] && n=2000
  head -n $n "$SRC/examples/cs336-lm-ctx512-forward.trace" >"$T/part$r.trace"
  "$BIN" replay "$T/part$r.trace" --conf "" --snapshot "$T/ranks/hbmalloc-oom-rank$r-dev0-pid1-1.pickle" >/dev/null ||
    fail "$case: replay --snapshot rank $r"
done
printf 'step 10 loss 2.31\n' >"$T/ranks/notes.json"
(cd "$T" && doc "$BIN" doctor --no-env --snapshot ranks >"$T/out" 2>&1); rc=$?
expect 2 "$T/out" "not read: ranks/notes.json is not a memory snapshot" \
  "rank 3 stands out among 4 ranks: peak reserved 27.86 GiB, the median rank's 18.94 GiB (+8.93 GiB, 1.47x)" \
  "What it holds that rank 0 (the median rank) does not, by size: 8.69 GiB in 8 groups" \
  "+3.91 GiB 50 more blocks of 80.00 MiB"
[ "$(grep -c '^  rank [0-9].* yes$' "$T/out")" -eq 1 ] && grep -q '^  rank 3 .* yes$' "$T/out" ||
  fail "$case: not rank 3 alone marked an outlier"
awk 'length > 100 || / $/ { bad = 1 } END { exit bad }' "$T/out" || fail "$case: a line over 100 columns or ending in a space"
cmd=$(flat "$T/out" | grep -o '\$ hbmalloc view [^$]* -o ranks.svg')
(cd "$T" && PATH="$(dirname "$BIN"):$PATH" sh -c "${cmd#\$ }" >view-out 2>&1) ||
  fail "$case: the view command does not run as printed: $cmd: $(cat "$T/view-out")"
[ "$(grep -o 'class="rank" data-rank="[0-9]*"' "$T/ranks.svg" 2>/dev/null | tr '\n' ' ')" = \
  'class="rank" data-rank="0" class="rank" data-rank="3" ' ] || fail "$case: ranks.svg does not draw ranks 0 and 3"
rm "$T/ranks/notes.json"
doc "$BIN" doctor --no-env --json --snapshot "$T/ranks/*rank*.pickle" >"$T/out" 2>&1; rc=$?
[ "$rc" -eq 1 ] || fail "$case: --json exit status $rc, expected 1"
python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))["snapshots"]
assert d["outliers"] == 1 and [r["rank"] for r in d["ranks"]] == [0, 1, 2, 3], d
r = d["ranks"][3]
assert r["outlier"] == ["reserved"] and r["more_than_median"]["largest"][0]["blocks"] == 50, r' "$T/out" ||
  fail "$case: the JSON"
doc "$BIN" doctor --no-env --snapshot "$T/ranks/hbmalloc-oom-rank3-dev0-pid1-1.pickle" >"$T/out" 2>&1; rc=$?
expect 0 "$T/out" "One rank's snapshot only: nothing to compare it with."
doc "$BIN" doctor --no-env --snapshot "$T/ranks/nothing*.pickle" >"$T/out" 2>&1; rc=$?
expect 2 "$T/out" "--snapshot: $T/ranks/nothing*.pickle: no file matches"
# A snapshot whose pickle repeats one segment of 1000 blocks 100,000 times by memo references (200 KB of file, 10^8
# blocks to walk): refused by the file's bound, in bounded memory and time, and the other rank still read.
python3 -c 'import pickle, sys
b = [{"size": 1024, "state": "active_allocated", "frames": []}] * 1000
s = {"device": 0, "total_size": 1024000, "blocks": b}
pickle.dump({"segments": [s] * 100000, "device_traces": [[]]}, open(sys.argv[1], "wb"), protocol=4)' "$T/memo-rank9.pickle"
# The address-space limit only where the tool is not built with AddressSanitizer, whose shadow memory alone reserves
# some 15 TB of it (the normal build's run of this test holds the bound).
(ldd "$BIN" 2>/dev/null | grep -q libasan || ulimit -v 1000000
  doc timeout 60 "$BIN" doctor --no-env --snapshot "$T/memo-rank9.pickle" \
  "$T/ranks/hbmalloc-oom-rank0-dev0-pid1-1.pickle" >"$T/out" 2>&1); rc=$?
expect 2 "$T/out" "memo-rank9.pickle: the segments hold more blocks than the file can describe" \
  "One rank's snapshot only: nothing to compare it with."

# A rank whose cache, not its tensors, stands out (reserved alike, 3 GiB of it unallocated): the doctor prints a sweep
# of that snapshot under other settings, and the command runs as printed. Snapshots in torch's JSON shape
# (torch/cuda/memory.py _snapshot: segments with blocks of size and state).
case=ranks-unallocated
mkdir "$T/cache"
for r in 0 1 2 3; do
  python3 -c 'import json, sys
G, r = 1 << 30, int(sys.argv[2])
blocks = [{"size": 10 * G, "state": "active_allocated"}] if r < 3 else \
    [{"size": 7 * G, "state": "active_allocated"}, {"size": 3 * G, "state": "inactive"}]
seg = {"device": 0, "address": 139692569788416, "total_size": 10 * G, "stream": 0, "segment_type": "large",
       "blocks": blocks}
json.dump({"segments": [seg], "device_traces": [[]]}, open(sys.argv[1], "w"))' "$T/cache/rank$r.json" $r
done
doc "$BIN" doctor --no-env --snapshot "$T/cache" >"$T/out" 2>&1; rc=$?
expect 1 "$T/out" "rank 3 stands out among 4 ranks: reserved but unallocated 3.00 GiB"
cmd=$(flat "$T/out" | grep -o '\$ hbmalloc sweep [^$]*' | sed 's/ *$//')
[ -n "$cmd" ] || fail "$case: no sweep printed"
(cd "$T" && PATH="$(dirname "$BIN"):$PATH" sh -c "${cmd#\$ }" >sweep-out 2>&1) ||
  fail "$case: the sweep command does not run as printed: $cmd: $(cat "$T/sweep-out")"
grep -q "rank" "$T/sweep-out" || fail "$case: the sweep printed no ranking: $(cat "$T/sweep-out")"

[ $fails -eq 0 ] && echo "doctor: all cases passed" || { echo "doctor: $fails failures"; exit 1; }
