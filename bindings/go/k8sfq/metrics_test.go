package k8sfq

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset"
	testeventclock "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/testing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
	"k8s.io/component-base/metrics/legacyregistry"
)

var qlenRuns atomic.Int64

// levelMetric finds the sample of a flow-control metric family for one
// priority level (nil if none).
func levelMetric(t *testing.T, family, level string) *dto.Metric {
	t.Helper()
	mfs, err := legacyregistry.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "apiserver_flowcontrol_"+family {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "priority_level" && l.GetValue() == level {
					return m
				}
			}
		}
	}
	return nil
}

// TestQueueLengthAndCurrentRFed: one seat, one queue; a request executes,
// two wait (the queue is 1 then 2 long), time passes, a fourth waits. The
// queue-length histogram and the current-R gauge are compared with what
// Kubernetes' queueset records for the same sequence on a fake clock:
// the same observations for the requests that wait (Kubernetes also
// observes the one it dispatches at once, at length 1), and the same R.
func TestQueueLengthAndCurrentRFed(t *testing.T) {
	metrics.Register()
	run := func(level string, f fq.QueueSetFactory, advance func(time.Duration)) {
		pair := metrics.RatioedGaugePair{RequestsWaiting: noopRatioed{}, RequestsExecuting: noopRatioed{}}
		c, err := f.BeginConstruction(fq.QueuingConfig{Name: level, DesiredNumQueues: 1, QueueLengthLimit: 10, HandSize: 1},
			pair, noopRatioed{}, noopRatioed{})
		if err != nil {
			t.Fatal(err)
		}
		qs := c.Complete(fq.DispatchingConfig{ConcurrencyLimit: 1, ConcurrencyDenominator: 1})
		est := fcrequest.WorkEstimate{InitialSeats: 1}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var reqs []fq.Request
		for i := 0; i < 4; i++ {
			if i == 3 {
				advance(time.Second)
			}
			r, _ := qs.StartRequest(ctx, &est, uint64(i), "", "fs", nil, nil, nil)
			if r == nil {
				t.Fatalf("%s: request %d rejected", level, i)
			}
			reqs = append(reqs, r)
		}
	}
	// The registry is global: fresh level names for each run (-count).
	n := qlenRuns.Add(1)
	stockLevel, ourLevel := fmt.Sprintf("qlen-kubernetes-%d", n), fmt.Sprintf("qlen-libapf-%d", n)
	clk, _ := testeventclock.NewFake(time.Unix(1000, 0), 0, nil)
	run(stockLevel, queueset.NewQueueSetFactory(clk), func(d time.Duration) { clk.SetTime(clk.Now().Add(d)) })
	mf := NewManualFactory()
	run(ourLevel, mf, func(d time.Duration) {
		if err := mf.AdvanceClock(d); err != nil {
			t.Fatal(err)
		}
	})

	hist := func(level string) (uint64, float64) {
		m := levelMetric(t, "request_queue_length_after_enqueue", level)
		if m == nil {
			t.Fatalf("no queue-length observation for %s", level)
		}
		return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
	}
	kn, ksum := hist(stockLevel)
	ln, lsum := hist(ourLevel)
	// Waiting requests joined the queue at lengths 1, 2, 3.
	if ln != 3 || lsum != 6 {
		t.Errorf("libapf observed %d lengths summing to %v, want 1, 2, 3", ln, lsum)
	}
	// Kubernetes: the same three, plus the first request at length 1.
	if kn != ln+1 || ksum != lsum+1 {
		t.Errorf("kubernetes observed %d lengths summing to %v; libapf %d, %v", kn, ksum, ln, lsum)
	}

	gauge := func(level string) float64 {
		m := levelMetric(t, "current_r", level)
		if m == nil {
			t.Fatalf("no current R for %s", level)
		}
		return m.GetGauge().GetValue()
	}
	kr, lr := gauge(stockLevel), gauge(ourLevel)
	if lr <= 0 || math.Abs(kr-lr) > 1e-6 {
		t.Errorf("current R: kubernetes %v, libapf %v", kr, lr)
	}
	t.Logf("kubernetes: %d lengths, sum %v, R %v", kn, ksum, kr)
}
