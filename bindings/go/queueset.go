package apf

// The per-request calls are marked noescape/nocallback, as the
// dispatcher's are (cgo.go): they keep no Go pointer after returning, and
// libapf's queueset has no callbacks (decisions reach Go through the
// completion fd), so their out-parameters stay on the goroutine's stack
// and a request costs no allocation here.
//
// A queueset's requests go through the same lifecycle calls as a
// dispatcher's (apf_finish, apf_request_poll, ...), with a NULL dispatcher:
// request handles are unique in the process, and NULL names no owner to
// check. The queueset is still entered around each call (q.c.enter), so a
// call after Close is ErrClosed rather than a stale handle.

/*
#cgo noescape apf_queueset_start
#cgo nocallback apf_queueset_start
#cgo noescape apf_finish
#cgo nocallback apf_finish
#cgo noescape apf_request_poll
#cgo nocallback apf_request_poll
#cgo noescape apf_request_cancel
#cgo nocallback apf_request_cancel
#cgo noescape apf_queueset_take_completion
#cgo nocallback apf_queueset_take_completion

#include <stdlib.h>
#include "apf.h"
*/
import "C"

import (
	"context"
	"encoding/json"
	"runtime"
	"sync"
	"time"
)

// QueueSetConfig configures a QueueSet: one priority level's fair queuing.
type QueueSetConfig struct {
	// ConcurrencyLimit is the seats that may be in use at once (0: every
	// request queues, or is rejected without queues).
	ConcurrencyLimit uint32
	// Queues is the number of queues; 0 means no queuing (a request that
	// does not fit is rejected with ConcurrencyLimit).
	Queues uint32
	// HandSize is the queues dealt to each flow (shuffle sharding).
	HandSize uint32
	// QueueLengthLimit is the requests one queue may hold.
	QueueLengthLimit uint32
	// ServiceTimeGuess is G (0: libapf's default, 3 ms).
	ServiceTimeGuess time.Duration
	// WaitLimit is the longest a request waits in a queue; 0 for no limit
	// of the queueset's own (the context's deadline still applies).
	WaitLimit time.Duration
	// Fairness is how the level shares its seats among flows (zero value:
	// FairnessKubernetes).
	Fairness Fairness
}

// Fairness is a queuing level's fairness policy (apf_fairness; in
// configuration files, the apf.libapf.io/fairness annotation).
type Fairness uint32

const (
	// FairnessKubernetes is Kubernetes' queueset: queues, not flows,
	// compete fairly.
	FairnessKubernetes Fairness = C.APF_FAIRNESS_KUBERNETES
	// FairnessFlow gives each flow its max-min fair share of the seats,
	// whatever its number of concurrent requests.
	FairnessFlow Fairness = C.APF_FAIRNESS_FLOW
	// FairnessFlowMaxMin is FairnessFlow with max-min allocation among
	// queues: R advances at the water level of the queues' demands, so a
	// queue asking for less than an equal share earns no credit for it.
	FairnessFlowMaxMin Fairness = C.APF_FAIRNESS_FLOW_MAXMIN
)

// QueueSet is one priority level's queues and seats driven directly: the
// caller classifies requests itself and gives each one's flow hash and
// work estimate (libapf's side of Kubernetes' fairqueuing.QueueSet; see
// the k8sfq module). All methods may be called from any goroutine.
type QueueSet struct {
	c *qsCore
}

type qsCore struct {
	// ptr is the C queueset, freed once (see use).
	ptr *C.apf_queueset
	// use counts the calls inside libapf, so that Close, racing calls from
	// other goroutines, never frees the queueset under one of them (the
	// Dispatcher's and Workqueue's scheme).
	use useCount
	completer
	once sync.Once
}

// QueueSetTicket is the decision on a request started at a QueueSet.
type QueueSetTicket struct {
	// Queued: the request waits; Await it. Otherwise it executes (Finish
	// it) unless Rejected.
	Queued   bool
	Rejected bool
	// Reason is why it was rejected.
	Reason RejectReason
	// WaitingID is the request's number in QueueSetDump.WaitingRequests
	// while it waits.
	WaitingID uint64
	// For a queued request: the index of the queue it joined (as in
	// QueueSetDump), that queue's length, itself included, and the level's
	// virtual time R then (seat-seconds), as Kubernetes' queue-length and
	// current-R metrics observe them.
	Queue       uint32
	QueueLength uint32
	CurrentR    float64
	handle      uint64
}

// NewQueueSet makes a queueset named name (for errors and dumps); with
// manualClock it runs on a clock that starts at 0 and moves only through
// AdvanceClock.
func NewQueueSet(name string, cfg QueueSetConfig, manualClock bool) (*QueueSet, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	ccfg, err := cfg.toC()
	if err != nil {
		return nil, err
	}
	var p *C.apf_queueset
	var e *C.apf_error
	n, nl := cstr(name)
	st := C.apf_queueset_new(n, nl, &ccfg, C.bool(manualClock), &p, &e)
	runtime.KeepAlive(name)
	if err := ownedErr(st, e); err != nil {
		return nil, err
	}
	c := &qsCore{ptr: p, completer: newCompleter()}
	var fd C.int
	if err := statusErr(C.apf_queueset_completion_fd(p, &fd)); err != nil {
		C.apf_queueset_free(p)
		return nil, err
	}
	raw, err := c.openCompletions(int(fd))
	if err != nil {
		C.apf_queueset_free(p)
		return nil, err
	}
	go c.completionLoop(raw, func(batch []C.uint64_t) (int, error) {
		return qsTake(p, batch)
	})
	q := &QueueSet{c: c}
	runtime.SetFinalizer(q, (*QueueSet).Close)
	return q, nil
}

// qsTake fills batch with decided requests and returns how many.
func qsTake(p *C.apf_queueset, batch []C.uint64_t) (int, error) {
	n := 0
	for n < len(batch) {
		var some C.bool
		if err := statusErr(C.apf_queueset_take_completion(p, &batch[n], &some)); err != nil {
			return n, err
		}
		if !some {
			break
		}
		n++
	}
	return n, nil
}

func (cfg QueueSetConfig) toC() (C.apf_queueset_config, error) {
	var c C.apf_queueset_config
	if err := statusErr(C.apf_queueset_config_default(&c)); err != nil {
		return c, err
	}
	c.concurrency_limit = C.uint32_t(cfg.ConcurrencyLimit)
	c.queues = C.uint32_t(cfg.Queues)
	c.hand_size = C.uint32_t(cfg.HandSize)
	c.queue_length_limit = C.uint32_t(cfg.QueueLengthLimit)
	if cfg.ServiceTimeGuess > 0 {
		c.service_time_guess_ns = C.uint64_t(cfg.ServiceTimeGuess)
	}
	c.wait_limit_ns = 0
	if cfg.WaitLimit > 0 {
		c.wait_limit_ns = C.uint64_t(cfg.WaitLimit)
	}
	c.fairness = C.uint32_t(cfg.Fairness)
	return c, nil
}

// Close frees the queueset: executing requests are finished, waiting ones
// cancelled (their Await returns ErrClosed). Idempotent.
func (q *QueueSet) Close() error {
	runtime.SetFinalizer(q, nil)
	q.c.once.Do(func() {
		// As Dispatcher.Close: hold a use while the completion goroutine
		// stops, so the last call's exit cannot free the queueset under
		// it; marking it closed first makes new calls fail.
		held := q.c.use.enter(false) // true: close runs once, and only here
		_ = q.c.use.close()          // never frees: the use above is held
		q.c.stop()
		if held {
			q.c.exit()
		}
	})
	return nil
}

// enter counts a call into libapf and gives the C queueset, or reports
// false once the queueset is closed; every successful enter is paired
// with an exit after the C call returned.
func (c *qsCore) enter() (*C.apf_queueset, bool) {
	if !c.use.enter(false) {
		return nil, false
	}
	return c.ptr, true
}

// exit counts a call out, freeing the queueset if it was the last call
// after Close.
func (c *qsCore) exit() {
	if c.use.exit() {
		C.apf_queueset_free(c.ptr)
	}
}

// Reconfigure switches to cfg; on error the old configuration stays.
func (q *QueueSet) Reconfigure(cfg QueueSetConfig) error {
	maybeGC()
	p, ok := q.c.enter()
	if !ok {
		return ErrClosed
	}
	defer q.c.exit()
	ccfg, err := cfg.toC()
	if err != nil {
		return err
	}
	var e *C.apf_error
	st := C.apf_queueset_reconfigure(p, &ccfg, &e)
	runtime.KeepAlive(q)
	return ownedErr(st, e)
}

// Start decides on a request of flow flowHash. deadline is on the
// queueset's clock (see Now); 0 for none. tag is the caller's number for
// the request's kind, shown in dumps.
func (q *QueueSet) Start(flowHash uint64, est WorkEstimate, deadline time.Duration, tag uint32) (QueueSetTicket, error) {
	maybeGC()
	p, ok := q.c.enter()
	if !ok {
		return QueueSetTicket{}, ErrClosed
	}
	defer q.c.exit()
	var dec C.apf_queueset_decision
	ce := C.apf_work_estimate{
		initial_seats: C.uint32_t(est.InitialSeats), final_seats: C.uint32_t(est.FinalSeats),
		additional_latency_nanos: C.uint64_t(est.AdditionalLatency),
	}
	st := C.apf_queueset_start(p, C.uint64_t(flowHash), &ce, C.uint64_t(max(deadline, 0)), C.uint32_t(tag), &dec)
	runtime.KeepAlive(q)
	if err := statusErr(st); err != nil {
		return QueueSetTicket{}, err
	}
	t := QueueSetTicket{
		handle: uint64(dec.request), WaitingID: uint64(dec.waiting_id),
		Queue: uint32(dec.queue), QueueLength: uint32(dec.queue_length), CurrentR: float64(dec.current_r),
	}
	switch uint32(dec.outcome) {
	case outcomeQueued:
		t.Queued = true
	case outcomeRejected:
		t.Rejected, t.Reason = true, RejectReason(dec.reject_reason)
	}
	return t, nil
}

// Await parks until a queued request is dispatched (true: run it, then
// Finish it) or rejected (false, with the reason); if ctx ends first the
// request is cancelled (Cancelled, or TimeOut for a passed deadline).
func (q *QueueSet) Await(ctx context.Context, t *QueueSetTicket) (bool, RejectReason, error) {
	outcome, reason, err := awaitDecision(ctx, q.c.waiters, q, t.handle)
	if err != nil {
		return false, 0, err
	}
	t.Queued = false
	if outcome == outcomeExecute {
		return true, NoReason, nil
	}
	t.Rejected, t.Reason = true, reason
	return false, reason, nil
}

// StillQueued reports whether a request that Start queued still waits for
// its decision (neither dispatched nor rejected yet). It neither waits nor
// takes the decision: Await still returns it. For callers that account
// for goroutines waiting in Await (k8sfq's fake-clock mode). Call it only
// before Finish.
func (q *QueueSet) StillQueued(t *QueueSetTicket) (bool, error) {
	outcome, _, err := q.pollC(t.handle)
	return err == nil && outcome == outcomeQueued, err
}

// Finish ends an executing request (its additional latency counts from now).
func (q *QueueSet) Finish(t *QueueSetTicket) error {
	maybeGC()
	p, ok := q.c.enter()
	if !ok {
		return ErrClosed
	}
	defer q.c.exit()
	st := C.apf_finish(nil, C.uint64_t(t.handle), 0)
	if err := statusErr(st); err != nil {
		runtime.KeepAlive(q)
		return err
	}
	// The seats just given back may have dispatched waiting requests: wake
	// their goroutines from here rather than wait for the completion
	// goroutine (a poller wake-up and a goroutine hop on the path from one
	// request to the next when the level is saturated). Both take from
	// libapf's completion queue under its lock, so each decision wakes its
	// waiter once.
	if q.c.waiters.any() {
		var batch [8]C.uint64_t
		for {
			got, err := qsTake(p, batch[:])
			for _, h := range batch[:got] {
				q.c.waiters.wake(uint64(h))
			}
			if err != nil || got < len(batch) {
				break
			}
		}
	}
	runtime.KeepAlive(q)
	return nil
}

// ReleaseSeats gives back seats of an executing request now (0: every
// seat it still holds) while it keeps executing, so a long request (a
// watch after its initial burst) cannot pin the level; waiting requests
// that now fit are dispatched, and Finish gives back only the rest.
// Releasing more seats than held, or all a second time, returns an error
// wrapping StatusInvalidParameter and changes nothing; a request that is
// still queued, StatusRequestQueued; after Finish, StatusInvalidHandle.
func (q *QueueSet) ReleaseSeats(t *QueueSetTicket, seats uint32) error {
	maybeGC()
	_, ok := q.c.enter()
	if !ok {
		return ErrClosed
	}
	defer q.c.exit()
	st := C.apf_request_release_seats(nil, C.uint64_t(t.handle), C.uint32_t(seats))
	runtime.KeepAlive(q)
	return statusErr(st)
}

func (q *QueueSet) pollC(h uint64) (uint32, RejectReason, error) {
	maybeGC()
	_, ok := q.c.enter()
	if !ok {
		return 0, 0, ErrClosed
	}
	defer q.c.exit()
	var o, r C.uint32_t
	st := C.apf_request_poll(nil, C.uint64_t(h), &o, &r)
	runtime.KeepAlive(q)
	return uint32(o), RejectReason(r), statusErr(st)
}

func (q *QueueSet) cancelC(h uint64) (bool, error) {
	maybeGC()
	_, ok := q.c.enter()
	if !ok {
		return false, ErrClosed
	}
	defer q.c.exit()
	var cancelled C.bool
	st := C.apf_request_cancel(nil, C.uint64_t(h), &cancelled)
	runtime.KeepAlive(q)
	return bool(cancelled), statusErr(st)
}

// AdvanceClock moves a manual clock forward, firing what falls due.
func (q *QueueSet) AdvanceClock(by time.Duration) error {
	if by < 0 {
		return &Error{Status: StatusInvalidParameter, Message: "AdvanceClock: negative duration"}
	}
	p, ok := q.c.enter()
	if !ok {
		return ErrClosed
	}
	defer q.c.exit()
	st := C.apf_queueset_advance_clock(p, C.uint64_t(by))
	runtime.KeepAlive(q)
	return statusErr(st)
}

// Now is the queueset's clock: time since its creation (or 0 of a manual
// clock).
func (q *QueueSet) Now() (time.Duration, error) {
	p, ok := q.c.enter()
	if !ok {
		return 0, ErrClosed
	}
	defer q.c.exit()
	var n C.uint64_t
	st := C.apf_queueset_now(p, &n)
	runtime.KeepAlive(q)
	return time.Duration(n), statusErr(st)
}

// IsIdle reports whether no request executes, waits or holds seats.
func (q *QueueSet) IsIdle() (bool, error) {
	p, ok := q.c.enter()
	if !ok {
		return false, ErrClosed
	}
	defer q.c.exit()
	var idle C.bool
	st := C.apf_queueset_is_idle(p, &idle)
	runtime.KeepAlive(q)
	return bool(idle), statusErr(st)
}

// QueueSetStats are a queueset's gauges and counters.
type QueueSetStats struct {
	ConcurrencyLimit, Queues, Executing, Waiting uint32
	SeatsInUse, SeatsWaiting, Dispatched         uint64
	RejectedQueueFull, RejectedTimeOut           uint64
	RejectedCancelled, RejectedConcurrencyLimit  uint64
}

// Stats reads the queueset's gauges and counters.
func (q *QueueSet) Stats() (QueueSetStats, error) {
	p, ok := q.c.enter()
	if !ok {
		return QueueSetStats{}, ErrClosed
	}
	defer q.c.exit()
	var s C.apf_queueset_stats
	st := C.apf_queueset_read_stats(p, &s)
	runtime.KeepAlive(q)
	return QueueSetStats{
		ConcurrencyLimit: uint32(s.concurrency_limit), Queues: uint32(s.queues),
		Executing: uint32(s.executing), Waiting: uint32(s.waiting),
		SeatsInUse: uint64(s.seats_in_use), SeatsWaiting: uint64(s.seats_waiting),
		Dispatched: uint64(s.dispatched), RejectedQueueFull: uint64(s.rejected_queue_full),
		RejectedTimeOut: uint64(s.rejected_time_out), RejectedCancelled: uint64(s.rejected_cancelled),
		RejectedConcurrencyLimit: uint64(s.rejected_concurrency_limit),
	}, statusErr(st)
}

// QueueSetDump is a queueset's state at one moment (apf_queueset_dump_json).
type QueueSetDump struct {
	NowNanos                 uint64           `json:"now_ns"`
	CurrentR                 float64          `json:"current_r"`
	ConcurrencyLimit         uint32           `json:"concurrency_limit"`
	Executing                int              `json:"executing"`
	Waiting                  int              `json:"waiting"`
	SeatsInUse               int              `json:"seats_in_use"`
	SeatsWaiting             int              `json:"seats_waiting"`
	Dispatched               int              `json:"dispatched"`
	RejectedQueueFull        int              `json:"rejected_queue_full"`
	RejectedTimeOut          int              `json:"rejected_time_out"`
	RejectedCancelled        int              `json:"rejected_cancelled"`
	RejectedConcurrencyLimit int              `json:"rejected_concurrency_limit"`
	Queues                   []QueueDump      `json:"queues"`
	WaitingRequests          []WaitingRequest `json:"waiting_requests"`
}

// QueueDump is one queue; virtual times are in seat-seconds.
type QueueDump struct {
	Index           int     `json:"index"`
	Waiting         int     `json:"waiting"`
	Executing       int     `json:"executing"`
	SeatsInUse      int     `json:"seats_in_use"`
	NextDispatchR   float64 `json:"next_dispatch_r"`
	InitialSeatsSum int     `json:"initial_seats_sum"`
	MaxSeatsSum     int     `json:"max_seats_sum"`
	TotalWorkSum    float64 `json:"total_work_sum"`
}

// WaitingRequest is one waiting request, queue by queue, head first.
type WaitingRequest struct {
	Queue               int    `json:"queue"`
	Position            int    `json:"position"`
	ID                  uint64 `json:"id"`
	Tag                 uint32 `json:"tag"`
	ArrivalNanos        uint64 `json:"arrival_ns"`
	InitialSeats        uint32 `json:"initial_seats"`
	FinalSeats          uint32 `json:"final_seats"`
	AdditionalLatencyNs uint64 `json:"additional_latency_ns"`
}

// Dump reads the queueset's state.
func (q *QueueSet) Dump() (QueueSetDump, error) {
	p, ok := q.c.enter()
	if !ok {
		return QueueSetDump{}, ErrClosed
	}
	defer q.c.exit()
	text, err := takeText(func(out *C.apf_text) C.apf_status {
		return C.apf_queueset_dump_json(p, out)
	})
	runtime.KeepAlive(q)
	var d QueueSetDump
	if err != nil {
		return d, err
	}
	err = json.Unmarshal([]byte(text), &d)
	return d, err
}
