package apf

// #include <stdlib.h>
// #include "apf.h"
import "C"

import (
	"net/http"
	"runtime"
	"unsafe"
)

// MetricsLabel is a constant label of every series.
type MetricsLabel struct {
	Name, Value string
}

// MetricsOptions name and label the metrics of a service that is not an
// API server, or that runs several dispatchers in one process.
type MetricsOptions struct {
	// Prefix goes, with "_", before every metric name ("shop" gives
	// shop_apiserver_flowcontrol_...); empty for none. Letters, digits and
	// "_", not starting with a digit.
	Prefix string
	// ConstLabels are added to every series, in this order (at most 64;
	// names as Prometheus allows them, and none the metrics use
	// themselves).
	ConstLabels []MetricsLabel
}

// MetricsTextWith is MetricsText with a name prefix and constant labels.
// Invalid options are an *Error (StatusInvalidParameter or
// StatusInvalidUTF8) whose message names the option at fault.
func (d *Dispatcher) MetricsTextWith(o MetricsOptions) (string, error) {
	maybeGC()
	p, ok := d.c.enter()
	if !ok {
		return "", ErrClosed
	}
	defer d.c.exit()
	defer runtime.KeepAlive(d)

	// Everything C reads is copied into C memory: a C struct in Go memory
	// may not point to Go strings.
	var allocs []unsafe.Pointer
	defer func() {
		for _, a := range allocs {
			C.free(a)
		}
	}()
	str := func(s string) C.apf_str {
		if s == "" {
			return C.apf_str{}
		}
		b := C.CBytes([]byte(s))
		allocs = append(allocs, b)
		return C.apf_str{ptr: (*C.char)(b), len: C.size_t(len(s))}
	}
	opts := (*C.apf_metrics_options)(C.malloc(C.size_t(unsafe.Sizeof(C.apf_metrics_options{}))))
	allocs = append(allocs, unsafe.Pointer(opts))
	if err := statusErr(C.apf_metrics_options_default(opts)); err != nil {
		return "", err
	}
	opts.prefix = str(o.Prefix)
	if n := len(o.ConstLabels); n > 0 {
		size := C.size_t(unsafe.Sizeof(C.apf_metrics_label{})) * C.size_t(n)
		array := C.malloc(size)
		allocs = append(allocs, array)
		labels := unsafe.Slice((*C.apf_metrics_label)(array), n)
		for i, l := range o.ConstLabels {
			labels[i] = C.apf_metrics_label{name: str(l.Name), value: str(l.Value)}
		}
		opts.const_labels = (*C.apf_metrics_label)(array)
		opts.const_labels_len = C.size_t(n)
	}
	var t C.apf_text
	var e *C.apf_error
	if err := ownedErr(C.apf_dispatcher_metrics_text_with(p, opts, &t, &e), e); err != nil {
		return "", err
	}
	text := C.GoStringN(t.ptr, C.int(t.len))
	C.apf_text_free(&t)
	return text, nil
}

// MetricsHandlerWith is MetricsHandler with a name prefix and constant
// labels; invalid options answer 500 with the library's message.
func MetricsHandlerWith(d *Dispatcher, o MetricsOptions) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		text, err := d.MetricsTextWith(o)
		if err != nil {
			textError(w, err)
			return
		}
		w.Header().Set("Content-Type", MetricsContentType())
		_, _ = w.Write([]byte(text))
	})
}
