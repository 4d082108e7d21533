#!/usr/bin/env bash
# Runs the shuttle tests: the library's #[cfg(all(test, shuttle))]
# `shuttle_tests` modules (src/queueset/shuttle_tests/,
# src/workqueue/shuttle_tests.rs), randomised schedules of many threads
# over the queueset and the FIFO workqueue, under --cfg shuttle
# (src/sync.rs swaps in shuttle's types), in a target directory of their
# own. SHUTTLE_ITERATIONS schedules per test (default 3000: about 6 s of
# schedules on 2 cores, after the build); set it higher for a longer search,
# e.g. SHUTTLE_ITERATIONS=200000.
set -euo pipefail
cd "$(dirname "$0")/.."
export RUSTFLAGS="--cfg shuttle -C debug-assertions"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/shuttle"
export SHUTTLE_ITERATIONS="${SHUTTLE_ITERATIONS:-3000}"
cargo test -p apf --release --no-default-features --lib shuttle_tests -- --test-threads=2 "$@"
