#!/usr/bin/env bash
# Re-measures the figures docs/PERFORMANCE.md states and prints, for each, the figure the document states, the
# figure measured now, the drift and OK / STALE (issue #30 item 8): the document cannot go stale silently.
#
# usage: bench/claims.sh BUILD_DIR [--quick] [--traces DIR] [--old-build DIR]
#   BUILD_DIR    a Release build with -DHBM_BENCH=ON (its hbmalloc, bench/bench_*, libhbmalloc_torch.so)
#   --quick      the fast claims only (under a minute): one run of bench_malloc instead of three, three runs of
#                the plug-in benchmark instead of nine; no offline plans, footprint without virtual memory, steady
#                state or comparison against d48e752 (those SKIPPED). The whole run: about 6 minutes on 2 quiet cores
#   --traces DIR the shared traces (default: ../shared/traces beside the repository); claims that need them are
#                SKIPPED without them
#   --old-build  a build of d48e752 (before labels) with -DHBM_BENCH=ON, for bench/instr_against.sh; without it
#                the script builds one once in BUILD_DIR/claims/d48e752 (git archive, about two minutes on 2 cores)
# Exit status: 0 every claim holds within its tolerance (SKIPPED ones aside), 1 one is stale, its mark is missing
# from the document or a mark in the document is measured by no claim (UNKNOWN), 2 usage error.
#
# Where a figure is in the document: a mark `<!-- claim:NAME -->` just before the number (invisible once
# rendered), or `<!-- claim-table:NAME -->` before a table that a bench script prints whole (deterministic tables:
# every row of the document's table must be a row of the script's table whose header has the same first cell and
# width, the marks aside; a column of times can be left out of the comparison). Each figure is measured by the
# existing scripts of bench/ (nothing of their work is repeated here); their whole outputs are kept in
# BUILD_DIR/claims/ to update the document from. Not in ctest or scripts/test.sh: timings on a 2-core CI are noisy.
#
# Tolerances: wall-time figures are medians and, where the document states a ratio, ratios against a baseline in
# the same process (glibc, the plain allocator, "plain" of the same run); this machine's noise is ±30% on absolute
# times, so those get 25-60% (two threads on two shared cores and a 0.1 s sweep timed to 0.01 s the most).
# Instruction counts (callgrind), byte counts and footprint ratios are deterministic:
# 1% for instruction counts (code layout moves them a little between builds), exact for the rest.
# shellcheck disable=SC2016 # awk programs in single quotes
set -uo pipefail

usage() {
    sed -n '5,15p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
build='' quick=0 traces='' old_build=''
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1 ;;
    --traces) [ $# -ge 2 ] || usage; traces=$2; shift ;;
    --old-build) [ $# -ge 2 ] || usage; old_build=$2; shift ;;
    -h | --help) usage ;;
    -*) echo "claims.sh: unknown option $1" >&2; usage ;;
    *) [ -z "$build" ] || usage; build=$1 ;;
    esac
    shift
done
[ -n "$build" ] || usage
if [ ! -x "$build/hbmalloc" ] || [ ! -x "$build/bench/bench_malloc" ]; then
    echo "claims.sh: $build has no hbmalloc or bench_malloc in its bench folder (configure with -DHBM_BENCH=ON and build)" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "$build" && pwd)
doc=$here/docs/PERFORMANCE.md
traces=${traces:-$here/../shared/traces}
have_shared=0
[ -d "$traces/pytorch-snapshot" ] && [ -d "$traces/lifetimes" ] && have_shared=1 && traces=$(cd "$traces" && pwd)
bin=$build/hbmalloc
keep=$build/claims
mkdir -p "$keep"
rm -f "$keep"/*.out "$keep"/*.diff # a previous run's (the build of d48e752 is kept)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
no_shared="no shared traces (--traces DIR; tried $traces)"

# The figures the document states, NAME VALUE per line (commas and the typographic minus undone).
python3 - "$doc" >"$tmp/stated" <<'EOF'
import re, sys
text = open(sys.argv[1], encoding="utf-8").read()
for m in re.finditer(r"<!-- claim:([A-Za-z0-9_]+) -->[\s*]*([−+-]?[0-9][0-9,]*(?:\.[0-9]+)?)", text):
    print(m.group(1), m.group(2).replace(",", "").replace("−", "-"))
EOF
stated() { awk -v n="$1" '$1 == n { print $2; exit }' "$tmp/stated"; }

stale=0 nrows=0
printf '%-24s %12s %12s %10s  %-8s %s\n' claim document measured drift status "tolerance; how measured" >"$tmp/rows"
row() { printf '%-24s %12s %12s %10s  %-8s %s\n' "$@" >>"$tmp/rows"; nrows=$((nrows + 1)); echo "$1" >>"$tmp/seen"; }
# claim NAME MEASURED TOLERANCE KIND NOTE: KIND rel (tolerance in % of the stated figure) or abs (in the figure's
# own unit: percentage points for a stated change)
claim() {
    local name=$1 m=$2 tol=$3 kind=$4 note=$5 d res
    d=$(stated "$name")
    if [ -z "$d" ]; then
        row "$name" "(no mark)" "$m" - MISSING "no <!-- claim:$name --> in docs/PERFORMANCE.md"
        stale=1
        return
    fi
    if [ -z "$m" ]; then
        row "$name" "$d" "-" - STALE "$note: nothing measured (see $keep)"
        stale=1
        return
    fi
    res=$(awk -v d="$d" -v m="$m" -v t="$tol" -v k="$kind" 'BEGIN {
        if (k == "rel") { dr = d != 0 ? 100 * (m - d) / d : (m == 0 ? 0 : 1e9); ok = (dr <= t && dr >= -t)
                          printf "%+.1f%% %s", dr, ok ? "OK" : "STALE" }
        else { dr = m - d; ok = (dr <= t + 1e-9 && dr >= -t - 1e-9); printf "%+g %s", dr, ok ? "OK" : "STALE" } }')
    set -- "$name" "$d" "$m" "${res% *}" "${res#* }" "$(if [ "$kind" = rel ]; then echo "±$tol%"; else echo "±$tol"; fi); $note"
    row "$@"
    [ "${res#* }" = OK ] || stale=1
}
skip() { # NAME... REASON (the last argument)
    local reason=${*: -1} n
    for n in "${@:1:$#-1}"; do row "$n" "$(stated "$n")" - - SKIPPED "$reason"; done
}
# table NAME OUTPUT [IGNORED_COLUMN]: the document's table after <!-- claim-table:NAME --> against the table with
# the same header in OUTPUT; stated = its rows, measured = those found in OUTPUT (each once)
table() {
    local name=$1 out=$2 ign=${3:-0} r
    r=$(python3 - "$doc" "$name" "$out" "$ign" "$keep/$name.diff" <<'EOF'
import re, sys
doc, name, out, ign, diff = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
def tables(lines):
    t, cur = [], []
    for l in lines + [""]:
        if l.lstrip().startswith("|"):
            cur.append(l.strip())
        elif cur:
            t.append(cur)
            cur = []
    return t
def cells(l):
    c = [re.sub(r"<!--.*?-->", "", x).strip() for x in l.strip().strip("|").split("|")]
    if ign:
        c[ign - 1] = ""
    return tuple(c)
text = open(doc, encoding="utf-8").read().split("\n")
at = [i for i, l in enumerate(text) if "<!-- claim-table:%s -->" % name in l]
if not at:
    print("missing")
    sys.exit()
mine = tables(text[at[0] + 1:])[0]
key = lambda t: (cells(t[0])[0], len(cells(t[0])))  # a header's first cell and its width
theirs = [t for t in tables(open(out, encoding="utf-8").read().split("\n")) if key(t) == key(mine)]
rows = [cells(l) for l in mine[2:]]
pool = [cells(l) for t in theirs for l in t[2:]]
bad = []
for r in rows:
    if r in pool:
        pool.remove(r)
    else:
        bad.append(r)
with open(diff, "w") as f:
    if not theirs:
        f.write("no table with the document's header in %s\n" % out)
    for r in bad:
        f.write("document: | %s |\n" % " | ".join(r))
    for r in pool:
        f.write("measured: | %s |\n" % " | ".join(r))
print(len(rows), len(rows) - len(bad))
EOF
    )
    if [ "$r" = missing ]; then
        row "$name" "(no mark)" - - MISSING "no <!-- claim-table:$name --> in docs/PERFORMANCE.md"
        stale=1
        return
    fi
    read -r -a r <<<"$r"
    set -- "${r[@]}"
    if [ "$1" = "$2" ]; then
        row "$name" "$1 rows" "$2 rows" 0 OK "exact: every row of the document's table printed"
    else
        row "$name" "$1 rows" "$2 rows" "$(($1 - $2)) rows" STALE "exact; differing rows in $keep/$name.diff"
        stale=1
    fi
}
median() { printf '%s\n' "$@" | sed '/^$/d' | sort -g | awk '{ a[NR] = $1 } END { if (NR) print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
note() { echo "claims.sh: [${SECONDS}s] $*" >&2; }

# 1. The allocator against glibc (bench/bench_malloc.c), three runs of the benchmark, the median of their medians.
runs=3
[ $quick = 1 ] && runs=1
for r in $(seq 1 $runs); do
    note "bench_malloc, run $r of $runs"
    "$build/bench/bench_malloc" "$here"/examples/cs336-lm-ctx128-fullstep.trace "$here"/examples/cs336-lm-ctx512-forward.trace \
        "$here"/examples/finetune-varlen.trace "$here"/examples/cpu-transformer-trainstep.trace >"$keep/bench_malloc.$r.out"
done
bm() { # awk program -> the median over the runs
    local r v=()
    for r in $(seq 1 $runs); do v+=("$(awk "$1" "$keep/bench_malloc.$r.out")"); done
    median "${v[@]}"
}
how="bench_malloc, median of $runs run(s)"
claim pair_512 "$(bm '$1 == "512" { print $4 }')" 25 rel "$how"
claim pair_64k "$(bm '$1 == "65536" { print $4 }')" 25 rel "$how"
claim pair_1m "$(bm '$1 == "1048576" { print $4 }')" 25 rel "$how"
claim pair_16m "$(bm '$1 == "16777216" { print $4 }')" 25 rel "$how"
claim lock_floor "$(bm '$1 == "lock" && $2 == "floor" { print $5 }')" 25 rel "$how"
claim threads_2 "$(bm '/^  1 thread/ { print $NF }')" 50 rel "$how; 2 threads / 1"
claim mixed_cpu "$(bm '$1 == "cpu-transformer-trainstep.trace" { print $5 }')" 30 rel "$how"
claim mixed_finetune "$(bm '$1 == "finetune-varlen.trace" { print $5 }')" 40 rel "$how; glibc's mmap: noisy"
claim publish_512 "$(bm '$1 == "512" { print $6 }')" 8 rel "$how; published / plain"
claim publish_16m "$(bm '$1 == "16777216" { print $6 }')" 8 rel "$how; published / plain"

# Host memory per live block (bench/bench_blocks.c: 10^6 live blocks, the resident set's growth / count).
note "bench_blocks"
for sz in 512:512 2097152:2m; do
    "$build/bench/bench_blocks" "${sz%%:*}" >"$keep/blocks.${sz#*:}.out" 2>&1
    claim "block_bytes_${sz#*:}" "$(awk '{ print $NF }' "$keep/blocks.${sz#*:}.out")" 2 rel \
        "bench_blocks ${sz%%:*}: bytes of host memory per live block"
done

# 2. Trace tools (bench/traces.sh reads ../shared/traces beside the source it is given: a folder of links).
mkdir -p "$tmp/src/tests/data" "$tmp/shared"
ln -s "$here/examples" "$tmp/src/examples"
ln -s "$here/tests/data/linear-10k-50k-grad.pickle" "$tmp/src/tests/data/"
[ $have_shared = 1 ] && ln -s "$traces" "$tmp/shared/traces"
note "bench/traces.sh"
"$here/bench/traces.sh" "$build/bench/bench_traces" "$bin" "$tmp/src" >"$keep/traces.out" 2>&1
how="bench/traces.sh: bench_traces, medians of 15"
claim import_small "$(awk '$1 ~ /^linear-.*\.pickle$/ { print $3 }' "$keep/traces.out" | sort -g | head -1)" 35 rel "$how; slowest linear-10k pickle"
if [ $have_shared = 1 ]; then
    claim import_min "$(awk '$1 ~ /^cs336-.*\.pickle$/ { print $3 }' "$keep/traces.out" | sort -g | head -1)" 35 rel "$how; slowest real snapshot"
    claim import_max "$(awk '$1 ~ /^cs336-.*\.pickle$/ { print $3 }' "$keep/traces.out" | sort -g | tail -1)" 35 rel "$how; fastest real snapshot"
    claim replay_min "$(awk '$2 ~ /^[0-9]+$/ && NF >= 4 { print $4 }' "$keep/traces.out" | sort -g | head -1)" 35 rel "$how; slowest file"
    mapfile -t sw < <(sed -n 's/^sweep of 48 .*: \([0-9.]*\) s (run.*/\1/p' "$keep/traces.out")
    claim sweep_s "$(median "${sw[@]}")" 60 rel "bench/traces.sh: median of 3 sweeps, wall time to 0.01 s"
else
    skip import_min import_max replay_min sweep_s "$no_shared"
fi

# 3. Instructions per replayed event (callgrind: deterministic), the default policy and the arena in one build.
if command -v valgrind >/dev/null; then
    note "bench/instructions.sh (callgrind), default and hbm_arena_mb:65536"
    ex=("$here"/examples/cpu-transformer-trainstep.trace "$here"/examples/cs336-lm-ctx128-fullstep.trace
        "$here"/examples/cs336-lm-ctx512-forward.trace "$here"/examples/finetune-varlen.trace)
    "$here/bench/instructions.sh" "$build/bench/bench_instr" "${ex[@]}" >"$keep/instructions.out" 2>&1
    HBM_BENCH_CONF=hbm_arena_mb:65536 "$here/bench/instructions.sh" "$build/bench/bench_instr" "${ex[@]}" \
        >"$keep/instructions-arena.out" 2>&1
    ins() { awk -F'|' -v t="$2.trace" -v c="$3" '{ gsub(/ /, "", $2) } $2 == t { gsub(/ /, "", $c); print $c }' "$1"; }
    how="bench/instructions.sh"
    for t in cpu-transformer-trainstep:cpu cs336-lm-ctx128-fullstep:ctx128_fullstep cs336-lm-ctx512-forward:ctx512_forward \
        finetune-varlen:finetune; do
        claim "instr_${t#*:}" "$(ins "$keep/instructions.out" "${t%%:*}" 4)" 1 rel "$how, as replay runs it"
        claim "locked_${t#*:}" "$(ins "$keep/instructions.out" "${t%%:*}" 5)" 1 rel "$how, the lock taken"
        claim "arena_${t#*:}" "$(awk -v a="$(ins "$keep/instructions-arena.out" "${t%%:*}" 4)" \
            -v d="$(ins "$keep/instructions.out" "${t%%:*}" 4)" 'BEGIN { if (a && d) printf "%.1f", 100 * (a - d) / d }')" \
            1 abs "$how, hbm_arena / default - 1, in %"
    done
    # What expandable segments cost a replay against the default, and the cost per event as the segments a replay
    # makes and gives back grow (16 copies of a trace against 1, empty_cache after each): issue #38 items 4 and 5.
    note "bench/expandable_cost.sh and bench/copies.sh (callgrind), the examples"
    "$here/bench/expandable_cost.sh" "$build/bench/bench_instr" "${ex[@]}" >"$keep/expandable-cost.out" 2>&1
    "$here/bench/copies.sh" "$build/bench/bench_instr" "${ex[@]}" >"$keep/copies.out" 2>&1
    claim expandable_cost_gmean "$(sed -n 's/.*geometric mean \([0-9.]*\) over.*/\1/p' "$keep/expandable-cost.out")" 1 rel \
        "bench/expandable_cost.sh: expandable / default instructions per event, geometric mean of the examples"
    claim copies_max "$(awk -F'|' '$3 ~ /^ *[0-9]+ *$/ { print $7 + 0 }' "$keep/copies.out" | sort -g | tail -1)" 2 rel \
        "bench/copies.sh: instructions per event at 16 copies / at 1, the largest of the examples"
    # The step plan's planning per allocation of the step, up to 100,000 allocations a step (issue #38 item 6).
    note "bench/planning.sh (callgrind)"
    "$here/bench/planning.sh" "$bin" >"$keep/planning.out" 2>&1
    claim planning_per_alloc_max "$(awk -F'|' '$3 ~ /^ *[0-9]+ *$/ { print $9 + 0 }' "$keep/planning.out" | sort -g |
        tail -1)" 2 rel "bench/planning.sh: instructions per allocation of the step at a plan, the most of the traces"
    # Against d48e752, the commit before labels and graph-capture mode (bench/instr_against.sh).
    if [ $quick = 1 ]; then
        skip against_gmean against_least pair_instr "--quick"
    elif [ ! -x "$here/bench/instr_against.sh" ]; then
        skip against_gmean against_least pair_instr "no bench/instr_against.sh"
    else
        if [ -z "$old_build" ]; then
            old_build=$keep/d48e752/build
            if [ ! -x "$old_build/bench/bench_instr" ] || [ ! -e "$old_build/libhbmalloc.a" ]; then
                note "building bench_instr at d48e752 in $keep/d48e752 (once)"
                rm -rf "$keep/d48e752" && mkdir -p "$keep/d48e752/src"
                (git -C "$here" archive d48e752 | tar -x -C "$keep/d48e752/src" &&
                    cmake -S "$keep/d48e752/src" -B "$keep/d48e752/build" -DCMAKE_BUILD_TYPE=Release -DHBM_BENCH=ON \
                        -DHBM_WERROR=OFF && cmake --build "$keep/d48e752/build" -j2 --target bench_instr hbmalloc_static) \
                    >"$keep/d48e752.log" 2>&1 || note "could not build d48e752 (see $keep/d48e752.log)"
            fi
        fi
        if [ -x "$old_build/bench/bench_instr" ]; then
            at=("${ex[@]}")
            [ $have_shared = 1 ] && at+=("$traces"/pytorch-snapshot/cs336-lm-ctx*-mixed.pickle
                "$traces"/pytorch-snapshot/cs336-lm-ctx512-forward.pickle "$traces"/pytorch-snapshot/cs336-lm-ctx*-fullstep.pickle)
            note "bench/instr_against.sh d48e752 (callgrind)"
            "$here/bench/instr_against.sh" "$old_build" "$build" "${at[@]}" >"$keep/against.out" 2>&1
            how="bench/instr_against.sh, ${#at[@]} traces"
            claim against_gmean "$(sed -n 's/^geometric mean of new\/old: \([-+0-9.]*\)%.*/\1/p' "$keep/against.out")" 1 abs \
                "$how; geometric mean, % against d48e752"
            claim against_least "$(awk -F'|' '$6 ~ /%/ { gsub(/[ %+]/, "", $6); print $6 }' "$keep/against.out" | sort -g | tail -1)" 1 abs \
                "$how; the smallest change, %"
            claim pair_instr "$(sed -n 's/^locked cache-hit malloc+free pair (512 B): .*new \([0-9.]*\) instructions.*/\1/p' "$keep/against.out")" \
                1 rel "bench/instr_against.sh: bench_pair, the locked 512 B cache-hit pair"
        else
            skip against_gmean against_least pair_instr "no build of d48e752 (--old-build)"
        fi
    fi
else
    skip instr_cpu instr_ctx128_fullstep instr_ctx512_forward instr_finetune locked_cpu locked_ctx128_fullstep \
        locked_ctx512_forward locked_finetune arena_cpu arena_ctx128_fullstep arena_ctx512_forward arena_finetune \
        against_gmean against_least pair_instr expandable_cost_gmean copies_max planning_per_alloc_max "no valgrind"
fi

# 4. Deterministic tables: fidelity, expandable segments (with bench_pages), the step plan.
if [ $have_shared = 1 ]; then
    note "bench/fidelity.sh"
    "$here/bench/fidelity.sh" "$bin" "$traces" >"$keep/fidelity.out" 2>&1
    table fidelity "$keep/fidelity.out"
    note "bench/expandable.sh"
    "$here/bench/expandable.sh" "$bin" "$traces" "$build/bench/bench_pages" >"$keep/expandable.out" 2>&1
    table expandable "$keep/expandable.out"
    table expandable_pages "$keep/expandable.out"
    claim expandable_met "$(sed -n "s/^expandable segments (PyTorch's policy): .* on \([0-9]*\) of .*/\1/p" "$keep/expandable.out")" 0 abs \
        "bench/expandable.sh; traces <= 1.02"
    claim expandable_met_best "$(sed -n 's/^with .*: <= 1.02 on \([0-9]*\) of .*/\1/p' "$keep/expandable.out")" 0 abs \
        "bench/expandable.sh; traces <= 1.02, hbmalloc's keys"
else
    skip fidelity expandable expandable_pages expandable_met expandable_met_best "$no_shared"
fi
note "bench/stepplan.sh"
"$here/bench/stepplan.sh" "$bin" >"$keep/stepplan.out" 2>&1
table stepplan "$keep/stepplan.out"

# 5. Labels and Python stacks in the PyTorch plug-in, against "plain" of the same run: the ring and a label as the
# ratio of their pair to plain's (within noise of 1: 10%, which a ring or a label that cost a tenth of the ctypes
# round trip fails; an absolute tolerance on the ns added, 400 ns on a 79 ns figure, could not fail), the stacks as
# the ns they add (relative).
if [ ! -e "$build/libhbmalloc_torch.so" ]; then
    skip stack_history stack_label stack_d3 stack_d12 stack_d42 "no libhbmalloc_torch.so in $build"
elif ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    skip stack_history stack_label stack_d3 stack_d12 stack_d42 "/usr/bin/python3 cannot import torch"
else
    sruns=9
    [ $quick = 1 ] && sruns=3
    note "bench/stack_capture.py ($sruns runs)"
    /usr/bin/python3 "$here/bench/stack_capture.py" "$build/libhbmalloc_torch.so" "$here/python" 20000 $sruns \
        >"$keep/stacks.out" 2>&1
    how="bench/stack_capture.py, median of $sruns, ns added"
    sc() { awk -v m="$1" '{ n = $0; sub(/ +[-0-9.]+ +[-0-9.]+$/, "", n) } n == m { print $NF }' "$keep/stacks.out"; }
    # MODE -> its ns per pair / plain's, of the same run
    sr() { awk -v m="$1" '{ n = $0; sub(/ +[-0-9.]+ +[-0-9.]+$/, "", n) } n == "plain" { p = $(NF - 1) }
        n == m { v = $(NF - 1) } END { if (p && v) printf "%.3f", v / p }' "$keep/stacks.out"; }
    claim stack_history "$(sr history)" 10 rel "bench/stack_capture.py, median of $sruns: ns / plain's"
    claim stack_label "$(sr "history + label")" 10 rel "bench/stack_capture.py, median of $sruns: ns / plain's"
    claim stack_d3 "$(sc "history + stacks d=3")" 40 rel "$how"
    claim stack_d12 "$(sc "history + stacks d=12")" 40 rel "$how"
    claim stack_d42 "$(sc "history + stacks d=42")" 40 rel "$how"
fi

# 6. Offline plans, the footprint without virtual memory and the step plan's steady state (about 3.5 minutes).
if [ $quick = 1 ]; then
    skip plan plan_seconds novmm novmm_groups steady steady_groups steady_vmm steady_vmm_groups "--quick"
elif [ $have_shared = 0 ]; then
    skip plan plan_seconds novmm novmm_groups steady steady_groups steady_vmm steady_vmm_groups "$no_shared"
else
    note "bench/plan.sh"
    "$here/bench/plan.sh" "$bin" "$traces" >"$keep/plan.out" 2>&1
    table plan "$keep/plan.out" 7 # the seconds: wall time
    claim plan_seconds "$(awk -F'|' '/^\| / && $8 ~ /[0-9]/ { s += $8 } END { printf "%.1f", s }' "$keep/plan.out")" 40 rel \
        "bench/plan.sh; wall time of all the plans, summed"
    note "bench/novmm.sh"
    "$here/bench/novmm.sh" "$bin" "$traces" >"$keep/novmm.out" 2>&1
    table novmm "$keep/novmm.out"
    table novmm_groups "$keep/novmm.out"
    note "bench/steady.sh, then with virtual memory"
    "$here/bench/steady.sh" "$bin" "$traces" 5 >"$keep/steady.out" 2>&1
    "$here/bench/steady.sh" "$bin" "$traces" 5 vmm >"$keep/steady-vmm.out" 2>&1
    table steady "$keep/steady.out"
    table steady_groups "$keep/steady.out"
    table steady_vmm "$keep/steady-vmm.out"
    table steady_vmm_groups "$keep/steady-vmm.out"
fi

# A mark in the document that no claim above measures.
grep -o '<!-- claim\(-table\)\{0,1\}:[A-Za-z0-9_]* -->' "$doc" | sed 's/.*:\([A-Za-z0-9_]*\) -->/\1/' | grep -vx NAME | sort -u |
    while read -r n; do grep -qx "$n" "$tmp/seen" || echo "$n"; done >"$tmp/unchecked"
while read -r n; do
    row "$n" "(marked)" - - UNKNOWN "marked in docs/PERFORMANCE.md, measured by no claim here"
    stale=1
done <"$tmp/unchecked"

cat "$tmp/rows"
echo
echo "$nrows claims: $(grep -c ' OK ' "$tmp/rows") OK, $(grep -c ' STALE ' "$tmp/rows") STALE, $(grep -c ' SKIPPED ' "$tmp/rows") SKIPPED," \
    "$(grep -c ' MISSING ' "$tmp/rows") MISSING, $(grep -c ' UNKNOWN ' "$tmp/rows") UNKNOWN, in ${SECONDS} s; the benchmarks' outputs: $keep/"
exit $stale
