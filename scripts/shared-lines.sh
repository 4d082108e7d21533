#!/usr/bin/env bash
# Which cache lines a request takes from another core's cache, and its
# atomic read-modify-writes, by source line: two threads take turns, one
# request each, under valgrind's lackey (a memory trace), and
# scripts/shared-lines.py counts the lines each request finds written or
# held by the other thread. Counts, not times: the same at any load.
#
#   scripts/shared-lines.sh [CASE [TURNS [same-shard|churn]]]
#
# CASE: dispatcher (default), one_level, level_per_thread, or
# dispatcher_shared_arc (the calibration: the dispatcher plus one clone of
# the level's shared `Arc` per request, which must show as one more line).
# same-shard: a third live thread's index puts the two on one shard;
# churn: a third thread takes an index and exits before the second
# thread's first request (src/sync/thread_index.rs gives it back).
# About 15 s for 200 turns. Needs valgrind, python3, binutils.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
case="${1:-dispatcher}"
turns="${2:-200}"
cargo build --release --quiet --example shared_lines_trace
bin="$root/target/release/examples/shared_lines_trace"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
valgrind --tool=lackey --trace-mem=yes --log-file="$dir/trace" \
    "$bin" "$case" "$turns" ${3:+"$3"} 2>"$dir/marks"
read -r _ mark0 mark1 _ _ <"$dir/marks"
# valgrind loads a position-independent executable at 0x108000.
bias=0
if file -L "$bin" | grep -q 'pie executable'; then bias=0x108000; fi
python3 scripts/shared-lines.py "$dir/trace" "$bin" "$mark0,$mark1" "$bias"
