// C helpers of the Go queueset binding; see qs_shim.h and queueset.go.
#include "qs_shim.h"

uint32_t go_apf_qs_new(const char *name, size_t name_len, const apf_queueset_config *cfg, bool manual,
		apf_queueset **out, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_new(name, name_len, cfg, manual, out), e);
}

uint32_t go_apf_qs_config_default(apf_queueset_config *out, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_config_default(out), e);
}

uint32_t go_apf_qs_reconfigure(apf_queueset *q, const apf_queueset_config *cfg, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_reconfigure(q, cfg), e);
}

uint32_t go_apf_qs_start(apf_queueset *q, uint64_t hash, uint32_t initial_seats, uint32_t final_seats,
		uint64_t latency_nanos, uint64_t deadline_nanos, uint32_t tag, apf_queueset_decision *out,
		go_apf_err *e) {
	apf_work_estimate est = {initial_seats, final_seats, latency_nanos};
	return go_apf_capture_error(apf_queueset_start(q, hash, &est, deadline_nanos, tag, out), e);
}

uint32_t go_apf_qs_finish(apf_queueset *q, uint64_t request, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_finish(q, request, 0), e);
}

uint32_t go_apf_qs_release(apf_queueset *q, uint64_t request, uint32_t seats, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_release_seats(q, request, seats), e);
}

uint32_t go_apf_qs_poll(apf_queueset *q, uint64_t request, uint32_t *outcome, uint32_t *reason, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_request_poll(q, request, outcome, reason), e);
}

uint32_t go_apf_qs_cancel(apf_queueset *q, uint64_t request, bool *cancelled, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_request_cancel(q, request, cancelled), e);
}

// Take up to cap decided requests from the completion queue.
uint32_t go_apf_qs_take(apf_queueset *q, uint64_t *out, size_t cap, size_t *n, go_apf_err *e) {
	size_t i = 0;
	while (i < cap) {
		bool some = false;
		uint32_t st = apf_queueset_take_completion(q, &out[i], &some);
		if (st != APF_OK) {
			return go_apf_capture_error(st, e);
		}
		if (!some) {
			break;
		}
		i++;
	}
	*n = i;
	return APF_OK;
}

uint32_t go_apf_qs_completion_fd(apf_queueset *q, int *out, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_completion_fd(q, out), e);
}

uint32_t go_apf_qs_advance(apf_queueset *q, uint64_t nanos, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_advance_clock(q, nanos), e);
}

uint32_t go_apf_qs_now(apf_queueset *q, uint64_t *out, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_now(q, out), e);
}

uint32_t go_apf_qs_is_idle(apf_queueset *q, bool *out, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_is_idle(q, out), e);
}

uint32_t go_apf_qs_stats(apf_queueset *q, apf_queueset_stats *out, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_read_stats(q, out), e);
}

uint32_t go_apf_qs_dump(apf_queueset *q, apf_text *out, go_apf_err *e) {
	return go_apf_capture_error(apf_queueset_dump_json(q, out), e);
}
