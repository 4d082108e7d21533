package k8sfq

import (
	"context"
	"sync"

	"k8s.io/klog/v2"
)

// Goroutine counting for a fake clock (NewFactoryOnClock with a counter).
//
// Kubernetes' fake event clock moves only when its count of running
// goroutines is 0, so a goroutine that blocks must count itself out and
// whoever wakes it must count it back in before the waker itself can be
// counted out; otherwise the clock could jump while the woken goroutine is
// about to run. Kubernetes' queueset does this in its test promises. Here
// libapf dispatches a waiting request inside another goroutine's call
// (Finish, a clock move, a reconfiguration), so:
//
//   - a goroutine about to wait in Await counts itself out only if its
//     request still waits in libapf (QueueSet.StillQueued, under
//     waitCount.mu), and is recorded in blocked;
//   - after every call that may dispatch, credit polls the blocked
//     requests and counts back in each one that no longer waits, still
//     inside the dispatching goroutine, which is counted;
//   - a woken goroutine that finds itself still in blocked (it ran before
//     its dispatcher's credit, or libapf refused it) counts itself in;
//   - cancellation follows Kubernetes' contract: whoever cancels a
//     request's context has counted in one goroutine for it. As in
//     Kubernetes (one promise goroutine per admitted request with a
//     cancellable context), a watcher goroutine takes that count: it hands
//     it to the waiting goroutine if that one is counted out (and only then
//     cancels its wait), and otherwise gives it back.
//
// Because the check before counting out and credit both hold waitCount.mu,
// a request dispatched between the two is counted exactly once. Off the
// fake clock (active nil) none of this runs.
type waitCount struct {
	mu      sync.Mutex
	blocked map[*request]struct{}
}

// watch starts, for an admitted request with a cancellable context on a
// counting factory, the goroutine that takes the canceller's count; the
// request then waits on the returned context, which that goroutine cancels.
func (f *Factory) watch(r *request) context.Context {
	done := r.ctx.Done()
	if f.active == nil || done == nil {
		return r.ctx
	}
	waitCtx, cancel := context.WithCancel(context.Background())
	go func() {
		<-done
		f.count.mu.Lock()
		r.ctxDone = true
		_, handed := f.count.blocked[r]
		if handed {
			delete(f.count.blocked, r)
		}
		f.count.mu.Unlock()
		if !handed {
			f.active.Add(-1)
		}
		cancel()
	}()
	return waitCtx
}

// countOut: r's goroutine is about to wait for r in Await.
func (f *Factory) countOut(r *request) {
	if f.active == nil {
		return
	}
	f.count.mu.Lock()
	defer f.count.mu.Unlock()
	if r.ctxDone {
		return // the wait ends at once
	}
	if queued, err := r.qs.q.StillQueued(&r.ticket); err != nil || !queued {
		return
	}
	if f.count.blocked == nil {
		f.count.blocked = make(map[*request]struct{})
	}
	f.count.blocked[r] = struct{}{}
	f.active.Add(-1)
}

// countIn: r's goroutine returned from Await.
func (f *Factory) countIn(r *request) {
	if f.active == nil {
		return
	}
	f.count.mu.Lock()
	if _, ok := f.count.blocked[r]; ok {
		delete(f.count.blocked, r)
		f.active.Add(1)
	}
	f.count.mu.Unlock()
	f.credit()
}

// credit counts back in every blocked goroutine whose request no longer
// waits in libapf; called by a counted goroutine after each call that may
// have dispatched.
func (f *Factory) credit() {
	if f.active == nil {
		return
	}
	f.count.mu.Lock()
	defer f.count.mu.Unlock()
	if len(f.count.blocked) == 0 {
		return
	}
	for r := range f.count.blocked {
		queued, err := r.qs.q.StillQueued(&r.ticket)
		if err != nil {
			klog.ErrorS(err, "libapf queueset: polling a waiting request", "priorityLevel", r.qs.name)
		}
		if !queued {
			delete(f.count.blocked, r)
			f.active.Add(1)
		}
	}
}
