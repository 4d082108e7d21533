// The one C helper of the Go binding; see shim.h and cgo.go.
#include <stdlib.h>
#include <string.h>
#include "shim.h"

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
		apf_decision_ids *out) {
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
	return st;
}
