/*
 * An example server loop on libapf's C ABI: a single-threaded event loop
 * that admits simulated requests from two tenants, runs those that may
 * execute, parks queued ones until the completion fd says they were
 * decided (poll(2)), and finishes each when its work is done.
 *
 * "noisy" offers more work than its priority level can take; "quiet" asks
 * little. Fair queuing keeps quiet's waits short while noisy queues (and,
 * when its queues are full, is told to retry: HTTP 429).
 *
 * Build and run: bindings/c/run-tests.sh (or see the gcc line there).
 */
#define _POSIX_C_SOURCE 200809L

#include "apf.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MS 1000000ull
#define RUN_MS 300           /* how long requests arrive */
#define SERVICE_NS (2 * MS)  /* each request's execution time */
#define MAX_INFLIGHT 4096

/* One level "web" with 4 of the server's 6 seats, 16 queues; one flow per
 * user. The mandatory exempt and catch-all objects are added by libapf. */
static const char CONFIG[] =
    "apiVersion: flowcontrol.apiserver.k8s.io/v1\n"
    "kind: PriorityLevelConfiguration\n"
    "metadata: {name: web, uid: 1f0e-web}\n"
    "spec:\n"
    "  type: Limited\n"
    "  limited:\n"
    "    nominalConcurrencyShares: 10\n"
    "    lendablePercent: 0\n"
    "    borrowingLimitPercent: 0\n"
    "    limitResponse:\n"
    "      type: Queue\n"
    "      queuing: {queues: 16, handSize: 4, queueLengthLimit: 30}\n"
    "---\n"
    "apiVersion: flowcontrol.apiserver.k8s.io/v1\n"
    "kind: FlowSchema\n"
    "metadata: {name: tenants, uid: 2a7c-tenants}\n"
    "spec:\n"
    "  priorityLevelConfiguration: {name: web}\n"
    "  matchingPrecedence: 500\n"
    "  distinguisherMethod: {type: ByUser}\n"
    "  rules:\n"
    "  - subjects: [{kind: Group, group: {name: system:authenticated}}]\n"
    "    nonResourceRules: [{verbs: [\"*\"], nonResourceURLs: [\"*\"]}]\n";

struct tenant {
  const char *name;
  int every_ms;  /* one arrival batch every this many ms */
  int batch;     /* requests per batch */
  long served, rejected;
  double waited_ms;
};

struct inflight {
  uint64_t request;
  int tenant;
  uint64_t arrived; /* monotonic ns */
  uint64_t ends;    /* monotonic ns when executing, 0 while queued */
};

static struct tenant tenants[] = {
    {"noisy", 1, 3, 0, 0, 0.0},
    {"quiet", 4, 1, 0, 0, 0.0},
};
#define N_TENANTS (sizeof tenants / sizeof tenants[0])

static struct inflight inflight[MAX_INFLIGHT];
static int n_inflight = 0;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what, apf_status s) {
  const char *text = NULL;
  size_t len = 0;
  (void)apf_status_text(s, &text, &len);
  fprintf(stderr, "example_server: %s failed with %u: %s\n", what,
          (unsigned)s, text ? text : "");
  exit(1);
}

#define TRY(call)                       \
  do {                                  \
    apf_status s_ = (call);             \
    if (s_ != APF_OK) die(#call, s_);   \
  } while (0)

static void begin(int i, uint64_t now) {
  struct inflight *r = &inflight[i];
  r->ends = now + SERVICE_NS;
  tenants[r->tenant].served++;
  tenants[r->tenant].waited_ms += (double)(now - r->arrived) / 1e6;
}

static void forget(int i) { inflight[i] = inflight[--n_inflight]; }

/* A request arrives: classify it and act on the decision. */
static void arrive(apf_dispatcher *d, int t, uint64_t now) {
  static const apf_str groups[] = {{"system:authenticated", 20}};
  apf_request_digest dg;
  memset(&dg, 0, sizeof dg);
  dg.user = tenants[t].name;
  dg.user_len = strlen(tenants[t].name);
  dg.verb = "get";
  dg.verb_len = 3;
  dg.path = "/api/widgets";
  dg.path_len = strlen(dg.path);
  dg.groups = groups;
  dg.n_groups = 1;
  apf_work_estimate one_seat = {1, 0, 0};
  apf_decision dec;
  TRY(apf_start_request(d, &dg, &one_seat, 0, &dec));
  if (dec.outcome == APF_OUTCOME_REJECTED) {
    /* A real server answers 429 with Retry-After and sends the UIDs in
     * X-Kubernetes-PF-FlowSchema-UID / -PriorityLevel-UID. */
    tenants[t].rejected++;
    return;
  }
  if (n_inflight == MAX_INFLIGHT) {
    fprintf(stderr, "example_server: too many requests in flight\n");
    exit(1);
  }
  struct inflight *r = &inflight[n_inflight++];
  r->request = dec.request;
  r->tenant = t;
  r->arrived = now;
  r->ends = 0;
  if (dec.outcome == APF_OUTCOME_EXECUTE) begin(n_inflight - 1, now);
}

/* The completion fd was readable: learn what became of queued requests. */
static void drain_completions(apf_dispatcher *d, uint64_t now) {
  for (;;) {
    uint64_t h = 0;
    bool some = false;
    TRY(apf_dispatcher_take_completion(d, &h, &some));
    if (!some) return;
    uint32_t outcome = 0, reason = 0;
    apf_status s = apf_request_poll(d, h, &outcome, &reason);
    if (s == APF_ERR_INVALID_HANDLE) continue; /* cancelled meanwhile */
    if (s != APF_OK) die("apf_request_poll", s);
    for (int i = 0; i < n_inflight; i++) {
      if (inflight[i].request != h) continue;
      if (outcome == APF_OUTCOME_EXECUTE) {
        begin(i, now);
      } else if (outcome == APF_OUTCOME_REJECTED) {
        tenants[inflight[i].tenant].rejected++; /* timed out: 429 */
        forget(i);
      }
      break;
    }
  }
}

/* A text of libapf (metrics or a dump): one call, an owned apf_text that
 * the caller frees with apf_text_free. */
static apf_text read_text(const apf_dispatcher *d,
                          apf_status (*fn)(const apf_dispatcher *, apf_text *)) {
  apf_text t = {0};
  apf_status s = fn(d, &t);
  if (s != APF_OK) die("reading a text", s);
  return t;
}

/* Whether the n bytes at line contain `what`. */
static int contains(const char *line, size_t n, const char *what) {
  size_t k = strlen(what);
  for (size_t i = 0; i + k <= n; i++)
    if (memcmp(line + i, what, k) == 0) return 1;
  return 0;
}

/* Print the exposition's request counters of level "web" (a real server
 * serves the whole text at /metrics for Prometheus to scrape). */
static void print_counters(const char *metrics) {
  for (const char *line = metrics; *line;) {
    const char *end = strchr(line, '\n');
    size_t n = end ? (size_t)(end - line) : strlen(line);
    if (contains(line, n, "_requests_total{priority_level=\"web\""))
      printf("%.*s\n", (int)n, line);
    line += end ? n + 1 : n;
  }
}

/* Finish what is done; returns the earliest end still pending (or 0). */
static uint64_t finish_done(apf_dispatcher *d, uint64_t now) {
  uint64_t next = 0;
  for (int i = 0; i < n_inflight;) {
    uint64_t ends = inflight[i].ends;
    if (ends != 0 && ends <= now) {
      /* 0: the request ends now, on the dispatcher's clock. */
      TRY(apf_finish(d, inflight[i].request, 0));
      forget(i);
      continue;
    }
    if (ends != 0 && (next == 0 || ends < next)) next = ends;
    i++;
  }
  return next;
}

int main(void) {
  if (apf_abi_version() != APF_VERSION_NUMBER) {
    fprintf(stderr, "libapf %#x does not match apf.h %#x\n",
            apf_abi_version(), APF_VERSION_NUMBER);
    return 1;
  }
  apf_dispatcher_options options;
  TRY(apf_dispatcher_options_default(&options));
  options.server_concurrency_limit = 6;
  apf_dispatcher *d = NULL;
  TRY(apf_dispatcher_new_from_config(CONFIG, strlen(CONFIG), &options, &d, NULL));
  int fd = -1;
  TRY(apf_dispatcher_completion_fd(d, &fd));

  uint64_t t0 = now_ns();
  int tick = 0;
  for (;;) {
    uint64_t now = now_ns();
    /* Arrivals due by now, one tick per millisecond. */
    while (tick < RUN_MS && t0 + (uint64_t)tick * MS <= now) {
      for (size_t t = 0; t < N_TENANTS; t++)
        if (tick % tenants[t].every_ms == 0)
          for (int k = 0; k < tenants[t].batch; k++) arrive(d, (int)t, now);
      tick++;
    }
    uint64_t next_end = finish_done(d, now);
    if (tick >= RUN_MS && n_inflight == 0) break;

    /* Sleep in poll(2) until a queued request is decided, a running one
     * is due to end, or the next arrival. */
    uint64_t wake = tick < RUN_MS ? t0 + (uint64_t)tick * MS : 0;
    if (next_end != 0 && (wake == 0 || next_end < wake)) wake = next_end;
    int timeout_ms = -1;
    if (wake != 0)
      timeout_ms = wake <= now ? 0 : (int)((wake - now + MS - 1) / MS);
    struct pollfd p = {fd, POLLIN, 0};
    int n = poll(&p, 1, timeout_ms);
    if (n < 0) {
      perror("poll");
      return 1;
    }
    if (n > 0 && (p.revents & POLLIN)) drain_completions(d, now_ns());
  }

  apf_text levels = read_text(d, apf_dispatcher_dump_priority_levels);
  apf_text metrics = read_text(d, apf_dispatcher_metrics_text);
  printf("%-6s %8s %9s %14s\n", "tenant", "served", "rejected",
         "mean wait ms");
  for (size_t t = 0; t < N_TENANTS; t++) {
    struct tenant *x = &tenants[t];
    printf("%-6s %8ld %9ld %14.2f\n", x->name, x->served, x->rejected,
           x->served ? x->waited_ms / (double)x->served : 0.0);
  }
  /* What /debug/api_priority_and_fairness/dump_priority_levels and
   * /metrics would serve. */
  printf("\n%s\n", levels.ptr);
  print_counters(metrics.ptr);
  apf_text_free(&levels);
  apf_text_free(&metrics);
  apf_dispatcher_free(d);

  /* The run is only meaningful if quiet got through and noisy was held
   * back; fail loudly otherwise so the test command notices. */
  struct tenant *noisy = &tenants[0], *quiet = &tenants[1];
  double quiet_wait = quiet->served ? quiet->waited_ms / quiet->served : 0;
  double noisy_wait = noisy->served ? noisy->waited_ms / noisy->served : 0;
  if (quiet->served == 0 || quiet->rejected != 0 || noisy->served == 0 ||
      quiet_wait > noisy_wait) {
    fprintf(stderr, "example_server: unexpected outcome\n");
    return 1;
  }
  return 0;
}
