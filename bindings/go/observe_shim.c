// C helpers of the Go binding's metrics and dumps; see observe_shim.h.
#include <stdlib.h>
#include "observe_shim.h"

// As go_apf_fail in shim.c (static there): copy the thread's last error
// message before returning, since the goroutine may move to another
// thread before Go could ask for it.
static uint32_t observe_fail(uint32_t st, go_apf_err *e) {
	if (st == APF_OK || st == APF_ERR_INSUFFICIENT_SIZE) {
		// Success, or the retry loop's ordinary signal: no message needed.
		return st;
	}
	size_t need = 0;
	apf_last_error(NULL, 0, &need);
	char *buf = malloc(need + 1);
	size_t got = 0;
	if (buf != NULL && apf_last_error(buf, need + 1, &got) == APF_OK) {
		e->msg = buf;
		e->len = got;
	} else {
		free(buf);
	}
	return st;
}

uint32_t go_apf_observe(apf_dispatcher *d, int which, char *buf, size_t len, size_t *out_len, go_apf_err *e) {
	apf_status st;
	switch (which) {
	case GO_APF_METRICS:
		st = apf_dispatcher_metrics_text(d, buf, len, out_len);
		break;
	case GO_APF_DUMP_PRIORITY_LEVELS:
		st = apf_dispatcher_dump_priority_levels(d, buf, len, out_len);
		break;
	case GO_APF_DUMP_QUEUES:
		st = apf_dispatcher_dump_queues(d, buf, len, out_len);
		break;
	case GO_APF_DUMP_REQUESTS:
		st = apf_dispatcher_dump_requests(d, false, buf, len, out_len);
		break;
	case GO_APF_DUMP_REQUESTS_DETAILED:
		st = apf_dispatcher_dump_requests(d, true, buf, len, out_len);
		break;
	default:
		return APF_ERR_INVALID_PARAMETER;
	}
	return observe_fail(st, e);
}
