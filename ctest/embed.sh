#!/bin/sh
# ctest `embed_host`: a host program with its own trainer (ctest/embed_host.c) built the
# way a user builds one, against the INSTALLED headers and libdiloco.so (pkg-config
# --cflags --libs diloco from a fresh prefix, a minimal environment, the build tree out
# of its paths), then run: a server in its process, three learner processes of itself.
#   sh ctest/embed.sh SOURCE_DIR BUILD_DIR
# DILOCO_TEST_PRELOAD (the sanitizer runtimes of an instrumented build) is preloaded into
# the program, which loads an instrumented libdiloco.so.
set -eu
src=$(cd "$1" && pwd -P)
build=$(cd "$2" && pwd -P)
preload=${DILOCO_TEST_PRELOAD:-}
tmp=$(mktemp -d /tmp/diloco-embed-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix="$tmp/prefix"
fail() {
    echo "embed test: FAIL: $*" >&2
    exit 1
}
clean() { env -i PATH=/usr/bin:/bin HOME="$tmp" LANG=C.UTF-8 ${ASAN_OPTIONS:+ASAN_OPTIONS=$ASAN_OPTIONS} "$@"; }

echo "embed test: cmake --install $build --prefix $prefix"
cmake --install "$build" --prefix "$prefix" >"$tmp/install.log" || { cat "$tmp/install.log" >&2; fail "install"; }
for h in client.h rt.h net.h run.h; do
    [ -e "$prefix/include/diloco/$h" ] || fail "not installed: PREFIX/include/diloco/$h"
done
flags=$(clean env PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs diloco) ||
    fail "pkg-config --cflags --libs diloco failed"
cp "$src/ctest/embed_host.c" "$tmp/"
(cd "$tmp" && clean cc -std=c11 -O2 -Wall -Wextra -Werror -o embed_host embed_host.c $flags -lm) ||
    fail "embed_host.c does not build against the installed headers and library ($flags)"
if readelf -d "$tmp/embed_host" | grep -F -e "$build" -e "$src" >/dev/null; then
    fail "embed_host links into the build or source tree"
fi
(cd "$tmp" && clean ${preload:+env LD_PRELOAD=$preload} ./embed_host) || fail "embed_host failed (above)"
