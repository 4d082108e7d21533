package apf

// #include "apf.h"
import "C"

import (
	"errors"
	"fmt"
)

// Status is a libapf status code (apf_status). Errors returned by this
// package wrap one, so `errors.Is(err, apf.StatusConfig)` tells a refused
// configuration from other failures.
type Status uint32

// The status codes of the C ABI (codes are never reused).
const (
	StatusInvalidParameter Status = C.APF_ERR_INVALID_PARAMETER
	StatusNullPointer      Status = C.APF_ERR_NULL_POINTER
	StatusInvalidUTF8      Status = C.APF_ERR_INVALID_UTF8
	StatusPanic            Status = C.APF_ERR_PANIC
	StatusInvalidHandle    Status = C.APF_ERR_INVALID_HANDLE
	StatusRequestQueued    Status = C.APF_ERR_REQUEST_QUEUED
	StatusRequestRejected  Status = C.APF_ERR_REQUEST_REJECTED
	StatusRequestExecuting Status = C.APF_ERR_REQUEST_EXECUTING
	StatusConfig           Status = C.APF_ERR_CONFIG
	StatusNotManualClock   Status = C.APF_ERR_NOT_MANUAL_CLOCK
	// StatusInsufficientSize is retired: no call returns it since texts
	// come out whole (kept so the number is never reused).
	StatusInsufficientSize Status = C.APF_ERR_INSUFFICIENT_SIZE
	StatusIO               Status = C.APF_ERR_IO
	StatusTooManyRequests  Status = C.APF_ERR_TOO_MANY_REQUESTS
	StatusInCallback       Status = C.APF_ERR_IN_CALLBACK
)

// Error is the library's description of the status.
func (s Status) Error() string {
	var text *C.char
	var n C.size_t
	if C.apf_status_text(C.uint32_t(s), &text, &n) != C.APF_OK {
		return fmt.Sprintf("apf status %d", uint32(s))
	}
	return C.GoStringN(text, C.int(n))
}

// Error is a failed libapf call: its status and the library's message.
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "apf: " + e.Status.Error()
	}
	return "apf: " + e.Message
}

// Unwrap gives the Status, for errors.Is.
func (e *Error) Unwrap() error { return e.Status }

// ErrClosed is returned by calls on a closed Dispatcher.
var ErrClosed = errors.New("apf: dispatcher is closed")

// ErrVersion is returned when the libapf found at run time is not the one
// the binding was compiled against.
var ErrVersion = errors.New("apf: libapf version does not match apf.h")
