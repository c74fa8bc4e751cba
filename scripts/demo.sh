#!/usr/bin/env bash
# Build hbmalloc and replay a real training-step trace on a simulated 80 GiB device.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh build
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHBM_TESTS=OFF >/dev/null
cmake --build build -j"$(nproc)" >/dev/null
exec build/hbmalloc replay examples/cs336-lm-ctx128-fullstep.trace --capacity 80GiB "$@"
