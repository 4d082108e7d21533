#!/usr/bin/env bash
# Benchmark libapf (through the Go binding) side by side with Kubernetes'
# own queueset (k8s.io/apiserver) on the same workloads, in one
# `go test -bench`, and print the ratios.
#
#   bindings/go/run-compare.sh                 # a short check run (2000 iterations)
#   BENCHTIME=2s COUNT=5 bindings/go/run-compare.sh   # for figures, on a quiet machine
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
benchtime="${BENCHTIME:-2000x}"
count="${COUNT:-1}"
export CGO_ENABLED=1
# The checkout's libapf, through the same pkg-config lookup as an installed one.
PKG_CONFIG_PATH="$("$root/scripts/dev-pkgconfig.sh")${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export PKG_CONFIG_PATH

(cd "$root" && cargo build --release -p libapf --features test-hooks)

cd "$here/k8scompare"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
go test -count="$count" -run 'TestSaturatedWorkloadQueues' -bench . -benchtime="$benchtime" . | tee "$out"

# Averages of ns/op and allocs/op per workload and side, then the ratios.
awk '
/^Benchmark[A-Za-z]+\/(libapf|kubernetes)/ {
    split($1, name, "/"); work = name[1]; sub(/^Benchmark/, "", work)
    side = name[2]; sub(/-[0-9]+$/, "", side)
    for (i = 3; i < NF; i++) {
        if ($(i + 1) == "ns/op") { ns[work, side] += $i; n[work, side]++ }
        if ($(i + 1) == "allocs/op") allocs[work, side] += $i
    }
    if (!(work in seen)) { seen[work] = 1; order[++k] = work }
}
END {
    if (k == 0) exit 1
    printf "\n%-12s %14s %18s %8s %16s\n", "workload", "libapf ns/op", "kubernetes ns/op", "ratio", "allocs (apf/k8s)"
    for (j = 1; j <= k; j++) {
        w = order[j]
        a = ns[w, "libapf"] / n[w, "libapf"]; b = ns[w, "kubernetes"] / n[w, "kubernetes"]
        printf "%-12s %14.0f %18.0f %7.1fx %8.1f/%-7.1f\n", w, a, b, b / a,
            allocs[w, "libapf"] / n[w, "libapf"], allocs[w, "kubernetes"] / n[w, "kubernetes"]
    }
}' "$out"
