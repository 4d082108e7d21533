package k8sfq

import (
	"context"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/authentication/user"
	genericrequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/util/flowcontrol/debug"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset"
	testeventclock "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/testing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
)

// executingListed is every executing request the dump lists, in queues or
// queueless.
func executingListed(d debug.QueueSetDump) []debug.RequestDump {
	out := append([]debug.RequestDump(nil), d.QueuelessExecutingRequests...)
	for _, q := range d.Queues {
		out = append(out, q.RequestsExecuting...)
	}
	return out
}

// TestDumpListsExecutingRequests: one request executes (seat limit 1),
// a second waits; the dump lists the first as executing, with its flow
// schema, distinguisher, estimate, start time and (with details) user,
// and the second as waiting. Checked on the stock queueset and libapf's.
func TestDumpListsExecutingRequests(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    fq.QueueSetFactory
	}{{"kubernetes", queueset.NewQueueSetFactory(eventclock.Real{})}, {"libapf", NewFactory()}} {
		t.Run(tc.name, func(t *testing.T) {
			pair := metrics.RatioedGaugePair{RequestsWaiting: noopRatioed{}, RequestsExecuting: noopRatioed{}}
			c, err := tc.f.BeginConstruction(fq.QueuingConfig{Name: "d", DesiredNumQueues: 4, QueueLengthLimit: 5, HandSize: 2},
				pair, noopRatioed{}, noopRatioed{})
			if err != nil {
				t.Fatal(err)
			}
			qs := c.Complete(fq.DispatchingConfig{ConcurrencyLimit: 1, ConcurrencyDenominator: 1})
			ctx := genericrequest.WithUser(context.Background(), &user.DefaultInfo{Name: "alice"})
			est := fcrequest.WorkEstimate{InitialSeats: 1, FinalSeats: 1, AdditionalLatency: 0}
			a, _ := qs.StartRequest(ctx, &est, 1, "alice-dist", "fs-a", nil, nil, nil)
			// (Kubernetes' dump with details needs a user on every request.)
			bctx := genericrequest.WithUser(context.Background(), &user.DefaultInfo{Name: "bob"})
			b, _ := qs.StartRequest(bctx, &est, 2, "bob-dist", "fs-b", nil, nil, nil)
			if a == nil || b == nil {
				t.Fatal("rejected")
			}
			var during debug.QueueSetDump
			a.Finish(func() { during = qs.Dump(true) })
			ex := executingListed(during)
			if during.Executing != 1 || len(ex) != 1 {
				t.Fatalf("executing %d, listed %+v; want alice's request listed", during.Executing, ex)
			}
			r := ex[0]
			if r.MatchedFlowSchema != "fs-a" || r.FlowDistinguisher != "alice-dist" || r.UserName != "alice" ||
				r.WorkEstimate.InitialSeats != 1 || r.StartTime.IsZero() || r.ArriveTime.IsZero() || r.StartTime.Before(r.ArriveTime) {
				t.Errorf("the executing request dumped as %+v", r)
			}
			waiting := 0
			for _, q := range during.Queues {
				for _, w := range q.Requests {
					waiting++
					if w.MatchedFlowSchema != "fs-b" {
						t.Errorf("waiting request dumped as %+v", w)
					}
				}
			}
			if waiting != 1 {
				t.Errorf("%d waiting requests listed, want bob's", waiting)
			}
			b.Finish(func() {
				d := qs.Dump(false)
				if ex := executingListed(d); len(ex) != 1 || ex[0].MatchedFlowSchema != "fs-b" || ex[0].UserName != "" {
					t.Errorf("after alice's finish, executing listed %+v, want bob's alone, no details", ex)
				}
				// bob waited in a queue: both list him under it.
				if len(d.QueuelessExecutingRequests) != 0 {
					t.Errorf("bob, who waited in a queue, listed as queueless: %+v", d.QueuelessExecutingRequests)
				}
			})
			if ex := executingListed(qs.Dump(false)); len(ex) != 0 {
				t.Errorf("idle, yet executing listed %+v", ex)
			}
		})
	}
}

// TestLingeringSeatsInGauges: a request with additional latency keeps its
// seats in the execution-seat and seat-demand gauges after it finishes
// executing, until the latency has passed, as Kubernetes' queueset feeds
// them; compared step by step on fake clocks.
func TestLingeringSeatsInGauges(t *testing.T) {
	run := func(f fq.QueueSetFactory, advance func(time.Duration)) [][7]float64 {
		g := &gauges{}
		c, err := f.BeginConstruction(fq.QueuingConfig{Name: "l", DesiredNumQueues: 4, QueueLengthLimit: 5, HandSize: 2},
			metrics.RatioedGaugePair{RequestsWaiting: &g.waiting, RequestsExecuting: &g.executing}, &g.seats, &g.demand)
		if err != nil {
			t.Fatal(err)
		}
		qs := c.Complete(fq.DispatchingConfig{ConcurrencyLimit: 4, ConcurrencyDenominator: 4})
		est := fcrequest.WorkEstimate{InitialSeats: 1, FinalSeats: 3, AdditionalLatency: time.Second}
		a, _ := qs.StartRequest(context.Background(), &est, 1, "", "fs", nil, nil, nil)
		if a == nil {
			t.Fatal("rejected")
		}
		var steps [][7]float64
		if idle := a.Finish(func() { steps = append(steps, g.read()) }); !idle {
			t.Error("not idle after the finish (lingering seats do not count)")
		}
		steps = append(steps, g.read())
		advance(999 * time.Millisecond)
		steps = append(steps, g.read())
		advance(time.Millisecond)
		steps = append(steps, g.read())
		return steps
	}
	clk, _ := testeventclock.NewFake(time.Unix(1000, 0), 0, nil)
	stock := run(queueset.NewQueueSetFactory(clk), func(d time.Duration) { clk.SetTime(clk.Now().Add(d)) })
	mf := NewManualFactory()
	ours := run(mf, func(d time.Duration) {
		if err := mf.AdvanceClock(d); err != nil {
			t.Fatal(err)
		}
	})
	for i := range stock {
		if stock[i] != ours[i] {
			t.Errorf("step %d: kubernetes %v, libapf %v", i, stock[i], ours[i])
		}
	}
	// During the latency the three seats are still counted.
	if stock[1][2] != 3 || stock[3][2] != 0 {
		t.Errorf("kubernetes' own sequence is not the one this test expects: %v", stock)
	}
	t.Logf("kubernetes %v", stock)
}
