package k8sfq

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	apf "github.com/libapf/apf/bindings/go"
	fq "k8s.io/apiserver/pkg/util/flowcontrol/fairqueuing"
	"k8s.io/apiserver/pkg/util/flowcontrol/metrics"
	fcrequest "k8s.io/apiserver/pkg/util/flowcontrol/request"
	"k8s.io/klog/v2"
)

// queueSet is one priority level's libapf queueset seen as Kubernetes'
// fairqueuing.QueueSet.
type queueSet struct {
	f    *Factory
	q    *apf.QueueSet
	name string

	// The gauges the controller passed in, fed where Kubernetes' queueset
	// feeds them.
	reqs       metrics.RatioedGaugePair
	execSeats  metrics.RatioedGauge
	seatDemand metrics.Gauge

	// Requests and seats as Kubernetes counts them: waiting, and executing
	// (seats: the request's max seats, from dispatch to the end of its
	// execution, or of its additional latency when it has one).
	waiting, executing       atomic.Int64
	seatsWaiting, seatsInUse atomic.Int64
	demandMu                 sync.Mutex

	// queuing: the configuration in force has queues, so, as in Kubernetes,
	// a request admitted at once still goes through a queue for the
	// queue-note callback and the in-queue series.
	queuing atomic.Bool

	mu   sync.Mutex
	qCfg fq.QueuingConfig

	tags tagTable
	// reg: the executing requests, and the waiting ones by waiting id,
	// which Dump lists.
	reg registry
}

var _ fq.QueueSet = (*queueSet)(nil)

// apply puts a checked configuration in force and sets the gauges'
// denominators as Kubernetes does: the waiting gauge's is the queues'
// total capacity, the executing ones' the concurrency denominator.
func (qs *queueSet) apply(qCfg fq.QueuingConfig, dCfg fq.DispatchingConfig) {
	qs.mu.Lock()
	defer qs.mu.Unlock()
	if qCfg.DesiredNumQueues <= 0 {
		qCfg.QueueLengthLimit, qCfg.HandSize = qs.qCfg.QueueLengthLimit, qs.qCfg.HandSize
	}
	qs.qCfg = qCfg
	qs.queuing.Store(qCfg.DesiredNumQueues > 0)
	qs.f.sync()
	cfg, err := toConfig(qCfg, dCfg.ConcurrencyLimit)
	if err == nil {
		err = qs.q.Reconfigure(cfg)
	}
	// A higher limit may have dispatched waiting requests.
	defer qs.f.credit()
	if err != nil {
		// Both configurations were checked before Complete; only a negative
		// or oversized concurrency limit gets here.
		klog.ErrorS(err, "libapf queueset reconfiguration refused; the previous configuration stays", "priorityLevel", qs.name)
	}
	qll := max(qCfg.QueueLengthLimit, 1)
	if qCfg.DesiredNumQueues > 0 {
		qll *= qCfg.DesiredNumQueues
	}
	qs.reqs.RequestsWaiting.SetDenominator(float64(qll))
	qs.reqs.RequestsExecuting.SetDenominator(float64(dCfg.ConcurrencyDenominator))
	qs.execSeats.SetDenominator(float64(dCfg.ConcurrencyDenominator))
}

// BeginConfigChange checks a new queuing configuration; Complete applies it.
func (qs *queueSet) BeginConfigChange(qCfg fq.QueuingConfig) (fq.QueueSetCompleter, error) {
	cfg, err := toConfig(qCfg, 0)
	if err != nil {
		return nil, err
	}
	if cfg.Queues > 0 {
		// libapf's own checks (the shuffle-sharding dealer's limits), on a
		// probe, so that Complete cannot fail.
		probe, err := apf.NewQueueSet(qCfg.Name, cfg, true)
		if err != nil {
			return nil, fmt.Errorf("priority level %q: %w", qCfg.Name, err)
		}
		_ = probe.Close()
	}
	return &completer{qs: qs, qCfg: qCfg}, nil
}

// IsIdle: no request waits or executes (Kubernetes' sense: seats still
// held for additional latency do not count).
func (qs *queueSet) IsIdle() bool {
	return qs.waiting.Load() == 0 && qs.executing.Load() == 0
}

// noteDemand sets the seat-demand gauge to the seats in use and waiting.
// Set is not commutative as the other gauges' Add is: two goroutines that
// read the counters and then Set could leave the older reading in the
// gauge. Reading and setting under demandMu makes the last Set read the
// counters after every update that preceded it (each updater calls
// noteDemand after its update), so the gauge ends at the true value.
func (qs *queueSet) noteDemand() {
	qs.demandMu.Lock()
	qs.seatDemand.Set(float64(qs.seatsInUse.Load() + qs.seatsWaiting.Load()))
	qs.demandMu.Unlock()
}

// request is one request between StartRequest and the end of Finish.
type request struct {
	qs                *queueSet
	ctx               context.Context
	ticket            apf.QueueSetTicket
	fsName            string
	flowDistinguisher string
	estimate          fcrequest.WorkEstimate
	seats             int
	queueNote         fq.QueueNoteFn
	// arrival: StartRequest; start: dispatch (for Dump).
	arrival, start time.Time
	// waited: it joined libapf's queue number queue (set before the
	// request is shared; Await later changes ticket.Queued).
	waited bool
	queue  int
	// hash: the flow hash (the registry's shard).
	hash uint64
	// waitCtx: the context Await waits on (ctx, but for goroutine
	// counting, see counting.go); ctxDone: ctx ended (under count.mu).
	waitCtx context.Context
	ctxDone bool
}

func clampSeats(s uint64) uint32 {
	return uint32(min(s, uint64(^uint32(0))))
}

// StartRequest decides at once whether the request executes, waits in a
// queue (libapf deals the queue from hashValue) or is rejected (nil). A
// request that waits is observed in the queue-length histogram (the length
// of the queue it joined) and sets the current-R gauge, as Kubernetes does
// at each enqueue; one admitted at once on libapf's lock-free path joins
// no queue and observes neither. As in Kubernetes, which puts every
// request of a level with queues in a queue and dispatches it from there,
// a request admitted at once on such a level calls queueNoteFn(true) then
// queueNoteFn(false) (the HTTP filter's waiting-requests watermark counts
// it), and its flow schema's in-queue request and seat series exist, at 0.
func (qs *queueSet) StartRequest(ctx context.Context, width *fcrequest.WorkEstimate, hashValue uint64,
	flowDistinguisher, fsName string, descr1, descr2 interface{}, queueNoteFn fq.QueueNoteFn) (fq.Request, bool) {
	est := apf.WorkEstimate{
		InitialSeats:      clampSeats(width.InitialSeats),
		FinalSeats:        clampSeats(width.FinalSeats),
		AdditionalLatency: width.AdditionalLatency,
	}
	qs.f.sync()
	tag := qs.tags.entry(fsName)
	t, err := qs.q.Start(hashValue, est, 0, tag.id)
	qs.f.credit()
	if err != nil {
		klog.ErrorS(err, "libapf queueset refused to start a request; rejecting it", "priorityLevel", qs.name, "flowSchema", fsName)
		return nil, qs.IsIdle()
	}
	if t.Rejected {
		metrics.AddReject(ctx, qs.name, fsName, t.Reason.String())
		return nil, qs.IsIdle()
	}
	r := requestPool.Get().(*request)
	*r = request{
		qs: qs, ctx: ctx, ticket: t, fsName: fsName, flowDistinguisher: flowDistinguisher,
		estimate: *width, seats: width.MaxSeats(), queueNote: queueNoteFn, arrival: qs.f.wallNow(),
		waited: t.Queued, queue: int(t.Queue), hash: hashValue,
	}
	r.waitCtx = qs.f.watch(r)
	if !t.Queued {
		if qs.queuing.Load() {
			tag.inQueueSeries(ctx, qs.name, fsName)
			if queueNoteFn != nil {
				queueNoteFn(true)
				queueNoteFn(false)
			}
		}
		r.executing()
		return r, false
	}
	qs.reg.addQueued(t.WaitingID, r)
	// Kubernetes observes these at every enqueue; libapf reports them for
	// the requests that really join a queue (see StartRequest's doc).
	metrics.ObserveQueueLength(ctx, qs.name, fsName, int(t.QueueLength))
	metrics.SetCurrentR(qs.name, t.CurrentR)
	if queueNoteFn != nil {
		queueNoteFn(true)
	}
	qs.waiting.Add(1)
	qs.seatsWaiting.Add(int64(r.seats))
	qs.reqs.RequestsWaiting.Add(1)
	metrics.AddRequestsInQueues(ctx, qs.name, fsName, 1)
	metrics.AddSeatsInQueues(ctx, qs.name, fsName, r.seats)
	qs.noteDemand()
	return r, false
}

// executing counts the request as executing.
func (r *request) executing() {
	qs := r.qs
	// A request admitted at once starts when it arrives: one clock read.
	r.start = r.arrival
	if r.waited {
		r.start = qs.f.wallNow()
	}
	qs.reg.addRunning(r)
	qs.executing.Add(1)
	qs.seatsInUse.Add(int64(r.seats))
	qs.reqs.RequestsExecuting.Add(1)
	qs.execSeats.Add(float64(r.seats))
	metrics.AddRequestsExecuting(r.ctx, qs.name, r.fsName, 1)
	metrics.AddSeatConcurrencyInUse(qs.name, r.fsName, r.seats)
	qs.noteDemand()
}

// leftQueue counts the request out of its queue.
func (r *request) leftQueue() {
	qs := r.qs
	qs.reg.removeQueued(r.ticket.WaitingID)
	if r.queueNote != nil {
		r.queueNote(false)
	}
	qs.waiting.Add(-1)
	qs.seatsWaiting.Add(-int64(r.seats))
	qs.reqs.RequestsWaiting.Add(-1)
	metrics.AddRequestsInQueues(r.ctx, qs.name, r.fsName, -1)
	metrics.AddSeatsInQueues(r.ctx, qs.name, r.fsName, -r.seats)
}

// releaseSeats counts the request's seats out of the gauges.
func (r *request) releaseSeats() {
	qs := r.qs
	qs.seatsInUse.Add(-int64(r.seats))
	qs.execSeats.Add(-float64(r.seats))
	metrics.AddSeatConcurrencyInUse(qs.name, r.fsName, -r.seats)
	qs.noteDemand()
}

// Finish waits while the request is queued (until it is dispatched or its
// context ends), runs execute if it was dispatched, and gives its seats
// back when execute returns or panics. As in Kubernetes, a request with
// additional latency stops executing then but keeps its seats in the
// gauges until the latency has passed on the factory's clock (libapf
// holds its final seats as long).
func (r *request) Finish(execute func()) (idle bool) {
	qs := r.qs
	if r.ticket.Queued {
		qs.f.countOut(r)
		run, _, err := qs.q.Await(r.waitCtx, &r.ticket)
		qs.f.countIn(r)
		r.leftQueue()
		if err != nil || !run {
			// Kubernetes labels every rejection after waiting "time-out".
			metrics.AddReject(r.ctx, qs.name, r.fsName, "time-out")
			qs.noteDemand()
			r.recycle(false)
			return qs.IsIdle()
		}
		r.executing()
	}
	defer func() {
		qs.f.sync()
		if err := qs.q.Finish(&r.ticket); err != nil {
			klog.ErrorS(err, "libapf queueset: finishing a request", "priorityLevel", qs.name)
		}
		qs.f.credit()
		qs.reg.removeRunning(r)
		qs.executing.Add(-1)
		qs.reqs.RequestsExecuting.Add(-1)
		metrics.AddRequestsExecuting(r.ctx, qs.name, r.fsName, -1)
		lingering := r.estimate.AdditionalLatency > 0
		if lingering {
			qs.f.after(r.estimate.AdditionalLatency, r.releaseSeats)
		} else {
			r.releaseSeats()
		}
		idle = qs.IsIdle()
		r.recycle(lingering)
	}()
	execute()
	return false
}

// requestPool recycles finished requests: a request admitted and finished
// allocates nothing in the factory once the pool is warm.
var requestPool = sync.Pool{New: func() any { return new(request) }}

// recycle returns a finished request to the pool, unless something may
// still read it: its lingering-seat timer, or (on a counting fake clock)
// its context watcher. The controller does not touch a request after
// Finish.
func (r *request) recycle(lingering bool) {
	if lingering || r.qs.f.active != nil {
		return
	}
	*r = request{}
	requestPool.Put(r)
}

// tagTable numbers flow schema names for libapf's request tags.
type tagTable struct {
	ids   sync.Map // string -> *tagEntry
	mu    sync.Mutex
	names []string
}

// tagEntry is one flow schema seen at the queueset.
type tagEntry struct {
	id uint32
	// series: its in-queue series exist (made once, at 0; Kubernetes makes
	// them by adding 1 then -1 for each request it dispatches at once).
	series atomic.Bool
}

func (t *tagTable) entry(name string) *tagEntry {
	if v, ok := t.ids.Load(name); ok {
		return v.(*tagEntry)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.ids.Load(name); ok {
		return v.(*tagEntry)
	}
	e := &tagEntry{id: uint32(len(t.names))}
	t.names = append(t.names, name)
	t.ids.Store(name, e)
	return e
}

// inQueueSeries makes the flow schema's in-queue request and seat series
// of the level, at 0, unless done already.
func (e *tagEntry) inQueueSeries(ctx context.Context, level, fsName string) {
	if e.series.Load() || e.series.Swap(true) {
		return
	}
	metrics.AddRequestsInQueues(ctx, level, fsName, 0)
	metrics.AddSeatsInQueues(ctx, level, fsName, 0)
}

func (t *tagTable) name(id uint32) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(id) < len(t.names) {
		return t.names[id]
	}
	return ""
}
