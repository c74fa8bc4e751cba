#!/bin/sh
# A real Prometheus reads hbmalloc's figures (issue #40 item 5): three publishing processes (tests/fakes/publisher.c
# on the sim, RANK 0, 1 and 2 of WORLD_SIZE 3, their sizes x1, x2 and x4) keep their records; `hbmalloc top
# --textfile` rewrites the Prometheus file every half second; Debian's node_exporter serves it with its textfile
# collector alone; Debian's Prometheus scrapes it every second with the shipped configuration
# (monitor/prometheus/prometheus.yml, its intervals set to 1s) and rules (monitor/prometheus/hbmalloc-rules.yml).
# Then, through Prometheus's HTTP API: each rank's hbmalloc_reserved_bytes equals what its process says (the
# publishers hold still), with the `job` label of the targets file and the `instance` of the exporter; every rule is
# loaded with health "ok"; the job's median reserved (a recording rule) is rank 1's; and the only alert is rank 2's
# HbmallocRankFarAboveOthers, pending (its `for` is 10 minutes), no other rank's and no other alert; and every query
# of the Grafana dashboard (monitor/grafana/hbmalloc.json) runs there and, but for those that keep known values only,
# returns series.
#
# Everything on 127.0.0.1, on ports the kernel hands out (a port taken between the choice and the server's start makes
# the server exit: another port is tried, 5 times); every process this test starts is ended on exit, its folder
# removed, and each runs under `timeout` too, so that not even a SIGKILL of this script leaves one running for long.
# Waits are bounded by one deadline (HBM_PROM_DEADLINE seconds, default 50; the whole takes 7 s on an idle 2-core
# machine) and none is taken as a result.
# Debian's packages start their own services on install where systemd runs (prometheus on :9090, node_exporter on
# :9100); this test runs instances of its own on other ports and folders, whatever runs beside it.
# A machine without the packages fails this test (scripts/deps.sh test installs them): it is not skipped.
# usage: tests/cli/prometheus.sh HBMALLOC PUBLISHER SOURCE_DIR
set -eu
bin=$1 pub=$2 src=$3
py=/usr/bin/python3
for p in prometheus promtool prometheus-node-exporter; do
    command -v $p >/dev/null || { echo "FAIL: no $p (Debian 12: apt install prometheus prometheus-node-exporter;" \
        "scripts/deps.sh test)"; exit 1; }
done
start=$(date +%s)
limit=${HBM_PROM_DEADLINE:-50}
deadline=$((start + limit))
life="timeout -k 5 $((limit + 30))" # the processes' own end, should this script be killed without its trap
tmp=$(mktemp -d)
export HBMALLOC_TOP_DIR="$tmp/records"
mkdir -m 700 "$HBMALLOC_TOP_DIR" "$tmp/textfile" "$tmp/prom" "$tmp/prom/targets" "$tmp/data"
pids=""
cleanup() {
    exec 3>&- 4>&- 5>&- 2>/dev/null || true # the publishers' standard inputs: they end cleanly
    for p in $pids; do kill "$p" 2>/dev/null || true; done
    i=0
    for p in $pids; do
        while kill -0 "$p" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
        kill -9 "$p" 2>/dev/null || true
    done
    rm -rf "$tmp"
    return 0
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
fail() {
    echo "FAIL: $*"
    for f in "$tmp"/*.log; do [ -s "$f" ] && { echo "--- $f (last lines)"; tail -n 15 "$f"; }; done
    exit 1
}
left() { echo $((deadline - $(date +%s))); }
free_port() { $py -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# GET URL, its body on stdout; non-zero when it cannot be had (connection refused, an HTTP error).
get() { $py -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1" 2>/dev/null; }

# 1. The job: three ranks, each held open by a FIFO on its standard input.
for r in 0 1 2; do
    mkfifo "$tmp/in$r"
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=3 $life "$pub" "$tmp/r$r.json" $((1 << r)) <"$tmp/in$r" 2>"$tmp/publisher$r.log" &
    pids="$pids $!"
done
exec 3>"$tmp/in0" 4>"$tmp/in1" 5>"$tmp/in2"
for r in 0 1 2; do
    until [ -s "$tmp/r$r.json" ]; do
        [ "$(left)" -gt 0 ] || fail "publisher of rank $r wrote no statistics"
        sleep 0.1
    done
done

# 2. top rewriting the textfile collector's file twice a second (no terminal: it prints nothing).
$life "$bin" top --interval 0.5 --textfile "$tmp/textfile" >"$tmp/top.log" 2>&1 &
pids="$pids $!"

# 3. node_exporter, the textfile collector alone. It is ours when its page has our ranks (no other exporter reads
# this folder).
tries=0
while :; do
    tries=$((tries + 1))
    [ $tries -le 5 ] || fail "node_exporter did not start on 5 ports"
    ne_port=$(free_port)
    $life prometheus-node-exporter --web.listen-address="127.0.0.1:$ne_port" --collector.disable-defaults \
        --collector.textfile --collector.textfile.directory="$tmp/textfile" >"$tmp/node_exporter.log" 2>&1 &
    ne_pid=$!
    pids="$pids $ne_pid"
    until get "http://127.0.0.1:$ne_port/metrics" | grep -q 'hbmalloc_reserved_bytes{device="0",rank="2",slot="0"}'; do
        kill -0 $ne_pid 2>/dev/null || break # exited: the port was taken, another one
        [ "$(left)" -gt 0 ] || fail "node_exporter on port $ne_port never served the three ranks"
        sleep 0.2
    done
    kill -0 $ne_pid 2>/dev/null && break
done

# 4. Prometheus with the shipped configuration and rules, a targets file made from the one docs/MONITOR.md shows.
sed -e 's/^\(  *scrape_interval:\).*/\1 1s/' -e 's/^\(  *evaluation_interval:\).*/\1 1s/' \
    "$src/monitor/prometheus/prometheus.yml" >"$tmp/prom/prometheus.yml"
grep -q 'scrape_interval: 1s' "$tmp/prom/prometheus.yml" && grep -q 'evaluation_interval: 1s' "$tmp/prom/prometheus.yml" ||
    fail "monitor/prometheus/prometheus.yml has no scrape_interval and evaluation_interval lines to set"
cp "$src/monitor/prometheus/hbmalloc-rules.yml" "$tmp/prom/"
# docs/MONITOR.md shows prometheus.yml whole (it must be this file) and a targets file, made here for this node.
$py - "$src/docs/MONITOR.md" "$src/monitor/prometheus/prometheus.yml" "127.0.0.1:$ne_port" \
    >"$tmp/prom/targets/e2e.yml" <<'PY' || fail "docs/MONITOR.md's Prometheus files"
import re, sys
blocks = re.findall(r"^```yaml\n(.*?)^```$", open(sys.argv[1]).read(), re.M | re.S)
assert open(sys.argv[2]).read() in blocks, "docs/MONITOR.md does not show monitor/prometheus/prometheus.yml as it is"
targets = [b for b in blocks if b.startswith("# targets/")]
assert len(targets) == 1, targets
t = targets[0].replace("['node1:9100', 'node2:9100']", "['%s']" % sys.argv[3]).replace("job: train-a", "job: e2e-train")
assert sys.argv[3] in t and "e2e-train" in t, t
sys.stdout.write(t)
PY
promtool check config "$tmp/prom/prometheus.yml" >"$tmp/promtool.log" 2>&1 || fail "promtool check config: $(cat "$tmp/promtool.log")"
tries=0
while :; do
    tries=$((tries + 1))
    [ $tries -le 5 ] || fail "Prometheus did not start on 5 ports"
    pr_port=$(free_port)
    $life prometheus --config.file="$tmp/prom/prometheus.yml" --storage.tsdb.path="$tmp/data" \
        --web.listen-address="127.0.0.1:$pr_port" >"$tmp/prometheus.log" 2>&1 &
    pr_pid=$!
    pids="$pids $pr_pid"
    # ours: its flags name our folder
    until get "http://127.0.0.1:$pr_port/api/v1/status/flags" | grep -qF "\"$tmp/data\""; do
        kill -0 $pr_pid 2>/dev/null || break
        [ "$(left)" -gt 0 ] || fail "Prometheus on port $pr_port never answered"
        sleep 0.2
    done
    kill -0 $pr_pid 2>/dev/null && break
done

# 5. The API, until everything is there or the deadline passes; then what it said, checked.
$py - "http://127.0.0.1:$pr_port" "$(left)" "127.0.0.1:$ne_port" "$tmp/r0.json" "$tmp/r1.json" "$tmp/r2.json" <<'PY' ||
import json, sys, time, urllib.parse, urllib.request
base, budget, instance = sys.argv[1], float(sys.argv[2]), sys.argv[3]
own = [json.load(open(p)) for p in sys.argv[4:]]
end = time.monotonic() + budget

def api(path, **q):
    url = base + path + ("?" + urllib.parse.urlencode(q) if q else "")
    body = json.load(urllib.request.urlopen(url, timeout=5))
    assert body["status"] == "success", body
    return body["data"]

def until(what, fetch, ready):
    """fetch() until ready(its answer), or fail when the deadline passes; the answer."""
    while True:
        got = fetch()
        if ready(got):
            return got
        if time.monotonic() > end:
            sys.exit("FAIL: %s: not there before the deadline; last answer: %s" % (what, json.dumps(got)[:2000]))
        time.sleep(0.25)

# Each rank's reserved bytes, as its process gave them (the publishers hold still: equal, not near).
res = until("each rank's hbmalloc_reserved_bytes", lambda: api("/api/v1/query", query="hbmalloc_reserved_bytes")["result"],
            lambda r: sorted(s["metric"]["rank"] for s in r) == ["0", "1", "2"])
for s in res:
    m, rank = s["metric"], int(s["metric"]["rank"])
    assert m["job"] == "e2e-train" and m["instance"] == instance, m  # the targets file's job label, the exporter
    assert m["device"] == "0" and m["slot"] == "0", m
    assert float(s["value"][1]) == own[rank]["reserved_bytes"] > 0, (s, own[rank])
print("reserved per rank:", {s["metric"]["rank"]: int(float(s["value"][1])) for s in res})
for metric, key in (("hbmalloc_allocated_bytes", "allocated_bytes"), ("hbmalloc_ooms_total", "num_ooms"),
                    ("hbmalloc_largest_free_block_bytes", "largest_free_bytes")):
    got = {int(s["metric"]["rank"]): float(s["value"][1]) for s in api("/api/v1/query", query=metric)["result"]}
    assert got == {r: o[key] for r, o in enumerate(own)}, (metric, got)

# Every rule of the shipped file loaded and evaluated without error.
def rules_ok(groups):
    rules = [r for g in groups for r in g["rules"]]
    return len(rules) == 8 and all(r["health"] == "ok" for r in rules)
groups = until("the rules, evaluated", lambda: api("/api/v1/rules")["groups"], rules_ok)
assert [g["name"] for g in groups] == ["hbmalloc"], groups
for r in groups[0]["rules"]:
    assert r["health"] == "ok" and not r.get("lastError"), r
print("rules:", ", ".join(r["name"] for r in groups[0]["rules"]))

# The job's median (rank 1's, sizes x1, x2, x4), recorded from the scraped series.
med = until("job:hbmalloc_reserved_bytes:median", lambda: api("/api/v1/query", query="job:hbmalloc_reserved_bytes:median")["result"],
            lambda r: len(r) == 1)
assert med[0]["metric"] == {"__name__": "job:hbmalloc_reserved_bytes:median", "job": "e2e-train"}, med
assert float(med[0]["value"][1]) == own[1]["reserved_bytes"], (med, own[1])

# Rank 2 holds over 1.5 times the median and over 1 GiB: its alert is pending; nothing else is.
assert own[2]["reserved_bytes"] > 1.5 * own[1]["reserved_bytes"] and own[2]["reserved_bytes"] > 2**30, own
assert own[0]["reserved_bytes"] < 1.5 * own[1]["reserved_bytes"], own
alerts = until("rank 2's HbmallocRankFarAboveOthers", lambda: api("/api/v1/alerts")["alerts"],
               lambda a: any(x["labels"]["alertname"] == "HbmallocRankFarAboveOthers" for x in a))
got = sorted((a["labels"]["alertname"], a["labels"].get("rank"), a["state"]) for a in alerts)
assert got == [("HbmallocRankFarAboveOthers", "2", "pending")], got
print("alerts:", got)
PY
    fail "Prometheus's API"
# 6. The Grafana dashboard's queries, run in this Prometheus with its variables set to this job (tests/monitor/dashboard.py).
$py "$src/tests/monitor/dashboard.py" "$bin" "$src/monitor/grafana/hbmalloc.json" --prometheus "http://127.0.0.1:$pr_port" \
    --wait "$(left)" --set job=e2e-train --set 'instance=.*' --set 'rank=.*' >"$tmp/dashboard.log" 2>&1 ||
    fail "the dashboard's queries: $(cat "$tmp/dashboard.log")"
grep -v '^ok: refused' "$tmp/dashboard.log"
echo "prometheus: 3 ranks scraped through node_exporter's textfile collector, 8 rules ok, rank 2's alert pending" \
    "($(($(date +%s) - start)) s)"
