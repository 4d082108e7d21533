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

  // The workqueue through Result alone.
  CHECK(!apf::Limiter::try_exponential(std::chrono::seconds(2),
                                       std::chrono::seconds(1))
             .ok());
  auto limiter = apf::Limiter::try_exponential(std::chrono::seconds(1),
                                               std::chrono::seconds(8));
  CHECK(limiter.ok());
  apf::WorkqueueOptions wq_options(apf::QueueKind::TwoLane);
  wq_options.manual_clock = true;
  wq_options.limiter = &limiter.value();
  auto wq_made = apf::Workqueue::try_create(wq_options);
  CHECK(wq_made.ok());
  apf::Workqueue wq = std::move(wq_made).value();
  CHECK(wq.try_add_rate_limited("k").ok());
  CHECK(wq.try_waiting_len().value_or(0) == 1);
  CHECK(wq.try_advance_clock(std::chrono::seconds(1)).ok());
  auto got = wq.try_poll();
  CHECK(got.ok() && got.value().has_value());
  apf::WorkItem item = std::move(*got.value());
  CHECK(item.key() == "k");
  CHECK(item.try_done().ok());
  CHECK(item.try_done().error().status() == APF_ERR_INVALID_HANDLE);
  CHECK(wq.try_shut_down().ok());
  auto after = wq.try_next(std::chrono::milliseconds(1));
  CHECK(after.ok() && after.value().shut_down());
  std::puts("no-exceptions: ok");
  return 0;
}
