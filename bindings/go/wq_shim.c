// C helpers of the Go workqueue binding; see wq_shim.h and wq_cgo.go.
#include <stdlib.h>
#include "wq_shim.h"

uint32_t go_apf_wq_limiter_new(uint32_t kind, double qps, uint32_t burst,
		uint64_t a_nanos, uint64_t b_nanos, uint32_t attempts,
		apf_rate_limiter *const *children, size_t n_children,
		apf_rate_limiter **out, go_apf_err *e) {
	uint32_t st;
	switch (kind) {
	case GO_APF_WQ_LIMITER_DEFAULT:
		st = apf_rate_limiter_new_default(out);
		break;
	case GO_APF_WQ_LIMITER_TOKEN_BUCKET:
		st = apf_rate_limiter_new_token_bucket(qps, burst, out);
		break;
	case GO_APF_WQ_LIMITER_ITEM_TOKEN_BUCKET:
		st = apf_rate_limiter_new_item_token_bucket(qps, burst, out);
		break;
	case GO_APF_WQ_LIMITER_EXPONENTIAL:
		st = apf_rate_limiter_new_exponential(a_nanos, b_nanos, out);
		break;
	case GO_APF_WQ_LIMITER_FAST_SLOW:
		st = apf_rate_limiter_new_fast_slow(a_nanos, b_nanos, attempts, out);
		break;
	case GO_APF_WQ_LIMITER_MAX_OF:
		st = apf_rate_limiter_new_max_of((const apf_rate_limiter *const *)children, n_children, out);
		break;
	default:
		st = APF_ERR_INVALID_PARAMETER;
		break;
	}
	return go_apf_capture_error(st, e);
}

uint32_t go_apf_wq_new(uint32_t kind, bool manual_clock, const char *name, size_t name_len,
		const apf_rate_limiter *limiter, uint64_t state_capacity, uint64_t idle_expiry_nanos,
		uint64_t capacity, apf_workqueue **out, go_apf_err *e) {
	apf_workqueue_options opts;
	uint32_t st = apf_workqueue_options_default(&opts);
	if (st != APF_OK) {
		return go_apf_capture_error(st, e);
	}
	opts.kind = kind;
	opts.manual_clock = manual_clock;
	opts.name = name;
	opts.name_len = name_len;
	opts.limiter = limiter;
	opts.limiter_state_capacity = state_capacity;
	opts.limiter_idle_expiry_nanos = idle_expiry_nanos;
	opts.capacity = capacity;
	return go_apf_capture_error(apf_workqueue_new(&opts, out), e);
}

uint32_t go_apf_wq_add(apf_workqueue *q, const uint8_t *key, size_t len, go_apf_err *e) {
	return go_apf_capture_error(apf_workqueue_add(q, key, len), e);
}

uint32_t go_apf_wq_add_with_opts(apf_workqueue *q, const uint8_t *key, size_t len,
		uint64_t after_nanos, bool rate_limited, uint32_t lane,
		bool has_priority, int32_t priority, go_apf_err *e) {
	apf_workqueue_add_options opts;
	uint32_t st = apf_workqueue_add_options_default(&opts);
	if (st != APF_OK) {
		return go_apf_capture_error(st, e);
	}
	opts.after_nanos = after_nanos;
	opts.rate_limited = rate_limited;
	opts.lane = lane;
	opts.has_priority = has_priority;
	opts.priority = priority;
	return go_apf_capture_error(apf_workqueue_add_with_options(q, key, len, &opts), e);
}

uint32_t go_apf_wq_add_after(apf_workqueue *q, const uint8_t *key, size_t len, uint64_t delay_nanos,
		go_apf_err *e) {
	return go_apf_capture_error(apf_workqueue_add_after(q, key, len, delay_nanos), e);
}

uint32_t go_apf_wq_add_rate_limited(apf_workqueue *q, const uint8_t *key, size_t len, go_apf_err *e) {
	return go_apf_capture_error(apf_workqueue_add_rate_limited(q, key, len), e);
}

uint32_t go_apf_wq_get(apf_workqueue *q, uint64_t timeout_nanos, apf_workqueue_item *out, go_apf_err *e) {
	uint32_t st = timeout_nanos == 0 ? apf_workqueue_try_get(q, out) : apf_workqueue_get(q, timeout_nanos, out);
	return go_apf_capture_error(st, e);
}

uint32_t go_apf_wq_done(apf_workqueue *q, uint64_t item, go_apf_err *e) {
	return go_apf_capture_error(apf_workqueue_done(q, item), e);
}

uint32_t go_apf_wq_forget(apf_workqueue *q, const uint8_t *key, size_t len, go_apf_err *e) {
	return go_apf_capture_error(apf_workqueue_forget(q, key, len), e);
}

uint32_t go_apf_wq_num_requeues(apf_workqueue *q, const uint8_t *key, size_t len, uint32_t *out,
		go_apf_err *e) {
	return go_apf_capture_error(apf_workqueue_num_requeues(q, key, len, out), e);
}

uint32_t go_apf_wq_count(apf_workqueue *q, uint32_t what, size_t *out, go_apf_err *e) {
	uint32_t st;
	switch (what) {
	case GO_APF_WQ_COUNT_READY:
		st = apf_workqueue_len(q, out);
		break;
	case GO_APF_WQ_COUNT_WAITING:
		st = apf_workqueue_waiting_len(q, out);
		break;
	case GO_APF_WQ_COUNT_PROCESSING:
		st = apf_workqueue_processing(q, out);
		break;
	case GO_APF_WQ_COUNT_FAST_LANE:
		st = apf_workqueue_lane_len(q, APF_WORKQUEUE_LANE_FAST, out);
		break;
	case GO_APF_WQ_COUNT_SLOW_LANE:
		st = apf_workqueue_lane_len(q, APF_WORKQUEUE_LANE_SLOW, out);
		break;
	default:
		st = APF_ERR_INVALID_PARAMETER;
		break;
	}
	return go_apf_capture_error(st, e);
}

uint32_t go_apf_wq_shut_down(apf_workqueue *q, bool drain, go_apf_err *e) {
	return go_apf_capture_error(drain ? apf_workqueue_shut_down_with_drain(q) : apf_workqueue_shut_down(q), e);
}

uint32_t go_apf_wq_shutting_down(apf_workqueue *q, bool *out, go_apf_err *e) {
	return go_apf_capture_error(apf_workqueue_shutting_down(q, out), e);
}

uint32_t go_apf_wq_advance_clock(apf_workqueue *q, uint64_t nanos, go_apf_err *e) {
	return go_apf_capture_error(apf_workqueue_advance_clock(q, nanos), e);
}

uint32_t go_apf_wq_metrics_text(apf_workqueue *q, apf_text *out, go_apf_err *e) {
	return go_apf_capture_error(apf_workqueue_metrics_text(q, out), e);
}
