//go:build debug

package apf

import "runtime"

// maybeGC collects garbage inside every call when built with `-tags debug`,
// so a Go value that the C side still needs but Go no longer references is
// freed (and its misuse shows up) at once instead of by luck much later.
func maybeGC() { runtime.GC() }
