#!/bin/sh
# The CLI as a user runs it: exit codes and the figures it prints.
set -u
bin=$1 src=$2
# The framework a command speaks for is read from the environment when nothing else says (docs/TOOL.md, "The
# framework"): the checks below set what they test, and nothing of the caller's shell leaks in.
unset ASCEND_HOME_PATH PYTORCH_NPU_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF PYTORCH_ALLOC_CONF HBMALLOC_TORCH_VERSION \
    HBMALLOC_TORCH_NPU_VERSION
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
# Issue #29 item 4: plain `hbmalloc` and a mistyped command get a screen (one line per command) and the nearest
# command, not the 80 lines of every option; --help stays whole.
check no_command 2 "^  hbmalloc replay TRACE " "$bin"
check unknown_command_nearest 2 "unknown command 'replya': did you mean 'hbmalloc replay'?" "$bin" replya
check help_whole 0 "--min-capacity" "$bin" --help
for args in "" "replya" "frobnicate"; do
    # shellcheck disable=SC2086
    n=$("$bin" $args 2>&1 | wc -l)
    if [ "$n" -le 14 ]; then echo "ok   short_usage '$args' ($n lines)"
    else echo "FAIL short_usage '$args': $n lines"; fails=$((fails + 1)); fi
done
# Item 13: a mistyped key gets the nearest one this release reads; KEY=VALUE is pointed at ':'; a --conf string's
# error says --conf, not "explicit".
check conf_did_you_mean 2 "Unrecognized key 'expandable_segment' .*; did you mean 'expandable_segments'?" "$bin" conf \
    expandable_segment:True
check conf_did_you_mean_npu 2 "did you mean 'max_split_size_mb'?" "$bin" conf max_split_size:64 --dialect npu
check conf_equals_for_colon 2 "separated by ':', not '=': write 'max_split_size_mb:64'" "$bin" conf max_split_size_mb=64
check replay_conf_error_from_conf 2 "did you mean 'expandable_segments'? (from --conf)$" "$bin" replay "$ex" \
    --conf expandable_segment:True
# Item 14: a capacity without a unit is bytes, and said so; past the simulated device's limit, the limit is named.
# (Issue #36 item 10: below 1 MiB, which is no device, it is refused with the size meant.)
check capacity_without_unit 2 "--capacity 80 has no unit: 80 bytes is no device; did you mean --capacity 80GiB?" \
    "$bin" replay "$ex" --conf "" --capacity 80
check capacity_in_bytes_noted 0 "note: --capacity 85899345920 has no unit: read as bytes, 80.00 GiB" \
    "$bin" replay "$ex" --conf "" --capacity 85899345920
check capacity_past_the_limit 2 "--capacity '1PiB' is more than the simulated device's limit, 8 TiB" "$bin" replay \
    "$ex" --capacity 1PiB
# Item 16: `conf STRING` says first, in one line, what the release does with it (runs it as ..., refuses it, or:
# depends on the device's virtual memory, and both outcomes); its source is the command line, not the variable.
combo=max_split_size_mb:32,garbage_collection_threshold:0.6,expandable_segments:True
check conf_verdict_depends 0 "^verdict: depends on the device's virtual memory: torch_npu 2.1.0.post6 (v6.0.rc2-pytorch2.1.0), on a device with it, refuses it (invalid settings: .*; on one without, runs it as 'max_split_size_mb:32,garbage_collection_threshold:0.6' (expandable segments off)" \
    sh -c '"$1" conf "$2" --torch-npu 2.1.0.post6 | head -1' sh "$bin" "$combo"
check conf_verdict_vmm_no 0 "^verdict: torch_npu 2.1.0.post6 (v6.0.rc2-pytorch2.1.0) runs it as 'max_split_size_mb:32,garbage_collection_threshold:0.6' (expandable segments off)$" \
    sh -c '"$1" conf "$2" --torch-npu 2.1.0.post6 --vmm no | head -1' sh "$bin" "$combo"
check conf_verdict_lenient 0 "^verdict: PyTorch 2.6 runs it as 'max_split_size_mb:64'$" \
    sh -c '"$1" conf max_split_size_mb:64abc --torch 2.6 | head -1' sh "$bin"
check conf_verdict_refused 2 "^hbmalloc conf: refused by PyTorch 2.6: invalid setting .garbage_collection_threshold:2" "$bin" conf \
    garbage_collection_threshold:2 --torch 2.6
check conf_source_command_line 0 "^source: the command line, read as PYTORCH_NPU_ALLOC_CONF is$" "$bin" conf \
    expandable_segments:True --torch-npu 2.1.0.post6
check version 0 "hbmalloc 0.1.0" "$bin" version
# A pending free (`p`: a block freed while another stream uses it, PyTorch's record_stream): its range is not
# reused until its `f` (a second 12 MiB segment, not one), and allocated bytes fall at the request (peak 12 MiB,
# as PyTorch counts it: the free that waits on events has already left allocated_bytes). Through a snapshot of the
# replay and back, the pending free is read from free_requested and free_completed.
printf 'a 1 12582912\np 1\na 2 12582912\nf 1\nf 2\n' >"$tmp/pending.trace"
printf 'a 1 12582912\na 2 12582912\nf 1\nf 2\n' >"$tmp/late.trace"
check pending_keeps_the_range 0 "device calls:       2 malloc" "$bin" replay "$tmp/pending.trace" --conf "" --check
check pending_allocated_falls 0 "peak allocated:     12.00 MiB" "$bin" replay "$tmp/pending.trace" --conf ""
check late_free_allocated 0 "peak allocated:     24.00 MiB" "$bin" replay "$tmp/late.trace" --conf ""
"$bin" replay "$tmp/pending.trace" --conf "" --snapshot "$tmp/pending.pickle" >/dev/null
# (block 1's use completes at the trace's end, after the last allocation: no poll saw it, the snapshot has it pending)
check pending_from_a_snapshot 0 "4 events: 2 alloc, 1 free (1 pending first" "$bin" replay "$tmp/pending.pickle" --conf ""
check pending_from_a_snapshot_replayed 0 "device calls:       2 malloc" "$bin" replay "$tmp/pending.pickle" --conf ""
# Pools that sleep (docs/TRACE_FORMAT.md: u, z, w): a text trace that says which pool each allocation went to
# replays its sleeps and wakes (hbm_pool_sleep / wake) and gives back what it recorded; its snapshot (pickle or
# JSON) keeps each sleep's tag and backup, which the readers and tools/trace/snapshot2trace.py read back, drawn, not
# replayed (the snapshot does not say which pool an allocation went to).
printf 'u 1\na 1 83886080\nu 2\na 2 41943040\nu 0\na 3 1000\nz 1 83886080 weights backup\nz 2 41943040 kv%%20cache\n' \
    >"$tmp/sleep.trace"
printf 'a 4 200000000\nf 4\ne\nw 1 83886080 weights backup\nw 2 41943040 kv%%20cache\n' >>"$tmp/sleep.trace"
check sleep_replayed 0 "^sleep and wake:     4 of 4 replayed (hbm_pool_sleep, hbm_pool_wake on the pools the trace names): 120.00 MiB of pages put to sleep, 120.00 MiB mapped again (the recording: 120.00 MiB and 120.00 MiB); reserved fell by 120.00 MiB" \
    "$bin" replay "$tmp/sleep.trace" --conf "" --check
check sleep_counted 0 "(13 events: 4 alloc, 1 free; 2 sleeps, 2 wakes; 1 stream)" "$bin" replay "$tmp/sleep.trace" --conf ""
# (the sleeping pools' 120 MiB of blocks hold no memory while the other phase's 191 MiB is live: not 311 MiB)
check sleep_min_capacity 0 "^minimum capacity:   194.00 MiB" "$bin" replay "$tmp/sleep.trace" --conf "" --min-capacity
"$bin" replay "$tmp/sleep.trace" --conf "" --snapshot "$tmp/sleep.json" >/dev/null
"$bin" replay "$tmp/sleep.trace" --conf "" --snapshot "$tmp/sleep.pickle" >/dev/null
check sleep_snapshot_keys 0 '"action":"sleep","addr":[0-9]*,"size":83886080,"stream":0,"time_us":[0-9]*,"frames":\[\],"tag":"weights","backup":true}' \
    cat "$tmp/sleep.json"
for f in sleep.json sleep.pickle; do
    check "sleep_from_$f" 0 "^sleep and wake:     4 drawn by view, not replayed: .*the recording gave back 120.00 MiB at those sleeps" \
        "$bin" replay "$tmp/$f" --conf ""
done
python3 "$src/tools/trace/snapshot2trace.py" "$tmp/sleep.pickle" -o "$tmp/sleep-converted.trace" 2>/dev/null
check sleep_converted 0 "^z 0 83886080 weights backup$" cat "$tmp/sleep-converted.trace"
check sleep_converted_tag 0 "^w 0 41943040 kv%20cache$" cat "$tmp/sleep-converted.trace"
check sleep_converted_read 0 "2 sleeps, 2 wakes" "$bin" replay "$tmp/sleep-converted.trace" --conf ""
printf 'u 1\na 1 1000\nz 1 0 w\na 2 1000\n' >"$tmp/asleep.trace"
check sleep_alloc_refused 2 "asleep.trace:4:1: allocation into pool 1, asleep since line 3" "$bin" replay "$tmp/asleep.trace"
check sleep_needs_vmm 2 "pool 1 (line 7) 'weights': pool 'weights' cannot sleep on sim device 0" "$bin" replay \
    "$tmp/sleep.trace" --backend sim:vmm=off
# hbmalloc's JSON snapshots, and torch's _snapshot() dumped as JSON, read as their pickles.
python3 -c "import json, pickle, sys; json.dump(pickle.load(open(sys.argv[1], 'rb')), open(sys.argv[2], 'w'))" \
    "$src/tests/data/linear-10k-50k-grad.pickle" "$tmp/grad.json"
check json_as_pickle 0 "^same$" sh -c '[ "$("$1" replay "$2" | sed 1d | grep -v "^replay time")" = \
    "$("$1" replay "$3" | sed 1d | grep -v "^replay time")" ] && echo same' sh "$bin" "$src/tests/data/linear-10k-50k-grad.pickle" \
    "$tmp/grad.json"
# PyTorch snapshots are read directly (format told apart by content).
snap=$src/tests/data/linear-10k-50k-grad.pickle
check replay_pickle 0 "recorded: *peak reserved 4.13 GiB (4439670784 bytes)" "$bin" replay "$snap"
check replay_pickle_matches 0 "hbmalloc +0.00%" "$bin" replay "$snap"
check replay_pickle_device 2 "choose one with --device" "$bin" replay "$src/tests/data/layoutediting-torch1x-segments.pickle" \
    --device 0
head -c 5000 "$snap" >"$tmp/cut.pickle"
check replay_truncated 2 "offset .*truncated" "$bin" replay "$tmp/cut.pickle"
# --min-capacity: the capacity found runs clean, 1 MiB less does not.
minc=$("$bin" replay "$ex" --conf "" --min-capacity | sed -n 's/^minimum capacity: .*(\([0-9]*\) bytes.*/\1/p')
check min_capacity_runs 0 "OOMs: *0" "$bin" replay "$ex" --conf "" --capacity "$minc"
check min_capacity_is_minimal 1 "OOM at event" "$bin" replay "$ex" --conf "" --capacity "$((minc - 1048576))"
# With expandable segments too: no probe device whose address space two reservations cannot fit.
minx=$("$bin" replay "$ex" --conf expandable_segments:True --min-capacity | sed -n 's/^minimum capacity: .*(\([0-9]*\) bytes.*/\1/p')
check min_capacity_expandable_runs 0 "OOMs: *0" "$bin" replay "$ex" --conf expandable_segments:True --capacity "$minx"
check min_capacity_expandable_minimal 1 "OOM at event" "$bin" replay "$ex" --conf expandable_segments:True \
    --capacity "$((minx - 1048576))"
# Snapshots written by replay load in Python's pickle with PyTorch's structure, and replay back to the same peak.
check replay_snapshot 0 "peak reserved" "$bin" replay "$ex" --conf "expandable_segments:True" --snapshot "$tmp/s.pickle"
check snapshot_replays_back 0 "hbmalloc +0.00%" "$bin" replay "$tmp/s.pickle"
if command -v python3 >/dev/null; then
    check snapshot_loads_in_python 0 "ok" python3 -c "
import pickle, sys
d = pickle.load(open(sys.argv[1], 'rb'))
seg = d['segments'][0]
assert set(['device','address','total_size','allocated_size','active_size','requested_size','stream','segment_type','segment_pool_id','is_expandable','frames','blocks']) <= set(seg)
assert seg['is_expandable'] is True and seg['segment_pool_id'] == (0, 0)
acts = set(e['action'] for e in d['device_traces'][0])
assert acts == {'alloc', 'free_requested', 'free_completed', 'segment_map'}, acts
print('ok')" "$tmp/s.pickle"
else
    echo "FAIL snapshot_loads_in_python: python3 missing (scripts/deps.sh installs it)"; fails=$((fails + 1))
fi
# conf on a backend: the simulated device takes --dialect (npu keys are checked as torch_npu's), a real one must agree.
check conf_backend_npu 0 "page_size: 1g" "$bin" conf page_size:1g --dialect npu --backend sim:capacity=8GiB
check conf_backend_contradiction 2 "contradicts --backend 'cuda'" "$bin" conf expandable_segments:True --dialect npu \
    --backend cuda
# hbmalloc's keys: fine in HBMALLOC_CONF, refused in the frameworks' variables (they stop on unknown keys).
check conf_hbm_key_in_pytorch_var 2 "is an hbmalloc key: PyTorch refuses it in PYTORCH_CUDA_ALLOC_CONF" \
    env -u HBMALLOC_CONF PYTORCH_CUDA_ALLOC_CONF=hbm_remap_free_pages:True "$bin" conf
check conf_hbm_key_in_hbmalloc_conf 0 "hbm_remap_free_pages: True" \
    env HBMALLOC_CONF=hbm_remap_free_pages:True "$bin" conf
check conf_hbm_key_refused 2 "is an hbmalloc key" "$bin" conf hbm_remap_free_pages:True
check conf_hbm_key_note 0 "belong in HBMALLOC_CONF only" "$bin" conf hbm_remap_free_pages:True --strict
# A string is checked as the framework release reads it (docs/CONFIGURATION.md).
check conf_lenient_reading 0 "PyTorch reads 'max_split_size_mb:64abc' as 64" "$bin" conf max_split_size_mb:64abc
check conf_strict_refuses 2 "64abc" "$bin" conf max_split_size_mb:64abc --strict
check conf_key_too_new 2 "per_process_memory_fraction is known from PyTorch 2.9 on, not to PyTorch 2.6" \
    "$bin" conf per_process_memory_fraction:0.9 --torch 2.6
check conf_release_named 0 "read as: PyTorch 2.6" "$bin" conf max_split_size_mb:64 --torch 2.6.0+cu124
check conf_npu_field_report_old_release 0 "expandable_segments: False" "$bin" conf \
    max_split_size_mb:32,garbage_collection_threshold:0.6,expandable_segments:True --torch-npu 2.1.0.post6 --vmm no
check conf_npu_field_report_newest 2 "cannot be enabled with" "$bin" conf \
    max_split_size_mb:32,garbage_collection_threshold:0.6,expandable_segments:True --dialect npu --vmm no
check conf_releases 0 "torch_npu 2.1.0.post6 .*v6.0.rc2-pytorch2.1.0" "$bin" conf --releases --dialect npu
check conf_bad_version 2 "not a version" "$bin" conf expandable_segments:True --torch-npu latest
check conf_help 0 "usage: hbmalloc conf" "$bin" conf --help
# The settings are one table (src/conf/conf.c): docs/CONFIGURATION.md's key list is what it prints, row for row.
"$bin" conf --keys >"$tmp/keys.md"
sed -n '/^<!-- hbmalloc conf --keys -->$/,/^<!-- end of hbmalloc conf --keys -->$/p' "$src/docs/CONFIGURATION.md" |
    sed '1d;$d' >"$tmp/keys-doc.md"
if [ -s "$tmp/keys.md" ] && cmp -s "$tmp/keys.md" "$tmp/keys-doc.md"; then
    echo "ok   conf_keys_documented"
else
    echo "FAIL conf_keys_documented: docs/CONFIGURATION.md's key list is not hbmalloc conf --keys"
    diff "$tmp/keys.md" "$tmp/keys-doc.md"
    fails=$((fails + 1))
fi
# Item 17: torch_npu's segment_size_mb sizes the pages of the large pool's expandable segments, not whole segments
# (NPUCachingAllocator.cpp, get_custom_expandable_segment_size vs get_allocation_size): without expandable segments
# the replay reserves what the defaults reserve, with them it maps fewer, larger pages.
check conf_segment_size_is_a_page 0 "^segment_size_mb: 64 (the page of the large pool's expandable segments" "$bin" conf \
    segment_size_mb:64 --dialect npu
check conf_segment_size_not_large 0 "^large_segment_size_mb: 20$" "$bin" conf segment_size_mb:64 --dialect npu
want=$("$bin" replay "$ex" --backend sim:dialect=npu --conf "" | grep "^peak reserved")
check replay_segment_size_keeps_segments 0 "^$want\$" "$bin" replay "$ex" --backend sim:dialect=npu \
    --conf segment_size_mb:64
check replay_segment_size_pages 0 "^device calls: .* 837 map" "$bin" replay "$ex" --backend sim:dialect=npu \
    --conf expandable_segments:True,segment_size_mb:64
# sweep: ranks, recommends, respects what the device supports.
check sweep_recommends 0 "^export PYTORCH_CUDA_ALLOC_CONF='" "$bin" sweep "$ex" --capacity 60GiB --no-progress
check sweep_json 0 '"settings_run":48' "$bin" sweep "$ex" --capacity 60GiB --json
check sweep_old_firmware 0 "24 with expandable segments left out: firmware 22.0.3" "$bin" sweep "$ex" --capacity 60GiB \
    --backend "sim:firmware=22.0.3" --no-progress
# Without virtual memory the sweep also sizes hbmalloc's arena: the smallest that runs the trace alone, proven by
# its replay: it runs in one device allocation, and 1 MiB less does not.
fw="$src/examples/cs336-lm-ctx512-forward.trace"
check sweep_arena 0 "^export HBMALLOC_CONF='hbm_arena_mb:" "$bin" sweep "$fw" --capacity 40.8GiB \
    --backend "sim:firmware=22.0.3" --no-progress
check sweep_arena_only 0 "no setting of PYTORCH_CUDA_ALLOC_CONF runs this trace" "$bin" sweep "$fw" --capacity 40.8GiB \
    --backend "sim:firmware=22.0.3" --no-progress
mb=$("$bin" sweep "$fw" --capacity 40.8GiB --backend "sim:firmware=22.0.3" --json | grep -o '"plugin_export":"[^"]*"' |
    grep -o 'hbm_arena_mb:[0-9]*' | cut -d: -f2)
check sweep_arena_runs_alone 0 "device calls: *1 malloc, 0 free" "$bin" replay "$fw" --capacity 40.8GiB \
    --backend "sim:firmware=22.0.3" --conf "hbm_arena_mb:$mb"
less=$("$bin" replay "$fw" --capacity 40.8GiB --backend "sim:firmware=22.0.3" --conf "hbm_arena_mb:$((mb - 1))" 2>&1 |
    grep -c "device calls: *1 malloc, 0 free")
[ "$less" -eq 0 ] && echo "ok   sweep_arena_smallest" || { echo "FAIL sweep_arena_smallest: $((mb - 1)) MiB also runs alone"; fails=$((fails + 1)); }
check sweep_npu 0 "export PYTORCH_NPU_ALLOC_CONF=" "$bin" sweep "$ex" --capacity 60GiB --backend "sim:dialect=npu" \
    --no-progress
check sweep_npu_rules 0 "left out: refused by torch_npu" "$bin" sweep "$ex" --capacity 60GiB \
    --backend "sim:dialect=npu" --no-progress
check sweep_grid 0 "^3 settings, 2 distinct results" "$bin" sweep "$ex" --grid "max_split_size_mb=-,128,512" --no-progress
check sweep_bad_grid 2 "expected key=v1,v2" "$bin" sweep "$ex" --grid "nonsense"
# Issue #29 item 18: the report fits 120 columns (the export lines, to paste whole, apart), one row per distinct
# result ranked 1, 2, 3, ... (it ranked 1, 2, 3, 6, 12: the settings' places), the settings below it, no nested
# parentheses; the JSON ranks the same way.
"$bin" sweep "$ex" --capacity 60GiB --no-progress --backend sim:firmware=22.0.3 >"$tmp/sweep.txt"
if awk '!/^export / && length($0) > 120 { bad = 1; print "  " length($0) ": " $0 } END { exit bad }' "$tmp/sweep.txt"
then echo "ok   sweep_fits_120_columns"; else echo "FAIL sweep_fits_120_columns"; fails=$((fails + 1)); fi
if awk '/^ *[0-9]+  / { if ($1 != ++n) bad = 1 } END { exit bad || n < 5 }' "$tmp/sweep.txt"
then echo "ok   sweep_ranks_are_consecutive"; else echo "FAIL sweep_ranks_are_consecutive"; cat "$tmp/sweep.txt"; fails=$((fails + 1)); fi
if grep -q '([^)]*(' "$tmp/sweep.txt"; then echo "FAIL sweep_no_nested_parentheses: $(grep '([^)]*(' "$tmp/sweep.txt")"
    fails=$((fails + 1)); else echo "ok   sweep_no_nested_parentheses"; fi
check sweep_json_ranks 0 "^ranks 1..11 of 25 rows$" sh -c '"$1" sweep "$2" --capacity 60GiB --backend sim:firmware=22.0.3 --json |
    python3 -c "import json, sys
d = json.load(sys.stdin)
r = d[\"results\"]
ranks = [x[\"rank\"] for x in r if x[\"same_as_rank\"] == 0]
assert ranks == list(range(1, len(ranks) + 1)) and len(ranks) == d[\"distinct_results\"], ranks
assert all(x[\"same_as_rank\"] in (0, x[\"rank\"]) for x in r)
print(\"ranks 1..%d of %d rows\" % (len(ranks), len(r)))"' sh "$bin" "$ex"
# Issue #28 item 11: each replay holds its own allocator, whose blocks are as many as the trace's most live at once;
# sweep ran all cores' worth at once (a 7 MB CSV: 247 MB at one job, 767 MB at four). The replays at once keep
# within the readers' memory bound for the file: 100,000 rows of 7 bytes, all live together, one at a time.
{ echo "id,lower,upper,size"; yes ",0,1,1" | head -n 100000; } >"$tmp/live.csv"
check sweep_jobs_within_memory 0 "1 replay at a time, not 2: each holds up to" "$bin" sweep "$tmp/live.csv" --jobs 4 \
    --grid "max_split_size_mb=-,64" --no-progress
# The user's setting is a row of its own, identical results are one row, GC without a fraction is left out,
# and the fraction goes into code unless the release reads it from the variable.
check sweep_baseline 0 "same result: max_split_size_mb:256 (yours)" env PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256 \
    "$bin" sweep "$ex" --capacity 60GiB --no-progress --grid "max_split_size_mb=-,64"
check sweep_keep_yours 0 "recommended: keep yours" env PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:256 \
    "$bin" sweep "$ex" --capacity 60GiB --no-progress --grid "max_split_size_mb=-,64"
check sweep_baseline_lenient 0 "which runs as 'max_split_size_mb:256'" env PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb: 2 56" \
    "$bin" sweep "$ex" --capacity 60GiB --no-progress --grid "max_split_size_mb=-,64"
check sweep_same_result 0 "same result: " "$bin" sweep "$ex" --capacity 60GiB --no-progress \
    --grid "max_split_size_mb=-,256,1024"
check sweep_grid_fraction 0 "^      garbage_collection_threshold:0.6,per_process_memory_fraction:0.9$" sh -c '"$1" sweep "$2" \
    --capacity 60GiB --no-progress --grid "garbage_collection_threshold=0.6;per_process_memory_fraction=-,0.9" |
    grep -A1 "^   1 "' sh "$bin" "$ex"
check sweep_grid_inactive 0 "1 left out: garbage_collection_threshold without a memory fraction" "$bin" sweep "$ex" \
    --capacity 60GiB --no-progress --grid "garbage_collection_threshold=0.6;per_process_memory_fraction=-,0.9"
check sweep_fraction_in_code 0 "and in your code: torch.cuda.set_per_process_memory_fraction(0.99)" "$bin" sweep "$ex" \
    --capacity 60GiB --no-progress --torch 2.6
check sweep_fraction_in_var 0 "^export PYTORCH_CUDA_ALLOC_CONF='garbage_collection_threshold:0.6,per_process_memory_fraction:0.99'" \
    "$bin" sweep "$ex" --capacity 60GiB --no-progress --torch 2.9
check sweep_key_too_new 0 "left out: refused by PyTorch 2.1$" "$bin" sweep "$ex" --capacity 60GiB --no-progress \
    --grid "large_segment_size_mb=-,64" --torch 2.1
# Files that are no trace say what they are; lifetime CSVs are read directly, as tools/trace/lifetimes2trace.py reads them.
: >"$tmp/empty.trace"
check input_empty 2 "is empty: no events to replay" "$bin" replay "$tmp/empty.trace"
printf '{"snapshot": []}\n' >"$tmp/snap.json"
check input_json_not_a_snapshot 2 "snap.json: not a PyTorch memory snapshot (no list of segments)" "$bin" replay \
    "$tmp/snap.json"
printf '{"segments": [\n  {"device": 0,}]}\n' >"$tmp/bad.json"
check input_json_malformed 2 "bad.json: line 2, column 16: expected a key" "$bin" replay "$tmp/bad.json"
printf 'a 1 1024\n' | gzip >"$tmp/t.gz"
check input_gzip 2 "is gzip-compressed: decompress it first" "$bin" replay "$tmp/t.gz"
printf 'a 1 \001\002\000\n' >"$tmp/bin.dat"
check input_binary 2 "is binary and not a snapshot pickle" "$bin" replay "$tmp/bin.dat"
printf 'id,size,start,end\n1,1024,0,5\n' >"$tmp/other.csv"
check input_other_csv 2 "is a CSV whose header 'id,size,start,end' is not one hbmalloc reads" "$bin" replay "$tmp/other.csv"
life="$src/tests/data/iree-mobilebert-lifetimes.csv"
python3 "$src/tools/trace/lifetimes2trace.py" "$life" -o "$tmp/life.trace"
want=$("$bin" replay "$tmp/life.trace" --conf "" | grep "^peak reserved")
check input_lifetimes 0 "^$want\$" "$bin" replay "$life" --conf ""
check input_lifetimes_format 0 "632 events: 316 alloc, 316 free" "$bin" replay "$life" --conf ""
printf 'id,lower,upper,size\n1,0,x,5\n' >"$tmp/bad-life.csv"
check input_lifetimes_bad 2 "bad-life.csv:2:5: 'x' is not a whole number (column upper)" "$bin" replay "$tmp/bad-life.csv"
for c in replay sweep plan view conf doctor; do
    check "help_$c" 0 "^usage:\|^usage: hbmalloc $c" "$bin" "$c" --help
done
check unknown_option_named 2 "unknown option '--frobnicate'" "$bin" replay "$ex" --frobnicate
check missing_value_named 2 "--capacity needs a value: --capacity SIZE or --capacity=SIZE" "$bin" replay "$ex" --capacity
check input_device_file 2 "/dev/zero is not a regular file (a device)" "$bin" replay /dev/zero
check input_directory 2 "is not a regular file (a directory)" "$bin" replay "$tmp"
check input_pipe 0 "2 events: 1 alloc, 1 free" sh -c "printf 'a 1 1024\nf 1\n' | '$bin' replay /dev/stdin --conf ''"
check device_range 2 "--device takes a device index 0-63, not '64'" "$bin" replay "$src/tests/data/linear-10k-50k-grad.pickle" \
    --device 64
check sweep_all_oom 1 "no setting runs this trace without OOM" "$bin" sweep "$ex" --capacity 20GiB --no-progress
# plan: a placement of every allocation, checked, written; what does not apply is refused.
check plan_forward 0 "plan height: .*1.000[0-9] x peak live" "$bin" plan "$src/examples/cs336-lm-ctx512-forward.trace" \
    -o "$tmp/p.plan"
check plan_file 0 "^height [0-9]" cat "$tmp/p.plan"
[ "$(grep -c '^[0-9]' "$tmp/p.plan")" -eq 2382 ] && echo "ok   plan_file_rows" || { echo "FAIL plan_file_rows"; fails=$((fails + 1)); }
# The allocator serves the plan file (hbm_plan_file): the replay reserves the plan's height in one device call,
# the validator after every event.
h=$(sed -n 's/^height //p' "$tmp/p.plan")
check plan_served 0 "peak reserved: .*($h bytes)" "$bin" replay "$src/examples/cs336-lm-ctx512-forward.trace" --check \
    --conf "hbm_plan_file:$tmp/p.plan"
check plan_served_hits 0 "plan_hits 2382" "$bin" replay "$src/examples/cs336-lm-ctx512-forward.trace" --stats \
    --conf "hbm_plan_file:$tmp/p.plan"
check plan_json 0 '"allocations":2382,' "$bin" plan "$src/examples/cs336-lm-ctx512-forward.trace" --json --budget 0
check plan_conf_refused 2 "does not apply: a plan depends on the trace alone" "$bin" plan "$ex" --conf ""
check plan_bad_seed 2 "takes a whole number above 0" "$bin" plan "$ex" --seed 0
# The step plan: --steps finds the repeat of the real 3-step CPU trace (period 1000 allocations), the plan serves the
# step after the recorded one (all but the 49 tensors carried over the boundary), the validator after every event;
# variable-length steps are found by their frees; bad --steps and doubled marks refused.
cpu="$src/examples/cpu-transformer-trainstep.trace"
check steps_auto 0 "every 1000 allocations, the first before allocation 548" "$bin" replay "$cpu" --steps auto --conf ""
check steps_served 0 "^ *2  *1000  *951  *0  *49 " "$bin" replay "$cpu" --steps auto --check \
    --backend sim:firmware=22.0.3 --conf hbm_step_plan:True
# The cyclic plan of this trace would hold 294.13 MiB where the caching policy held 292 (POLICY.md, never above the
# cache): refused, the first plan dropped with it, and the last step served by the cache again.
check steps_cyclic_refused 0 "would hold 294.13 MiB, more than the 292.00 MiB the caching policy held" "$bin" replay \
    "$cpu" --steps auto --backend sim:firmware=22.0.3 --conf hbm_step_plan:True
check steps_after_refusal 0 "^ *3  *674  *0  *0  *0 " "$bin" replay "$cpu" --steps auto \
    --backend sim:firmware=22.0.3 --conf hbm_step_plan:True
check steps_varlen 0 "every 122 allocations.*frees repeat, sizes change" "$bin" replay \
    "$src/examples/finetune-varlen.trace" --steps auto --conf ""
check steps_every 0 "^steps: *4 (3 step boundaries every 1000 allocations)" "$bin" replay "$cpu" --steps 1000 --conf ""
check steps_bad 2 "takes 'auto' or a whole number" "$bin" replay "$cpu" --steps 0
# Unmarked steps are found by the allocator itself (at 4096 allocations on the variable-length trace).
check steps_found 0 "^steps 33$" "$bin" replay "$src/examples/finetune-varlen.trace" --check --stats \
    --backend sim:firmware=22.0.3 --conf hbm_step_plan:True
check steps_sweep 0 "^      hbm_step_plan:True$" "$bin" sweep "$cpu" --steps auto --backend sim:firmware=22.0.3 \
    --no-progress --jobs 2
printf 'a 1 100\nf 1\ns\na 1 100\nf 1\ns\na 1 100\nf 1\n' > "$tmp/steps.trace"
check steps_in_trace 0 "^steps: *3 (the trace's s events)" "$bin" replay "$tmp/steps.trace" --conf ""
check steps_twice 2 "marks its steps already (line 3)" "$bin" replay "$tmp/steps.trace" --steps auto
printf 'a 1 100\nf 1\na 2 200\na 3 300\n' > "$tmp/nosteps.trace"
check steps_none 2 "no repeating step found" "$bin" replay "$tmp/nosteps.trace" --steps auto
# Layers, not steps: the same four allocations repeat, but each repeat keeps one (live memory grows): refused as
# the step plan refuses it in a running job (before: "every 4 allocations"); a one-step real trace finds none
# (before: cs336 fullstep "290 step boundaries every 4 allocations", from a repeat over its last 1159 of 7095).
awk 'BEGIN { print "hbmtrace 1"; for (k = 0; k < 50; k++) { b = 4 * k; printf "a %d 1000\na %d 2000\na %d 3000\na %d 4000\nf %d\nf %d\nf %d\n", b, b + 1, b + 2, b + 3, b + 1, b + 2, b + 3 } }' > "$tmp/layers.trace"
check steps_layers_are_not_steps 2 "repeat every 4, but live memory grows or shrinks" "$bin" replay "$tmp/layers.trace" --steps auto
check steps_one_step_trace 2 "no repeating step found" "$bin" replay "$ex" --steps auto
# view: a real renderer draws it, not blank, with the peak on the axis.
check view_svg 0 "wrote" "$bin" view "$ex" --conf "" -o "$tmp/v.svg"
check view_html 0 "wrote" "$bin" view "$ex" --conf "" -o "$tmp/v.html"
# -o x.png is a PNG (librsvg's rsvg-convert renders the SVG), never an SVG under a .png name; without rsvg-convert,
# or for another extension, refused with what to do and no file left.
check view_png 0 "wrote" "$bin" view "$ex" --conf "" -o "$tmp/v.png"
check view_png_decodes 0 "^png 1200 860$" python3 -c "import struct, sys
d = open(sys.argv[1], 'rb').read()
assert d[:8] == b'\\x89PNG\\r\\n\\x1a\\n' and d[12:16] == b'IHDR', d[:16]
print('png %d %d' % struct.unpack('>II', d[16:24]))" "$tmp/v.png"
check view_png_without_rsvg 2 "rsvg-convert, which is not on PATH (Debian: apt install librsvg2-bin)" \
    env PATH=/nonexistent "$bin" view "$ex" --conf "" -o "$tmp/none.png"
[ ! -e "$tmp/none.png" ] && [ ! -e "$tmp/none.png.svg.tmp" ] || { echo "FAIL view_png_without_rsvg left a file"; fails=$((fails + 1)); }
check view_ab_needs_html 2 "one trace under several --conf is drawn as a page, side by side: name it .html" \
    "$bin" view "$ex" --conf "" --conf "expandable_segments:True" -o "$tmp/ab.svg"
check view_ab_one_axis 2 "usage: hbmalloc view" "$bin" view "$ex" "$ex" --conf "" --conf "expandable_segments:True" -o "$tmp/ab.html"
check view_ab_bad_conf 2 "expandable_segment" "$bin" view "$ex" --conf "" --conf "expandable_segment:True" -o "$tmp/ab.html"
check sweep_html_needs_html 2 "--html writes a page: name it .html" "$bin" sweep "$ex" --no-progress --html "$tmp/s.svg"
check view_bad_extension 2 "written as .svg, .html or .png" "$bin" view "$ex" --conf "" -o "$tmp/v.jpg"
check view_oom_exit_1 1 "out of memory at event" "$bin" view "$ex" --conf "" --capacity 40GiB -o "$tmp/oom.svg"
grep -q 'id="oom"' "$tmp/oom.svg" && grep -q "OUT OF MEMORY at event" "$tmp/oom.svg" || { echo "FAIL view_oom_marked"; fails=$((fails + 1)); }
check replay_settings_source 0 "settings: *'max_split_size_mb:64abc' (from PYTORCH_CUDA_ALLOC_CONF, read as PyTorch" \
    env -u HBMALLOC_CONF PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64abc "$bin" replay "$ex"
check replay_settings_note 0 "note: PyTorch reads 'max_split_size_mb:64abc' as 64" \
    env -u HBMALLOC_CONF PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64abc "$bin" replay "$ex"
check replay_env_overridden 0 "note: PYTORCH_CUDA_ALLOC_CONF='max_split_size_mb:64' from the environment is not used" \
    env -u HBMALLOC_CONF PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64 "$bin" replay "$src/tests/data/linear-10k-50k-grad.pickle"
check replay_recorded_settings 0 "settings: *the defaults (what the snapshot's allocator ran" \
    "$bin" replay "$src/tests/data/linear-10k-50k-grad.pickle"
check replay_blind_start 0 "the segments then are unknown (its history records allocations but no segment events" \
    "$bin" replay "$src/tests/data/flexgen-oom.pickle"
check replay_capacity_gib 0 "device: *sim:capacity=85899345920 (capacity 80.00 GiB)" "$bin" replay "$ex" --conf ""
# A file name with a control byte, a byte that is not UTF-8 and Chinese: the SVG still parses as XML, the
# Chinese kept (issue #15 item 5: the name was copied through raw and the picture did not parse).
odd="$tmp/bad$(printf '\001\377')名字.trace"
cp "$src/examples/cs336-lm-ctx512-forward.trace" "$odd"
check view_odd_name 0 "wrote" "$bin" view "$odd" --conf "" -o "$tmp/odd.svg"
check view_odd_name_html 0 "wrote" "$bin" view "$odd" --conf "" -o "$tmp/odd.html"
check view_odd_name_is_xml 0 "^title ok$" python3 -c "import sys, xml.dom.minidom as m
t = m.parse(sys.argv[1]).getElementsByTagName('text')[0].firstChild.data
print('title ok' if t.endswith('bad\ufffd\ufffd\u540d\u5b57.trace') else ascii(t))" "$tmp/odd.svg"
check view_axis_total 0 '>56.91 GiB</text>' cat "$tmp/v.svg"
check view_peak_attr 0 'data-peak-reserved="61111009280"' cat "$tmp/v.svg"
# The peaks in the SVG's text are replay's (its "peak allocated" and "peak reserved" lines, formatted the same).
check view_peaks_are_replays 0 "^peaks ok$" sh -c 'r=$("$1" replay "$2" --conf ""); a=$(printf "%s\n" "$r" | sed -n "s/^peak allocated: *\([^(]*[^ (]\) (.*/\1/p"); v=$(printf "%s\n" "$r" | sed -n "s/^peak reserved: *\([^(]*[^ (]\) (.*/\1/p"); grep -q ">allocated (peak $a)<" "$3" && grep -q ">reserved (peak $v)<" "$3" && echo peaks ok' sh "$bin" "$ex" "$tmp/v.svg"
check view_html_page 0 '<!DOCTYPE html>' cat "$tmp/v.html"
# The page's data (JSON in it): the peaks replay reports, every allocation of the trace; nothing outside the file
# (the browser test, tests/python/browser.py, checks that the browser asks for nothing either).
check view_html_data 0 "^data 61111009280 $(grep -c '^a ' "$ex") no-url$" python3 -c "import json, re, sys
s = open(sys.argv[1]).read()
d = json.loads(re.search(r'<script id=\"hbm-data\" type=\"application/json\">(.*?)</script>', s, re.S).group(1))['runs'][0]
url = re.search(r'(src|href)=|https?:|url\(|@import', s.replace(d['name'], ''))
print('data', d['stats']['peak_reserved'], len(d['allocs']['start']), 'no-url' if not url else url.group(0))" "$tmp/v.html"
# A name holding "</script>" (a folder "a<" and a file "script>.trace"): the page's data still ends where it should.
mkdir -p "$tmp/a<"
cp "$ex" "$tmp/a</script>.trace"
check view_html_script_name 0 "^name ok$" sh -c '"$1" view "$2" --conf "" -o "$3" >/dev/null && python3 -c "import json, re, sys
s = open(sys.argv[1]).read()
d = json.loads(re.search(r\"<script id=.hbm-data. type=.application/json.>(.*?)</script>\", s, re.S).group(1))[\"runs\"][0]
print(\"name ok\" if d[\"name\"] == sys.argv[2] else ascii(d[\"name\"]))" "$3" "$2"' sh "$bin" "$tmp/a</script>.trace" "$tmp/script.html"
check view_html_odd_name 0 "^title ok$" python3 -c "import json, re, sys
s = open(sys.argv[1], encoding='utf-8').read()
d = json.loads(re.search(r'<script id=\"hbm-data\" type=\"application/json\">(.*?)</script>', s, re.S).group(1))['runs'][0]
print('title ok' if d['name'].endswith('bad\\x01\ufffd\u540d\u5b57.trace') else ascii(d['name']))" "$tmp/odd.html"
if command -v rsvg-convert >/dev/null && command -v python3 >/dev/null; then
    rsvg-convert -w 600 "$tmp/v.svg" -o "$tmp/v.png"
    ink=$(python3 "$src/tests/python/png_ink.py" "$tmp/v.png")
    if awk -v i="$ink" 'BEGIN { exit !(i > 0.05) }'; then echo "ok   view_renders ($ink of the pixels inked)"
    else echo "FAIL view_renders: only $ink of the pixels inked"; fails=$((fails + 1)); fi
else
    echo "FAIL view_renders: rsvg-convert or python3 missing (scripts/deps.sh installs them)"; fails=$((fails + 1))
fi
# What a file that is no trace is, said as such (issue #29 item 12): a README, a torch.save checkpoint (a zip whose
# first member is data.pkl: no memory snapshot in it), another zip.
check not_a_trace_readme 2 "README.md is not a trace: its line 3 ('A caching allocator" "$bin" replay "$src/README.md"
python3 - "$tmp" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1] + "/model.pt", "w") as z:  # torch.save's layout: archive/data.pkl first
    z.writestr("archive/data.pkl", b"\x80\x02}q\x00.")
    z.writestr("archive/version", "3")
with zipfile.ZipFile(sys.argv[1] + "/traces.zip", "w") as z:
    z.writestr("snapshot.pickle", b"\x80\x02}q\x00.")
PY
check not_a_trace_checkpoint 2 "is a torch.save archive (a checkpoint, or saved tensors): it holds no memory snapshot" \
    "$bin" replay "$tmp/model.pt"
check not_a_trace_zip 2 "is a zip archive: hbmalloc reads the snapshot or trace itself" "$bin" replay "$tmp/traces.zip"
# Issue #36 item 1: one capacity, from wherever it is given. The doctor's suggested command carries it inside
# --backend; pasted, the sweep ran on 80 GiB (the default --capacity appended after it: "capacity=31675383808,
# capacity=85899345920"), found no OOM and recommended "10.3% less" for a job that cannot fit in 29.50 GiB.
check capacity_in_backend_sweep 1 "^no setting runs this trace without OOM at this capacity" "$bin" sweep "$ex" \
    --backend 'sim:dialect=npu,vmm=off,capacity=31675383808' --torch-npu 2.1.0.post6 --no-progress
check capacity_in_backend_replay 1 "^device: *sim:capacity=42949672960 (capacity 40.00 GiB)$" "$bin" replay "$ex" \
    --conf "" --backend sim:capacity=40GiB
check capacity_given_twice_same 1 "OOM at event" "$bin" replay "$ex" --conf "" --backend sim:capacity=40GiB \
    --capacity 40GiB
check capacity_given_twice_differ 2 "two capacities given: --capacity 80GiB (80.00 GiB) and capacity= in --backend 'sim:capacity=40GiB' (40.00 GiB): give one" \
    "$bin" sweep "$ex" --backend sim:capacity=40GiB --capacity 80GiB --no-progress
check capacity_twice_in_backend 2 "--backend gives two capacities, capacity=40GiB and capacity=30GiB" "$bin" replay \
    "$ex" --backend sim:capacity=40GiB,capacity=30GiB
check capacity_on_a_real_device 2 "--capacity 40GiB does not apply to --backend 'cuda'" "$bin" replay "$ex" \
    --backend cuda --capacity 40GiB
# Item 2: one rule for the framework (docs/TOOL.md, "The framework"), and the variable printed is the one it reads:
# `sweep --torch-npu` printed `export PYTORCH_CUDA_ALLOC_CONF=...` (torch_npu never reads it) and checked the grid
# against "PyTorch 2.1".
check sweep_torch_npu_variable 0 "^export PYTORCH_NPU_ALLOC_CONF='" "$bin" sweep "$ex" --capacity 60GiB \
    --torch-npu 2.1.0.post6 --no-progress
check sweep_torch_npu_release 0 "^checked against: torch_npu 2.1.0.post6" "$bin" sweep "$ex" --capacity 60GiB \
    --torch-npu 2.1.0.post6 --no-progress
check sweep_torch_npu_json 0 '"variable":"PYTORCH_NPU_ALLOC_CONF"' "$bin" sweep "$ex" --capacity 60GiB \
    --torch-npu 2.1.0.post6 --json
check sweep_framework_contradiction 2 "--torch-npu 2.1.0.post6 contradicts --backend 'sim:dialect=cuda'" "$bin" sweep \
    "$ex" --torch-npu 2.1.0.post6 --backend sim:dialect=cuda
check sweep_env_npu 0 "^yours: PYTORCH_NPU_ALLOC_CONF='max_split_size_mb:256'" env \
    PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:256 "$bin" sweep "$ex" --capacity 60GiB --no-progress \
    --grid "max_split_size_mb=-,64"
check sweep_env_ascend 0 "^yours: the defaults (PYTORCH_NPU_ALLOC_CONF is not set)" env ASCEND_HOME_PATH=/usr/local/Ascend/ascend-toolkit/latest \
    "$bin" sweep "$ex" --capacity 60GiB --no-progress --grid "max_split_size_mb=-,64"
check replay_torch_npu 0 "^device: *sim:dialect=npu,capacity=85899345920 " "$bin" replay "$ex" --conf "" \
    --torch-npu 2.1.0.post6
check replay_torch_npu_reads 0 "(from PYTORCH_NPU_ALLOC_CONF, read as torch_npu 2.1.0.post6" env \
    PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:64 "$bin" replay "$ex" --torch-npu 2.1.0.post6
check view_torch_npu_contradiction 2 "contradicts --backend 'sim:dialect=cuda'" "$bin" view "$ex" --conf "" \
    --torch-npu 2.1.0.post6 --backend sim:dialect=cuda -o "$tmp/x.svg"
check plan_torch_refused 2 "--torch-npu does not apply" "$bin" plan "$ex" --torch-npu 2.1.0.post6
# A snapshot's recorded stacks name the allocator that made it: torch_npu's NPUCachingAllocator (the same snapshot
# with its frames renamed), which outranks the environment; PyTorch's CUDACachingAllocator likewise.
python3 - "$src/tests/data/linear-10k-50k-grad.pickle" "$tmp/npu-snapshot.json" <<'PY'
import json, pickle, sys
text = json.dumps(pickle.load(open(sys.argv[1], 'rb')))
for cuda, npu in (('CUDACachingAllocator', 'NPUCachingAllocator'), ('RegisterCUDA.cpp', 'RegisterPrivateUse1.cpp'),
                  ('c10::cuda::', 'c10_npu::')):
    text = text.replace(cuda, npu)
open(sys.argv[2], 'w').write(text)
PY
check snapshot_stacks_npu 0 "^framework: *torch_npu, which reads PYTORCH_NPU_ALLOC_CONF (from the snapshot: its recorded stacks name NPUCachingAllocator)" \
    env PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64 "$bin" replay "$tmp/npu-snapshot.json"
check snapshot_stacks_cuda 0 "^framework: *PyTorch, .*(from the snapshot: its recorded stacks name CUDACachingAllocator); outranked: the environment: PYTORCH_NPU_ALLOC_CONF is set (torch_npu's)" \
    env PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:64 "$bin" replay "$snap"
# Item 3: `conf` read an exported PYTORCH_NPU_ALLOC_CONF as nothing ("source: default") unless --dialect npu; with
# both variables set it says which framework reads which, and shows each.
check conf_env_npu 0 "^source: PYTORCH_NPU_ALLOC_CONF$" env -u HBMALLOC_CONF PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:64 \
    "$bin" conf
check conf_env_npu_string 0 '^string: "max_split_size_mb:64"$' env -u HBMALLOC_CONF \
    PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:64 "$bin" conf
check conf_env_both 0 "^PYTORCH_CUDA_ALLOC_CONF only, torch_npu reads PYTORCH_NPU_ALLOC_CONF only" env -u HBMALLOC_CONF \
    PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:64 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$bin" conf
check conf_env_both_npu 0 "^torch_npu: PYTORCH_NPU_ALLOC_CONF='max_split_size_mb:64'$" env -u HBMALLOC_CONF \
    PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:64 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$bin" conf
check conf_env_both_cuda 0 "^PyTorch: PYTORCH_CUDA_ALLOC_CONF='expandable_segments:True'$" env -u HBMALLOC_CONF \
    PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:64 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$bin" conf
check conf_env_both_chosen 0 "^source: PYTORCH_CUDA_ALLOC_CONF$" env -u HBMALLOC_CONF \
    PYTORCH_NPU_ALLOC_CONF=max_split_size_mb:64 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$bin" conf \
    --dialect cuda
# Item 4: a misspelled grid key was "refused by PyTorch", then "keep yours", exit 0: now named, with the key the
# release reads nearest (as --conf gives it), exit 2. A key only the release given refuses is still left out.
check sweep_grid_misspelled 2 "--grid 'expandable_segment=True': Unrecognized key 'expandable_segment' .*did you mean 'expandable_segments'?" \
    "$bin" sweep "$ex" --grid "expandable_segment=True" --no-progress
check sweep_grid_bad_value 2 "--grid 'max_split_size_mb=3': invalid setting" "$bin" sweep "$ex" \
    --grid "max_split_size_mb=-,3" --no-progress
# Item 5: a snapshot whose recorded start does not fit the capacity printed "OOMs: 0", "hbmalloc -100.00%" and an
# OOM "rebuilding the recorded start" with no reason: it says the recorded state itself exceeds the capacity, both
# figures, and no figures of a replay that did not run. (The snapshot's first 8 events dropped: its recording then
# begins with 4 segments, 2.98 GiB, reserved.)
python3 -c "import pickle, sys
d = pickle.load(open(sys.argv[1], 'rb'))
d['device_traces'][0] = d['device_traces'][0][8:]
pickle.dump(d, open(sys.argv[2], 'wb'), protocol=4)" "$snap" "$tmp/mid-run.pickle"
check replay_start_unfit 1 "^not replayed: *the recorded state itself exceeds the capacity: the recording began with 2.98 GiB reserved (3204448256 bytes, 4 segments), the device has 2.00 GiB (2147483648 bytes)" \
    "$bin" replay "$tmp/mid-run.pickle" --capacity 2GiB
if "$bin" replay "$tmp/mid-run.pickle" --capacity 2GiB 2>&1 | grep -q "^OOMs:\|-100.00%\|^OOM at event"; then
    echo "FAIL replay_start_unfit_no_figures"; fails=$((fails + 1)); else echo "ok   replay_start_unfit_no_figures"; fi
check replay_start_fits 0 "the replay begins from that state (4 segments rebuilt)" "$bin" replay "$tmp/mid-run.pickle"
# Item 8: sweep --help lists --device.
check help_sweep_device 0 "--device N" "$bin" sweep --help
# Issue #36 item 10: options. GNU's `--name=value` is `--name value` to every command, for each option that takes a
# value: the same output and exit status (clock times and replay times aside), and neither refused.
joined_opts=""
joined() { # option value command args...
    opt=$1 val=$2
    shift 2
    joined_opts="$joined_opts $1$opt"
    a=$("$bin" "$@" "$opt" "$val" 2>&1 | sed -e 's/[0-9-]* [0-9][0-9]:[0-9][0-9]:[0-9][0-9]//' -e '/^replay time:/d')
    ra=$?
    b=$("$bin" "$@" "$opt=$val" 2>&1 | sed -e 's/[0-9-]* [0-9][0-9]:[0-9][0-9]:[0-9][0-9]//' -e '/^replay time:/d')
    if [ "$a" != "$b" ] || printf '%s\n' "$a$b" | grep -q "unknown option\|needs a value\|takes no value"; then
        echo "FAIL joined $1 $opt=$val: not as $opt $val"; printf '%s\n--- joined:\n%s\n' "$a" "$b"
        fails=$((fails + 1))
    else echo "ok   joined $1 $opt=$val ($ra)"; fi
}
printf 'a 1 1048576\na 2 3145728\nf 1\na 3 1048576\nf 2\nf 3\n' >"$tmp/tiny.trace"
tiny=$tmp/tiny.trace
joined --conf expandable_segments:True replay "$tiny"
joined --capacity 40GiB replay "$tiny" --conf ""
joined --backend sim:vmm=off replay "$tiny" --conf ""
joined --torch 2.1.0 replay "$tiny"
joined --torch-npu 2.1.0.post6 replay "$tiny"
joined --device 0 replay "$snap" --conf ""
joined --steps 2 replay "$tiny" --conf ""
joined --snapshot "$tmp/joined.json" replay "$tiny" --conf ""
sweep_args="--no-progress --grid max_split_size_mb=-,64"
# shellcheck disable=SC2086
{
joined --grid "max_split_size_mb=-,64" sweep "$tiny" --no-progress
joined --capacity 40GiB sweep "$tiny" $sweep_args
joined --backend sim:vmm=off sweep "$tiny" $sweep_args
joined --device 0 sweep "$snap" $sweep_args
joined --steps 2 sweep "$tiny" $sweep_args
joined --baseline max_split_size_mb:64 sweep "$tiny" $sweep_args
joined --torch 2.1.0 sweep "$tiny" $sweep_args
joined --torch-npu 2.1.0.post6 sweep "$tiny" $sweep_args
joined --jobs 2 sweep "$tiny" $sweep_args
joined --html "$tmp/joined.html" sweep "$tiny" $sweep_args
}
joined --conf max_split_size_mb:64 view "$tiny" -o "$tmp/joined.svg"
joined --detail 10 view "$tiny" --conf "" -o "$tmp/joined.svg"
joined --capacity 40GiB view "$tiny" --conf "" -o "$tmp/joined.svg"
joined --backend sim:vmm=off view "$tiny" --conf "" -o "$tmp/joined.svg"
joined --device 0 view "$snap" --conf "" -o "$tmp/joined.svg"
joined --torch 2.1.0 view "$tiny" -o "$tmp/joined.svg"
joined --torch-npu 2.1.0.post6 view "$tiny" -o "$tmp/joined.svg"
joined --steps 2 view "$tiny" --conf "" -o "$tmp/joined.svg"
joined --budget 100 plan "$tiny"
joined --seed 2 plan "$tiny"
joined --device 0 plan "$snap"
joined --dialect npu conf max_split_size_mb:64
joined --torch 2.1.0 conf max_split_size_mb:64
joined --torch-npu 2.1.0.post6 conf max_split_size_mb:64
joined --vmm no conf expandable_segments:True --dialect npu
joined --backend sim:dialect=npu conf expandable_segments:True
printf 'RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB (NPU 0; 60.00 GiB total capacity; 50.00 GiB already allocated; 1.00 GiB free; 55.00 GiB reserved in total by PyTorch)\n' >"$tmp/train.log"
joined --log "$tmp/train.log" doctor --no-env
joined --torch 2.1.0 doctor --no-env --log "$tmp/train.log"
joined --torch-npu 2.1.0.post6 doctor --no-env --log "$tmp/train.log"
joined --root "$tmp" doctor --log "$tmp/train.log"
joined --trace "$snap" doctor --no-env --capacity 2GiB
joined --capacity 2GiB doctor --no-env --trace "$snap"
joined --device 0 doctor --no-env --trace "$snap" --capacity 2GiB
joined --snapshot "$snap" doctor --no-env
mkdir "$tmp/top"
joined --dir "$tmp/top" top --once
joined --interval 0.5 top --once --dir "$tmp/top"
joined --sort pid top --once --dir "$tmp/top"
joined --csv "$tmp/top.csv" top --once --dir "$tmp/top"
joined --textfile "$tmp" top --once --dir "$tmp/top"
# ... and each option with a value that a command's --help lists is among those.
for c in replay sweep view plan conf doctor top; do
    for o in $("$bin" "$c" --help | sed -n 's/^  \(--[a-z-]*\) [^ ].*/\1/p'); do
        case " $joined_opts " in
        *" $c$o "*) ;;
        *) echo "FAIL joined: $c $o takes a value and has no joined check"; fails=$((fails + 1)) ;;
        esac
    done
done
# A mistyped option gets the nearest one the command has, as a mistyped command gets the nearest command; one of
# another command is named as such; a flag given a value, and a value missing, are said so.
check option_nearest 2 "unknown option '--capcity': did you mean '--capacity'?" "$bin" replay "$ex" --capcity 40GiB
check option_nearest_joined 2 "unknown option '--capcity': did you mean '--capacity'?" "$bin" replay "$ex" \
    --capcity=40GiB
check option_nearest_sweep 2 "unknown option '--gird': did you mean '--grid'?" "$bin" sweep "$ex" --gird x
check option_nearest_conf 2 "unknown option '--dialcet': did you mean '--dialect'?" "$bin" conf --dialcet npu
check option_nearest_doctor 2 "unknown option '--lgo': did you mean '--log'?" "$bin" doctor --lgo x
check option_nearest_top 2 "unknown option '--intervl': did you mean '--interval'?" "$bin" top --intervl 1
check option_nearest_prefix 2 "unknown option '--cap': did you mean '--capacity'?" "$bin" replay "$ex" --cap 40GiB
check option_of_another_command 2 "unknown option '--grid': an option of hbmalloc sweep, not of replay" "$bin" \
    replay "$ex" --grid x
check option_flag_given_value 2 "--stats takes no value: '--stats=1'" "$bin" replay "$ex" --stats=1
check sweep_conf_refused 2 "--conf does not apply: the grid gives the settings, and --baseline yours" "$bin" sweep \
    "$ex" --conf ""
# ';' between settings (a shell list's separator) is named, with the string as it should read; so is the variable's
# name pasted with its value.
check conf_semicolon 2 "settings are separated by ',', not ';': write 'expandable_segments:True,max_split_size_mb:128'" \
    "$bin" conf 'expandable_segments:True;max_split_size_mb:128'
check replay_semicolon 2 "not ';': write 'expandable_segments:True,max_split_size_mb:128' (from --conf)$" "$bin" \
    replay "$ex" --conf 'expandable_segments:True;max_split_size_mb:128'
check conf_variable_name 2 "drop 'PYTORCH_NPU_ALLOC_CONF=' and give the value alone: hbmalloc conf 'expandable_segments:True' --dialect npu" \
    "$bin" conf 'PYTORCH_NPU_ALLOC_CONF=expandable_segments:True'
check conf_variable_export 2 "drop 'PYTORCH_CUDA_ALLOC_CONF=' and give the value alone: hbmalloc conf 'max_split_size_mb:64'$" \
    "$bin" conf "export PYTORCH_CUDA_ALLOC_CONF='max_split_size_mb:64'"
check replay_variable_name 2 "--conf 'PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64' begins with the variable's name: drop" \
    "$bin" replay "$ex" --conf PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64
# A capacity without a unit too small for a device is refused with the size meant, not run as bytes.
check capacity_80_refused 2 "--capacity 80 has no unit: 80 bytes is no device; did you mean --capacity 80GiB?" "$bin" \
    sweep "$ex" --capacity 80 --no-progress
check capacity_80_joined 2 "did you mean --capacity 80GiB?" "$bin" view "$ex" --capacity=80 -o "$tmp/x.svg"
check capacity_80_backend 2 "--backend's capacity=80 has no unit: 80 bytes is no device; did you mean capacity=80GiB?" \
    "$bin" replay "$ex" --backend sim:capacity=80
# Help in one style: a usage line, one aligned line per option, no line over 100 columns; the documents it names
# (`hbmalloc help DOC`) are built in, so that they are there for a pip user too.
for args in "--help" "help" "" "replya" "replay --help" "sweep --help" "view --help" "plan --help" "conf --help" \
    "doctor --help" "top --help" "version --help" "help --help" "help replay"; do
    # shellcheck disable=SC2086
    w=$("$bin" $args 2>&1 | awk '{ if (length($0) > m) m = length($0) } END { print m + 0 }')
    if [ "$w" -le 100 ]; then echo "ok   help_width '$args' ($w columns)"
    else echo "FAIL help_width '$args': $w columns"; fails=$((fails + 1)); fi
done
for c in replay sweep view plan conf doctor top; do
    check "help_style_$c" 0 "^usage: hbmalloc $c .*\[options\]$" "$bin" "$c" --help
done
if "$bin" help TOOL | cmp -s - "$src/docs/TOOL.md"; then echo "ok   help_doc TOOL"
else echo "FAIL help_doc: hbmalloc help TOOL is not docs/TOOL.md"; fails=$((fails + 1)); fi
check help_doc_file_name 0 "^# " "$bin" help docs/SIM.md
check help_doc_nearest 2 "no command or document 'TOOLS': did you mean 'hbmalloc help TOOL'?" "$bin" help TOOLS
for d in $("$bin" --help | grep -o "hbmalloc help [A-Z_]*" | sed 's/hbmalloc help //' | grep -vx "DOC" | sort -u); do
    if "$bin" help "$d" >/dev/null 2>&1; then echo "ok   help_names $d"
    else echo "FAIL help_names: the help names 'hbmalloc help $d', which is no document"; fails=$((fails + 1)); fi
done
if "$bin" --help | grep -q "docs/[A-Z_]*\.md"; then echo "FAIL help_no_source_paths: the help names docs/*.md"
    fails=$((fails + 1)); else echo "ok   help_no_source_paths"; fi
if [ "$fails" -ne 0 ]; then echo "$fails CLI check(s) failed"; exit 1; fi
echo "all CLI checks passed"
