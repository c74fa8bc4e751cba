#!/bin/sh
# The shipped Prometheus rules (monitor/prometheus/hbmalloc-rules.yml): `promtool check rules` (syntax, PromQL) and
# `promtool test rules` with tests/monitor/hbmalloc-rules.test.yml (each alert on series that must fire it and on
# series that must not). Then the same tests on copies of the rules broken on purpose, each of which must fail: a
# test file that passes whatever the rules say would show nothing.
# promtool is Debian 12's `prometheus` package (scripts/deps.sh test); a machine without it fails this test.
# usage: tests/monitor/rules.sh SOURCE_DIR
set -eu
src=$1
command -v promtool >/dev/null || { echo "FAIL: no promtool (Debian: apt install prometheus; scripts/deps.sh test)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

promtool check rules "$src/monitor/prometheus/hbmalloc-rules.yml" || fail "promtool check rules"
promtool test rules "$src/tests/monitor/hbmalloc-rules.test.yml" || fail "promtool test rules"

# The broken copies: the test file reads ../../monitor/prometheus/hbmalloc-rules.yml from its own folder.
mkdir -p "$tmp/tests/monitor" "$tmp/monitor/prometheus"
cp "$src/tests/monitor/hbmalloc-rules.test.yml" "$tmp/tests/monitor/"
broken() { # WHAT SED-EXPRESSION: the rules with the expression applied must fail the tests
    sed "$2" "$src/monitor/prometheus/hbmalloc-rules.yml" >"$tmp/monitor/prometheus/hbmalloc-rules.yml"
    cmp -s "$src/monitor/prometheus/hbmalloc-rules.yml" "$tmp/monitor/prometheus/hbmalloc-rules.yml" &&
        fail "broken rules ($1): the expression changed nothing"
    if promtool test rules "$tmp/tests/monitor/hbmalloc-rules.test.yml" >"$tmp/out" 2>&1; then
        fail "the tests pass with broken rules: $1"
    fi
    echo "ok: the tests fail with $1"
}
broken "a misspelt metric" 's/hbmalloc_ooms_total/hbmalloc_oom_total/'
broken "no floor under fragmentation" 's/ and hbmalloc_reserved_bytes > 2^30$//'
broken "fragmentation alerting at once" '/alert: HbmallocFragmentationHigh/,/for:/{/for:/d}'
broken "a counter reset taken for an OOM" 's/increase(hbmalloc_ooms_total\[5m\])/delta(hbmalloc_ooms_total[5m])/'
broken "the median of all jobs" 's/quantile by (job) (0.5,/quantile(0.5,/; s/on(job) group_left() (1.5/on() group_left() (1.5/'
broken "no floor under the outlier" 's/^          and hbmalloc_reserved_bytes > 2^30$//'
broken "-1 (unknown) taken for a value" 's/deriv((hbmalloc_outside_bytes >= 0)\[30m:1m\])/deriv(hbmalloc_outside_bytes[30m])/'
broken "a stale record alerting at once" '/alert: HbmallocRecordStale/,/for:/{/for:/d}'
echo "prometheus rules: checked, tested, and 8 broken copies fail"
