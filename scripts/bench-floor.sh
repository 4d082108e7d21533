#!/usr/bin/env bash
# Issue 14's rows ("performance toward the floor"), each measured in one run
# beside its baseline, printed as one Markdown table (docs/benchmarks.md).
#
#   scripts/bench-floor.sh            # about 20 minutes on 2 cores; run it on a quiet machine
#   QUICK=1 scripts/bench-floor.sh    # a few minutes: a smoke run, figures not for the docs
#
# Writes the raw outputs to target/bench-floor/ (callgrind totals, criterion
# estimates, the workqueue latency runs, the Go comparison) and the table to
# target/bench-floor/table.md. Timing never decides anything here: this is a
# report, not a test.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
out="$root/target/bench-floor"
rm -rf "$out"
mkdir -p "$out"

if [ -n "${QUICK:-}" ]; then
    crit=(--warm-up-time 1 --measurement-time 1)
    calls=(10000 20000)
    wq=(--items 100000 --consumers 100 --rounds 100 --producer true)
    pairs=1
    go_env=(BENCHTIME=2000x COUNT=1)
else
    crit=(--warm-up-time 2 --measurement-time 5)
    calls=(100000 200000)
    wq=(--items 1000000 --consumers 1000 --rounds 1000 --producer true)
    pairs=2
    go_env=(BENCHTIME=2s COUNT=3)
fi

for tool in valgrind go python3; do
    command -v "$tool" >/dev/null || { echo "bench-floor: $tool is needed" >&2; exit 1; }
done
{
    echo "commit $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (modified)')"
    echo "date $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) cores"
} >"$out/machine.txt"

cargo build --release --example hotpath_profile --example dispatcher_hotpath_profile \
    --example workqueue_latency
cargo bench --no-run --bench queueset --bench dispatcher --bench workqueue 2>/dev/null

# Instructions: the difference of two run lengths, so set-up cancels out.
. "$root/scripts/lib/instructions.sh"
for policy in kubernetes flow flow-maxmin; do
    instructions "hotpath-$policy" target/release/examples/hotpath_profile "$policy"
done
instructions classify target/release/examples/dispatcher_hotpath_profile

# Criterion groups: each fast structure beside its baseline in one group.
rm -rf target/criterion
cargo bench --bench queueset -- "${crit[@]}" \
    '^(a_uncontended_start_finish|b_two_threads_one_level)/|^f_dispatch_by_queues/[a-z_0-9]+/(16|16384)$' \
    >"$out/queueset.txt" 2>&1
cargo bench --bench dispatcher -- "${crit[@]}" '^e2e_classify_start_finish_uncontended/' \
    >"$out/dispatcher.txt" 2>&1
cargo bench --bench workqueue -- "${crit[@]}" '^fifo/' >"$out/workqueue.txt" 2>&1
cp -r target/criterion "$out/criterion"

# The workqueue under 1,000 consumers and a full-speed producer, in
# alternating runs of libapf and the plain client-go design.
for i in $(seq "$pairs"); do
    for side in workqueue plain; do
        target/release/examples/workqueue_latency "${wq[@]}" --only "$side" >"$out/latency-$side-$i.txt"
    done
done

# Go through cgo against Kubernetes' own queueset.
env "${go_env[@]}" bindings/go/run-compare.sh >"$out/go-compare.txt" 2>&1

python3 scripts/bench-floor.py "$out" | tee "$out/table.md"
