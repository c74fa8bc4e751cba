#!/usr/bin/env bash
# Install the Debian packages a job needs, if any is missing.
# usage: scripts/deps.sh build   what building hbmalloc needs (the main job: scripts/demo.sh)
#        scripts/deps.sh test    that, and what the tests need (scripts/test.sh): cmocka, librsvg, clang and
#                                its sanitizer runtimes, clang-format (the tree's one format), valgrind, and Debian's torch (python3-torch, libtorch-dev:
#                                the plug-in built against torch's headers, and tests inside a real torch), the
#                                Python packaging tools (the package built and installed into a venv), tmux (the
#                                live monitor as a person sees it), a Prometheus text-format parser, and Chromium
#                                with a DevTools-protocol client (python3-websocket: the view's page in a browser)
set -euo pipefail
pkgs=(gcc g++ make cmake pkg-config python3)
if [ "${1:-test}" = test ]; then
    pkgs+=(libcmocka-dev librsvg2-bin clang clang-format libclang-rt-14-dev valgrind python3-torch libtorch-dev
           python3-setuptools python3-wheel python3-build python3-venv python3-pip tmux python3-prometheus-client
           chromium python3-websocket)
fi
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
    echo "deps.sh: missing ${missing[*]} and no apt-get here; install them by hand" >&2
    exit 1
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo=sudo
echo "deps.sh: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
