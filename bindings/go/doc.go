// Package apf embeds libapf, an implementation of Kubernetes' API Priority
// and Fairness (KEP-1040), in a Go server through its C ABI.
//
// A [Dispatcher] classifies each request by flow schema, admits it at its
// priority level (execute at once, queue, or reject) and shares the
// server's concurrency among levels. [Dispatcher.Handle] has the shape of
// Kubernetes' flowcontrol Interface.Handle, and [Middleware] is the
// net/http filter that answers libapf's 429 (Dispatcher.Reject: an
// adaptive Retry-After and a Kubernetes Status body, as every libapf
// middleware answers).
//
// # Waiting without a thread per request
//
// A queued request does not block in C. The dispatcher's completion file
// descriptor is read by one goroutine through Go's network poller; it takes
// the decided requests from libapf and wakes each waiter's channel. Waiting
// goroutines therefore park like any goroutine blocked on a channel, and a
// context cancellation cancels the request in libapf.
//
// # Lifetimes
//
// A Dispatcher owns C memory. Close frees it (Close is idempotent, and a
// finalizer calls it for a Dispatcher that was dropped without Close), and
// every later call returns ErrClosed. Close must not run while other calls
// on the same Dispatcher are in progress. Build with `-tags debug` to force
// a garbage collection inside every call, which makes lifetime mistakes in
// this package fail fast.
package apf
