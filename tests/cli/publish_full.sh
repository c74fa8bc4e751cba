#!/bin/sh
# The PyTorch plug-in where no record for hbmalloc top can be made (#28): a full folder (/dev/shm filled by
# DataLoader workers and NCCL: 64 MB in a default Docker container; here a private tmpfs of one page, full) and a
# file-size limit under a record's size (`ulimit -f 0`). The job must go on: publishing turns itself off with one
# warning, every allocation is served, the process is not killed (SIGBUS, SIGXFSZ), no record is left. Nothing
# here touches the machine's /dev/shm. The tmpfs needs a mount namespace of its own (root, or a user namespace);
# where neither can be had, that variant is skipped and says so, and the file-size limit still runs.
# usage: tests/cli/publish_full.sh LIBHBMALLOC_TORCH
set -eu
if [ -z "${HBM_FULL_NS:-}" ]; then # mounts made below vanish with the namespace, whatever ends the script
    for how in -m -Urm; do
        if unshare "$how" true 2>/dev/null; then
            HBM_FULL_NS=1 exec unshare "$how" sh "$0" "$@"
        fi
    done
fi
lib=$1
py=/usr/bin/python3
tmp=$(mktemp -d)
trap 'umount "$tmp/full" 2>/dev/null || true; rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
cat >"$tmp/job.py" <<'PY'
"""A job's allocations through the plug-in's C entry points, as PyTorch's pluggable allocator calls them."""
import ctypes
import sys
lib = ctypes.CDLL(sys.argv[1])
lib.hbm_torch_raw_alloc.restype = ctypes.c_void_p
lib.hbm_torch_raw_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.hbm_torch_free.restype = None
lib.hbm_torch_free.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
for step in range(50):
    held = [(lib.hbm_torch_raw_alloc(n, 0, None), n) for n in (1 << 20, 3 << 20, 100 << 20)]
    assert all(p for p, n in held), "an allocation failed"
    for p, n in held:
        lib.hbm_torch_free(p, n, 0, None)
print("served 150 allocations")
PY
# run_job LABEL DIR [FILE_SIZE_LIMIT]: the job with its records in DIR; its ending, its warnings, DIR afterwards.
run_job() {
    label=$1 dir=$2 limit=${3:-}
    rc=0
    out=$( (
        [ -z "$limit" ] || ulimit -f "$limit"
        HBMALLOC_TOP_DIR=$dir HBMALLOC_BACKEND=sim:capacity=1GiB HBMALLOC_CONF= exec "$py" "$tmp/job.py" "$lib"
    ) 2>&1) || rc=$?
    [ "$rc" -eq 0 ] || fail "$label: the job ended with status $rc (over 128: killed by signal $((rc - 128))): $out"
    echo "$out" | grep -q '^served 150 allocations$' || fail "$label: allocations not served: $out"
    n=$(echo "$out" | grep -c 'not published for hbmalloc top' || true)
    [ "$n" -eq 1 ] || fail "$label: $n warnings about publishing, not one: $out"
    [ -z "$(ls -A "$dir" | grep '^hbmalloc-' || true)" ] || fail "$label: a record was left: $(ls -A "$dir")"
    echo "$label: served; $(echo "$out" | grep 'not published for hbmalloc top')"
}

# 1. A file-size limit under a record's size (Python ignores SIGXFSZ; a C program would die of it: test_publish).
mkdir "$tmp/records"
run_job "ulimit -f 0" "$tmp/records" 0

# 2. A full tmpfs: a record sized sparse there maps fine and faults (SIGBUS) at its first store.
mkdir "$tmp/full"
if [ -n "${HBM_FULL_NS:-}" ] && mount -t tmpfs -o size=4k,mode=0700 hbm-full "$tmp/full" 2>/dev/null; then
    head -c 65536 /dev/zero >"$tmp/full/fill" 2>/dev/null || true # until it is full
    [ "$(stat -c %s "$tmp/full/fill")" -eq 4096 ] || fail "the tmpfs did not fill at one page"
    run_job "a full tmpfs" "$tmp/full"
    umount "$tmp/full"
else
    echo "SKIPPED (a full tmpfs): no mount namespace here (needs root or user namespaces); ran: the file-size limit"
fi
echo "publish_full: ok"
