#!/usr/bin/env bash
# Runs every test of libapf: installs what is missing (idempotently), then the
# Rust unit/integration/property tests (the real-thread soak among them), the
# loom models, the shuttle schedules, the soak under ThreadSanitizer, the fuzz
# targets for a short time, and the binding tests. `.ci/run` calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never

step() { printf '\n==> %s\n' "$*"; }

step "rust: format and lints"
cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo clippy --all-targets --features tower -- -D warnings

step "rust: unit, integration and property tests"
# Benchmarks are compiled by clippy --all-targets above; running them in
# test mode would only repeat their (debug-build) set-up. Both workspace
# members: the library apf and the tool apf-cli.
cargo test --lib --bins --tests --examples
cargo test --doc -p apf --features simulator

step "rust: API documentation (rustdoc with warnings as errors)"
# The crate is #![warn(missing_docs)]: with -D warnings an undocumented
# public item, a broken or private intra-doc link fails here. The features
# docs.rs builds with (Cargo.toml [package.metadata.docs.rs]).
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p apf --features tower,simulator
scripts/check-doc-names.sh

step "rust: both crates (apf, then apf-cli against the packaged apf) pass cargo publish --dry-run"
# What `cargo publish` would do short of the upload: package each crate and
# build it from its package alone (apf-cli against the packaged apf), so a
# file missing from `include` or a dependency only the workspace provides
# fails here. The C API crates (capi/: apf-capi, libapf) are publish =
# false: the C library is installed from the repository (scripts/install.sh).
# Cargo extracts the packaged apf into a registry directory of its own
# (~/.cargo/registry/src/-<hash>/apf-<version>) and does not extract it
# again while that directory exists, so a second run at the same version
# would build apf-cli against the first run's sources: remove the
# extracted copies of our own crates (never crates.io's) first.
find "${CARGO_HOME:-$HOME/.cargo}/registry/src" -mindepth 2 -maxdepth 2 -type d \
  -path '*/registry/src/-*/apf-*' -exec rm -rf {} + 2>/dev/null || true
cargo publish --dry-run -p apf -p apf-cli --allow-dirty --quiet

step "tower layer: unit tests, the loopback load test, and the adaptive limit's real-server check"
cargo test --features tower --lib tower::
cargo test --features tower --test end_to_end tower_load::
# ~7 s: a backend that slows past K in flight, behind a fixed limit 2x too
# high and behind the adaptive limit (the Go middleware's twin runs in
# bindings/go/run-tests.sh).
cargo test --features tower --test end_to_end adaptive_tower::
cargo test --doc --features tower tower

step "loom models"
scripts/loom.sh

step "shuttle: randomised schedules of the queueset"
scripts/shuttle.sh

step "ThreadSanitizer: the real-thread soak (tests/end_to_end/soak.rs)"
scripts/tsan.sh

step "fuzz targets (short differential runs)"
scripts/fuzz-smoke.sh "${FUZZ_SECONDS:-15}"

step "operator assets: Prometheus alert rules (promtool check + test)"
scripts/check-deploy.sh

step "apf simulate's report page renders in headless Chromium"
scripts/check-report-page.sh

step "C ABI: header is what cbindgen generates"
scripts/check-header.sh

step "C binding (warnings as errors, then ASan + UBSan)"
bindings/c/run-tests.sh

step "C++ binding (GoogleTest, plain and sanitized)"
bindings/cpp/run-tests.sh

step "Go binding (go test -race)"
bindings/go/run-tests.sh

step "Python binding (pytest)"
bindings/python/run-tests.sh

step "one behaviour for every middleware: tower, Go net/http, Python WSGI and ASGI"
scripts/middleware-expectations.sh

step "the README's snippets as written: Rust, Go (under a flood), Python, C++ and C"
scripts/check-readme-snippets.sh

step "install: C, C++, Python, Go and Rust from outside the repository"
scripts/install-checks.sh
