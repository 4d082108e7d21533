package apf

import "sync/atomic"

// useCount guards one C object (a dispatcher or a workqueue) against a
// Close that races calls on it: each call into libapf is counted in and
// out, Close marks the object closed, and whoever sees it closed with no
// call left frees it, exactly once. So Close never frees the C object
// under a call, and a call never starts on a freed one.
type useCount struct {
	// state holds the closed and freed bits and, in units of useOne, the
	// calls inside libapf.
	state atomic.Int64
}

const (
	useClosed int64 = 1
	useFreed  int64 = 2
	useOne    int64 = 4
)

// enter counts a call in, or reports false once the object is closed (or,
// with evenClosed, only once it is freed).
func (u *useCount) enter(evenClosed bool) bool {
	for {
		s := u.state.Load()
		if s&useFreed != 0 || (s&useClosed != 0 && !evenClosed) {
			return false
		}
		if u.state.CompareAndSwap(s, s+useOne) {
			return true
		}
	}
}

// exit counts a call out; true means the caller must free the object now
// (it was the last call after Close).
func (u *useCount) exit() bool {
	if u.state.Add(-useOne) == useClosed {
		return u.state.CompareAndSwap(useClosed, useClosed|useFreed)
	}
	return false
}

// close marks the object closed; true means the caller must free it now
// (no call is inside). Only the first close can return true.
func (u *useCount) close() bool {
	if old := u.state.Or(useClosed); old&useClosed == 0 {
		return u.state.CompareAndSwap(useClosed, useClosed|useFreed)
	}
	return false
}

// freed reports whether the object was freed (for tests).
func (u *useCount) freed() bool { return u.state.Load()&useFreed != 0 }
