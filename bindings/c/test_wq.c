/*
 * Tests of libapf's workqueue C ABI (apf_workqueue_*) from C: client-go's rules
 * (dirty and processing sets, shutdown, drain), delays and every rate
 * limiter on the manual clock, two lanes, priorities, metrics text, item
 * handles (stale, double done, foreign), NULL pointers, bad parameters, the
 * panic boundary, and pthreads producers and consumers.
 *
 * Build and run: bindings/c/run-tests.sh (also under ASan and UBSan).
 */
#define _POSIX_C_SOURCE 200809L

#include "apf.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Testing aids exported by libapf but kept out of apf.h. */
apf_status apf_workqueue_test_panic(apf_workqueue *queue);
apf_status apf_workqueue_test_parked(apf_workqueue *queue, size_t *out);

static int failures = 0;
static int checks = 0;

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
    __atomic_add_fetch(&checks, 1, __ATOMIC_RELAXED);                      \
    if (!(cond)) {                                                         \
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);                  \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,     \
              #cond);                                                      \
    }                                                                      \
  } while (0)

#define CHECK_STATUS(call, expected)                                       \
  do {                                                                     \
    apf_status got_ = (call);                                              \
    __atomic_add_fetch(&checks, 1, __ATOMIC_RELAXED);                      \
    if (got_ != (expected)) {                                              \
      __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);                  \
      fprintf(stderr, "%s:%d: %s returned %u, expected %u (%s)\n",         \
              __FILE__, __LINE__, #call, (unsigned)got_,                   \
              (unsigned)(expected), last_error());                         \
    }                                                                      \
  } while (0)

#define OK(call) CHECK_STATUS(call, APF_OK)

#define MS 1000000ull
#define SECOND 1000000000ull

/* ----- helpers ----------------------------------------------------------- */

static apf_workqueue *new_queue(apf_workqueue_kind kind, const char *name,
                                const apf_rate_limiter *limiter) {
  apf_workqueue_options o;
  OK(apf_workqueue_options_default(&o));
  o.kind = kind;
  o.manual_clock = true;
  o.name = name;
  o.name_len = name ? strlen(name) : 0;
  o.limiter = limiter;
  apf_workqueue *q = NULL;
  OK(apf_workqueue_new(&o, &q, err()));
  if (q == NULL) {
    fprintf(stderr, "apf_workqueue_new failed: %s\n", last_error());
    exit(1);
  }
  return q;
}

static void add(apf_workqueue *q, const char *key) {
  OK(apf_workqueue_add(q, (const uint8_t *)key, strlen(key)));
}

static apf_status add_opts(apf_workqueue *q, const char *key,
                           apf_workqueue_add_options opts) {
  return apf_workqueue_add_with_options(q, (const uint8_t *)key, strlen(key), &opts);
}

static size_t len(apf_workqueue *q) {
  size_t n = 12345;
  OK(apf_workqueue_len(q, &n));
  return n;
}

static size_t waiting(apf_workqueue *q) {
  size_t n = 12345;
  OK(apf_workqueue_waiting_len(q, &n));
  return n;
}

static uint32_t requeues(apf_workqueue *q, const char *key) {
  uint32_t n = 12345;
  OK(apf_workqueue_num_requeues(q, (const uint8_t *)key, strlen(key), &n));
  return n;
}

static size_t parked(apf_workqueue *q) {
  size_t n = 0;
  OK(apf_workqueue_test_parked(q, &n));
  return n;
}

/* A plain add's options: apf_workqueue_add_options_default sets struct_size. */
static apf_workqueue_add_options plain(void) {
  apf_workqueue_add_options o;
  OK(apf_workqueue_add_options_default(&o));
  return o;
}

static bool key_is(const apf_workqueue_item *it, const char *key) {
  return it->result == APF_WORKQUEUE_ITEM && it->key_len == strlen(key) &&
         memcmp(it->key, key, it->key_len) == 0;
}

static apf_workqueue_item try_get(apf_workqueue *q) {
  apf_workqueue_item it;
  memset(&it, 0xab, sizeof it);
  OK(apf_workqueue_try_get(q, &it));
  return it;
}

/* Take the next item, check its key, and finish it. */
static void take(apf_workqueue *q, const char *want) {
  apf_workqueue_item it = try_get(q);
  if (!key_is(&it, want)) {
    fprintf(stderr, "expected item %s, got result %u key %.*s\n", want,
            it.result, it.result == APF_WORKQUEUE_ITEM ? (int)it.key_len : 0,
            it.result == APF_WORKQUEUE_ITEM ? (const char *)it.key : "");
  }
  CHECK(key_is(&it, want));
  if (it.result == APF_WORKQUEUE_ITEM) {
    OK(apf_workqueue_done(q, it.item));
  }
}

static void check_empty(apf_workqueue *q) {
  apf_workqueue_item it = try_get(q);
  CHECK(it.result == APF_WORKQUEUE_EMPTY);
  CHECK(it.item == 0 && it.key == NULL);
}

/* The limiter a constructor made (read after the call: C leaves the order
 * of argument evaluation open). */
static apf_rate_limiter *must(apf_status s, apf_rate_limiter **l) {
  CHECK(s == APF_OK && *l != NULL);
  return *l;
}

/* ----- the workqueue rules ------------------------------------------------ */

static void test_dirty_and_processing(void) {
  apf_workqueue_kind kinds[] = {APF_WORKQUEUE_FIFO, APF_WORKQUEUE_TWO_LANE, APF_WORKQUEUE_PRIORITY};
  for (size_t k = 0; k < 3; k++) {
    apf_workqueue *q = new_queue(kinds[k], NULL, NULL);
    add(q, "a");
    add(q, "a");
    add(q, "b");
    CHECK(len(q) == 2); /* a queued once */
    apf_workqueue_item a = try_get(q);
    CHECK(key_is(&a, "a"));
    add(q, "a"); /* processing: queued again only after done */
    CHECK(len(q) == 1);
    apf_workqueue_item b = try_get(q);
    CHECK(key_is(&b, "b"));
    check_empty(q); /* never two workers on a */
    size_t processing = 0;
    OK(apf_workqueue_processing(q, &processing));
    CHECK(processing == 2);
    OK(apf_workqueue_done(q, a.item));
    CHECK(len(q) == 1);
    apf_workqueue_item a2 = try_get(q);
    CHECK(key_is(&a2, "a") && a2.item != a.item);
    OK(apf_workqueue_done(q, a2.item));
    OK(apf_workqueue_done(q, b.item));
    check_empty(q);
    apf_workqueue_free(q);
  }
}

static void test_binary_keys(void) {
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  const uint8_t bin[] = {0, 255, 0, 7};
  OK(apf_workqueue_add(q, bin, sizeof bin));
  OK(apf_workqueue_add(q, NULL, 0)); /* the empty key */
  apf_workqueue_item it = try_get(q);
  CHECK(it.result == APF_WORKQUEUE_ITEM && it.key_len == 4);
  apf_workqueue_item e = try_get(q);
  CHECK(e.result == APF_WORKQUEUE_ITEM && e.key_len == 0 && e.key != NULL);
  OK(apf_workqueue_done(q, e.item));
  /* Churn does not move our key: it is ours until done. */
  for (int i = 0; i < 100; i++) {
    add(q, "filler");
    take(q, "filler");
  }
  CHECK(memcmp(it.key, bin, sizeof bin) == 0);
  OK(apf_workqueue_done(q, it.item));
  apf_workqueue_free(q);
}

static void test_shutdown(void) {
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  add(q, "a");
  add(q, "b");
  apf_workqueue_item a = try_get(q);
  bool down = true;
  OK(apf_workqueue_shutting_down(q, &down));
  CHECK(!down);
  OK(apf_workqueue_shut_down(q));
  OK(apf_workqueue_shut_down(q)); /* twice is fine */
  OK(apf_workqueue_shutting_down(q, &down));
  CHECK(down);
  add(q, "c"); /* ignored */
  OK(apf_workqueue_add_after(q, (const uint8_t *)"d", 1, 0));
  OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"e", 1));
  CHECK(len(q) == 1);
  take(q, "b"); /* still handed out */
  apf_workqueue_item it;
  OK(apf_workqueue_get(q, UINT64_MAX, &it)); /* returns at once */
  CHECK(it.result == APF_WORKQUEUE_SHUT_DOWN && it.item == 0);
  OK(apf_workqueue_done(q, a.item));
  it = try_get(q);
  CHECK(it.result == APF_WORKQUEUE_SHUT_DOWN);
  CHECK(requeues(q, "e") == 0);
  apf_workqueue_free(q);
}

struct drain_arg {
  apf_workqueue *q;
  int drained;
};

static void *drain_thread(void *p) {
  struct drain_arg *arg = p;
  OK(apf_workqueue_shut_down_with_drain(arg->q));
  __atomic_store_n(&arg->drained, 1, __ATOMIC_SEQ_CST);
  return NULL;
}

static void test_shutdown_with_drain(void) {
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  add(q, "a");
  apf_workqueue_item a = try_get(q);
  struct drain_arg arg = {q, 0};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, drain_thread, &arg) == 0);
  bool down = false;
  while (!down) {
    OK(apf_workqueue_shutting_down(q, &down));
    sched_yield();
  }
  CHECK(__atomic_load_n(&arg.drained, __ATOMIC_SEQ_CST) == 0);
  OK(apf_workqueue_done(q, a.item)); /* now the drain can end */
  pthread_join(t, NULL);
  CHECK(arg.drained == 1);
  apf_workqueue_free(q);
}

struct getter {
  apf_workqueue *q;
  uint64_t timeout;
  uint32_t result;
};

static void *get_thread(void *p) {
  struct getter *g = p;
  apf_workqueue_item it;
  OK(apf_workqueue_get(g->q, g->timeout, &it));
  g->result = it.result;
  if (it.result == APF_WORKQUEUE_ITEM) {
    OK(apf_workqueue_done(g->q, it.item));
  }
  return NULL;
}

static void test_blocked_getters_wake(void) {
  /* By shutdown, then by free (whose blocked getters touch nothing freed). */
  for (int free_it = 0; free_it < 2; free_it++) {
    apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
    struct getter g[4];
    pthread_t t[4];
    for (int i = 0; i < 4; i++) {
      g[i] = (struct getter){q, i % 2 ? 3600 * SECOND : UINT64_MAX, 99};
      CHECK(pthread_create(&t[i], NULL, get_thread, &g[i]) == 0);
    }
    while (parked(q) < 4) {
      sched_yield();
    }
    if (free_it) {
      apf_workqueue_free(q);
    } else {
      OK(apf_workqueue_shut_down(q));
    }
    for (int i = 0; i < 4; i++) {
      pthread_join(t[i], NULL);
      CHECK(g[i].result == APF_WORKQUEUE_SHUT_DOWN);
    }
    if (!free_it) {
      apf_workqueue_free(q);
    }
  }
  /* A blocked getter receives an item added later. */
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  struct getter g = {q, UINT64_MAX, 99};
  pthread_t t;
  CHECK(pthread_create(&t, NULL, get_thread, &g) == 0);
  while (parked(q) < 1) {
    sched_yield();
  }
  add(q, "x");
  pthread_join(t, NULL);
  CHECK(g.result == APF_WORKQUEUE_ITEM);
  apf_workqueue_free(q);
}

static void test_get_timeout(void) {
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  apf_workqueue_item it;
  OK(apf_workqueue_get(q, 1 * MS, &it));
  CHECK(it.result == APF_WORKQUEUE_TIMED_OUT && it.item == 0);
  OK(apf_workqueue_get(q, 0, &it));
  CHECK(it.result == APF_WORKQUEUE_EMPTY);
  CHECK(parked(q) == 0);
  add(q, "a");
  OK(apf_workqueue_get(q, 1 * MS, &it));
  CHECK(key_is(&it, "a"));
  OK(apf_workqueue_done(q, it.item));
  apf_workqueue_free(q);
}

/* ----- delays and rate limiting ------------------------------------------ */

static void test_add_after(void) {
  apf_workqueue_kind kinds[] = {APF_WORKQUEUE_FIFO, APF_WORKQUEUE_TWO_LANE, APF_WORKQUEUE_PRIORITY};
  for (size_t k = 0; k < 3; k++) {
    apf_workqueue *q = new_queue(kinds[k], NULL, NULL);
    OK(apf_workqueue_add_after(q, (const uint8_t *)"a", 1, 10 * MS));
    OK(apf_workqueue_add_after(q, (const uint8_t *)"a", 1, 5 * MS));
    OK(apf_workqueue_add_after(q, (const uint8_t *)"a", 1, 20 * MS));
    OK(apf_workqueue_add_after(q, (const uint8_t *)"now", 3, 0));
    CHECK(waiting(q) == 1);
    take(q, "now");
    OK(apf_workqueue_advance_clock(q, 5 * MS - 1));
    check_empty(q);
    OK(apf_workqueue_advance_clock(q, 1));
    take(q, "a"); /* the earliest time won */
    OK(apf_workqueue_advance_clock(q, 20 * MS));
    check_empty(q);
    /* Shutdown ends waits. */
    OK(apf_workqueue_add_after(q, (const uint8_t *)"b", 1, SECOND));
    OK(apf_workqueue_shut_down(q));
    CHECK(waiting(q) == 0);
    apf_workqueue_free(q);
  }
}

static void test_exponential(void) {
  apf_rate_limiter *l = NULL;
  l = must(apf_rate_limiter_new_exponential(MS, 8 * MS, &l, err()), &l);
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, l);
  apf_rate_limiter_free(l); /* the queue has its own copy */
  uint64_t delays[] = {MS, 2 * MS, 4 * MS, 8 * MS, 8 * MS};
  for (uint32_t n = 0; n < 5; n++) {
    OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"a", 1));
    CHECK(requeues(q, "a") == n + 1);
    OK(apf_workqueue_advance_clock(q, delays[n] - 1));
    check_empty(q);
    OK(apf_workqueue_advance_clock(q, 1));
    take(q, "a");
  }
  OK(apf_workqueue_forget(q, (const uint8_t *)"a", 1));
  CHECK(requeues(q, "a") == 0);
  OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"a", 1));
  OK(apf_workqueue_advance_clock(q, MS));
  take(q, "a");
  apf_workqueue_free(q);
}

static void test_token_buckets(void) {
  apf_rate_limiter *l = NULL;
  l = must(apf_rate_limiter_new_token_bucket(10.0, 2, &l, err()), &l);
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, l);
  apf_rate_limiter_free(l);
  OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"a", 1));
  OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"b", 1));
  OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"c", 1));
  CHECK(len(q) == 2 && waiting(q) == 1);
  CHECK(requeues(q, "a") == 0); /* a shared bucket counts no item */
  OK(apf_workqueue_advance_clock(q, 100 * MS));
  CHECK(len(q) == 3);
  apf_workqueue_free(q);

  l = NULL;
  l = must(apf_rate_limiter_new_item_token_bucket(1.0, 1, &l, err()), &l);
  q = new_queue(APF_WORKQUEUE_FIFO, NULL, l);
  apf_rate_limiter_free(l);
  OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"a", 1));
  OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"b", 1));
  CHECK(len(q) == 2); /* a bucket per key */
  take(q, "a");
  OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"a", 1));
  CHECK(waiting(q) == 1);
  OK(apf_workqueue_advance_clock(q, SECOND));
  CHECK(waiting(q) == 0);
  apf_workqueue_free(q);
}

static void test_fast_slow_and_max_of(void) {
  apf_rate_limiter *l = NULL;
  l = must(apf_rate_limiter_new_fast_slow(MS, SECOND, 2, &l, err()), &l);
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, l);
  apf_rate_limiter_free(l);
  uint64_t delays[] = {MS, MS, SECOND, SECOND};
  for (int n = 0; n < 4; n++) {
    OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"a", 1));
    OK(apf_workqueue_advance_clock(q, delays[n] - 1));
    CHECK(len(q) == 0);
    OK(apf_workqueue_advance_clock(q, 1));
    take(q, "a");
  }
  CHECK(requeues(q, "a") == 4);
  apf_workqueue_free(q);

  apf_rate_limiter *exp = NULL, *flat = NULL, *max = NULL;
  exp = must(apf_rate_limiter_new_exponential(MS, SECOND, &exp, err()), &exp);
  flat = must(apf_rate_limiter_new_fast_slow(3 * MS, 3 * MS, 0, &flat, err()), &flat);
  const apf_rate_limiter *parts[] = {exp, flat};
  max = must(apf_rate_limiter_new_max_of(parts, 2, &max, err()), &max);
  apf_rate_limiter_free(exp); /* max_of copied them */
  apf_rate_limiter_free(flat);
  q = new_queue(APF_WORKQUEUE_FIFO, NULL, max);
  apf_rate_limiter_free(max);
  uint64_t max_delays[] = {3 * MS, 3 * MS, 4 * MS, 8 * MS};
  for (int n = 0; n < 4; n++) {
    OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"a", 1));
    OK(apf_workqueue_advance_clock(q, max_delays[n] - 1));
    CHECK(len(q) == 0);
    OK(apf_workqueue_advance_clock(q, 1));
    take(q, "a");
  }
  CHECK(requeues(q, "a") == 4);
  apf_workqueue_free(q);
}

static void test_default_limiter(void) {
  /* Explicit and NULL: 5 ms doubling per key, a 10 qps / 100 bucket. */
  for (int explicit_limiter = 0; explicit_limiter < 2; explicit_limiter++) {
    apf_rate_limiter *l = NULL;
    if (explicit_limiter) {
      l = must(apf_rate_limiter_new_default(&l), &l);
    }
    apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, l);
    apf_rate_limiter_free(l); /* NULL is a no-op */
    OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"a", 1));
    OK(apf_workqueue_advance_clock(q, 5 * MS - 1));
    CHECK(len(q) == 0);
    OK(apf_workqueue_advance_clock(q, 1));
    take(q, "a");
    char key[16];
    for (int i = 0; i < 120; i++) {
      snprintf(key, sizeof key, "k%d", i);
      OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)key, strlen(key)));
    }
    OK(apf_workqueue_advance_clock(q, 5 * MS));
    CHECK(len(q) == 99); /* the burst, less the token a spent */
    OK(apf_workqueue_advance_clock(q, 2100 * MS));
    CHECK(len(q) == 120);
    apf_workqueue_free(q);
  }
}

static void test_bad_limiter_parameters(void) {
  apf_rate_limiter *l = NULL;
  CHECK_STATUS(apf_rate_limiter_new_token_bucket(0.0, 1, &l, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(strstr(last_error(), "qps") != NULL);
  CHECK_STATUS(apf_rate_limiter_new_token_bucket(-2.0, 1, &l, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK_STATUS(apf_rate_limiter_new_token_bucket(NAN, 1, &l, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(strstr(last_error(), "qps") != NULL);
  CHECK_STATUS(apf_rate_limiter_new_token_bucket(5.0, 0, &l, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(strstr(last_error(), "burst") != NULL);
  CHECK_STATUS(apf_rate_limiter_new_item_token_bucket(NAN, 1, &l, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK_STATUS(apf_rate_limiter_new_item_token_bucket(1.0, 0, &l, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK_STATUS(apf_rate_limiter_new_exponential(2 * MS, MS, &l, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(strstr(last_error(), "base_nanos") != NULL);
  CHECK_STATUS(apf_rate_limiter_new_fast_slow(2 * MS, MS, 3, &l, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(strstr(last_error(), "fast_nanos") != NULL);
  CHECK_STATUS(apf_rate_limiter_new_max_of(NULL, 0, &l, err()),
               APF_ERR_INVALID_PARAMETER);
  CHECK(l == NULL); /* never written on error */
  const apf_rate_limiter *nulls[] = {NULL};
  CHECK_STATUS(apf_rate_limiter_new_max_of(nulls, 1, &l, err()), APF_ERR_NULL_POINTER);
  CHECK(strstr(last_error(), "limiters[0]") != NULL);
  CHECK_STATUS(apf_rate_limiter_new_max_of(NULL, 2, &l, err()), APF_ERR_NULL_POINTER);
  /* +INFINITY: no limit (and then a burst of 0 is fine). */
  apf_rate_limiter *inf = NULL;
  inf = must(apf_rate_limiter_new_token_bucket(INFINITY, 0, &inf, err()), &inf);
  /* Nesting max_of is bounded at 16 levels. */
  apf_rate_limiter *nested = inf;
  for (int depth = 1; depth <= 20; depth++) {
    const apf_rate_limiter *one[] = {nested};
    apf_rate_limiter *next = NULL;
    apf_status s = apf_rate_limiter_new_max_of(one, 1, &next, err());
    if (depth <= 15) {
      CHECK(s == APF_OK);
      apf_rate_limiter_free(nested);
      nested = next;
    } else {
      CHECK(s == APF_ERR_INVALID_PARAMETER && next == NULL);
    }
  }
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, nested);
  apf_rate_limiter_free(nested);
  OK(apf_workqueue_add_rate_limited(q, (const uint8_t *)"a", 1));
  CHECK(len(q) == 1);
  apf_workqueue_free(q);
}

/* ----- two lanes ---------------------------------------------------------- */

static void test_two_lanes(void) {
  apf_workqueue *q = new_queue(APF_WORKQUEUE_TWO_LANE, NULL, NULL);
  apf_workqueue_add_options slow = plain();
  slow.lane = APF_WORKQUEUE_LANE_SLOW;
  apf_workqueue_add_options fast = plain();
  OK(add_opts(q, "s1", slow));
  OK(add_opts(q, "s2", slow));
  add(q, "f1");
  OK(add_opts(q, "f2", fast));
  size_t nf = 0, ns = 0;
  OK(apf_workqueue_lane_len(q, APF_WORKQUEUE_LANE_FAST, &nf));
  OK(apf_workqueue_lane_len(q, APF_WORKQUEUE_LANE_SLOW, &ns));
  CHECK(nf == 2 && ns == 2);
  OK(add_opts(q, "s2", fast)); /* moves to the back of the fast lane */
  OK(add_opts(q, "f1", slow)); /* moves to the back of the slow lane */
  const char *want[] = {"f2", "s2", "s1", "f1"};
  uint32_t want_lane[] = {APF_WORKQUEUE_LANE_FAST, APF_WORKQUEUE_LANE_FAST, APF_WORKQUEUE_LANE_SLOW,
                          APF_WORKQUEUE_LANE_SLOW};
  for (int i = 0; i < 4; i++) {
    apf_workqueue_item it = try_get(q);
    CHECK(key_is(&it, want[i]) && it.lane == want_lane[i]);
    OK(apf_workqueue_done(q, it.item));
  }
  /* Slow items never block fast ones, even while processing. */
  OK(add_opts(q, "slow", slow));
  apf_workqueue_item s = try_get(q);
  CHECK(key_is(&s, "slow"));
  add(q, "fast");
  OK(add_opts(q, "slow2", slow));
  apf_workqueue_item f = try_get(q);
  CHECK(key_is(&f, "fast") && f.lane == APF_WORKQUEUE_LANE_FAST);
  OK(apf_workqueue_done(q, f.item));
  OK(apf_workqueue_done(q, s.item));
  take(q, "slow2");
  /* A delayed add keeps its lane. */
  apf_workqueue_add_options later = slow;
  later.after_nanos = MS;
  OK(add_opts(q, "later", later));
  OK(apf_workqueue_advance_clock(q, MS));
  apf_workqueue_item l = try_get(q);
  CHECK(key_is(&l, "later") && l.lane == APF_WORKQUEUE_LANE_SLOW);
  OK(apf_workqueue_done(q, l.item));
  /* An unknown lane. */
  apf_workqueue_add_options bad = plain();
  bad.lane = 7;
  CHECK_STATUS(add_opts(q, "x", bad), APF_ERR_INVALID_PARAMETER);
  CHECK_STATUS(apf_workqueue_lane_len(q, 7, &nf), APF_ERR_INVALID_PARAMETER);
  apf_workqueue_free(q);
}

static void test_wrong_kind(void) {
  apf_workqueue_add_options slow = plain();
  slow.lane = APF_WORKQUEUE_LANE_SLOW;
  apf_workqueue_add_options prio = plain();
  prio.has_priority = true;
  prio.priority = 3;
  apf_workqueue *fifo = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  CHECK_STATUS(add_opts(fifo, "a", slow), APF_ERR_WORKQUEUE_WRONG_KIND);
  CHECK_STATUS(add_opts(fifo, "a", prio), APF_ERR_WORKQUEUE_WRONG_KIND);
  CHECK(len(fifo) == 0);
  size_t n;
  CHECK_STATUS(apf_workqueue_lane_len(fifo, APF_WORKQUEUE_LANE_FAST, &n),
               APF_ERR_WORKQUEUE_WRONG_KIND);
  apf_workqueue *lanes = new_queue(APF_WORKQUEUE_TWO_LANE, NULL, NULL);
  CHECK_STATUS(add_opts(lanes, "a", prio), APF_ERR_WORKQUEUE_WRONG_KIND);
  apf_workqueue *pq = new_queue(APF_WORKQUEUE_PRIORITY, NULL, NULL);
  CHECK_STATUS(add_opts(pq, "a", slow), APF_ERR_WORKQUEUE_WRONG_KIND);
  apf_workqueue_free(fifo);
  apf_workqueue_free(lanes);
  apf_workqueue_free(pq);
  apf_workqueue_options o;
  OK(apf_workqueue_options_default(&o));
  o.kind = 9;
  apf_workqueue *q = NULL;
  CHECK_STATUS(apf_workqueue_new(&o, &q, err()), APF_ERR_INVALID_PARAMETER);
  CHECK(q == NULL);
  const char *text = NULL;
  size_t text_len = 0;
  OK(apf_status_text(APF_ERR_WORKQUEUE_WRONG_KIND, &text, &text_len));
  CHECK(APF_ERR_WORKQUEUE_WRONG_KIND == 7014 && text_len > 0);
}

/* ----- priorities --------------------------------------------------------- */

static apf_workqueue_add_options prio(int32_t p, uint64_t after) {
  apf_workqueue_add_options o = plain();
  o.has_priority = true;
  o.priority = p;
  o.after_nanos = after;
  return o;
}

static void test_priorities(void) {
  apf_workqueue *q = new_queue(APF_WORKQUEUE_PRIORITY, NULL, NULL);
  OK(add_opts(q, "low1", prio(-1, 0)));
  OK(add_opts(q, "mid1", prio(0, 0)));
  OK(add_opts(q, "high1", prio(5, 0)));
  OK(add_opts(q, "mid2", prio(0, 0)));
  OK(add_opts(q, "high2", prio(5, 0)));
  add(q, "mid3");
  const char *want[] = {"high1", "high2", "mid1", "mid2", "mid3", "low1"};
  int32_t want_p[] = {5, 5, 0, 0, 0, -1};
  for (int i = 0; i < 6; i++) {
    apf_workqueue_item it = try_get(q);
    CHECK(key_is(&it, want[i]) && it.priority == want_p[i]);
    OK(apf_workqueue_done(q, it.item));
  }
  /* Duplicates: the highest priority and the shortest delay win; a waiting
   * item is never handed out (nor counted) before its time. */
  OK(add_opts(q, "a", prio(1, 10 * MS)));
  OK(add_opts(q, "a", prio(7, 30 * MS)));
  OK(add_opts(q, "a", prio(3, 5 * MS)));
  OK(add_opts(q, "b", prio(2, 0)));
  CHECK(waiting(q) == 1 && len(q) == 1);
  apf_workqueue_item b = try_get(q);
  CHECK(key_is(&b, "b"));
  check_empty(q);
  OK(apf_workqueue_done(q, b.item));
  OK(apf_workqueue_advance_clock(q, 5 * MS));
  apf_workqueue_item a = try_get(q);
  CHECK(key_is(&a, "a") && a.priority == 7);
  OK(apf_workqueue_done(q, a.item));
  /* A ready add ends a wait; raising a queued priority moves the item. */
  OK(add_opts(q, "c", prio(0, SECOND)));
  OK(add_opts(q, "d", prio(1, 0)));
  OK(add_opts(q, "c", prio(0, 0)));
  CHECK(waiting(q) == 0);
  OK(add_opts(q, "c", prio(2, 0)));
  take(q, "c");
  take(q, "d");
  apf_workqueue_free(q);

  /* Rate limited with a priority; a shorter `after` caps the delay. */
  apf_rate_limiter *l = NULL;
  l = must(apf_rate_limiter_new_fast_slow(SECOND, SECOND, 1, &l, err()), &l);
  q = new_queue(APF_WORKQUEUE_PRIORITY, NULL, l);
  apf_rate_limiter_free(l);
  apf_workqueue_add_options rl = prio(4, 0);
  rl.rate_limited = true;
  OK(add_opts(q, "a", rl));
  CHECK(requeues(q, "a") == 1);
  OK(apf_workqueue_advance_clock(q, SECOND - 1));
  CHECK(len(q) == 0);
  OK(apf_workqueue_advance_clock(q, 1));
  a = try_get(q);
  CHECK(key_is(&a, "a") && a.priority == 4);
  OK(apf_workqueue_done(q, a.item));
  rl.after_nanos = MS;
  OK(add_opts(q, "a", rl));
  OK(apf_workqueue_advance_clock(q, MS));
  take(q, "a");
  apf_workqueue_free(q);
}

/* ----- metrics ------------------------------------------------------------ */

/* The metrics as a malloc'd copy of the owned apf_text. */
static char *metrics(apf_workqueue *q) {
  apf_text t = {0};
  OK(apf_workqueue_metrics_text(q, &t));
  CHECK(t.ptr != NULL && t.ptr[t.len] == '\0');
  char *copy = malloc(t.len + 1);
  memcpy(copy, t.ptr, t.len + 1);
  apf_text_free(&t);
  return copy;
}

static void test_metrics(void) {
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, "controller-x", NULL);
  add(q, "a");
  add(q, "b");
  apf_workqueue_item a = try_get(q);
  OK(apf_workqueue_advance_clock(q, 2 * SECOND));
  OK(apf_workqueue_add_after(q, (const uint8_t *)"c", 1, MS));
  char *text = metrics(q);
  const char *series[] = {
      "workqueue_depth{name=\"controller-x\"} 1",
      "workqueue_adds_total{name=\"controller-x\"} 2",
      "workqueue_retries_total{name=\"controller-x\"} 1",
      "workqueue_queue_duration_seconds_bucket",
      "workqueue_unfinished_work_seconds{name=\"controller-x\"} 2",
      "workqueue_longest_running_processor_seconds{name=\"controller-x\"} 2",
      "# EOF\n",
  };
  for (size_t i = 0; i < sizeof series / sizeof *series; i++) {
    if (strstr(text, series[i]) == NULL) {
      fprintf(stderr, "metrics lack %s:\n%s\n", series[i], text);
    }
    CHECK(strstr(text, series[i]) != NULL);
  }
  free(text);
  OK(apf_workqueue_done(q, a.item));
  text = metrics(q);
  CHECK(strstr(text, "workqueue_work_duration_seconds_count{name=\"controller-x\"} 1") != NULL);
  free(text);
  /* A struct not set up by its _default function is refused. */
  apf_workqueue_add_options unset = plain();
  unset.struct_size = 0;
  CHECK_STATUS(add_opts(q, "z", unset), APF_ERR_INVALID_PARAMETER);
  apf_workqueue_free(q);
  /* Unnamed: no series, as in client-go. */
  q = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  add(q, "a");
  text = metrics(q);
  CHECK(strstr(text, "workqueue_") == NULL);
  free(text);
  apf_workqueue_free(q);
  /* A name that is not UTF-8. */
  apf_workqueue_options o;
  OK(apf_workqueue_options_default(&o));
  o.name = "\xff\xfe";
  o.name_len = 2;
  CHECK_STATUS(apf_workqueue_new(&o, &q, err()), APF_ERR_INVALID_UTF8);
}

/* ----- handles, NULLs, panics, clocks ------------------------------------ */

static void test_handles(void) {
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  apf_workqueue *other = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  add(q, "a");
  add(other, "a");
  apf_workqueue_item a = try_get(q);
  apf_workqueue_item theirs = try_get(other);
  CHECK_STATUS(apf_workqueue_done(q, 0), APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_workqueue_done(q, a.item ^ (1ull << 40)), APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_workqueue_done(q, UINT64_MAX), APF_ERR_INVALID_HANDLE);
  CHECK_STATUS(apf_workqueue_done(q, theirs.item), APF_ERR_INVALID_HANDLE);
  OK(apf_workqueue_done(q, a.item));
  CHECK_STATUS(apf_workqueue_done(q, a.item), APF_ERR_INVALID_HANDLE); /* twice */
  add(q, "b");
  apf_workqueue_item b = try_get(q);
  CHECK_STATUS(apf_workqueue_done(q, a.item), APF_ERR_INVALID_HANDLE); /* reused */
  OK(apf_workqueue_done(q, b.item));
  OK(apf_workqueue_done(other, theirs.item));
  apf_workqueue_free(q);
  apf_workqueue_free(other);
}

static void test_nulls(void) {
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  apf_workqueue_item it;
  size_t n;
  uint32_t u;
  bool b;
  const apf_status E = APF_ERR_NULL_POINTER;
  CHECK_STATUS(apf_workqueue_options_default(NULL), E);
  CHECK_STATUS(apf_workqueue_new(NULL, NULL, err()), E);
  CHECK_STATUS(apf_workqueue_add(NULL, (const uint8_t *)"a", 1), E);
  CHECK_STATUS(apf_workqueue_add(q, NULL, 1), E);
  CHECK_STATUS(apf_workqueue_add_with_options(NULL, NULL, 0, NULL), E);
  CHECK_STATUS(apf_workqueue_add_after(NULL, NULL, 0, 1), E);
  CHECK_STATUS(apf_workqueue_add_rate_limited(NULL, NULL, 0), E);
  CHECK_STATUS(apf_workqueue_get(NULL, 0, &it), E);
  CHECK_STATUS(apf_workqueue_get(q, 0, NULL), E);
  CHECK_STATUS(apf_workqueue_try_get(NULL, &it), E);
  CHECK_STATUS(apf_workqueue_try_get(q, NULL), E);
  CHECK_STATUS(apf_workqueue_done(NULL, 1), E);
  CHECK_STATUS(apf_workqueue_forget(NULL, NULL, 0), E);
  CHECK_STATUS(apf_workqueue_num_requeues(NULL, NULL, 0, &u), E);
  CHECK_STATUS(apf_workqueue_num_requeues(q, NULL, 0, NULL), E);
  CHECK_STATUS(apf_workqueue_len(NULL, &n), E);
  CHECK_STATUS(apf_workqueue_len(q, NULL), E);
  CHECK_STATUS(apf_workqueue_waiting_len(NULL, &n), E);
  CHECK_STATUS(apf_workqueue_lane_len(NULL, 0, &n), E);
  CHECK_STATUS(apf_workqueue_processing(NULL, &n), E);
  CHECK_STATUS(apf_workqueue_shut_down(NULL), E);
  CHECK_STATUS(apf_workqueue_shut_down_with_drain(NULL), E);
  CHECK_STATUS(apf_workqueue_shutting_down(NULL, &b), E);
  CHECK_STATUS(apf_workqueue_shutting_down(q, NULL), E);
  CHECK_STATUS(apf_workqueue_advance_clock(NULL, 1), E);
  apf_text t = {0};
  CHECK_STATUS(apf_workqueue_metrics_text(NULL, &t), E);
  CHECK_STATUS(apf_workqueue_metrics_text(q, NULL), E);
  CHECK(t.ptr == NULL);
  CHECK_STATUS(apf_workqueue_add_options_default(NULL), E);
  CHECK_STATUS(apf_rate_limiter_new_default(NULL), E);
  CHECK_STATUS(apf_rate_limiter_new_token_bucket(1.0, 1, NULL, err()), E);
  apf_workqueue_free(NULL);
  apf_rate_limiter_free(NULL);
  /* NULL options and opts: the defaults. */
  apf_workqueue *d = NULL;
  OK(apf_workqueue_new(NULL, &d, err()));
  OK(apf_workqueue_add_with_options(d, (const uint8_t *)"a", 1, NULL));
  CHECK(len(d) == 1);
  CHECK_STATUS(apf_workqueue_advance_clock(d, 1), APF_ERR_NOT_MANUAL_CLOCK);
  apf_workqueue_free(d);
  CHECK(len(q) == 0);
  apf_workqueue_free(q);
}

static void test_panic_boundary(void) {
  apf_workqueue *q = new_queue(APF_WORKQUEUE_FIFO, NULL, NULL);
  add(q, "a");
  apf_workqueue_item a = try_get(q);
  CHECK_STATUS(apf_workqueue_test_panic(NULL), APF_ERR_PANIC);
  CHECK_STATUS(apf_workqueue_test_panic(q), APF_ERR_PANIC);
  /* Still usable, including the lock the panic poisoned. */
  add(q, "b");
  apf_workqueue_item b = try_get(q);
  CHECK(key_is(&b, "b"));
  OK(apf_workqueue_done(q, a.item));
  OK(apf_workqueue_done(q, b.item));
  check_empty(q);
  apf_workqueue_free(q);
}

static void test_real_clock(void) {
  apf_workqueue_options o;
  OK(apf_workqueue_options_default(&o));
  apf_workqueue *q = NULL;
  OK(apf_workqueue_new(&o, &q, err()));
  CHECK_STATUS(apf_workqueue_advance_clock(q, 1), APF_ERR_NOT_MANUAL_CLOCK);
  OK(apf_workqueue_add_after(q, (const uint8_t *)"a", 1, MS));
  apf_workqueue_item it;
  OK(apf_workqueue_get(q, 10 * SECOND, &it));
  CHECK(key_is(&it, "a"));
  OK(apf_workqueue_done(q, it.item));
  apf_workqueue_free(q);
}

/* ----- pthreads: producers and consumers --------------------------------- */

enum { PRODUCERS = 4, CONSUMERS = 6, ADDS = 4000, KEYS = 64 };

struct shared {
  apf_workqueue *q;
  apf_workqueue_kind kind;
  /* Per key: workers processing it now (must never exceed 1), times
   * processed. */
  int busy[KEYS];
  int processed[KEYS];
};

static int key_index(const apf_workqueue_item *it) {
  char buf[16];
  if (it->key_len == 0 || it->key_len >= sizeof buf) {
    return -1;
  }
  memcpy(buf, it->key, it->key_len);
  buf[it->key_len] = '\0';
  return atoi(buf + 1);
}

struct consumer_arg {
  struct shared *s;
  int id;
};

static void *consumer(void *p) {
  struct consumer_arg *arg = p;
  struct shared *s = arg->s;
  for (;;) {
    apf_workqueue_item it;
    /* Mix the forms: block forever, block with a timeout, poll. */
    uint64_t timeout = arg->id % 3 == 0 ? UINT64_MAX : arg->id % 3 == 1 ? MS : 0;
    OK(apf_workqueue_get(s->q, timeout, &it));
    if (it.result == APF_WORKQUEUE_SHUT_DOWN) {
      return NULL;
    }
    if (it.result != APF_WORKQUEUE_ITEM) {
      sched_yield();
      continue;
    }
    int k = key_index(&it);
    CHECK(k >= 0 && k < KEYS);
    if (k >= 0 && k < KEYS) {
      int before = __atomic_fetch_add(&s->busy[k], 1, __ATOMIC_SEQ_CST);
      CHECK(before == 0); /* never two workers on one key */
      __atomic_add_fetch(&s->processed[k], 1, __ATOMIC_SEQ_CST);
      __atomic_sub_fetch(&s->busy[k], 1, __ATOMIC_SEQ_CST);
    }
    OK(apf_workqueue_done(s->q, it.item));
  }
}

struct producer_arg {
  struct shared *s;
  int id;
};

static void *producer(void *p) {
  struct producer_arg *arg = p;
  struct shared *s = arg->s;
  char key[16];
  for (int i = 0; i < ADDS; i++) {
    int n = snprintf(key, sizeof key, "k%d", (i * PRODUCERS + arg->id) % KEYS);
    apf_workqueue_add_options o = plain();
    if (s->kind == APF_WORKQUEUE_TWO_LANE && i % 3 == 1) {
      o.lane = APF_WORKQUEUE_LANE_SLOW;
    }
    if (s->kind == APF_WORKQUEUE_PRIORITY) {
      o.has_priority = true;
      o.priority = i % 5;
    }
    OK(apf_workqueue_add_with_options(s->q, (const uint8_t *)key, (size_t)n, &o));
  }
  return NULL;
}

static void test_threads(void) {
  apf_workqueue_kind kinds[] = {APF_WORKQUEUE_FIFO, APF_WORKQUEUE_TWO_LANE, APF_WORKQUEUE_PRIORITY};
  for (size_t k = 0; k < 3; k++) {
    static struct shared s;
    memset(&s, 0, sizeof s);
    s.kind = kinds[k];
    s.q = new_queue(kinds[k], NULL, NULL);
    pthread_t c[CONSUMERS], p[PRODUCERS];
    struct consumer_arg ca[CONSUMERS];
    struct producer_arg pa[PRODUCERS];
    for (int i = 0; i < CONSUMERS; i++) {
      ca[i] = (struct consumer_arg){&s, i};
      CHECK(pthread_create(&c[i], NULL, consumer, &ca[i]) == 0);
    }
    for (int i = 0; i < PRODUCERS; i++) {
      pa[i] = (struct producer_arg){&s, i};
      CHECK(pthread_create(&p[i], NULL, producer, &pa[i]) == 0);
    }
    for (int i = 0; i < PRODUCERS; i++) {
      pthread_join(p[i], NULL);
    }
    /* Every key's last add came after any earlier get of it: each must be
     * processed once more. The drain waits for items in processing;
     * consumers then empty the queue and see APF_WORKQUEUE_SHUT_DOWN. */
    OK(apf_workqueue_shut_down_with_drain(s.q));
    for (int i = 0; i < CONSUMERS; i++) {
      pthread_join(c[i], NULL);
    }
    int seen = 0;
    for (int i = 0; i < KEYS; i++) {
      seen += s.processed[i] > 0;
    }
    CHECK(seen == KEYS);
    CHECK(len(s.q) == 0);
    size_t processing = 1;
    OK(apf_workqueue_processing(s.q, &processing));
    CHECK(processing == 0);
    apf_workqueue_free(s.q);
  }
}

int main(void) {
  test_dirty_and_processing();
  test_binary_keys();
  test_shutdown();
  test_shutdown_with_drain();
  test_blocked_getters_wake();
  test_get_timeout();
  test_add_after();
  test_exponential();
  test_token_buckets();
  test_fast_slow_and_max_of();
  test_default_limiter();
  test_bad_limiter_parameters();
  test_two_lanes();
  test_wrong_kind();
  test_priorities();
  test_metrics();
  test_handles();
  test_nulls();
  test_panic_boundary();
  test_real_clock();
  test_threads();
  if (failures) {
    fprintf(stderr, "test_wq: %d of %d checks failed\n", failures, checks);
    return 1;
  }
  printf("test_wq: all %d checks passed\n", checks);
  return 0;
}
