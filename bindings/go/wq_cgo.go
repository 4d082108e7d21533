package apf

// The C side of the workqueue binding: each Go function calls libapf
// directly. A failure's text is its status code's (apf_status_text), except
// for the constructors, which hand out an owned apf_error (see cgo.go).
//
// Keys go to C as (pointer, length) into Go memory: they hold no Go
// pointers and libapf copies them, so the add, forget and get calls are
// noescape/nocallback and a key does not escape to the heap for the call.

/*
#cgo noescape apf_workqueue_add
#cgo nocallback apf_workqueue_add
#cgo noescape apf_workqueue_add_with_options
#cgo nocallback apf_workqueue_add_with_options
#cgo noescape apf_workqueue_add_after
#cgo nocallback apf_workqueue_add_after
#cgo noescape apf_workqueue_add_rate_limited
#cgo nocallback apf_workqueue_add_rate_limited
#cgo noescape apf_workqueue_get
#cgo nocallback apf_workqueue_get
#cgo noescape apf_workqueue_try_get
#cgo nocallback apf_workqueue_try_get
#cgo noescape apf_workqueue_done
#cgo nocallback apf_workqueue_done
#cgo noescape apf_workqueue_forget
#cgo nocallback apf_workqueue_forget
#cgo noescape apf_workqueue_num_requeues
#cgo nocallback apf_workqueue_num_requeues
#cgo noescape apf_workqueue_len
#cgo nocallback apf_workqueue_len
#cgo noescape apf_workqueue_waiting_len
#cgo nocallback apf_workqueue_waiting_len
#cgo noescape apf_workqueue_processing
#cgo nocallback apf_workqueue_processing
#cgo noescape apf_workqueue_lane_len
#cgo nocallback apf_workqueue_lane_len

#include <stdlib.h>
#include "apf.h"
*/
import "C"

import (
	"unsafe"
)

// The workqueue status code of the C ABI (Done of an item not being
// processed is StatusInvalidHandle: items are done by handle).
const (
	// StatusWQWrongKind: a lane on a queue without lanes, or a priority on
	// a queue without priorities.
	StatusWQWrongKind Status = C.APF_ERR_WORKQUEUE_WRONG_KIND
)

// The results of apf_workqueue_get.
const (
	wqItem     = uint32(C.APF_WORKQUEUE_ITEM)
	wqEmpty    = uint32(C.APF_WORKQUEUE_EMPTY)
	wqShutDown = uint32(C.APF_WORKQUEUE_SHUT_DOWN)
	wqTimedOut = uint32(C.APF_WORKQUEUE_TIMED_OUT)
)

const wqForever = ^uint64(0)

// wqKey is a key's bytes as a (pointer, length) pair for C, without a copy.
// A string and a byte slice are told apart by their size: the two
// instantiations (string shape and slice shape) each convert for free.
func wqKey[K Key](k K) (*C.uint8_t, C.size_t) {
	if unsafe.Sizeof(k) == unsafe.Sizeof("") {
		s := string(k)
		return (*C.uint8_t)(unsafe.Pointer(unsafe.StringData(s))), C.size_t(len(s))
	}
	b := []byte(k)
	return (*C.uint8_t)(unsafe.Pointer(unsafe.SliceData(b))), C.size_t(len(b))
}

// wqKeyFromC copies a key out of libapf's memory into a new K (one copy:
// the bytes become the string, or are the slice).
func wqKeyFromC[K Key](p *C.uint8_t, n C.size_t) K {
	b := C.GoBytes(unsafe.Pointer(p), C.int(n))
	var zero K
	if unsafe.Sizeof(zero) == unsafe.Sizeof("") {
		return K(unsafe.String(unsafe.SliceData(b), len(b)))
	}
	return K(b)
}

type wqLimiterKind uint32

const (
	limiterDefault wqLimiterKind = iota
	limiterTokenBucket
	limiterItemTokenBucket
	limiterExponential
	limiterFastSlow
	limiterMaxOf
)

// buildC makes the C limiter this description stands for; the caller frees
// it with apf_rate_limiter_free once the queue holds its copy.
func (l *RateLimiter) buildC() (*C.apf_rate_limiter, error) {
	children := make([]*C.apf_rate_limiter, 0, len(l.children))
	defer func() {
		for _, c := range children {
			C.apf_rate_limiter_free(c)
		}
	}()
	for _, child := range l.children {
		if child == nil {
			return nil, &Error{Status: StatusNullPointer, Message: "NewMaxOfRateLimiter: nil limiter"}
		}
		c, err := child.buildC()
		if err != nil {
			return nil, err
		}
		children = append(children, c)
	}
	var out *C.apf_rate_limiter
	var e *C.apf_error
	var st C.apf_status
	switch l.kind {
	case limiterDefault:
		st = C.apf_rate_limiter_new_default(&out)
	case limiterTokenBucket:
		st = C.apf_rate_limiter_new_token_bucket(C.double(l.qps), C.uint32_t(l.burst), &out, &e)
	case limiterItemTokenBucket:
		st = C.apf_rate_limiter_new_item_token_bucket(C.double(l.qps), C.uint32_t(l.burst), &out, &e)
	case limiterExponential:
		st = C.apf_rate_limiter_new_exponential(C.uint64_t(nanos(l.a)), C.uint64_t(nanos(l.b)), &out, &e)
	case limiterFastSlow:
		st = C.apf_rate_limiter_new_fast_slow(C.uint64_t(nanos(l.a)), C.uint64_t(nanos(l.b)),
			C.uint32_t(l.attempts), &out, &e)
	case limiterMaxOf:
		// The children array is Go memory holding C pointers only.
		st = C.apf_rate_limiter_new_max_of(unsafe.SliceData(children), C.size_t(len(children)), &out, &e)
	default:
		st = C.APF_ERR_INVALID_PARAMETER
	}
	return out, ownedErr(st, e)
}

func wqNewC(kind QueueKind, opts *WorkqueueOptions) (*C.apf_workqueue, error) {
	maybeGC()
	var limiter *C.apf_rate_limiter
	if opts.RateLimiter != nil {
		var err error
		if limiter, err = opts.RateLimiter.buildC(); err != nil {
			return nil, err
		}
		defer C.apf_rate_limiter_free(limiter)
	}
	var o C.apf_workqueue_options
	if err := statusErr(C.apf_workqueue_options_default(&o)); err != nil {
		return nil, err
	}
	o.kind = C.uint32_t(kind)
	o.manual_clock = C.bool(opts.ManualClock)
	// The options struct is Go memory, which may hold no Go pointer when
	// passed to C: the name goes in a C copy (a queue is made rarely).
	if opts.Name != "" {
		o.name = C.CString(opts.Name)
		o.name_len = C.size_t(len(opts.Name))
		defer C.free(unsafe.Pointer(o.name))
	}
	o.limiter = limiter
	o.limiter_state_capacity = C.uint64_t(opts.LimiterStateCapacity)
	o.limiter_idle_expiry_nanos = C.uint64_t(nanos(opts.LimiterIdleExpiry))
	o.capacity = C.uint64_t(opts.Capacity)
	var q *C.apf_workqueue
	var e *C.apf_error
	st := C.apf_workqueue_new(&o, &q, &e)
	return q, ownedErr(st, e)
}

func wqFreeC(p unsafe.Pointer) { C.apf_workqueue_free((*C.apf_workqueue)(p)) }

// The calls below take the C queue as an unsafe.Pointer that the caller
// holds a use of (wqCore.enter), so it cannot be freed during the call.

func wqAddC(p unsafe.Pointer, key *C.uint8_t, n C.size_t) error {
	return statusErr(C.apf_workqueue_add((*C.apf_workqueue)(p), key, n))
}

func wqAddWithOptsC(p unsafe.Pointer, key *C.uint8_t, n C.size_t, o *AddOpts, hasPriority bool) error {
	var c C.apf_workqueue_add_options
	if err := statusErr(C.apf_workqueue_add_options_default(&c)); err != nil {
		return err
	}
	c.after_nanos = C.uint64_t(o.After)
	c.rate_limited = C.bool(o.RateLimited)
	c.lane = C.uint32_t(o.Lane)
	c.has_priority = C.bool(hasPriority)
	c.priority = C.int32_t(o.Priority)
	return statusErr(C.apf_workqueue_add_with_options((*C.apf_workqueue)(p), key, n, &c))
}

func wqAddAfterC(p unsafe.Pointer, key *C.uint8_t, n C.size_t, delay uint64) error {
	return statusErr(C.apf_workqueue_add_after((*C.apf_workqueue)(p), key, n, C.uint64_t(delay)))
}

func wqAddRateLimitedC(p unsafe.Pointer, key *C.uint8_t, n C.size_t) error {
	return statusErr(C.apf_workqueue_add_rate_limited((*C.apf_workqueue)(p), key, n))
}

// wqGetC takes an item (timeout 0: without waiting) and copies its key out
// of libapf's memory before anything else can release it.
func wqGetC[K Key](p unsafe.Pointer, timeout uint64) (Item[K], uint32, error) {
	var raw C.apf_workqueue_item
	var st C.apf_status
	if timeout == 0 {
		st = C.apf_workqueue_try_get((*C.apf_workqueue)(p), &raw)
	} else {
		st = C.apf_workqueue_get((*C.apf_workqueue)(p), C.uint64_t(timeout), &raw)
	}
	if err := statusErr(st); err != nil {
		return Item[K]{}, 0, err
	}
	res := uint32(raw.result)
	if res != wqItem {
		return Item[K]{}, res, nil
	}
	return Item[K]{
		Key:      wqKeyFromC[K](raw.key, raw.key_len),
		Lane:     Lane(raw.lane),
		Priority: int32(raw.priority),
		handle:   uint64(raw.item),
	}, res, nil
}

func wqDoneC(p unsafe.Pointer, h uint64) error {
	return statusErr(C.apf_workqueue_done((*C.apf_workqueue)(p), C.uint64_t(h)))
}

func wqForgetC(p unsafe.Pointer, key *C.uint8_t, n C.size_t) error {
	return statusErr(C.apf_workqueue_forget((*C.apf_workqueue)(p), key, n))
}

func wqNumRequeuesC(p unsafe.Pointer, key *C.uint8_t, n C.size_t) (int, error) {
	var out C.uint32_t
	err := statusErr(C.apf_workqueue_num_requeues((*C.apf_workqueue)(p), key, n, &out))
	return int(out), err
}

// The counts of wqCountC.
type wqCount uint32

const (
	countReady wqCount = iota
	countWaiting
	countProcessing
	countFastLane
	countSlowLane
)

func wqCountC(p unsafe.Pointer, what wqCount) (int, error) {
	var out C.size_t
	q := (*C.apf_workqueue)(p)
	var st C.apf_status
	switch what {
	case countReady:
		st = C.apf_workqueue_len(q, &out)
	case countWaiting:
		st = C.apf_workqueue_waiting_len(q, &out)
	case countProcessing:
		st = C.apf_workqueue_processing(q, &out)
	case countFastLane:
		st = C.apf_workqueue_lane_len(q, C.APF_WORKQUEUE_LANE_FAST, &out)
	case countSlowLane:
		st = C.apf_workqueue_lane_len(q, C.APF_WORKQUEUE_LANE_SLOW, &out)
	default:
		st = C.APF_ERR_INVALID_PARAMETER
	}
	return int(out), statusErr(st)
}

func wqShutDownC(p unsafe.Pointer, drain bool) error {
	if drain {
		return statusErr(C.apf_workqueue_shut_down_with_drain((*C.apf_workqueue)(p)))
	}
	return statusErr(C.apf_workqueue_shut_down((*C.apf_workqueue)(p)))
}

func wqShuttingDownC(p unsafe.Pointer) (bool, error) {
	var out C.bool
	err := statusErr(C.apf_workqueue_shutting_down((*C.apf_workqueue)(p), &out))
	return bool(out), err
}

func wqAdvanceClockC(p unsafe.Pointer, nanos uint64) error {
	return statusErr(C.apf_workqueue_advance_clock((*C.apf_workqueue)(p), C.uint64_t(nanos)))
}

func wqMetricsTextC(p unsafe.Pointer) (string, error) {
	return takeText(func(out *C.apf_text) C.apf_status {
		return C.apf_workqueue_metrics_text((*C.apf_workqueue)(p), out)
	})
}
