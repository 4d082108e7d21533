package apf

import (
	"sync"
	"sync/atomic"
)

// waiters maps the handle of each queued request that a goroutine waits
// for to the channel that wakes it. The completion loop wakes; Handle adds
// and withdraws.
//
// A wake is a send into a channel of capacity one, made under the mutex
// together with the entry's removal. So a waiter that withdraws and finds
// its entry gone knows a wake is (or will be, once it holds the lock) in its
// channel, and drains it before the channel goes back to the pool.
type waiters struct {
	mu     sync.Mutex
	closed bool
	m      map[uint64]chan struct{}
	// n is len(m), readable without the mutex (any: a caller that may
	// have decided requests skips draining when nobody waits).
	n atomic.Int64
}

var wakePool = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

func newWaiters() *waiters {
	return &waiters{m: make(map[uint64]chan struct{})}
}

// add registers a waiter for request h; false once the dispatcher closed.
func (w *waiters) add(h uint64) (chan struct{}, bool) {
	ch := wakePool.Get().(chan struct{})
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		wakePool.Put(ch)
		return nil, false
	}
	w.m[h] = ch
	w.n.Store(int64(len(w.m)))
	w.mu.Unlock()
	return ch, true
}

// wake wakes the waiter of request h, if there is one (a request decided
// before its waiter registered, or whose waiter gave up, has none).
func (w *waiters) wake(h uint64) {
	w.mu.Lock()
	if ch, ok := w.m[h]; ok {
		delete(w.m, h)
		w.n.Store(int64(len(w.m)))
		ch <- struct{}{}
	}
	w.mu.Unlock()
}

// woken recycles a channel whose wake the waiter has received.
func (w *waiters) woken(ch chan struct{}) {
	wakePool.Put(ch)
}

// remove withdraws the waiter of request h without having been woken.
func (w *waiters) remove(h uint64, ch chan struct{}) {
	w.mu.Lock()
	_, registered := w.m[h]
	if registered {
		delete(w.m, h)
		w.n.Store(int64(len(w.m)))
	}
	w.mu.Unlock()
	if !registered {
		<-ch
	}
	wakePool.Put(ch)
}

// any reports whether a waiter may be registered (a racy read: a waiter
// that registers just after a false polls libapf itself, so it misses no
// decision).
func (w *waiters) any() bool { return w.n.Load() != 0 }

// isClosed reports whether close has run (a woken waiter checks it).
func (w *waiters) isClosed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.closed
}

// close wakes every waiter and refuses new ones.
func (w *waiters) close() {
	w.mu.Lock()
	w.closed = true
	for h, ch := range w.m {
		delete(w.m, h)
		ch <- struct{}{}
	}
	w.n.Store(0)
	w.mu.Unlock()
}

// len is the number of registered waiters (for tests).
func (w *waiters) len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.m)
}
