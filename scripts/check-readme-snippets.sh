#!/usr/bin/env bash
# The README's Quick start snippets, as written, built (and, where they make
# a server, run) outside the repository, as a new user would: each is
# spliced into a harness (tests/readme/) that supplies what the snippet says
# is yours (authenticate, your handlers) and nothing it should have said
# itself. A snippet that stops compiling or working fails here.
#   scripts/check-readme-snippets.sh [go ...]   (default: every language)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
extract() { "${PYTHON:-python3}" tests/readme/extract.py "$@"; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
langs=("$@")
[ ${#langs[@]} -gt 0 ] || langs=(rust go python cpp c)
README_FLOWCONTROL="$(cat tests/readme/flowcontrol.yaml)"
export README_FLOWCONTROL
PKG_CONFIG_PATH="$("$root/scripts/dev-pkgconfig.sh")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH

lib="$root/target/release/libapf.so"
[ -f "$lib" ] || cargo build --release -p libapf

for lang in "${langs[@]}"; do
  case "$lang" in
  rust)
    # Compiles with exactly the dependencies the README names.
    echo "== Rust: the README's tower snippet compiles in a dependent crate and classifies a watch"
    mkdir -p "$work/rust/src"
    extract rust tests/readme/main.rs.in >"$work/rust/src/main.rs"
    deps="$("${PYTHON:-python3}" - <<'PY'
import re
text = open("README.md").read()
# The Rust paragraph's dependency line: `name = { ... }` or `name = "v"`.
para = text[text.index("**Rust**, with the tower layer"):text.index("```rust")]
for dep in re.findall(r"`([a-z][a-z0-9_-]* = [^`]+)`", para):
    print(" ".join(dep.split()))
PY
)"
    deps="${deps//\"…\"/\"$root\"}"
    cat >"$work/rust/Cargo.toml" <<TOML
[package]
name = "readme-snippet"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
$deps

[workspace]
TOML
    echo "$deps" | sed 's/^/   /'
    cp Cargo.lock "$work/rust/Cargo.lock" # the versions CI already has
    (cd "$work/rust" && CARGO_TARGET_DIR="$root/target/readme-snippet" cargo run --quiet)
    ;;
  python)
    echo "== Python: the README's ASGI snippet serves a request and /metrics"
    extract python tests/readme/snippet.py.in >"$work/snippet.py"
    (cd "$work" && PYTHONPATH="$root/bindings/python" APF_LIBRARY="$lib" "${PYTHON:-python3}" snippet.py)
    ;;
  cpp)
    echo "== C++: the README's snippet compiles and serves"
    extract cpp tests/readme/snippet.cpp.in >"$work/snippet.cpp"
    # shellcheck disable=SC2046
    "${CXX:-c++}" -std=c++17 -Wall -Werror -I"$root/bindings/cpp/include" "$work/snippet.cpp" \
      $(pkg-config --cflags --libs apf) -o "$work/snippet-cpp"
    "$work/snippet-cpp"
    ;;
  c)
    echo "== C: the README's snippet compiles and serves"
    extract c tests/readme/snippet.c.in >"$work/snippet.c"
    # shellcheck disable=SC2046
    "${CC:-cc}" -std=c11 -Wall -Werror "$work/snippet.c" $(pkg-config --cflags --libs apf) -o "$work/snippet-c"
    "$work/snippet-c"
    ;;
  go)
    # The Go wiring, flooded: /metrics and the dumps must answer 200 while
    # the middleware refuses (README "Go"; docs/middleware.md).
    echo "== Go: the README's net/http wiring under a flood"
    mkdir -p "$work/go"
    extract go tests/readme/main.go.in --replace '":8080"' listenAddr >"$work/go/main.go"
    cat >"$work/go/go.mod" <<MOD
module readme.example/server

go 1.24

require github.com/libapf/apf/bindings/go v0.0.0

replace github.com/libapf/apf/bindings/go => $root/bindings/go
MOD
    (
      cd "$work/go"
      export CGO_ENABLED=1
      go build -o server .
      timeout 120 ./server
    )
    ;;
  *)
    echo "check-readme-snippets.sh: unknown language $lang" >&2
    exit 2
    ;;
  esac
done
echo "the README's snippets build and work"
