/* Built by scripts/install-checks.sh outside the repository with only
 * `pkg-config --cflags --libs apf`: one request through the installed
 * library, one workqueue item, and the metrics as an owned text. */
#include <apf.h>
#include <stdio.h>
#include <string.h>

#define TRY(call)                                                   \
  do {                                                              \
    apf_status s_ = (call);                                         \
    if (s_ != APF_OK) {                                             \
      fprintf(stderr, "%s failed: %u\n", #call, (unsigned)s_);      \
      return 1;                                                     \
    }                                                               \
  } while (0)

int main(void) {
  if (apf_abi_version() != APF_VERSION_NUMBER) return 1;
  apf_dispatcher *d = NULL;
  TRY(apf_dispatcher_new_builtin(NULL, &d, NULL));
  apf_request_digest digest;
  memset(&digest, 0, sizeof digest);
  digest.user = "alice";
  digest.user_len = 5;
  digest.verb = "get";
  digest.verb_len = 3;
  digest.path = "/healthz";
  digest.path_len = 8;
  apf_decision dec;
  TRY(apf_start_request(d, &digest, NULL, 0, &dec));
  if (dec.outcome != APF_OUTCOME_EXECUTE) return 1;
  TRY(apf_finish(d, dec.request, 0));
  apf_text metrics = {0};
  TRY(apf_dispatcher_metrics_text(d, &metrics));
  int ok = strstr(metrics.ptr, "apiserver_flowcontrol_dispatched_requests_total") != NULL;
  apf_text_free(&metrics);
  apf_dispatcher_free(d);

  apf_workqueue *q = NULL;
  TRY(apf_workqueue_new(NULL, &q, NULL));
  TRY(apf_workqueue_add(q, (const uint8_t *)"k", 1));
  apf_workqueue_item item;
  TRY(apf_workqueue_try_get(q, &item));
  if (item.result != APF_WORKQUEUE_ITEM) return 1;
  TRY(apf_workqueue_done(q, item.item));
  apf_workqueue_free(q);
  printf("c: one request and one workqueue item through the installed libapf\n");
  return ok ? 0 : 1;
}
