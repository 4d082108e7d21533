// Built by scripts/install-checks.sh outside the repository with only
// find_package(apf): a request through apf.hpp, whose guard outlives the
// Dispatcher object, and a workqueue item.
#include <apf.hpp>
#include <cstdio>

int main() {
  apf::RequestGuard guard;
  {
    auto d = apf::Dispatcher::builtin();
    apf::RequestDigest digest;
    digest.user = "alice";
    digest.verb = "get";
    digest.path = "/healthz";
    auto decision = d.start(digest);
    if (!decision.executing()) return 1;
    guard = decision.take_guard();
    if (d.metrics_text().find("apiserver_flowcontrol") == std::string::npos) return 1;
  }
  guard.finish();
  auto q = apf::Workqueue::create();
  q.add("k");
  auto item = q.try_poll();
  if (!item.ok() || !item.value().has_value()) return 1;
  std::printf("c++: one request through the installed libapf\n");
  return 0;
}
