#!/usr/bin/env bash
# Install the Debian packages a job needs, if any is missing.
# usage: scripts/deps.sh build   what building hbmalloc needs (the main job: scripts/demo.sh)
#        scripts/deps.sh test    that, and what the tests need (scripts/test.sh): cmocka, librsvg, clang and
#                                its sanitizer runtimes, clang-format (the tree's one format), valgrind, and
#                                Debian's torch (python3-torch, libtorch-dev: the plug-in built against torch's
#                                headers, and tests inside a real torch), the Python packaging tools (the package
#                                built and installed into a venv), tmux (the live monitor as a person sees it), a
#                                Prometheus text-format parser, Chromium with a DevTools-protocol client
#                                (python3-websocket: the view's page in a browser), and Prometheus with promtool and
#                                node_exporter (the shipped rules tested, a real scrape of `top --textfile`; their
#                                packages' own services, where systemd starts them, are left alone)
# Another apt or dpkg run going is waited for (HBM_APT_WAIT seconds, default 900), and said so on stderr.
set -euo pipefail
pkgs=(gcc g++ make cmake pkg-config python3)
if [ "${1:-test}" = test ]; then
    pkgs+=(libcmocka-dev librsvg2-bin clang clang-format libclang-rt-14-dev valgrind python3-torch libtorch-dev
           python3-setuptools python3-wheel python3-build python3-venv python3-pip tmux python3-prometheus-client
           chromium python3-websocket prometheus prometheus-node-exporter)
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
# Another apt or dpkg run (unattended-upgrades, apt in another terminal, a second job) holds the package manager's
# locks, and apt-get gives up on a held lock at once. Here it is waited for, up to HBM_APT_WAIT seconds (default
# 900), and the wait said on stderr: dpkg's lock by apt-get itself (DPkg::Lock::Timeout, apt 1.9.11 and later; Debian
# 12 has 2.6); the package lists' lock (apt-get update), for which apt has no timeout, and the downloads' by trying
# again every 5 seconds. apt-get's messages are matched in English (LC_ALL=C); env, since sudo resets the environment.
wait_s=${HBM_APT_WAIT:-900}
apt_get() { # ARGS: apt-get ARGS, its output away, its messages on stderr when it fails
    local start=$SECONDS timeout=0 said="" out held
    until out=$($sudo env LC_ALL=C DEBIAN_FRONTEND=noninteractive apt-get -o "DPkg::Lock::Timeout=$timeout" "$@" \
        2>&1 >/dev/null); do
        if ! grep -q "Could not get lock" <<<"$out" || [ $((SECONDS - start + 5)) -ge "$wait_s" ]; then
            printf '%s\n' "$out" >&2
            [ -z "$said" ] || echo "deps.sh: gave up after waiting $((SECONDS - start))s (HBM_APT_WAIT=SECONDS waits" \
                "longer)" >&2
            return 1
        fi
        if [ -z "$said" ]; then
            held=$(sed -n 's/^E: Could not get lock //p' <<<"$out" | head -n1)
            held=${held/. It is held by/, held by}
            echo "deps.sh: another apt or dpkg run holds the package manager's lock ($held); waiting up to" \
                "${wait_s}s for it to finish" >&2
            said=1
        fi
        sleep 5
        timeout=$((wait_s - (SECONDS - start)))
    done
    [ -z "$out" ] || printf '%s\n' "$out" >&2 # its warnings
    [ -z "$said" ] || echo "deps.sh: done after waiting $((SECONDS - start))s" >&2
}
echo "deps.sh: installing ${missing[*]}" >&2
apt_get update -qq
apt_get install -y -qq --no-install-recommends "${missing[@]}"
