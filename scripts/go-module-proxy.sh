#!/usr/bin/env bash
# Builds a file-based Go module proxy (GOPROXY=file://DIR) holding the Go
# modules of this repository as a release tag would publish them:
# github.com/libapf/apf/bindings/go and .../bindings/go/k8sfq at vVERSION
# (the crate's version), each go.mod as published (no replace directive;
# the sibling module required at the same version), each zip with the
# module's tracked files only (no nested module). A consumer then resolves
# them by their module paths, as from the real proxy:
#   GOPROXY=file://DIR,https://proxy.golang.org GONOSUMDB=github.com/libapf/* go get ...
#   scripts/go-module-proxy.sh DIR      prints the version
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
out="$1"
version="v$(sed -n 's/^version = "\(.*\)"$/\1/p' "$root/Cargo.toml" | head -1)"
base=github.com/libapf/apf/bindings/go
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

publish() { # module path, directory in the repository, nested modules to leave out
  local mod="$1" dir="$2"
  shift 2
  local at="$out/$mod/@v" tree="$stage/$mod@$version"
  mkdir -p "$at" "$tree"
  (cd "$root/$dir" && git ls-files -- . "${@/#/:!}") | while read -r f; do
    mkdir -p "$tree/$(dirname "$f")"
    cp "$root/$dir/$f" "$tree/$f"
  done
  # As published: no replace (a tag's go.mod would keep it, but a consumer
  # ignores a dependency's replace anyway), siblings at this version.
  sed -e '/^replace /d' -e "s|^\(\s*$base\) v0\.0\.0$|\1 $version|" \
    "$root/$dir/go.mod" >"$tree/go.mod"
  cp "$tree/go.mod" "$at/$version.mod"
  printf '{"Version":"%s","Time":"2026-01-01T00:00:00Z"}\n' "$version" >"$at/$version.info"
  echo "$version" >"$at/list"
  rm -f "$at/$version.zip"
  (cd "$stage" && zip -qrXD "$at/$version.zip" "$mod@$version")
}

publish "$base" bindings/go k8sfq k8scompare
publish "$base/k8sfq" bindings/go/k8sfq
echo "$version"
