package k8scompare

import (
	"context"
	"testing"

	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
)

// kubeLevel is one priority level of Kubernetes' own API Priority and
// Fairness: a queueset built the way the apiserver's config controller
// builds it, on the real event clock, with the apiserver's metric vectors
// registered and wired in (request and seat gauges, seat-demand integrator
// united with the seat-demand gauge).
type kubeLevel struct {
	qs fq.QueueSet
}

func newKubeLevel(tb testing.TB, shape levelShape) *kubeLevel {
	tb.Helper()
	metrics.Register()
	clk := eventclock.Real{}
	labels := []string{shape.name}
	reqs := metrics.RatioedGaugeVecPhasedElementPair(metrics.PriorityLevelConcurrencyGaugeVec, 1, 1, labels)
	execSeats := metrics.PriorityLevelExecutionSeatsGaugeVec.NewForLabelValuesSafe(0, 1, labels)
	demand := metrics.NewUnionGauge(
		fq.NewNamedIntegrator(clk, shape.name),
		metrics.ApiserverSeatDemands.NewForLabelValuesSafe(0, 1, labels),
	)
	completer, err := queueset.NewQueueSetFactory(clk).BeginConstruction(fq.QueuingConfig{
		Name:             shape.name,
		DesiredNumQueues: shape.queues,
		QueueLengthLimit: shape.queueLengthLimit,
		HandSize:         shape.handSize,
	}, reqs, execSeats, demand)
	if err != nil {
		tb.Fatalf("queueset construction: %v", err)
	}
	qs := completer.Complete(fq.DispatchingConfig{
		ConcurrencyLimit:       shape.concurrencyLimit,
		ConcurrencyDenominator: shape.concurrencyLimit,
	})
	return &kubeLevel{qs: qs}
}

var oneSeat = fcrequest.WorkEstimate{InitialSeats: 1}

// handle runs one request through the level as the apiserver's Handle
// does: StartRequest, then Finish with the execute function (which blocks
// while the request waits in its queue). It reports whether the request
// had to wait and whether it executed.
//
// The queueset puts every request in a queue, even one it dispatches at
// once, and notes both moves before StartRequest returns; a request
// still in its queue when StartRequest returns is one that waits.
func (k *kubeLevel) handle(ctx context.Context, flowHash uint64, exec func()) (queued, executed bool) {
	inQueue := false
	note := func(in bool) { inQueue = in }
	req, _ := k.qs.StartRequest(ctx, &oneSeat, flowHash, "", "bench", nil, nil, note)
	queued = inQueue
	if req == nil {
		return queued, false
	}
	req.Finish(func() {
		executed = true
		exec()
	})
	return queued, executed
}
