package k8sfq

import (
	"context"
	"strings"
	"sync"
	"testing"

	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
)

// recGauge records a gauge's value and denominator.
type recGauge struct {
	mu         sync.Mutex
	value, den float64
}

func (g *recGauge) Set(v float64)            { g.mu.Lock(); g.value = v; g.mu.Unlock() }
func (g *recGauge) Add(v float64)            { g.mu.Lock(); g.value += v; g.mu.Unlock() }
func (g *recGauge) Inc()                     { g.Add(1) }
func (g *recGauge) Dec()                     { g.Add(-1) }
func (g *recGauge) SetToCurrentTime()        {}
func (g *recGauge) SetDenominator(d float64) { g.mu.Lock(); g.den = d; g.mu.Unlock() }
func (g *recGauge) get() (float64, float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.value, g.den
}

type gauges struct{ waiting, executing, seats, demand recGauge }

// read: waiting, executing, execution seats, seat demand, then the three
// denominators.
func (g *gauges) read() [7]float64 {
	w, wd := g.waiting.get()
	e, ed := g.executing.get()
	s, sd := g.seats.get()
	d, _ := g.demand.get()
	return [7]float64{w, e, s, d, wd, ed, sd}
}

// TestGaugesFedAsKubernetesFeedsThem runs one sequence (a 2-seat request
// executes, a 1-seat one waits, the first finishes and the second runs,
// then finishes) on the stock queueset and on libapf's, and compares the
// gauges the controller passes in at each step.
func TestGaugesFedAsKubernetesFeedsThem(t *testing.T) {
	run := func(f fq.QueueSetFactory) [][7]float64 {
		g := &gauges{}
		c, err := f.BeginConstruction(fq.QueuingConfig{Name: "g", DesiredNumQueues: 4, QueueLengthLimit: 5, HandSize: 2},
			metrics.RatioedGaugePair{RequestsWaiting: &g.waiting, RequestsExecuting: &g.executing}, &g.seats, &g.demand)
		if err != nil {
			t.Fatal(err)
		}
		qs := c.Complete(fq.DispatchingConfig{ConcurrencyLimit: 2, ConcurrencyDenominator: 2})
		var steps [][7]float64
		two := fcrequest.WorkEstimate{InitialSeats: 2}
		one := fcrequest.WorkEstimate{InitialSeats: 1}
		a, _ := qs.StartRequest(context.Background(), &two, 1, "", "fs", nil, nil, nil)
		b, _ := qs.StartRequest(context.Background(), &one, 2, "", "fs", nil, nil, nil)
		if a == nil || b == nil {
			t.Fatal("rejected")
		}
		running, release, done := make(chan struct{}), make(chan struct{}), make(chan bool)
		go func() {
			done <- b.Finish(func() { close(running); <-release })
		}()
		a.Finish(func() { steps = append(steps, g.read()) })
		<-running
		steps = append(steps, g.read())
		close(release)
		if !<-done {
			t.Error("not idle after the last finish")
		}
		steps = append(steps, g.read())
		if !qs.IsIdle() {
			t.Error("IsIdle false at the end")
		}
		return steps
	}
	stock := run(queueset.NewQueueSetFactory(eventclock.Real{}))
	ours := run(NewFactory())
	for i := range stock {
		if stock[i] != ours[i] {
			t.Errorf("step %d: kubernetes %v, libapf %v", i, stock[i], ours[i])
		}
	}
	t.Logf("kubernetes %v", stock)
}

func TestConfigurationErrorsNameTheLevel(t *testing.T) {
	f := NewFactory()
	pair := metrics.RatioedGaugePair{RequestsWaiting: noopRatioed{}, RequestsExecuting: noopRatioed{}}
	_, err := f.BeginConstruction(fq.QueuingConfig{Name: "lvl", DesiredNumQueues: 4, QueueLengthLimit: 5, HandSize: 9}, pair, noopRatioed{}, noopRatioed{})
	if err == nil || !strings.Contains(err.Error(), `"lvl"`) || !strings.Contains(err.Error(), "handSize") {
		t.Fatalf("hand size above queues: %v", err)
	}
	c, err := f.BeginConstruction(fq.QueuingConfig{Name: "lvl", DesiredNumQueues: 4, QueueLengthLimit: 5, HandSize: 2}, pair, noopRatioed{}, noopRatioed{})
	if err != nil {
		t.Fatal(err)
	}
	qs := c.Complete(fq.DispatchingConfig{ConcurrencyLimit: 1, ConcurrencyDenominator: 1})
	if _, err := qs.BeginConfigChange(fq.QueuingConfig{Name: "lvl", DesiredNumQueues: 4, QueueLengthLimit: 0, HandSize: 2}); err == nil {
		t.Fatal("a zero queue length limit was accepted")
	}
	// libapf's own dealer limits are checked before Complete too.
	if _, err := qs.BeginConfigChange(fq.QueuingConfig{Name: "lvl", DesiredNumQueues: 1 << 30, QueueLengthLimit: 5, HandSize: 100}); err == nil {
		t.Fatal("a hand beyond the dealer's entropy was accepted")
	}
}
