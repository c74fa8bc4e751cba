#!/bin/sh
# The README's commands, as a new user types them (issue #29 items 1-3): the blocks README.md marks with
# "<!-- tests/cli/readme.sh runs this block (NAME) -->" are taken from README.md itself, not copied here, and run in a
# copy of the source tree, offline, as on Debian 12:
#   install   the venv and `pip install --no-build-isolation .` (Debian's setuptools and wheel through
#             --system-site-packages: no index is reached, PIP_NO_INDEX); the tool is then on the venv's PATH;
#   use       `hbm.use()` in that venv, with Debian's torch 1.13: refused, and the message says what to install;
#   library   cmake, build, install to ~/.local, on a machine without cmocka (pkg-config finds none): configured and
#             built without the tests, with a word on how to get them; -DHBM_TESTS=ON there stops with the reason;
#   embed     examples/embed built against that ~/.local install with CMake and with pkg-config, and run as built.
# And what the README lists: every package scripts/deps.sh installs, every document in docs/.
# Nothing of the user's: HOME is the test's folder, pip keeps no cache, Debian's python3 comes first on PATH.
# usage: tests/cli/readme.sh SRC WORKDIR
set -eu
src=$1 work=$2
fail() { echo "FAIL: $*"; exit 1; }
rm -rf "$work"
mkdir -p "$work/home" "$work/nopc"
block() { # NAME: the block README.md marks with it
    awk -v name="$1" '
        $0 ~ "<!-- tests/cli/readme.sh runs this block \\(" name "\\) -->" { armed = 1; next }
        armed && /^```/ { if (inside) exit; inside = 1; next }
        inside { print }' "$src/README.md"
}
for name in install use library embed; do
    block "$name" >"$work/$name.block"
    [ -s "$work/$name.block" ] || fail "README.md has no block marked ($name)"
done
echo "README blocks: $(wc -l <"$work/install.block") + $(wc -l <"$work/use.block") + $(wc -l <"$work/library.block")" \
    "+ $(wc -l <"$work/embed.block") lines"
# The packages the README names for its two commands: scripts/deps.sh's, all of them.
deps=$(awk '/^ *pkgs\+?=\(/ { on = 1 } on { print } on && /\)/ { on = 0 }' "$src/scripts/deps.sh" |
    sed 's/.*(//; s/).*//')
said=$(awk '/^Both install what they need/ { on = 1 } on && /^$/ { exit } on' "$src/README.md" | tr -d '`(),;:' |
    tr ' ' '\n')
[ -n "$deps" ] || fail "no packages read from scripts/deps.sh"
for p in $deps; do
    printf '%s\n' "$said" | grep -qxF -- "$p" || fail "README.md's list of what the two commands install lacks $p"
done
echo "README names the $(echo $deps | wc -w) packages of scripts/deps.sh"
for d in "$src"/docs/*.md; do
    grep -qF "(docs/$(basename "$d"))" "$src/README.md" || fail "README.md's Documentation lacks docs/$(basename "$d")"
done
echo "README names every document in docs/"
# The source tree as a clone has it (no build folders of this checkout; outside git, the tree less build*/).
mkdir "$work/src"
if git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    ( cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 tar -cf - ) | ( cd "$work/src" && tar -xf - )
else
    ( cd "$src" && find . -maxdepth 2 -name CMakeCache.txt | sed 's|/CMakeCache.txt$||' >"$work/builds" &&
        tar --exclude='./build*' --exclude='./.venv' --exclude-from="$work/builds" -cf - . ) | ( cd "$work/src" && tar -xf - )
fi
export HOME="$work/home" PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
export PATH="/usr/bin:/bin:$PATH" # Debian's python3, its venv, setuptools, wheel and torch
cd "$work/src"

# 1. install: exactly the README's lines, in bash as a user's shell runs them.
bash -e "$work/install.block" >"$work/install.log" 2>&1 || { tail -30 "$work/install.log"; fail "the install block"; }
.venv/bin/hbmalloc --version | grep -q '^hbmalloc ' || fail "hbmalloc is not on the venv's PATH"
echo "install: the README's lines built and installed the package in a venv (.venv/bin/hbmalloc runs)"

# 2. use: the README's Python lines in that venv, with Debian's torch 1.13: refused, saying what to install.
rc=0
HBMALLOC_BACKEND=sim:capacity=1GiB .venv/bin/python "$work/use.block" >"$work/use.log" 2>&1 || rc=$?
if .venv/bin/python -c 'import torch, sys; sys.exit(not torch.__version__.startswith("1."))' 2>/dev/null; then
    [ "$rc" -ne 0 ] || fail "use() with torch 1.x did not refuse"
    grep -q "hbmalloc needs torch >= 2.0 (CUDAPluggableAllocator); installed 1\." "$work/use.log" &&
        grep -q "Install torch 2.0 or later (2.3 or later for CUDA graphs)" "$work/use.log" &&
        grep -q "pip install 'torch>=2.3'" "$work/use.log" || { cat "$work/use.log"; fail "use()'s message with torch 1.x"; }
    echo "use: torch $(.venv/bin/python -c 'import torch; print(torch.__version__)') refused, saying what to install"
else
    echo "SKIP (use): the venv's torch is not 1.x ($(.venv/bin/python -c 'import torch; print(torch.__version__)' 2>&1 | tail -1))"
fi

# 3. library: the README's build on a machine without cmocka (pkg-config's search path emptied).
PKG_CONFIG_LIBDIR="$work/nopc" PKG_CONFIG_PATH="" bash -e "$work/library.block" >"$work/library.log" 2>&1 ||
    { tail -30 "$work/library.log"; fail "the library block without cmocka"; }
grep -q "hbmalloc: tests not built: they need cmocka" "$work/library.log" || fail "no word on the tests left out"
[ -x build/hbmalloc ] && [ ! -e build/tests ] || fail "the build: $(ls build)"
for f in libhbmalloc.so libhbmalloc.a hbmalloc.h hbmalloc.pc hbmallocConfig.cmake libhbmalloc_torch.so; do
    [ -n "$(find "$HOME/.local" -name "$f")" ] || fail "not installed in ~/.local: $f"
done
[ -x "$HOME/.local/bin/hbmalloc" ] || fail "not installed: ~/.local/bin/hbmalloc"
echo "library: built and installed without cmocka; the tests left out, with the reason"
rc=0
PKG_CONFIG_LIBDIR="$work/nopc" PKG_CONFIG_PATH="" cmake -S . -B build-tests -DHBM_TESTS=ON -DHBM_TORCH_C10=OFF \
    >"$work/tests-on.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "HBM_TESTS=ON: the tests need cmocka" "$work/tests-on.log" ||
    { tail -20 "$work/tests-on.log"; fail "-DHBM_TESTS=ON without cmocka: status $rc"; }
echo "library: -DHBM_TESTS=ON without cmocka stops the configuration, saying why"

# 4. embed: the README's lines that build examples/embed against that install (CMake, then pkg-config), run as built.
bash -e "$work/embed.block" >"$work/embed.log" 2>&1 || { tail -30 "$work/embed.log"; fail "the embed block"; }
[ "$(grep -c "double free reported" "$work/embed.log")" -eq 2 ] || { cat "$work/embed.log"; fail "embed's output"; }
echo "embed: built against ~/.local with CMake and with pkg-config; both run"
echo "readme: ok"
