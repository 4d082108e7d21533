// apf.hpp must compile as the only include of a translation unit.
#include <apf.hpp>

int main() {
  apf::Options options;
  options.manual_clock = true;
  auto d = apf::Dispatcher::try_builtin(options);
  if (!d) {
    return 1;
  }
  apf::RequestDigest digest;
  digest.user = "alice";
  digest.groups = {"system:authenticated"};
  digest.verb = "get";
  digest.path = "/healthz";
  auto decision = d.value().try_start(digest);
  return decision && decision.value().executing() ? 0 : 1;
}
