#!/bin/bash
# The README's knob table lists every knob of the registry (collinfo prints them).
# usage: readme_knobs.sh COLLINFO README
set -euo pipefail
missing=0
while read -r name; do
  if ! grep -q "\`$name\`" "$2"; then echo "README.md does not document $name"; missing=1; fi
done < <("$1" --markdown | sed -n 's/^| `\([A-Z_0-9]*\)`.*/\1/p')
[ "$missing" = 0 ] && echo "every knob is documented"
exit "$missing"
