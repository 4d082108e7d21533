package apf

import (
	"fmt"
	"time"
)

// RequestDigest is what classification looks at: the requesting user and
// the request's attributes, as Kubernetes' RequestInfo and user.Info give
// them.
type RequestDigest struct {
	User   string
	Groups []string
	// IsResourceRequest tells resource requests (matched by resource rules)
	// from non-resource ones (matched by NonResourceURL rules on Path).
	IsResourceRequest bool
	// Verb is the Kubernetes verb: get, list, watch, create, update, patch,
	// delete, deletecollection; for non-resource requests the lower-case
	// HTTP method.
	Verb        string
	APIGroup    string
	Resource    string
	Subresource string
	Namespace   string
	Name        string
	Path        string
}

// WorkEstimate is the seats a request occupies and for how long: it holds
// InitialSeats while it executes, then FinalSeats for AdditionalLatency
// after it finishes. The zero value means one seat, nothing after.
type WorkEstimate struct {
	InitialSeats      uint32
	FinalSeats        uint32
	AdditionalLatency time.Duration
}

// Classification is where a request was classified: the matching flow
// schema and its priority level, with their UIDs (empty when the object has
// none).
type Classification struct {
	FlowSchema       string
	FlowSchemaUID    string
	PriorityLevel    string
	PriorityLevelUID string
}

// Outcome is what became of a request.
type Outcome uint32

const (
	// Executed: the request ran (at once or after waiting in a queue).
	Executed Outcome = iota + 1
	// Rejected: the request did not run; see the Result's RejectReason.
	Rejected
)

func (o Outcome) String() string {
	switch o {
	case Executed:
		return "executed"
	case Rejected:
		return "rejected"
	}
	return fmt.Sprintf("Outcome(%d)", uint32(o))
}

// RejectReason says why a request was rejected; the numbers are libapf's
// (apf_reject_reason), the strings the `reason` label values of Kubernetes'
// apiserver_flowcontrol_rejected_requests_total.
type RejectReason uint32

const (
	// NoReason: the request was not rejected.
	NoReason RejectReason = 0
	// QueueFull: its queue was full and the level had no free seat.
	QueueFull RejectReason = 1
	// TimeOut: it waited past the wait limit or its context's deadline.
	TimeOut RejectReason = 2
	// Cancelled: its context was cancelled while it waited.
	Cancelled RejectReason = 3
	// ConcurrencyLimit: the level does not queue and had no free seat.
	ConcurrencyLimit RejectReason = 4
	// LevelFailed: a panic inside the level's critical section (a bug)
	// failed the level; it rejects every request until the dispatcher's
	// next reconfiguration replaces it. Not one of Kubernetes' reasons.
	LevelFailed RejectReason = 5
)

func (r RejectReason) String() string {
	switch r {
	case NoReason:
		return "none"
	case QueueFull:
		return "queue-full"
	case TimeOut:
		return "time-out"
	case Cancelled:
		return "cancelled"
	case ConcurrencyLimit:
		return "concurrency-limit"
	case LevelFailed:
		return "level-failed"
	}
	return fmt.Sprintf("RejectReason(%d)", uint32(r))
}

// Result reports how Handle dealt with a request.
type Result struct {
	Classification
	Outcome Outcome
	// Queued is true if the request waited in a queue before its outcome.
	Queued bool
	// RejectReason is meaningful when Outcome is Rejected.
	RejectReason RejectReason
}
