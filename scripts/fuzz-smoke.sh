#!/usr/bin/env bash
# Runs every fuzz target in fuzz/fuzz_targets for a short while without a
# sanitizer (works on stable Rust). Installs cargo-fuzz when it is missing.
#
#   scripts/fuzz-smoke.sh [SECONDS_PER_TARGET]   (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-20}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

shopt -s nullglob
targets=(fuzz/fuzz_targets/*.rs)
if [ ${#targets[@]} -eq 0 ]; then
    echo "fuzz-smoke: no targets in fuzz/fuzz_targets" >&2
    exit 1
fi
for path in "${targets[@]}"; do
    target="$(basename "$path" .rs)"
    echo "fuzz-smoke: $target for ${seconds}s"
    cargo fuzz run -s none "$target" -- -max_total_time="$seconds"
done
