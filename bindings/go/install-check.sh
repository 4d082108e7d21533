#!/usr/bin/env bash
# The Go part of scripts/install-checks.sh: builds a program against the
# libapf installed in PREFIX (pkg-config, -tags apf_static), the binding
# taken by a replace directive as docs/install.md describes, moves the
# binary to another directory, deletes PREFIX, and runs it.
#   bindings/go/install-check.sh PREFIX WORKDIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="$1"
work="$2"
mkdir -p "$work/src" "$work/elsewhere"
cp "$here/installcheck/main.go.txt" "$work/src/main.go"
cat >"$work/src/go.mod" <<MOD
module installcheck

go 1.24

require github.com/libapf/apf/bindings/go v0.0.0

replace github.com/libapf/apf/bindings/go => $here
MOD
export CGO_ENABLED=1
# A build cache of its own: Go's cache does not key cgo links on what
# pkg-config printed, so a cache shared with an earlier check would link the
# libapf.a of a prefix that no longer exists.
export GOCACHE="$work/gocache"
(cd "$work/src" &&
  PKG_CONFIG_PATH="$prefix/lib/pkgconfig" go build -tags apf_static -o "$work/app" .)
mv "$work/app" "$work/elsewhere/app"
rm -rf "$prefix"
if ldd "$work/elsewhere/app" | grep -q libapf; then
  echo "the static build still needs libapf.so" >&2
  exit 1
fi
"$work/elsewhere/app"
