#!/usr/bin/env bash
# Fails when two public types of the apf crate share a name in its API
# documentation (issue 25: each public type name unique, so a name in a
# message, a doc or a search says which type it is). Reads the pages
# rustdoc wrote (run `cargo doc --no-deps -p apf` first; test-all.sh does),
# skipping the redirect pages it writes for private module paths.
set -euo pipefail
cd "$(dirname "$0")/../target/doc/apf"
dups="$(find . \( -name 'struct.*.html' -o -name 'enum.*.html' -o -name 'type.*.html' \
    -o -name 'trait.*.html' -o -name 'union.*.html' \) -print0 |
  xargs -0 grep -L 'Redirecting to' |
  sed -E 's#^\./(.*)/(struct|enum|type|trait|union)\.([^.]*)\.html$#\3 \1#' |
  sort | awk '{n[$1]++; at[$1] = at[$1] " " $2} END {for (t in n) if (n[t] > 1) print t ":" at[t]}')"
if [ -n "$dups" ]; then
  echo "public type names used twice (name: modules):" >&2
  echo "$dups" >&2
  exit 1
fi
echo "every public type name is unique"
