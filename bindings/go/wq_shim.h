// C helpers of the Go workqueue binding (see wq_cgo.go): one Go call, one
// C call, with the thread's last error copied in the same call.
#ifndef GO_APF_WQ_SHIM_H
#define GO_APF_WQ_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "shim.h"

// A limiter description node as Go lays it out: kind, parameters, and for
// max-of the C limiters already built for its children.
enum go_apf_wq_limiter_kind {
	GO_APF_WQ_LIMITER_DEFAULT = 0,
	GO_APF_WQ_LIMITER_TOKEN_BUCKET = 1,
	GO_APF_WQ_LIMITER_ITEM_TOKEN_BUCKET = 2,
	GO_APF_WQ_LIMITER_EXPONENTIAL = 3,
	GO_APF_WQ_LIMITER_FAST_SLOW = 4,
	GO_APF_WQ_LIMITER_MAX_OF = 5,
};

uint32_t go_apf_wq_limiter_new(uint32_t kind, double qps, uint32_t burst,
		uint64_t a_nanos, uint64_t b_nanos, uint32_t attempts,
		apf_rate_limiter *const *children, size_t n_children,
		apf_rate_limiter **out, go_apf_err *e);

uint32_t go_apf_wq_new(uint32_t kind, bool manual_clock, const char *name, size_t name_len,
		const apf_rate_limiter *limiter, uint64_t state_capacity, uint64_t idle_expiry_nanos,
		uint64_t capacity, apf_workqueue **out, go_apf_err *e);

uint32_t go_apf_wq_add(apf_workqueue *q, const uint8_t *key, size_t len, go_apf_err *e);

uint32_t go_apf_wq_add_with_opts(apf_workqueue *q, const uint8_t *key, size_t len,
		uint64_t after_nanos, bool rate_limited, uint32_t lane,
		bool has_priority, int32_t priority, go_apf_err *e);

uint32_t go_apf_wq_add_after(apf_workqueue *q, const uint8_t *key, size_t len, uint64_t delay_nanos,
		go_apf_err *e);

uint32_t go_apf_wq_add_rate_limited(apf_workqueue *q, const uint8_t *key, size_t len, go_apf_err *e);

// timeout_nanos 0 is apf_workqueue_try_get, UINT64_MAX waits for ever.
uint32_t go_apf_wq_get(apf_workqueue *q, uint64_t timeout_nanos, apf_workqueue_item *out, go_apf_err *e);

uint32_t go_apf_wq_done(apf_workqueue *q, uint64_t item, go_apf_err *e);

uint32_t go_apf_wq_forget(apf_workqueue *q, const uint8_t *key, size_t len, go_apf_err *e);

uint32_t go_apf_wq_num_requeues(apf_workqueue *q, const uint8_t *key, size_t len, uint32_t *out,
		go_apf_err *e);

// What go_apf_wq_count counts.
enum go_apf_wq_count {
	GO_APF_WQ_COUNT_READY = 0,      // apf_workqueue_len
	GO_APF_WQ_COUNT_WAITING = 1,    // apf_workqueue_waiting_len
	GO_APF_WQ_COUNT_PROCESSING = 2, // apf_workqueue_processing
	GO_APF_WQ_COUNT_FAST_LANE = 3,  // apf_workqueue_lane_len(FAST)
	GO_APF_WQ_COUNT_SLOW_LANE = 4,  // apf_workqueue_lane_len(SLOW)
};

uint32_t go_apf_wq_count(apf_workqueue *q, uint32_t what, size_t *out, go_apf_err *e);

uint32_t go_apf_wq_shut_down(apf_workqueue *q, bool drain, go_apf_err *e);

uint32_t go_apf_wq_shutting_down(apf_workqueue *q, bool *out, go_apf_err *e);

uint32_t go_apf_wq_advance_clock(apf_workqueue *q, uint64_t nanos, go_apf_err *e);

uint32_t go_apf_wq_metrics_text(apf_workqueue *q, apf_text *out, go_apf_err *e);

#endif
