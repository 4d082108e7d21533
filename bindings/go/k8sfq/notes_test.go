package k8sfq

import (
	"context"
	"errors"
	"fmt"
	"testing"

	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
)

// TestQueueNotesAndInQueueSeriesAsKubernetes: Kubernetes' queueset puts
// every request of a level with queues in a queue, even one it dispatches
// at once, so the queue-note callback (the HTTP filter's waiting-requests
// watermark) hears true then false, and the flow schema's in-queue request
// and seat series exist at 0; a level without queues (and an exempt one)
// does neither. Both factories, the same calls and series.
func TestQueueNotesAndInQueueSeriesAsKubernetes(t *testing.T) {
	metrics.Register()
	type result struct {
		notes  string
		series [2]bool // in-queue requests, in-queue seats
	}
	run := func(f fq.QueueSetFactory, level string, queues int) result {
		pair := metrics.RatioedGaugePair{RequestsWaiting: noopRatioed{}, RequestsExecuting: noopRatioed{}}
		c, err := f.BeginConstruction(fq.QueuingConfig{Name: level, DesiredNumQueues: queues, QueueLengthLimit: 5, HandSize: 1},
			pair, noopRatioed{}, noopRatioed{})
		if err != nil {
			t.Fatal(err)
		}
		qs := c.Complete(fq.DispatchingConfig{ConcurrencyLimit: 1, ConcurrencyDenominator: 1})
		var res result
		note := func(in bool) { res.notes += fmt.Sprint(in, " ") }
		r, _ := qs.StartRequest(context.Background(), &fcrequest.WorkEstimate{InitialSeats: 1}, 1, "", "fs-notes", nil, nil, note)
		if r == nil {
			t.Fatalf("%s: rejected", level)
		}
		r.Finish(func() {})
		res.series = [2]bool{levelMetric(t, "current_inqueue_requests", level) != nil, levelMetric(t, "current_inqueue_seats", level) != nil}
		for _, fam := range []string{"current_inqueue_requests", "current_inqueue_seats"} {
			if m := levelMetric(t, fam, level); m != nil && m.GetGauge().GetValue() != 0 {
				t.Errorf("%s %s = %v, want 0", level, fam, m.GetGauge().GetValue())
			}
		}
		return res
	}
	n := qlenRuns.Add(1)
	for _, queues := range []int{4, 0, -1} {
		stock := run(queueset.NewQueueSetFactory(eventclock.Real{}), fmt.Sprintf("notes-kubernetes-%d-%d", queues, n), queues)
		ours := run(NewFactory(), fmt.Sprintf("notes-libapf-%d-%d", queues, n), queues)
		if ours != stock {
			t.Errorf("queues %d: libapf %+v, kubernetes %+v", queues, ours, stock)
		}
		t.Logf("queues %d: kubernetes %+v", queues, stock)
	}
}

// TestPanicInExecuteGivesSeatsBack (what Kubernetes'
// TestTotalRequestsExecutingWithPanic checks on its own internal type): a
// panic in execute goes up through Finish, and the request no longer
// counts as executing nor holds its seat, in both factories.
func TestPanicInExecuteGivesSeatsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    fq.QueueSetFactory
	}{{"kubernetes", queueset.NewQueueSetFactory(eventclock.Real{})}, {"libapf", NewFactory()}} {
		t.Run(tc.name, func(t *testing.T) {
			g := &gauges{}
			c, err := tc.f.BeginConstruction(fq.QueuingConfig{Name: "panic", DesiredNumQueues: 0},
				metrics.RatioedGaugePair{RequestsWaiting: &g.waiting, RequestsExecuting: &g.executing}, &g.seats, &g.demand)
			if err != nil {
				t.Fatal(err)
			}
			qs := c.Complete(fq.DispatchingConfig{ConcurrencyLimit: 1, ConcurrencyDenominator: 1})
			one := fcrequest.WorkEstimate{InitialSeats: 1}
			r, _ := qs.StartRequest(context.Background(), &one, 1, "", "fs", nil, nil, nil)
			if r == nil {
				t.Fatal("rejected")
			}
			boom := errors.New("handler panicked")
			var during [7]float64
			got := func() (p any) {
				defer func() { p = recover() }()
				r.Finish(func() { during = g.read(); panic(boom) })
				return nil
			}()
			if got != boom {
				t.Fatalf("recovered %v, want the handler's panic", got)
			}
			if during[1] != 1 || during[2] != 1 {
				t.Errorf("during execute: executing %v, seats %v; want 1, 1", during[1], during[2])
			}
			if after := g.read(); after[1] != 0 || after[2] != 0 || after[3] != 0 || !qs.IsIdle() {
				t.Errorf("after the panic: gauges %v, idle %v; want nothing executing and no seat held", after, qs.IsIdle())
			}
			// The seat is back: the next request fits the limit of 1.
			r2, _ := qs.StartRequest(context.Background(), &one, 2, "", "fs", nil, nil, nil)
			if r2 == nil {
				t.Fatal("the seat taken by the request that panicked was not given back")
			}
			r2.Finish(func() {})
		})
	}
}
