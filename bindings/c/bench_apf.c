/*
 * start+finish through the C ABI, uncontended (one thread) and in parallel
 * (two threads), on the built-in configuration: the C figure to compare
 * with the Rust one (benches/ffi.rs runs both in one criterion group).
 *
 *   bindings/c/run-tests.sh builds it; run target/c-binding/bench_apf [N]
 */
#define _POSIX_C_SOURCE 200809L

#include "apf.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static apf_dispatcher *d;
static long iterations = 2000000;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const apf_str GROUPS[] = {
    {"system:serviceaccounts", 22},
    {"system:serviceaccounts:shop", 27},
    {"system:authenticated", 20},
};

static apf_request_digest digest(void) {
  apf_request_digest dg;
  memset(&dg, 0, sizeof dg);
  dg.user = "system:serviceaccount:shop:frontend";
  dg.user_len = strlen(dg.user);
  dg.groups = GROUPS;
  dg.n_groups = 3;
  dg.verb = "get";
  dg.verb_len = 3;
  dg.is_resource_request = true;
  dg.resource = "configmaps";
  dg.resource_len = strlen(dg.resource);
  dg.namespace_ = "shop";
  dg.namespace_len = 4;
  dg.name = "settings";
  dg.name_len = 8;
  dg.path = "/api/v1/namespaces/shop/configmaps/settings";
  dg.path_len = strlen(dg.path);
  return dg;
}

static void *loop(void *arg) {
  (void)arg;
  apf_request_digest dg = digest();
  apf_work_estimate one = {1, 0, 0};
  for (long i = 0; i < iterations; i++) {
    apf_decision dec;
    if (apf_start_request(d, &dg, &one, 0, &dec) != APF_OK ||
        dec.outcome != APF_OUTCOME_EXECUTE ||
        apf_finish(d, dec.request, 0) != APF_OK) {
      fprintf(stderr, "bench_apf: unexpected status or outcome\n");
      exit(1);
    }
  }
  return NULL;
}

static void run(int threads) {
  pthread_t t[16];
  uint64_t t0 = now_ns();
  for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, loop, NULL);
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  double ns = (double)(now_ns() - t0);
  printf("start+finish, %d thread%s: %.1f ns per request (wall / requests "
         "per thread)\n",
         threads, threads == 1 ? "" : "s", ns / (double)iterations);
}

int main(int argc, char **argv) {
  if (argc > 1) iterations = atol(argv[1]);
  if (apf_dispatcher_new_builtin(NULL, &d, NULL) != APF_OK) return 1;
  loop(NULL); /* warm up */
  run(1);
  run(2);
  apf_dispatcher_free(d);
  return 0;
}
