package queueset

// libapf's glue for Kubernetes' own queueset tests (queueset_test.go, taken
// from the Go module cache at test time by run.sh, never committed here):
// run.sh replaces the tests' construction of Kubernetes' testable factory,
// newTestableQueueSetFactory(clk, countingPromiseFactoryFactory(counter)),
// with libapfFactory(clk, counter). Kubernetes' fake event clock and its
// goroutine counter go to k8sfq.NewFactoryOnClock, which runs libapf's
// manual clock at the fake clock's time and counts the goroutines that
// wait in libapf's queues as Kubernetes' counting promises count theirs.

import (
	"github.com/libapf/apf/bindings/go/k8sfq"
	"k8s.io/apiserver/pkg/util/flowcontrol/counter"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
)

func libapfFactory(clk eventclock.Interface, active counter.GoRoutineCounter) fq.QueueSetFactory {
	return k8sfq.NewFactoryOnClock(clk, active)
}
