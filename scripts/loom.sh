#!/usr/bin/env bash
# Runs every loom model: the #[cfg(loom)] unit-test modules of the library and
# the tests/loom_*.rs integration tests, in a target directory of their own
# (--cfg loom rebuilds everything).
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg loom -C debug-assertions"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/loom"
tests=()
for f in tests/loom_*.rs; do
  [ -e "$f" ] && tests+=(--test "$(basename "$f" .rs)")
done
cargo test --release -p apf --lib "${tests[@]}" -- --test-threads=2 "$@"
