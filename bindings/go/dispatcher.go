package apf

// #include "shim.h"
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Options are the server-wide settings. A zero field takes libapf's
// default (600 seats, G = 3 ms, 15 s wait limit, 10 s borrowing period).
type Options struct {
	// ServerConcurrencyLimit is the seats shared by all priority levels
	// (Kubernetes: max-requests-inflight + max-mutating-requests-inflight).
	ServerConcurrencyLimit uint32
	// ServiceTimeGuess is G, fair queuing's initial service-time guess.
	ServiceTimeGuess time.Duration
	// WaitLimit is the longest a request waits in a queue; 0 means the
	// default (15 s). A negative WaitLimit means no wait at all, as
	// net.Dialer's negative KeepAlive disables it: a request that cannot
	// start at once times out at its arrival.
	WaitLimit time.Duration
	// BorrowingPeriod is how often borrowing recomputes the levels' limits.
	BorrowingPeriod time.Duration
	// ManualClock runs the dispatcher on a clock that starts at 0 and moves
	// only through AdvanceClock (for tests and simulations).
	ManualClock bool
	// Adaptive, when not nil, turns on the adaptive server concurrency
	// limit with these settings (see AdaptiveOptions); nil keeps the fixed
	// ServerConcurrencyLimit.
	Adaptive *AdaptiveOptions
}

// Dispatcher is a libapf dispatcher: the flow schemas and priority levels
// in force, their queues, and the seats in use. All methods may be called
// from any number of goroutines, except Close (see the package
// documentation).
type Dispatcher struct {
	// c is shared with the completion goroutine, which must not keep the
	// Dispatcher itself reachable (or its finalizer would never run).
	c *core
}

type core struct {
	// ptr is the C dispatcher, freed once (see use).
	ptr *C.apf_dispatcher
	// use counts the calls inside libapf, so that Close, racing calls from
	// other goroutines, never frees the dispatcher under one of them (the
	// same scheme as Workqueue's and QueueSet's).
	use   useCount
	names names
	completer
	once sync.Once
}

// completer is the Go side of one libapf completion queue (a dispatcher's
// or a queueset's): the goroutines waiting for queued requests, and the
// one goroutine that wakes them.
type completer struct {
	waiters *waiters
	// file is a duplicate of libapf's completion fd, registered with Go's
	// network poller; closing it stops the completion goroutine.
	file     *os.File
	loopDone chan struct{}
}

func newCompleter() completer {
	return completer{waiters: newWaiters(), loopDone: make(chan struct{})}
}

// stop ends the completion goroutine and wakes every waiter with ErrClosed.
// Call it once, before freeing the C object.
func (c *completer) stop() {
	_ = c.file.Close()
	<-c.loopDone
	c.waiters.close()
}

// NewBuiltin makes a dispatcher with Kubernetes' built-in configuration
// (the suggested and mandatory flow schemas and priority levels).
func NewBuiltin(opts Options) (*Dispatcher, error) {
	return newDispatcher(nil, true, opts)
}

// NewFromConfig makes a dispatcher from configuration text: a YAML or JSON
// list of FlowSchema and PriorityLevelConfiguration objects as kubectl
// prints them (the mandatory objects are added when missing).
func NewFromConfig(config []byte, opts Options) (*Dispatcher, error) {
	return newDispatcher(config, false, opts)
}

func newDispatcher(config []byte, builtin bool, opts Options) (*Dispatcher, error) {
	if err := checkVersion(); err != nil {
		return nil, err
	}
	p, err := newC(config, builtin, opts)
	if err != nil {
		return nil, err
	}
	c := &core{ptr: p, completer: newCompleter()}
	fd, err := completionFd(p)
	if err != nil {
		freeC(p)
		return nil, err
	}
	raw, err := c.openCompletions(fd)
	if err != nil {
		freeC(p)
		return nil, err
	}
	go c.completionLoop(raw, func(batch []C.uint64_t) (int, error) { return takeCompletions(p, batch) })
	d := &Dispatcher{c: c}
	runtime.SetFinalizer(d, (*Dispatcher).Close)
	return d, nil
}

// checkVersion refuses a libapf whose major version (minor, before 1.0)
// differs from the header's.
func checkVersion() error {
	h, l := headerVersion(), libraryVersion()
	compatible := h>>16 == l>>16 && (h>>16 != 0 || h>>8&0xff == l>>8&0xff)
	if !compatible {
		return fmt.Errorf("%w: header %#x, library %#x", ErrVersion, h, l)
	}
	return nil
}

// Close frees the dispatcher. It is idempotent; later calls return
// ErrClosed, and goroutines still waiting in Handle return ErrClosed.
func (d *Dispatcher) Close() error {
	runtime.SetFinalizer(d, nil)
	d.c.close()
	return nil
}

// enter counts a call into libapf and gives the C dispatcher, or reports
// false once the dispatcher is closed; every successful enter is paired
// with an exit after the C call returned.
func (c *core) enter() (*C.apf_dispatcher, bool) {
	if !c.use.enter(false) {
		return nil, false
	}
	return c.ptr, true
}

// exit counts a call out, freeing the dispatcher if it was the last call
// after Close.
func (c *core) exit() {
	if c.use.exit() {
		freeC(c.ptr)
	}
}

func (c *core) close() {
	c.once.Do(func() {
		// Close holds a use of its own while it stops the completion
		// goroutine, so the last call's exit cannot free the dispatcher
		// under it; marking it closed first makes new calls fail.
		held := c.use.enter(false) // true: close runs once, and only here
		_ = c.use.close()          // never frees: the use above is held
		c.stop()
		if held {
			c.exit()
		}
	})
}

// openCompletions switches libapf's completion queue on and wraps a
// duplicate of its fd (libapf keeps and closes its own) for the poller.
func (c *completer) openCompletions(fd int) (syscall.RawConn, error) {
	syscall.ForkLock.RLock()
	dup, err := syscall.Dup(fd)
	if err == nil {
		syscall.CloseOnExec(dup)
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		return nil, fmt.Errorf("apf: duplicating the completion fd: %w", err)
	}
	// The fd is non-blocking, so os.NewFile registers it with the poller.
	c.file = os.NewFile(uintptr(dup), "apf-completions")
	raw, err := c.file.SyscallConn()
	if err != nil {
		_ = c.file.Close()
		return nil, err
	}
	return raw, nil
}

// completionLoop is the one goroutine that learns of decisions on queued
// requests: it sleeps in the poller until the completion fd is readable,
// takes every decided request from libapf (which makes the fd unreadable
// again once the queue is empty) and wakes each one's waiter.
func (c *completer) completionLoop(raw syscall.RawConn, take func([]C.uint64_t) (int, error)) {
	defer close(c.loopDone)
	batch := make([]C.uint64_t, 64)
	drain := func(uintptr) bool {
		for {
			n, err := take(batch)
			for _, h := range batch[:n] {
				c.waiters.wake(uint64(h))
			}
			if err != nil || n < len(batch) {
				// false: wait until the fd is readable, then call again.
				return false
			}
		}
	}
	// Read returns only when the file is closed.
	_ = raw.Read(drain)
}

// Reconfigure replaces the configuration; on error the old one stays in
// force. Levels that keep their name and type keep their queues.
func (d *Dispatcher) Reconfigure(config []byte) error {
	return d.reconfigureC(config)
}

// AdvanceClock moves a manual clock forward, firing time-outs that fall due.
func (d *Dispatcher) AdvanceClock(by time.Duration) error {
	if by < 0 {
		return &Error{Status: StatusInvalidParameter, Message: "AdvanceClock: negative duration"}
	}
	return d.advanceC(uint64(by))
}

// Now is the dispatcher's clock: time since its epoch (its creation, or 0
// of a manual clock).
func (d *Dispatcher) Now() (time.Duration, error) {
	n, err := d.nowC()
	return time.Duration(n), err
}

// StatsText is a plain-text dump of every level's gauges and counters.
func (d *Dispatcher) StatsText() (string, error) {
	return d.statsTextC()
}
