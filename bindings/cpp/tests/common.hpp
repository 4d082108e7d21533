// Shared fixtures of the C++ binding's tests.
#ifndef APF_CPP_TESTS_COMMON_HPP
#define APF_CPP_TESTS_COMMON_HPP

#include <apf.hpp>

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>

namespace apf_test {

using namespace std::chrono_literals;

// One limited level, "narrow", for every user: with a server limit of 7 it
// gets 2 seats (its 2 shares beside catch-all's 5 and exempt's 0), lends
// none and borrows none, and queues up to 64 requests in a single queue.
inline constexpr std::string_view narrow_config = R"(
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: narrow, uid: narrow-level-uid}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 2
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse:
      type: Queue
      queuing: {queues: 1, handSize: 1, queueLengthLimit: 64}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: everyone, uid: everyone-schema-uid}
spec:
  priorityLevelConfiguration: {name: narrow}
  matchingPrecedence: 500
  distinguisherMethod: {type: ByUser}
  rules:
  - subjects:
    - kind: Group
      group: {name: "system:authenticated"}
    resourceRules:
    - verbs: ["*"]
      apiGroups: ["*"]
      resources: ["*"]
      namespaces: ["*"]
      clusterScope: true
)";

inline constexpr uint32_t narrow_limit = 2;
inline constexpr uint32_t narrow_server_limit = 7;

inline apf::Options manual_options(uint32_t server_limit = narrow_server_limit) {
  apf::Options o;
  o.server_concurrency_limit = server_limit;
  o.manual_clock = true;
  return o;
}

inline apf::Dispatcher narrow_dispatcher() {
  return apf::Dispatcher::from_config(narrow_config, manual_options());
}

inline apf::RequestDigest alice() {
  apf::RequestDigest d;
  d.user = "alice";
  d.groups = {"system:authenticated"};
  d.verb = "list";
  d.is_resource_request = true;
  d.resource = "configmaps";
  d.namespace_ = "default";
  d.path = "/api/v1/namespaces/default/configmaps";
  return d;
}

inline apf::RequestDigest leader_election() {
  apf::RequestDigest d;
  d.user = "system:kube-scheduler";
  d.groups = {"system:authenticated"};
  d.verb = "update";
  d.is_resource_request = true;
  d.api_group = "coordination.k8s.io";
  d.resource = "leases";
  d.namespace_ = "kube-system";
  d.name = "kube-scheduler";
  d.path = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/kube-scheduler";
  return d;
}

/// One level's gauges, read from the dispatcher's stats text.
struct LevelGauges {
  bool found = false;
  uint64_t seats_in_use = 0;
  uint64_t executing = 0;
  uint64_t waiting = 0;
  uint64_t concurrency_limit = 0;
};

/// Parses the level's line: `level NAME exempt B concurrency_limit N
/// seats_in_use N executing N waiting N ...`.
inline LevelGauges gauges(apf::Dispatcher &d, std::string_view level) {
  std::istringstream lines(d.stats_text());
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream words(line);
    std::string kind, name;
    if (!(words >> kind >> name) || kind != "level" || name != level) {
      continue;
    }
    LevelGauges g;
    g.found = true;
    std::string key, value;
    while (words >> key >> value) {
      if (key == "seats_in_use") {
        g.seats_in_use = std::stoull(value);
      } else if (key == "executing") {
        g.executing = std::stoull(value);
      } else if (key == "waiting") {
        g.waiting = std::stoull(value);
      } else if (key == "concurrency_limit") {
        g.concurrency_limit = std::stoull(value);
      }
    }
    return g;
  }
  return LevelGauges();
}

} // namespace apf_test

#endif
