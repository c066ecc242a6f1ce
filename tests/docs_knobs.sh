#!/bin/bash
# docs/KNOBS.md lists every knob of the registry (collinfo --markdown prints them all).
# Fails, naming each one, when a knob is missing. A row whose text differs from collinfo's (a new
# default or description) is reported but does not fail: regenerate the table with
# `collinfo --markdown`.
# usage: docs_knobs.sh COLLINFO KNOBS_MD
set -euo pipefail
collinfo=$1 doc=$2
[ -r "$doc" ] || { echo "cannot read $doc"; exit 1; }
table=$("$collinfo" --markdown)
missing=0 stale=0 count=0
while IFS= read -r row; do
  name=$(sed -n 's/^| `\([A-Za-z_0-9]*\)`.*/\1/p' <<<"$row")
  [ -n "$name" ] || continue
  count=$((count + 1))
  if ! grep -q "^| \`$name\` |" "$doc"; then
    echo "$doc does not document $name"; missing=1
  elif ! grep -qxF -- "$row" "$doc"; then
    echo "note: the row of $name in $doc differs from collinfo --markdown"; stale=1
  fi
done <<<"$table"
[ "$count" -gt 0 ] || { echo "collinfo --markdown listed no knobs"; exit 1; }
[ "$stale" = 0 ] || echo "note: regenerate the table with: collinfo --markdown"
[ "$missing" = 0 ] && echo "every knob ($count) is documented in $doc"
exit "$missing"
