#!/bin/sh
# The user's advice path, end to end, proven by running what the tool prints (issue #36): a torch_npu job on old
# firmware (tests/data/doctor/logs/field_report_full_constructed.log: the expandable-segments warning, a
# fragmentation OOM on a 60.97 GiB NPU, HcclGetRootInfo error 2) and a CUDA job (cuda_oom_pytorch_16417.log, a real
# report). The doctor reads the log; every command it prints on a line of its own ("$ ", docs/DOCTOR.md) is taken
# from its output as printed, continuation lines joined, and run with sh in the folder the user is in, the snapshot
# it asks for there as oom.pickle (a real training step's recording, examples/, written as torch writes a snapshot).
# Each must run (exit 0, or 1 for findings / no fit). The export lines the sweep and the doctor's replay recommend
# must name the variable the user's framework reads, be accepted by `hbmalloc conf` for the release, and replay the
# snapshot without OOM at the capacity the doctor read from the log, set as printed.
# usage: advice_story.sh HBMALLOC_BINARY SOURCE_DIR
BIN=$1 SRC=$2
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
mkdir "$T/bin"
ln -s "$BIN" "$T/bin/hbmalloc"
PATH="$T/bin:$PATH"
export PATH
unset PYTORCH_NPU_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF HBMALLOC_CONF ASCEND_HOME_PATH HBMALLOC_TORCH_VERSION \
    HBMALLOC_TORCH_NPU_VERSION

# commands FILE: the "$ " lines of the doctor's or the sweep's output, one command a line (" \" continuations joined)
commands() {
    python3 - "$1" <<'PY'
import sys
cmd = None
for line in open(sys.argv[1], encoding="utf-8"):
    s = line.strip()
    if cmd is not None:
        cmd += " " + s
    elif s.startswith("$ "):
        cmd = s[2:]
    else:
        continue
    if cmd.endswith(" \\"):
        cmd = cmd[:-2]
        continue
    print(cmd)
    cmd = None
PY
}

# story NAME LOG TRACE VAR RELEASE_OPTION...: one user's path
story() {
    name=$1 log=$2 trace=$3 var=$4
    shift 4
    d="$T/$name"
    mkdir "$d"
    cp "$log" "$d/train.log"
    (cd "$d" && hbmalloc replay "$trace" --snapshot oom.pickle >/dev/null 2>&1) || fail "$name: writing the snapshot"
    (cd "$d" && hbmalloc doctor --no-env --log train.log >doctor.txt 2>&1)
    [ $? -eq 1 ] || fail "$name: the doctor's exit status (1: findings)"
    commands "$d/doctor.txt" >"$d/queue"
    n=$(wc -l <"$d/queue")
    [ "$n" -ge 2 ] || { fail "$name: the doctor printed $n commands"; sed 's/^/    /' "$d/doctor.txt"; }
    # The backend and capacity the doctor read from the log (its sweep command): what the advice must fit.
    dev=$(sed -n 's/^hbmalloc sweep .* --capacity \([0-9.]*GiB\) --backend \([^ ]*\).*/--capacity \1 --backend \2/p' \
        "$d/queue" | head -n 1)
    [ -n "$dev" ] || fail "$name: no capacity and backend in the doctor's sweep command"
    # Every command printed, and those the commands print in turn ("the whole table: $ hbmalloc sweep ..."), once.
    : >"$d/done" && : >"$d/exports"
    i=0
    while [ $i -lt 20 ] && cmd=$(grep -v -x -F -f "$d/done" "$d/queue" | head -n 1) && [ -n "$cmd" ]; do
        i=$((i + 1))
        printf '%s\n' "$cmd" >>"$d/done"
        case "$cmd" in hbmalloc\ *) ;; *) fail "$name: not an hbmalloc command: $cmd"; continue ;; esac
        (cd "$d" && sh -c "$cmd" >"out$i" 2>&1)
        rc=$?
        echo "$name: \$ $cmd -> exit $rc"
        [ $rc -le 1 ] || { fail "$name: exit $rc: $cmd"; sed 's/^/    /' "$d/out$i" | head -20; }
        grep -o "export [A-Z_]*='[^']*'" "$d/out$i" >>"$d/exports"
        commands "$d/out$i" >>"$d/queue"
    done
    grep -q "^export $var=" "$d/exports" 2>/dev/null || fail "$name: no export $var= among what the commands printed"
    if grep -v "^export $var=\|^export HBMALLOC_CONF=" "$d/exports" 2>/dev/null | grep -q .; then
        fail "$name: an export of another variable: $(grep -v "^export $var=\|^export HBMALLOC_CONF=" "$d/exports")"
    fi
    grep "^export $var=" "$d/exports" | sort -u >"$d/ours"
    while IFS= read -r line; do
        value=$(sh -c "$line; printf %s \"\$$var\"")
        hbmalloc conf "$value" "$@" >"$d/conf.out" 2>&1 || { fail "$name: conf $* refuses '$value'"; cat "$d/conf.out"; }
        (cd "$d" && sh -c "$line; hbmalloc replay oom.pickle $dev" >replay.out 2>&1)
        grep -q "^OOMs: *0$" "$d/replay.out" || { fail "$name: '$line' does not replay without OOM ($dev)"; \
            sed 's/^/    /' "$d/replay.out" | head -20; }
        grep -q "$(echo "$value" | cut -d, -f1)" "$d/replay.out" || fail "$name: the replay did not read $var"
        echo "$name: $line: accepted ($*), replays without OOM ($dev)"
    done <"$d/ours"
}

story npu "$SRC/tests/data/doctor/logs/field_report_full_constructed.log" "$SRC/examples/cs336-lm-ctx128-fullstep.trace" \
    PYTORCH_NPU_ALLOC_CONF --torch-npu 2.1.0.post6
story cuda "$SRC/tests/data/doctor/logs/cuda_oom_pytorch_16417.log" "$SRC/examples/finetune-varlen.trace" \
    PYTORCH_CUDA_ALLOC_CONF --dialect cuda
[ "$fails" -eq 0 ] && echo "advice_story: ok"
[ "$fails" -eq 0 ]
