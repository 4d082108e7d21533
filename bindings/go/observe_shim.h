// C helpers of the Go binding's metrics and dumps (see observe.go): one Go
// call, one C call, with the last error captured on the calling thread.
#ifndef GO_APF_OBSERVE_SHIM_H
#define GO_APF_OBSERVE_SHIM_H

#include "shim.h"

// Which text go_apf_observe copies.
enum {
	GO_APF_METRICS = 0,
	GO_APF_DUMP_PRIORITY_LEVELS = 1,
	GO_APF_DUMP_QUEUES = 2,
	GO_APF_DUMP_REQUESTS = 3,
	GO_APF_DUMP_REQUESTS_DETAILED = 4,
};

uint32_t go_apf_observe(apf_dispatcher *d, int which, apf_text *out, go_apf_err *e);

// apf_dispatcher_metrics_text_with; `o` and everything it points to are C
// memory (Go memory may not hold the Go pointers the labels would be).
uint32_t go_apf_metrics_with(apf_dispatcher *d, const apf_metrics_options *o, apf_text *out,
		go_apf_err *e);

#endif
