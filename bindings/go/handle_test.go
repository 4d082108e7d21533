package apf

import (
	"context"
	"errors"
	"fmt"
	"runtime/pprof"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestExecuteReportsClassification(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	var noted Classification
	ran := false
	res, err := d.Handle(context.Background(), podGet("alice"),
		func(c Classification) { noted = c }, nil, nil, func() { ran = true })
	if err != nil {
		t.Fatal(err)
	}
	want := Classification{
		FlowSchema: "alice", FlowSchemaUID: "uid-fs-alice",
		PriorityLevel: "tight", PriorityLevelUID: "uid-pl-tight",
	}
	if !ran || res.Outcome != Executed || res.Queued || res.Classification != want || noted != want {
		t.Fatalf("ran %v, result %+v, noted %+v", ran, res, noted)
	}
	if got := levelStat(t, d, "tight", "seats_in_use"); got != 0 {
		t.Fatalf("seats in use after finish: %d", got)
	}
}

func TestBuiltinClassifiesAndExecutes(t *testing.T) {
	d, err := NewBuiltin(Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dg := podGet("alice")
	dg.Groups = []string{"system:authenticated"}
	res, err := d.Handle(context.Background(), dg, nil, nil, nil, func() {})
	if err != nil || res.Outcome != Executed {
		t.Fatalf("%+v %v", res, err)
	}
	if res.FlowSchema != "global-default" || res.PriorityLevel != "global-default" {
		t.Fatalf("classified as %+v", res.Classification)
	}
}

func TestGroupsReachClassification(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	dg := podGet("carol")
	for _, n := range []int{1, 2, 12} { // 12 > the C side's small array
		dg.Groups = nil
		for i := 0; i < n-1; i++ {
			dg.Groups = append(dg.Groups, fmt.Sprintf("group-%d", i))
		}
		dg.Groups = append(dg.Groups, "team-z")
		res, err := d.Handle(context.Background(), dg, nil, nil, nil, func() {})
		if err != nil || res.FlowSchema != "team-z" {
			t.Fatalf("%d groups: %+v %v", n, res, err)
		}
	}
	dg.Groups = []string{"team-y", ""}
	res, err := d.Handle(context.Background(), dg, nil, nil, nil, func() {})
	if err != nil || res.FlowSchema != "catch-all" {
		t.Fatalf("no matching group: %+v %v", res, err)
	}
}

func TestRejectsAtConcurrencyLimit(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	h := hold(t, d, "bob", levelSeats)
	ran := false
	res, err := d.Handle(context.Background(), podGet("bob"), nil, nil, nil, func() { ran = true })
	if err != nil {
		t.Fatal(err)
	}
	if ran || res.Outcome != Rejected || res.RejectReason != ConcurrencyLimit || res.PriorityLevel != "strict" {
		t.Fatalf("ran %v, %+v", ran, res)
	}
	h.stop(t)
	if got := levelStat(t, d, "strict", "rejected_concurrency-limit"); got != 1 {
		t.Fatalf("rejections counted: %d", got)
	}
}

// The estimate reaches libapf. strict does not queue, so, as in
// Kubernetes, no per-request seat cap applies there (only queuing levels
// cap a request's seats).
func TestWorkEstimateTakesSeats(t *testing.T) {
	d := newTestDispatcher(t, Options{ServerConcurrencyLimit: 50})
	for _, c := range []struct{ asked, held int64 }{{0, 1}, {1, 1}, {3, 3}, {9, 9}} {
		est := func() WorkEstimate { return WorkEstimate{InitialSeats: uint32(c.asked)} }
		var held int64
		_, err := d.Handle(context.Background(), podGet("bob"), nil, est, nil, func() {
			held = levelStat(t, d, "strict", "seats_in_use")
		})
		if err != nil || held != c.held {
			t.Fatalf("asked %d seats, held %d (%v)", c.asked, held, err)
		}
	}
	// Final seats linger for the additional latency after the finish.
	est := func() WorkEstimate {
		return WorkEstimate{InitialSeats: 1, FinalSeats: 2, AdditionalLatency: time.Hour}
	}
	if _, err := d.Handle(context.Background(), podGet("bob"), nil, est, nil, func() {}); err != nil {
		t.Fatal(err)
	}
	if got := levelStat(t, d, "strict", "seats_in_use"); got != 2 {
		t.Fatalf("%d seats held after the finish, want the 2 final seats", got)
	}
}

// Many queued requests, each on its own goroutine, are dispatched one by
// one as executing ones finish; never more than the level's seats run at
// once; and the waiting goroutines hold no OS threads.
func TestQueuedRequestsAreDispatchedByFinishes(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	const waiters = 200
	threadsBefore := pprof.Lookup("threadcreate").Count()
	h := hold(t, d, "alice", levelSeats)

	var running, maxRunning, executed, inQueue, queueNotes atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < waiters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := d.Handle(context.Background(), podGet("alice"), nil, nil,
				func(in bool) {
					queueNotes.Add(1)
					if in {
						inQueue.Add(1)
					} else {
						inQueue.Add(-1)
					}
				},
				func() {
					n := running.Add(1)
					for m := maxRunning.Load(); n > m && !maxRunning.CompareAndSwap(m, n); m = maxRunning.Load() {
					}
					executed.Add(1)
					time.Sleep(50 * time.Microsecond)
					running.Add(-1)
				})
			if err != nil || res.Outcome != Executed || !res.Queued {
				t.Errorf("%+v %v", res, err)
			}
		}()
	}
	eventually(t, "all requests queued", func() bool { return inQueue.Load() == waiters })
	// Errorf, not Fatalf: the dispatcher must outlive the goroutines.
	if got := levelStat(t, d, "tight", "waiting"); got != waiters {
		t.Errorf("libapf counts %d waiting", got)
	}
	// A blocking C call per waiter would make the runtime start a thread
	// for each (checked: 200 threads for 200 waiters).
	if grown := pprof.Lookup("threadcreate").Count() - threadsBefore; grown > 20 {
		t.Errorf("%d OS threads created for %d waiting requests", grown, waiters)
	}
	h.stop(t)
	wg.Wait()
	if executed.Load() != waiters || maxRunning.Load() > levelSeats || queueNotes.Load() != 2*waiters {
		t.Fatalf("executed %d, max running %d (seats %d), queue notes %d",
			executed.Load(), maxRunning.Load(), levelSeats, queueNotes.Load())
	}
	if d.c.waiters.len() != 0 {
		t.Fatalf("%d waiters left registered", d.c.waiters.len())
	}
	global, _ := stats(t, d)
	if global["requests_live"] != 0 || global["completions_pending"] != 0 {
		t.Fatalf("libapf still tracks requests: %v", global)
	}
}

// queueOne starts a request that must queue behind holders and returns
// once it is in its queue; the result arrives on the channel.
func queueOne(t *testing.T, d *Dispatcher, ctx context.Context, ran *atomic.Bool) <-chan Result {
	t.Helper()
	queued := make(chan struct{})
	out := make(chan Result, 1)
	go func() {
		res, err := d.Handle(ctx, podGet("alice"), nil, nil,
			func(in bool) {
				if in {
					close(queued)
				}
			},
			func() { ran.Store(true) })
		if err != nil {
			t.Errorf("Handle: %v", err)
		}
		out <- res
	}()
	<-queued
	eventually(t, "request waiting in libapf", func() bool { return levelStat(t, d, "tight", "waiting") == 1 })
	return out
}

func TestContextCancellationCancelsWaitingRequest(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	h := hold(t, d, "alice", levelSeats)
	defer h.stop(t)
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Bool
	done := queueOne(t, d, ctx, &ran)
	cancel()
	res := <-done
	if ran.Load() || res.Outcome != Rejected || res.RejectReason != Cancelled || !res.Queued {
		t.Fatalf("ran %v, %+v", ran.Load(), res)
	}
	if got := levelStat(t, d, "tight", "waiting"); got != 0 {
		t.Fatalf("still %d waiting", got)
	}
	if got := levelStat(t, d, "tight", "rejected_cancelled"); got != 1 {
		t.Fatalf("cancellations counted: %d", got)
	}
}

func TestExpiredContextRejectsAsTimeOut(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	h := hold(t, d, "alice", levelSeats)
	defer h.stop(t)
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	ran := false
	res, err := d.Handle(ctx, podGet("alice"), nil, nil, nil, func() { ran = true })
	if err != nil || ran || res.Outcome != Rejected || res.RejectReason != TimeOut {
		t.Fatalf("ran %v, %+v, %v", ran, res, err)
	}
}

// The wait limit runs on the dispatcher's clock: a manual clock's advance
// rejects the waiting request, and the completion fd wakes its goroutine.
func TestWaitLimitOnManualClock(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true, WaitLimit: 10 * time.Second})
	h := hold(t, d, "alice", levelSeats)
	defer h.stop(t)
	var ran atomic.Bool
	done := queueOne(t, d, context.Background(), &ran)
	if err := d.AdvanceClock(9 * time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-done:
		t.Fatalf("rejected before the wait limit: %+v", res)
	default:
	}
	if err := d.AdvanceClock(2 * time.Second); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if ran.Load() || res.Outcome != Rejected || res.RejectReason != TimeOut {
		t.Fatalf("ran %v, %+v", ran.Load(), res)
	}
	if now, err := d.Now(); err != nil || now != 11*time.Second {
		t.Fatalf("manual clock at %v (%v)", now, err)
	}
}

func TestNegativeWaitLimitTimesOutAtOnce(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true, WaitLimit: -1})
	h := hold(t, d, "alice", levelSeats)
	defer h.stop(t)
	ran := false
	// No AdvanceClock: the request must be decided at its arrival.
	res, err := d.Handle(context.Background(), podGet("alice"), nil, nil, nil, func() { ran = true })
	if err != nil || ran || res.Outcome != Rejected || res.RejectReason != TimeOut {
		t.Fatalf("ran %v, %+v, %v", ran, res, err)
	}
}

func TestPanickingExecFnStillFinishes(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	for i := 0; i < 3*levelSeats; i++ {
		func() {
			defer func() {
				if r := recover(); r != "boom" {
					t.Fatalf("recovered %v", r)
				}
			}()
			_, _ = d.Handle(context.Background(), podGet("bob"), nil, nil, nil, func() { panic("boom") })
			t.Fatal("the panic did not propagate")
		}()
	}
	if got := levelStat(t, d, "strict", "seats_in_use"); got != 0 {
		t.Fatalf("panics leaked %d seats", got)
	}
	res, err := d.Handle(context.Background(), podGet("bob"), nil, nil, nil, func() {})
	if err != nil || res.Outcome != Executed {
		t.Fatalf("%+v %v", res, err)
	}
}

// A request dispatched from a queue whose execFn panics gives its seat to
// the next waiter.
func TestPanicAfterQueuingDispatchesNext(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	h := hold(t, d, "alice", levelSeats)
	var wg sync.WaitGroup
	var inQueue, executed atomic.Int32
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { _ = recover() }()
			_, _ = d.Handle(context.Background(), podGet("alice"), nil, nil,
				func(in bool) {
					if in {
						inQueue.Add(1)
					}
				},
				func() {
					executed.Add(1)
					panic("handler failed")
				})
		}()
	}
	eventually(t, "queued", func() bool { return inQueue.Load() == 4 })
	h.stop(t)
	wg.Wait()
	if executed.Load() != 4 || levelStat(t, d, "tight", "seats_in_use") != 0 {
		t.Fatalf("executed %d, seats %d", executed.Load(), levelStat(t, d, "tight", "seats_in_use"))
	}
}

// Real concurrency: goroutines start, queue, cancel and finish at random
// against a two-seat level; everything settles with no seat or handle
// leaked and never more than two running.
func TestConcurrentMixedTraffic(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	workers, perWorker := 32, 100
	if testing.Short() {
		workers, perWorker = 8, 20
	}
	var running, overLimit atomic.Int32
	var executed, rejected atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			user := "alice"
			if w%4 == 3 {
				user = "bob"
			}
			for i := 0; i < perWorker; i++ {
				ctx, cancel := context.WithCancel(context.Background())
				if (w+i)%5 == 0 {
					time.AfterFunc(time.Duration(i%7)*10*time.Microsecond, cancel)
				}
				res, err := d.Handle(ctx, podGet(user), nil, nil, nil, func() {
					if running.Add(1) > 2*levelSeats {
						overLimit.Add(1)
					}
					time.Sleep(time.Duration(i%3) * 20 * time.Microsecond)
					running.Add(-1)
				})
				cancel()
				if err != nil {
					t.Errorf("Handle: %v", err)
					return
				}
				if res.Outcome == Executed {
					executed.Add(1)
				} else {
					rejected.Add(1)
				}
			}
		}(w)
	}
	wg.Wait()
	if overLimit.Load() != 0 {
		t.Fatalf("%d executions over the seats of both levels", overLimit.Load())
	}
	if executed.Load()+rejected.Load() != int64(workers*perWorker) || executed.Load() == 0 {
		t.Fatalf("executed %d rejected %d", executed.Load(), rejected.Load())
	}
	global, levels := stats(t, d)
	if global["requests_live"] != 0 || levels["tight"]["seats_in_use"] != 0 ||
		levels["strict"]["seats_in_use"] != 0 || levels["tight"]["waiting"] != 0 {
		t.Fatalf("not settled: %v %v %v", global, levels["tight"], levels["strict"])
	}
	if d.c.waiters.len() != 0 {
		t.Fatalf("%d waiters left", d.c.waiters.len())
	}
}

func TestCloseIsIdempotentAndWakesWaiters(t *testing.T) {
	d, err := NewFromConfig([]byte(testConfig), Options{ServerConcurrencyLimit: 5})
	if err != nil {
		t.Fatal(err)
	}
	h := hold(t, d, "alice", levelSeats)
	var ran atomic.Bool
	queued := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := d.Handle(context.Background(), podGet("alice"), nil, nil,
			func(in bool) {
				if in {
					close(queued)
				}
			}, func() { ran.Store(true) })
		done <- err
	}()
	<-queued
	eventually(t, "waiting", func() bool { return levelStat(t, d, "tight", "waiting") == 1 })
	// Close with requests in flight is misuse, but waiting goroutines must
	// not hang or touch freed memory: release the holders first (their
	// finish must happen before Close), then close with one waiter queued.
	close(h.release)
	for i := 0; i < levelSeats; i++ {
		<-h.done
	}
	// The waiter is dispatched by the holders' finishes; wait for it to run
	// to completion, then close twice.
	if err := <-done; err != nil {
		t.Fatalf("waiter: %v", err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Handle(context.Background(), podGet("alice"), nil, nil, nil, func() {}); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if _, err := d.StatsText(); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

func TestCloseReleasesParkedWaiters(t *testing.T) {
	d := newTestDispatcher(t, Options{})
	ch, ok := d.c.waiters.add(42)
	if !ok {
		t.Fatal("add refused")
	}
	d.c.close()
	select {
	case <-ch:
	default:
		t.Fatal("close did not wake the waiter")
	}
	if _, ok := d.c.waiters.add(43); ok {
		t.Fatal("add after close")
	}
}

func TestWaitersRemoveDrainsRacingWake(t *testing.T) {
	w := newWaiters()
	for i := 0; i < 1000; i++ {
		ch, _ := w.add(uint64(i))
		go w.wake(uint64(i))
		w.remove(uint64(i), ch)
		select {
		case <-ch:
			t.Fatal("a wake was left in a recycled channel")
		default:
		}
	}
}
