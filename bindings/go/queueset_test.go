package apf

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

func newTestQueueSet(t *testing.T, limit uint32) *QueueSet {
	t.Helper()
	q, err := NewQueueSet("test", QueueSetConfig{ConcurrencyLimit: limit, Queues: 4, HandSize: 2, QueueLengthLimit: 2}, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func TestQueueSetQueuesDispatchesAndDumps(t *testing.T) {
	q := newTestQueueSet(t, 1)
	first, err := q.Start(1, WorkEstimate{InitialSeats: 1}, 0, 7)
	if err != nil || first.Queued || first.Rejected {
		t.Fatalf("first: %+v %v", first, err)
	}
	second, err := q.Start(2, WorkEstimate{InitialSeats: 1}, 0, 9)
	if err != nil || !second.Queued {
		t.Fatalf("second: %+v %v", second, err)
	}
	d, err := q.Dump()
	if err != nil {
		t.Fatal(err)
	}
	if d.Waiting != 1 || d.Executing != 1 || len(d.WaitingRequests) != 1 ||
		d.WaitingRequests[0].Tag != 9 || d.WaitingRequests[0].ID != second.WaitingID {
		t.Fatalf("dump: %+v", d)
	}
	// The queued request joined an empty queue, at the level's R.
	if second.QueueLength != 1 || second.CurrentR != d.CurrentR || first.QueueLength != 0 ||
		int(second.Queue) != d.WaitingRequests[0].Queue {
		t.Fatalf("queue length and R at arrival: first %+v, second %+v, dump R %v", first, second, d.CurrentR)
	}
	done := make(chan bool)
	go func() {
		run, _, err := q.Await(context.Background(), &second)
		if err != nil {
			t.Error(err)
		}
		done <- run
	}()
	if idle, _ := q.IsIdle(); idle {
		t.Fatal("idle with requests in it")
	}
	if err := q.Finish(&first); err != nil {
		t.Fatal(err)
	}
	if !<-done {
		t.Fatal("the queued request was not dispatched when the first finished")
	}
	if err := q.Finish(&second); err != nil {
		t.Fatal(err)
	}
	if idle, _ := q.IsIdle(); !idle {
		t.Fatal("not idle after both finished")
	}
	st, _ := q.Stats()
	if st.Dispatched != 2 || st.Executing != 0 {
		t.Fatalf("stats: %+v", st)
	}
}

func TestQueueSetDeadlineCancelAndReconfigure(t *testing.T) {
	q := newTestQueueSet(t, 1)
	busy, _ := q.Start(1, WorkEstimate{}, 0, 0)
	timed, _ := q.Start(2, WorkEstimate{}, 10*time.Millisecond, 0)
	if !timed.Queued {
		t.Fatalf("%+v", timed)
	}
	if err := q.AdvanceClock(20 * time.Millisecond); err != nil {
		t.Fatal(err)
	}
	run, reason, err := q.Await(context.Background(), &timed)
	if err != nil || run || reason != TimeOut {
		t.Fatalf("deadline: run %v reason %v err %v", run, reason, err)
	}
	gone, _ := q.Start(3, WorkEstimate{}, 0, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	run, reason, err = q.Await(ctx, &gone)
	if err != nil || run || reason != Cancelled {
		t.Fatalf("cancel: run %v reason %v err %v", run, reason, err)
	}
	// A larger limit dispatches waiting requests at once.
	waiting, _ := q.Start(4, WorkEstimate{}, 0, 0)
	if err := q.Reconfigure(QueueSetConfig{ConcurrencyLimit: 2, Queues: 4, HandSize: 2, QueueLengthLimit: 2}); err != nil {
		t.Fatal(err)
	}
	if run, _, err := q.Await(context.Background(), &waiting); !run || err != nil {
		t.Fatalf("after raising the limit: %v %v", run, err)
	}
	err = q.Reconfigure(QueueSetConfig{ConcurrencyLimit: 2, Queues: 4, HandSize: 9, QueueLengthLimit: 2})
	var e *Error
	if !errors.As(err, &e) || e.Status != StatusConfig {
		t.Fatalf("hand size above queues: %v", err)
	}
	_ = q.Finish(&waiting)
	_ = q.Finish(&busy)
}

// A Close racing a call in flight must not free the C queueset under it
// (the Dispatcher's and Workqueue's counting scheme): the call held here
// stands for one inside libapf when Close runs.
func TestQueueSetCloseWaitsForCallsInsideLibapf(t *testing.T) {
	q := newTestQueueSet(t, 1)
	if _, ok := q.c.enter(); !ok {
		t.Fatal("a fresh queueset refused a call")
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if q.c.use.freed() {
		t.Fatal("Close freed the queueset under a call")
	}
	if _, err := q.Now(); !errors.Is(err, ErrClosed) {
		t.Fatalf("a call after Close: %v, want ErrClosed", err)
	}
	q.c.exit()
	if !q.c.use.freed() {
		t.Fatal("the last call's exit did not free the closed queueset")
	}
}

// Many goroutines call while another closes: every call either works or
// gets ErrClosed, and the race detector sees no unsynchronised access.
func TestQueueSetCloseRacingCalls(t *testing.T) {
	q := newTestQueueSet(t, 1)
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 200; j++ {
				if _, err := q.Dump(); err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("Dump: %v", err)
					return
				}
			}
		}()
	}
	_ = q.Close()
	wg.Wait()
	if !q.c.use.freed() {
		t.Fatal("not freed after the last call")
	}
}

// Under FairnessFlow and FairnessFlowMaxMin a busy flow keeps to one queue;
// under the default its waiting requests spread over its hand.
func TestQueueSetFairnessPolicy(t *testing.T) {
	for _, tc := range []struct {
		fairness Fairness
		spread   bool
	}{{FairnessKubernetes, true}, {FairnessFlow, false}, {FairnessFlowMaxMin, false}} {
		q, err := NewQueueSet("fair", QueueSetConfig{ConcurrencyLimit: 1, Queues: 16, HandSize: 4, QueueLengthLimit: 10, Fairness: tc.fairness}, true)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 5; i++ {
			if _, err := q.Start(77, WorkEstimate{InitialSeats: 1}, 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		d, err := q.Dump()
		if err != nil {
			t.Fatal(err)
		}
		used := 0
		for _, queue := range d.Queues {
			if queue.Waiting > 0 {
				used++
			}
		}
		if (used > 1) != tc.spread {
			t.Errorf("fairness %d: waiting requests in %d queues", tc.fairness, used)
		}
		_ = q.Close()
	}
	if _, err := NewQueueSet("bad", QueueSetConfig{ConcurrencyLimit: 1, Queues: 16, HandSize: 4, QueueLengthLimit: 10, Fairness: 9}, true); err == nil {
		t.Fatal("fairness 9 accepted")
	}
}

// A wide request that releases seats early lets a queued one run while it
// keeps executing; its finish then gives back only what it still holds.
func TestQueueSetReleaseSeats(t *testing.T) {
	q := newTestQueueSet(t, 2)
	wide, err := q.Start(1, WorkEstimate{InitialSeats: 2}, 0, 0)
	if err != nil || wide.Queued || wide.Rejected {
		t.Fatalf("wide: %+v %v", wide, err)
	}
	narrow, err := q.Start(2, WorkEstimate{InitialSeats: 1}, 0, 0)
	if err != nil || !narrow.Queued {
		t.Fatalf("narrow: %+v %v", narrow, err)
	}
	if err := q.ReleaseSeats(&narrow, 1); !errors.Is(err, StatusRequestQueued) {
		t.Fatalf("release of a queued request: %v", err)
	}
	if err := q.ReleaseSeats(&wide, 3); !errors.Is(err, StatusInvalidParameter) {
		t.Fatalf("release of more seats than held: %v", err)
	}
	if err := q.ReleaseSeats(&wide, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if run, _, err := q.Await(ctx, &narrow); err != nil || !run {
		t.Fatalf("the queued request did not run on the released seat: %v %v", run, err)
	}
	if st, _ := q.Stats(); st.SeatsInUse != 2 || st.Executing != 2 {
		t.Fatalf("stats after the release: %+v", st)
	}
	if err := q.Finish(&wide); err != nil {
		t.Fatal(err)
	}
	if err := q.ReleaseSeats(&wide, 0); !errors.Is(err, StatusInvalidHandle) {
		t.Fatalf("release after finish: %v", err)
	}
	if st, _ := q.Stats(); st.SeatsInUse != 1 {
		t.Fatalf("the wide request's finish gave back more than it held: %+v", st)
	}
	if err := q.Finish(&narrow); err != nil {
		t.Fatal(err)
	}
	if idle, _ := q.IsIdle(); !idle {
		t.Fatal("not idle after both finished")
	}
}

// TestQueueSetStillQueued: StillQueued is true while a request waits,
// false once another request's Finish dispatched it (before its Await
// runs), and does not take the decision: Await still returns it.
func TestQueueSetStillQueued(t *testing.T) {
	q := newTestQueueSet(t, 1)
	first, err := q.Start(1, WorkEstimate{InitialSeats: 1}, 0, 0)
	if err != nil || first.Queued {
		t.Fatalf("first: %+v %v", first, err)
	}
	second, err := q.Start(2, WorkEstimate{InitialSeats: 1}, 0, 0)
	if err != nil || !second.Queued {
		t.Fatalf("second: %+v %v", second, err)
	}
	if queued, err := q.StillQueued(&second); err != nil || !queued {
		t.Fatalf("waiting request: StillQueued %v, %v", queued, err)
	}
	if err := q.Finish(&first); err != nil {
		t.Fatal(err)
	}
	if queued, err := q.StillQueued(&second); err != nil || queued {
		t.Fatalf("dispatched request: StillQueued %v, %v", queued, err)
	}
	run, _, err := q.Await(context.Background(), &second)
	if err != nil || !run {
		t.Fatalf("Await after StillQueued: run %v, %v", run, err)
	}
	if err := q.Finish(&second); err != nil {
		t.Fatal(err)
	}
}
