#!/usr/bin/env bash
# Replay outputs unchanged: `hbmalloc replay TRACE` and `--conf expandable_segments:True` on examples/*.trace and
# every trace under ../shared/traces, compared byte for byte (the wall-clock "replay time" line left out) between
# two builds of the tool. Usage: scripts/replay-same.sh BASE_HBMALLOC NEW_HBMALLOC [TRACES_DIR]
set -uo pipefail
base=$1 new=$2 shared=${3:-$(dirname "$0")/../../shared/traces}
cd "$(dirname "$0")/.."
n=0 bad=0
for t in examples/*.trace $(find "$shared" -type f ! -name README.md ! -name SHA256SUMS | sort); do
    for conf in "" "expandable_segments:True"; do
        args=(replay "$t")
        [ -n "$conf" ] && args+=(--conf "$conf")
        a=$("$base" "${args[@]}" 2>&1 | grep -v '^replay time:')
        b=$("$new" "${args[@]}" 2>&1 | grep -v '^replay time:')
        n=$((n + 1))
        if [ "$a" != "$b" ]; then
            bad=$((bad + 1))
            echo "DIFFERS: ${args[*]}"
            diff <(echo "$a") <(echo "$b") | head -10
        fi
    done
done
echo "replay-same: $((n - bad)) of $n identical"
[ "$bad" -eq 0 ]
