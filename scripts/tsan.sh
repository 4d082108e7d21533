#!/usr/bin/env bash
# Runs the real-thread soak (tests/end_to_end/soak.rs) under ThreadSanitizer: nightly
# Rust, std rebuilt with the sanitizer, a target directory of its own.
# TSAN_OPTIONS=halt_on_error=1 fails on the first report. SOAK_SECONDS sets
# each soak's length (default 3 here: TSan slows the threads ~5-15x).
set -euo pipefail
cd "$(dirname "$0")/.."
target=x86_64-unknown-linux-gnu
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  rustup toolchain install nightly --profile minimal --component rust-src
elif ! rustup component list --toolchain nightly --installed | grep -q '^rust-src'; then
  rustup component add rust-src --toolchain nightly
fi
export RUSTFLAGS="-Zsanitizer=thread"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/tsan"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
export SOAK_SECONDS="${SOAK_SECONDS:-3}"
cargo +nightly test -p apf -Zbuild-std --target "$target" --no-default-features \
  --test end_to_end soak:: -- --test-threads=1 "$@"
