// C helpers of the Go binding; see shim.h and cgo.go.
#include <stdlib.h>
#include <string.h>
#include "shim.h"

// Copies the failing call's last error message for Go, on the thread that
// made the call (the goroutine may move to another thread before Go could
// ask). One implementation, shared by every shim file.
uint32_t go_apf_capture_error(uint32_t st, go_apf_err *e) {
	if (st == APF_OK) {
		return st;
	}
	apf_text text = {0};
	if (apf_last_error(&text) != APF_OK) {
		return st;
	}
	char *buf = malloc(text.len + 1);
	if (buf != NULL) {
		memcpy(buf, text.ptr, text.len + 1);
		e->msg = (uintptr_t)buf;
		e->len = text.len;
	}
	apf_text_free(&text);
	return st;
}

static const char go_apf_empty[1] = "";

// Groups arrive as one buffer of concatenated names and their lengths (Go
// memory may not hold Go pointers when passed to C, so no apf_str array).
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
		apf_decision_ids *out, go_apf_err *e) {
	apf_str small[8];
	apf_str *groups = small;
	if (n_groups > 8) {
		groups = malloc(n_groups * sizeof(apf_str));
		if (groups == NULL) {
			return APF_ERR_IO;
		}
	}
	size_t off = 0;
	for (size_t i = 0; i < n_groups; i++) {
		groups[i].ptr = group_lens[i] ? groups_buf + off : go_apf_empty;
		groups[i].len = group_lens[i];
		off += group_lens[i];
	}
	apf_request_digest digest = {
		.user = user, .user_len = user_len,
		.verb = verb, .verb_len = verb_len,
		.api_group = api_group, .api_group_len = api_group_len,
		.resource = resource, .resource_len = resource_len,
		.subresource = subresource, .subresource_len = subresource_len,
		.namespace_ = ns, .namespace_len = ns_len,
		.name = name, .name_len = name_len,
		.path = path, .path_len = path_len,
		.groups = n_groups ? groups : NULL, .n_groups = n_groups,
		.is_resource_request = is_resource,
	};
	apf_work_estimate estimate = {
		.initial_seats = initial_seats,
		.final_seats = final_seats,
		.additional_latency_nanos = latency_nanos,
	};
	out->struct_size = sizeof(apf_decision_ids);
	uint32_t st = apf_start_request_ids((apf_dispatcher *)d, &digest, &estimate, deadline_nanos, out);
	if (groups != small) {
		free(groups);
	}
	return go_apf_capture_error(st, e);
}

uint32_t go_apf_name(apf_dispatcher *d, uint32_t id, apf_str *name, apf_str *uid, go_apf_err *e) {
	return go_apf_capture_error(apf_dispatcher_name(d, id, name, uid), e);
}

uint32_t go_apf_finish(uintptr_t d, uint64_t request, uint64_t end_nanos, go_apf_err *e) {
	return go_apf_capture_error(apf_finish((apf_dispatcher *)d, request, end_nanos), e);
}

uint32_t go_apf_finish_with_cost(uintptr_t d, uint64_t request, uint64_t end_nanos, double cost, go_apf_err *e) {
	return go_apf_capture_error(apf_finish_with_cost((apf_dispatcher *)d, request, end_nanos, cost), e);
}

uint32_t go_apf_release_seats(uintptr_t d, uint64_t request, uint32_t seats, go_apf_err *e) {
	return go_apf_capture_error(apf_request_release_seats((apf_dispatcher *)d, request, seats), e);
}

uint32_t go_apf_poll(uintptr_t d, uint64_t request, uint32_t *outcome, uint32_t *reason, go_apf_err *e) {
	return go_apf_capture_error(apf_request_poll((apf_dispatcher *)d, request, outcome, reason), e);
}

uint32_t go_apf_cancel(uintptr_t d, uint64_t request, bool *cancelled, go_apf_err *e) {
	return go_apf_capture_error(apf_request_cancel((apf_dispatcher *)d, request, cancelled), e);
}

// Take up to cap decided requests from the completion queue.
uint32_t go_apf_take(apf_dispatcher *d, uint64_t *out, size_t cap, size_t *n, go_apf_err *e) {
	size_t i = 0;
	while (i < cap) {
		bool some = false;
		uint32_t st = apf_dispatcher_take_completion(d, &out[i], &some);
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

uint32_t go_apf_new(const char *text, size_t len, bool builtin, const apf_dispatcher_options *opts,
		apf_dispatcher **out, go_apf_err *e) {
	uint32_t st = builtin ? apf_dispatcher_new_builtin(opts, out)
	                      : apf_dispatcher_new_from_config(text, len, opts, out);
	return go_apf_capture_error(st, e);
}

uint32_t go_apf_options_default(apf_dispatcher_options *out, go_apf_err *e) {
	return go_apf_capture_error(apf_dispatcher_options_default(out), e);
}

uint32_t go_apf_reconfigure(apf_dispatcher *d, const char *text, size_t len, go_apf_err *e) {
	return go_apf_capture_error(apf_dispatcher_reconfigure(d, text, len), e);
}

uint32_t go_apf_advance(apf_dispatcher *d, uint64_t nanos, go_apf_err *e) {
	return go_apf_capture_error(apf_dispatcher_advance_clock(d, nanos), e);
}

uint32_t go_apf_now(apf_dispatcher *d, uint64_t *out, go_apf_err *e) {
	return go_apf_capture_error(apf_dispatcher_now(d, out), e);
}

uint32_t go_apf_completion_fd(apf_dispatcher *d, int *out, go_apf_err *e) {
	return go_apf_capture_error(apf_dispatcher_completion_fd(d, out), e);
}

uint32_t go_apf_stats_text(apf_dispatcher *d, apf_text *out, go_apf_err *e) {
	return go_apf_capture_error(apf_dispatcher_stats_text(d, out), e);
}

uint32_t go_apf_header_version(void) {
	return APF_VERSION_NUMBER;
}

uint32_t go_apf_reject(apf_dispatcher *d, const char *level, size_t level_len,
		const char *schema, size_t schema_len, uint32_t reason,
		uint64_t *retry_after, apf_text *body, go_apf_err *e) {
	return go_apf_capture_error(apf_dispatcher_reject(d, level, level_len, schema, schema_len,
		reason, retry_after, body), e);
}

uint32_t go_apf_request_info_parse_query(const char *method, size_t method_len,
		const char *path, size_t path_len, const char *query, size_t query_len,
		apf_request_info *out, apf_text *out_name, go_apf_err *e) {
	return go_apf_capture_error(apf_request_info_parse_query(method, method_len, path, path_len,
		query, query_len, out, out_name), e);
}
