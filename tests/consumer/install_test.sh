#!/bin/bash
# Installs the build into a temporary prefix, then builds and runs a C99 consumer twice: through
# the CMake package (find_package(collective) -> collective::collective) and through pkg-config,
# and runs the installed collinfo and collrun.
# usage: install_test.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
cmake -S "$src/tests/consumer" -B "$tmp/cmake-build" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cmake-build" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/cmake-build/consumer"
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
libdir=$(pkg-config --variable=libdir collective)
cc -std=c99 -Wall -Wextra -pedantic -Werror "$src/tests/consumer/consumer.c" -o "$tmp/consumer-pc" \
  $(pkg-config --cflags --libs collective)
LD_LIBRARY_PATH="$libdir" "$tmp/consumer-pc"
# The installed tools: collinfo names this version, collrun launches ranks.
# (Its output is kept, not piped: grep -q would exit at the first match and, under pipefail, the
# SIGPIPE collinfo gets while still writing would fail the test.)
info=$("$tmp/prefix/bin/collinfo") || { echo "installed collinfo does not run"; exit 1; }
grep -q "libcollective" <<<"$info" || { echo "installed collinfo does not name libcollective"; exit 1; }
"$tmp/prefix/bin/collrun" -np 2 /bin/true || { echo "installed collrun does not launch"; exit 1; }
echo "install test: CMake package and pkg-config consumers ok"
