package apf

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The response headers Kubernetes' API server sets on every request that
// priority and fairness classified.
const (
	FlowSchemaUIDHeader    = "X-Kubernetes-PF-FlowSchema-UID"
	PriorityLevelUIDHeader = "X-Kubernetes-PF-PriorityLevel-UID"
)

// MiddlewareOptions adapts Middleware to a server. The zero value works:
// anonymous users, Kubernetes-style paths, one seat per request, and
// Retry-After of one second.
type MiddlewareOptions struct {
	// Digest describes a request for classification; nil means
	// AnonymousDigest.
	Digest func(*http.Request) RequestDigest
	// WorkEstimate sizes a request; nil means one seat.
	WorkEstimate func(*http.Request) WorkEstimate
	// LongRunning requests (watches, proxies) bypass priority and fairness,
	// as in Kubernetes; nil means none does.
	LongRunning func(*http.Request) bool
	// RetryAfter is the delay advised to a rejected client; nil means one
	// second. The header carries whole seconds, at least one.
	RetryAfter func(*http.Request, Result) time.Duration
	// OnError sees errors of the library itself (not rejections); nil
	// ignores them. A request whose admission failed gets a 500.
	OnError func(*http.Request, error)
}

// Middleware returns a net/http filter that admits every request through
// d: it sets the flow schema and priority level UID headers, runs the next
// handler when the request is dispatched (after waiting in its queue if
// need be, for as long as the request's context allows), and answers 429
// Too Many Requests with Retry-After when it is rejected. A panic in the
// next handler finishes the request in libapf and then propagates.
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
				retry := time.Second
				if opts.RetryAfter != nil {
					retry = opts.RetryAfter(r, res)
				}
				tooManyRequests(w, retry)
			}
		})
	}
}

func tooManyRequests(w http.ResponseWriter, retry time.Duration) {
	secs := int64((retry + time.Second - 1) / time.Second)
	if secs < 1 {
		secs = 1
	}
	w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
	http.Error(w, "Too many requests, please try again later.", http.StatusTooManyRequests)
}

// AnonymousDigest describes r as Kubernetes would for an unauthenticated
// user (system:anonymous in group system:unauthenticated), with the
// resource attributes read from a Kubernetes-style path by ParsePath.
func AnonymousDigest(r *http.Request) RequestDigest {
	d := ParsePath(r.Method, r.URL.Path, r.URL.Query().Get("watch"))
	d.User = "system:anonymous"
	d.Groups = anonymousGroups
	return d
}

var anonymousGroups = []string{"system:unauthenticated"}

// ParsePath reads the request attributes Kubernetes' API server derives
// from a method and a URL path: /api/v1/... is the core group,
// /apis/GROUP/VERSION/... a named group, then optionally
// namespaces/NAMESPACE, then RESOURCE[/NAME[/SUBRESOURCE]]. Any other path
// is a non-resource request whose verb is the lower-case method. watch is
// the value of the `watch` query parameter ("true" or "1" turns get/list
// into watch).
func ParsePath(method, path, watch string) RequestDigest {
	d := RequestDigest{Path: path, Verb: strings.ToLower(method)}
	parts := splitPath(path)
	var rest []string
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		rest = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		d.APIGroup = parts[1]
		rest = parts[3:]
	default:
		return d
	}
	if len(rest) == 0 {
		// Discovery of a group version is not a resource request.
		d.APIGroup = ""
		return d
	}
	d.IsResourceRequest = true
	if len(rest) >= 2 && rest[0] == "namespaces" {
		d.Namespace = rest[1]
		// namespaces/NAME alone (or with a subresource of the namespace
		// object) names the namespace itself.
		if len(rest) > 2 && !namespaceSubresources[rest[2]] {
			rest = rest[2:]
		}
	}
	d.Resource = rest[0]
	if len(rest) >= 2 {
		d.Name = rest[1]
	}
	if len(rest) >= 3 {
		d.Subresource = rest[2]
	}
	d.Verb = resourceVerb(method, d.Name != "", watch == "true" || watch == "1")
	return d
}

var namespaceSubresources = map[string]bool{"status": true, "finalize": true}

func splitPath(path string) []string {
	path = strings.Trim(path, "/")
	if path == "" {
		return nil
	}
	return strings.Split(path, "/")
}

func resourceVerb(method string, named, watch bool) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		switch {
		case watch:
			return "watch"
		case named:
			return "get"
		default:
			return "list"
		}
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		if named {
			return "delete"
		}
		return "deletecollection"
	}
	return strings.ToLower(method)
}
