package k8sfq

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	apf "github.com/libapf/apf/bindings/go"
	"k8s.io/apiserver/pkg/util/flowcontrol/counter"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing/eventclock"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	"k8s.io/klog/v2"
)

// Factory makes libapf queuesets for Kubernetes' APF controller
// (fairqueuing.QueueSetFactory).
type Factory struct {
	manual bool
	// clk, for NewFactoryOnClock: the clock the manual clock follows (from
	// start), and active, the fake clock's goroutine counter (or nil).
	clk    eventclock.Interface
	start  time.Time
	active counter.GoRoutineCounter
	// count: the waiting goroutines counted out of active (see counting.go).
	count waitCount

	mu sync.Mutex
	// sets and now: a manual factory's queuesets and its clock, which
	// AdvanceClock moves for all of them at once.
	sets []*apf.QueueSet
	now  time.Duration
	// timers: a manual factory's pending after calls, by due time.
	timers []manualTimer
}

type manualTimer struct {
	due time.Duration
	fn  func()
}

var _ fq.QueueSetFactory = (*Factory)(nil)

// NewFactory makes queuesets on the real monotonic clock.
func NewFactory() *Factory { return &Factory{} }

// NewManualFactory makes queuesets on libapf's manual clock, which moves
// only through AdvanceClock (for tests and simulations on a fake clock).
func NewManualFactory() *Factory { return &Factory{manual: true} }

// NewFactoryOnClock makes queuesets whose time is clk's, Kubernetes'
// event clock (the one queueset.NewQueueSetFactory takes): libapf runs
// them on its manual clock, brought to clk's time before every call that
// reads time, and a request's additional latency ends at a clk event. For
// simulations and tests on a fake clock (Kubernetes'
// testing/eventclock.Fake). active, when not nil, is that fake clock's
// count of running goroutines (the clock moves only when it is 0): a
// goroutine that waits in a queue counts itself out, and the goroutine
// whose call dispatches it counts it back in before that call returns, as
// Kubernetes' counting promises do; see counting.go.
func NewFactoryOnClock(clk eventclock.Interface, active counter.GoRoutineCounter) *Factory {
	return &Factory{manual: true, clk: clk, start: clk.Now(), active: active}
}

// AdvanceClock moves a manual factory's clock, and every queueset's, by d.
func (f *Factory) AdvanceClock(d time.Duration) error {
	if !f.manual || f.clk != nil {
		return fmt.Errorf("k8sfq: AdvanceClock on a factory with the real clock or a clock of its own")
	}
	if d < 0 {
		return fmt.Errorf("k8sfq: AdvanceClock by a negative duration %v", d)
	}
	due, err := f.advance(func(now time.Duration) time.Duration { return now + d })
	// Outside f.mu: the calls feed gauges, which may call back into
	// anything.
	for _, fn := range due {
		fn()
	}
	return err
}

// wallNow is the time the dumps show (arrival, start of execution): the
// factory's clock for NewFactoryOnClock, as Kubernetes' queueset reads its
// clock, else the real one.
func (f *Factory) wallNow() time.Time {
	if f.clk != nil {
		return f.clk.Now()
	}
	return time.Now()
}

// sync brings a NewFactoryOnClock factory's queuesets to its clock's time
// (a no-op for the others), then counts back in the goroutines that moving
// the clock dispatched.
func (f *Factory) sync() {
	if f.clk == nil {
		return
	}
	to := f.clk.Since(f.start)
	if _, err := f.advance(func(time.Duration) time.Duration { return to }); err != nil {
		klog.ErrorS(err, "libapf queueset: following the factory's clock")
	}
	f.credit()
}

// advance moves the clocks to target(now) (never backwards) and takes the
// after calls that fell due, in due order.
func (f *Factory) advance(target func(now time.Duration) time.Duration) ([]func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := target(f.now) - f.now
	if d <= 0 {
		return nil, nil
	}
	f.now += d
	var err error
	for _, q := range f.sets {
		if err = q.AdvanceClock(d); err != nil {
			break
		}
	}
	sort.SliceStable(f.timers, func(i, j int) bool { return f.timers[i].due < f.timers[j].due })
	n := 0
	for n < len(f.timers) && f.timers[n].due <= f.now {
		n++
	}
	due := make([]func(), n)
	for i := range due {
		due[i] = f.timers[i].fn
	}
	f.timers = append(f.timers[:0], f.timers[n:]...)
	return due, err
}

// after calls fn once d has passed on the factory's clock: the real one,
// or a manual factory's (then from AdvanceClock).
func (f *Factory) after(d time.Duration, fn func()) {
	if f.clk != nil {
		f.clk.EventAfterDuration(func(time.Time) {
			// libapf holds the final seats until its clock reaches the
			// same time, then dispatches what now fits.
			f.sync()
			fn()
		}, d)
		return
	}
	if !f.manual {
		time.AfterFunc(d, fn)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.timers = append(f.timers, manualTimer{due: f.now + d, fn: fn})
}

// newQueueSet makes a libapf queueset (validating the configuration) and,
// for a manual factory, brings its clock to the factory's.
func (f *Factory) newQueueSet(name string, cfg apf.QueueSetConfig) (*apf.QueueSet, error) {
	q, err := apf.NewQueueSet(name, cfg, f.manual)
	if err != nil {
		return nil, err
	}
	if f.manual {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := q.AdvanceClock(f.now); err != nil {
			_ = q.Close()
			return nil, err
		}
		f.sets = append(f.sets, q)
	}
	return q, nil
}

// BeginConstruction checks the queuing configuration and makes the
// queueset, which admits nothing until Complete gives its concurrency
// limit.
func (f *Factory) BeginConstruction(qCfg fq.QueuingConfig, reqs metrics.RatioedGaugePair,
	execSeats metrics.RatioedGauge, seatDemand metrics.Gauge) (fq.QueueSetCompleter, error) {
	cfg, err := toConfig(qCfg, 0)
	if err != nil {
		return nil, err
	}
	q, err := f.newQueueSet(qCfg.Name, cfg)
	if err != nil {
		return nil, fmt.Errorf("priority level %q: %w", qCfg.Name, err)
	}
	// qCfg starts as the configuration itself, as in Kubernetes: a level
	// built without queues keeps its own queue length limit and hand size
	// (the waiting gauge's denominator).
	qs := &queueSet{
		f: f, q: q, name: qCfg.Name, qCfg: qCfg,
		reqs: reqs, execSeats: execSeats, seatDemand: seatDemand,
	}
	return &completer{qs: qs, qCfg: qCfg}, nil
}

// completer holds a checked queuing configuration until Complete.
type completer struct {
	qs   *queueSet
	qCfg fq.QueuingConfig
}

// Complete applies the queuing configuration with the dispatching one.
func (c *completer) Complete(dCfg fq.DispatchingConfig) fq.QueueSet {
	c.qs.apply(c.qCfg, dCfg)
	return c.qs
}

// exemptLimit is libapf's largest concurrency limit (MAX_CONCURRENCY_LIMIT),
// given to exempt levels.
const exemptLimit = 1 << 30

// toConfig maps Kubernetes' queuing configuration and concurrency limit
// onto libapf's. As in Kubernetes, DesiredNumQueues 0 means no queuing: a
// request that does not fit is rejected. A negative DesiredNumQueues is
// Kubernetes' code for an exempt level (the APF controller gives every
// exempt priority level -1): never limited and never rejected, whatever
// the concurrency limit, only counted. libapf still runs the level (so its
// requests stay counted in libapf and in the gauges, and a later change
// to a limited configuration counts them against the new limit, as
// Kubernetes' seats in use do), at libapf's largest concurrency limit,
// 2^30 seats, which no real set of requests reaches (Kubernetes caps a
// request at a few hundred seats).
func toConfig(q fq.QueuingConfig, limit int) (apf.QueueSetConfig, error) {
	if q.DesiredNumQueues < 0 {
		return apf.QueueSetConfig{ConcurrencyLimit: exemptLimit}, nil
	}
	if limit < 0 {
		return apf.QueueSetConfig{}, fmt.Errorf("priority level %q: negative concurrency limit %d", q.Name, limit)
	}
	cfg := apf.QueueSetConfig{ConcurrencyLimit: uint32(min(limit, math.MaxUint32))}
	if q.DesiredNumQueues == 0 {
		return cfg, nil
	}
	if q.HandSize <= 0 || q.HandSize > q.DesiredNumQueues {
		return cfg, fmt.Errorf("priority level %q: handSize %d must be between 1 and the number of queues %d",
			q.Name, q.HandSize, q.DesiredNumQueues)
	}
	if q.QueueLengthLimit <= 0 {
		return cfg, fmt.Errorf("priority level %q: queueLengthLimit %d must be positive", q.Name, q.QueueLengthLimit)
	}
	if q.DesiredNumQueues > math.MaxUint32 || q.QueueLengthLimit > math.MaxUint32 {
		return cfg, fmt.Errorf("priority level %q: queues or queueLengthLimit out of range", q.Name)
	}
	cfg.Queues = uint32(q.DesiredNumQueues)
	cfg.HandSize = uint32(q.HandSize)
	cfg.QueueLengthLimit = uint32(q.QueueLengthLimit)
	return cfg, nil
}
