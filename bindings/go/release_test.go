package apf

import (
	"context"
	"errors"
	"math"
	"testing"
)

// A request releases its seat while it runs at a full level: another
// request then runs at once, a second release of all is refused, and
// a release after the request finished is a stale handle.
func TestReleasingSeatsLetsOthersRun(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true})
	others := hold(t, d, "alice", levelSeats-1) // every seat but one
	var kept *Seats
	res, err := d.HandleReleasable(context.Background(), podGet("alice"), nil, nil, nil,
		func(s *Seats) {
			kept = s
			if got := levelStat(t, d, "tight", "seats_in_use"); got != levelSeats {
				t.Errorf("seats in use %d, want %d", got, levelSeats)
			}
			if err := s.Release(2); !errors.Is(err, StatusInvalidParameter) {
				t.Errorf("release of more than held: %v", err)
			}
			if err := s.Release(0); err != nil {
				t.Fatalf("release: %v", err)
			}
			if got := levelStat(t, d, "tight", "seats_in_use"); got != levelSeats-1 {
				t.Errorf("seats in use after the release %d", got)
			}
			if err := s.Release(0); !errors.Is(err, StatusInvalidParameter) {
				t.Errorf("second release: %v", err)
			}
			// The level was full: this one runs at once only thanks to the release.
			other, err := d.Handle(context.Background(), podGet("alice"), nil, nil, nil, func() {})
			if err != nil || other.Outcome != Executed || other.Queued {
				t.Errorf("the other request: %+v %v", other, err)
			}
		})
	if err != nil || res.Outcome != Executed {
		t.Fatalf("%+v %v", res, err)
	}
	others.stop(t)
	if got := levelStat(t, d, "tight", "seats_in_use"); got != 0 {
		t.Errorf("seats in use at the end %d", got)
	}
	if err := kept.Release(1); !errors.Is(err, StatusInvalidHandle) {
		t.Errorf("release after the finish: %v", err)
	}
}

// A reported cost is checked before the finish, and a valid one finishes
// the request with it.
func TestReportCost(t *testing.T) {
	d := newTestDispatcher(t, Options{ManualClock: true})
	res, err := d.HandleReleasable(context.Background(), podGet("alice"), nil, nil, nil,
		func(s *Seats) {
			if err := s.ReportCost(math.NaN()); !errors.Is(err, StatusInvalidParameter) {
				t.Errorf("NaN: %v", err)
			}
			if err := s.ReportCost(2.5); err != nil {
				t.Errorf("a valid cost: %v", err)
			}
		})
	if err != nil || res.Outcome != Executed {
		t.Fatalf("%+v %v", res, err)
	}
	if got := levelStat(t, d, "tight", "seats_in_use"); got != 0 {
		t.Errorf("seats in use at the end %d", got)
	}
}
