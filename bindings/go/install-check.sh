#!/usr/bin/env bash
# The Go part of scripts/install-checks.sh. The modules come as a release
# tag would publish them: from a file-based module proxy built from the
# repository (scripts/go-module-proxy.sh), resolved by their module paths,
# with no replace directive. Then:
#   1. bindings/go/k8sfq resolves (go get; its Kubernetes dependencies from
#      the module cache, else the network proxy);
#   2. a program built against the libapf installed in PREFIX through
#      pkg-config runs with no LD_LIBRARY_PATH (apf.pc's run path);
#   3. the same built with -tags apf_static, moved to another directory,
#      runs after PREFIX is deleted.
#   bindings/go/install-check.sh PREFIX WORKDIR
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
prefix="$1"
work="$2"
mkdir -p "$work/src" "$work/elsewhere"
version="$("$here/../../scripts/go-module-proxy.sh" "$work/proxy")"
# Our modules only from the file proxy; everything else from the module
# cache (a valid file proxy itself), else the network. A module cache of its
# own, so that no earlier run's copy of vX.Y.Z stands in for this one.
GOPROXY="file://$work/proxy,file://$(go env GOMODCACHE)/cache/download,$(go env GOPROXY)"
export GOPROXY GOMODCACHE="$work/modcache" GONOSUMDB="github.com/libapf/*"
export GOFLAGS="-mod=mod -modcacherw" # -modcacherw: the work directory can be removed
cp "$here/installcheck/main.go.txt" "$work/src/main.go"
printf 'module installcheck\n\ngo 1.24\n' >"$work/src/go.mod"
(cd "$work/src" && go get "github.com/libapf/apf/bindings/go@$version" \
  "github.com/libapf/apf/bindings/go/k8sfq@$version" >"$work/go-get.log" 2>&1) ||
  { cat "$work/go-get.log" >&2; exit 1; }
! grep -q '^replace' "$work/src/go.mod" || { echo "go.mod has a replace directive" >&2; exit 1; }
(cd "$work/src" && go list -m github.com/libapf/apf/bindings/go github.com/libapf/apf/bindings/go/k8sfq)
export CGO_ENABLED=1
# A build cache of its own: Go's cache does not key cgo links on what
# pkg-config printed, so a cache shared with an earlier check would link the
# libapf.a of a prefix that no longer exists.
export GOCACHE="$work/gocache"
(cd "$work/src" &&
  PKG_CONFIG_PATH="$prefix/lib/pkgconfig" go build -o "$work/app-shared" .)
ldd "$work/app-shared" | grep -q "libapf.so.*$prefix" || {
  echo "the shared build does not load the installed libapf.so" >&2
  exit 1
}
echo "shared build (apf.pc's run path, no LD_LIBRARY_PATH):"
env -u LD_LIBRARY_PATH "$work/app-shared"
(cd "$work/src" &&
  PKG_CONFIG_PATH="$prefix/lib/pkgconfig" go build -tags apf_static -o "$work/app" .)
mv "$work/app" "$work/elsewhere/app"
rm -rf "$prefix"
if ldd "$work/elsewhere/app" | grep -q libapf; then
  echo "the static build still needs libapf.so" >&2
  exit 1
fi
echo "static build (-tags apf_static), moved, prefix deleted:"
"$work/elsewhere/app"
