// apf::Workqueue: client-go's queue rules, lanes, priorities, delays and rate
// limiting on the manual clock, shutdown, and many workers at once.
#include <apf.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

// A hidden test aid of libapf (not in apf.h): how many workers are blocked
// in apf_workqueue_get.
extern "C" apf_status apf_workqueue_test_parked(apf_workqueue *queue, size_t *out);

namespace {

using namespace std::chrono_literals;

// Long enough never to pass in a correct run, short enough that a lost
// wake-up fails the test instead of hanging it.
constexpr auto patience = std::chrono::seconds(20);

apf::Workqueue manual_queue(apf::QueueKind kind = apf::QueueKind::Fifo,
                            const apf::Limiter *limiter = nullptr) {
  apf::WorkqueueOptions o(kind);
  o.manual_clock = true;
  o.limiter = limiter;
  return apf::Workqueue::create(o);
}

apf::WorkItem take(apf::Workqueue &q) {
  auto item = q.poll();
  if (!item) {
    ADD_FAILURE() << "no item ready";
    return apf::WorkItem();
  }
  return std::move(*item);
}

/// Waits (bounded) until `n` workers are blocked in get.
bool wait_parked(apf::Workqueue &q, size_t n) {
  auto until = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < until) {
    size_t parked = 0;
    if (apf_workqueue_test_parked(q.capi(), &parked) != APF_OK) {
      return false;
    }
    if (parked >= n) {
      return true;
    }
    std::this_thread::yield();
  }
  return false;
}

template <typename F> apf_status status_of(F &&call) {
  try {
    call();
  } catch (const apf::Error &e) {
    return e.status();
  }
  return APF_OK;
}

} // namespace

TEST(Workqueue, AddingAQueuedKeyQueuesItOnce) {
  auto q = manual_queue();
  q.add("a");
  q.add("a");
  q.add("b");
  EXPECT_EQ(q.len(), 2u);
  auto a = take(q);
  EXPECT_EQ(a.key(), "a");
  auto b = take(q);
  EXPECT_EQ(b.key(), "b");
  EXPECT_FALSE(q.poll().has_value());
  EXPECT_EQ(q.processing(), 2u);
}

TEST(Workqueue, KeyAddedWhileProcessingIsQueuedAgainWhenDone) {
  auto q = manual_queue();
  q.add("a");
  auto a = take(q);
  q.add("a");
  q.add("a");
  // Never handed to a second worker while the first processes it.
  EXPECT_EQ(q.len(), 0u);
  EXPECT_FALSE(q.poll().has_value());
  a.done();
  EXPECT_FALSE(a);
  EXPECT_EQ(q.len(), 1u);
  auto again = take(q);
  EXPECT_EQ(again.key(), "a");
  again.done();
  EXPECT_EQ(q.len(), 0u);
  EXPECT_EQ(q.processing(), 0u);
}

TEST(Workqueue, KeysAreBytes) {
  auto q = manual_queue();
  const std::string key("nul\0inside", 10);
  q.add(key);
  q.add("");
  auto first = take(q);
  EXPECT_EQ(first.key(), key);
  auto empty = take(q);
  EXPECT_TRUE(empty);
  EXPECT_EQ(empty.key(), "");
}

TEST(Workqueue, ItemFinishesOnScopeExit) {
  auto q = manual_queue();
  q.add("a");
  {
    auto a = take(q);
    q.add("a");
    EXPECT_EQ(q.len(), 0u);
  }
  EXPECT_EQ(q.processing(), 0u);
  EXPECT_EQ(q.len(), 1u);
}

TEST(Workqueue, ItemFinishesWhileAnExceptionUnwinds) {
  auto q = manual_queue();
  q.add("a");
  EXPECT_THROW(
      {
        auto a = take(q);
        q.add("a");
        throw std::runtime_error("processing failed");
      },
      std::runtime_error);
  EXPECT_EQ(q.processing(), 0u);
  auto again = take(q);
  EXPECT_EQ(again.key(), "a");
}

TEST(Workqueue, DoneTwiceIsAnInvalidHandle) {
  auto q = manual_queue();
  q.add("a");
  auto a = take(q);
  EXPECT_TRUE(a.try_done().ok());
  auto second = a.try_done();
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().status(), APF_ERR_INVALID_HANDLE);
  EXPECT_EQ(status_of([&] { a.done(); }), APF_ERR_INVALID_HANDLE);
}

TEST(Workqueue, MovedItemFinishesOnce) {
  auto q = manual_queue();
  q.add("a");
  auto a = take(q);
  apf::WorkItem moved = std::move(a);
  EXPECT_FALSE(a);
  EXPECT_EQ(moved.key(), "a");
  EXPECT_EQ(q.processing(), 1u);
  moved = apf::WorkItem();
  EXPECT_EQ(q.processing(), 0u);
  // release() hands the handle to the caller.
  q.add("b");
  auto b = take(q);
  uint64_t handle = b.release();
  EXPECT_FALSE(b);
  EXPECT_EQ(q.processing(), 1u);
  EXPECT_EQ(apf_workqueue_done(q.capi(), handle), APF_OK);
}

TEST(Workqueue, TwoLanesServeFastFirst) {
  auto q = manual_queue(apf::QueueKind::TwoLane);
  apf::AddOptions slow;
  slow.lane = apf::Lane::Slow;
  q.add_with("s1", slow);
  q.add_with("s2", slow);
  q.add("f1");
  EXPECT_EQ(q.lane_len(apf::Lane::Fast), 1u);
  EXPECT_EQ(q.lane_len(apf::Lane::Slow), 2u);
  auto f1 = take(q);
  EXPECT_EQ(f1.key(), "f1");
  EXPECT_EQ(f1.lane(), apf::Lane::Fast);
  auto s1 = take(q);
  EXPECT_EQ(s1.key(), "s1");
  EXPECT_EQ(s1.lane(), apf::Lane::Slow);
  // A fast add overtakes the slow lane, and moves a queued slow key to it.
  q.add("f2");
  q.add("s2");
  EXPECT_EQ(q.lane_len(apf::Lane::Slow), 0u);
  auto f2 = take(q);
  EXPECT_EQ(f2.key(), "f2");
  auto s2 = take(q);
  EXPECT_EQ(s2.key(), "s2");
  EXPECT_EQ(s2.lane(), apf::Lane::Fast);
}

TEST(Workqueue, LanesAndPrioritiesNeedTheirKind) {
  auto fifo = manual_queue();
  apf::AddOptions slow;
  slow.lane = apf::Lane::Slow;
  EXPECT_EQ(fifo.try_add_with("k", slow).error().status(), APF_ERR_WORKQUEUE_WRONG_KIND);
  apf::AddOptions prio;
  prio.priority = 3;
  EXPECT_EQ(fifo.try_add_with("k", prio).error().status(), APF_ERR_WORKQUEUE_WRONG_KIND);
  EXPECT_EQ(fifo.try_lane_len(apf::Lane::Fast).error().status(),
            APF_ERR_WORKQUEUE_WRONG_KIND);
  auto two = manual_queue(apf::QueueKind::TwoLane);
  EXPECT_EQ(status_of([&] { two.add_with("k", prio); }), APF_ERR_WORKQUEUE_WRONG_KIND);
  EXPECT_EQ(fifo.len(), 0u);
  EXPECT_EQ(two.len(), 0u);
}

TEST(Workqueue, PrioritiesHighestFirstFifoWithin) {
  auto q = manual_queue(apf::QueueKind::Priority);
  auto add = [&](const char *key, int32_t priority) {
    apf::AddOptions o;
    o.priority = priority;
    q.add_with(key, o);
  };
  add("low", -1);
  add("mid1", 5);
  add("high", 10);
  add("mid2", 5);
  q.add("zero");
  add("low", 7); // a duplicate keeps the highest priority
  std::vector<std::pair<std::string, int32_t>> order;
  while (auto item = q.poll()) {
    order.emplace_back(std::string(item->key()), item->priority());
  }
  std::vector<std::pair<std::string, int32_t>> want{
      {"high", 10}, {"low", 7}, {"mid1", 5}, {"mid2", 5}, {"zero", 0}};
  EXPECT_EQ(order, want);
}

TEST(Workqueue, DelaysOnTheManualClock) {
  auto q = manual_queue();
  q.add_after("later", 5s);
  q.add_after("sooner", 2000ms);
  EXPECT_EQ(q.len(), 0u);
  EXPECT_EQ(q.waiting_len(), 2u);
  q.advance_clock(1999ms);
  EXPECT_FALSE(q.poll().has_value());
  q.advance_clock(1ms);
  auto sooner = take(q);
  EXPECT_EQ(sooner.key(), "sooner");
  EXPECT_EQ(q.waiting_len(), 1u);
  apf::AddOptions after;
  after.after = 10s;
  q.add_with("later", after); // keeps the earlier time
  q.advance_clock(3s);
  auto later = take(q);
  EXPECT_EQ(later.key(), "later");
  EXPECT_EQ(q.waiting_len(), 0u);
  EXPECT_FALSE(q.poll().has_value());
}

TEST(Workqueue, AdvanceClockNeedsTheManualClock) {
  auto q = apf::Workqueue::create();
  EXPECT_EQ(q.try_advance_clock(1s).error().status(), APF_ERR_NOT_MANUAL_CLOCK);
}

TEST(Workqueue, ExponentialLimiterBacksOffUntilForgotten) {
  auto limiter = apf::Limiter::exponential(1s, 4s);
  auto q = manual_queue(apf::QueueKind::Fifo, &limiter);
  std::vector<std::chrono::seconds> delays{1s, 2s, 4s, 4s};
  for (size_t i = 0; i < delays.size(); i++) {
    q.add_rate_limited("k");
    EXPECT_EQ(q.num_requeues("k"), i + 1);
    q.advance_clock(delays[i] - 1ms);
    EXPECT_FALSE(q.poll().has_value()) << "attempt " << i;
    q.advance_clock(1ms);
    EXPECT_TRUE(q.poll().has_value()) << "attempt " << i;
  }
  q.forget("k");
  EXPECT_EQ(q.num_requeues("k"), 0u);
  q.add_rate_limited("k");
  q.advance_clock(1s);
  EXPECT_TRUE(q.poll().has_value());
}

TEST(Workqueue, MaxOfLimitersTakesTheLongestDelay) {
  auto bucket = apf::Limiter::token_bucket(1.0, 1);
  auto fast_slow = apf::Limiter::fast_slow(10ms, 3s, 1);
  auto both = apf::Limiter::max_of({bucket, fast_slow});
  auto q = manual_queue(apf::QueueKind::Fifo, &both);
  q.add_rate_limited("a"); // bucket: 0, fast: 10 ms
  q.add_rate_limited("b"); // bucket: 1 s, fast: 10 ms
  q.advance_clock(10ms);
  auto a = take(q);
  EXPECT_EQ(a.key(), "a");
  EXPECT_FALSE(q.poll().has_value());
  q.advance_clock(990ms);
  auto b = take(q);
  EXPECT_EQ(b.key(), "b");
  a.done();
  q.add_rate_limited("a"); // second attempt: slow, 3 s
  q.advance_clock(2999ms);
  EXPECT_FALSE(q.poll().has_value());
  q.advance_clock(1ms);
  EXPECT_TRUE(q.poll().has_value());
  EXPECT_EQ(q.num_requeues("a"), 2u);
}

TEST(Workqueue, LimiterParametersAreChecked) {
  EXPECT_EQ(apf::Limiter::try_token_bucket(0.0, 1).error().status(),
            APF_ERR_INVALID_PARAMETER);
  EXPECT_EQ(apf::Limiter::try_item_token_bucket(5.0, 0).error().status(),
            APF_ERR_INVALID_PARAMETER);
  EXPECT_EQ(apf::Limiter::try_exponential(2s, 1s).error().status(),
            APF_ERR_INVALID_PARAMETER);
  auto bad = apf::Limiter::try_fast_slow(2s, 1s, 3);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message().find("fast"), std::string::npos)
      << bad.error().message();
  EXPECT_EQ(apf::Limiter::try_max_of({}).error().status(),
            APF_ERR_INVALID_PARAMETER);
  EXPECT_TRUE(apf::Limiter::try_default_controller().ok());
  EXPECT_TRUE(apf::Limiter::try_token_bucket(
                  std::numeric_limits<double>::infinity(), 0)
                  .ok());
}

TEST(Workqueue, LimiterMayDieBeforeItsQueue) {
  std::optional<apf::Limiter> limiter = apf::Limiter::exponential(1s, 1s);
  auto q = manual_queue(apf::QueueKind::Fifo, &*limiter);
  limiter.reset();
  q.add_rate_limited("k");
  q.advance_clock(1s);
  EXPECT_TRUE(q.poll().has_value());
}

TEST(Workqueue, GetResultTellsTimeOutFromShutDown) {
  auto q = manual_queue();
  auto empty = q.next(0ns);
  EXPECT_TRUE(empty.empty());
  auto timed_out = q.next(1ms);
  EXPECT_TRUE(timed_out.timed_out()) << apf::to_string(timed_out.status);
  EXPECT_FALSE(q.get(1ms).has_value());
  q.add("a");
  auto got = q.next(patience);
  ASSERT_TRUE(got.has_item());
  EXPECT_EQ(got.item.key(), "a");
  q.shut_down();
  EXPECT_TRUE(q.shutting_down());
  EXPECT_TRUE(q.next(patience).shut_down());
  EXPECT_TRUE(q.next_now().shut_down());
  EXPECT_FALSE(q.get().has_value());
}

TEST(Workqueue, ShutDownHandsOutWhatIsReadyAndIgnoresAdds) {
  auto q = manual_queue();
  q.add("ready");
  q.add_after("delayed", 1s);
  EXPECT_FALSE(q.shutting_down());
  q.shut_down();
  q.add("ignored");
  auto ready = q.get(patience);
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->key(), "ready");
  q.advance_clock(1s);
  EXPECT_FALSE(q.get(patience).has_value());
}

TEST(Workqueue, ShutDownWakesABlockedGetter) {
  auto q = apf::Workqueue::create();
  std::atomic<int> result{-1};
  std::thread worker([&] {
    auto got = q.next(patience);
    result = static_cast<int>(got.status);
  });
  ASSERT_TRUE(wait_parked(q, 1));
  q.shut_down();
  worker.join();
  EXPECT_EQ(result.load(), static_cast<int>(apf::GetStatus::ShutDown));
}

TEST(Workqueue, AddWakesABlockedGetter) {
  auto q = apf::Workqueue::create();
  std::string key;
  std::thread worker([&] {
    if (auto item = q.get(patience)) {
      key = std::string(item->key());
    }
  });
  ASSERT_TRUE(wait_parked(q, 1));
  q.add("wake");
  worker.join();
  EXPECT_EQ(key, "wake");
}

TEST(Workqueue, ShutDownWithDrainWaitsForProcessingItems) {
  auto q = apf::Workqueue::create();
  q.add("a");
  auto a = q.get(patience);
  ASSERT_TRUE(a.has_value());
  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    q.shut_down_with_drain();
    drained = true;
  });
  while (!q.shutting_down()) {
    std::this_thread::yield();
  }
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(drained.load());
  a->done();
  drainer.join();
  EXPECT_TRUE(drained.load());
}

TEST(Workqueue, ManyWorkersLoseNothingAndNeverShareAKey) {
  constexpr int keys = 64;
  constexpr int producers = 3;
  constexpr int workers = 4;
  constexpr int rounds = 200;
  auto q = apf::Workqueue::create(apf::WorkqueueOptions(apf::QueueKind::TwoLane));
  // version[k] counts adds of key k; seen[k] is the version a worker saw
  // when it started processing k. Every add is followed by a processing
  // that starts after it, so in the end they are equal.
  std::unique_ptr<std::atomic<int>[]> version(new std::atomic<int>[keys]);
  std::unique_ptr<std::atomic<int>[]> seen(new std::atomic<int>[keys]);
  std::unique_ptr<std::atomic<int>[]> busy(new std::atomic<int>[keys]);
  for (int k = 0; k < keys; k++) {
    version[k] = 0;
    seen[k] = 0;
    busy[k] = 0;
  }
  std::atomic<int> overlaps{0};
  std::atomic<long> processed{0};

  std::vector<std::thread> pool;
  for (int w = 0; w < workers; w++) {
    pool.emplace_back([&] {
      while (auto item = q.get()) {
        int k = std::stoi(std::string(item->key()));
        if (busy[k].exchange(1) != 0) {
          overlaps++;
        }
        seen[k] = version[k].load();
        std::this_thread::yield();
        busy[k] = 0;
        processed++;
      }
    });
  }
  std::vector<std::thread> adders;
  for (int p = 0; p < producers; p++) {
    adders.emplace_back([&, p] {
      apf::AddOptions slow;
      slow.lane = apf::Lane::Slow;
      for (int r = 0; r < rounds; r++) {
        for (int k = (p + r) % keys; k < keys; k += 3) {
          version[k]++;
          if (r % 2 == 0) {
            q.add(std::to_string(k));
          } else {
            q.add_with(std::to_string(k), slow);
          }
        }
      }
    });
  }
  for (auto &a : adders) {
    a.join();
  }
  // Quiescence: nothing ready and nothing processing (a done re-queues a
  // dirty key before its handle dies, so both zero means all settled).
  auto until = std::chrono::steady_clock::now() + patience;
  while (std::chrono::steady_clock::now() < until &&
         (q.len() != 0 || q.processing() != 0)) {
    std::this_thread::yield();
  }
  q.shut_down();
  for (auto &w : pool) {
    w.join();
  }
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GT(processed.load(), 0);
  for (int k = 0; k < keys; k++) {
    EXPECT_GT(version[k].load(), 0) << "key " << k;
    EXPECT_EQ(seen[k].load(), version[k].load()) << "key " << k;
  }
  EXPECT_EQ(q.processing(), 0u);
}

TEST(Workqueue, MetricsTextNamesTheQueue) {
  apf::WorkqueueOptions o;
  o.manual_clock = true;
  o.name = "controller-x";
  auto q = apf::Workqueue::create(o);
  q.add("a");
  auto text = q.metrics_text();
  EXPECT_NE(text.find("workqueue_adds_total"), std::string::npos) << text;
  EXPECT_NE(text.find("controller-x"), std::string::npos) << text;
  EXPECT_EQ(text.substr(text.size() - 6), "# EOF\n") << text;
  // Long enough to need the grow-and-retry path.
  o.name = std::string(5000, 'n');
  auto big = apf::Workqueue::create(o);
  EXPECT_GT(big.metrics_text().size(), 5000u);
  auto unnamed = manual_queue();
  unnamed.add("a");
  EXPECT_EQ(unnamed.metrics_text().find("workqueue_adds_total"),
            std::string::npos);
}

TEST(Workqueue, BadOptionsAreErrors) {
  apf::WorkqueueOptions o;
  o.name = std::string("\xff\xfe", 2);
  EXPECT_EQ(apf::Workqueue::try_create(o).error().status(), APF_ERR_INVALID_UTF8);
  o.name.clear();
  o.kind = static_cast<apf::QueueKind>(9);
  EXPECT_EQ(status_of([&] { (void)apf::Workqueue::create(o); }),
            APF_ERR_INVALID_PARAMETER);
}
