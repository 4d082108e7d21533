package apf

import (
	"context"
	"errors"
)

// Handle takes a request through priority and fairness, as Kubernetes'
// flowcontrol Interface.Handle does:
//
//   - workEstimator (nil: one seat) sizes the request, then the request is
//     classified and decided on; libapf classifies and estimates in one
//     call, so unlike Kubernetes the estimator runs before noteFn;
//   - noteFn (may be nil) sees the classification before anything else
//     happens to the request (servers set response headers there);
//   - if the request waits in a queue, queueNoteFn (may be nil) is called
//     with true when it enters and false when it leaves;
//   - execFn runs if, and only if, the request is dispatched. Its seats
//     are given back when execFn returns, or panics (the panic then goes
//     on up). Handle never returns while execFn runs.
//
// While the request waits, the goroutine is parked on a channel (no OS
// thread is held). If ctx ends first, the request is cancelled in libapf
// and rejected with reason Cancelled, or TimeOut when ctx's deadline
// passed; a dispatch that came just before the cancellation is honoured,
// as in Kubernetes.
//
// The error is for failures of the library (or ErrClosed), never for a
// rejection, which is a Result with Outcome Rejected.
func (d *Dispatcher) Handle(ctx context.Context, digest RequestDigest,
	noteFn func(Classification),
	workEstimator func() WorkEstimate,
	queueNoteFn func(inQueue bool),
	execFn func(),
) (Result, error) {
	return d.handle(ctx, digest, noteFn, workEstimator, queueNoteFn, execFn, nil)
}

// handle is Handle (execFn) and HandleReleasable (execSeats: it gets the
// request's seats); exactly one of the two is non-nil. Two parameters
// rather than a wrapping closure, so that Handle allocates nothing.
func (d *Dispatcher) handle(ctx context.Context, digest RequestDigest,
	noteFn func(Classification),
	workEstimator func() WorkEstimate,
	queueNoteFn func(inQueue bool),
	execFn func(),
	execSeats func(*Seats),
) (Result, error) {
	estimate := WorkEstimate{InitialSeats: 1}
	if workEstimator != nil {
		estimate = workEstimator()
	}
	var dec decision
	if err := d.startC(&digest, estimate, &dec); err != nil {
		return Result{}, err
	}
	cls, err := d.classification(&dec)
	if err != nil {
		d.abandonStarted(&dec)
		return Result{}, err
	}
	res := Result{Classification: cls}
	if noteFn != nil {
		noteFn(res.Classification)
	}
	h := dec.handle()
	switch dec.outcomeCode() {
	case outcomeExecute:
		return res, d.execute(h, &res, execFn, execSeats)
	case outcomeRejected:
		res.Outcome, res.RejectReason = Rejected, dec.rejectReason()
		return res, nil
	}
	res.Queued = true
	if queueNoteFn != nil {
		queueNoteFn(true)
	}
	outcome, reason, err := d.await(ctx, h)
	if queueNoteFn != nil {
		queueNoteFn(false)
	}
	if err != nil {
		return res, err
	}
	if outcome == outcomeExecute {
		return res, d.execute(h, &res, execFn, execSeats)
	}
	res.Outcome, res.RejectReason = Rejected, reason
	return res, nil
}

// execute runs a dispatched request and finishes it even if execFn panics.
func (d *Dispatcher) execute(h uint64, res *Result, execFn func(), execSeats func(*Seats)) (err error) {
	res.Outcome = Executed
	if execSeats == nil {
		defer func() {
			if ferr := d.finishC(h); err == nil {
				err = ferr
			}
		}()
		execFn()
		return nil
	}
	seats := &Seats{d: d, h: h}
	defer func() {
		var ferr error
		if seats.hasCost {
			ferr = d.finishWithCostC(h, seats.cost)
		} else {
			ferr = d.finishC(h)
		}
		if err == nil {
			err = ferr
		}
	}()
	execSeats(seats)
	return nil
}

// requestOps are the per-request calls a queued request's waiter needs,
// on a dispatcher or on a queueset.
type requestOps interface {
	pollC(h uint64) (uint32, RejectReason, error)
	cancelC(h uint64) (bool, error)
}

// await parks until queued request h is decided or ctx ends, and returns
// the decision: outcomeExecute (the request now holds its seats) or
// outcomeRejected with the reason.
func (d *Dispatcher) await(ctx context.Context, h uint64) (uint32, RejectReason, error) {
	return awaitDecision(ctx, d.c.waiters, d, h)
}

func awaitDecision(ctx context.Context, w *waiters, ops requestOps, h uint64) (uint32, RejectReason, error) {
	for {
		wake, ok := w.add(h)
		if !ok {
			return 0, 0, ErrClosed
		}
		// A decision made before the waiter was registered woke nobody.
		outcome, reason, err := ops.pollC(h)
		if err != nil || outcome != outcomeQueued {
			w.remove(h, wake)
			return outcome, reason, err
		}
		select {
		case <-wake:
			w.woken(wake)
			outcome, reason, err = ops.pollC(h)
			if err != nil || outcome != outcomeQueued {
				return outcome, reason, err
			}
			// Still queued: the wake was not for this decision; wait again.
		case <-ctx.Done():
			w.remove(h, wake)
			return abandon(ctx, ops, h)
		}
	}
}

// abandon cancels queued request h because its context ended.
func abandon(ctx context.Context, ops requestOps, h uint64) (uint32, RejectReason, error) {
	outcome, reason, err := ops.pollC(h)
	if err != nil || outcome != outcomeQueued {
		return outcome, reason, err
	}
	// If the request is decided between the poll and the cancellation,
	// libapf finishes a dispatch at once; either way it did not run.
	if _, err := ops.cancelC(h); err != nil {
		return 0, 0, err
	}
	reason = Cancelled
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		reason = TimeOut
	}
	return outcomeRejected, reason, nil
}

// abandonStarted gives back a request that started but cannot be handled
// (its names could not be read: the dispatcher was closed meanwhile), so
// it holds no seat and no queue place.
func (d *Dispatcher) abandonStarted(dec *decision) {
	switch dec.outcomeCode() {
	case outcomeExecute:
		_ = d.finishC(dec.handle())
	case outcomeQueued:
		_, _ = d.cancelC(dec.handle())
	}
}
