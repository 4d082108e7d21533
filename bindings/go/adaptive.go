package apf

/*
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"time"
	"unsafe"
)

// AdaptiveOptions turn on the adaptive server concurrency limit
// (docs/adaptive-limit.md): the seats all priority levels share follow the
// backend's measured latency instead of ServerConcurrencyLimit, which then
// only sizes the levels' per-request seat caps. A zero field takes libapf's
// default (apf_adaptive_options_default); out-of-range values make
// NewBuiltin and NewFromConfig fail with StatusInvalidParameter naming the
// field.
type AdaptiveOptions struct {
	// MinLimit is the least total the gradient may set, and where the slow
	// start begins (default 8).
	MinLimit uint32
	// MaxLimit is the greatest total the gradient may set (default 10000).
	MaxLimit uint32
	// UpdateInterval is how often a window of latencies is taken and the
	// total updated (default 250 ms; at least 10 ms).
	UpdateInterval time.Duration
	// TolerancePercent is the latency over the minimum the total settles
	// at (default 10: 1.1 × the minimum latency).
	TolerancePercent uint32
	// SmoothingPercent is how much of each window's target the total takes
	// (default 20).
	SmoothingPercent uint32
	// Gain is the exponent on the latency ratio (default 3; 1 to 8).
	Gain uint32
	// MinWindowSamples: windows with fewer completions are merged with the
	// next (default 16).
	MinWindowSamples uint32
	// ProbeInterval is the time between minimum-latency probes (default
	// 60 s).
	ProbeInterval time.Duration
	// ProbeLimit is the total a probe asks for (default 3).
	ProbeLimit uint32
	// ProbeSamples is the completions a probe averages (default 50).
	ProbeSamples uint32
	// ProbeTimeout is the longest a probe drains or measures (default 2 s).
	ProbeTimeout time.Duration
}

// AdaptiveState is the adaptive limit's state at one moment (the same
// figures as the apiserver_flowcontrol_adaptive_* metrics).
type AdaptiveState struct {
	// Enabled is false when the dispatcher has a fixed limit; every other
	// field is then zero.
	Enabled bool
	// Probing is true while a minimum-latency probe is under way.
	Probing bool
	// Limit is the total seats the priority levels share now.
	Limit uint32
	// Estimate is the smoothed total the gradient follows.
	Estimate float64
	// MinLatency is what the last probe measured; 0 until one has.
	MinLatency time.Duration
	// Latency is the last window's mean execution time; 0 before the
	// first window.
	Latency time.Duration
	// Gradient is the last gradient applied, in [0.5, 2].
	Gradient float64
	// Probes and Updates count the probes started and windows taken.
	Probes, Updates uint64
}

// cAdaptive returns a C copy of a (libapf's defaults with o's non-zero
// fields), in C memory so that the Go options struct that points to it
// holds no Go pointer; free it with C.free after the call. nil for nil.
func cAdaptive(o *AdaptiveOptions) *C.apf_adaptive_options {
	if o == nil {
		return nil
	}
	c := (*C.apf_adaptive_options)(C.calloc(1, C.size_t(unsafe.Sizeof(C.apf_adaptive_options{}))))
	if c == nil {
		panic("apf: out of memory")
	}
	// Cannot fail on a non-NULL pointer.
	C.apf_adaptive_options_default(c)
	set32 := func(dst *C.uint32_t, v uint32) {
		if v != 0 {
			*dst = C.uint32_t(v)
		}
	}
	setDur := func(dst *C.uint64_t, v time.Duration) {
		if v > 0 {
			*dst = C.uint64_t(v)
		} else if v < 0 {
			// Refused by libapf by name, never wrapped to a huge value.
			*dst = 0
		}
	}
	set32(&c.min_limit, o.MinLimit)
	set32(&c.max_limit, o.MaxLimit)
	setDur(&c.update_interval_ns, o.UpdateInterval)
	set32(&c.tolerance_percent, o.TolerancePercent)
	set32(&c.smoothing_percent, o.SmoothingPercent)
	set32(&c.gain, o.Gain)
	set32(&c.min_window_samples, o.MinWindowSamples)
	setDur(&c.probe_interval_ns, o.ProbeInterval)
	set32(&c.probe_limit, o.ProbeLimit)
	set32(&c.probe_samples, o.ProbeSamples)
	setDur(&c.probe_timeout_ns, o.ProbeTimeout)
	return c
}

// AdaptiveState reads the adaptive limit's state now (Enabled false when
// the dispatcher has a fixed limit).
func (d *Dispatcher) AdaptiveState() (AdaptiveState, error) {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return AdaptiveState{}, ErrClosed
	}
	defer d.c.exit()
	var s C.apf_adaptive_state
	st := C.apf_dispatcher_read_adaptive(p, &s)
	runtime.KeepAlive(d)
	if err := statusErr(st); err != nil {
		return AdaptiveState{}, err
	}
	return AdaptiveState{
		Enabled:    bool(s.enabled),
		Probing:    bool(s.probing),
		Limit:      uint32(s.limit),
		Estimate:   float64(s.estimate),
		MinLatency: time.Duration(s.min_latency_ns),
		Latency:    time.Duration(s.latency_ns),
		Gradient:   float64(s.gradient),
		Probes:     uint64(s.probes),
		Updates:    uint64(s.updates),
	}, nil
}
