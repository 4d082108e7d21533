/*
 * start+finish through the C ABI in a loop on the built-in configuration,
 * for callgrind (docs/adaptive-limit.md, "Hot path"): the instructions of
 * apf_finish alone, with the adaptive limit off or on, are
 *
 *   valgrind --tool=callgrind --toggle-collect=apf_finish \
 *     target/c-binding/profile_finish N [fixed|adaptive] [SEATS] [cost]
 *
 * at two N, differenced. `fixed` (default) runs a fixed total of SEATS
 * (default 600); with `cost` each request finishes with
 * apf_finish_with_cost (cost 1: toggle-collect that function instead);
 * `adaptive` the adaptive limit with its defaults (the total
 * stays at min_limit, 8: one request at a time is app-limited), whose
 * updates run on libapf's timer thread, outside apf_finish. Built with
 * -DPROFILE_NO_ADAPTIVE against a header without the adaptive limit.
 */
#include "apf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const apf_str GROUPS[] = {
    {"system:serviceaccounts", 22},
    {"system:serviceaccounts:shop", 27},
    {"system:authenticated", 20},
};

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 1000000;
  const char *mode = argc > 2 ? argv[2] : "fixed";
  int with_cost = argc > 4 && strcmp(argv[4], "cost") == 0;
  apf_dispatcher_options o;
  if (apf_dispatcher_options_default(&o) != APF_OK) return 1;
  if (argc > 3 && atol(argv[3]) > 0) o.server_concurrency_limit = (uint32_t)atol(argv[3]);
#ifndef PROFILE_NO_ADAPTIVE
  apf_adaptive_options a;
  if (apf_adaptive_options_default(&a) != APF_OK) return 1;
  if (strcmp(mode, "adaptive") == 0) o.adaptive = &a;
#else
  if (strcmp(mode, "adaptive") == 0) {
    fprintf(stderr, "profile_finish: built without the adaptive limit\n");
    return 2;
  }
#endif
  apf_dispatcher *d;
  apf_error *err = NULL;
  if (apf_dispatcher_new_builtin(&o, &d, &err) != APF_OK) {
    const char *msg = "";
    size_t len = 0;
    apf_error_message(err, &msg, &len);
    fprintf(stderr, "profile_finish: %s\n", msg);
    apf_error_free(err);
    return 1;
  }
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
  apf_work_estimate one = {1, 0, 0};
  for (long i = 0; i < n; i++) {
    apf_decision dec;
    if (apf_start_request(d, &dg, &one, 0, &dec) != APF_OK ||
        dec.outcome != APF_OUTCOME_EXECUTE ||
        (with_cost ? apf_finish_with_cost(d, dec.request, 0, 1.0)
                   : apf_finish(d, dec.request, 0)) != APF_OK) {
      fprintf(stderr, "profile_finish: unexpected status or outcome\n");
      return 1;
    }
  }
  apf_dispatcher_free(d);
  return 0;
}
