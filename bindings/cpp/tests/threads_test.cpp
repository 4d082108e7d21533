// Real concurrency: many threads share one Dispatcher; queued requests wait
// in Ticket::wait and are dispatched by other threads' finishes.
#include "common.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

using namespace apf_test;

namespace {

constexpr int threads = 8;
constexpr int rounds = 300;
// Long enough never to pass in a correct run, short enough that a lost
// finish fails the test instead of hanging it.
constexpr auto patience = std::chrono::seconds(20);

/// Counts requests executing at once and remembers the most seen.
struct Inflight {
  std::atomic<int> now{0};
  std::atomic<int> most{0};

  void enter() {
    int n = ++now;
    int seen = most.load();
    while (n > seen && !most.compare_exchange_weak(seen, n)) {
    }
  }
  void leave() { --now; }
};

enum class Ran { AtOnce, AfterWaiting, Failed };

/// Executes one request to completion: at once, or after waiting in a queue.
Ran run_one(apf::Dispatcher &d, Inflight &inflight) {
  auto decision = d.start(alice());
  bool waited = decision.queued();
  apf::RequestGuard guard;
  if (decision.executing()) {
    guard = decision.take_guard();
  } else if (waited) {
    auto ticket = decision.take_ticket();
    auto decided = ticket.wait_for(patience);
    if (!decided.executing()) {
      ADD_FAILURE() << apf::to_string(decided.outcome()) << " "
                    << apf::to_string(decided.reject_reason());
      return Ran::Failed;
    }
    guard = decided.take_guard();
  } else {
    ADD_FAILURE() << "rejected: " << apf::to_string(decision.reject_reason());
    return Ran::Failed;
  }
  inflight.enter();
  std::this_thread::yield();
  inflight.leave();
  return waited ? Ran::AfterWaiting : Ran::AtOnce;
}

} // namespace

TEST(Threads, QueuedRequestsAreDispatchedByFinishes) {
  auto d = narrow_dispatcher();
  Inflight inflight;
  std::atomic<int> executed{0};
  std::atomic<int> waited{0};

  // The level starts full, so every thread's first request queues and only
  // a finish can let it run.
  std::vector<apf::RequestGuard> held;
  for (uint32_t i = 0; i < narrow_limit; i++) {
    held.push_back(d.start(alice()).take_guard());
  }
  std::atomic<int> first_started{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; t++) {
    workers.emplace_back([&] {
      auto decision = d.start(alice());
      EXPECT_TRUE(decision.queued());
      auto ticket = decision.take_ticket();
      first_started++;
      auto decided = ticket.wait_for(patience);
      ASSERT_TRUE(decided.executing()) << apf::to_string(decided.outcome());
      {
        auto guard = decided.take_guard();
        inflight.enter();
        inflight.leave();
      }
      executed++;
      waited++;
      for (int i = 0; i < rounds; i++) {
        Ran ran = run_one(d, inflight);
        if (ran == Ran::Failed) {
          return;
        }
        waited += ran == Ran::AfterWaiting;
        executed++;
      }
    });
  }
  while (first_started.load() < threads) {
    std::this_thread::yield();
  }
  EXPECT_EQ(gauges(d, "narrow").waiting, static_cast<uint64_t>(threads));
  held.clear(); // the finishes that start the chain
  for (auto &w : workers) {
    w.join();
  }

  EXPECT_EQ(executed.load(), threads * (rounds + 1));
  EXPECT_GE(waited.load(), threads);
  EXPECT_LE(inflight.most.load(), static_cast<int>(narrow_limit))
      << "never more requests executing than seats";
  auto g = gauges(d, "narrow");
  EXPECT_EQ(g.seats_in_use, 0u);
  EXPECT_EQ(g.executing, 0u);
  EXPECT_EQ(g.waiting, 0u);
}

TEST(Threads, DispatcherCallsRaceSafely) {
  auto d = narrow_dispatcher();
  std::atomic<bool> stop{false};
  std::atomic<int> completions{0};
  d.set_completion_callback([&](uint64_t) { completions++; });
  Inflight inflight;
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; t++) {
    workers.emplace_back([&] {
      for (int i = 0; i < rounds && run_one(d, inflight) != Ran::Failed; i++) {
      }
    });
  }
  std::thread side([&] {
    while (!stop.load()) {
      d.reconfigure(narrow_config); // keeps narrow, its seats and queue
      EXPECT_NE(d.stats_text().find("narrow"), std::string::npos);
      (void)d.now();
      while (d.take_completion()) {
      }
    }
  });
  for (auto &w : workers) {
    w.join();
  }
  stop = true;
  side.join();
  EXPECT_LE(inflight.most.load(), static_cast<int>(narrow_limit));
  auto g = gauges(d, "narrow");
  EXPECT_EQ(g.seats_in_use, 0u);
  EXPECT_EQ(g.waiting, 0u);
}

TEST(Threads, GuardsAndTicketsMoveBetweenThreads) {
  auto d = narrow_dispatcher();
  auto guard = d.start(alice()).take_guard();
  auto other = d.start(alice()).take_guard();
  auto ticket = d.start(alice()).take_ticket();
  ASSERT_TRUE(ticket);
  std::thread waiter([t = std::move(ticket)]() mutable {
    auto decided = t.wait_for(patience);
    EXPECT_TRUE(decided.executing());
  });
  std::thread finisher([g = std::move(guard)]() mutable { g.finish(); });
  finisher.join();
  waiter.join();
  other.finish();
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}
