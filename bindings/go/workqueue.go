package apf

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Key is what a Workqueue holds: a byte string, as a string or a []byte (or
// a type defined over either). libapf copies a key when it is added, and
// Get copies it back out, so the caller may reuse a []byte after Add.
type Key interface {
	~string | ~[]byte
}

// QueueKind is how a Workqueue orders its ready items.
type QueueKind uint32

const (
	// FIFO hands items out in the order they became ready.
	FIFO QueueKind = 0
	// TwoLane has a fast and a slow lane, each FIFO; slow items are handed
	// out only while the fast lane is empty.
	TwoLane QueueKind = 1
	// PriorityOrder hands out the highest priority first, FIFO within one
	// priority (controller-runtime's priority queue).
	PriorityOrder QueueKind = 2
)

// Lane is a lane of a TwoLane queue.
type Lane uint32

const (
	// LaneFast is served first (and is the lane of items added without one).
	LaneFast Lane = 0
	// LaneSlow is served only while the fast lane is empty.
	LaneSlow Lane = 1
)

// WorkqueueOptions configure a Workqueue. The zero value is a real-time,
// unnamed queue with client-go's default controller rate limiter.
type WorkqueueOptions struct {
	// Name is the `name` label of the queue's metrics (may be empty).
	Name string
	// ManualClock runs the queue's delays and rate limits on a clock that
	// starts at 0 and moves only through AdvanceClock (for tests).
	ManualClock bool
	// RateLimiter decides the delays of AddRateLimited; nil is
	// DefaultControllerRateLimiter.
	RateLimiter *RateLimiter
	// LimiterStateCapacity bounds how many items a per-item limiter
	// remembers per generation (0: libapf's default, 2^20), so keys never
	// forgotten cannot grow memory without limit.
	LimiterStateCapacity uint64
	// LimiterIdleExpiry forgets per-item limiter state idle this long (0:
	// twice the limiter's longest delay, at least a minute).
	LimiterIdleExpiry time.Duration
	// Capacity is how many items the queue's index holds before it first
	// grows (growing rehashes under the queue's lock); 0 grows as needed.
	Capacity uint64
	// MaxBlockedGets is how many goroutines may wait inside libapf at once
	// for an item (each pins an OS thread while it does); further Gets on
	// an empty queue park on a channel, holding no thread. 0 means
	// GOMAXPROCS.
	MaxBlockedGets int
}

// AddOpts are the options of AddWithOpts.
type AddOpts struct {
	// After delays the add: the item becomes ready once After has passed.
	After time.Duration
	// RateLimited also asks the rate limiter (which counts a requeue); a
	// FIFO or two-lane queue waits for its delay, a priority queue for the
	// shorter of it and a non-zero After.
	RateLimited bool
	// Lane is the lane on a TwoLane queue. Adding a queued item with the
	// other lane moves it to the back of that lane.
	Lane Lane
	// Priority is the priority on a PriorityOrder queue (higher first). Of
	// the adds of an item not yet handed out, the highest priority wins.
	Priority int32
}

// Item is an item handed out by Get or TryGet: its key, copied out of
// libapf, where it came from, and the handle Done needs.
type Item[K Key] struct {
	Key K
	// Lane is the lane it came from (TwoLane queues).
	Lane Lane
	// Priority is its priority (PriorityOrder queues).
	Priority int32
	handle   uint64
}

// ErrWorkqueueClosed is returned by calls on a closed Workqueue.
var ErrWorkqueueClosed = errors.New("apf: workqueue is closed")

// getSlice bounds each wait inside libapf of a Get with a cancellable
// context, so that a cancellation is seen within it.
const getSlice = 10 * time.Millisecond

// Workqueue is libapf's client-go workqueue: the dirty and processing
// rules (an item is queued once however often it is added, and never
// handed to two workers at once), delayed and rate-limited adds, and a
// FIFO, two-lane or priority order. All methods may be called from any
// number of goroutines, Close included.
type Workqueue[K Key] struct {
	c *wqCore
}

type wqCore struct {
	ptr  unsafe.Pointer // *C.apf_workqueue, freed once (see use)
	kind QueueKind
	// use counts the calls inside libapf; the queue is freed by whoever
	// sees it closed with no call left, so Close never frees it under a call.
	use useCount
	// blocked is the semaphore of MaxBlockedGets.
	blocked chan struct{}
	// waiting counts the Gets waiting for an item (read by tests).
	waiting atomic.Int64
}

// NewFIFOQueue makes a FIFO workqueue (client-go's rate-limiting queue).
func NewFIFOQueue[K Key](opts WorkqueueOptions) (*Workqueue[K], error) {
	return newWorkqueue[K](FIFO, opts)
}

// NewTwoLaneQueue makes a two-lane workqueue (fast and slow lanes).
func NewTwoLaneQueue[K Key](opts WorkqueueOptions) (*Workqueue[K], error) {
	return newWorkqueue[K](TwoLane, opts)
}

// NewPriorityQueue makes a priority workqueue (controller-runtime's).
func NewPriorityQueue[K Key](opts WorkqueueOptions) (*Workqueue[K], error) {
	return newWorkqueue[K](PriorityOrder, opts)
}

// NewWorkqueue makes a workqueue of the given kind.
func NewWorkqueue[K Key](kind QueueKind, opts WorkqueueOptions) (*Workqueue[K], error) {
	return newWorkqueue[K](kind, opts)
}

func newWorkqueue[K Key](kind QueueKind, opts WorkqueueOptions) (*Workqueue[K], error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	if opts.MaxBlockedGets < 0 {
		return nil, &Error{Status: StatusInvalidParameter, Message: "MaxBlockedGets is negative"}
	}
	p, err := wqNewC(kind, &opts)
	if err != nil {
		return nil, err
	}
	blocked := opts.MaxBlockedGets
	if blocked == 0 {
		blocked = runtime.GOMAXPROCS(0)
	}
	c := &wqCore{ptr: unsafe.Pointer(p), kind: kind,
		blocked: make(chan struct{}, blocked)}
	q := &Workqueue[K]{c: c}
	runtime.SetFinalizer(q, (*Workqueue[K]).Close)
	return q, nil
}

// enter counts a call into libapf, or fails once the queue is closed (or,
// with evenClosed, once it is freed: Done stays possible between Close and
// the free, so a drain in progress can finish).
func (c *wqCore) enter(evenClosed bool) (unsafe.Pointer, error) {
	maybeGC()
	if !c.use.enter(evenClosed) {
		return nil, ErrWorkqueueClosed
	}
	return c.ptr, nil
}

func (c *wqCore) exit() {
	if c.use.exit() {
		wqFreeC(c.ptr)
	}
}

// call runs f on the C queue inside a counted use.
func (c *wqCore) call(f func(p unsafe.Pointer) error) error {
	p, err := c.enter(false)
	if err != nil {
		return err
	}
	defer c.exit()
	return f(p)
}

// Close shuts the queue down (unless it already is) and frees it once no
// call is inside libapf. Blocked Gets return shut down; later calls return
// ErrWorkqueueClosed, except Done, which works until the queue is freed: a
// ShutDownWithDrain in progress keeps it (Close does not cut the drain
// short), and Done of the items it waits for ends it. Close is idempotent,
// and runs as the finalizer of an unreachable queue.
func (q *Workqueue[K]) Close() error {
	runtime.SetFinalizer(q, nil)
	// A second shutdown would end a drain's wait early.
	if !q.ShuttingDown() {
		_ = q.ShutDown()
	}
	if q.c.use.close() {
		wqFreeC(q.c.ptr)
	}
	return nil
}

// Kind is the queue's order.
func (q *Workqueue[K]) Kind() QueueKind { return q.c.kind }

// Add queues key, unless it is already queued (then nothing changes) or
// being processed (then Done queues it again). Ignored after ShutDown.
func (q *Workqueue[K]) Add(key K) error {
	k, n := wqKey(key)
	err := q.c.call(func(p unsafe.Pointer) error { return wqAddC(p, k, n) })
	runtime.KeepAlive(key)
	return err
}

// AddAfter adds key once delay has passed (at once for a delay of 0 or
// less). An item already waiting keeps the earlier ready time.
func (q *Workqueue[K]) AddAfter(key K, delay time.Duration) error {
	k, n := wqKey(key)
	err := q.c.call(func(p unsafe.Pointer) error { return wqAddAfterC(p, k, n, nanos(delay)) })
	runtime.KeepAlive(key)
	return err
}

// AddRateLimited adds key after the delay the rate limiter gives it, and
// counts a requeue.
func (q *Workqueue[K]) AddRateLimited(key K) error {
	k, n := wqKey(key)
	err := q.c.call(func(p unsafe.Pointer) error { return wqAddRateLimitedC(p, k, n) })
	runtime.KeepAlive(key)
	return err
}

// AddWithOpts adds key with a delay, the rate limiter, a lane (TwoLane
// queues) or a priority (PriorityOrder queues). A slow lane on a queue
// without lanes, or a non-zero priority on one without priorities, fails
// with StatusWQWrongKind.
func (q *Workqueue[K]) AddWithOpts(key K, opts AddOpts) error {
	k, n := wqKey(key)
	if opts.After < 0 {
		opts.After = 0
	}
	hasPriority := q.c.kind == PriorityOrder || opts.Priority != 0
	err := q.c.call(func(p unsafe.Pointer) error { return wqAddWithOptsC(p, k, n, &opts, hasPriority) })
	runtime.KeepAlive(key)
	return err
}

// Get hands out the next ready item, waiting for one while the queue is
// empty. shutdown is true (and the Item empty) once the queue is shutting
// down and empty. If ctx ends first, Get returns ctx's error; an item taken
// at the same moment is still returned, since libapf cannot take it back.
//
// Waiting: Get first tries without waiting. Then at most MaxBlockedGets
// goroutines per queue wait inside libapf, each pinning an OS thread
// meanwhile (and waking every 10 ms to look at ctx, unless ctx can never
// end); the other waiting Gets park on a channel without a thread. A
// cancelled Get returns within about 10 ms.
func (q *Workqueue[K]) Get(ctx context.Context) (item Item[K], shutdown bool, err error) {
	item, res, err := q.get(0)
	if err != nil || res != wqEmpty {
		return item, res == wqShutDown, err
	}
	q.c.waiting.Add(1)
	defer q.c.waiting.Add(-1)
	done := ctx.Done()
	select {
	case q.c.blocked <- struct{}{}:
	case <-done:
		return Item[K]{}, false, ctx.Err()
	}
	defer func() { <-q.c.blocked }()
	slice := wqForever
	if done != nil {
		slice = uint64(getSlice)
	}
	for {
		if err := ctx.Err(); err != nil {
			return Item[K]{}, false, err
		}
		item, res, err = q.get(slice)
		if err != nil || res != wqTimedOut {
			return item, res == wqShutDown, err
		}
	}
}

// TryGet hands out the next ready item without waiting: ok is false when
// none is ready, and shutdown is true once the queue is shutting down and
// empty.
func (q *Workqueue[K]) TryGet() (item Item[K], ok bool, shutdown bool, err error) {
	item, res, err := q.get(0)
	return item, err == nil && res == wqItem, res == wqShutDown, err
}

// get is one apf_workqueue_get; a closed queue reads as shut down.
func (q *Workqueue[K]) get(timeout uint64) (Item[K], uint32, error) {
	p, err := q.c.enter(false)
	if err != nil {
		return Item[K]{}, wqShutDown, nil
	}
	defer q.c.exit()
	item, res, err := wqGetC[K](p, timeout)
	runtime.KeepAlive(q)
	return item, res, err
}

// Done ends the processing of an item Get handed out: if it was added
// meanwhile it is queued again. Done twice for one Get, or for an Item not
// from this queue, fails with StatusInvalidHandle.
func (q *Workqueue[K]) Done(item Item[K]) error {
	p, err := q.c.enter(true)
	if err != nil {
		return err
	}
	defer q.c.exit()
	err = wqDoneC(p, item.handle)
	runtime.KeepAlive(q)
	return err
}

// Forget clears key's rate-limiter history (after a success); Done is
// still needed.
func (q *Workqueue[K]) Forget(key K) error {
	k, n := wqKey(key)
	err := q.c.call(func(p unsafe.Pointer) error { return wqForgetC(p, k, n) })
	runtime.KeepAlive(key)
	return err
}

// NumRequeues is how many times the rate limiter has delayed key since it
// was last forgotten.
func (q *Workqueue[K]) NumRequeues(key K) (int, error) {
	k, n := wqKey(key)
	var out int
	err := q.c.call(func(p unsafe.Pointer) (err error) {
		out, err = wqNumRequeuesC(p, k, n)
		return err
	})
	runtime.KeepAlive(key)
	return out, err
}

// Len is the number of ready items (client-go's Len): delayed items not
// yet ready and items being processed are not counted.
func (q *Workqueue[K]) Len() (int, error) { return q.count(countReady) }

// WaitingLen is the number of delayed items not yet ready.
func (q *Workqueue[K]) WaitingLen() (int, error) { return q.count(countWaiting) }

// Processing is the number of items handed out and not yet Done.
func (q *Workqueue[K]) Processing() (int, error) { return q.count(countProcessing) }

// LaneLen is the number of ready items in a lane of a TwoLane queue
// (StatusWQWrongKind for other kinds).
func (q *Workqueue[K]) LaneLen(lane Lane) (int, error) {
	switch lane {
	case LaneFast:
		return q.count(countFastLane)
	case LaneSlow:
		return q.count(countSlowLane)
	}
	return 0, &Error{Status: StatusInvalidParameter, Message: "LaneLen: unknown lane"}
}

func (q *Workqueue[K]) count(what wqCount) (int, error) {
	var out int
	err := q.c.call(func(p unsafe.Pointer) (err error) {
		out, err = wqCountC(p, what)
		return err
	})
	runtime.KeepAlive(q)
	return out, err
}

// ShutDown stops the queue: adds are ignored, waiting delays are dropped,
// and Get hands out what is queued, then reports shut down.
func (q *Workqueue[K]) ShutDown() error {
	err := q.c.call(func(p unsafe.Pointer) error { return wqShutDownC(p, false) })
	runtime.KeepAlive(q)
	return err
}

// ShutDownWithDrain shuts the queue down and returns once every item being
// processed is Done. It waits inside libapf, pinning an OS thread.
func (q *Workqueue[K]) ShutDownWithDrain() error {
	err := q.c.call(func(p unsafe.Pointer) error { return wqShutDownC(p, true) })
	runtime.KeepAlive(q)
	return err
}

// ShuttingDown reports whether ShutDown has been called (true once closed).
func (q *Workqueue[K]) ShuttingDown() bool {
	out := true
	_ = q.c.call(func(p unsafe.Pointer) (err error) {
		out, err = wqShuttingDownC(p)
		return err
	})
	runtime.KeepAlive(q)
	return out
}

// AdvanceClock moves a manual clock forward, making due delays ready.
// Fails with StatusNotManualClock on a real-time queue.
func (q *Workqueue[K]) AdvanceClock(by time.Duration) error {
	if by < 0 {
		return &Error{Status: StatusInvalidParameter, Message: "AdvanceClock: negative duration"}
	}
	err := q.c.call(func(p unsafe.Pointer) error { return wqAdvanceClockC(p, uint64(by)) })
	runtime.KeepAlive(q)
	return err
}

// MetricsText is the queue's client-go workqueue metrics (workqueue_depth,
// workqueue_adds_total, ...) in the Prometheus text format.
func (q *Workqueue[K]) MetricsText() (string, error) {
	var out string
	err := q.c.call(func(p unsafe.Pointer) (err error) {
		out, err = wqMetricsTextC(p)
		return err
	})
	runtime.KeepAlive(q)
	return out, err
}

// nanos is a non-negative duration in nanoseconds (negative: 0).
func nanos(d time.Duration) uint64 {
	if d < 0 {
		return 0
	}
	return uint64(d)
}
