#!/bin/bash
# The include check: every quoted #include is spelled from the repository root (the public API
# header as its users spell it, "collective/collective.h", from include/) and points into the
# including file's own layer or a layer below it, never up a layer nor across to a sibling.
# usage: check_includes.sh ROOT TABLE   (TABLE: the build's coll_layers.tsv, from cmake/CollLayers.cmake)
# Prints one line per offending include (file:line, the include, why) and exits 1 if there is any.
set -euo pipefail
root=$1 table=$(realpath "$2")
cd "$root"
mapfile -t files < <(find include src algorithms transports bench tests -type f \
  \( -name '*.h' -o -name '*.cc' -o -name '*.c' -o -name '*.cu' -o -name '*.cuh' \) \
  -not -path 'bench/results/*' 2>/dev/null | sort)
if [ ${#files[@]} -eq 0 ]; then echo "check_includes: no source files under $root" >&2; exit 1; fi
awk -v table="$table" '
  BEGIN {
    FS = "\t"
    while ((getline line < table) > 0) {
      split(line, field, "\t")
      layer = field[1]
      n = split(field[2], uses, " ")
      for (i = 1; i <= n; i++) allowed[layer, uses[i]] = 1
      n = split(field[3], dirs, " ")
      for (i = 1; i <= n; i++) owner[dirs[i]] = layer
    }
    close(table)
    if (length(owner) == 0) { print "check_includes: empty layer table " table; broken = 1; exit 2 }
    bad = 0
  }
  # The layer of a path: its longest folder prefix in the table ("" when none).
  function layerOf(path,    dir) {
    dir = path
    while (sub(/\/[^\/]*$/, "", dir)) if (dir in owner) return owner[dir]
    return ""
  }
  function report(why) { printf "%s:%d: #include \"%s\": %s\n", FILENAME, FNR, target, why; bad = 1 }
  FNR == 1 { from = layerOf(FILENAME) }
  /^[ \t]*#[ \t]*include[ \t]*"/ {
    target = $0
    sub(/^[^"]*"/, "", target); sub(/".*$/, "", target)
    if ((getline probe < target) >= 0) close(target)
    else if ((getline probe < ("include/" target)) >= 0) { close("include/" target); target = "include/" target }
    else { report("no such file from the repository root (spell includes from the root)"); next }
    to = layerOf(target)
    if (from == "" || to == "") { report("outside every layer of the table"); next }
    if (to == from || (from, to) in allowed) next
    if ((to, from) in allowed) report("points up: layer " from " may not include layer " to " (" to " uses " from ")")
    else report("points across: layer " from " may not include its sibling layer " to)
  }
  END {
    if (broken) exit 2
    if (bad) { print "check_includes: layering violated (cmake/CollLayers.cmake says who may use whom)"; exit 1 }
    print "check_includes: " NR " lines of " ARGC - 1 " files, every include points down or within its layer"
  }
' "${files[@]}"
