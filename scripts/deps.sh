#!/usr/bin/env bash
# Install the Debian packages the build and the tests need, if any is missing.
set -euo pipefail
pkgs=(gcc make cmake pkg-config libcmocka-dev python3 librsvg2-bin clang libclang-rt-14-dev valgrind)
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
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
