package apf

// #include "apf.h"
import "C"

import (
	"errors"
	"net/http"
	"path"
	"runtime"
)

// Kubernetes' paths of the debug dumps; DebugHandler serves them.
const (
	DebugPathPrefix            = "/debug/api_priority_and_fairness/"
	DumpPriorityLevelsPath     = DebugPathPrefix + "dump_priority_levels"
	DumpQueuesPath             = DebugPathPrefix + "dump_queues"
	DumpRequestsPath           = DebugPathPrefix + "dump_requests"
	includeRequestDetailsQuery = "includeRequestDetails"
)

// textKind selects one of libapf's texts.
type textKind int

const (
	textMetrics textKind = iota
	textPriorityLevels
	textQueues
	textRequests
	textRequestsDetailed
	textKinds
)

// MetricsText is Kubernetes' API Priority and Fairness metrics of d in the
// OpenMetrics text format, which Prometheus scrapes; serve it with
// MetricsContentType (MetricsHandler does both).
func (d *Dispatcher) MetricsText() (string, error) {
	return d.text(textMetrics)
}

// DumpPriorityLevels is the table of Kubernetes'
// /debug/api_priority_and_fairness/dump_priority_levels: one line per
// priority level.
func (d *Dispatcher) DumpPriorityLevels() (string, error) {
	return d.text(textPriorityLevels)
}

// DumpQueues is the table of Kubernetes'
// /debug/api_priority_and_fairness/dump_queues: one line per queue of every
// level that queues.
func (d *Dispatcher) DumpQueues() (string, error) {
	return d.text(textQueues)
}

// DumpRequests is the table of Kubernetes'
// /debug/api_priority_and_fairness/dump_requests: one line per waiting
// request; includeDetails adds the user, verb, path and object columns.
func (d *Dispatcher) DumpRequests(includeDetails bool) (string, error) {
	if includeDetails {
		return d.text(textRequestsDetailed)
	}
	return d.text(textRequests)
}

// MetricsContentType is the HTTP Content-Type of MetricsText (OpenMetrics
// text, which Prometheus negotiates).
func MetricsContentType() string {
	var text *C.char
	var n C.size_t
	if C.apf_metrics_content_type(&text, &n) != C.APF_OK {
		// Cannot fail with valid pointers; keep a correct answer anyway.
		return "application/openmetrics-text; version=1.0.0; charset=utf-8"
	}
	return C.GoStringN(text, C.int(n))
}

// text reads one of libapf's texts, handed over whole in one call.
func (d *Dispatcher) text(kind textKind) (string, error) {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return "", ErrClosed
	}
	defer d.c.exit()
	defer runtime.KeepAlive(d)
	return takeText(func(out *C.apf_text) C.apf_status {
		switch kind {
		case textMetrics:
			return C.apf_dispatcher_metrics_text(p, out)
		case textPriorityLevels:
			return C.apf_dispatcher_dump_priority_levels(p, out)
		case textQueues:
			return C.apf_dispatcher_dump_queues(p, out)
		case textRequests:
			return C.apf_dispatcher_dump_requests(p, false, out)
		case textRequestsDetailed:
			return C.apf_dispatcher_dump_requests(p, true, out)
		}
		return C.APF_ERR_INVALID_PARAMETER
	})
}

// MetricsHandler serves d's metrics for Prometheus (mount it at /metrics,
// or beside other collectors' output at a path of its own), beside
// Middleware rather than behind it, as DebugHandler. A closed dispatcher
// answers 503.
func MetricsHandler(d *Dispatcher) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		text, err := d.MetricsText()
		if err != nil {
			textError(w, err)
			return
		}
		w.Header().Set("Content-Type", MetricsContentType())
		_, _ = w.Write([]byte(text))
	})
}

// DebugHandler serves Kubernetes' three debug dumps of d by the last
// element of the request's path (dump_priority_levels, dump_queues,
// dump_requests; 404 for anything else), so it can be mounted at
// DebugPathPrefix, beside Middleware rather than behind it so that it
// answers when the server is saturated:
//
//	root.Handle(apf.DebugPathPrefix, apf.DebugHandler(d))
//	root.Handle("/", apf.Middleware(d, opts)(mux))
//
// As in Kubernetes, dump_requests adds each request's details when the
// query has a non-empty includeRequestDetails (…/dump_requests?includeRequestDetails=1).
// The dumps name users and paths: mount them where only operators reach.
func DebugHandler(d *Dispatcher) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var text string
		var err error
		switch path.Base(r.URL.Path) {
		case "dump_priority_levels":
			text, err = d.DumpPriorityLevels()
		case "dump_queues":
			text, err = d.DumpQueues()
		case "dump_requests":
			text, err = d.DumpRequests(r.URL.Query().Get(includeRequestDetailsQuery) != "")
		default:
			http.NotFound(w, r)
			return
		}
		if err != nil {
			textError(w, err)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte(text))
	})
}

func textError(w http.ResponseWriter, err error) {
	status := http.StatusInternalServerError
	if errors.Is(err, ErrClosed) {
		status = http.StatusServiceUnavailable
	}
	http.Error(w, err.Error(), status)
}
