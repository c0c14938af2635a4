#!/bin/sh
# Configure without MPI (as on a machine without libopenmpi-dev): configure says what is
# not built and which packages would build it, and lua/lmpi.c compiles to its fallback
# (diloco.mpi.available = false).  Usage: without_mpi.sh SOURCE_DIR BUILD_DIR
set -eu
src=$1
dir=$2/no-mpi-check
rm -rf "$dir"
out=$(cmake -S "$src" -B "$dir" -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON -DDLC_BUILD_TESTS=OFF -DDLC_BUILD_BENCH=OFF 2>&1)
echo "$out" | grep -q "MPI not found: islands of several ranks are not built (install libopenmpi-dev and" || {
    echo "configure without MPI did not name the packages:"; echo "$out"; exit 1; }
(cd "$dir" && make lua/lmpi.c.o >/dev/null) || { echo "lua/lmpi.c does not compile without MPI"; exit 1; }
nm "$dir/CMakeFiles/diloco_lua_obj.dir/lua/lmpi.c.o" | grep -q "U MPI_" && { echo "lmpi.c.o calls MPI without it"; exit 1; }
echo "without MPI: configure names the packages, lua/lmpi.c builds its fallback"
rm -rf "$dir"
