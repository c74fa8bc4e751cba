#!/bin/sh
# hbmalloc top as a user meets it: real processes on the sim backend publish (tests/fakes/publisher.c); top --once
# --json against each process's own statistics; the text table; --csv over several refreshes; the Prometheus
# file parsed by the format's reference parser (python3-prometheus-client), also with two allocators of one
# process on one device and a process name that is not UTF-8 (one series each, valid UTF-8); the live screen in
# tmux as a person sees it, and Ctrl-C; a killed process's record ignored and --clean; files of other users or
# open to them refused; two jobs that are both PID 1 of their own PID namespace (where unshare can run).
# tmux runs on a server of the test's own (a socket in its folder, no configuration file), and every command it
# runs is given the test's environment explicitly: a session of the user's tmux server takes that server's
# environment (another HBMALLOC_TOP_DIR, every allocator of the machine), not the test's.
# A job ended by SIGTERM, SIGINT or SIGHUP removes its records (the C API's and the PyTorch plug-in's), and a job
# that handles SIGTERM itself keeps its handler.
# usage: tests/cli/top.sh HBMALLOC PUBLISHER OUTDIR [PLUGIN]   (OUTDIR keeps the screen captures; PLUGIN:
# libhbmalloc_torch.so, loaded by python3 as torch loads it; without it, those checks are skipped)
set -eu
bin=$1 pub=$2 out=$3 plugin=${4:-}
py=/usr/bin/python3 # Debian's: its prometheus_client
mkdir -p "$out"
tmp=$(mktemp -d)
export HBMALLOC_TOP_DIR="$tmp/records"
mkdir -m 700 "$HBMALLOC_TOP_DIR"
session=hbmtop
tm() { tmux -S "$tmp/tmux" -f /dev/null "$@"; } # the test's own tmux server
# A command line for tmux to run, with the environment top needs spelled out.
in_tmux() { printf "env -i PATH='%s' HOME='%s' TERM=screen LANG=C.UTF-8 HBMALLOC_TOP_DIR='%s' %s" "$PATH" "$tmp" \
    "$HBMALLOC_TOP_DIR" "$*"; }
nspids=""
cleanup() {
    tm kill-server 2>/dev/null || true
    [ -z "$nspids" ] || kill -9 $nspids 2>/dev/null || true # unshare --kill-child: their children go with them
    for f in "$tmp"/r*.json; do
        [ -e "$f" ] && kill -9 "$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$f")" 2>/dev/null  || true
    done
    rm -rf "$tmp"
    return 0 # the script's status is its own, not the last kill's
}
trap cleanup EXIT
trap 'exit 1' INT TERM
fail() { echo "FAIL: $*"; exit 1; }
wait_for() { # file
    i=0
    while [ ! -s "$1" ]; do
        i=$((i + 1))
        [ $i -le 300 ] || fail "no $1 after 30 s"
        sleep 0.1
    done
}
# Two ranks of one job, each held open by a FIFO on its standard input (closing it ends the process cleanly).
for r in 0 1; do
    mkfifo "$tmp/in$r"
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 "$pub" "$tmp/r$r.json" $((r + 1)) <"$tmp/in$r" &
done
exec 3>"$tmp/in0" 4>"$tmp/in1"
wait_for "$tmp/r0.json"
wait_for "$tmp/r1.json"
pid0=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$tmp/r0.json")
pid1=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$tmp/r1.json")

# 1. --once --json equals each process's own hbm_stats (and its snapshot's largest free block).
"$bin" top --once --json >"$tmp/top.json"
$py - "$tmp/top.json" "$tmp/r0.json" "$tmp/r1.json" <<'PY' || fail "top --once --json against the processes' own statistics"
import json, sys
top = json.load(open(sys.argv[1]))
own = [json.load(open(p)) for p in sys.argv[2:]]
recs = top["records"]
assert [r["rank"] for r in recs] == [0, 1], recs
assert top["stale"] == 0 and top["refused"] == 0, top
for r, o in zip(recs, own):
    for k, v in o.items():
        assert r[k] == v, (k, r[k], v)
    # the two terms (docs/TOOL.md, Terms): unallocated = reserved - allocated (and its share of reserved);
    # fragmentation = 1 - the largest free cached block / free cached bytes (reserved - active)
    assert r["reserved_unallocated_bytes"] == r["reserved_bytes"] - r["allocated_bytes"]
    assert abs(r["unallocated_share"] - r["reserved_unallocated_bytes"] / r["reserved_bytes"]) < 1e-6
    assert r["free_cached_bytes"] == r["reserved_bytes"] - r["active_bytes"] > 0, r
    assert abs(r["fragmentation"] - (1 - r["largest_free_bytes"] / r["free_cached_bytes"])) < 1e-6, r
    assert r["job_peak_reserved_bytes"] == r["peak_reserved_bytes"] and r["device_as_numbered"] == "sim 0", r
    assert r["job_peak_allocated_bytes"] == r["peak_allocated_bytes"], r
    assert r["command"] == "publisher" and r["world_size"] == 2 and r["local_rank"] == r["rank"], r
    assert "hbm_publish:True" in r["settings"] and r["backend"].startswith("sim"), r
    assert r["num_ooms"] == 1 and r["largest_free_bytes"] > 0 and r["inactive_split"] > 0, r
print("top --json: 2 records equal to the processes' own statistics")
PY

# 2. The table, once: each allocator's reserved memory of its device's capacity (8 GiB), memory outside hbmalloc
# (none here: the simulated device holds nothing beside the publishers; on the device's total "-": each process's
# simulated device is its own, so no figure of one device's use adds them up), unallocated and its share,
# fragmentation, the peaks; one total per device (reserved of capacity summed: 778 MiB + 1.52 GiB of 8 GiB), not
# one "all" row across devices.
"$bin" top --once >"$tmp/top.txt"
head="^RANK +PID +DEV +ALLOCATED +RESERVED +CAPACITY +RES/CAP +OUTSIDE +UNALLOC +UNALLOC% +FRAG% +LARGEST FREE +PEAK +JOB PEAK"
grep -Eq "$head +OOMS +RETRIES +DEV MALLOC +EXP +COMMAND\$" "$tmp/top.txt" || fail "the table's header: $(cat "$tmp/top.txt")"
grep -Eq "^0 +$pid0 +0 +745.00 MiB +778.00 MiB +8.00 GiB +9.5% +0 bytes +33.00 MiB +4.2% +0.0% +33.00 MiB +1.30 GiB .* publisher\$" \
    "$tmp/top.txt" || fail "rank 0's row: $(cat "$tmp/top.txt")"
grep -Eq "^1 +$pid1 +0 .* publisher\$" "$tmp/top.txt" || fail "rank 1's row"
grep -Eq "^total +0 +2.18 GiB +2.28 GiB +8.00 GiB +28.5% +- +102.00 MiB +4.4% +2 +2 +16\$" "$tmp/top.txt" ||
    fail "the device's total row: $(cat "$tmp/top.txt")"
! grep -q '^all ' "$tmp/top.txt" || fail "an 'all' row across devices"

# 3. --csv: a line per process per refresh, appended; Ctrl-C (SIGINT) ends it with status 0.
"$bin" top --interval 0.2 --csv "$tmp/top.csv" >"$tmp/csv.out" &
csvpid=$!
sleep 1.3
kill -INT $csvpid
rc=0
wait $csvpid || rc=$?
[ "$rc" -eq 0 ] || fail "top --csv ended with status $rc on SIGINT"
[ ! -s "$tmp/csv.out" ] || fail "top --csv without a terminal printed a table"
$py - "$tmp/top.csv" "$tmp/r0.json" "$tmp/r1.json" <<'PY' || fail "the CSV file"
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1], newline="")))
own = {o["pid"]: o for o in (json.load(open(p)) for p in sys.argv[2:])}
times = sorted(set(r["time"] for r in rows))
assert len(rows) >= 6 and len(rows) % 2 == 0, len(rows)
for r in rows:
    o = own[int(r["pid"])]
    assert int(r["allocated_bytes"]) == o["allocated_bytes"] and int(r["num_ooms"]) == 1, r
    assert int(r["reserved_unallocated_bytes"]) == o["reserved_bytes"] - o["allocated_bytes"], r
    assert abs(float(r["unallocated_share"]) - int(r["reserved_unallocated_bytes"]) / o["reserved_bytes"]) < 1e-6, r
    assert r["fragmentation"] != "" and 0 <= float(r["fragmentation"]) <= 1, r
    assert r["command"] == "publisher"
print("top --csv:", len(rows), "rows over", len(times), "distinct seconds")
PY
"$bin" top --once --csv "$tmp/top.csv" >/dev/null
[ "$(grep -c '^time,' "$tmp/top.csv")" -eq 1 ] || fail "the CSV header was written again when appending"

# 4. --textfile: node_exporter's textfile collector format, parsed by the reference parser.
mkdir "$tmp/prom"
"$bin" top --once --textfile "$tmp/prom" >/dev/null
[ -f "$tmp/prom/hbmalloc.prom" ] && [ -z "$(ls -A "$tmp/prom" | grep -v '^hbmalloc.prom$')" ] ||
    fail "the textfile folder: $(ls -A "$tmp/prom")"
$py - "$tmp/prom/hbmalloc.prom" "$tmp/r0.json" "$tmp/r1.json" <<'PY' || fail "the Prometheus text file"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1]).read()
own = {str(o["pid"]): o for o in (json.load(open(p)) for p in sys.argv[2:])}
fams = {f.name: f for f in text_string_to_metric_families(text)}  # raises on a malformed line
series = lambda s: (s.labels["rank"], s.labels["device"], s.labels["slot"])
pid_of = {series(s): s.labels["pid"] for s in fams["hbmalloc_info"].samples}  # the PID is hbmalloc_info's label
want = {"hbmalloc_allocated_bytes": ("gauge", "allocated_bytes"), "hbmalloc_reserved_bytes": ("gauge", "reserved_bytes"),
        "hbmalloc_largest_free_block_bytes": ("gauge", "largest_free_bytes"), "hbmalloc_ooms": ("counter", "num_ooms"),
        "hbmalloc_alloc_retries": ("counter", "num_alloc_retries"),
        "hbmalloc_device_mallocs": ("counter", "num_device_alloc")}
for name, (kind, key) in want.items():
    f = fams[name]
    assert f.type == kind, (name, f.type)
    assert len(f.samples) == 2, f.samples
    for s in f.samples:
        assert s.name == name + ("_total" if kind == "counter" else ""), s.name
        assert set(s.labels) == {"rank", "device", "slot"}, s.labels
        assert s.value == own[pid_of[series(s)]][key], (name, s)
        assert s.labels["device"] == "0" and s.labels["rank"] in ("0", "1") and s.labels["slot"] == "0", s.labels
un = fams["hbmalloc_reserved_unallocated_bytes"].samples
assert all(s.value == own[pid_of[series(s)]]["reserved_bytes"] - own[pid_of[series(s)]]["allocated_bytes"]
           for s in un)
info = fams["hbmalloc_info"].samples
assert all(s.labels["command"] == "publisher" and "hbm_publish:True" in s.labels["settings"] for s in info), info
print("textfile:", len(fams), "metric families parsed")
PY

# 4b. A valid file whatever the processes are: a third process with two allocators on device 0 and no RANK (their
# series differ by slot alone), named with bytes that are not UTF-8, a quote, a backslash, a line feed and an
# escape sequence. node_exporter rejects the whole file for one duplicate series or one invalid byte.
mkfifo "$tmp/in2"
HBM_PUBLISHER_NAME=$(printf 'a\377"\\\n\033[31mz') "$pub" "$tmp/r2.json" 1 2 <"$tmp/in2" &
exec 5>"$tmp/in2"
wait_for "$tmp/r2.json"
pid2=$($py -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$tmp/r2.json")
"$bin" top --once --textfile "$tmp/prom" >"$tmp/top-odd.txt"
$py - "$tmp/prom/hbmalloc.prom" "$pid2" "$tmp/top-odd.txt" <<'PY' || fail "the Prometheus file with two allocators of a process and an odd name"
import sys
from prometheus_client.parser import text_string_to_metric_families
text = open(sys.argv[1], "rb").read().decode("utf-8")  # strict: raises on a byte that is not UTF-8
seen = {}
for f in text_string_to_metric_families(text):
    for s in f.samples:
        key = (s.name, tuple(sorted(s.labels.items())))
        assert key not in seen, ("duplicate series", key)
        seen[key] = s.value
    if f.name != "hbmalloc_info":
        assert len(f.samples) == 4, (f.name, f.samples)
info = [dict(k[1]) for k in seen if k[0] == "hbmalloc_info" and dict(k[1])["pid"] == sys.argv[2]]
assert sorted((i["rank"], i["device"], i["slot"]) for i in info) == [("-1", "0", "0"), ("-1", "0", "1")], info
assert all(i["command"] == 'a\ufffd"\\\ufffd\ufffd[31mz' for i in info), info
table = open(sys.argv[3], "rb").read()
assert not any(c < 0x20 and c != 0x0a or c == 0x7f for c in table), "a control character in the table"
table.decode("utf-8")
print("textfile:", len(seen), "series, none twice; the odd name escaped:", ascii(info[0]["command"]))
PY
exec 5>&-
i=0
while kill -0 "$pid2" 2>/dev/null; do
    i=$((i + 1)); [ $i -le 100 ] || fail "the third process did not exit"; sleep 0.1
done
rm "$tmp/r2.json"

# 5. The live screen in tmux, as a person sees it: redrawn in place, both ranks, their trend. Resized from 150 to 80
# columns while it runs, it redraws at 80 at once (SIGWINCH) and no row wraps: the optional columns go. `s` sorts by
# reserved (rank 1, the larger, first), `q` quits with status 0; in another, Ctrl-C does.
wide() { $py -c 'import sys; w = max(len(l) for l in open(sys.argv[1], encoding="utf-8").read().splitlines()); print(w)' "$1"; }
tm new-session -d -s "$session" -x 150 -y 16 "$(in_tmux "'$bin'" top --interval 0.3); echo exited=\$?; sleep 30"
sleep 2
tm capture-pane -p -t "$session" >"$out/top-screen.txt"
[ "$(grep -c '^hbmalloc top ' "$out/top-screen.txt")" -eq 1 ] ||
    fail "the screen is not redrawn in place (several frames visible): $(cat "$out/top-screen.txt")"
grep -q 'every 0.3s  sort: rank (s)  quit: q' "$out/top-screen.txt" || fail "the title line: $(cat "$out/top-screen.txt")"
grep -Eq "^0 +$pid0 " "$out/top-screen.txt" && grep -Eq "^1 +$pid1 " "$out/top-screen.txt" ||
    fail "the ranks on screen: $(cat "$out/top-screen.txt")"
grep -Eq "^RANK .* TREND +OOMS" "$out/top-screen.txt" && grep -Eq "^0 +$pid0 .* [▁▂▃▄▅▆▇█]{2,8} +1 " "$out/top-screen.txt" ||
    fail "the trend column: $(cat "$out/top-screen.txt")"
[ "$(wide "$out/top-screen.txt")" -le 150 ] || fail "a line wider than 150 columns"
tm resize-window -t "$session" -x 80 -y 16
sleep 0.2 # well under the 0.3 s refresh: the resize redraws at once
tm capture-pane -p -t "$session" >"$out/top-screen-80.txt"
[ "$(wide "$out/top-screen-80.txt")" -le 80 ] || fail "a row wraps at 80 columns: $(cat "$out/top-screen-80.txt")"
grep -Eq '^RANK +PID +DEV +ALLOCATED +RESERVED +RES/CAP +UNALLOC% +LARGEST FREE +OOMS$' "$out/top-screen-80.txt" ||
    fail "the 80-column header: $(cat "$out/top-screen-80.txt")"
for p in $pid0 $pid1; do
    grep -E "^[01] +$p " "$out/top-screen-80.txt" | awk '{ exit !(NF == 12 && $12 == 1) }' ||
        fail "an 80-column row (12 fields, ending in OOMS): $(cat "$out/top-screen-80.txt")"
done
tm send-keys -t "$session" s
sleep 0.2
tm capture-pane -p -t "$session" >"$out/top-screen-sorted.txt"
grep -q 'sort: reserved (s)' "$out/top-screen-sorted.txt" && [ "$(grep -Eo "^[01] +($pid0|$pid1) " \
    "$out/top-screen-sorted.txt" | awk '{ printf "%s", $1 }')" = 10 ] ||
    fail "s sorts by reserved, the larger first: $(cat "$out/top-screen-sorted.txt")"
tm send-keys -t "$session" q
sleep 0.5
tm capture-pane -p -t "$session" >"$out/top-screen-after-q.txt"
grep -q 'exited=0$' "$out/top-screen-after-q.txt" || fail "q: $(cat "$out/top-screen-after-q.txt")"
# A second session beside the first, on the same server: killing the first would end the server, and a client that
# starts the next one while it is still going away is told "server exited unexpectedly" (seen under ASan's load).
tm new-session -d -s "${session}c" -x 100 -y 16 "$(in_tmux "'$bin'" top --interval 0.3); echo exited=\$?; sleep 30"
sleep 1
tm send-keys -t "${session}c" C-c
sleep 1
tm capture-pane -p -t "${session}c" >"$out/top-screen-after-ctrl-c.txt"
grep -q 'exited=0$' "$out/top-screen-after-ctrl-c.txt" || fail "Ctrl-C: $(cat "$out/top-screen-after-ctrl-c.txt")"
tm kill-server
echo "tmux: live screen checked at 150 columns, resized to 80, sorted with s, q and Ctrl-C ($out/top-screen*.txt)"

# 6. Files that must not be trusted: a record open to other users, another user's (root: CI), other users' names.
rec0=$(ls "$HBMALLOC_TOP_DIR"/hbmalloc-"$(id -u)"-"$pid0"-*)
cp -p "$rec0" "$HBMALLOC_TOP_DIR/hbmalloc-$(id -u)-$pid0-0-900"
chmod 644 "$HBMALLOC_TOP_DIR/hbmalloc-$(id -u)-$pid0-0-900"
cp -p "$rec0" "$HBMALLOC_TOP_DIR/hbmalloc-65534-$pid0-0-901" # named for another user: not even opened
nowned=0
if [ "$(id -u)" -eq 0 ]; then
    cp -p "$rec0" "$HBMALLOC_TOP_DIR/hbmalloc-0-$pid0-0-902"
    chown 65534:65534 "$HBMALLOC_TOP_DIR/hbmalloc-0-$pid0-0-902"
    nowned=1
fi
"$bin" top --once --json | $py -c "
import json, sys
t = json.load(sys.stdin)
assert len(t['records']) == 2 and t['refused'] == 1 + $nowned, t
print('refused:', t['refused'], '(mode 0644%s)' % (', another owner' if $nowned else ''))" || fail "unsafe files"
"$bin" top --once | grep -q "file.* refused, e.g. " || fail "the table does not say a file was refused"
rm -f "$HBMALLOC_TOP_DIR"/hbmalloc-*-90?

# 7a. Ended by a signal: a job stopped by SIGTERM (its scheduler, torchrun), SIGINT or SIGHUP at their default
# dispositions removes its record on its way out and still dies of the signal (status 128 + N); before, the record
# stayed and every top counted it stale. (env --default-signal: a background job of sh starts with SIGINT ignored.)
for sig in TERM:15 INT:2 HUP:1; do
    name=${sig%:*} num=${sig#*:}
    mkfifo "$tmp/sig$name"
    env --default-signal=INT "$pub" "$tmp/sig$name.json" <"$tmp/sig$name" &
    spid=$!
    exec 6>"$tmp/sig$name"
    wait_for "$tmp/sig$name.json"
    [ -n "$(ls "$HBMALLOC_TOP_DIR"/hbmalloc-*-"$spid"-* 2>/dev/null)" ] || fail "no record of the SIG$name process"
    kill -"$name" "$spid"
    rc=0
    wait "$spid" || rc=$?
    exec 6>&-
    [ "$rc" -eq $((128 + num)) ] || fail "SIG$name: exit status $rc, not $((128 + num)) (killed by the signal)"
    [ -z "$(ls "$HBMALLOC_TOP_DIR"/hbmalloc-*-"$spid"-* 2>/dev/null)" ] || fail "SIG$name left the record"
done
echo "signals: SIGTERM, SIGINT and SIGHUP remove the record and still end the process"
# The PyTorch plug-in's process (python3 loading the plug-in as torch does, publishing by default): SIGTERM removes
# its record; a job whose own SIGTERM handler was there first keeps it: the handler runs, the job exits normally,
# and atexit removes the record.
if [ -n "$plugin" ]; then
    for mode in default handler; do
        env --default-signal=INT HBMALLOC_BACKEND=sim:capacity=1GiB HBMALLOC_CONF= HBMALLOC_QUIET=1 $py -c '
import ctypes, os, signal, sys, time
plugin, out, mode = sys.argv[1:4]
if mode == "handler":
    def on_term(sig, frame):
        open(out + ".handled", "w").write("handled")
        sys.exit(0)
    signal.signal(signal.SIGTERM, on_term)
lib = ctypes.CDLL(plugin)
lib.hbm_torch_raw_alloc.restype = ctypes.c_void_p
lib.hbm_torch_raw_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
assert lib.hbm_torch_raw_alloc(64 << 20, 0, None)
open(out + ".tmp", "w").write(str(os.getpid()))
os.rename(out + ".tmp", out)
while True:
    time.sleep(0.1)
' "$plugin" "$tmp/py-$mode.pid" "$mode" &
        ppid_=$!
        wait_for "$tmp/py-$mode.pid"
        [ -n "$(ls "$HBMALLOC_TOP_DIR"/hbmalloc-*-"$ppid_"-* 2>/dev/null)" ] || fail "the plug-in's process published nothing"
        kill -TERM "$ppid_"
        rc=0
        wait "$ppid_" || rc=$?
        [ -z "$(ls "$HBMALLOC_TOP_DIR"/hbmalloc-*-"$ppid_"-* 2>/dev/null)" ] || fail "SIGTERM left the plug-in's record ($mode)"
        if [ "$mode" = default ]; then
            [ "$rc" -eq 143 ] || fail "the plug-in's process: exit status $rc, not 143 (killed by SIGTERM)"
        else
            [ "$rc" -eq 0 ] && [ -s "$tmp/py-$mode.pid.handled" ] || fail "the job's own SIGTERM handler: status $rc"
        fi
    done
    echo "signals: the plug-in's process removes its record on SIGTERM; a job's own SIGTERM handler is kept"
else
    echo "SKIP (the plug-in and SIGTERM): no plug-in given (a sanitizer build: python3 cannot load it)"
fi

# 7b. A killed process (SIGKILL cannot be caught): its record stays, is ignored, and --clean removes it.
kill -9 "$pid1"
sleep 0.3
"$bin" top --once --json | $py -c "
import json, sys
t = json.load(sys.stdin)
assert [r['rank'] for r in t['records']] == [0] and t['stale'] == 1, t" || fail "a killed process's record"
"$bin" top --once >"$tmp/top-stale.txt"
grep -q '^1 record of exited processes ignored (--clean removes them)$' "$tmp/top-stale.txt" &&
    grep -q '^hbmalloc top .* 1 allocator, 1 stale$' "$tmp/top-stale.txt" || fail "the stale note: $(cat "$tmp/top-stale.txt")"
[ -n "$(ls "$HBMALLOC_TOP_DIR"/hbmalloc-*-"$pid1"-* 2>/dev/null)" ] || fail "top removed a record without --clean"
"$bin" top --once --clean | grep -q 'ignored and removed' || fail "--clean"
[ -z "$(ls "$HBMALLOC_TOP_DIR"/hbmalloc-*-"$pid1"-* 2>/dev/null)" ] || fail "--clean left the stale record"

# 8. A clean exit removes the record; a replay never publishes (its allocator runs without its lock).
exec 3>&- 4>&-
i=0
while kill -0 "$pid0" 2>/dev/null; do
    i=$((i + 1)); [ $i -le 100 ] || fail "rank 0 did not exit"; sleep 0.1
done
[ -z "$(ls -A "$HBMALLOC_TOP_DIR")" ] || fail "records left after a clean exit: $(ls -A "$HBMALLOC_TOP_DIR")"
"$bin" replay "$(dirname "$0")/../../examples/cs336-lm-ctx512-forward.trace" --conf hbm_publish:True >/dev/null
[ -z "$(ls -A "$HBMALLOC_TOP_DIR")" ] || fail "a replay left a record"

# 8b. A pool asleep (docs/SLEEP.md; issue #36 item 9): a process of the C API (libhbmalloc through ctypes) puts an
# 80 MiB pool to sleep with 24 MiB of other blocks in memory. Its blocks stay allocated on pages given back, which
# reserved does not count, so allocated passes reserved: the table gets an ASLEEP column (the record's asleep_bytes,
# the pages the process's own hbm_pool_info_get reports) and unallocated is reserved less the blocks in memory, in
# the row, the total and the JSON. Under the row, what still held the device's memory at that sleep (issue #37 item
# 2): the 1 GiB other processes hold on the sim (others=1GiB) outside hbmalloc, in the line and in outside_bytes.
lib="$(dirname "$bin")/libhbmalloc.so"
if [ -e "$lib" ] && ! ldd "$lib" 2>/dev/null | grep -q 'lib[at]san'; then
    mkfifo "$tmp/zin"
    cat >"$tmp/sleeper.py" <<'PY'
import ctypes, json, os, sys
lib = ctypes.CDLL(sys.argv[1])
c = ctypes
a, err, pool, ptr = c.c_void_p(), c.create_string_buffer(512), c.c_uint64(), c.c_void_p()
assert lib.hbm_open(c.byref(a), b"sim:capacity=8GiB,others=1GiB", 0, b"hbm_publish:True", err, 512) == 0, err.value
assert lib.hbm_mempool_create(a, c.byref(pool)) == 0 and lib.hbm_pool_tag(a, pool, b"weights", 0) == 0
assert lib.hbm_mempool_begin_thread(a, pool) == 0
for _ in range(4):
    assert lib.hbm_malloc(a, c.c_size_t(20 << 20), c.c_uint64(0), c.byref(ptr)) == 0
assert lib.hbm_mempool_end(a, pool) == 0
for _ in range(3):
    assert lib.hbm_malloc(a, c.c_size_t(8 << 20), c.c_uint64(0), c.byref(ptr)) == 0
lib.hbm_last_error.restype = c.c_char_p
assert lib.hbm_pool_sleep(a, pool, None) == 0, lib.hbm_last_error(a)
class PoolInfo(c.Structure):  # hbm_pool_info's head (include/hbmalloc.h), room for the rest
    _fields_ = [("id", c.c_uint64), ("tag", c.c_char * 64), ("backup", c.c_int), ("state", c.c_int),
                ("live_bytes", c.c_uint64), ("reserved_bytes", c.c_uint64), ("asleep_bytes", c.c_uint64),
                ("rest", c.c_uint64 * 32)]
info = PoolInfo()
assert lib.hbm_pool_info_get(a, pool, c.byref(info)) == 0 and info.tag == b"weights"
live, asleep = info.live_bytes, info.asleep_bytes
assert lib.hbm_publish(a, 0) == 0 and lib.hbm_publish(a, 1) == 0  # the record as of now
with open(sys.argv[2] + ".tmp", "w") as f:
    json.dump({"pid": os.getpid(), "live": live, "asleep": asleep}, f)
os.rename(sys.argv[2] + ".tmp", sys.argv[2])
sys.stdin.read()
lib.hbm_destroy(a)
PY
    HBMALLOC_CONF= $py "$tmp/sleeper.py" "$lib" "$tmp/z.json" <"$tmp/zin" &
    zpid=$!
    exec 7>"$tmp/zin"
    wait_for "$tmp/z.json"
    "$bin" top --once >"$tmp/top-asleep.txt"
    "$bin" top --once --json >"$tmp/top-asleep.json"
    $py - "$tmp/z.json" "$tmp/top-asleep.json" "$tmp/top-asleep.txt" <<'PY' ||
import json, re, sys
own, top, text = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), open(sys.argv[3]).read()
r = next(x for x in top["records"] if x["pid"] == own["pid"])
assert own["live"] == 80 << 20 and r["asleep_bytes"] == own["asleep"] >= own["live"], (own, r)
mem = r["allocated_bytes"] - r["asleep_bytes"]
assert r["allocated_bytes"] > r["reserved_bytes"] >= mem, r  # allocated passes reserved; in memory does not
assert r["reserved_unallocated_bytes"] == r["reserved_bytes"] - mem > 0, r
assert re.search(r"^RANK +PID +DEV +ALLOCATED +RESERVED +ASLEEP +CAPACITY", text, re.M), text
row = re.search(r"^- +%d +0 +(\S+ \S+) +(\S+ \S+) +80.00 MiB +8.00 GiB +\S+ +(\S+ \S+) " % own["pid"], text, re.M)
assert row and row.group(3) != "0 bytes", text
assert re.search(r"^      asleep: weights 80.00 MiB$", text, re.M), text
held = re.search(r"^      held at the last sleep or wake: device 0: (.*)$", text, re.M)
assert held and "largest first: 1024.00 MiB outside hbmalloc (other processes" in held.group(1), text
assert held.group(1).endswith("; 1 pool asleep gave back 80.00 MiB"), held.group(1)
assert r["outside_bytes"] == 1 << 30 and r["resident_used_bytes"] > 1 << 30 and r["resident_ns"] > 0, r
assert r["resident"] == "device 0: " + held.group(1), r
print("top: a pool asleep: allocated %s, reserved %s, ASLEEP 80.00 MiB, unallocated %s" % row.groups())
PY
        fail "a pool asleep: $(cat "$tmp/top-asleep.txt")"
    exec 7>&-
    wait "$zpid" || fail "the sleeping pool's process ended with status $?"
    [ -z "$(ls -A "$HBMALLOC_TOP_DIR")" ] || fail "records left by the sleeping pool's process"
else
    echo "SKIP (section 8b): no $lib that python3 can load (missing, or a sanitizer build)"
fi

# 9. Bad usage is refused with status 2.
for args in "--interval 0" "--interval x" "--textfile $tmp/none" "--bogus" "--csv"; do
    rc=0
    # shellcheck disable=SC2086
    "$bin" top --once $args >/dev/null 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "top $args: status $rc"
done
# 10. Two jobs in PID namespaces of their own, sharing the folder (containers with --ipc=host): both are PID 1.
# Both publish (the names do not rest on the PID), and a reader here takes neither for dead: --clean removes
# neither (the writer's lock, not the PID, is the proof of life). Needs unshare --pid (root or user namespaces).
if unshare --pid --fork --kill-child --mount-proc true 2>/dev/null; then
    for n in 0 1; do
        mkfifo "$tmp/nsin$n"
        unshare --pid --fork --kill-child --mount-proc "$pub" "$tmp/ns$n.json" <"$tmp/nsin$n" &
        nspids="$nspids $!"
    done
    exec 3>"$tmp/nsin0" 4>"$tmp/nsin1"
    wait_for "$tmp/ns0.json"
    wait_for "$tmp/ns1.json"
    "$bin" top --once --json --clean | $py -c "
import json, sys
t = json.load(sys.stdin)
assert [r['pid'] for r in t['records']] == [1, 1] and t['stale'] == 0, t
print('PID namespaces: two jobs that are both PID 1 published and live to a reader outside')" ||
        fail "two jobs of other PID namespaces"
    [ "$(ls "$HBMALLOC_TOP_DIR" | grep -c '^hbmalloc-')" -eq 2 ] || fail "--clean removed a live job's record"
    exec 3>&- 4>&-
    # shellcheck disable=SC2086
    wait $nspids
    nspids=""
    [ -z "$(ls -A "$HBMALLOC_TOP_DIR")" ] || fail "records left by the namespaced jobs: $(ls -A "$HBMALLOC_TOP_DIR")"
else
    echo "SKIP (section 10): unshare --pid cannot run here (needs root or user namespaces); the namespace rule is" \
        "covered by test_publish: a_record_of_another_pid_namespace_lives_while_its_lock_is_held"
fi
echo "top: ok"
