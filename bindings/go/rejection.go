package apf

// #include "apf.h"
import "C"

import (
	"runtime"
	"unsafe"
)

// Rejection is libapf's answer to a request that was not served, the same
// in every libapf middleware (Rust tower, Go, Python, C++): status 429,
// the Retry-After header, and a Kubernetes Status object as the JSON body.
type Rejection struct {
	// RetryAfter is the Retry-After header's value in whole seconds,
	// adapted per priority level to its recent rejections as Kubernetes
	// does.
	RetryAfter uint64
	// Body is a Kubernetes Status object (Content-Type application/json)
	// naming the priority level and flow schema.
	Body string
}

// RejectionContentType is the Content-Type of Rejection.Body.
const RejectionContentType = "application/json"

// Reject counts a request classified as c that was not served (rejected
// at once, timed out or cancelled while queued) and gives its answer. Call
// it once per such request: the count drives Retry-After. Middleware does.
func (d *Dispatcher) Reject(c Classification, reason RejectReason) (Rejection, error) {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return Rejection{}, ErrClosed
	}
	defer d.c.exit()
	defer runtime.KeepAlive(d)
	level, levelN := cstr(c.PriorityLevel)
	schema, schemaN := cstr(c.FlowSchema)
	var retry C.uint64_t
	body, err := takeText(func(out *C.apf_text) C.apf_status {
		return C.apf_dispatcher_reject(p, level, levelN, schema, schemaN, C.uint32_t(reason), &retry, out)
	})
	runtime.KeepAlive(c)
	if err != nil {
		return Rejection{}, err
	}
	return Rejection{RetryAfter: uint64(retry), Body: body}, nil
}

// ParsePath reads the request attributes Kubernetes' API server derives
// from a method, a URL path and its raw query (r.URL.RawQuery), by its
// rules: /api/v1/... is the core group, /apis/GROUP/VERSION/... a named
// group, then optionally a verb prefix (watch/, proxy/), then optionally
// namespaces/NAMESPACE, then RESOURCE[/NAME[/SUBRESOURCE]]; an empty
// segment inside the path is a segment (/api/v1/namespaces//pods lists pods
// in every namespace). Any other path is a non-resource request whose verb
// is the lower-case method. For a GET of a collection the query decides, as
// in Kubernetes: a first `watch` value other than "0" or "false" (any
// case), an empty one included, makes it a watch, and a fieldSelector
// requiring metadata.name=NAME gives it that name. User and groups are left
// empty: fill them in from your authentication. It is libapf's own parser
// (apf_request_info_parse_query), the same in every binding. A method, path
// or query that is not UTF-8 is taken as a non-resource request.
func ParsePath(method, path, rawQuery string) RequestDigest {
	m, mN := cstr(method)
	p, pN := cstr(path)
	q, qN := cstr(rawQuery)
	var info C.apf_request_info
	var name C.apf_text
	st := C.apf_request_info_parse_query(m, mN, p, pN, q, qN, &info, &name)
	runtime.KeepAlive(method)
	runtime.KeepAlive(rawQuery)
	if st != C.APF_OK {
		return RequestDigest{Path: path, Verb: lowerASCII(method)}
	}
	verb := C.GoStringN(info.verb.ptr, C.int(info.verb.len))
	C.apf_text_free(&info.verb)
	// Every other field points into path (take the same bytes as a Go
	// substring, without copying), except a name from the field selector,
	// which is name's text.
	base := uintptr(unsafe.Pointer(unsafe.StringData(path)))
	part := func(s C.apf_str) string {
		if s.len == 0 {
			return ""
		}
		off := uintptr(unsafe.Pointer(s.ptr)) - base
		return path[off : off+uintptr(s.len)]
	}
	objectName := part
	if name.ptr != nil {
		objectName = func(s C.apf_str) string { return C.GoStringN(s.ptr, C.int(s.len)) }
	}
	d := RequestDigest{
		Verb:              verb,
		IsResourceRequest: bool(info.is_resource_request),
		APIGroup:          part(info.api_group),
		Resource:          part(info.resource),
		Subresource:       part(info.subresource),
		Namespace:         part(info.namespace_),
		Name:              objectName(info.name),
		Path:              path,
	}
	C.apf_text_free(&name)
	runtime.KeepAlive(path)
	return d
}

func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
