package apf

import (
	"net/http"
	"strconv"
)

// The response headers Kubernetes' API server sets on every request that
// priority and fairness classified.
const (
	FlowSchemaUIDHeader    = "X-Kubernetes-PF-FlowSchema-UID"
	PriorityLevelUIDHeader = "X-Kubernetes-PF-PriorityLevel-UID"
)

// MiddlewareOptions adapts Middleware to a server. The zero value works:
// anonymous users, Kubernetes-style paths, one seat per request.
type MiddlewareOptions struct {
	// Digest describes a request for classification; nil means
	// AnonymousDigest.
	Digest func(*http.Request) RequestDigest
	// WorkEstimate sizes a request; nil means one seat.
	WorkEstimate func(*http.Request) WorkEstimate
	// LongRunning requests (watches, proxies) bypass priority and fairness,
	// as in Kubernetes; nil means none does.
	LongRunning func(*http.Request) bool
	// OnError sees errors of the library itself (not rejections); nil
	// ignores them. A request whose admission failed gets a 500.
	OnError func(*http.Request, error)
}

// Middleware returns a net/http filter that admits every request through
// d: it sets the flow schema and priority level UID headers, runs the next
// handler when the request is dispatched (after waiting in its queue if
// need be, for as long as the request's context allows), and answers a
// request that is not served (rejected, timed out or cancelled in its
// queue) with libapf's 429 (Dispatcher.Reject): Retry-After adapted to the
// level's recent rejections, and a Kubernetes Status JSON body. Every
// libapf middleware answers alike. A panic in the next handler finishes
// the request in libapf and then propagates.
func Middleware(d *Dispatcher, opts MiddlewareOptions) func(http.Handler) http.Handler {
	digestOf := opts.Digest
	if digestOf == nil {
		digestOf = AnonymousDigest
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if opts.LongRunning != nil && opts.LongRunning(r) {
				next.ServeHTTP(w, r)
				return
			}
			var estimator func() WorkEstimate
			if opts.WorkEstimate != nil {
				estimator = func() WorkEstimate { return opts.WorkEstimate(r) }
			}
			note := func(c Classification) {
				h := w.Header()
				h.Set(PriorityLevelUIDHeader, c.PriorityLevelUID)
				h.Set(FlowSchemaUIDHeader, c.FlowSchemaUID)
			}
			executed := false
			res, err := d.Handle(r.Context(), digestOf(r), note, estimator, nil, func() {
				executed = true
				next.ServeHTTP(w, r)
			})
			if err != nil {
				if opts.OnError != nil {
					opts.OnError(r, err)
				}
				if !executed {
					http.Error(w, "request admission failed", http.StatusInternalServerError)
				}
				return
			}
			if res.Outcome == Rejected {
				rej, err := d.Reject(res.Classification, res.RejectReason)
				if err != nil {
					if opts.OnError != nil {
						opts.OnError(r, err)
					}
					http.Error(w, "request admission failed", http.StatusInternalServerError)
					return
				}
				tooManyRequests(w, rej)
			}
		})
	}
}

func tooManyRequests(w http.ResponseWriter, rej Rejection) {
	h := w.Header()
	h.Set("Retry-After", strconv.FormatUint(rej.RetryAfter, 10))
	h.Set("Content-Type", RejectionContentType)
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte(rej.Body))
}

// AnonymousDigest describes r as Kubernetes would for an unauthenticated
// user (system:anonymous in group system:unauthenticated), with the
// resource attributes read from a Kubernetes-style path by ParsePath.
func AnonymousDigest(r *http.Request) RequestDigest {
	d := ParsePath(r.Method, r.URL.Path, r.URL.RawQuery)
	d.User = "system:anonymous"
	d.Groups = anonymousGroups
	return d
}

var anonymousGroups = []string{"system:unauthenticated"}
