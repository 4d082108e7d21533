// C helpers of the Go binding (see cgo.go): one Go call, one C call.
#ifndef GO_APF_SHIM_H
#define GO_APF_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "apf.h"

// A copy of the last error message, malloc'd (Go frees it). The address
// is held as an integer so that the struct holds no pointer: cgo then
// checks no pointer when Go passes its address (a check on every call).
typedef struct {
	uintptr_t msg;
	size_t len;
} go_apf_err;

// The message of a go_apf_err as a pointer, for Go to copy and free.
static inline char *go_apf_err_text(uintptr_t msg) {
	return (char *)msg;
}

// Returns st; on an error, copies the thread's last error message into *e.
uint32_t go_apf_capture_error(uint32_t st, go_apf_err *e);

// The hot-path helpers take the dispatcher as an integer: an opaque C
// pointer argument makes cgo check it on every call (it cannot see that
// it points to no Go memory).
uint32_t go_apf_start(uintptr_t d,
		const char *user, size_t user_len,
		const char *groups_buf, const size_t *group_lens, size_t n_groups,
		bool is_resource,
		const char *verb, size_t verb_len,
		const char *api_group, size_t api_group_len,
		const char *resource, size_t resource_len,
		const char *subresource, size_t subresource_len,
		const char *ns, size_t ns_len,
		const char *name, size_t name_len,
		const char *path, size_t path_len,
		uint32_t initial_seats, uint32_t final_seats, uint64_t latency_nanos,
		uint64_t deadline_nanos,
		apf_decision_ids *out, go_apf_err *e);

// The name and UID behind a decision's id (apf_dispatcher_name).
uint32_t go_apf_name(apf_dispatcher *d, uint32_t id, apf_str *name, apf_str *uid, go_apf_err *e);

uint32_t go_apf_finish(uintptr_t d, uint64_t request, uint64_t end_nanos, go_apf_err *e);
uint32_t go_apf_finish_with_cost(uintptr_t d, uint64_t request, uint64_t end_nanos, double cost, go_apf_err *e);
uint32_t go_apf_release_seats(uintptr_t d, uint64_t request, uint32_t seats, go_apf_err *e);

uint32_t go_apf_poll(uintptr_t d, uint64_t request, uint32_t *outcome, uint32_t *reason, go_apf_err *e);

uint32_t go_apf_cancel(uintptr_t d, uint64_t request, bool *cancelled, go_apf_err *e);

uint32_t go_apf_take(apf_dispatcher *d, uint64_t *out, size_t cap, size_t *n, go_apf_err *e);

uint32_t go_apf_new(const char *text, size_t len, bool builtin, const apf_dispatcher_options *opts,
		apf_dispatcher **out, go_apf_err *e);

uint32_t go_apf_options_default(apf_dispatcher_options *out, go_apf_err *e);

uint32_t go_apf_reconfigure(apf_dispatcher *d, const char *text, size_t len, go_apf_err *e);

uint32_t go_apf_advance(apf_dispatcher *d, uint64_t nanos, go_apf_err *e);

uint32_t go_apf_now(apf_dispatcher *d, uint64_t *out, go_apf_err *e);

uint32_t go_apf_completion_fd(apf_dispatcher *d, int *out, go_apf_err *e);

uint32_t go_apf_stats_text(apf_dispatcher *d, apf_text *out, go_apf_err *e);

uint32_t go_apf_header_version(void);

// One 429 answer for every middleware (apf_dispatcher_reject).
uint32_t go_apf_reject(apf_dispatcher *d, const char *level, size_t level_len,
		const char *schema, size_t schema_len, uint32_t reason,
		uint64_t *retry_after, apf_text *body, go_apf_err *e);

// The request-to-digest path helper (apf_request_info_parse_query).
uint32_t go_apf_request_info_parse_query(const char *method, size_t method_len,
		const char *path, size_t path_len, const char *query, size_t query_len,
		apf_request_info *out, apf_text *out_name, go_apf_err *e);

#endif
