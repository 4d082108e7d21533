package k8sfq

// Scenario tests after the semantics of Kubernetes' uniformScenario
// (queueset_test.go): closed-loop clients, each flow's clients sending one
// request after another, on a fake clock; at the end each flow's average
// seats in use is compared with its max-min fair share of the
// concurrency limit. The same scenarios run against Kubernetes' queueset
// and libapf's, through the fairqueuing.QueueSet interface alone.

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"testing"
	"time"

	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/queueset"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
)

// simClock is the fake clock Kubernetes' queueset reads; the simulation
// moves it. Events (lingering seats) run when the simulation reaches them.
type simClock struct {
	mu     sync.Mutex
	start  time.Time
	now    time.Duration
	events []simEvent
}

type simEvent struct {
	at time.Duration
	f  eventclock.EventFunc
}

var _ eventclock.Interface = (*simClock)(nil)

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.start.Add(c.now)
}

func (c *simClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *simClock) Sleep(time.Duration) { panic("simClock: Sleep is not used by the queueset") }

func (c *simClock) EventAfterDuration(f eventclock.EventFunc, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, simEvent{at: c.now + d, f: f})
}

func (c *simClock) EventAfterTime(f eventclock.EventFunc, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, simEvent{at: t.Sub(c.start), f: f})
}

// due removes and returns the events due by now.
func (c *simClock) due() []simEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var due, rest []simEvent
	for _, e := range c.events {
		if e.at <= c.now {
			due = append(due, e)
		} else {
			rest = append(rest, e)
		}
	}
	c.events = rest
	return due
}

func (c *simClock) next() (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.events) == 0 {
		return 0, false
	}
	m := c.events[0].at
	for _, e := range c.events[1:] {
		m = min(m, e.at)
	}
	return m, true
}

type flowSpec struct {
	clients int
	seats   uint64
	service time.Duration
}

type scenario struct {
	name                 string
	limit                int
	queues, hand, qll    int
	flows                []flowSpec
	duration             time.Duration
	margin               float64 // relative tolerance on each flow's average seats
	expectNoRejections   bool
	perFlowExpectedSeats []float64 // nil: each flow's max-min fair share
}

// fairShares is the max-min fair division of limit seats among flows that
// can each use at most clients*seats.
func fairShares(limit float64, flows []flowSpec) []float64 {
	out := make([]float64, len(flows))
	order := make([]int, len(flows))
	for i := range order {
		order[i] = i
	}
	demand := func(i int) float64 { return float64(flows[i].clients) * float64(flows[i].seats) }
	sort.Slice(order, func(a, b int) bool { return demand(order[a]) < demand(order[b]) })
	left := limit
	for k, i := range order {
		share := left / float64(len(order)-k)
		out[i] = math.Min(demand(i), share)
		left -= out[i]
	}
	return out
}

// sim runs closed-loop clients against one QueueSet on a fake clock. A
// client is "running" unless it sleeps through its request's execution
// (simulated service time) or waits in a queue; time moves only when no
// client runs and every client counted as queued is still queued in the
// queueset (its Dump's Waiting), so each step is deterministic.
type sim struct {
	qs      fq.QueueSet
	clk     *simClock
	advance func(time.Duration) // moves the queueset's own clock, if it has one
	sc      scenario

	mu       sync.Mutex
	changed  *sync.Cond
	version  uint64
	running  int
	queued   int
	sleepers []sleeper
	stopped  bool
	seatTime []float64 // per flow, seat-nanoseconds within the run
	rejected int
}

type sleeper struct {
	until time.Duration
	wake  chan struct{}
}

func (s *sim) bump() {
	s.version++
	s.changed.Broadcast()
}

// sleep parks the calling client until the simulation reaches now+d.
func (s *sim) sleep(d time.Duration) {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	s.sleepers = append(s.sleepers, sleeper{until: s.clk.now + d, wake: ch})
	s.running--
	s.bump()
	s.mu.Unlock()
	<-ch
}

func (s *sim) client(ctx context.Context, flow int, wg *sync.WaitGroup) {
	defer wg.Done()
	spec := s.sc.flows[flow]
	est := fcrequest.WorkEstimate{InitialSeats: spec.seats}
	hash := uint64(flow+1) * 0x9E3779B97F4A7C15
	fsName := fmt.Sprintf("flow-%d", flow)
	for {
		s.mu.Lock()
		if s.stopped {
			s.running--
			s.bump()
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		inQueue := false
		note := func(in bool) {
			s.mu.Lock()
			inQueue = in
			s.mu.Unlock()
		}
		req, _ := s.qs.StartRequest(ctx, &est, hash, "", fsName, nil, nil, note)
		if req == nil {
			s.mu.Lock()
			s.rejected++
			s.mu.Unlock()
			s.sleep(spec.service)
			continue
		}
		s.mu.Lock()
		blocked := inQueue
		if blocked {
			s.queued++
			s.running--
			s.bump()
		}
		s.mu.Unlock()
		req.Finish(func() {
			s.mu.Lock()
			if blocked {
				blocked = false
				s.queued--
				s.running++
				s.bump()
			}
			start := s.clk.now
			s.mu.Unlock()
			s.sleep(spec.service)
			s.mu.Lock()
			s.seatTime[flow] += float64(spec.seats) * float64(s.clk.now-start)
			s.mu.Unlock()
		})
		if blocked { // rejected after waiting (only when stopping)
			s.mu.Lock()
			s.queued--
			s.running++
			s.bump()
			s.mu.Unlock()
		}
	}
}

// quiescent waits until no client runs and the queueset holds exactly the
// clients counted as queued.
func (s *sim) quiescent(t *testing.T) {
	for {
		s.mu.Lock()
		for s.running > 0 {
			s.changed.Wait()
		}
		queued, version := s.queued, s.version
		s.mu.Unlock()
		// Not under s.mu: Kubernetes' queueset calls queue notes (which
		// take s.mu) under its own lock, which Dump takes.
		if s.qs.Dump(false).Waiting == queued {
			s.mu.Lock()
			same := s.version == version && s.running == 0
			s.mu.Unlock()
			if same {
				return
			}
			continue
		}
		s.mu.Lock()
		for s.version == version {
			s.changed.Wait()
		}
		s.mu.Unlock()
	}
}

func (s *sim) run(t *testing.T) []float64 {
	s.changed = sync.NewCond(&s.mu)
	s.seatTime = make([]float64, len(s.sc.flows))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	// Count every client as running before any starts: a started client
	// changes the count under s.mu.
	for _, spec := range s.sc.flows {
		s.running += spec.clients
	}
	for f, spec := range s.sc.flows {
		for range spec.clients {
			wg.Add(1)
			go s.client(ctx, f, &wg)
		}
	}
	for {
		s.quiescent(t)
		s.mu.Lock()
		next := time.Duration(math.MaxInt64)
		for _, sl := range s.sleepers {
			next = min(next, sl.until)
		}
		if e, ok := s.clk.next(); ok {
			next = min(next, e)
		}
		if next == math.MaxInt64 {
			s.mu.Unlock()
			t.Fatalf("%s: every client waits in a queue and nothing is due", s.sc.name)
		}
		end := next >= s.sc.duration
		if end {
			next = s.sc.duration
		}
		step := next - s.clk.now
		s.clk.mu.Lock()
		s.clk.now = next
		s.clk.mu.Unlock()
		var woken []sleeper
		if end {
			s.stopped = true
			woken, s.sleepers = s.sleepers, nil
		} else {
			rest := s.sleepers[:0]
			for _, sl := range s.sleepers {
				if sl.until <= next {
					woken = append(woken, sl)
				} else {
					rest = append(rest, sl)
				}
			}
			s.sleepers = rest
		}
		s.running += len(woken)
		s.bump()
		s.mu.Unlock()
		if s.advance != nil && step > 0 {
			s.advance(step)
		}
		for _, e := range s.clk.due() {
			e.f(s.clk.Now())
		}
		for _, sl := range woken {
			close(sl.wake)
		}
		if end {
			break
		}
	}
	// Queued clients give up; the others see stopped.
	cancel()
	wg.Wait()
	avg := make([]float64, len(s.seatTime))
	for i, st := range s.seatTime {
		avg[i] = st / float64(s.sc.duration)
	}
	return avg
}

var scenarios = []scenario{
	{
		name: "eight uniform flows", limit: 4, queues: 128, hand: 1, qll: 100, duration: 60 * time.Second, margin: 0.1,
		flows: []flowSpec{
			{8, 1, time.Second}, {8, 1, time.Second}, {8, 1, time.Second}, {8, 1, time.Second},
			{8, 1, time.Second}, {8, 1, time.Second}, {8, 1, time.Second}, {8, 1, time.Second},
		},
		expectNoRejections: true,
	},
	{
		name: "different service times, equal shares", limit: 4, queues: 64, hand: 1, qll: 100, duration: 120 * time.Second, margin: 0.1,
		flows:              []flowSpec{{10, 1, time.Second}, {10, 1, 3 * time.Second}},
		expectNoRejections: true,
	},
	{
		name: "different widths, equal seats", limit: 6, queues: 64, hand: 1, qll: 100, duration: 120 * time.Second, margin: 0.1,
		flows:              []flowSpec{{10, 1, time.Second}, {10, 2, time.Second}},
		expectNoRejections: true,
	},
}

// noopRatioed is a gauge that discards what it is fed.
type noopRatioed struct{}

func (noopRatioed) Set(float64)            {}
func (noopRatioed) Inc()                   {}
func (noopRatioed) Dec()                   {}
func (noopRatioed) Add(float64)            {}
func (noopRatioed) SetToCurrentTime()      {}
func (noopRatioed) SetDenominator(float64) {}

func buildQueueSet(t *testing.T, f fq.QueueSetFactory, sc scenario) fq.QueueSet {
	t.Helper()
	c, err := f.BeginConstruction(fq.QueuingConfig{
		Name: sc.name, DesiredNumQueues: sc.queues, QueueLengthLimit: sc.qll, HandSize: sc.hand,
	}, metrics.RatioedGaugePair{RequestsWaiting: noopRatioed{}, RequestsExecuting: noopRatioed{}}, noopRatioed{}, noopRatioed{})
	if err != nil {
		t.Fatal(err)
	}
	return c.Complete(fq.DispatchingConfig{ConcurrencyLimit: sc.limit, ConcurrencyDenominator: sc.limit})
}

func TestUniformScenarios(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			want := sc.perFlowExpectedSeats
			if want == nil {
				want = fairShares(float64(sc.limit), sc.flows)
			}
			for _, impl := range []string{"kubernetes", "libapf"} {
				t.Run(impl, func(t *testing.T) {
					clk := &simClock{start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
					s := &sim{clk: clk, sc: sc}
					if impl == "kubernetes" {
						s.qs = buildQueueSet(t, queueset.NewQueueSetFactory(clk), sc)
					} else {
						f := NewManualFactory()
						s.qs = buildQueueSet(t, f, sc)
						s.advance = func(d time.Duration) {
							if err := f.AdvanceClock(d); err != nil {
								t.Error(err)
							}
						}
					}
					got := s.run(t)
					for i := range got {
						if math.Abs(got[i]-want[i]) > sc.margin*want[i] {
							t.Errorf("flow %d: average seats %.3f, want %.3f ± %.0f%%", i, got[i], want[i], 100*sc.margin)
						}
					}
					if sc.expectNoRejections && s.rejected > 0 {
						t.Errorf("%d requests rejected", s.rejected)
					}
					t.Logf("average seats per flow %.3f (expected %.3f)", got, want)
				})
			}
		})
	}
}
