package apf

import (
	"context"
	"fmt"
	"math"
)

// Seats is an executing request's hold on its priority level's seats, as
// HandleReleasable hands it to execFn: a long request (a watch after its
// initial burst) gives seats back early with Release while it keeps
// running, so it cannot pin its level. The final finish, when execFn
// returns, gives back only the seats still held. Valid only while execFn
// runs.
type Seats struct {
	d       *Dispatcher
	h       uint64
	cost    float64
	hasCost bool
}

// ReportCost records what the request really cost, in seats, to be
// reported when execFn returns (apf_finish_with_cost): for a flow schema
// with the annotation apf.libapf.io/cost: learned, later requests of the
// same schema, verb and resource get their seats from these reports. A
// cost that is not a finite number of 0 or more is refused with an error
// wrapping StatusInvalidParameter.
func (s *Seats) ReportCost(cost float64) error {
	if math.IsNaN(cost) || math.IsInf(cost, 0) || cost < 0 {
		return fmt.Errorf("cost: %v is not a finite number of seats, 0 or more: %w", cost, StatusInvalidParameter)
	}
	s.cost, s.hasCost = cost, true
	return nil
}

// Release gives back n of the request's seats now (0: every seat it still
// holds). Waiting requests that now fit are dispatched. Releasing more
// seats than held, or releasing all a second time, returns an error
// wrapping StatusInvalidParameter and changes nothing; after execFn
// returned, StatusInvalidHandle.
func (s *Seats) Release(n uint32) error {
	return s.d.releaseSeatsC(s.h, n)
}

// HandleReleasable is Handle with an execFn that may release seats early
// (see Seats). Everything else is as for Handle.
func (d *Dispatcher) HandleReleasable(ctx context.Context, digest RequestDigest,
	noteFn func(Classification),
	workEstimator func() WorkEstimate,
	queueNoteFn func(inQueue bool),
	execFn func(*Seats),
) (Result, error) {
	return d.handle(ctx, digest, noteFn, workEstimator, queueNoteFn, nil, execFn)
}
