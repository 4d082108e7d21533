// C helpers of the Go binding's metrics and dumps; see observe_shim.h.
#include "observe_shim.h"

uint32_t go_apf_observe(apf_dispatcher *d, int which, apf_text *out, go_apf_err *e) {
	apf_status st;
	switch (which) {
	case GO_APF_METRICS:
		st = apf_dispatcher_metrics_text(d, out);
		break;
	case GO_APF_DUMP_PRIORITY_LEVELS:
		st = apf_dispatcher_dump_priority_levels(d, out);
		break;
	case GO_APF_DUMP_QUEUES:
		st = apf_dispatcher_dump_queues(d, out);
		break;
	case GO_APF_DUMP_REQUESTS:
		st = apf_dispatcher_dump_requests(d, false, out);
		break;
	case GO_APF_DUMP_REQUESTS_DETAILED:
		st = apf_dispatcher_dump_requests(d, true, out);
		break;
	default:
		return APF_ERR_INVALID_PARAMETER;
	}
	return go_apf_capture_error(st, e);
}

uint32_t go_apf_metrics_with(apf_dispatcher *d, const apf_metrics_options *o, apf_text *out,
		go_apf_err *e) {
	return go_apf_capture_error(apf_dispatcher_metrics_text_with(d, o, out), e);
}
