#!/usr/bin/python3
"""The Grafana dashboard (monitor/grafana/hbmalloc.json) against what hbmalloc writes (ctest grafana_dashboard).

- Every metric name in every PromQL expression of the dashboard (panels' targets and the variables' label_values
  queries) is one that `hbmalloc top --textfile` writes: the names are read from the built tool's own file (its
  `# TYPE` lines, written for every metric even when no process publishes), not from a list kept here.
- Every function it calls is PromQL's (Prometheus v2.42.0, promql/parser/functions.go and the aggregation
  operators of promql/parser/lex.go), so a misspelt function is caught too.
- The JSON is a dashboard Grafana loads (the classic JSON model: docs "Dashboard JSON model", and
  public/app/features/dashboard/state/DashboardMigrator.ts of grafana/grafana): title, uid, an integer
  schemaVersion, panels with unique ids, a gridPos inside the 24-column grid without overlaps, a Prometheus
  datasource and targets (unique refIds, an expr each); the variables job, instance and rank, each used by every
  panel's queries (job=~"$job" in every selector of an hbmalloc metric, all three in at least one).
- Then broken copies of the dashboard (an unknown metric, a misspelt function, a panel without targets, no
  schemaVersion, the rank variable gone, a selector without the job filter, two panels on one spot): each must be
  refused, so that the check above is seen to fail when it should.

With --prometheus URL (tests/cli/prometheus.sh, against a live Prometheus with the variables set as --set NAME=VALUE),
every panel's query is also run through the HTTP API: each must be valid PromQL there, and each that does not keep
only known values (`>= 0`) must return series, within --wait SECONDS (default 10: a rate needs two scrapes).

usage: dashboard.py HBMALLOC DASHBOARD [--prometheus URL [--wait SECONDS] --set NAME=VALUE...]
"""
import copy
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

# PromQL's functions and aggregation operators (Prometheus v2.42.0: promql/parser/functions.go, Functions; the
# aggregators of promql/parser/lex.go, key).
FUNCTIONS = set("""abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time ceil changes clamp clamp_max
clamp_min cos cosh count_over_time days_in_month day_of_month day_of_week day_of_year deg delta deriv exp floor
histogram_count histogram_sum histogram_fraction histogram_quantile holt_winters hour idelta increase irate label_replace
label_join last_over_time ln log10 log2 max_over_time min_over_time minute month pi predict_linear present_over_time
quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_desc sqrt stddev_over_time stdvar_over_time
sum_over_time tan tanh time timestamp vector year
sum avg count min max group stddev stdvar topk bottomk count_values quantile""".split())
KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring", "group_left", "group_right",
            "inf", "nan", "atan2", "start", "end"}
GRAFANA_VARS = {"__rate_interval", "__interval", "__range", "__interval_ms", "__range_s", "__range_ms"}
VARIABLES = ("job", "instance", "rank")


def tool_metrics(hbmalloc):
    """The metric names `hbmalloc top --textfile` writes: its file's # TYPE lines (every metric, records or not)."""
    with tempfile.TemporaryDirectory() as tmp:
        rec, out = os.path.join(tmp, "records"), os.path.join(tmp, "textfile")
        os.mkdir(rec, 0o700)
        os.mkdir(out)
        subprocess.run([hbmalloc, "top", "--once", "--dir", rec, "--textfile", out], check=True,
                       stdout=subprocess.DEVNULL, env=dict(os.environ, HBMALLOC_TOP_DIR=rec))
        text = open(os.path.join(out, "hbmalloc.prom")).read()
    names = set(re.findall(r"^# TYPE (\S+) (?:gauge|counter)$", text, re.M))
    if not names:
        sys.exit("FAIL: %s wrote no metric (no # TYPE line): %r" % (hbmalloc, text[:500]))
    return names


def promql_names(expr):
    """(metric names, function names, errors) of a PromQL expression; Grafana's $variables allowed where values go."""
    errors = []
    if expr.count("(") != expr.count(")") or expr.count("{") != expr.count("}") or expr.count("[") != expr.count("]"):
        errors.append("unbalanced brackets in %r" % expr)
    s = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', ' "" ', expr)  # strings
    s = re.sub(r"\{[^{}]*\}", " ", s)  # label matchers
    s = re.sub(r"\[[^\[\]]*\]", " ", s)  # ranges and subqueries
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", " ", s)  # and their label lists
    s = re.sub(r"(?<![\w:.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?", " ", s)  # numbers
    metrics, functions = set(), set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", s):
        word, rest = m.group(0), s[m.end():].lstrip()
        if rest.startswith("("):
            functions.add(word)
        elif word.lower() not in KEYWORDS:
            metrics.add(word)
    return metrics, functions, errors


def selectors(expr):
    """Each hbmalloc metric's selector: (name, the text inside its braces, or None without braces)."""
    out = []
    for m in re.finditer(r"\b(hbmalloc_[A-Za-z0-9_:]*)\s*(\{[^{}]*\})?", expr):
        out.append((m.group(1), m.group(2)[1:-1] if m.group(2) else None))
    return out


def check(dash, names):
    """The dashboard's faults, as sentences; none for a good one."""
    errs = []
    need = lambda ok, msg: ok or errs.append(msg)
    for key, kind in (("title", str), ("uid", str), ("schemaVersion", int), ("panels", list), ("templating", dict)):
        need(isinstance(dash.get(key), kind), "%s is missing or not a %s" % (key, kind.__name__))
    if errs:
        return errs
    variables = {v.get("name"): v for v in dash["templating"].get("list", [])}
    need(any(v.get("type") == "datasource" and v.get("query") == "prometheus" for v in variables.values()),
         "no Prometheus datasource variable")
    for name in VARIABLES:
        v = variables.get(name)
        if not need(v is not None and v.get("type") == "query", "no query variable %s" % name):
            continue
        q = v["query"]["query"] if isinstance(v.get("query"), dict) else v.get("query", "")
        m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\)\s*", q)
        if need(m and m.group(2) == name, "variable %s's query is not label_values(..., %s): %r" % (name, name, q)):
            metrics, functions, e = promql_names(m.group(1))
            errs += e
            errs += ["variable %s: %s is not a metric hbmalloc writes" % (name, x) for x in sorted(metrics - names)]
    defined = set(variables) | GRAFANA_VARS
    ids, cells = set(), {}
    for p in dash["panels"]:
        title = p.get("title")
        where = "panel %r" % title
        need(isinstance(title, str) and title, "a panel without a title")
        need(isinstance(p.get("id"), int) and p["id"] not in ids, "%s: its id is missing or not unique" % where)
        ids.add(p.get("id"))
        need(isinstance(p.get("type"), str) and p["type"], "%s: no type" % where)
        g = p.get("gridPos", {})
        if need(all(isinstance(g.get(k), int) for k in "hwxy") and g["w"] > 0 and g["h"] > 0 and g["x"] >= 0
                and g["y"] >= 0 and g["x"] + g["w"] <= 24, "%s: gridPos %r is not inside the 24-column grid" % (where, g)):
            for x in range(g["x"], g["x"] + g["w"]):
                for y in range(g["y"], g["y"] + g["h"]):
                    need((x, y) not in cells, "%s overlaps panel %r" % (where, cells.get((x, y))))
                    cells[(x, y)] = title
        need((p.get("datasource") or {}).get("type") == "prometheus", "%s: its datasource is not Prometheus" % where)
        targets = p.get("targets")
        if not need(isinstance(targets, list) and targets, "%s: no targets" % where):
            continue
        refs = [t.get("refId") for t in targets]
        need(len(set(refs)) == len(refs) and all(refs), "%s: refIds missing or repeated: %r" % (where, refs))
        for t in targets:
            expr = t.get("expr")
            if not need(isinstance(expr, str) and expr.strip(), "%s: a target without expr" % where):
                continue
            metrics, functions, e = promql_names(expr)
            errs += ["%s: %s" % (where, x) for x in e]
            errs += ["%s: %s is not a metric hbmalloc writes (%s)" % (where, x, expr) for x in sorted(metrics - names)]
            errs += ["%s: %s is not a PromQL function (%s)" % (where, x, expr) for x in sorted(functions - FUNCTIONS)]
            need(metrics, "%s: a query of no metric: %s" % (where, expr))
            used = set(re.findall(r"\$\{?(\w+)", expr))
            errs += ["%s: $%s is no variable of the dashboard" % (where, x) for x in sorted(used - defined)]
            sel = selectors(expr)
            for metric, inside in sel:
                need(inside is not None and 'job=~"$job"' in inside, "%s: %s without job=~\"$job\": %s" % (where, metric, expr))
            need(any(inside and all('%s=~"$%s"' % (v, v) in inside for v in VARIABLES) for _, inside in sel),
                 "%s: no selector filters on $job, $instance and $rank: %s" % (where, expr))
    return errs


def broken_copies(dash):
    """(what, a copy of the dashboard broken that way): each must be refused."""
    def first_expr(d):
        return d["panels"][0]["targets"][0]

    def edit(what, f):
        d = copy.deepcopy(dash)
        f(d)
        return what, d

    return [
        edit("an unknown metric", lambda d: first_expr(d).update(expr=first_expr(d)["expr"].replace(
            "hbmalloc_reserved_bytes", "hbmalloc_reserved_byte", 1))),
        edit("a metric of another exporter", lambda d: first_expr(d).update(expr='node_memory_MemFree_bytes{job=~"$job"}')),
        edit("a misspelt function", lambda d: d["panels"][-1]["targets"][0].update(
            expr=d["panels"][-1]["targets"][0]["expr"].replace("time()", "tme()"))),
        edit("a panel without targets", lambda d: d["panels"][1].update(targets=[])),
        edit("no schemaVersion", lambda d: d.pop("schemaVersion")),
        edit("the rank variable gone", lambda d: d["templating"].update(
            list=[v for v in d["templating"]["list"] if v["name"] != "rank"])),
        edit("a selector without the job filter", lambda d: first_expr(d).update(
            expr=first_expr(d)["expr"].replace('job=~"$job",', "", 1))),
        edit("two panels on one spot", lambda d: d["panels"][1].update(gridPos=dict(d["panels"][0]["gridPos"]))),
    ]


def live(dash, url, values, seconds):
    """Every panel's query through a live Prometheus, the variables set: valid, and with series (asked again until
    they all have some or `seconds` pass: a rate needs two scrapes)."""
    end = time.monotonic() + seconds
    while True:
        errs, empty = live_once(dash, url, values)
        if not errs or time.monotonic() > end or any("no series" not in e for e in errs):
            return errs, empty
        time.sleep(0.5)


def live_once(dash, url, values):
    errs, empty = [], []
    for p in dash["panels"]:
        for t in p["targets"]:
            expr = t["expr"].replace("$__rate_interval", "1m")
            for k, v in values.items():
                expr = expr.replace("$" + k, v)
            try:
                body = json.load(urllib.request.urlopen(
                    url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10))
            except Exception as e:  # an HTTP 400 for bad PromQL
                errs.append("panel %r: %s: %s" % (p["title"], expr, e))
                continue
            if body.get("status") != "success":
                errs.append("panel %r: %s: %s" % (p["title"], expr, body))
            elif not body["data"]["result"]:
                (empty if ">= 0" in expr else errs).append("panel %r: no series for %s" % (p["title"], expr))
    return errs, empty


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    names = tool_metrics(args[0])
    dash = json.load(open(args[1]))
    errs = check(dash, names)
    if errs:
        sys.exit("FAIL: %s:\n  %s" % (args[1], "\n  ".join(errs)))
    exprs = sum(len(p["targets"]) for p in dash["panels"])
    print("dashboard: %d panels, %d queries, metrics all among the %d hbmalloc writes" % (len(dash["panels"]), exprs, len(names)))
    for what, d in broken_copies(dash):
        e = check(d, names)
        if not e:
            sys.exit("FAIL: the check passes a dashboard with %s" % what)
        print("ok: refused with %s: %s" % (what, e[0]))
    if "--prometheus" in args:
        url = args[args.index("--prometheus") + 1]
        values = dict(a.split("=", 1) for i, a in enumerate(args) if i and args[i - 1] == "--set")
        seconds = float(args[args.index("--wait") + 1]) if "--wait" in args else 10.0
        errs, empty = live(dash, url, values, seconds)
        if errs:
            sys.exit("FAIL: the dashboard's queries in Prometheus:\n  " + "\n  ".join(errs))
        print("dashboard: %d queries ran in Prometheus, %d with series (%d keep known values only, none yet)"
              % (exprs, exprs - len(empty), len(empty)))


if __name__ == "__main__":
    main()
