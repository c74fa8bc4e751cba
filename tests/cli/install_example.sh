#!/bin/sh
# Install the built project into a scratch prefix, then build examples/embed
# against it twice: with find_package(hbmalloc) and with pkg-config.
set -eu
build=$1 src=$2 cc=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
# The monitoring files (docs/MONITOR.md, "From one job on one node to a cluster"), as they are in the tree.
for f in prometheus/hbmalloc-rules.yml prometheus/prometheus.yml grafana/hbmalloc.json; do
    cmp -s "$src/monitor/$f" "$tmp/prefix/share/hbmalloc/monitor/$f" || { echo "FAIL: share/hbmalloc/monitor/$f"; exit 1; }
done
cmake -S "$src/examples/embed" -B "$tmp/embed" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_C_COMPILER="$cc" >/dev/null
cmake --build "$tmp/embed" >/dev/null
out=$(LD_LIBRARY_PATH="$tmp/prefix/lib:${LD_LIBRARY_PATH:-}" "$tmp/embed/embed")
echo "$out"
echo "$out" | grep -q "allocated 83886080 bytes" || { echo "FAIL: unexpected output (find_package build)"; exit 1; }
libdir=$(ls -d "$tmp"/prefix/lib*/pkgconfig | head -n1)
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs hbmalloc)
"$cc" "$src/examples/embed/main.c" $flags -o "$tmp/embed_pc"
LD_LIBRARY_PATH="$(dirname "$libdir"):${LD_LIBRARY_PATH:-}" "$tmp/embed_pc" | grep -q "double free reported" ||
    { echo "FAIL: pkg-config build"; exit 1; }
# The installed Python helper finds the installed plug-in by itself (share/hbmalloc -> lib).
HBMALLOC_BACKEND=sim:capacity=1GiB HBMALLOC_TORCH_LIB= python3 -c "
import sys; sys.path.insert(0, '$tmp/prefix/share/hbmalloc')
import hbmalloc_torch as h
lib = h.library(device='cuda')
assert lib.path.startswith('$tmp/prefix/lib'), lib.path
p = lib.hbm_torch_raw_alloc(4096, 0, None); assert p; lib.hbm_torch_free(p, 0, 0, None)
print('helper found', lib.path)" || { echo "FAIL: the installed helper and plug-in"; exit 1; }
echo "install_and_example: ok"
