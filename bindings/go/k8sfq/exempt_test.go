package k8sfq

import (
	"context"
	"fmt"
	"sync"
	"testing"

	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
)

// TestExemptLevelNeverLimited: Kubernetes' APF controller gives every
// exempt priority level DesiredNumQueues -1, which its queueset reads as
// "never limited, never rejected, only counted", whatever the concurrency
// limit (0 or 2 here). Ten 3-seat requests execute at once on such a level,
// with the stock queueset and with libapf's, and the gauges agree. Then the
// level becomes a limited one of 2 seats without queues: the 30 seats the
// exempt requests still hold count against it, so a new request is
// rejected by both; once they finish, one is admitted again.
func TestExemptLevelNeverLimited(t *testing.T) {
	type outcome struct {
		admitted int
		gauges   [7]float64
		limited  bool // the request after the change to a limited level was admitted
		after    bool // a request once the exempt ones finished was admitted
	}
	run := func(f fq.QueueSetFactory, limit int) outcome {
		g := &gauges{}
		c, err := f.BeginConstruction(fq.QueuingConfig{Name: "exempt", DesiredNumQueues: -1, QueueLengthLimit: 2, HandSize: 3},
			metrics.RatioedGaugePair{RequestsWaiting: &g.waiting, RequestsExecuting: &g.executing}, &g.seats, &g.demand)
		if err != nil {
			t.Fatal(err)
		}
		qs := c.Complete(fq.DispatchingConfig{ConcurrencyLimit: limit, ConcurrencyDenominator: max(limit, 1)})
		three := fcrequest.WorkEstimate{InitialSeats: 3}
		var out outcome
		var started, finished sync.WaitGroup
		release := make(chan struct{})
		for i := 0; i < 10; i++ {
			r, _ := qs.StartRequest(context.Background(), &three, uint64(i), "", "fs", nil, nil, nil)
			if r == nil {
				continue
			}
			out.admitted++
			started.Add(1)
			finished.Add(1)
			go func() {
				defer finished.Done()
				r.Finish(func() { started.Done(); <-release })
			}()
		}
		started.Wait()
		out.gauges = g.read()

		cc, err := qs.BeginConfigChange(fq.QueuingConfig{Name: "exempt", DesiredNumQueues: 0})
		if err != nil {
			t.Fatal(err)
		}
		qs = cc.Complete(fq.DispatchingConfig{ConcurrencyLimit: 2, ConcurrencyDenominator: 2})
		one := fcrequest.WorkEstimate{InitialSeats: 1}
		if r, _ := qs.StartRequest(context.Background(), &one, 99, "", "fs", nil, nil, nil); r != nil {
			out.limited = true
			r.Finish(func() {})
		}
		close(release)
		finished.Wait()
		if r, _ := qs.StartRequest(context.Background(), &one, 100, "", "fs", nil, nil, nil); r != nil {
			out.after = true
			r.Finish(func() {})
		}
		if !qs.IsIdle() {
			t.Error("not idle at the end")
		}
		return out
	}
	for _, limit := range []int{0, 2} {
		t.Run(fmt.Sprintf("limit=%d", limit), func(t *testing.T) {
			stock := run(queueset.NewQueueSetFactory(eventclock.Real{}), limit)
			ours := run(NewFactory(), limit)
			if stock.admitted != 10 {
				t.Fatalf("kubernetes admitted %d of 10 exempt requests", stock.admitted)
			}
			if ours != stock {
				t.Errorf("libapf %+v, kubernetes %+v", ours, stock)
			}
			t.Logf("kubernetes %+v", stock)
		})
	}
}
