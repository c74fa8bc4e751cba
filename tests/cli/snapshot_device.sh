#!/bin/sh
# snapshot_device.sh: which device of a PyTorch snapshot the commands read when --device is not given (issue #36
# item 8): a snapshot's only device, whichever it is; of several none is guessed, and the message lists them.
# usage: snapshot_device.sh HBMALLOC SOURCE_DIR
set -u
BIN=$1; SRC=$2
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
run() { # run CASE RC TEXT CMD...: the exit status, and TEXT in the output
  case=$1 want=$2 text=$3; shift 3
  "$@" >"$T/out" 2>&1; rc=$?
  [ "$rc" -eq "$want" ] || { fail "$case: exit status $rc, expected $want"; sed 's/^/    /' "$T/out" | head -20; }
  grep -qF -- "$text" "$T/out" || { fail "$case: missing '$text'"; sed 's/^/    /' "$T/out" | head -20; }
}

# PyTorch 1.x's list of segments, all on device 1 (tests/data/README.md): read without --device, as with --device 1.
ONE=$SRC/tests/data/layoutediting-torch1x-segments.pickle
run one-device 0 "peak reserved:      3.40 GiB (3649044480 bytes)" "$BIN" replay "$ONE"
"$BIN" replay "$ONE" --device 1 | grep -v "^replay time" >"$T/named"
"$BIN" replay "$ONE" | grep -v "^replay time" >"$T/unnamed"
cmp -s "$T/named" "$T/unnamed" || fail "one-device: without --device not the replay of device 1"
# A device named is read or refused, never replaced by another.
run named-absent 2 "device 0 has no segments or history in this snapshot (devices: 1); choose one with --device" \
  "$BIN" replay "$ONE" --device 0
run sweep-one-device 0 "rank" "$BIN" sweep "$ONE" --no-progress --grid expandable_segments=False,True

# Two devices (0 and 3), none named: which is not guessed.
cat >"$T/two.json" <<'EOF'
{"segments": [{"device": 0, "address": 4096, "total_size": 2097152, "stream": 0, "blocks": []},
              {"device": 3, "address": 4096, "total_size": 4194304, "stream": 0, "blocks": []}],
 "device_traces": [[], [], [], []]}
EOF
run two-devices 2 "this snapshot holds more than one device (devices: 0, 3); choose one with --device" \
  "$BIN" replay "$T/two.json"
run two-devices-named 0 "peak reserved:      4.00 MiB" "$BIN" replay "$T/two.json" --device 3

# Memory outside hbmalloc travels with hbmalloc's snapshot (issue #40 item 1: src/io/snapshot.c's keys) and `view`
# says it: 256 MiB of the process's own beside hbmalloc, 1 GiB of another process's, on the simulated device.
run outside-snapshot 0 "peak reserved" "$BIN" replay "$SRC/examples/cs336-lm-ctx512-forward.trace" \
  --backend "sim:context=256MiB,others=1GiB" --snapshot "$T/outside.pickle"
run outside-view 0 "wrote" "$BIN" view "$T/outside.pickle" -o "$T/outside.svg"
grep -qF "when recorded, 1.25 GiB of the device was in use outside hbmalloc: 256.00 MiB by its process, 1024.00 MiB by others" \
  "$T/outside.svg" || fail "outside-view: the picture does not say what was outside hbmalloc"
# Two ranks side by side: each column says what its device held beside hbmalloc when its snapshot was taken.
run outside-rank1 0 "peak reserved" "$BIN" replay "$SRC/examples/cs336-lm-ctx512-forward.trace" \
  --backend "sim:context=1GiB,others=1GiB" --snapshot "$T/rank1.pickle"
cp "$T/outside.pickle" "$T/rank0.pickle"
run outside-ranks 0 "wrote" "$BIN" view "$T/rank0.pickle" "$T/rank1.pickle" -o "$T/ranks.svg"
grep -q '>outside hbmalloc: 1.25 GiB<' "$T/ranks.svg" && grep -q '>outside hbmalloc: 2.00 GiB<' "$T/ranks.svg" ||
  fail "outside-ranks: each rank's column does not say what was outside hbmalloc"
run outside-none 0 "wrote" "$BIN" view "$SRC/tests/data/layoutediting-torch1x-segments.pickle" -o "$T/torch.svg"
! grep -q 'id="outside"' "$T/torch.svg" || fail "outside-none: a torch snapshot has no such figure, none is drawn"

[ $fails -eq 0 ] && echo "snapshot_device: all cases passed" || { echo "snapshot_device: $fails failures"; exit 1; }
