#!/bin/sh
# The Python package as a user gets it: `python3 -m build` (an sdist, then the wheel built from that sdist, so a
# file missing from either fails here), installed into fresh virtual environments, the tool and the Python tests
# run from there (from outside the source tree: nothing of it is on sys.path or PATH).
# usage: tests/cli/package.sh SRC WORKDIR SHIM   (SHIM: tests' torch_cpu_shim library, for torch_oom.py)
set -eu
src=$1 work=$2 shim=$3
py=/usr/bin/python3 # Debian's: its setuptools, wheel, build, venv and torch
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }
CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) "$py" -m build --no-isolation --outdir "$work/dist" "$src" >"$work/build.log" 2>&1 ||
    { tail -30 "$work/build.log"; fail "python3 -m build"; }
whl=$(ls "$work"/dist/hbmalloc-*.whl)
ls "$work"/dist/hbmalloc-*.tar.gz >/dev/null || fail "no sdist"
version=$(sed -n 's/^#define HBM_VERSION_STRING "\(.*\)"/\1/p' "$src/include/hbmalloc.h")
case $(basename "$whl") in
hbmalloc-"$version"-py3-none-linux_*.whl) ;;
*) fail "wheel name $(basename "$whl"): not version $version, tag py3-none-linux_*" ;;
esac
"$py" - "$whl" <<'PY' || fail "the wheel's contents"
import sys, zipfile
names = set(zipfile.ZipFile(sys.argv[1]).namelist())
need = {"hbmalloc/__init__.py", "hbmalloc/__main__.py", "hbmalloc/torch.py", "hbmalloc_torch.py", "hbmalloc/bin/hbmalloc",
        "hbmalloc/lib/libhbmalloc_torch.so", "hbmalloc/lib/libhbmalloc_torch_npu.so",
        "hbmalloc/monitor/prometheus/hbmalloc-rules.yml", "hbmalloc/monitor/prometheus/prometheus.yml",
        "hbmalloc/monitor/grafana/hbmalloc.json"}
missing = need - names
assert not missing, missing
info = zipfile.ZipFile(sys.argv[1]).read([n for n in names if n.endswith(".dist-info/WHEEL")][0]).decode()
assert "Root-Is-Purelib: false" in info and "Tag: py3-none-linux_" in info, info
entry = zipfile.ZipFile(sys.argv[1]).read([n for n in names if n.endswith("entry_points.txt")][0]).decode()
assert "hbmalloc = hbmalloc.__main__:main" in entry, entry
print("wheel holds", len(names), "files")
PY
cd "$work"
# 1. Without torch: a bare environment. The tool works; hbmalloc.torch imports, and use() says what is missing.
"$py" -m venv bare
bare/bin/pip install -q --no-index "$whl"
[ "$(bare/bin/hbmalloc --version)" = "hbmalloc $version" ] || fail "hbmalloc --version from the venv"
bare/bin/hbmalloc replay "$src/examples/cs336-lm-ctx512-forward.trace" | grep -q '^peak reserved: ' ||
    fail "hbmalloc replay from the venv"
[ "$(bare/bin/python -m hbmalloc --version)" = "hbmalloc $version" ] || fail "python -m hbmalloc"
rc=0
bare/bin/hbmalloc doctor --root "$src/tests/data/doctor/root-mismatch" >/dev/null 2>&1 || rc=$?
[ "$rc" -le 1 ] || fail "hbmalloc doctor without torch: exit $rc"
HBMALLOC_BACKEND=sim:capacity=1GiB bare/bin/python - <<'PY' || fail "hbmalloc.torch without torch"
import hbmalloc, hbmalloc.torch as hbm, hbmalloc_torch
assert hbmalloc_torch is hbm  # the old name is the same module
lib = hbm.library(device="cuda")  # the plug-in is in the package, and works without torch (sim)
p = lib.hbm_torch_raw_alloc(1 << 20, 0, None)
assert p and hbm.stats(0)["allocated_bytes.all.current"] == 1 << 20
lib.hbm_torch_free(p, 0, 0, None)
try:
    hbm.use()
    raise AssertionError("use() without torch did not raise")
except ImportError as e:
    assert "needs PyTorch" in str(e) and "import torch" in str(e) and e.name == "torch", e
    print("without torch:", str(e)[:80] + "...")
PY
# 2. With Debian's torch (system site packages): the Python tests, on the installed package alone.
"$py" -m venv --system-site-packages withtorch
withtorch/bin/pip install -q --no-index "$whl"
vpy=$work/withtorch/bin/python
libdir=$("$vpy" -c 'import hbmalloc; print(hbmalloc.lib_dir())')
case $libdir in "$work"/withtorch/*) ;; *) fail "hbmalloc imported from $libdir, not the venv" ;; esac
HBMALLOC_BACKEND=sim:capacity=1GiB HBMALLOC_CONF= "$vpy" "$src/tests/python/plugin.py" "" "" "$work/plugin.pickle"
HBMALLOC_BACKEND=sim:capacity=1GiB HBMALLOC_QUIET=1 "$vpy" "$src/tests/python/plugin_use.py" "$libdir/libhbmalloc_torch.so" "" cuda
HBMALLOC_BACKEND=sim:capacity=1GiB,dialect=npu HBMALLOC_QUIET=1 \
    "$vpy" "$src/tests/python/plugin_use.py" "$libdir/libhbmalloc_torch_npu.so" "" npu
if [ -e "$libdir/libhbmalloc_torch_c10.so" ]; then # built against this torch
    HBMALLOC_BACKEND=sim:capacity=1GiB HBMALLOC_CONF= HBMALLOC_QUIET=1 "$vpy" "$src/tests/python/torch_memory_api.py" "" ""
    HBMALLOC_BACKEND=sim:capacity=512MiB,memory=host,context=64MiB,others=32MiB,others_pid=4242 HBMALLOC_CONF= \
        HBMALLOC_QUIET=1 \
        "$vpy" "$src/tests/python/torch_oom.py" "$shim" "$libdir/libhbmalloc_torch_c10.so" c10
else
    fail "no libhbmalloc_torch_c10.so in the package built with Debian's torch"
fi
echo "package: ok ($(basename "$whl"))"
