#!/usr/bin/env bash
# Fails when include/apf.h is not what cbindgen generates from capi/src/ (the apf-capi crate).
# Installs cbindgen first if it is missing (pinned, so the output is stable).
#   scripts/check-header.sh          check (CI)
#   scripts/check-header.sh --write  regenerate include/apf.h
set -euo pipefail
cd "$(dirname "$0")/.."

CBINDGEN_VERSION=0.29.4

have_cbindgen() {
  command -v cbindgen >/dev/null 2>&1 &&
    [ "$(cbindgen --version 2>/dev/null)" = "cbindgen $CBINDGEN_VERSION" ]
}

if ! have_cbindgen; then
  echo "installing cbindgen $CBINDGEN_VERSION (one-time, about a minute)" >&2
  cargo install cbindgen --locked --version "$CBINDGEN_VERSION" >&2
fi

generate() {
  # -q: cbindgen warns about every non-FFI item of the crate it skips.
  cbindgen -q --config cbindgen.toml --crate apf-capi --output "$1" 2>/dev/null
}

if [ "${1:-}" = "--write" ]; then
  generate include/apf.h
  echo "include/apf.h regenerated"
  exit 0
fi

fresh="$(mktemp)"
trap 'rm -f "$fresh"' EXIT
generate "$fresh"
if ! diff -u include/apf.h "$fresh"; then
  echo "include/apf.h is stale: run scripts/check-header.sh --write and commit it" >&2
  exit 1
fi
echo "include/apf.h is up to date"
