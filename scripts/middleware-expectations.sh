#!/usr/bin/env bash
# One behaviour for every middleware: runs the shared expectations
# (tests/data/middleware-expectations.json) against the Rust tower layer,
# Go net/http, and Python WSGI and ASGI, one after the other, and fails if
# any of them answers differently (a status code, header or body). See
# docs/middleware.md. Needs what the Go and Python suites need (their
# run-tests.sh install it); reuses target/release/libapf.so when present.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

echo "== tower"
cargo test -q --features tower --test end_to_end middleware_expectations::

lib="$root/target/release/libapf.so"
if [ ! -f "$lib" ]; then
  cargo build --release -p libapf --features test-hooks
fi

echo "== Go net/http"
(
  cd bindings/go
  export CGO_ENABLED=1
  PKG_CONFIG_PATH="$("$root/scripts/dev-pkgconfig.sh")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export PKG_CONFIG_PATH
  go test -count=1 -run 'TestMiddlewareMeetsTheSharedExpectations' .
)

echo "== Python WSGI and ASGI"
(
  cd bindings/python
  APF_LIBRARY="${APF_LIBRARY:-$lib}" "${PYTHON:-python3}" -m pytest -q tests/test_expectations.py
)
echo "every middleware meets the shared expectations"
