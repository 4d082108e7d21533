#!/usr/bin/env bash
# Runs every loom model (tests/loom_*.rs and #[cfg(loom)] unit tests) in a
# target directory of its own, since --cfg loom rebuilds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom -C debug-assertions"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}/loom"
cargo test --release --lib --tests -- --test-threads=2 "$@"
