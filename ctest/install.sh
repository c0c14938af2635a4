#!/bin/sh
# ctest `install`: what a user gets from `cmake --install BUILD --prefix P`, tried with
# the source and build trees out of reach (issue 11, "Install and packaging").
#   sh ctest/install.sh SOURCE_DIR BUILD_DIR VERSION
# Installs BUILD into a fresh temporary prefix and checks, from a temporary directory with
# a fresh HOME and a minimal environment:
#   - no installed file names the source or build tree;
#   - the installed diloco-lua says it runs the installed Lua files and trains a tiny
#     recipe from PREFIX/share/diloco/recipes; a copy of it with no Lua files next to it
#     says so in --version, and `run` fails naming LUA_PATH (inside a private mount namespace where the
#     source and build trees are hidden under empty tmpfs mounts, when unshare(1) may make
#     one; otherwise the path check above is what keeps them out);
#   - a C consumer builds and runs with `pkg-config --cflags --libs diloco` and one with
#     find_package(diloco CONFIG) / diloco::diloco; moved elsewhere whole, the tree still
#     works (the CLI's Lua files, diloco.pc);
#   - `lua5.4 -e 'require "diloco"'` loads the installed module, diloco.nn works, and
#     diloco.so exports luaopen_diloco only; without the Lua files on LUA_PATH, diloco.nn
#     is an error naming LUA_PATH, not nil;
#   - the recipes, docs and the man page are installed;
#   - the uninstall target removes every installed file;
#   - `luarocks make` builds the rockspec into a test tree, and that module loads.
# DILOCO_TEST_PRELOAD (the sanitizer runtimes of an instrumented build) is preloaded into
# the programs that load an instrumented library, and into nothing else.
set -eu

src=$(cd "$1" && pwd -P)
build=$(cd "$2" && pwd -P)
version=$3
preload=${DILOCO_TEST_PRELOAD:-}

tmp=$(mktemp -d /tmp/diloco-install-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
home="$tmp/home"
work="$tmp/work"
mkdir -p "$home" "$work"

fail() {
    echo "install test: FAIL: $*" >&2
    exit 1
}
step() { echo "install test: $*"; }

# A minimal environment: no LUA_PATH, LUA_CPATH, PKG_CONFIG_PATH or CMAKE_PREFIX_PATH
# from the caller, HOME empty, the working directory outside both trees.
clean() {
    env -i PATH=/usr/bin:/bin HOME="$home" LANG=C.UTF-8 OPENBLAS_NUM_THREADS=1 \
        ${ASAN_OPTIONS:+ASAN_OPTIONS=$ASAN_OPTIONS} "$@"
}

step "cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" ||
    { cat "$tmp/install.log" >&2; fail "cmake --install failed"; }

for f in bin/diloco-lua lib/lua/5.4/diloco.so share/lua/5.4/diloco/cli.lua \
    share/lua/5.4/diloco/nn.lua include/diloco/diloco.h include/diloco/version.h \
    lib/pkgconfig/diloco.pc lib/cmake/diloco/dilocoConfig.cmake \
    lib/cmake/diloco/dilocoConfigVersion.cmake share/man/man1/diloco-lua.1 \
    share/diloco/recipes/charlm.lua share/diloco/docs/cli.md share/diloco/docs/c-api.md \
    share/diloco/README.md; do
    [ -e "$prefix/$f" ] || fail "not installed: PREFIX/$f"
done
ls "$prefix"/lib/libdiloco.so* >/dev/null 2>&1 || fail "not installed: PREFIX/lib/libdiloco.so"

# A sanitized build's binaries do name their sources: GCC's AddressSanitizer records each
# object's absolute input file name (module names of its globals), which no prefix map
# rewrites; there the check covers the text files, and the run below in the namespace
# that hides both trees shows the binaries do not use them.
if [ "${DILOCO_TEST_SANITIZED:-0}" = 1 ]; then
    step "no installed text file names $src or $build (sanitized build: binaries name their sources)"
    grep_text=-I
else
    step "no installed file names $src or $build"
    grep_text=
fi
if refs=$(grep -rlF $grep_text -e "$src" -e "$build" "$prefix"); then
    fail "installed files name the source or build tree: $refs"
fi

step "the man page renders"
if command -v man >/dev/null 2>&1; then
    clean man -l "$prefix/share/man/man1/diloco-lua.1" 2>/dev/null | grep -q "diloco-lua" ||
        fail "man -l PREFIX/share/man/man1/diloco-lua.1 shows no page"
fi

# Hide both trees where the kernel lets us; the CLI then cannot read them even by accident.
hide=""
if clean unshare -m true 2>/dev/null; then
    # the build tree first: it is often inside the source tree, which once hidden has
    # no mount point for it any more
    for d in "$build" "$src"; do
        hide="$hide mount -t tmpfs diloco-hidden '$d' &&"
    done
    step "source and build trees hidden by a private mount namespace"
else
    step "unshare -m not permitted here: relying on the path check"
fi
hidden() { # hidden CMD...: runs "$@" (quoted) in the private namespace if there is one
    if [ -n "$hide" ]; then
        cmd=""
        for a in "$@"; do cmd="$cmd '$a'"; done
        clean unshare -m sh -c "$hide ! ls '$src/CMakeLists.txt' 2>/dev/null && cd '$work' && exec $cmd"
    else
        (cd "$work" && clean "$@")
    fi
}

step "diloco-lua --version names the installed Lua files"
out=$(hidden "$prefix/bin/diloco-lua" --version) || fail "diloco-lua --version: $out"
echo "$out" | head -1 | grep -q "^diloco-lua $version (libdiloco $version, " ||
    fail "first --version line: $out"
real_prefix=$(cd "$prefix" && pwd -P)
echo "$out" | grep -qxF "lua files: $real_prefix/share/lua/5.4 (installed)" ||
    fail "--version does not name PREFIX/share/lua/5.4 (installed): $out"

step "the installed CLI trains a tiny recipe from PREFIX/share/diloco/recipes"
hidden "$prefix/bin/diloco-lua" run "$prefix/share/diloco/recipes/charlm.lua" \
    --set steps=3 --set model.dim=32 --set model.layers=1 --set model.heads=2 \
    --set data.batch=4 --set eval.every=3 --set eval.batches=1 \
    --out "$work/run" --quiet >"$tmp/run.out" 2>&1 ||
    { cat "$tmp/run.out" >&2; fail "diloco-lua run failed"; }
grep -q '"event":"summary".*"steps":3' "$tmp/run.out" || fail "no summary of 3 steps: $(cat "$tmp/run.out")"
[ -s "$work/run/metrics.jsonl" ] && [ -s "$work/run/model.safetensors" ] ||
    fail "the run left no metrics.jsonl or model.safetensors in $work/run"

step "a diloco-lua with no Lua files next to it says so (--version, and run naming LUA_PATH)"
mkdir -p "$work/lonely"
cp "$prefix/bin/diloco-lua" "$work/lonely/"
out=$(hidden "$work/lonely/diloco-lua" --version) || fail "lonely diloco-lua --version: $out"
echo "$out" | grep -q "^lua files: not found next to the executable (../share/lua/5.4); using package.path (LUA_PATH)" ||
    fail "lonely --version: $out"
# (LUA_PATH set to an empty directory: an install in /usr/local would be on Lua's default)
if out=$(hidden env LUA_PATH="$work/nothing/?.lua" "$work/lonely/diloco-lua" run \
    "$prefix/share/diloco/recipes/charlm.lua" 2>&1); then
    fail "lonely diloco-lua run succeeded without its Lua files: $out"
fi
echo "$out" | grep -q "diloco.cli: the Lua files of diloco (diloco/cli.lua, .*add 'PREFIX/share/lua/5.4/?.lua' to LUA_PATH" ||
    fail "lonely diloco-lua run: $out"

consumer_c='#include <diloco/diloco.h>
#include <stdio.h>
#include <string.h>
int main(void) {
    int64_t shape[2] = {2, 3};
    dlc_tensor *t = dlc_tensor_full(2, shape, 1.5f);
    if (!t) { fprintf(stderr, "%s\n", dlc_last_error()); return 1; }
    int ok = t->numel == 6 && t->data[5] == 1.5f && strcmp(dlc_version(), DLC_VERSION_STRING) == 0;
    printf("consumer %s %lld\n", dlc_version(), (long long)t->numel);
    dlc_tensor_release(t);
    return ok ? 0 : 1;
}'

step "a C consumer with pkg-config --cflags --libs diloco"
mkdir -p "$work/pc"
printf '%s\n' "$consumer_c" >"$work/pc/app.c"
flags=$(clean env PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs diloco) ||
    fail "pkg-config --cflags --libs diloco failed"
case "$flags" in *"$prefix"*) ;; *) fail "pkg-config flags do not point into the prefix: $flags" ;; esac
# shellcheck disable=SC2086
(cd "$work/pc" && clean cc -std=c11 -o app app.c $flags) || fail "the pkg-config consumer does not build ($flags)"
# no LD_LIBRARY_PATH: the flags' RPATH finds libdiloco.so under this non-default prefix
out=$(hidden ${preload:+env LD_PRELOAD=$preload} "$work/pc/app") ||
    fail "the pkg-config consumer fails without LD_LIBRARY_PATH (its RPATH): $out"
[ "$out" = "consumer $version 6" ] || fail "pkg-config consumer printed: $out"

step "a C consumer with find_package(diloco CONFIG)"
mkdir -p "$work/cm"
printf '%s\n' "$consumer_c" >"$work/cm/app.c"
cat >"$work/cm/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.21)
project(consumer C)
find_package(diloco $version CONFIG REQUIRED)
add_executable(app app.c)
target_link_libraries(app PRIVATE diloco::diloco)
EOF
clean cmake -S "$work/cm" -B "$work/cm/build" -DCMAKE_PREFIX_PATH="$prefix" >"$tmp/cm.log" 2>&1 &&
    clean cmake --build "$work/cm/build" >>"$tmp/cm.log" 2>&1 ||
    { cat "$tmp/cm.log" >&2; fail "the find_package consumer does not build"; }
out=$(hidden ${preload:+env LD_PRELOAD=$preload} "$work/cm/build/app") || fail "the find_package consumer fails: $out"
[ "$out" = "consumer $version 6" ] || fail "find_package consumer printed: $out"

step "the installed tree still works after being moved"
mv "$prefix" "$tmp/moved"
out=$(hidden "$tmp/moved/bin/diloco-lua" --version) || { mv "$tmp/moved" "$prefix"; fail "moved diloco-lua --version: $out"; }
moved_real=$(cd "$tmp/moved" && pwd -P)
pcout=$(clean env PKG_CONFIG_PATH="$tmp/moved/lib/pkgconfig" pkg-config --cflags diloco) || pcout="(pkg-config failed)"
mv "$tmp/moved" "$prefix"
echo "$out" | grep -qxF "lua files: $moved_real/share/lua/5.4 (installed)" || fail "moved --version: $out"
case "$pcout" in *"$tmp/moved/"*include*) ;; *) fail "moved diloco.pc: pkg-config --cflags gives $pcout" ;; esac

step "lua5.4 -e 'require \"diloco\"' with the installed module"
lpath="$prefix/share/lua/5.4/?.lua;$prefix/share/lua/5.4/?/init.lua"
cpath="$prefix/lib/lua/5.4/?.so"
out=$(hidden env LUA_PATH="$lpath" LUA_CPATH="$cpath" ${preload:+LD_PRELOAD=$preload} lua5.4 -e '
    local diloco = require "diloco"
    local y = diloco.nn.Linear(3, 2):forward(diloco.randn(4, 3))
    print(diloco.version, diloco.is_tensor(y), package.searchpath("diloco", package.cpath))') ||
    fail "require \"diloco\" with the installed module: $out"
[ "$out" = "$version	true	$prefix/lib/lua/5.4/diloco.so" ] || fail "require \"diloco\" printed: $out"

step "without its Lua files on LUA_PATH, diloco.nn is an error naming LUA_PATH"
if out=$(hidden env LUA_PATH="$work/nothing/?.lua" LUA_CPATH="$cpath" ${preload:+LD_PRELOAD=$preload} \
    lua5.4 -e 'local d = require "diloco"; print(d.nn)' 2>&1); then
    fail "diloco.nn without the Lua files did not fail: $out"
fi
echo "$out" | grep -q "diloco.nn: the Lua files of diloco (diloco/nn.lua, .*LUA_PATH" ||
    fail "diloco.nn without the Lua files: $out"

step "diloco.so exports luaopen_diloco only"
syms=$(nm -D --defined-only "$prefix/lib/lua/5.4/diloco.so" | awk '{print $3}')
[ "$syms" = "luaopen_diloco" ] || fail "diloco.so exports: $(echo "$syms" | head -5 | tr '\n' ' ')..."

step "uninstall after the prefix moved says what it could not find, and fails"
mv "$prefix" "$tmp/moved"
if out=$(cmake --build "$build" --target uninstall 2>&1); then
    mv "$tmp/moved" "$prefix"
    fail "uninstall of a moved prefix succeeded: $out"
fi
mv "$tmp/moved" "$prefix"
echo "$out" | grep -q "uninstall: none of the [0-9]* files of the last install is where it put them" ||
    fail "uninstall of a moved prefix said: $out"
[ -e "$prefix/bin/diloco-lua" ] || fail "the failed uninstall removed files"

step "the uninstall target removes every installed file"
cmake --build "$build" --target uninstall >"$tmp/uninstall.log" 2>&1 ||
    { cat "$tmp/uninstall.log" >&2; fail "uninstall failed"; }
left=$(find "$prefix" ! -type d)
[ -z "$left" ] || fail "uninstall left: $left"
for d in include/diloco share/diloco share/lua/5.4/diloco lib/cmake/diloco; do
    [ ! -e "$prefix/$d" ] || fail "uninstall left the directory PREFIX/$d"
done

if [ "${DILOCO_TEST_LUAROCKS:-1}" = 1 ]; then
    step "luarocks make builds the rockspec into a test tree"
    # luarocks builds in the directory it runs in: a copy of the checkout (without its
    # build trees, run directories and git metadata).
    rsrc="$tmp/rock-src"
    mkdir -p "$rsrc"
    for f in "$src"/*; do
        case "${f##*/}" in build* | runs) continue ;; esac
        [ "$f" = "$build" ] || cp -R "$f" "$rsrc/"
    done
    tree="$tmp/rocks"
    (cd "$rsrc" && clean env MAKEFLAGS=-j2 luarocks --lua-version 5.4 make --tree "$tree" \
        diloco-dev-1.rockspec) >"$tmp/rock.log" 2>&1 ||
        { tail -40 "$tmp/rock.log" >&2; fail "luarocks make failed"; }
    [ -e "$tree/lib/lua/5.4/diloco.so" ] || fail "the rock installed no lib/lua/5.4/diloco.so"
    [ ! -e "$tree/bin/diloco-lua" ] || fail "the rock installed the CLI too"
    out=$(cd "$work" && clean env LUA_PATH="$tree/share/lua/5.4/?.lua;;" LUA_CPATH="$tree/lib/lua/5.4/?.so" lua5.4 -e '
        local diloco = require "diloco"
        local x = diloco.randn(2, 3):requires_grad_()
        ;(x * x):sum():backward()
        print(diloco.version, type(diloco.optim.adamw), package.searchpath("diloco", package.cpath))') ||
        fail "require \"diloco\" from the rock: $out"
    [ "$out" = "$version	function	$tree/lib/lua/5.4/diloco.so" ] || fail "the rock's module printed: $out"
fi

step "all passed"
