#!/bin/sh
# hbmalloc top as a user meets it: real processes on the sim backend publish (tests/publisher.c); top --once
# --json against each process's own statistics; the text table; --csv over several refreshes; the Prometheus
# file parsed by the format's reference parser (python3-prometheus-client), also with two allocators of one
# process on one device and a process name that is not UTF-8 (one series each, valid UTF-8); the live screen in
# tmux as a person sees it, and Ctrl-C; a killed process's record ignored and --clean; files of other users or
# open to them refused; two jobs that are both PID 1 of their own PID namespace (where unshare can run).
# usage: tests/top.sh HBMALLOC PUBLISHER OUTDIR   (OUTDIR keeps the screen captures)
set -eu
bin=$1 pub=$2 out=$3
py=/usr/bin/python3 # Debian's: its prometheus_client
mkdir -p "$out"
tmp=$(mktemp -d)
export HBMALLOC_TOP_DIR="$tmp/records"
mkdir -m 700 "$HBMALLOC_TOP_DIR"
session=hbmtop$$
nspids=""
cleanup() {
    tmux kill-session -t "$session" 2>/dev/null || true
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
    assert r["reserved_unallocated_bytes"] == r["reserved_bytes"] - r["allocated_bytes"]
    assert abs(r["fragmentation"] - r["reserved_unallocated_bytes"] / r["reserved_bytes"]) < 1e-6
    assert r["command"] == "publisher" and r["world_size"] == 2 and r["local_rank"] == r["rank"], r
    assert "hbm_publish:True" in r["settings"] and r["backend"].startswith("sim"), r
    assert r["num_ooms"] == 1 and r["largest_free_bytes"] > 0 and r["inactive_split"] > 0, r
print("top --json: 2 records equal to the processes' own statistics")
PY

# 2. The table, once.
"$bin" top --once >"$tmp/top.txt"
grep -q '^RANK  *PID  *DEV  *ALLOCATED  *RESERVED  *UNALLOC  *FRAG%  *LARGEST FREE  *OOMS  *RETRIES' "$tmp/top.txt" ||
    fail "the table's header"
grep -Eq "^0 +$pid0 +0 .* publisher\$" "$tmp/top.txt" || fail "rank 0's row: $(cat "$tmp/top.txt")"
grep -Eq "^1 +$pid1 +0 .* publisher\$" "$tmp/top.txt" || fail "rank 1's row"
grep -q '^all ' "$tmp/top.txt" || fail "the total row"

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

# 5. The live screen in tmux, as a person sees it: redrawn in place, both ranks, Ctrl-C quits.
tmux new-session -d -s "$session" -x 150 -y 16 "$bin top --interval 0.3; echo exited=\$?; sleep 30"
sleep 2
tmux capture-pane -p -t "$session" >"$out/top-screen.txt"
[ "$(grep -c '^hbmalloc top ' "$out/top-screen.txt")" -eq 1 ] ||
    fail "the screen is not redrawn in place (several frames visible): $(cat "$out/top-screen.txt")"
grep -q 'every 0.3s, Ctrl-C quits' "$out/top-screen.txt" || fail "the title line: $(cat "$out/top-screen.txt")"
grep -Eq "^0 +$pid0 " "$out/top-screen.txt" && grep -Eq "^1 +$pid1 " "$out/top-screen.txt" ||
    fail "the ranks on screen: $(cat "$out/top-screen.txt")"
tmux send-keys -t "$session" C-c
sleep 1
tmux capture-pane -p -t "$session" >"$out/top-screen-after-ctrl-c.txt"
grep -q 'exited=0$' "$out/top-screen-after-ctrl-c.txt" || fail "Ctrl-C: $(cat "$out/top-screen-after-ctrl-c.txt")"
tmux kill-session -t "$session"
# On an 80-column terminal the optional columns go (process name, expandable, device mallocs, unallocated) and no
# row wraps.
tmux new-session -d -s "$session" -x 80 -y 16 "$bin top --interval 0.3"
sleep 2
tmux capture-pane -p -t "$session" >"$out/top-screen-80.txt"
tmux kill-session -t "$session"
grep -Eq '^RANK +PID +DEV +ALLOCATED +RESERVED +FRAG% +LARGEST FREE +OOMS +RETRIES$' "$out/top-screen-80.txt" ||
    fail "the 80-column header: $(cat "$out/top-screen-80.txt")"
for p in $pid0 $pid1; do
    grep -E "^[01] +$p " "$out/top-screen-80.txt" | awk '{ exit !(NF == 12 && $12 == 1) }' ||
        fail "an 80-column row (12 fields, ending in RETRIES): $(cat "$out/top-screen-80.txt")"
done
echo "tmux: live screen checked at 150 and 80 columns ($out/top-screen.txt, top-screen-80.txt)"

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

# 7. A killed process: its record stays, is ignored, and --clean removes it.
kill -9 "$pid1"
sleep 0.3
"$bin" top --once --json | $py -c "
import json, sys
t = json.load(sys.stdin)
assert [r['rank'] for r in t['records']] == [0] and t['stale'] == 1, t" || fail "a killed process's record"
"$bin" top --once | grep -q '1 record of exited processes ignored (--clean removes them)' || fail "the stale note"
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
"$bin" replay "$(dirname "$0")/../examples/cs336-lm-ctx512-forward.trace" --conf hbm_publish:True >/dev/null
[ -z "$(ls -A "$HBMALLOC_TOP_DIR")" ] || fail "a replay left a record"

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
