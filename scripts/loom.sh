#!/usr/bin/env bash
# Runs every loom model: the library's #[cfg(all(test, loom))] `loom_tests`
# modules, each beside the protocol it checks (docs/design.md, "Where each
# kind of test goes"), in a target directory of their own (--cfg loom
# rebuilds everything). Arguments go to the test binary: a name filter
# (`scripts/loom.sh configs::ring_full_fallback`) or libtest options.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom -C debug-assertions"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/loom"
cargo test --release -p apf --lib -- --test-threads=2 "$@"
