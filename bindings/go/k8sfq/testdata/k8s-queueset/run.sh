#!/usr/bin/env bash
# Kubernetes' own queueset tests against libapf's factory.
#
# Takes queueset_test.go from the Go module cache (the k8s.io/apiserver
# version that k8sfq's go.mod requires: the module ships its tests), with
# the package it tests, into a scratch module under the repository's
# target/ (never committed), makes two scripted edits, adds our glue
# (glue_test.go beside this script) and runs the tests that exercise a
# factory:
#   1. every construction of Kubernetes' testable factory,
#      newTestableQueueSetFactory(clk, countingPromiseFactoryFactory(counter)),
#      becomes libapfFactory(clk, counter) (k8sfq.NewFactoryOnClock on the
#      tests' fake clock and goroutine counter);
#   2. TestSeatSecondsRollover expects 8 advances of Kubernetes' R epoch
#      (apiserver_flowcontrol_epoch_advance_total); libapf's R is a 128-bit
#      fixed-point count that never rolls over, so it expects none (the
#      test still checks that the series stays absent, and its fairness
#      over 40 quarters of fake time).
# Skipped: TestTotalRequestsExecutingWithPanic casts the queueset to
# Kubernetes' internal type (k8sfq's TestPanicInExecuteGivesSeatsBack
# checks the same behaviour against both factories). The tests of
# Kubernetes' internals (fair allocation, the no-restraint factory,
# dispatch-queue choice, request seats and work) do not construct a
# factory and are not run.
# Needs PKG_CONFIG_PATH to find libapf (run-tests.sh sets it) and the Go
# module cache (GOFLAGS=-mod=mod fetches what is missing).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
k8sfq="$(cd "$here/../.." && pwd)"
binding="$(cd "$k8sfq/.." && pwd)"
root="$(cd "$k8sfq/../../.." && pwd)"
work="$root/target/k8s-queueset-suite"
case " ${GOFLAGS:-} " in *" -mod=mod "*) ;; *) export GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" ;; esac

cd "$k8sfq"
ver="$(go list -m -f '{{.Version}}' k8s.io/apiserver)"
moddir="$(go mod download -json "k8s.io/apiserver@$ver" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
src="$moddir/pkg/util/flowcontrol/fairqueuing/queueset"
[ -f "$src/queueset_test.go" ] || { echo "run.sh: no queueset_test.go in $src" >&2; exit 1; }
echo "k8s-queueset: Kubernetes' queueset tests from k8s.io/apiserver $ver against k8sfq" >&2

rm -rf "$work"
mkdir -p "$work/queueset"
# A module of its own, requiring what k8sfq requires, k8sfq from this checkout.
sed -e 's|^module .*|module libapf.test/k8squeueset|' \
    -e "s|^replace github.com/libapf/apf/bindings/go => .*|replace github.com/libapf/apf/bindings/go => $binding|" \
    go.mod >"$work/go.mod"
cat >>"$work/go.mod" <<MOD

require github.com/libapf/apf/bindings/go/k8sfq v0.0.0

replace github.com/libapf/apf/bindings/go/k8sfq => $k8sfq
MOD
cp go.sum "$work/go.sum"
for f in "$src"/*.go; do
    case "$f" in *_test.go) continue ;; esac
    cat "$f" >"$work/queueset/$(basename "$f")"
done
cp "$here/glue_test.go" "$work/queueset/"

construct='newTestableQueueSetFactory(clk, countingPromiseFactoryFactory(counter))'
epochs='expectedEpochAdvances:       8,'
n_construct="$(grep -cF "$construct" "$src/queueset_test.go" || true)"
n_epochs="$(grep -cF "$epochs" "$src/queueset_test.go" || true)"
if [ "$n_construct" -ne 14 ] || [ "$n_epochs" -ne 1 ]; then
    echo "run.sh: queueset_test.go of $ver no longer has the expected shape ($n_construct constructions, $n_epochs epoch expectations); update the edits" >&2
    exit 1
fi
sed -e "s/newTestableQueueSetFactory(clk, countingPromiseFactoryFactory(counter))/libapfFactory(clk, counter)/" \
    -e "s/expectedEpochAdvances:       8,/expectedEpochAdvances:       0, \/\/ libapf: no epochs (run.sh)/" \
    "$src/queueset_test.go" >"$work/queueset/queueset_test.go"
if grep -qF "$construct" "$work/queueset/queueset_test.go"; then
    echo "run.sh: a construction of Kubernetes' factory is left" >&2
    exit 1
fi

# Every top-level test is accounted for: a new one in a later version
# stops this script until it is sorted into one of the lists.
tests='TestBaseline TestExampt TestSeparations TestUniformFlowsHandSize1 TestUniformFlowsHandSize3 TestDifferentFlowsExpectEqual TestSeatSecondsRollover TestDifferentFlowsExpectUnequal TestDifferentWidths TestTooWide TestWindup TestDifferentFlowsWithoutQueuing TestContextCancel'
skipped='TestTotalRequestsExecutingWithPanic'
internal='TestFairAlloc TestNoRestraint TestFindDispatchQueueLocked TestFinishRequestLocked TestRequestSeats TestRequestWork'
for t in $(sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing.T).*/\1/p' "$src/queueset_test.go"); do
    case " $tests $skipped $internal " in
    *" $t "*) ;;
    *) echo "run.sh: $t in queueset_test.go of $ver is in none of the lists" >&2; exit 1 ;;
    esac
done
cd "$work"
go test -count=1 -timeout 300s -run "^($(echo $tests | tr ' ' '|'))\$" "$@" ./queueset
