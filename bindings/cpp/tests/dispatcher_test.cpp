// The Dispatcher wrapper: creation, classification, reconfiguration, the
// manual clock, statistics and completion notifications.
#include "common.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <poll.h>
#include <vector>

using namespace apf_test;

TEST(Version, HeaderMatchesLibrary) {
  EXPECT_EQ(apf::header_version, apf::library_version());
  EXPECT_EQ(apf::library_version().packed(), apf_abi_version());
  EXPECT_EQ(apf::Version::unpack(0x010203u), (apf::Version{1, 2, 3}));
  EXPECT_NE(apf::Version::unpack(0x010203u), (apf::Version{1, 2, 4}));
}

TEST(Options, DefaultsComeFromTheLibrary) {
  apf_dispatcher_options raw{};
  ASSERT_EQ(apf_dispatcher_options_default(&raw), APF_OK);
  apf::Options o;
  EXPECT_EQ(o.server_concurrency_limit, raw.server_concurrency_limit);
  EXPECT_EQ(static_cast<uint64_t>(o.service_time_guess.count()), raw.service_time_guess_ns);
  EXPECT_EQ(static_cast<uint64_t>(o.wait_limit.count()), raw.wait_limit_ns);
  EXPECT_EQ(static_cast<uint64_t>(o.borrowing_period.count()), raw.borrowing_period_ns);
  EXPECT_EQ(o.manual_clock, raw.manual_clock);
  EXPECT_EQ(o.server_concurrency_limit, 600u);
  EXPECT_EQ(o.wait_limit, std::chrono::seconds(15));
}

TEST(Options, RoundTripThroughC) {
  apf::Options o;
  o.server_concurrency_limit = 42;
  o.service_time_guess = 7ms;
  o.wait_limit = 3s;
  o.borrowing_period = 20s;
  o.manual_clock = true;
  apf::Options back = apf::Options::from_c(o.to_c());
  EXPECT_EQ(back.server_concurrency_limit, 42u);
  EXPECT_EQ(back.service_time_guess, 7ms);
  EXPECT_EQ(back.wait_limit, 3s);
  EXPECT_EQ(back.borrowing_period, 20s);
  EXPECT_TRUE(back.manual_clock);
  o.wait_limit = -1s;
  EXPECT_EQ(o.to_c().wait_limit_ns, 0u) << "a negative duration is zero";
}

TEST(Dispatcher, BuiltinClassifiesToKubernetesLevels) {
  auto d = apf::Dispatcher::builtin(manual_options(600));
  auto decision = d.start(leader_election());
  EXPECT_EQ(decision.outcome(), apf::Outcome::Execute);
  EXPECT_TRUE(decision.executing());
  EXPECT_EQ(decision.flow_schema_name(), "system-leader-election");
  EXPECT_EQ(decision.priority_level_name(), "leader-election");
  auto low = d.start(alice());
  EXPECT_EQ(low.flow_schema_name(), "global-default");
  EXPECT_EQ(low.priority_level_name(), "global-default");
}

TEST(Dispatcher, FromConfigGivesNamesAndUids) {
  auto d = narrow_dispatcher();
  auto decision = d.start(alice());
  ASSERT_TRUE(decision.executing());
  EXPECT_EQ(decision.flow_schema_name(), "everyone");
  EXPECT_EQ(decision.flow_schema_uid(), "everyone-schema-uid");
  EXPECT_EQ(decision.priority_level_name(), "narrow");
  EXPECT_EQ(decision.priority_level_uid(), "narrow-level-uid");
  EXPECT_EQ(decision.classification().priority_level_name, "narrow");
  auto guard = decision.take_guard();
  EXPECT_TRUE(guard);
  EXPECT_NE(guard.handle(), 0u);
  auto g = gauges(d, "narrow");
  EXPECT_EQ(g.seats_in_use, 1u);
  EXPECT_EQ(g.executing, 1u);
  EXPECT_EQ(g.concurrency_limit, narrow_limit) << "the fixture's arithmetic";
}

TEST(Dispatcher, FromJsonConfig) {
  constexpr std::string_view json = R"({"apiVersion": "flowcontrol.apiserver.k8s.io/v1",
    "kind": "PriorityLevelConfiguration", "metadata": {"name": "json-level"},
    "spec": {"type": "Limited", "limited": {"nominalConcurrencyShares": 5,
      "limitResponse": {"type": "Reject"}}}})";
  auto d = apf::Dispatcher::from_config(json, manual_options());
  EXPECT_TRUE(gauges(d, "json-level").found);
}

TEST(Dispatcher, InvalidConfigThrowsWithStatusAndMessage) {
  try {
    (void)apf::Dispatcher::from_config("kind: [unterminated", manual_options());
    FAIL() << "an invalid config must throw";
  } catch (const apf::Error &e) {
    EXPECT_NE(e.status(), APF_OK);
    EXPECT_FALSE(e.message().empty());
    EXPECT_STREQ(e.what(), e.message().c_str());
  }
  auto result = apf::Dispatcher::try_from_config("kind: [unterminated", manual_options());
  ASSERT_FALSE(result.ok());
  EXPECT_FALSE(static_cast<bool>(result));
  EXPECT_NE(result.error().status(), APF_OK);
}

TEST(Dispatcher, InvalidUtf8ConfigIsAnError) {
  const std::string bad("\xff\xfe", 2);
  auto result = apf::Dispatcher::try_from_config(bad, manual_options());
  ASSERT_FALSE(result.ok());
  EXPECT_FALSE(result.error().message().empty());
}

TEST(Dispatcher, ReconfigureSwitchesLevelsAndKeepsOldOnError) {
  auto d = apf::Dispatcher::builtin(manual_options(600));
  EXPECT_EQ(d.start(alice()).priority_level_name(), "global-default");
  d.reconfigure(narrow_config);
  EXPECT_EQ(d.start(alice()).priority_level_name(), "narrow");

  constexpr std::string_view broken = R"(
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {name: broken}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 10
    limitResponse:
      type: Queue
      queuing: {queues: 4, handSize: 9, queueLengthLimit: 10}
)";
  EXPECT_THROW(d.reconfigure(broken), apf::Error);
  auto result = d.try_reconfigure(broken);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message().find("handSize"), std::string::npos)
      << result.error().message();
  EXPECT_EQ(d.start(alice()).priority_level_name(), "narrow") << "old config in force";
  EXPECT_FALSE(gauges(d, "broken").found);
}

TEST(Dispatcher, ManualClockAdvances) {
  auto d = narrow_dispatcher();
  auto t0 = d.now();
  d.advance_clock(1500ms);
  EXPECT_EQ(d.now() - t0, 1500ms);
  auto r = d.try_advance_clock(1ns);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(d.try_now().value() - t0, 1500ms + 1ns);
}

TEST(Dispatcher, AdvancingTheRealClockIsAnError) {
  apf::Options o;
  o.manual_clock = false;
  auto d = apf::Dispatcher::builtin(o);
  EXPECT_THROW(d.advance_clock(1s), apf::Error);
  auto r = d.try_advance_clock(1s);
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.error().message().empty());
  EXPECT_GE(d.now().count(), 0);
}

TEST(Dispatcher, StatsTextNamesLevels) {
  auto d = apf::Dispatcher::builtin(manual_options(600));
  std::string text = d.stats_text();
  for (const char *level : {"exempt", "catch-all", "workload-low", "leader-election"}) {
    EXPECT_NE(text.find(level), std::string::npos) << level << " in:\n" << text;
  }
  auto r = d.try_stats_text();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), text);
}

TEST(Dispatcher, DeadlineInThePastRejectsAQueuedRequest) {
  auto d = narrow_dispatcher();
  std::vector<apf::RequestGuard> held;
  for (uint32_t i = 0; i < narrow_limit; i++) {
    held.push_back(d.start(alice()).take_guard());
  }
  d.advance_clock(10s);
  auto late = d.start(alice(), apf::WorkEstimate(), d.now() + 1s);
  ASSERT_TRUE(late.queued());
  auto ticket = late.take_ticket();
  d.advance_clock(2s);
  auto decided = ticket.poll();
  EXPECT_TRUE(decided.rejected());
  EXPECT_EQ(decided.reject_reason(), apf::RejectReason::TimeOut);
  EXPECT_FALSE(ticket) << "a decided ticket is empty";
}

TEST(Dispatcher, CompletionCallbackSeesQueuedRequestsDecided) {
  auto d = narrow_dispatcher();
  std::atomic<uint64_t> seen{0};
  std::atomic<int> calls{0};
  d.set_completion_callback([&](uint64_t request) {
    seen = request;
    calls++;
  });
  std::vector<apf::RequestGuard> held;
  for (uint32_t i = 0; i < narrow_limit; i++) {
    held.push_back(d.start(alice()).take_guard());
  }
  auto ticket = d.start(alice()).take_ticket();
  ASSERT_TRUE(ticket);
  EXPECT_EQ(calls.load(), 0);
  held.pop_back();
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(seen.load(), ticket.handle());
  auto decided = ticket.poll();
  EXPECT_TRUE(decided.executing());

  // Replacing the callback; an empty one removes it.
  std::atomic<int> second{0};
  d.set_completion_callback([&](uint64_t) { second++; });
  auto queued = d.start(alice()).take_ticket();
  held.clear();
  EXPECT_EQ(second.load(), 1);
  EXPECT_EQ(calls.load(), 1);
  d.set_completion_callback(nullptr);
  (void)queued.cancel();
}

TEST(Dispatcher, CompletionCallbackMayPollButNotReplaceItself) {
  auto d = narrow_dispatcher();
  apf::Dispatcher *self = &d;
  std::atomic<uint32_t> replace_status{APF_OK};
  std::atomic<bool> decided_executing{false};
  d.set_completion_callback([&](uint64_t request) {
    auto r = self->try_set_completion_callback([](uint64_t) {});
    replace_status = r.ok() ? APF_OK : r.error().status();
    uint32_t outcome = 99;
    uint32_t reason = 99;
    decided_executing = apf_request_poll(self->capi(), request, &outcome, &reason) == APF_OK &&
                        outcome == APF_OUTCOME_EXECUTE;
  });
  std::vector<apf::RequestGuard> held;
  for (uint32_t i = 0; i < narrow_limit; i++) {
    held.push_back(d.start(alice()).take_guard());
  }
  auto ticket = d.start(alice()).take_ticket();
  held.pop_back();
  EXPECT_EQ(replace_status.load(), static_cast<uint32_t>(APF_ERR_IN_CALLBACK));
  EXPECT_TRUE(decided_executing.load());
  // The callback polled the dispatch; the ticket's own poll sees it too.
  EXPECT_TRUE(ticket.poll().executing());
  d.set_completion_callback(nullptr); // outside a callback: fine
}

TEST(Dispatcher, CompletionFdBecomesReadable) {
  auto d = narrow_dispatcher();
  int fd = d.completion_fd();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(d.try_completion_fd().value(), fd);
  EXPECT_EQ(d.take_completion(), std::nullopt);
  std::vector<apf::RequestGuard> held;
  for (uint32_t i = 0; i < narrow_limit; i++) {
    held.push_back(d.start(alice()).take_guard());
  }
  auto ticket = d.start(alice()).take_ticket();
  pollfd p{fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 0), 0) << "nothing decided yet";
  held.pop_back();
  p.revents = 0;
  ASSERT_EQ(::poll(&p, 1, 1000), 1);
  EXPECT_TRUE(p.revents & POLLIN);
  auto done = d.try_take_completion();
  ASSERT_TRUE(done.ok());
  EXPECT_EQ(done.value(), std::optional<uint64_t>(ticket.handle()));
  EXPECT_EQ(d.take_completion(), std::nullopt);
  EXPECT_TRUE(ticket.poll().executing());
}

TEST(Dispatcher, FinalSeatsAreHeldForTheExtraLatency) {
  // (narrow caps one request at max(1, ceil(0.15 * 2)) = 1 seat.)
  auto d = narrow_dispatcher();
  apf::WorkEstimate e;
  e.initial_seats = 1;
  e.final_seats = 1;
  e.additional_latency = 1s;
  auto guard = d.start(alice(), e).take_guard();
  ASSERT_TRUE(guard);
  d.advance_clock(100ms);
  guard.finish_at(d.now() - 50ms);
  auto g = gauges(d, "narrow");
  EXPECT_EQ(g.executing, 0u);
  EXPECT_EQ(g.seats_in_use, 1u) << "final seats after the end";
  d.advance_clock(949ms);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 1u) << "1 s counts from the given end";
  d.advance_clock(2ms);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}
