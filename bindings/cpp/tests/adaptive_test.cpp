// The adaptive limit through the C++ wrapper: AdaptiveOptions' defaults
// come from the library, Options::adaptive turns the limit on with its
// tuning, bad values are refused by name, and on the manual clock the probe
// measures the execution time and the total leaves it (adaptive_state and
// the metrics agree).
#include "common.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace apf_test;

namespace {

constexpr std::string_view adaptive_config = R"(
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: work, uid: uid-work}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 30
    limitResponse: {type: Queue, queuing: {queues: 1, handSize: 1, queueLengthLimit: 100}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {name: alice, uid: uid-alice}
spec:
  priorityLevelConfiguration: {name: work}
  matchingPrecedence: 100
  rules:
  - subjects: [{kind: User, user: {name: alice}}]
    resourceRules: [{verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true}]
)";

apf::Options adaptive_options(const apf::AdaptiveOptions &a) {
  apf::Options o = manual_options(100);
  o.adaptive = a;
  return o;
}

double gauge(const std::string &text, const std::string &name) {
  std::string prefix = name + " ";
  size_t at = text.find("\n" + prefix);
  if (at == std::string::npos) {
    ADD_FAILURE() << "no " << name << " in\n" << text;
    return -1;
  }
  return std::stod(text.substr(at + 1 + prefix.size()));
}

// `clients` requests always outstanding, each executing `service` of manual
// time, for `rounds` rounds: the executing ones finish first, then the
// tickets a finish dispatched start their own `service`. Returns
// completions.
int closed_loop(apf::Dispatcher &d, size_t clients, apf::Nanos service, int rounds) {
  std::vector<apf::RequestGuard> running;
  std::vector<apf::Ticket> waiting;
  int done = 0;
  for (int r = 0; r < rounds; r++) {
    while (running.size() + waiting.size() < clients) {
      auto dec = d.start(alice());
      if (dec.executing()) {
        running.push_back(dec.take_guard());
      } else if (dec.queued()) {
        waiting.push_back(dec.take_ticket());
      }
    }
    d.advance_clock(service);
    for (auto &g : running) {
      g.finish();
      done++;
    }
    running.clear();
    std::vector<apf::Ticket> still;
    for (auto &t : waiting) {
      auto dec = t.poll();
      if (dec.executing()) {
        running.push_back(dec.take_guard());
      } else if (dec.queued()) {
        still.push_back(std::move(t));
      }
    }
    waiting = std::move(still);
  }
  return done;
}

} // namespace

TEST(Adaptive, DefaultsComeFromTheLibrary) {
  apf_adaptive_options raw{};
  ASSERT_EQ(apf_adaptive_options_default(&raw), APF_OK);
  apf::AdaptiveOptions a;
  EXPECT_EQ(a.min_limit, raw.min_limit);
  EXPECT_EQ(a.max_limit, raw.max_limit);
  EXPECT_EQ(static_cast<uint64_t>(a.update_interval.count()), raw.update_interval_ns);
  EXPECT_EQ(a.gain, raw.gain);
  EXPECT_EQ(a.probe_limit, raw.probe_limit);
  EXPECT_EQ(static_cast<uint64_t>(a.probe_timeout.count()), raw.probe_timeout_ns);
  EXPECT_EQ(a.min_limit, 8u);
  EXPECT_EQ(a.update_interval, std::chrono::milliseconds(250));
  EXPECT_FALSE(apf::Options().adaptive.has_value());
}

TEST(Adaptive, RoundTripThroughC) {
  apf::Options o;
  apf::AdaptiveOptions a;
  a.probe_limit = 7;
  a.update_interval = 40ms;
  o.adaptive = a;
  apf_adaptive_options storage{};
  apf_dispatcher_options raw = o.to_c(storage);
  ASSERT_EQ(raw.adaptive, &storage);
  apf::Options back = apf::Options::from_c(raw);
  ASSERT_TRUE(back.adaptive.has_value());
  EXPECT_EQ(back.adaptive->probe_limit, 7u);
  EXPECT_EQ(back.adaptive->update_interval, 40ms);
  EXPECT_EQ(apf::Options().to_c(storage).adaptive, nullptr);
}

TEST(Adaptive, OffByDefault) {
  auto d = apf::Dispatcher::from_config(adaptive_config, manual_options(100));
  auto s = d.adaptive_state();
  EXPECT_FALSE(s.enabled);
  EXPECT_EQ(s.limit, 0u);
  EXPECT_EQ(d.metrics_text().find("adaptive_"), std::string::npos);
}

TEST(Adaptive, BadValuesAreRefusedByName) {
  apf::AdaptiveOptions a;
  a.gain = 9;
  auto r = apf::Dispatcher::try_from_config(adaptive_config, adaptive_options(a));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status(), APF_ERR_INVALID_PARAMETER);
  EXPECT_NE(std::string(r.error().what()).find("apf_adaptive_options.gain"), std::string::npos) << r.error().what();
  apf::AdaptiveOptions b;
  b.update_interval = -1s;
  auto r2 = apf::Dispatcher::try_from_config(adaptive_config, adaptive_options(b));
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(std::string(r2.error().what()).find("apf_adaptive_options.update_interval_ns"), std::string::npos);
}

TEST(Adaptive, TheLimitAdaptsUnderLoad) {
  apf::AdaptiveOptions a;
  a.probe_limit = 5;
  a.probe_samples = 20;
  auto d = apf::Dispatcher::from_config(adaptive_config, adaptive_options(a));
  auto s = d.adaptive_state();
  ASSERT_TRUE(s.enabled);
  EXPECT_TRUE(s.probing);
  EXPECT_EQ(s.limit, 5u) << "the probe at the caller's probe_limit";
  // 40 clients, 20 ms each, 4 s of manual time.
  EXPECT_GT(closed_loop(d, 40, 20ms, 200), 500);
  s = d.adaptive_state();
  EXPECT_FALSE(s.probing);
  EXPECT_GE(s.probes, 1u);
  EXPECT_GE(s.updates, 10u);
  EXPECT_EQ(s.min_latency, 20ms);
  EXPECT_GT(s.limit, a.min_limit) << "the slow start grew the total";
  std::string text = d.metrics_text();
  EXPECT_EQ(gauge(text, "apiserver_flowcontrol_adaptive_server_concurrency_limit"), s.limit);
  EXPECT_DOUBLE_EQ(gauge(text, "apiserver_flowcontrol_adaptive_min_latency_seconds"), 0.020);
}
