#!/usr/bin/env bash
# Build libapf and run the Go binding's tests: go vet, `go test -race`
# (real goroutine concurrency against the C library), then the `-tags debug`
# build, which forces a garbage collection inside every call into C so
# lifetime mistakes fail at once. Then the k8sfq module (libapf behind
# k8s.io/apiserver's own fair-queuing interfaces):
# its tests against Kubernetes' APF controller, plus one short pass of its
# controller benchmark so that it keeps running. The module cache persists
# between runs (GOMODCACHE); GOFLAGS=-mod=mod lets go fetch what go.sum
# lists. The Kubernetes comparison (k8scompare/, a separate module) is not
# run here: see run-compare.sh.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

if ! command -v go >/dev/null 2>&1; then
    if command -v apt-get >/dev/null 2>&1; then
        echo "run-tests.sh: installing Go (golang-go)" >&2
        apt-get install -y golang-go >/dev/null || { apt-get update >/dev/null && apt-get install -y golang-go >/dev/null; }
    fi
fi
command -v go >/dev/null 2>&1 || { echo "run-tests.sh: Go 1.24 or newer is required" >&2; exit 1; }
# go.mod asks for 1.24 (cgo noescape/nocallback), k8sfq's for 1.26 (its
# k8s.io/apiserver v0.37 requires it); a Go 1.21+ toolchain fetches the
# toolchain it needs by itself through the module proxy.
export CGO_ENABLED=1
# The checkout's libapf, through the same pkg-config lookup as an installed one.
PKG_CONFIG_PATH="$("$root/scripts/dev-pkgconfig.sh")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH

(cd "$root" && cargo build --release --lib --features test-hooks)

cd "$here"
go vet ./...
go test -race -count=1 -timeout 300s ./...
go test -race -tags debug -short -count=1 -timeout 300s ./...

# k8sfq: first run on a fresh machine downloads k8s.io/apiserver and
# client-go and builds them (about 2-3 minutes on 2 cores); later runs
# reuse the module and build caches.
cd "$here/k8sfq"
export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod"
go vet ./...
go test -count=1 -timeout 600s -bench ControllerHandle -benchtime=200x ./...
# Kubernetes' own queueset tests (queueset_test.go of the k8s.io/apiserver
# version go.mod requires, taken from the module cache at test time, never
# committed) against the factory; see the script for its two edits.
"$here/k8sfq/testdata/k8s-queueset/run.sh"
