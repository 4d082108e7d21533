/*
 * Tests of the metrics and debug dump functions of libapf's C ABI from C:
 * apf_dispatcher_metrics_text, apf_metrics_content_type and the three
 * apf_dispatcher_dump_* tables; the owned apf_text each returns (freed
 * once, a second free a no-op), growth with no retry, NULL handling, and scrapes from one thread while others run requests;
 * apf_dispatcher_metrics_text_with's prefix and constant labels, and its
 * refusals naming the field at fault.
 *
 * Build and run: bindings/c/run-tests.sh (also under ASan and UBSan).
 */
#define _POSIX_C_SOURCE 200809L

#include "apf.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Atomic: the thread test checks from several threads. */
static atomic_int failures = 0;
static atomic_int checks = 0;

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
#define MS 1000000ull

/* One limited level "tiny" (one seat, one queue of two) for user "alice";
 * libapf adds the mandatory exempt and catch-all objects. */
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

static apf_dispatcher *new_tiny(void) {
  apf_dispatcher_options o;
  CHECK_STATUS(apf_dispatcher_options_default(&o), APF_OK);
  o.server_concurrency_limit = 2; /* one seat for tiny, one for catch-all */
  o.wait_limit_ns = SECOND;
  o.manual_clock = true;
  apf_dispatcher *d = NULL;
  CHECK_STATUS(apf_dispatcher_new_from_config(TINY, strlen(TINY), &o, &d, err()),
               APF_OK);
  if (d == NULL) {
    fprintf(stderr, "cannot create a dispatcher: %s\n", last_error());
    exit(1);
  }
  return d;
}

static apf_decision start(apf_dispatcher *d) {
  apf_request_digest g;
  memset(&g, 0, sizeof g);
  g.user = "alice";
  g.user_len = 5;
  g.verb = "get";
  g.verb_len = 3;
  g.path = "/healthz";
  g.path_len = 8;
  g.groups = GROUPS;
  g.n_groups = 1;
  apf_decision dec;
  memset(&dec, 0, sizeof dec);
  CHECK_STATUS(apf_start_request(d, &g, NULL, 0, &dec), APF_OK);
  return dec;
}

/* The text functions share one shape; dump_requests gets two adapters. */
typedef apf_status (*text_fn)(const apf_dispatcher *, apf_text *);

static apf_status requests_plain(const apf_dispatcher *d, apf_text *out) {
  return apf_dispatcher_dump_requests(d, false, out);
}

static apf_status requests_detailed(const apf_dispatcher *d, apf_text *out) {
  return apf_dispatcher_dump_requests(d, true, out);
}

static const struct {
  const char *name;
  text_fn fn;
} TEXTS[] = {
    {"metrics", apf_dispatcher_metrics_text},
    {"priority levels", apf_dispatcher_dump_priority_levels},
    {"queues", apf_dispatcher_dump_queues},
    {"requests", requests_plain},
    {"requests with details", requests_detailed},
};
#define N_TEXTS (sizeof TEXTS / sizeof TEXTS[0])

/* One call gives the whole text as an owned apf_text; this copies it into a
 * malloc'd string for the checks below (NULL on error). */
static char *read_text(const apf_dispatcher *d, text_fn fn) {
  apf_text t = {0};
  if (fn(d, &t) != APF_OK) {
    return NULL;
  }
  char *copy = malloc(t.len + 1);
  if (copy != NULL) {
    memcpy(copy, t.ptr, t.len + 1);
  }
  apf_text_free(&t);
  return copy;
}

/* The value of the first sample line starting with `prefix` (-1 if none). */
static double sample(const char *text, const char *prefix) {
  size_t n = strlen(prefix);
  for (const char *line = text; line && *line;) {
    if (strncmp(line, prefix, n) == 0) {
      const char *space = strchr(line, ' ');
      return space ? strtod(space + 1, NULL) : -1;
    }
    line = strchr(line, '\n');
    if (line) line++;
  }
  return -1;
}

static int starts_with(const char *s, const char *prefix) {
  return strncmp(s, prefix, strlen(prefix)) == 0;
}

#define PAIR "{priority_level=\"tiny\",flow_schema=\"alice-schema\"}"

static void test_metrics_follow_requests(void) {
  apf_dispatcher *d = new_tiny();
  char *text = read_text(d, apf_dispatcher_metrics_text);
  CHECK(text != NULL);
  if (text) {
    size_t len = strlen(text);
    CHECK(len > 6 && strcmp(text + len - 6, "# EOF\n") == 0);
    CHECK(sample(text, "apiserver_flowcontrol_dispatched_requests_total" PAIR) == 0);
    free(text);
  }
  apf_decision run = start(d), wait = start(d);
  CHECK(run.outcome == APF_OUTCOME_EXECUTE);
  CHECK(wait.outcome == APF_OUTCOME_QUEUED);
  text = read_text(d, apf_dispatcher_metrics_text);
  CHECK(text != NULL);
  if (text) {
    CHECK(sample(text, "apiserver_flowcontrol_dispatched_requests_total" PAIR) == 1);
    CHECK(sample(text, "apiserver_flowcontrol_current_inqueue_requests" PAIR) == 1);
    CHECK(sample(text, "apiserver_flowcontrol_current_executing_requests" PAIR) == 1);
    free(text);
  }
  CHECK_STATUS(apf_dispatcher_advance_clock(d, 5 * MS), APF_OK);
  CHECK_STATUS(apf_finish(d, run.request, 0), APF_OK);
  uint32_t outcome = 0, reason = 0;
  CHECK_STATUS(apf_request_poll(d, wait.request, &outcome, &reason), APF_OK);
  CHECK(outcome == APF_OUTCOME_EXECUTE);
  CHECK_STATUS(apf_finish(d, wait.request, 0), APF_OK);
  text = read_text(d, apf_dispatcher_metrics_text);
  CHECK(text != NULL);
  if (text) {
    CHECK(sample(text, "apiserver_flowcontrol_dispatched_requests_total" PAIR) == 2);
    CHECK(sample(text, "apiserver_flowcontrol_current_inqueue_requests" PAIR) == 0);
    CHECK(sample(text, "apiserver_flowcontrol_request_wait_duration_seconds_sum"
                       "{priority_level=\"tiny\",flow_schema=\"alice-schema\","
                       "execute=\"true\"}") == 0.005);
    free(text);
  }
  apf_dispatcher_free(d);
}

static void test_content_type(void) {
  const char *type = NULL;
  size_t len = 0;
  CHECK_STATUS(apf_metrics_content_type(&type, &len), APF_OK);
  CHECK(type != NULL && strlen(type) == len);
  CHECK(type != NULL && starts_with(type, "application/openmetrics-text"));
  CHECK_STATUS(apf_metrics_content_type(NULL, &len), APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_metrics_content_type(&type, NULL), APF_ERR_NULL_POINTER);
}

static void test_dump_headers(void) {
  apf_dispatcher *d = new_tiny();
  apf_decision run = start(d);
  (void)start(d); /* waits */
  char *levels = read_text(d, apf_dispatcher_dump_priority_levels);
  char *queues = read_text(d, apf_dispatcher_dump_queues);
  char *plain = read_text(d, requests_plain);
  char *detailed = read_text(d, requests_detailed);
  CHECK(levels && queues && plain && detailed);
  if (levels && queues && plain && detailed) {
    CHECK(starts_with(levels, "PriorityLevelName, ActiveQueues,"));
    CHECK(strstr(levels, "CancelledRequests\n") != NULL);
    CHECK(strstr(levels, "\ntiny,") != NULL);
    CHECK(starts_with(queues, "PriorityLevelName, Index,"));
    CHECK(strstr(queues, "TotalWorkSum\n") != NULL);
    CHECK(strstr(queues, "\ntiny,") != NULL);
    CHECK(starts_with(plain, "PriorityLevelName, FlowSchemaName,"));
    CHECK(strstr(plain, "StartTime\n") != NULL);
    CHECK(strstr(plain, "UserName") == NULL);
    CHECK(strstr(plain, "\ntiny,") != NULL);
    CHECK(strstr(detailed, "StartTime, ") != NULL);
    CHECK(strstr(detailed, "SubResource\n") != NULL);
    CHECK(strstr(detailed, "alice") != NULL);
    CHECK(strstr(detailed, "/healthz") != NULL);
  }
  free(levels);
  free(queues);
  free(plain);
  free(detailed);
  CHECK_STATUS(apf_finish(d, run.request, 0), APF_OK);
  apf_dispatcher_free(d);
}

static void test_owned_texts_and_nulls(void) {
  apf_dispatcher *d = new_tiny();
  for (size_t i = 0; i < N_TEXTS; i++) {
    int failures_before = atomic_load(&failures);
    text_fn fn = TEXTS[i].fn;
    apf_text t = {0};
    CHECK_STATUS(fn(d, &t), APF_OK);
    CHECK(t.ptr != NULL && t.len > 0 && t.ptr[t.len] == '\0' &&
          strlen(t.ptr) == t.len);
    apf_text_free(&t);
    CHECK(t.ptr == NULL && t.len == 0);
    apf_text_free(&t); /* a second free is a no-op */

    apf_text untouched = {0};
    CHECK_STATUS(fn(NULL, &untouched), APF_ERR_NULL_POINTER);
    CHECK_STATUS(fn(d, NULL), APF_ERR_NULL_POINTER);
    CHECK(untouched.ptr == NULL);
    if (atomic_load(&failures) != failures_before) {
      fprintf(stderr, "  (while checking %s)\n", TEXTS[i].name);
    }
  }
  apf_dispatcher_free(d);
}

static void test_growth_needs_no_retry(void) {
  apf_dispatcher *d = new_tiny();
  char *before = read_text(d, apf_dispatcher_metrics_text);
  /* A first execution brings its histograms' series. */
  apf_decision run = start(d);
  CHECK_STATUS(apf_finish(d, run.request, 0), APF_OK);
  char *after = read_text(d, apf_dispatcher_metrics_text);
  CHECK(before != NULL && after != NULL && strlen(after) > strlen(before));
  free(before);
  free(after);
  apf_dispatcher_free(d);
}

struct shared {
  apf_dispatcher *d;
  int rounds;
};

static void *requester(void *arg) {
  struct shared *s = arg;
  for (int i = 0; i < s->rounds; i++) {
    apf_decision dec = start(s->d);
    if (dec.outcome == APF_OUTCOME_EXECUTE) {
      CHECK_STATUS(apf_finish(s->d, dec.request, 0), APF_OK);
    } else if (dec.outcome == APF_OUTCOME_QUEUED) {
      bool cancelled = false; /* retired either way */
      CHECK_STATUS(apf_request_cancel(s->d, dec.request, &cancelled), APF_OK);
    }
  }
  return NULL;
}

static void *scraper(void *arg) {
  struct shared *s = arg;
  for (int i = 0; i < s->rounds / 10; i++) {
    for (size_t t = 0; t < N_TEXTS; t++) {
      char *text = read_text(s->d, TEXTS[t].fn);
      CHECK(text != NULL);
      free(text);
    }
  }
  return NULL;
}

static void test_scrapes_race_requests(void) {
  struct shared s = {new_tiny(), 500};
  pthread_t threads[3];
  pthread_create(&threads[0], NULL, requester, &s);
  pthread_create(&threads[1], NULL, requester, &s);
  pthread_create(&threads[2], NULL, scraper, &s);
  for (int i = 0; i < 3; i++) pthread_join(threads[i], NULL);
  char *text = read_text(s.d, apf_dispatcher_metrics_text);
  CHECK(text != NULL);
  if (text) {
    CHECK(sample(text, "apiserver_flowcontrol_current_executing_requests" PAIR) == 0);
    CHECK(sample(text, "apiserver_flowcontrol_current_inqueue_requests" PAIR) == 0);
    CHECK(sample(text, "apiserver_flowcontrol_dispatched_requests_total" PAIR) >= 1);
    free(text);
  }
  apf_dispatcher_free(s.d);
}

/* The last error contains `needle`. */
static int error_mentions(const char *needle) {
  return strstr(last_error(), needle) != NULL;
}

static char *read_with(const apf_dispatcher *d, const apf_metrics_options *o) {
  apf_text t = {0};
  if (apf_dispatcher_metrics_text_with(d, o, &t, err()) != APF_OK) {
    return NULL;
  }
  char *copy = malloc(t.len + 1);
  if (copy != NULL) {
    memcpy(copy, t.ptr, t.len + 1);
  }
  apf_text_free(&t);
  return copy;
}

static void test_metrics_options(void) {
  apf_dispatcher *d = new_tiny();
  apf_decision dec = start(d);
  CHECK(dec.outcome == APF_OUTCOME_EXECUTE);

  /* Default options (and NULL) give the plain text. */
  apf_metrics_options o;
  CHECK_STATUS(apf_metrics_options_default(&o), APF_OK);
  CHECK(o.struct_size == sizeof o && o.prefix.len == 0 &&
        o.const_labels_len == 0);
  char *plain = read_text(d, apf_dispatcher_metrics_text);
  char *same = read_with(d, &o);
  char *null_options = read_with(d, NULL);
  CHECK(plain && same && null_options && strcmp(plain, same) == 0 &&
        strcmp(plain, null_options) == 0);
  free(plain);
  free(same);
  free(null_options);

  /* A prefix and two constant labels on every series. */
  const apf_metrics_label labels[] = {
      {{"dispatcher", 10}, {"public", 6}},
      {{"region", 6}, {"e\"u", 3}}, /* escaped in the text */
  };
  o.prefix = (apf_str){"shop", 4};
  o.const_labels = labels;
  o.const_labels_len = 2;
  char *text = read_with(d, &o);
  CHECK(text != NULL);
  if (text != NULL) {
    CHECK(sample(text, "shop_apiserver_flowcontrol_current_executing_requests"
                       "{dispatcher=\"public\",region=\"e\\\"u\","
                       "priority_level=\"tiny\",flow_schema=\"alice-schema\"}") ==
          1);
    for (const char *line = text; line && *line;) {
      CHECK(starts_with(line, "shop_") || starts_with(line, "# HELP shop_") ||
            starts_with(line, "# TYPE shop_") || starts_with(line, "# EOF"));
      line = strchr(line, '\n');
      if (line) line++;
    }
    free(text);
  }

  /* Refusals name the field at fault. */
  apf_text t = {0};
  o.prefix = (apf_str){"9lives", 6};
  CHECK_STATUS(apf_dispatcher_metrics_text_with(d, &o, &t, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(error_mentions("prefix"));
  o.prefix = (apf_str){NULL, 3};
  CHECK_STATUS(apf_dispatcher_metrics_text_with(d, &o, &t, err()),
               APF_ERR_NULL_POINTER);
  CHECK(error_mentions("apf_metrics_options.prefix"));
  o.prefix = (apf_str){"shop", 4};
  const apf_metrics_label clash[] = {{{"priority_level", 14}, {"x", 1}}};
  o.const_labels = clash;
  o.const_labels_len = 1;
  CHECK_STATUS(apf_dispatcher_metrics_text_with(d, &o, &t, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(error_mentions("priority_level"));
  const apf_metrics_label bad_utf8[] = {{{"zone", 4}, {"\xff", 1}}};
  o.const_labels = bad_utf8;
  CHECK_STATUS(apf_dispatcher_metrics_text_with(d, &o, &t, err()),
               APF_ERR_INVALID_UTF8);
  CHECK(error_mentions("const_labels[0].value"));
  o.const_labels = NULL;
  CHECK_STATUS(apf_dispatcher_metrics_text_with(d, &o, &t, err()),
               APF_ERR_NULL_POINTER);
  o.const_labels_len = 65;
  CHECK_STATUS(apf_dispatcher_metrics_text_with(d, &o, &t, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(error_mentions("const_labels_len"));
  o.const_labels_len = 0;
  o.struct_size = 8;
  CHECK_STATUS(apf_dispatcher_metrics_text_with(d, &o, &t, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(error_mentions("struct_size"));
  CHECK(t.ptr == NULL);
  CHECK_STATUS(apf_dispatcher_metrics_text_with(NULL, NULL, &t, err()),
               APF_ERR_NULL_POINTER);
  CHECK_STATUS(apf_dispatcher_metrics_text_with(d, NULL, NULL, err()),
               APF_ERR_NULL_POINTER);

  CHECK_STATUS(apf_finish(d, dec.request, 0), APF_OK);
  apf_dispatcher_free(d);
}

int main(void) {
  test_metrics_follow_requests();
  test_content_type();
  test_dump_headers();
  test_owned_texts_and_nulls();
  test_growth_needs_no_retry();
  test_scrapes_race_requests();
  test_metrics_options();
  if (atomic_load(&failures)) {
    fprintf(stderr, "test_observe: %d of %d checks failed\n",
            atomic_load(&failures), atomic_load(&checks));
    return 1;
  }
  printf("test_observe: all %d checks passed\n", atomic_load(&checks));
  return 0;
}
