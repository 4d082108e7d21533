// Built with -fno-exceptions: the Result API alone, every failure checked
// without a throw.
#include <apf.hpp>

#include <cstdio>

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__,   \
                   #cond);                                                     \
      return 1;                                                                \
    }                                                                          \
  } while (0)

int main() {
  apf::Options options;
  options.manual_clock = true;
  options.server_concurrency_limit = 600;

  auto bad = apf::Dispatcher::try_from_config("kind: [unterminated", options);
  CHECK(!bad.ok());
  CHECK(bad.error().status() != APF_OK);
  CHECK(!bad.error().message().empty());

  auto made = apf::Dispatcher::try_builtin(options);
  CHECK(made.ok());
  apf::Dispatcher d = std::move(made).value();

  apf::RequestDigest digest;
  digest.user = "system:kube-scheduler";
  digest.groups = {"system:authenticated"};
  digest.verb = "update";
  digest.is_resource_request = true;
  digest.api_group = "coordination.k8s.io";
  digest.resource = "leases";
  digest.namespace_ = "kube-system";
  digest.name = "kube-scheduler";
  auto started = d.try_start(digest);
  CHECK(started.ok());
  apf::Decision decision = std::move(started).value();
  CHECK(decision.executing());
  CHECK(decision.priority_level_name() == "leader-election");
  apf::RequestGuard guard = decision.take_guard();
  CHECK(guard.try_finish().ok());
  CHECK(!guard.try_finish().ok()); // empty now: handle 0 is an error

  CHECK(d.try_advance_clock(std::chrono::seconds(1)).ok());
  auto now = d.try_now();
  CHECK(now.ok() && now.value() >= std::chrono::seconds(1));
  CHECK(!d.try_reconfigure("kind: [unterminated").ok());
  CHECK(d.try_stats_text().ok());
  std::puts("no-exceptions: ok");
  return 0;
}
