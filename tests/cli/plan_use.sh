#!/bin/sh
# `hbmalloc plan -o FILE` says how to serve the plan (issue #36 item 11), and the lines it prints work as printed:
# the HBMALLOC_CONF setting, pasted before a command in another folder, makes a replay of the trace serve every
# allocation at its planned offset (plan_hits), as does the replay line it prints. A path the shell would read
# otherwise is quoted; a path too long for the setting is given relative to its folder; a path the setting cannot
# hold at all (a ':') is explained, with no setting printed.
# usage: tests/cli/plan_use.sh HBMALLOC SRC
set -u
bin=$1 src=$2
fails=0
ok() { echo "ok   $1"; }
bad() { echo "FAIL $1"; [ -n "${2:-}" ] && printf '%s\n' "$2"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The printed lines name the tool `hbmalloc`: the one under test, first on PATH.
mkdir "$tmp/bin"
ln -s "$bin" "$tmp/bin/hbmalloc"
PATH="$tmp/bin:$PATH"
export PATH
unset HBMALLOC_CONF PYTORCH_CUDA_ALLOC_CONF PYTORCH_NPU_ALLOC_CONF PYTORCH_ALLOC_CONF
trace=$src/examples/cs336-lm-ctx512-forward.trace
n=2382 # its allocations

# The line after the one that starts with $2, less its indent, in output $1.
line_after() { printf '%s\n' "$1" | sed -n "/^$2/{n;s/^  //p;q;}"; }
hits() { printf '%s\n' "$1" | sed -n 's/^plan_hits //p'; }

# NAME DIR TRACE PLAN [RUN_FROM]: in DIR, `hbmalloc plan TRACE -o PLAN`; the setting printed, run as printed from
# RUN_FROM (default /) before `hbmalloc replay`, and the replay line printed, run in DIR, each serve the plan.
use() {
    name=$1 dir=$2 tr=$3 plan=$4 from=${5:-/}
    out=$(cd "$dir" && hbmalloc plan "$tr" -o "$plan" --budget 1 2>&1) || { bad "$name: plan failed" "$out"; return; }
    setting=$(line_after "$out" "to serve it")
    replay=$(line_after "$out" "to see it served")
    case $setting in
    HBMALLOC_CONF=*) ;;
    *) bad "$name: no setting printed" "$out"; return ;;
    esac
    r=$(cd "$from" && eval "env $setting hbmalloc replay \"\$trace\" --stats" 2>&1)
    [ "$(hits "$r")" = "$n" ] && ok "$name: $setting" ||
        bad "$name: the printed setting, run in $from, served $(hits "$r") of $n" "$out
$r"
    r=$(cd "$dir" && eval "$replay" 2>&1)
    [ "$(hits "$r")" = "$n" ] && ok "$name: the printed replay line" ||
        bad "$name: the printed replay line served $(hits "$r") of $n" "$replay
$r"
}

# Without the setting nothing is planned: what the cases below see is the setting's doing.
r=$(hbmalloc replay "$trace" --stats 2>&1)
[ "$(hits "$r")" = 0 ] && ok "no setting: plan_hits 0" || bad "no setting: plan_hits $(hits "$r")" "$r"

# A plain path, given relative: printed absolute, so that a job started in another folder finds it.
mkdir "$tmp/plain"
use plain "$tmp/plain" "$trace" p.plan
case $setting in
"HBMALLOC_CONF=hbm_plan_file:$tmp/plain/p.plan") ok "plain: the absolute path, unquoted" ;;
*) bad "plain: setting '$setting'" ;;
esac

# Bytes the shell reads (a quote, '$', '&', parentheses) in the plan's folder and a space in the trace's name:
# quoted, and the shell gives the tool the very path.
odd="$tmp/it's\$HOME&(x)"
mkdir "$odd"
cp "$trace" "$odd/my trace.trace"
use quoted "$odd" "my trace.trace" p.plan
case $setting in
HBMALLOC_CONF=\'*) ok "quoted: the setting is quoted" ;;
*) bad "quoted: setting '$setting' not quoted" ;;
esac

# A folder whose full path passes the setting's 127 characters: the path relative to it, run from there.
deep="$tmp/$(printf '%0130d' 0)"
mkdir "$deep"
use relative "$deep" "$trace" p.plan "$deep"
case $out in
*"start the job in this folder"*) ok "relative: says to start the job in the folder" ;;
*) bad "relative: no word on the folder" "$out" ;;
esac

# A ':' in the path: the setting cannot hold it; said, with what to do, and no setting that would fail.
mkdir "$tmp/a:b"
out=$(hbmalloc plan "$trace" -o "$tmp/a:b/p.plan" --budget 1 2>&1)
rc=$?
case $out in
*"HBMALLOC_CONF=hbm_plan_file:$tmp"*) bad "colon: a setting printed" "$out" ;;
*"cannot name this file (it holds ':')"*) [ $rc -eq 0 ] && ok "colon: explained" || bad "colon: exit $rc" "$out" ;;
*) bad "colon: not explained" "$out" ;;
esac

[ "$fails" -eq 0 ] && echo "plan_use: ok" || { echo "plan_use: $fails failed"; exit 1; }
