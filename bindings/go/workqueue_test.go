package apf

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// newWQ makes a queue on the manual clock, closed when the test ends.
func newWQ[K Key](t testing.TB, kind QueueKind, opts WorkqueueOptions) *Workqueue[K] {
	t.Helper()
	opts.ManualClock = true
	q, err := NewWorkqueue[K](kind, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = q.Close() })
	return q
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// take expects a ready item and returns it.
func take[K Key](t testing.TB, q *Workqueue[K]) Item[K] {
	t.Helper()
	item, ok, shutdown, err := q.TryGet()
	if err != nil || !ok || shutdown {
		t.Fatalf("TryGet: ok %v shutdown %v err %v", ok, shutdown, err)
	}
	return item
}

// takeDone takes the next item, checks its key, and is done with it.
func takeDone[K Key](t testing.TB, q *Workqueue[K], want string) Item[K] {
	t.Helper()
	item := take(t, q)
	if string(item.Key) != want {
		t.Fatalf("got %q, want %q", item.Key, want)
	}
	must(t, q.Done(item))
	return item
}

func expectEmpty[K Key](t testing.TB, q *Workqueue[K]) {
	t.Helper()
	item, ok, shutdown, err := q.TryGet()
	if err != nil || ok || shutdown {
		t.Fatalf("want empty, got %q ok %v shutdown %v err %v", item.Key, ok, shutdown, err)
	}
}

func expectLen[K Key](t testing.TB, q *Workqueue[K], ready, waiting int) {
	t.Helper()
	r, err := q.Len()
	must(t, err)
	w, err := q.WaitingLen()
	must(t, err)
	if r != ready || w != waiting {
		t.Fatalf("Len %d WaitingLen %d, want %d and %d", r, w, ready, waiting)
	}
}

func advance[K Key](t testing.TB, q *Workqueue[K], d time.Duration) {
	t.Helper()
	must(t, q.AdvanceClock(d))
}

// --- the dirty and processing rules -----------------------------------------

func TestWQAddTwiceQueuesOnce(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{})
	for _, k := range []string{"a", "b", "a", "c", "b"} {
		must(t, q.Add(k))
	}
	expectLen(t, q, 3, 0)
	for _, k := range []string{"a", "b", "c"} {
		takeDone(t, q, k)
	}
	expectEmpty(t, q)
}

func TestWQAddWhileProcessingRequeuesOnDone(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{})
	must(t, q.Add("a"))
	item := take(t, q)
	must(t, q.Add("a"))
	must(t, q.Add("a"))
	// Dirty but processing: not handed to a second worker.
	expectLen(t, q, 0, 0)
	expectEmpty(t, q)
	must(t, q.Done(item))
	expectLen(t, q, 1, 0)
	takeDone(t, q, "a")
	expectEmpty(t, q)
}

func TestWQDoneTwiceOrForeignIsAnError(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{})
	must(t, q.Add("a"))
	item := takeDone(t, q, "a")
	if err := q.Done(item); !errors.Is(err, StatusInvalidHandle) {
		t.Fatalf("second Done: %v", err)
	}
	if err := q.Done(Item[string]{Key: "a"}); err == nil {
		t.Fatal("Done of an item never handed out succeeded")
	}
	// The key of a stale handle is not done by accident either.
	must(t, q.Add("a"))
	again := take(t, q)
	if err := q.Done(item); !errors.Is(err, StatusInvalidHandle) {
		t.Fatalf("stale Done: %v", err)
	}
	must(t, q.Add("a"))
	expectEmpty(t, q) // still processing
	must(t, q.Done(again))
	takeDone(t, q, "a")
}

func TestWQShutDownHandsOutWhatIsQueuedThenReportsIt(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{})
	must(t, q.Add("a"))
	must(t, q.Add("b"))
	if q.ShuttingDown() {
		t.Fatal("shutting down before ShutDown")
	}
	must(t, q.ShutDown())
	must(t, q.Add("c")) // ignored
	if !q.ShuttingDown() {
		t.Fatal("not shutting down")
	}
	expectLen(t, q, 2, 0)
	ctx := context.Background()
	for _, want := range []string{"a", "b"} {
		item, shutdown, err := q.Get(ctx)
		if err != nil || shutdown || item.Key != want {
			t.Fatalf("Get: %q %v %v", item.Key, shutdown, err)
		}
		must(t, q.Done(item))
	}
	if _, shutdown, err := q.Get(ctx); !shutdown || err != nil {
		t.Fatalf("Get after drain: shutdown %v err %v", shutdown, err)
	}
	if _, ok, shutdown, err := q.TryGet(); ok || !shutdown || err != nil {
		t.Fatalf("TryGet after drain: ok %v shutdown %v err %v", ok, shutdown, err)
	}
}

func TestWQShutDownWakesBlockedGets(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{MaxBlockedGets: 2})
	const getters = 6 // 2 inside libapf, 4 parked on the semaphore
	results := make(chan bool, getters)
	for i := 0; i < getters; i++ {
		go func() {
			_, shutdown, err := q.Get(context.Background())
			results <- shutdown && err == nil
		}()
	}
	eventually(t, "all Gets waiting", func() bool { return q.c.waiting.Load() == getters })
	must(t, q.ShutDown())
	for i := 0; i < getters; i++ {
		if !<-results {
			t.Fatal("a blocked Get did not return shut down")
		}
	}
}

func TestWQGetWaitsForAnAdd(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{})
	got := make(chan Item[string], 1)
	go func() {
		item, _, err := q.Get(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- item
	}()
	eventually(t, "Get waiting", func() bool { return q.c.waiting.Load() == 1 })
	must(t, q.Add("late"))
	item := <-got
	if item.Key != "late" {
		t.Fatalf("got %q", item.Key)
	}
	must(t, q.Done(item))
}

func TestWQShutDownWithDrainWaitsForDone(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{})
	must(t, q.Add("a"))
	must(t, q.Add("b"))
	item := take(t, q)
	drained := make(chan error, 1)
	go func() { drained <- q.ShutDownWithDrain() }()
	eventually(t, "shutting down", q.ShuttingDown)
	// b is still handed out; the drain waits for both.
	b := takeDone(t, q, "b")
	_ = b
	select {
	case err := <-drained:
		t.Fatalf("drain returned with an item processing: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	must(t, q.Done(item))
	select {
	case err := <-drained:
		must(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("drain did not return after Done")
	}
}

// --- context cancellation and threads ------------------------------------------

func TestWQGetHonoursContext(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{MaxBlockedGets: 1})
	ctx, cancel := context.WithCancel(context.Background())
	errs := make(chan error, 2)
	// One waits inside libapf, the other parks on the semaphore.
	for i := 0; i < 2; i++ {
		go func() {
			_, _, err := q.Get(ctx)
			errs <- err
		}()
	}
	eventually(t, "both Gets waiting", func() bool { return q.c.waiting.Load() == 2 })
	start := time.Now()
	cancel()
	for i := 0; i < 2; i++ {
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("Get: %v", err)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("cancellation took %v", took)
	}

	deadline, cancel2 := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel2()
	if _, _, err := q.Get(deadline); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Get with deadline: %v", err)
	}
	// An ended context still gets a ready item: nothing waits.
	must(t, q.Add("ready"))
	item, shutdown, err := q.Get(ctx)
	if err != nil || shutdown || item.Key != "ready" {
		t.Fatalf("Get: %q %v %v", item.Key, shutdown, err)
	}
	must(t, q.Done(item))
}

func TestWQBlockedGetsPinAtMostMaxBlockedGetsThreads(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{MaxBlockedGets: 2})
	const getters = 200
	threadsBefore := pprof.Lookup("threadcreate").Count()
	var wg sync.WaitGroup
	var got atomic.Int64
	for i := 0; i < getters; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			item, shutdown, err := q.Get(context.Background())
			if err != nil || shutdown {
				t.Errorf("Get: %v %v", shutdown, err)
				return
			}
			got.Add(1)
			if err := q.Done(item); err != nil {
				t.Error(err)
			}
		}()
	}
	eventually(t, "all Gets waiting", func() bool { return q.c.waiting.Load() == getters })
	if grown := pprof.Lookup("threadcreate").Count() - threadsBefore; grown > 20 {
		t.Errorf("%d OS threads created for %d waiting Gets", grown, getters)
	}
	for i := 0; i < getters; i++ {
		must(t, q.Add(fmt.Sprint("k", i)))
	}
	wg.Wait()
	if got.Load() != getters {
		t.Fatalf("%d of %d Gets got an item", got.Load(), getters)
	}
}

// --- delays on the manual clock -------------------------------------------------

func TestWQAddAfterOnTheManualClock(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{})
	must(t, q.AddAfter("a", 5*time.Second))
	expectLen(t, q, 0, 1)
	advance(t, q, 5*time.Second-1)
	expectLen(t, q, 0, 1)
	expectEmpty(t, q)
	advance(t, q, 1)
	expectLen(t, q, 1, 0)
	takeDone(t, q, "a")

	// A waiting item keeps the earlier ready time, whichever add came first.
	must(t, q.AddAfter("early-first", 2*time.Second))
	must(t, q.AddAfter("early-first", 10*time.Second))
	must(t, q.AddAfter("late-first", 10*time.Second))
	must(t, q.AddAfter("late-first", 2*time.Second))
	expectLen(t, q, 0, 2)
	advance(t, q, 2*time.Second)
	expectLen(t, q, 2, 0)
	takeDone(t, q, "early-first")
	takeDone(t, q, "late-first")
	advance(t, q, 10*time.Second)
	expectEmpty(t, q)

	// A non-positive delay adds at once.
	must(t, q.AddAfter("zero", 0))
	must(t, q.AddAfter("negative", -time.Second))
	expectLen(t, q, 2, 0)
	takeDone(t, q, "zero")
	takeDone(t, q, "negative")

	// Shutdown drops what waits.
	must(t, q.AddAfter("never", time.Second))
	must(t, q.ShutDown())
	advance(t, q, time.Hour)
	if _, ok, shutdown, err := q.TryGet(); ok || !shutdown || err != nil {
		t.Fatalf("after shutdown: ok %v shutdown %v err %v", ok, shutdown, err)
	}
}

func TestWQDelayedItemWakesABlockedGet(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{})
	must(t, q.AddAfter("a", time.Minute))
	got := make(chan string, 1)
	go func() {
		item, _, err := q.Get(context.Background())
		if err == nil {
			err = q.Done(item)
		}
		if err != nil {
			t.Error(err)
		}
		got <- item.Key
	}()
	eventually(t, "Get waiting", func() bool { return q.c.waiting.Load() == 1 })
	advance(t, q, time.Minute)
	if k := <-got; k != "a" {
		t.Fatalf("got %q", k)
	}
}

func TestWQAdvanceClockNeedsManualClock(t *testing.T) {
	q, err := NewFIFOQueue[string](WorkqueueOptions{})
	must(t, err)
	defer q.Close()
	if err := q.AdvanceClock(time.Second); !errors.Is(err, StatusNotManualClock) {
		t.Fatalf("AdvanceClock on the real clock: %v", err)
	}
	if err := q.AdvanceClock(-1); !errors.Is(err, StatusInvalidParameter) {
		t.Fatalf("negative AdvanceClock: %v", err)
	}
}

// --- rate limiters on the manual clock -----------------------------------------------

// retryDelay AddRateLimiteds key, checks it becomes ready exactly after want
// (1 ns early it is not), and processes it.
func retryDelay[K Key](t *testing.T, q *Workqueue[K], key K, want time.Duration) {
	t.Helper()
	must(t, q.AddRateLimited(key))
	if want > 0 {
		advance(t, q, want-1)
		if n, _ := q.Len(); n != 0 {
			t.Fatalf("%q ready before %v", key, want)
		}
		advance(t, q, 1)
	}
	if n, _ := q.Len(); n != 1 {
		t.Fatalf("%q not ready after %v", key, want)
	}
	takeDone(t, q, string(key))
}

func TestWQExponentialBackoffAndForget(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{
		RateLimiter: NewItemExponentialFailureRateLimiter(time.Millisecond, 8*time.Millisecond)})
	for i, want := range []time.Duration{1, 2, 4, 8, 8, 8} {
		retryDelay(t, q, "a", want*time.Millisecond)
		if n, err := q.NumRequeues("a"); err != nil || n != i+1 {
			t.Fatalf("NumRequeues %d %v, want %d", n, err, i+1)
		}
	}
	// Per item: b starts at the base.
	retryDelay(t, q, "b", time.Millisecond)
	must(t, q.Forget("a"))
	if n, _ := q.NumRequeues("a"); n != 0 {
		t.Fatalf("NumRequeues after Forget: %d", n)
	}
	retryDelay(t, q, "a", time.Millisecond)
}

func TestWQBucketLimiter(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{RateLimiter: NewBucketRateLimiter(1, 2)})
	// The burst passes at once, then one token a second, for all items.
	retryDelay(t, q, "a", 0)
	retryDelay(t, q, "b", 0)
	retryDelay(t, q, "c", time.Second)
	retryDelay(t, q, "a", time.Second)
}

func TestWQItemBucketLimiter(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{RateLimiter: NewItemBucketRateLimiter(1, 1)})
	retryDelay(t, q, "a", 0)
	retryDelay(t, q, "b", 0) // its own bucket
	retryDelay(t, q, "a", time.Second)
}

func TestWQFastSlowLimiter(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{
		RateLimiter: NewItemFastSlowRateLimiter(time.Millisecond, time.Second, 2)})
	retryDelay(t, q, "a", time.Millisecond)
	retryDelay(t, q, "a", time.Millisecond)
	retryDelay(t, q, "a", time.Second)
	retryDelay(t, q, "a", time.Second)
	if n, _ := q.NumRequeues("a"); n != 4 {
		t.Fatalf("NumRequeues %d", n)
	}
}

func TestWQMaxOfLimiter(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{RateLimiter: NewMaxOfRateLimiter(
		NewItemExponentialFailureRateLimiter(time.Millisecond, time.Minute),
		NewBucketRateLimiter(1, 1),
	)})
	// At the same instant: a gets the bucket's token and waits its backoff
	// (1 ms); b finds the bucket empty and waits for the next token (1 s).
	must(t, q.AddRateLimited("a"))
	must(t, q.AddRateLimited("b"))
	expectLen(t, q, 0, 2)
	advance(t, q, time.Millisecond)
	takeDone(t, q, "a")
	advance(t, q, time.Second-time.Millisecond-1)
	expectLen(t, q, 0, 1)
	advance(t, q, 1)
	takeDone(t, q, "b")
	if n, _ := q.NumRequeues("a"); n != 1 {
		t.Fatalf("NumRequeues %d", n)
	}
}

func TestWQDefaultControllerLimiter(t *testing.T) {
	for name, limiter := range map[string]*RateLimiter{
		"nil":      nil,
		"explicit": DefaultControllerRateLimiter(),
	} {
		t.Run(name, func(t *testing.T) {
			q := newWQ[string](t, FIFO, WorkqueueOptions{RateLimiter: limiter})
			retryDelay(t, q, "a", 5*time.Millisecond)
			retryDelay(t, q, "a", 10*time.Millisecond)
			retryDelay(t, q, "b", 5*time.Millisecond)
		})
	}
}

func TestWQInvalidLimiterIsATypedError(t *testing.T) {
	for name, limiter := range map[string]*RateLimiter{
		"zero qps":      NewBucketRateLimiter(0, 1),
		"zero burst":    NewItemBucketRateLimiter(10, 0),
		"nested":        NewMaxOfRateLimiter(DefaultControllerRateLimiter(), NewBucketRateLimiter(-1, 1)),
		"nil in max-of": NewMaxOfRateLimiter(nil),
	} {
		_, err := NewFIFOQueue[string](WorkqueueOptions{RateLimiter: limiter})
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("%s: got %v", name, err)
		}
	}
}

// --- two lanes -------------------------------------------------------------------

func TestWQTwoLaneServesFastFirst(t *testing.T) {
	q := newWQ[string](t, TwoLane, WorkqueueOptions{})
	must(t, q.AddWithOpts("s1", AddOpts{Lane: LaneSlow}))
	must(t, q.AddWithOpts("s2", AddOpts{Lane: LaneSlow}))
	must(t, q.Add("f1")) // fast by default
	must(t, q.AddWithOpts("f2", AddOpts{Lane: LaneFast}))
	for _, want := range []struct {
		key  string
		lane Lane
	}{{"f1", LaneFast}, {"f2", LaneFast}, {"s1", LaneSlow}, {"s2", LaneSlow}} {
		item := takeDone(t, q, want.key)
		if item.Lane != want.lane {
			t.Fatalf("%s came from lane %d", want.key, item.Lane)
		}
	}
}

func TestWQTwoLaneMovesAQueuedItem(t *testing.T) {
	q := newWQ[string](t, TwoLane, WorkqueueOptions{})
	// Slow to fast: x jumps ahead of y.
	must(t, q.AddWithOpts("x", AddOpts{Lane: LaneSlow}))
	must(t, q.AddWithOpts("y", AddOpts{Lane: LaneSlow}))
	must(t, q.AddWithOpts("x", AddOpts{Lane: LaneFast}))
	expectLen(t, q, 2, 0)
	if item := takeDone(t, q, "x"); item.Lane != LaneFast {
		t.Fatalf("x from lane %d", item.Lane)
	}
	takeDone(t, q, "y")
	// Fast to slow: a goes behind b.
	must(t, q.Add("a"))
	must(t, q.Add("b"))
	must(t, q.AddWithOpts("a", AddOpts{Lane: LaneSlow}))
	takeDone(t, q, "b")
	if item := takeDone(t, q, "a"); item.Lane != LaneSlow {
		t.Fatalf("a from lane %d", item.Lane)
	}
	// Its own lane again: it keeps its place.
	must(t, q.Add("c"))
	must(t, q.Add("d"))
	must(t, q.Add("c"))
	takeDone(t, q, "c")
	takeDone(t, q, "d")
}

func TestWQTwoLaneSlowWorkDoesNotBlockFast(t *testing.T) {
	q := newWQ[string](t, TwoLane, WorkqueueOptions{})
	for i := 0; i < 100; i++ {
		must(t, q.AddWithOpts(fmt.Sprint("resync", i), AddOpts{Lane: LaneSlow}))
	}
	slow := take(t, q) // a worker busy with slow work
	must(t, q.Add("event"))
	takeDone(t, q, "event")
	must(t, q.Done(slow))
	// Delayed and rate-limited adds keep their lane.
	must(t, q.AddWithOpts("later", AddOpts{Lane: LaneSlow, After: time.Second}))
	must(t, q.AddWithOpts("soon", AddOpts{After: time.Second}))
	advance(t, q, time.Second)
	takeDone(t, q, "soon")
	for i := 1; i < 100; i++ {
		takeDone(t, q, fmt.Sprint("resync", i))
	}
	if item := takeDone(t, q, "later"); item.Lane != LaneSlow {
		t.Fatalf("later from lane %d", item.Lane)
	}
}

func TestWQLaneOrPriorityOnTheWrongKind(t *testing.T) {
	fifo := newWQ[string](t, FIFO, WorkqueueOptions{})
	if err := fifo.AddWithOpts("a", AddOpts{Lane: LaneSlow}); !errors.Is(err, StatusWQWrongKind) {
		t.Fatalf("lane on FIFO: %v", err)
	}
	if err := fifo.AddWithOpts("a", AddOpts{Priority: 3}); !errors.Is(err, StatusWQWrongKind) {
		t.Fatalf("priority on FIFO: %v", err)
	}
	lanes := newWQ[string](t, TwoLane, WorkqueueOptions{})
	if err := lanes.AddWithOpts("a", AddOpts{Priority: 3}); !errors.Is(err, StatusWQWrongKind) {
		t.Fatalf("priority on two lanes: %v", err)
	}
	prio := newWQ[string](t, PriorityOrder, WorkqueueOptions{})
	if err := prio.AddWithOpts("a", AddOpts{Lane: LaneSlow}); !errors.Is(err, StatusWQWrongKind) {
		t.Fatalf("lane on priorities: %v", err)
	}
	expectLen(t, fifo, 0, 0)
	expectLen(t, lanes, 0, 0)
	expectLen(t, prio, 0, 0)
	// The defaults are accepted everywhere.
	must(t, fifo.AddWithOpts("ok", AddOpts{}))
	takeDone(t, fifo, "ok")
}

// --- priorities ------------------------------------------------------------------

func TestWQPriorityOrderAndFIFOWithinAPriority(t *testing.T) {
	q := newWQ[string](t, PriorityOrder, WorkqueueOptions{})
	adds := []struct {
		key string
		p   int32
	}{{"a", 1}, {"b", 5}, {"c", 5}, {"d", 0}, {"e", 1}, {"f", -3}, {"g", 5}}
	for _, a := range adds {
		must(t, q.AddWithOpts(a.key, AddOpts{Priority: a.p}))
	}
	for _, want := range []struct {
		key string
		p   int32
	}{{"b", 5}, {"c", 5}, {"g", 5}, {"a", 1}, {"e", 1}, {"d", 0}, {"f", -3}} {
		item := takeDone(t, q, want.key)
		if item.Priority != want.p {
			t.Fatalf("%s has priority %d, want %d", want.key, item.Priority, want.p)
		}
	}
}

func TestWQPriorityDuplicateKeepsTheHighest(t *testing.T) {
	q := newWQ[string](t, PriorityOrder, WorkqueueOptions{})
	must(t, q.AddWithOpts("x", AddOpts{Priority: 1}))
	must(t, q.AddWithOpts("y", AddOpts{Priority: 3}))
	must(t, q.AddWithOpts("x", AddOpts{Priority: 3})) // raised: behind y
	must(t, q.AddWithOpts("y", AddOpts{Priority: 0})) // lower: no change
	expectLen(t, q, 2, 0)
	if item := takeDone(t, q, "y"); item.Priority != 3 {
		t.Fatalf("y priority %d", item.Priority)
	}
	if item := takeDone(t, q, "x"); item.Priority != 3 {
		t.Fatalf("x priority %d", item.Priority)
	}
}

func TestWQPriorityWaitingItemsNeverAheadOfReadyOnes(t *testing.T) {
	q := newWQ[string](t, PriorityOrder, WorkqueueOptions{})
	must(t, q.AddWithOpts("urgent-later", AddOpts{Priority: 100, After: time.Second}))
	must(t, q.AddWithOpts("low-now", AddOpts{Priority: -1}))
	expectLen(t, q, 1, 1)
	takeDone(t, q, "low-now")
	expectEmpty(t, q)
	// Once ready it goes ahead of lower priorities queued meanwhile.
	must(t, q.AddWithOpts("low-2", AddOpts{Priority: 0}))
	advance(t, q, time.Second)
	takeDone(t, q, "urgent-later")
	takeDone(t, q, "low-2")
	// The shortest delay wins for a waiting item.
	must(t, q.AddWithOpts("w", AddOpts{After: 10 * time.Second}))
	must(t, q.AddWithOpts("w", AddOpts{After: time.Second}))
	advance(t, q, time.Second)
	takeDone(t, q, "w")
}

func TestWQPriorityRateLimited(t *testing.T) {
	q := newWQ[string](t, PriorityOrder, WorkqueueOptions{
		RateLimiter: NewItemExponentialFailureRateLimiter(time.Second, time.Minute)})
	// The shorter of the limiter's delay (1 s) and After (10 ms).
	must(t, q.AddWithOpts("a", AddOpts{RateLimited: true, After: 10 * time.Millisecond, Priority: 2}))
	advance(t, q, 10*time.Millisecond)
	if item := takeDone(t, q, "a"); item.Priority != 2 {
		t.Fatalf("priority %d", item.Priority)
	}
	retryDelay(t, q, "a", 2*time.Second)
	if n, _ := q.NumRequeues("a"); n != 2 {
		t.Fatalf("NumRequeues %d", n)
	}
}

// --- keys, metrics, lifetime ----------------------------------------------------

type podKey string

func TestWQKeysAreCopiedBothWays(t *testing.T) {
	q := newWQ[[]byte](t, FIFO, WorkqueueOptions{})
	buf := []byte("ns/pod-1")
	must(t, q.Add(buf))
	copy(buf, "XXXXXXXX") // libapf holds its own copy
	must(t, q.Add([]byte{}))
	must(t, q.Add([]byte{0, 0xff, 0}))
	item := take(t, q)
	if string(item.Key) != "ns/pod-1" {
		t.Fatalf("got %q", item.Key)
	}
	must(t, q.Done(item))
	item.Key[0] = 'Z' // the Go copy is the caller's
	takeDone(t, q, "")
	takeDone(t, q, "\x00\xff\x00")

	named := newWQ[podKey](t, FIFO, WorkqueueOptions{})
	must(t, named.Add(podKey("default/web")))
	if got := take(t, named); got.Key != "default/web" {
		t.Fatalf("got %q", got.Key)
	}
}

func TestWQMetricsText(t *testing.T) {
	q := newWQ[string](t, FIFO, WorkqueueOptions{Name: "controller-x"})
	must(t, q.Add("a"))
	must(t, q.Add("b"))
	must(t, q.AddRateLimited("c"))
	takeDone(t, q, "a")
	text, err := q.MetricsText()
	must(t, err)
	for _, want := range []string{
		`workqueue_depth{name="controller-x"} 1`,
		`workqueue_adds_total{name="controller-x"} 2`,
		`workqueue_retries_total{name="controller-x"} 1`,
		"workqueue_queue_duration_seconds_bucket",
		"workqueue_work_duration_seconds_count",
		"workqueue_unfinished_work_seconds",
		"workqueue_longest_running_processor_seconds",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q:\n%s", want, text)
		}
	}
}

func TestWQCloseIsIdempotentAndEndsUse(t *testing.T) {
	q, err := NewFIFOQueue[string](WorkqueueOptions{ManualClock: true})
	must(t, err)
	getters := make(chan bool, 3)
	for i := 0; i < 3; i++ {
		go func() {
			_, shutdown, err := q.Get(context.Background())
			getters <- shutdown && err == nil
		}()
	}
	eventually(t, "Gets waiting", func() bool { return q.c.waiting.Load() == 3 })
	must(t, q.Close())
	must(t, q.Close())
	for i := 0; i < 3; i++ {
		if !<-getters {
			t.Fatal("a Get blocked across Close did not return shut down")
		}
	}
	if err := q.Add("a"); !errors.Is(err, ErrWorkqueueClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	if _, err := q.Len(); !errors.Is(err, ErrWorkqueueClosed) {
		t.Fatalf("Len after Close: %v", err)
	}
	if _, shutdown, err := q.Get(context.Background()); !shutdown || err != nil {
		t.Fatalf("Get after Close: %v %v", shutdown, err)
	}
	if !q.ShuttingDown() {
		t.Fatal("a closed queue is not shutting down")
	}
	if !q.c.use.freed() {
		t.Fatal("not freed after Close with no call left")
	}
}

// Close during ShutDownWithDrain: Done of the processing item still works,
// the drain returns, then the queue is freed.
func TestWQCloseDuringDrain(t *testing.T) {
	q, err := NewFIFOQueue[string](WorkqueueOptions{ManualClock: true})
	must(t, err)
	must(t, q.Add("a"))
	item := take(t, q)
	drained := make(chan error, 1)
	go func() { drained <- q.ShutDownWithDrain() }()
	eventually(t, "shutting down", q.ShuttingDown)
	must(t, q.Close())
	if q.c.use.freed() {
		t.Fatal("freed under a drain in progress")
	}
	must(t, q.Done(item))
	must(t, <-drained)
	if !q.c.use.freed() {
		t.Fatal("not freed after the drain returned")
	}
	if err := q.Done(item); !errors.Is(err, ErrWorkqueueClosed) {
		t.Fatalf("Done after free: %v", err)
	}
}

func TestWQFinalizerFreesUnreachableQueue(t *testing.T) {
	var c *wqCore
	func() {
		q, err := NewTwoLaneQueue[string](WorkqueueOptions{})
		must(t, err)
		must(t, q.Add("a"))
		c = q.c
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !c.use.freed() {
		if time.Now().After(deadline) {
			t.Fatal("the finalizer never freed the queue")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
}

// --- many goroutines --------------------------------------------------------------

// Producers add keys (with lanes or priorities and some delays) while
// consumers process them; no add may be lost (every key is processed after
// its last add) and no key may be processed by two consumers at once. Few
// keys make collisions likely (a consumer that Done too early is caught);
// many keys make each key's last add likely to matter (a dropped add of 1
// in 200 is caught; both checked by mutating the binding).
func TestWQConcurrentProducersAndConsumers(t *testing.T) {
	for _, kind := range []QueueKind{FIFO, TwoLane, PriorityOrder} {
		for _, keys := range []int{16, 1024} {
			t.Run(fmt.Sprintf("kind%d/keys%d", kind, keys), func(t *testing.T) {
				concurrentRun(t, kind, keys)
			})
		}
	}
}

func concurrentRun(t *testing.T, kind QueueKind, keys int) {
	const (
		producers = 8
		consumers = 8
		adds      = 2000
	)
	if testing.Short() {
		t.Skip("short")
	}
	q, err := NewWorkqueue[string](kind, WorkqueueOptions{ManualClock: true, MaxBlockedGets: 3})
	must(t, err)
	defer q.Close()
	added := make([]atomic.Int64, keys)   // adds begun, per key
	covered := make([]atomic.Int64, keys) // adds begun before a processing started
	var mu sync.Mutex
	inFlight := map[string]bool{}
	var processed atomic.Int64

	var consumersWG sync.WaitGroup
	for c := 0; c < consumers; c++ {
		consumersWG.Add(1)
		go func() {
			defer consumersWG.Done()
			for {
				item, shutdown, err := q.Get(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				if shutdown {
					return
				}
				var k int
				fmt.Sscanf(item.Key, "key-%d", &k)
				mu.Lock()
				if inFlight[item.Key] {
					t.Errorf("%s processed by two consumers at once", item.Key)
				}
				inFlight[item.Key] = true
				mu.Unlock()
				covered[k].Store(added[k].Load())
				processed.Add(1)
				runtime.Gosched()
				mu.Lock()
				delete(inFlight, item.Key)
				mu.Unlock()
				if err := q.Done(item); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	var producersWG sync.WaitGroup
	for p := 0; p < producers; p++ {
		producersWG.Add(1)
		go func(seed int64) {
			defer producersWG.Done()
			r := rand.New(rand.NewSource(seed))
			for i := 0; i < adds; i++ {
				k := r.Intn(keys)
				key := fmt.Sprint("key-", k)
				added[k].Add(1)
				opts := AddOpts{}
				switch kind {
				case TwoLane:
					opts.Lane = Lane(r.Intn(2))
				case PriorityOrder:
					opts.Priority = int32(r.Intn(5))
				}
				if r.Intn(10) == 0 {
					opts.After = time.Duration(1 + r.Intn(3))
				}
				if err := q.AddWithOpts(key, opts); err != nil {
					t.Error(err)
					return
				}
				if r.Intn(50) == 0 {
					// Make the delayed adds ready (advancers serialise in libapf).
					if err := q.AdvanceClock(time.Duration(r.Intn(4))); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}(int64(p))
	}
	producersWG.Wait()
	must(t, q.AdvanceClock(time.Second))
	eventually(t, "every delayed add ready", func() bool {
		n, err := q.WaitingLen()
		return err == nil && n == 0
	})
	// Shut down: what is queued, or queued again by a Done, is still
	// handed out, and the consumers end once it is all processed.
	must(t, q.ShutDownWithDrain())
	consumersWG.Wait()
	for k := 0; k < keys; k++ {
		if a, c := added[k].Load(), covered[k].Load(); a != c {
			t.Errorf("key-%d: %d adds, the last processing covered %d", k, a, c)
		}
	}
	if processed.Load() == 0 || processed.Load() > producers*adds {
		t.Fatalf("processed %d", processed.Load())
	}
	t.Logf("%d adds, %d processings", producers*adds, processed.Load())
}

// One Add, Get and Done of a string key through cgo (three C calls), and
// the allocations of the binding: the key copied out by Get.
func BenchmarkWQAddGetDone(b *testing.B) {
	q := newWQ[string](b, FIFO, WorkqueueOptions{})
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if err := q.Add("namespace/name"); err != nil {
			b.Fatal(err)
		}
		item, _, err := q.Get(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := q.Done(item); err != nil {
			b.Fatal(err)
		}
	}
}
