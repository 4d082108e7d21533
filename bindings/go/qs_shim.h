// C helpers of the Go queueset binding (see queueset.go): one Go call, one
// C call, the last error copied for Go by go_apf_capture_error (shim.c).
#ifndef GO_APF_QS_SHIM_H
#define GO_APF_QS_SHIM_H

#include "shim.h"

uint32_t go_apf_qs_new(const char *name, size_t name_len, const apf_queueset_config *cfg, bool manual,
		apf_queueset **out, go_apf_err *e);
uint32_t go_apf_qs_config_default(apf_queueset_config *out, go_apf_err *e);
uint32_t go_apf_qs_reconfigure(apf_queueset *q, const apf_queueset_config *cfg, go_apf_err *e);
uint32_t go_apf_qs_start(apf_queueset *q, uint64_t hash, uint32_t initial_seats, uint32_t final_seats,
		uint64_t latency_nanos, uint64_t deadline_nanos, uint32_t tag, apf_queueset_decision *out,
		go_apf_err *e);
uint32_t go_apf_qs_finish(apf_queueset *q, uint64_t request, go_apf_err *e);
uint32_t go_apf_qs_release(apf_queueset *q, uint64_t request, uint32_t seats, go_apf_err *e);
uint32_t go_apf_qs_poll(apf_queueset *q, uint64_t request, uint32_t *outcome, uint32_t *reason, go_apf_err *e);
uint32_t go_apf_qs_cancel(apf_queueset *q, uint64_t request, bool *cancelled, go_apf_err *e);
uint32_t go_apf_qs_take(apf_queueset *q, uint64_t *out, size_t cap, size_t *n, go_apf_err *e);
uint32_t go_apf_qs_completion_fd(apf_queueset *q, int *out, go_apf_err *e);
uint32_t go_apf_qs_advance(apf_queueset *q, uint64_t nanos, go_apf_err *e);
uint32_t go_apf_qs_now(apf_queueset *q, uint64_t *out, go_apf_err *e);
uint32_t go_apf_qs_is_idle(apf_queueset *q, bool *out, go_apf_err *e);
uint32_t go_apf_qs_stats(apf_queueset *q, apf_queueset_stats *out, go_apf_err *e);
uint32_t go_apf_qs_dump(apf_queueset *q, apf_text *out, go_apf_err *e);

#endif
