// The C helpers of the Go binding (see cgo.go): only what cgo cannot
// express. Failures need no helper: a call's status, or the apf_error a
// constructor hands out, reaches Go directly.
#ifndef GO_APF_SHIM_H
#define GO_APF_SHIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "apf.h"

// apf_start_request_ids with the digest's strings as separate (pointer,
// length) arguments. Go memory passed to C may not hold Go pointers, so Go
// cannot build an apf_request_digest (a struct of string pointers) or an
// apf_str array of groups in its own memory without pinning every string
// (runtime.Pinner, an allocation per request) or copying them to C memory;
// this helper builds both on the C stack from arguments cgo passes as they
// are. Groups arrive as one buffer of concatenated names and their lengths.
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
		apf_decision_ids *out);

// The hot-path calls with the dispatcher as an integer. cgo checks every
// argument of an opaque pointer type on every call (_cgoCheckPointer: it
// cannot see that the pointer is C memory), and Go has no way to say that it
// need not; an integer argument has no check. One line each, no logic.
static inline uint32_t go_apf_finish(uintptr_t d, uint64_t h, uint64_t end) {
	return apf_finish((apf_dispatcher *)d, h, end);
}
static inline uint32_t go_apf_finish_with_cost(uintptr_t d, uint64_t h, uint64_t end, double cost) {
	return apf_finish_with_cost((apf_dispatcher *)d, h, end, cost);
}
static inline uint32_t go_apf_release_seats(uintptr_t d, uint64_t h, uint32_t seats) {
	return apf_request_release_seats((apf_dispatcher *)d, h, seats);
}
static inline uint32_t go_apf_poll(uintptr_t d, uint64_t h, uint32_t *outcome, uint32_t *reason) {
	return apf_request_poll((apf_dispatcher *)d, h, outcome, reason);
}
static inline uint32_t go_apf_cancel(uintptr_t d, uint64_t h, bool *cancelled) {
	return apf_request_cancel((apf_dispatcher *)d, h, cancelled);
}

#endif
