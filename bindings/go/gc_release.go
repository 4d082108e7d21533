//go:build !debug

package apf

// maybeGC does nothing outside `-tags debug` builds (see gc_debug.go).
func maybeGC() {}
