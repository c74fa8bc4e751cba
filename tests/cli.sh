#!/bin/sh
# The CLI as a user runs it: exit codes and the figures it prints.
set -u
bin=$1 src=$2
fails=0
check() { # name expected_rc pattern command...
    name=$1 want=$2 pat=$3
    shift 3
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -ne "$want" ]; then
        echo "FAIL $name: exit $rc, expected $want"; echo "$out"; fails=$((fails + 1)); return
    fi
    if ! printf '%s\n' "$out" | grep -q -- "$pat"; then
        echo "FAIL $name: output lacks '$pat'"; echo "$out"; fails=$((fails + 1)); return
    fi
    echo "ok   $name"
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ex=$src/examples/cs336-lm-ctx128-fullstep.trace
check replay_example 0 "reserved/allocated: 1.1" "$bin" replay "$ex" --conf ""
# PyTorch's own segment events in the source snapshots put its peak reserved at
# 61111009280 bytes (ctx128 full step) and 44715474944 bytes (ctx512 forward),
# summing segment_alloc/segment_free from the reserved memory at the end; the
# replay of the same alloc/free sequence must reserve exactly as much.
check replay_matches_pytorch_fullstep 0 "peak reserved: .*(61111009280 bytes)" "$bin" replay "$ex" --conf ""
check replay_matches_pytorch_forward 0 "peak reserved: .*(44715474944 bytes)" "$bin" replay \
    "$src/examples/cs336-lm-ctx512-forward.trace" --conf ""
# Expandable segments keep peak reserved within 2% of peak allocated on these traces.
ratio_ok() { # trace conf max
    r=$("$bin" replay "$1" --conf "$2" | sed -n 's/^reserved\/allocated: //p')
    if awk -v r="$r" -v m="$3" 'BEGIN { exit !(r <= m) }'; then echo "ok   ratio $(basename "$1") [$2] $r <= $3"
    else echo "FAIL ratio $(basename "$1") [$2] $r > $3"; fails=$((fails + 1)); fi
}
ratio_ok "$ex" "expandable_segments:True" 1.02
ratio_ok "$src/examples/cs336-lm-ctx512-forward.trace" "expandable_segments:True" 1.02
ratio_ok "$src/examples/finetune-varlen.trace" "expandable_segments:True" 1.02
check replay_expandable_fallback 0 "expandable segments: off" "$bin" replay "$ex" --conf "expandable_segments:True" \
    --backend "sim:firmware=22.0.3"
check replay_expandable_fallback_warns 0 "Using expandable_segments:False instead" "$bin" replay "$ex" \
    --conf "expandable_segments:True" --backend "sim:vmm=off"
check conf_backend_fallback 0 "in force: False (fallback: firmware 22.0.3" "$bin" conf "expandable_segments:True" \
    --backend "sim:firmware=22.0.3,dialect=npu"
check replay_stats 0 "^allocated_bytes.all.peak 55079000576$" "$bin" replay "$ex" --conf "" --stats
check replay_expandable_conf_accepted 0 "peak reserved" "$bin" replay "$ex" --conf "max_split_size_mb:128"
check replay_oom_exit_1 1 "OOM at event" "$bin" replay "$ex" --conf "" --capacity 40GiB
check replay_bad_conf 2 "max_split_size_mb:3" "$bin" replay "$ex" --conf "max_split_size_mb:3"
check replay_bad_capacity 2 "is not a size" "$bin" replay "$ex" --capacity lots
check replay_missing_file 2 "cannot open" "$bin" replay "$tmp/none.trace"
printf 'a 1 100\na 2 x\n' >"$tmp/bad.trace"
check replay_malformed 2 "bad.trace:2:5: expected a size" "$bin" replay "$tmp/bad.trace"
check conf_ok 0 "max_split_size_mb: 512" "$bin" conf "max_split_size_mb:512"
check conf_bad 2 "strictly between 0 and 1" "$bin" conf "garbage_collection_threshold:2"
check conf_npu 0 "dialect: npu" "$bin" conf "base_addr_aligned_kb:4" --dialect npu
check conf_env 0 "source: PYTORCH_CUDA_ALLOC_CONF" env -u HBMALLOC_CONF PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$bin" conf
check unknown_command 2 "unknown command" "$bin" frobnicate
check version 0 "hbmalloc 0.1.0" "$bin" version
if [ "$fails" -ne 0 ]; then echo "$fails CLI check(s) failed"; exit 1; fi
echo "all CLI checks passed"
