#!/bin/sh
# ctest `abi_symbols`: libdiloco.so exports exactly the documented C API, the functions
# declared DLC_API in core/, net/ and rt/include/diloco/*.h (the engine, the transport,
# the drivers and the embedding API), and diloco.so (the Lua module) exports
# luaopen_diloco only.  A function added to a header but hidden, or exported without a
# declaration (an internal helper, a target_clones resolver), fails here by name.
#   sh ctest/abi_symbols.sh SOURCE_DIR LIBDILOCO.so DILOCO_MODULE.so
set -eu
src=$1
lib=$2
module=$3
tmp=$(mktemp -d /tmp/diloco-abi.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# Every DLC_API declaration, one line each: the declared name is the last identifier
# before its parameter list (a function) or its ';' (an object).  A name in parentheses,
# "(dlc_client_new)(...)", is a function a macro of the same name calls (client.h): the
# parentheses go first.
cat "$src"/core/include/diloco/*.h "$src"/net/include/diloco/*.h "$src"/rt/include/diloco/*.h | grep -v '^[[:space:]]*#[[:space:]]*define[[:space:]]*DLC_API' |
    tr '\n' ' ' | sed -E 's/\(([A-Za-z_][A-Za-z0-9_]*)\)[[:space:]]*\(/ \1(/g' | grep -o 'DLC_API[^;(]*[;(]' |
    sed -E 's/[[:space:]]*[;(]$//; s/.*[^A-Za-z0-9_]([A-Za-z_][A-Za-z0-9_]*)$/\1/' |
    sort -u >"$tmp/headers"
nm -D --defined-only "$lib" | awk '{print $NF}' | sort -u >"$tmp/exported"

# The header scan must see the API, or the comparison below proves nothing.
for known in dlc_tensor_new dlc_version dlc_status_str dlc_last_error dlc_net_new dlc_lrt_new dlc_client_new; do
    grep -qx "$known" "$tmp/headers" || { echo "abi_symbols: $known not found in the headers' DLC_API declarations (scan broken)"; exit 1; }
done
n=$(wc -l <"$tmp/headers")

status=0
if ! cmp -s "$tmp/headers" "$tmp/exported"; then
    hidden=$(comm -23 "$tmp/headers" "$tmp/exported")
    extra=$(comm -13 "$tmp/headers" "$tmp/exported")
    [ -z "$hidden" ] || echo "abi_symbols: declared DLC_API in {core,net,rt}/include/diloco/*.h but not exported by $lib:" $hidden
    [ -z "$extra" ] || echo "abi_symbols: exported by $lib but not declared DLC_API in any header:" $extra
    status=1
fi
msyms=$(nm -D --defined-only "$module" | awk '{print $NF}' | tr '\n' ' ')
if [ "$msyms" != "luaopen_diloco " ]; then
    echo "abi_symbols: $module must export luaopen_diloco only, but exports: $msyms"
    status=1
fi
[ $status -ne 0 ] || echo "abi_symbols: libdiloco.so exports exactly the $n DLC_API functions; diloco.so only luaopen_diloco"
exit $status
