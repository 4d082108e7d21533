package apf

// The C side of the binding: each Go function calls libapf directly. A
// failure needs no per-thread state read on the calling OS thread: its text
// is its status code's (apf_status_text), or, for the calls whose failures
// need more words (constructors, reconfiguration), the owned apf_error the
// call hands out, read and freed here.
//
// The C helpers left (shim.h, shim.c) do only what cgo cannot express:
// go_apf_start builds the request digest (a struct of string pointers) in
// C memory, because Go memory passed to C may not hold Go pointers and the
// strings are Go memory; the one-line go_apf_finish/poll/cancel/... pass
// the dispatcher as an integer, because cgo checks every opaque pointer
// argument on every call.
//
// The hot-path calls are marked noescape/nocallback: they keep no Go
// pointer after returning and never call back into Go (the binding sets no
// completion callback; decisions reach Go through the completion fd), so
// their arguments stay on the goroutine's stack.

/*
#cgo noescape go_apf_start
#cgo nocallback go_apf_start
#cgo noescape go_apf_finish
#cgo nocallback go_apf_finish
#cgo noescape go_apf_poll
#cgo nocallback go_apf_poll
#cgo noescape go_apf_cancel
#cgo nocallback go_apf_cancel
#cgo noescape apf_dispatcher_take_completion
#cgo nocallback apf_dispatcher_take_completion

#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"runtime"
	"unsafe"
)

// Every function below that takes a *Dispatcher reads its C pointer, calls
// C once, and keeps the Dispatcher alive until C returned (so its finalizer
// cannot free the C object mid-call). maybeGC runs first in `-tags debug`
// builds.

// statusErr is the error of a call's status (nil for APF_OK): the code and
// its fixed text, which says all there is for the calls without an
// apf_error out-parameter.
func statusErr(st C.apf_status) error {
	if st == C.APF_OK {
		return nil
	}
	return &Error{Status: Status(st), Message: Status(st).Error()}
}

// ownedErr is the error of a call that takes an apf_error out-parameter:
// its message (the code's text when libapf gave none), the error freed.
func ownedErr(st C.apf_status, e *C.apf_error) error {
	if st == C.APF_OK {
		return nil
	}
	msg := ""
	if e != nil {
		var text *C.char
		var n C.size_t
		if C.apf_error_message(e, &text, &n) == C.APF_OK {
			msg = C.GoStringN(text, C.int(n))
		}
		C.apf_error_free(e)
	}
	if msg == "" {
		msg = Status(st).Error()
	}
	return &Error{Status: Status(st), Message: msg}
}

// cstr is a Go string as a (pointer, length) pair for C. The bytes hold no
// Go pointers, so passing them is allowed, and C keeps no copy of the
// pointer after the call; (NULL, 0) is libapf's empty string.
func cstr(s string) (*C.char, C.size_t) {
	return (*C.char)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
}

func cbytes(b []byte) (*C.char, C.size_t) {
	return (*C.char)(unsafe.Pointer(unsafe.SliceData(b))), C.size_t(len(b))
}

// headerVersion is APF_VERSION_NUMBER of the apf.h compiled in.
func headerVersion() uint32 { return uint32(C.APF_VERSION_NUMBER) }

// libraryVersion is apf_abi_version() of the libapf loaded.
func libraryVersion() uint32 { return uint32(C.apf_abi_version()) }

func defaultCOptions() (C.apf_dispatcher_options, error) {
	var o C.apf_dispatcher_options
	return o, statusErr(C.apf_dispatcher_options_default(&o))
}

func (o Options) toC() (C.apf_dispatcher_options, error) {
	c, err := defaultCOptions()
	if err != nil {
		return c, err
	}
	if o.ServerConcurrencyLimit != 0 {
		c.server_concurrency_limit = C.uint32_t(o.ServerConcurrencyLimit)
	}
	if o.ServiceTimeGuess != 0 {
		c.service_time_guess_ns = C.uint64_t(o.ServiceTimeGuess)
	}
	if o.WaitLimit < 0 {
		c.wait_limit_ns = 0
	} else if o.WaitLimit != 0 {
		c.wait_limit_ns = C.uint64_t(o.WaitLimit)
	}
	if o.BorrowingPeriod != 0 {
		c.borrowing_period_ns = C.uint64_t(o.BorrowingPeriod)
	}
	c.manual_clock = C.bool(o.ManualClock)
	return c, nil
}

// newC makes the C dispatcher from the built-in configuration (builtin) or
// from configuration text.
func newC(config []byte, builtin bool, opts Options) (*C.apf_dispatcher, error) {
	maybeGC()
	copts, err := opts.toC()
	if err != nil {
		return nil, err
	}
	if a := cAdaptive(opts.Adaptive); a != nil {
		copts.adaptive = a
		defer C.free(unsafe.Pointer(a))
	}
	var p *C.apf_dispatcher
	var e *C.apf_error
	var st C.apf_status
	if builtin {
		st = C.apf_dispatcher_new_builtin(&copts, &p, &e)
	} else {
		text, n := cbytes(config)
		st = C.apf_dispatcher_new_from_config(text, n, &copts, &p, &e)
	}
	runtime.KeepAlive(config)
	return p, ownedErr(st, e)
}

// dispatcherArg passes the C dispatcher to the hot-path helpers as an
// integer (see shim.h): it is C memory, so Go's collector neither moves
// nor frees it, and cgo need not check it.
func dispatcherArg(p *C.apf_dispatcher) C.uintptr_t {
	return C.uintptr_t(uintptr(unsafe.Pointer(p)))
}

func freeC(p *C.apf_dispatcher) { C.apf_dispatcher_free(p) }

func completionFd(p *C.apf_dispatcher) (int, error) {
	var fd C.int
	st := C.apf_dispatcher_completion_fd(p, &fd)
	return int(fd), statusErr(st)
}

// takeCompletions fills batch with decided requests and returns how many.
func takeCompletions(p *C.apf_dispatcher, batch []C.uint64_t) (int, error) {
	n := 0
	for n < len(batch) {
		var some C.bool
		if err := statusErr(C.apf_dispatcher_take_completion(p, &batch[n], &some)); err != nil {
			return n, err
		}
		if !some {
			break
		}
		n++
	}
	return n, nil
}

func (d *Dispatcher) reconfigureC(config []byte) error {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return ErrClosed
	}
	defer d.c.exit()
	var e *C.apf_error
	text, n := cbytes(config)
	st := C.apf_dispatcher_reconfigure(p, text, n, &e)
	runtime.KeepAlive(config)
	runtime.KeepAlive(d)
	return ownedErr(st, e)
}

func (d *Dispatcher) advanceC(nanos uint64) error {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return ErrClosed
	}
	defer d.c.exit()
	st := C.apf_dispatcher_advance_clock(p, C.uint64_t(nanos))
	runtime.KeepAlive(d)
	return statusErr(st)
}

func (d *Dispatcher) nowC() (uint64, error) {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return 0, ErrClosed
	}
	defer d.c.exit()
	var now C.uint64_t
	st := C.apf_dispatcher_now(p, &now)
	runtime.KeepAlive(d)
	return uint64(now), statusErr(st)
}

func (d *Dispatcher) statsTextC() (string, error) {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return "", ErrClosed
	}
	defer d.c.exit()
	defer runtime.KeepAlive(d)
	return takeText(func(out *C.apf_text) C.apf_status {
		return C.apf_dispatcher_stats_text(p, out)
	})
}

// textFill is one of the C functions that hand over an owned apf_text.
type textFill func(out *C.apf_text) C.apf_status

// takeText runs fill once and copies the text it made into Go memory,
// freeing the C buffer: the library hands each text over whole, so there
// is no size to guess and nothing to retry.
func takeText(fill textFill) (string, error) {
	var t C.apf_text
	if err := statusErr(fill(&t)); err != nil {
		return "", err
	}
	text := C.GoStringN(t.ptr, C.int(t.len))
	C.apf_text_free(&t)
	return text, nil
}

// decision is a start's outcome as C gave it, with the flow schema and
// priority level as ids (names.go).
type decision C.apf_decision_ids

// startC classifies and decides on a request, in one C call. Strings go
// to C as separate (pointer, length) arguments: Go memory passed to C may
// not itself hold Go pointers, which a C apf_request_digest in Go memory
// would. No argument's type holds a pointer besides these byte pointers
// (the decision holds ids), so cgo inserts no pointer check into the call.
func (d *Dispatcher) startC(dg *RequestDigest, est WorkEstimate, out *decision) error {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return ErrClosed
	}
	defer d.c.exit()
	var lensSmall [8]C.size_t
	var bufSmall [256]byte
	groupsBuf, groupLens := packGroups(dg.Groups, bufSmall[:0], lensSmall[:0])
	user, userN := cstr(dg.User)
	verb, verbN := cstr(dg.Verb)
	group, groupN := cstr(dg.APIGroup)
	res, resN := cstr(dg.Resource)
	sub, subN := cstr(dg.Subresource)
	ns, nsN := cstr(dg.Namespace)
	name, nameN := cstr(dg.Name)
	path, pathN := cstr(dg.Path)
	gb, _ := cbytes(groupsBuf)
	st := C.go_apf_start(dispatcherArg(p),
		user, userN,
		gb, unsafe.SliceData(groupLens), C.size_t(len(groupLens)),
		C.bool(dg.IsResourceRequest),
		verb, verbN, group, groupN, res, resN, sub, subN, ns, nsN, name, nameN, path, pathN,
		C.uint32_t(est.InitialSeats), C.uint32_t(est.FinalSeats), C.uint64_t(est.AdditionalLatency),
		0, (*C.apf_decision_ids)(out))
	runtime.KeepAlive(dg)
	runtime.KeepAlive(groupsBuf)
	runtime.KeepAlive(d)
	return statusErr(st)
}

// packGroups lays the group names end to end in buf and their lengths in
// lens (both grown past their capacity only for unusually many groups).
func packGroups(groups []string, buf []byte, lens []C.size_t) ([]byte, []C.size_t) {
	for _, g := range groups {
		buf = append(buf, g...)
		lens = append(lens, C.size_t(len(g)))
	}
	return buf, lens
}

func (d *Dispatcher) finishC(h uint64) error {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return ErrClosed
	}
	defer d.c.exit()
	st := C.go_apf_finish(dispatcherArg(p), C.uint64_t(h), 0)
	runtime.KeepAlive(d)
	return statusErr(st)
}

// finishWithCostC finishes a request, reporting its cost in seats.
func (d *Dispatcher) finishWithCostC(h uint64, cost float64) error {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return ErrClosed
	}
	defer d.c.exit()
	st := C.go_apf_finish_with_cost(dispatcherArg(p), C.uint64_t(h), 0, C.double(cost))
	runtime.KeepAlive(d)
	return statusErr(st)
}

// releaseSeatsC gives back n of an executing request's seats (0: all).
// Not marked nocallback: a release can dispatch waiters, and libapf runs
// completion callbacks from it (the binding sets none, but the C side does
// not promise that).
func (d *Dispatcher) releaseSeatsC(h uint64, n uint32) error {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return ErrClosed
	}
	defer d.c.exit()
	st := C.go_apf_release_seats(dispatcherArg(p), C.uint64_t(h), C.uint32_t(n))
	runtime.KeepAlive(d)
	return statusErr(st)
}

// pollC reports a request's state: queued, executing, or rejected.
func (d *Dispatcher) pollC(h uint64) (outcome uint32, reason RejectReason, err error) {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return 0, 0, ErrClosed
	}
	defer d.c.exit()
	var o, r C.uint32_t
	st := C.go_apf_poll(dispatcherArg(p), C.uint64_t(h), &o, &r)
	runtime.KeepAlive(d)
	return uint32(o), RejectReason(r), statusErr(st)
}

func (d *Dispatcher) cancelC(h uint64) (bool, error) {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return false, ErrClosed
	}
	defer d.c.exit()
	var cancelled C.bool
	st := C.go_apf_cancel(dispatcherArg(p), C.uint64_t(h), &cancelled)
	runtime.KeepAlive(d)
	return bool(cancelled), statusErr(st)
}

// The outcomes of apf_decision.outcome and apf_request_poll.
const (
	outcomeExecute  = uint32(C.APF_OUTCOME_EXECUTE)
	outcomeQueued   = uint32(C.APF_OUTCOME_QUEUED)
	outcomeRejected = uint32(C.APF_OUTCOME_REJECTED)
)

func (dec *decision) outcomeCode() uint32        { return uint32(dec.outcome) }
func (dec *decision) handle() uint64             { return uint64(dec.request) }
func (dec *decision) rejectReason() RejectReason { return RejectReason(dec.reject_reason) }
func (dec *decision) schemaID() uint32           { return uint32(dec.flow_schema_id) }
func (dec *decision) levelID() uint32            { return uint32(dec.priority_level_id) }

// nameC asks libapf for the name and UID behind a decision's id.
func (d *Dispatcher) nameC(id uint32) (name, uid string, err error) {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return "", "", ErrClosed
	}
	defer d.c.exit()
	var n, u C.apf_str
	st := C.apf_dispatcher_name(p, C.uint32_t(id), &n, &u)
	runtime.KeepAlive(d)
	if err := statusErr(st); err != nil {
		return "", "", err
	}
	return cString(n).String(), cString(u).String(), nil
}

// cString is a string libapf owns until the dispatcher is freed.
type cString C.apf_str

func (s cString) String() string { return C.GoStringN(s.ptr, C.int(s.len)) }
