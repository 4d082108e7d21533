/*
 * Tests of libapf's C ABI from C: every function, and every error path that
 * can be provoked (APF_ERR_TOO_MANY_REQUESTS needs 2^32 requests in flight
 * and is left to code review).
 *
 * Build and run: bindings/c/run-tests.sh (also under ASan and UBSan).
 */
#define _POSIX_C_SOURCE 200809L

#include "apf.h"

#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* Testing aid exported by libapf but kept out of apf.h: panics inside the
 * library (holding a lock when given a dispatcher). */
apf_status apf_test_panic(const apf_dispatcher *dispatcher, apf_error **out_error);

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                        \
  do {                                                                     \
    checks++;                                                              \
    if (!(cond)) {                                                         \
      failures++;                                                          \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,     \
              #cond);                                                      \
    }                                                                      \
  } while (0)

#define CHECK_STATUS(call, expected)                                       \
  do {                                                                     \
    apf_status got_ = (call);                                              \
    checks++;                                                              \
    if (got_ != (expected)) {                                              \
      failures++;                                                          \
      fprintf(stderr, "%s:%d: %s returned %u, expected %u (%s)\n",         \
              __FILE__, __LINE__, #call, (unsigned)got_,                   \
              (unsigned)(expected), last_error());                         \
    }                                                                      \
  } while (0)

#define SECOND 1000000000ull

/* The error slot of the calls that take apf_error **out_error: err()
 * frees what the previous call left there and hands the slot out;
 * last_error() is the message of what the last call through it put there
 * ("" if it succeeded). */
static apf_error *error_slot = NULL;

static apf_error **err(void) {
  apf_error_free(error_slot);
  error_slot = NULL;
  return &error_slot;
}

static const char *last_error(void) {
  const char *text = NULL;
  size_t len = 0;
  if (error_slot == NULL || apf_error_message(error_slot, &text, &len) != APF_OK) {
    return "";
  }
  return text;
}

/* One limited level, "tiny": a single seat and one queue of two, for user
 * "alice"; libapf adds the mandatory levels (exempt, catch-all). */
static const char TINY[] =
    "apiVersion: flowcontrol.apiserver.k8s.io/v1\n"
    "kind: PriorityLevelConfiguration\n"
    "metadata: {name: tiny, uid: uid-tiny}\n"
    "spec:\n"
    "  type: Limited\n"
    "  limited:\n"
    "    nominalConcurrencyShares: 5\n"
    "    lendablePercent: 0\n"
    "    borrowingLimitPercent: 0\n"
    "    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, "
    "queueLengthLimit: 2}}\n"
    "---\n"
    "apiVersion: flowcontrol.apiserver.k8s.io/v1\n"
    "kind: FlowSchema\n"
    "metadata: {name: alice-schema, uid: uid-alice}\n"
    "spec:\n"
    "  priorityLevelConfiguration: {name: tiny}\n"
    "  matchingPrecedence: 100\n"
    "  rules:\n"
    "  - subjects: [{kind: User, user: {name: alice}}]\n"
    "    nonResourceRules: [{verbs: [\"*\"], nonResourceURLs: [\"*\"]}]\n";

static const apf_str GROUPS[] = {{"system:authenticated", 20}};

static apf_request_digest digest_for(const char *user) {
  apf_request_digest d;
  memset(&d, 0, sizeof d);
  d.user = user;
  d.user_len = strlen(user);
  d.verb = "get";
  d.verb_len = 3;
  d.path = "/healthz";
  d.path_len = 8;
  d.groups = GROUPS;
  d.n_groups = 1;
  d.is_resource_request = false;
  return d;
}

static apf_dispatcher_options manual_options(void) {
  apf_dispatcher_options o;
  CHECK_STATUS(apf_dispatcher_options_default(&o), APF_OK);
  o.server_concurrency_limit = 2; /* one seat for tiny, one for catch-all */
  o.wait_limit_ns = SECOND;
  o.manual_clock = true;
  return o;
}

static apf_dispatcher *new_tiny(void) {
  apf_dispatcher_options o = manual_options();
  apf_dispatcher *d = NULL;
  CHECK_STATUS(apf_dispatcher_new_from_config(TINY, strlen(TINY), &o, &d, err()),
               APF_OK);
  CHECK(d != NULL);
  return d;
}

static apf_decision start(apf_dispatcher *d, const char *user) {
  apf_request_digest dg = digest_for(user);
  apf_decision dec;
  memset(&dec, 0xAB, sizeof dec);
  CHECK_STATUS(apf_start_request(d, &dg, NULL, 0, &dec), APF_OK);
  return dec;
}

static int str_is(apf_str s, const char *expected) {
  return s.ptr != NULL && s.len == strlen(expected) &&
         memcmp(s.ptr, expected, s.len) == 0 && s.ptr[s.len] == '\0';
}

static void poll_is(apf_dispatcher *d, uint64_t h, uint32_t outcome,
                    uint32_t reason, int line) {
  uint32_t o = 99, r = 99;
  apf_status s = apf_request_poll(d, h, &o, &r);
  checks++;
  if (s != APF_OK || o != outcome || r != reason) {
    failures++;
    fprintf(stderr, "%s:%d: poll: status %u outcome %u reason %u (%s)\n",
            __FILE__, line, (unsigned)s, o, r, last_error());
  }
}
#define POLL_IS(d, h, o, r) poll_is((d), (h), (o), (r), __LINE__)

static int fd_readable(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* ---------------------------------------------------------------------- */

static void test_version(void) {
  CHECK(apf_abi_version() == APF_VERSION_NUMBER);
  CHECK(((apf_abi_version() >> 16) & 0xff) == APF_VERSION_MAJOR);
  CHECK(((apf_abi_version() >> 8) & 0xff) == APF_VERSION_MINOR);
  CHECK((apf_abi_version() & 0xff) == APF_VERSION_PATCH);
}

static void test_status_text_and_errors(void) {
  const char *text = NULL;
  size_t len = 0;
  CHECK_STATUS(apf_status_text(APF_ERR_INVALID_HANDLE, &text, &len), APF_OK);
  CHECK(text != NULL && strlen(text) == len && len > 0);
  CHECK_STATUS(apf_status_text(APF_OK, &text, &len), APF_OK);
  CHECK(strcmp(text, "success") == 0);
  text = NULL;
  CHECK_STATUS(apf_status_text(12345, &text, &len),
               APF_ERR_INVALID_PARAMETER);
  CHECK(text == NULL); /* outputs untouched on error */
  CHECK_STATUS(apf_status_text(0, NULL, &len), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_status_text(0, &text, NULL), APF_ERR_NULL_POINTER);

  /* A failing constructor hands out an owned error; read it back in
   * every way. */
  static const char bad[] = "kind: PriorityLevelConfiguration\nspec: [";
  apf_dispatcher *d = NULL;
  apf_error *e = NULL;
  CHECK_STATUS(apf_dispatcher_new_from_config(bad, sizeof bad - 1, NULL, &d, &e),
               APF_ERR_CONFIG);
  CHECK(d == NULL && e != NULL);
  CHECK(apf_error_status(e) == APF_ERR_CONFIG);
  const char *msg = NULL;
  size_t msg_len = 0;
  CHECK_STATUS(apf_error_message(e, &msg, &msg_len), APF_OK);
  CHECK(msg != NULL && msg_len == strlen(msg) && msg_len > 0);
  CHECK_STATUS(apf_error_message(e, NULL, &msg_len), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_error_message(NULL, &msg, &msg_len), APF_ERR_NULL_POINTER);
  CHECK(apf_error_status(NULL) == APF_ERR_NULL_POINTER);
  apf_error_free(e);
  apf_error_free(NULL);
  /* NULL out_error: the status alone; success leaves *out_error alone. */
  CHECK_STATUS(apf_dispatcher_new_from_config(bad, sizeof bad - 1, NULL, &d, NULL),
               APF_ERR_CONFIG);
  e = NULL;
  d = new_tiny();
  CHECK_STATUS(apf_dispatcher_reconfigure(d, TINY, sizeof TINY - 1, &e), APF_OK);
  CHECK(e == NULL);
  apf_text t = {0};
  CHECK_STATUS(apf_dispatcher_stats_text(d, &t), APF_OK);
  CHECK(t.ptr != NULL && t.len == strlen(t.ptr));
  apf_text_free(&t);
  CHECK(t.ptr == NULL && t.len == 0);
  apf_text_free(&t);  /* zeroed by the first free: a no-op */
  apf_text_free(NULL);
  (void)len;
  apf_dispatcher_free(d);
}

static void test_null_pointers(void) {
  apf_dispatcher *d = new_tiny();
  apf_request_digest dg = digest_for("alice");
  apf_decision dec;
  apf_dispatcher_options o;
  uint32_t out32 = 0, reason = 0;
  uint64_t out64 = 0;
  bool b = false;
  int fd = 0;
  size_t len = 0;
  char buf[8];
  apf_dispatcher *out = NULL;

  apf_dispatcher_free(NULL); /* a no-op */
  CHECK_STATUS(apf_dispatcher_options_default(NULL), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_new_builtin(&o, NULL, err()), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_new_from_config(TINY, strlen(TINY), NULL, NULL, err()),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_new_from_config(NULL, 3, NULL, &out, err()),
               APF_ERR_NULL_POINTER);
  CHECK(out == NULL);
  CHECK_STATUS(apf_dispatcher_reconfigure(NULL, TINY, strlen(TINY), err()),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_reconfigure(d, NULL, 3, err()), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_advance_clock(NULL, 1), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_now(NULL, &out64), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_now(d, NULL), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_start_request(NULL, &dg, NULL, 0, &dec),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_start_request(d, NULL, NULL, 0, &dec),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_start_request(d, &dg, NULL, 0, NULL),
               APF_ERR_NULL_POINTER);
  dg.verb = NULL; /* with verb_len 3 */
  CHECK_STATUS(apf_start_request(d, &dg, NULL, 0, &dec),
               APF_ERR_NULL_POINTER);
  dg = digest_for("alice");
  dg.groups = NULL; /* with n_groups 1 */
  CHECK_STATUS(apf_start_request(d, &dg, NULL, 0, &dec),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_request_wait(d, 1, 0, NULL, &reason),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_request_wait(d, 1, 0, &out32, NULL),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_request_poll(d, 1, NULL, &reason), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_request_poll(d, 1, &out32, NULL), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_request_cancel(d, 1, NULL), APF_ERR_NULL_POINTER);
  /* A NULL dispatcher is no pointer error for a request call: it names no
   * owner (a queueset's request, or no check); handle 0 is never issued. */
  CHECK_STATUS(apf_request_wait(NULL, 0, 0, &out32, &reason),
               APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_request_poll(NULL, 0, &out32, &reason),
               APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_request_cancel(NULL, 0, &b), APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_finish(NULL, 0, 0), APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_finish_with_cost(NULL, 0, 0, 1.0), APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_request_release_seats(NULL, 0, 0), APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_dispatcher_set_completion_callback(NULL, NULL, NULL),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_completion_fd(NULL, &fd), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_completion_fd(d, NULL), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_take_completion(NULL, &out64, &b),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_take_completion(d, NULL, &b),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_take_completion(d, &out64, NULL),
               APF_ERR_NULL_POINTER);
  apf_text t = {0};
  CHECK_STATUS(apf_dispatcher_stats_text(NULL, &t), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_stats_text(d, NULL), APF_ERR_NULL_POINTER);
  CHECK(t.ptr == NULL);
  (void)buf;
  (void)len;
  apf_dispatcher_free(d);
}

static void test_invalid_utf8_and_config_errors(void) {
  apf_dispatcher *d = new_tiny();
  apf_decision dec;
  apf_dispatcher *out = NULL;
  static const char bad[] = "us\xff" "er";
  apf_request_digest dg = digest_for("alice");
  dg.user = bad;
  dg.user_len = 5;
  CHECK_STATUS(apf_start_request(d, &dg, NULL, 0, &dec), APF_ERR_INVALID_UTF8);
  apf_str bad_groups[] = {{"ok", 2}, {"\xc3\x28", 2}};
  dg = digest_for("alice");
  dg.groups = bad_groups;
  dg.n_groups = 2;
  CHECK_STATUS(apf_start_request(d, &dg, NULL, 0, &dec), APF_ERR_INVALID_UTF8);
  CHECK_STATUS(apf_dispatcher_new_from_config(bad, 5, NULL, &out, err()),
               APF_ERR_INVALID_UTF8);
  CHECK(out == NULL);
  CHECK_STATUS(apf_dispatcher_reconfigure(d, bad, 5, err()), APF_ERR_INVALID_UTF8);

  static const char not_yaml[] = "kind: [unclosed";
  CHECK_STATUS(apf_dispatcher_new_from_config(not_yaml, strlen(not_yaml),
                                              NULL, &out, err()),
               APF_ERR_CONFIG);
  CHECK(out == NULL);
  /* A reconfiguration that does not validate leaves the old one in force. */
  static const char invalid[] =
      "apiVersion: flowcontrol.apiserver.k8s.io/v1\n"
      "kind: PriorityLevelConfiguration\n"
      "metadata: {name: tiny}\n"
      "spec: {type: Limited, limited: {nominalConcurrencyShares: 5, "
      "limitResponse: {type: Queue, queuing: {queues: 2, handSize: 9, "
      "queueLengthLimit: 2}}}}\n";
  CHECK_STATUS(apf_dispatcher_reconfigure(d, invalid, strlen(invalid), err()),
               APF_ERR_CONFIG);
  CHECK(strstr(last_error(), "handSize") != NULL);
  dec = start(d, "alice");
  CHECK(str_is(dec.priority_level_name, "tiny"));
  CHECK_STATUS(apf_finish(d, dec.request, 0), APF_OK);

  /* A valid one (JSON this time) takes effect. */
  static const char json[] =
      "{\"apiVersion\":\"flowcontrol.apiserver.k8s.io/v1\","
      "\"kind\":\"PriorityLevelConfiguration\",\"metadata\":{\"name\":"
      "\"other\"},\"spec\":{\"type\":\"Limited\",\"limited\":{"
      "\"limitResponse\":{\"type\":\"Reject\"}}}}";
  const char *old_name = dec.priority_level_name.ptr;
  CHECK_STATUS(apf_dispatcher_reconfigure(d, json, strlen(json), err()), APF_OK);
  dec = start(d, "alice");
  CHECK(str_is(dec.flow_schema_name, "catch-all"));
  CHECK(strcmp(old_name, "tiny") == 0); /* names live until free */
  CHECK_STATUS(apf_finish(d, dec.request, 0), APF_OK);
  apf_dispatcher_free(d);
}

static void test_options(void) {
  apf_dispatcher_options o;
  CHECK_STATUS(apf_dispatcher_options_default(&o), APF_OK);
  CHECK(o.server_concurrency_limit == 600);
  CHECK(o.service_time_guess_ns == 3000000);
  CHECK(o.wait_limit_ns == 15 * SECOND);
  CHECK(o.borrowing_period_ns == 10 * SECOND);
  CHECK(!o.manual_clock);
  CHECK(o.struct_size == sizeof(apf_dispatcher_options));

  apf_dispatcher *out = NULL;
  /* A struct not set up by apf_dispatcher_options_default is refused by its size. */
  o.struct_size = 0;
  CHECK_STATUS(apf_dispatcher_new_builtin(&o, &out, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(strstr(last_error(), "apf_dispatcher_options.struct_size") != NULL);
  CHECK(out == NULL);
  CHECK_STATUS(apf_dispatcher_options_default(&o), APF_OK);
  o.server_concurrency_limit = 0;
  CHECK_STATUS(apf_dispatcher_new_builtin(&o, &out, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(out == NULL);
  CHECK_STATUS(apf_dispatcher_options_default(&o), APF_OK);
  o.service_time_guess_ns = 0;
  CHECK_STATUS(apf_dispatcher_new_builtin(&o, &out, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK_STATUS(apf_dispatcher_options_default(&o), APF_OK);
  o.borrowing_period_ns = 0;
  CHECK_STATUS(apf_dispatcher_new_builtin(&o, &out, err()),
               APF_ERR_INVALID_PARAMETER);

  /* The built-in configuration, real clock, default options. */
  CHECK_STATUS(apf_dispatcher_new_builtin(NULL, &out, err()), APF_OK);
  CHECK_STATUS(apf_dispatcher_advance_clock(out, 1), APF_ERR_NOT_MANUAL_CLOCK);
  uint64_t t1 = 0, t2 = 0;
  CHECK_STATUS(apf_dispatcher_now(out, &t1), APF_OK);
  CHECK_STATUS(apf_dispatcher_now(out, &t2), APF_OK);
  CHECK(t2 >= t1);
  apf_request_digest dg = digest_for("system:node:n1");
  apf_str node_groups[] = {{"system:nodes", 12}, {"system:authenticated", 20}};
  dg.groups = node_groups;
  dg.n_groups = 2;
  dg.verb = "update";
  dg.verb_len = 6;
  dg.is_resource_request = true;
  dg.api_group = "coordination.k8s.io";
  dg.api_group_len = strlen(dg.api_group);
  dg.resource = "leases";
  dg.resource_len = 6;
  dg.namespace_ = "kube-node-lease";
  dg.namespace_len = strlen(dg.namespace_);
  dg.name = "n1";
  dg.name_len = 2;
  apf_work_estimate est = {2, 0, 0};
  apf_decision dec;
  CHECK_STATUS(apf_start_request(out, &dg, &est, 0, &dec), APF_OK);
  CHECK(dec.outcome == APF_OUTCOME_EXECUTE);
  CHECK(str_is(dec.flow_schema_name, "system-node-high"));
  CHECK(str_is(dec.priority_level_name, "node-high"));
  CHECK_STATUS(apf_finish(out, dec.request, 0), APF_OK);
  apf_dispatcher_free(out);
}

static void test_request_protocol(void) {
  apf_dispatcher *d = new_tiny();
  bool cancelled = false;
  apf_decision a = start(d, "alice");
  CHECK(a.outcome == APF_OUTCOME_EXECUTE && a.reject_reason == APF_REJECT_NONE);
  CHECK(a.request != 0);
  CHECK(str_is(a.flow_schema_name, "alice-schema"));
  CHECK(str_is(a.flow_schema_uid, "uid-alice"));
  CHECK(str_is(a.priority_level_name, "tiny"));
  CHECK(str_is(a.priority_level_uid, "uid-tiny"));

  apf_decision q = start(d, "alice");
  CHECK(q.outcome == APF_OUTCOME_QUEUED && q.request != 0);
  apf_decision q2 = start(d, "alice");
  CHECK(q2.outcome == APF_OUTCOME_QUEUED);
  apf_decision r = start(d, "alice");
  CHECK(r.outcome == APF_OUTCOME_REJECTED);
  CHECK(r.reject_reason == APF_REJECT_QUEUE_FULL && r.request == 0);
  CHECK(str_is(r.priority_level_name, "tiny"));

  /* Misuse of the protocol. */
  CHECK_STATUS(apf_finish(d, q.request, 0), APF_ERR_REQUEST_QUEUED);
  CHECK_STATUS(apf_request_cancel(d, a.request, &cancelled),
               APF_ERR_REQUEST_EXECUTING);
  CHECK_STATUS(apf_finish(d, r.request, 0), APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_finish(d, a.request ^ (1ull << 32), 0),
               APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_finish(d, 0xdead00000000beefull, 0),
               APF_ERR_INVALID_HANDLE);
  POLL_IS(d, a.request, APF_OUTCOME_EXECUTE, APF_REJECT_NONE);
  POLL_IS(d, q.request, APF_OUTCOME_QUEUED, APF_REJECT_NONE);

  /* Finishing a dispatches q; it counts as queued until reported. */
  CHECK_STATUS(apf_finish(d, a.request, 0), APF_OK);
  CHECK_STATUS(apf_finish(d, a.request, 0), APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_finish(d, q.request, 0), APF_ERR_REQUEST_QUEUED);
  POLL_IS(d, q.request, APF_OUTCOME_EXECUTE, APF_REJECT_NONE);

  /* q2 waits past the wait limit on the manual clock. */
  CHECK_STATUS(apf_dispatcher_advance_clock(d, 2 * SECOND), APF_OK);
  uint64_t now = 0;
  CHECK_STATUS(apf_dispatcher_now(d, &now), APF_OK);
  CHECK(now == 2 * SECOND);
  POLL_IS(d, q2.request, APF_OUTCOME_REJECTED, APF_REJECT_TIME_OUT);
  CHECK_STATUS(apf_finish(d, q2.request, 0), APF_ERR_REQUEST_REJECTED);
  CHECK_STATUS(apf_request_cancel(d, q2.request, &cancelled),
               APF_ERR_REQUEST_REJECTED);

  /* Cancel a queued request. */
  apf_decision q3 = start(d, "alice");
  CHECK(q3.outcome == APF_OUTCOME_QUEUED);
  cancelled = false;
  CHECK_STATUS(apf_request_cancel(d, q3.request, &cancelled), APF_OK);
  CHECK(cancelled);
  CHECK_STATUS(apf_request_cancel(d, q3.request, &cancelled),
               APF_ERR_INVALID_HANDLE);

  /* Wait with a timeout (real time), then for a decision. */
  apf_decision q4 = start(d, "alice");
  uint32_t o = 0, reason = 0;
  CHECK_STATUS(apf_request_wait(d, q4.request, 10 * 1000 * 1000, &o, &reason),
               APF_OK);
  CHECK(o == APF_OUTCOME_QUEUED);
  CHECK_STATUS(apf_finish(d, q.request, now + 1), APF_OK);
  CHECK_STATUS(apf_request_wait(d, q4.request, UINT64_MAX, &o, &reason),
               APF_OK);
  CHECK(o == APF_OUTCOME_EXECUTE && reason == APF_REJECT_NONE);
  CHECK_STATUS(apf_finish(d, q4.request, 0), APF_OK);

  /* A deadline earlier than the wait limit. */
  apf_decision hold = start(d, "alice");
  apf_request_digest dg = digest_for("alice");
  apf_decision qd;
  CHECK_STATUS(apf_start_request(d, &dg, NULL, now + SECOND / 10, &qd), APF_OK);
  CHECK(qd.outcome == APF_OUTCOME_QUEUED);
  CHECK_STATUS(apf_dispatcher_advance_clock(d, SECOND / 10), APF_OK);
  POLL_IS(d, qd.request, APF_OUTCOME_REJECTED, APF_REJECT_TIME_OUT);
  CHECK_STATUS(apf_finish(d, hold.request, 0), APF_OK);

  /* Additional latency counts from the given end. */
  apf_work_estimate est = {1, 1, SECOND / 2};
  apf_decision lat;
  CHECK_STATUS(apf_dispatcher_now(d, &now), APF_OK);
  CHECK_STATUS(apf_start_request(d, &dg, &est, 0, &lat), APF_OK);
  CHECK(lat.outcome == APF_OUTCOME_EXECUTE);
  CHECK_STATUS(apf_dispatcher_advance_clock(d, SECOND / 4), APF_OK);
  CHECK_STATUS(apf_finish(d, lat.request, now + SECOND / 10), APF_OK);
  apf_decision after = start(d, "alice");
  CHECK(after.outcome == APF_OUTCOME_QUEUED);
  CHECK_STATUS(apf_dispatcher_advance_clock(d, SECOND / 4), APF_OK);
  POLL_IS(d, after.request, APF_OUTCOME_QUEUED, APF_REJECT_NONE);
  CHECK_STATUS(apf_dispatcher_advance_clock(d, SECOND / 10), APF_OK);
  POLL_IS(d, after.request, APF_OUTCOME_EXECUTE, APF_REJECT_NONE);
  CHECK_STATUS(apf_finish(d, after.request, 0), APF_OK);

  /* Statistics. */
  apf_text stats = {0};
  CHECK_STATUS(apf_dispatcher_stats_text(d, &stats), APF_OK);
  const char *text = stats.ptr;
  CHECK(text != NULL && text[stats.len] == '\0');
  CHECK(strstr(text, "level tiny exempt false concurrency_limit 1 "
                     "seats_in_use 0 executing 0 waiting 0") != NULL);
  CHECK(strstr(text, "requests_live 0 ") != NULL);
  apf_text_free(&stats);
  apf_dispatcher_free(d);
}

/* --- completion notification ------------------------------------------- */

struct calls {
  apf_dispatcher *d;
  uint64_t seen[8];
  int n;
  apf_status reentrant;
  int free_ignored;
};

static void on_complete(void *user, uint64_t request) {
  struct calls *c = user;
  if (c->n < 8) c->seen[c->n++] = request;
  /* libapf holds no lock here: calling back in works, except changing the
   * callback from inside it. */
  apf_text t = {0};
  if (apf_dispatcher_stats_text(c->d, &t) == APF_OK) apf_text_free(&t);
  c->reentrant = apf_dispatcher_set_completion_callback(c->d, NULL, NULL);
  /* Freeing the dispatcher from its own callback is ignored: it still
   * answers at once (under ASan a free that was not ignored is a
   * use-after-free here). */
  apf_dispatcher_free(c->d);
  uint64_t now = 0;
  c->free_ignored = apf_dispatcher_now(c->d, &now) == APF_OK;
}

static void test_completion(void) {
  apf_dispatcher *d = new_tiny();
  struct calls c;
  memset(&c, 0, sizeof c);
  c.d = d;
  int fd = -1, fd2 = -1;
  uint64_t h = 0;
  bool some = true;
  CHECK_STATUS(apf_dispatcher_completion_fd(d, &fd), APF_OK);
  CHECK(fd >= 0 && !fd_readable(fd));
  CHECK_STATUS(apf_dispatcher_completion_fd(d, &fd2), APF_OK);
  CHECK(fd == fd2);
  CHECK_STATUS(apf_dispatcher_set_completion_callback(d, on_complete, &c),
               APF_OK);
  apf_decision a = start(d, "alice");
  apf_decision q = start(d, "alice");
  apf_decision q2 = start(d, "alice");
  CHECK(!fd_readable(fd));
  CHECK_STATUS(apf_finish(d, a.request, 0), APF_OK);
  CHECK(c.n == 1 && c.seen[0] == q.request);
  CHECK(c.reentrant == APF_ERR_IN_CALLBACK);
  CHECK(c.free_ignored);
  CHECK(fd_readable(fd));
  CHECK_STATUS(apf_dispatcher_take_completion(d, &h, &some), APF_OK);
  CHECK(some && h == q.request);
  CHECK(!fd_readable(fd));
  CHECK_STATUS(apf_dispatcher_take_completion(d, &h, &some), APF_OK);
  CHECK(!some && h == 0);
  POLL_IS(d, q.request, APF_OUTCOME_EXECUTE, APF_REJECT_NONE);
  /* A timeout on the clock's advance is announced too. */
  CHECK_STATUS(apf_dispatcher_advance_clock(d, 2 * SECOND), APF_OK);
  CHECK(c.n == 2 && c.seen[1] == q2.request);
  CHECK(fd_readable(fd));
  CHECK_STATUS(apf_dispatcher_take_completion(d, &h, &some), APF_OK);
  CHECK(some && h == q2.request);
  POLL_IS(d, q2.request, APF_OUTCOME_REJECTED, APF_REJECT_TIME_OUT);
  /* Cancellation is not announced; a cleared callback is not called. */
  apf_decision q3 = start(d, "alice");
  bool cancelled = false;
  CHECK_STATUS(apf_request_cancel(d, q3.request, &cancelled), APF_OK);
  CHECK(cancelled && c.n == 2 && !fd_readable(fd));
  CHECK_STATUS(apf_dispatcher_set_completion_callback(d, NULL, NULL), APF_OK);
  apf_decision q4 = start(d, "alice");
  CHECK_STATUS(apf_finish(d, q.request, 0), APF_OK);
  CHECK(c.n == 2);
  CHECK_STATUS(apf_dispatcher_take_completion(d, &h, &some), APF_OK);
  CHECK(some && h == q4.request);
  POLL_IS(d, q4.request, APF_OUTCOME_EXECUTE, APF_REJECT_NONE);
  /* Freed with a request executing and one waiting: no callback, no leak. */
  CHECK_STATUS(apf_dispatcher_set_completion_callback(d, on_complete, &c),
               APF_OK);
  (void)start(d, "alice");
  apf_dispatcher_free(d);
  CHECK(c.n == 2);
}

static void test_completion_fd_failure(void) {
  /* With no file descriptor left, the completion fd cannot be made. */
  apf_dispatcher *d = new_tiny();
  struct rlimit old, none;
  CHECK(getrlimit(RLIMIT_NOFILE, &old) == 0);
  none = old;
  none.rlim_cur = 0;
  CHECK(setrlimit(RLIMIT_NOFILE, &none) == 0);
  int fd = -1;
  apf_status s = apf_dispatcher_completion_fd(d, &fd);
  CHECK(setrlimit(RLIMIT_NOFILE, &old) == 0);
  CHECK_STATUS(s, APF_ERR_IO);
  CHECK(fd == -1);
  CHECK_STATUS(apf_dispatcher_completion_fd(d, &fd), APF_OK);
  CHECK(fd >= 0);
  apf_dispatcher_free(d);
}

/* --- threads --------------------------------------------------------------- */

struct waiter {
  apf_dispatcher *d;
  uint64_t request;
  apf_status status;
  uint32_t outcome;
};

static void *wait_forever(void *arg) {
  struct waiter *w = arg;
  uint32_t reason = 0;
  w->status = apf_request_wait(w->d, w->request, UINT64_MAX, &w->outcome,
                               &reason);
  return NULL;
}

static void *start_finish_loop(void *arg) {
  apf_dispatcher *d = arg;
  for (int i = 0; i < 200; i++) {
    apf_request_digest dg = digest_for("alice");
    apf_decision dec;
    if (apf_start_request(d, &dg, NULL, 0, &dec) != APF_OK) return arg;
    uint32_t o = dec.outcome, r = 0;
    if (o == APF_OUTCOME_QUEUED &&
        apf_request_wait(d, dec.request, UINT64_MAX, &o, &r) != APF_OK)
      return arg;
    if (o == APF_OUTCOME_EXECUTE &&
        apf_finish(d, dec.request, 0) != APF_OK)
      return arg;
  }
  return NULL;
}

static void test_threads(void) {
  apf_dispatcher *d = new_tiny();
  apf_decision a = start(d, "alice");
  apf_decision q = start(d, "alice");
  struct waiter w = {d, q.request, APF_ERR_PANIC, 99};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, wait_forever, &w) == 0);
  CHECK_STATUS(apf_finish(d, a.request, 0), APF_OK);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(w.status == APF_OK && w.outcome == APF_OUTCOME_EXECUTE);

  apf_decision q2 = start(d, "alice");
  struct waiter w2 = {d, q2.request, APF_OK, 99};
  CHECK(pthread_create(&t, NULL, wait_forever, &w2) == 0);
  bool cancelled = false;
  CHECK_STATUS(apf_request_cancel(d, q2.request, &cancelled), APF_OK);
  CHECK(pthread_join(t, NULL) == 0);
  CHECK(w2.status == APF_ERR_INVALID_HANDLE); /* the wait ends */
  CHECK_STATUS(apf_finish(d, q.request, 0), APF_OK);

  pthread_t ts[4];
  for (int i = 0; i < 4; i++)
    CHECK(pthread_create(&ts[i], NULL, start_finish_loop, d) == 0);
  for (int i = 0; i < 4; i++) {
    void *ret = d;
    CHECK(pthread_join(ts[i], &ret) == 0);
    CHECK(ret == NULL);
  }
  apf_text stats = {0};
  CHECK_STATUS(apf_dispatcher_stats_text(d, &stats), APF_OK);
  CHECK(strstr(stats.ptr, "requests_live 0 ") != NULL);
  CHECK(strstr(stats.ptr, "seats_in_use 0 executing 0 waiting 0") != NULL);
  apf_text_free(&stats);
  apf_dispatcher_free(d);
}

static void test_panic_boundary(void) {
  apf_dispatcher *d = new_tiny();
  apf_decision a = start(d, "alice");
  CHECK_STATUS(apf_test_panic(NULL, err()), APF_ERR_PANIC);
  CHECK(strstr(last_error(), "panic") != NULL);
  CHECK_STATUS(apf_test_panic(d, NULL), APF_ERR_PANIC);
  /* Still usable, including the lock the panic poisoned. */
  CHECK_STATUS(apf_finish(d, a.request, 0), APF_OK);
  apf_decision b = start(d, "alice");
  CHECK(b.outcome == APF_OUTCOME_EXECUTE);
  CHECK_STATUS(apf_finish(d, b.request, 0), APF_OK);
  apf_dispatcher_free(d);
}

/* Releasing seats early and finishing with a cost (docs/cost.md). */
static void test_release_and_cost(void) {
  apf_dispatcher *d = new_tiny();
  apf_decision a = start(d, "alice");
  CHECK(a.outcome == APF_OUTCOME_EXECUTE);
  apf_decision q = start(d, "alice");
  CHECK(q.outcome == APF_OUTCOME_QUEUED);
  CHECK_STATUS(apf_request_release_seats(d, q.request, 0),
               APF_ERR_REQUEST_QUEUED);
  CHECK_STATUS(apf_request_release_seats(d, a.request, 2),
               APF_ERR_INVALID_PARAMETER);
  /* a's seat comes back early: q runs while a stays open. */
  CHECK_STATUS(apf_request_release_seats(d, a.request, 0), APF_OK);
  POLL_IS(d, q.request, APF_OUTCOME_EXECUTE, APF_REJECT_NONE);
  CHECK_STATUS(apf_request_release_seats(d, a.request, 0),
               APF_ERR_INVALID_PARAMETER);
  CHECK_STATUS(apf_finish_with_cost(d, a.request, 0, -1.0),
               APF_ERR_INVALID_PARAMETER);
  CHECK_STATUS(apf_finish_with_cost(d, a.request, 0, 0.5), APF_OK);
  CHECK_STATUS(apf_request_release_seats(d, a.request, 1),
               APF_ERR_INVALID_HANDLE);
  /* a gave back nothing more at its finish: q still holds the only seat. */
  apf_decision b = start(d, "alice");
  CHECK(b.outcome == APF_OUTCOME_QUEUED);
  CHECK_STATUS(apf_finish(d, q.request, 0), APF_OK);
  POLL_IS(d, b.request, APF_OUTCOME_EXECUTE, APF_REJECT_NONE);
  CHECK_STATUS(apf_finish(d, b.request, 0), APF_OK);
  apf_dispatcher_free(d);
}

/* apf_start_request_ids from C: the ids name what apf_start_request
 * names, struct_size is checked, and a made-up id is refused. */
static void test_decision_ids(void) {
  apf_dispatcher *d = new_tiny();
  apf_request_digest dg = digest_for("alice");
  apf_decision_ids ids;
  memset(&ids, 0xAB, sizeof ids);
  ids.struct_size = sizeof ids - 1;
  CHECK_STATUS(apf_start_request_ids(d, &dg, NULL, 0, &ids),
               APF_ERR_INVALID_PARAMETER);
  ids.struct_size = sizeof ids;
  CHECK_STATUS(apf_start_request_ids(d, &dg, NULL, 0, &ids), APF_OK);
  CHECK(ids.outcome == APF_OUTCOME_EXECUTE && ids.request != 0);
  apf_decision named = start(d, "bob");
  apf_str name, uid;
  CHECK_STATUS(apf_dispatcher_name(d, ids.priority_level_id, &name, &uid),
               APF_OK);
  CHECK(str_is(name, "tiny") && str_is(uid, "uid-tiny"));
  CHECK_STATUS(apf_dispatcher_name(d, ids.flow_schema_id, &name, &uid), APF_OK);
  CHECK(str_is(name, "alice-schema"));
  CHECK_STATUS(apf_dispatcher_name(d, 0, &name, &uid),
               APF_ERR_INVALID_PARAMETER);
  CHECK_STATUS(apf_dispatcher_name(d, ids.flow_schema_id, NULL, &uid),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_finish(d, ids.request, 0), APF_OK);
  CHECK_STATUS(apf_finish(d, named.request, 0), APF_OK);
  apf_dispatcher_free(d);
}

int main(void) {
  test_version();
  test_decision_ids();
  test_status_text_and_errors();
  test_null_pointers();
  test_invalid_utf8_and_config_errors();
  test_options();
  test_request_protocol();
  test_release_and_cost();
  test_completion();
  test_completion_fd_failure();
  test_threads();
  test_panic_boundary();
  if (failures) {
    fprintf(stderr, "test_apf: %d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("test_apf: all %d checks passed\n", checks);
  return 0;
}
