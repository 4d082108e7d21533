//go:build debug

package apf

import (
	"runtime"
	"sync/atomic"
)

// cCalls counts the wrappers that called into C (each makes exactly one C
// call), so a debug-build test can check how many C calls an operation
// costs.
var cCalls atomic.Int64

// maybeGC collects garbage inside every call when built with `-tags debug`,
// so a Go value that the C side still needs but Go no longer references is
// freed (and its misuse shows up) at once instead of by luck much later.
// It also counts the call (cCalls).
func maybeGC() {
	cCalls.Add(1)
	runtime.GC()
}
