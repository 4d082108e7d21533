package apf

// The C side of the workqueue binding (wq_shim.c): one Go call, one C call,
// the last error message copied in the same C call (see cgo.go).
//
// Keys go to C as (pointer, length) into Go memory: they hold no Go
// pointers and libapf copies them, so the add, forget and get wrappers are
// noescape/nocallback and a key does not escape to the heap for the call.

/*
#cgo noescape go_apf_wq_add
#cgo nocallback go_apf_wq_add
#cgo noescape go_apf_wq_add_with_opts
#cgo nocallback go_apf_wq_add_with_opts
#cgo noescape go_apf_wq_add_after
#cgo nocallback go_apf_wq_add_after
#cgo noescape go_apf_wq_add_rate_limited
#cgo nocallback go_apf_wq_add_rate_limited
#cgo noescape go_apf_wq_get
#cgo nocallback go_apf_wq_get
#cgo noescape go_apf_wq_done
#cgo nocallback go_apf_wq_done
#cgo noescape go_apf_wq_forget
#cgo nocallback go_apf_wq_forget
#cgo noescape go_apf_wq_num_requeues
#cgo nocallback go_apf_wq_num_requeues
#cgo noescape go_apf_wq_count
#cgo nocallback go_apf_wq_count

#include <stdlib.h>
#include "wq_shim.h"
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
	limiterDefault         = wqLimiterKind(C.GO_APF_WQ_LIMITER_DEFAULT)
	limiterTokenBucket     = wqLimiterKind(C.GO_APF_WQ_LIMITER_TOKEN_BUCKET)
	limiterItemTokenBucket = wqLimiterKind(C.GO_APF_WQ_LIMITER_ITEM_TOKEN_BUCKET)
	limiterExponential     = wqLimiterKind(C.GO_APF_WQ_LIMITER_EXPONENTIAL)
	limiterFastSlow        = wqLimiterKind(C.GO_APF_WQ_LIMITER_FAST_SLOW)
	limiterMaxOf           = wqLimiterKind(C.GO_APF_WQ_LIMITER_MAX_OF)
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
	var e cerr
	// The children array is Go memory holding C pointers only.
	st := C.go_apf_wq_limiter_new(C.uint32_t(l.kind), C.double(l.qps), C.uint32_t(l.burst),
		C.uint64_t(nanos(l.a)), C.uint64_t(nanos(l.b)), C.uint32_t(l.attempts),
		unsafe.SliceData(children), C.size_t(len(children)), &out, &e.e)
	return out, e.err(st)
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
	name, nameN := cstr(opts.Name)
	var q *C.apf_workqueue
	var e cerr
	st := C.go_apf_wq_new(C.uint32_t(kind), C.bool(opts.ManualClock), name, nameN,
		limiter, C.uint64_t(opts.LimiterStateCapacity), C.uint64_t(nanos(opts.LimiterIdleExpiry)),
		C.uint64_t(opts.Capacity), &q, &e.e)
	return q, e.err(st)
}

func wqFreeC(p unsafe.Pointer) { C.apf_workqueue_free((*C.apf_workqueue)(p)) }

// The calls below take the C queue as an unsafe.Pointer that the caller
// holds a use of (wqCore.enter), so it cannot be freed during the call.

func wqAddC(p unsafe.Pointer, key *C.uint8_t, n C.size_t) error {
	var e cerr
	return e.err(C.go_apf_wq_add((*C.apf_workqueue)(p), key, n, &e.e))
}

func wqAddWithOptsC(p unsafe.Pointer, key *C.uint8_t, n C.size_t, o *AddOpts, hasPriority bool) error {
	var e cerr
	st := C.go_apf_wq_add_with_opts((*C.apf_workqueue)(p), key, n,
		C.uint64_t(o.After), C.bool(o.RateLimited), C.uint32_t(o.Lane),
		C.bool(hasPriority), C.int32_t(o.Priority), &e.e)
	return e.err(st)
}

func wqAddAfterC(p unsafe.Pointer, key *C.uint8_t, n C.size_t, delay uint64) error {
	var e cerr
	return e.err(C.go_apf_wq_add_after((*C.apf_workqueue)(p), key, n, C.uint64_t(delay), &e.e))
}

func wqAddRateLimitedC(p unsafe.Pointer, key *C.uint8_t, n C.size_t) error {
	var e cerr
	return e.err(C.go_apf_wq_add_rate_limited((*C.apf_workqueue)(p), key, n, &e.e))
}

// wqGetC takes an item (timeout 0: without waiting) and copies its key out
// of libapf's memory before anything else can release it.
func wqGetC[K Key](p unsafe.Pointer, timeout uint64) (Item[K], uint32, error) {
	var raw C.apf_workqueue_item
	var e cerr
	if err := e.err(C.go_apf_wq_get((*C.apf_workqueue)(p), C.uint64_t(timeout), &raw, &e.e)); err != nil {
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
	var e cerr
	return e.err(C.go_apf_wq_done((*C.apf_workqueue)(p), C.uint64_t(h), &e.e))
}

func wqForgetC(p unsafe.Pointer, key *C.uint8_t, n C.size_t) error {
	var e cerr
	return e.err(C.go_apf_wq_forget((*C.apf_workqueue)(p), key, n, &e.e))
}

func wqNumRequeuesC(p unsafe.Pointer, key *C.uint8_t, n C.size_t) (int, error) {
	var out C.uint32_t
	var e cerr
	err := e.err(C.go_apf_wq_num_requeues((*C.apf_workqueue)(p), key, n, &out, &e.e))
	return int(out), err
}

// The counts of go_apf_wq_count.
type wqCount uint32

const (
	countReady      = wqCount(C.GO_APF_WQ_COUNT_READY)
	countWaiting    = wqCount(C.GO_APF_WQ_COUNT_WAITING)
	countProcessing = wqCount(C.GO_APF_WQ_COUNT_PROCESSING)
	countFastLane   = wqCount(C.GO_APF_WQ_COUNT_FAST_LANE)
	countSlowLane   = wqCount(C.GO_APF_WQ_COUNT_SLOW_LANE)
)

func wqCountC(p unsafe.Pointer, what wqCount) (int, error) {
	var out C.size_t
	var e cerr
	err := e.err(C.go_apf_wq_count((*C.apf_workqueue)(p), C.uint32_t(what), &out, &e.e))
	return int(out), err
}

func wqShutDownC(p unsafe.Pointer, drain bool) error {
	var e cerr
	return e.err(C.go_apf_wq_shut_down((*C.apf_workqueue)(p), C.bool(drain), &e.e))
}

func wqShuttingDownC(p unsafe.Pointer) (bool, error) {
	var out C.bool
	var e cerr
	err := e.err(C.go_apf_wq_shutting_down((*C.apf_workqueue)(p), &out, &e.e))
	return bool(out), err
}

func wqAdvanceClockC(p unsafe.Pointer, nanos uint64) error {
	var e cerr
	return e.err(C.go_apf_wq_advance_clock((*C.apf_workqueue)(p), C.uint64_t(nanos), &e.e))
}

func wqMetricsTextC(p unsafe.Pointer) (string, error) {
	return takeText(func(out *C.apf_text, e *C.go_apf_err) C.uint32_t {
		return C.go_apf_wq_metrics_text((*C.apf_workqueue)(p), out, e)
	})
}
