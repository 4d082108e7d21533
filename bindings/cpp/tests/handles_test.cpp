// RequestGuard, Ticket, Decision and Dispatcher as move-only RAII handles.
#include "common.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

using namespace apf_test;

static_assert(!std::is_copy_constructible_v<apf::Dispatcher>);
static_assert(!std::is_copy_assignable_v<apf::Dispatcher>);
static_assert(std::is_nothrow_move_constructible_v<apf::Dispatcher>);
static_assert(std::is_nothrow_move_assignable_v<apf::Dispatcher>);
static_assert(!std::is_copy_constructible_v<apf::RequestGuard>);
static_assert(std::is_nothrow_move_constructible_v<apf::RequestGuard>);
static_assert(std::is_nothrow_move_assignable_v<apf::RequestGuard>);
static_assert(!std::is_copy_constructible_v<apf::Ticket>);
static_assert(std::is_nothrow_move_constructible_v<apf::Ticket>);
static_assert(std::is_nothrow_move_assignable_v<apf::Ticket>);
static_assert(!std::is_copy_constructible_v<apf::Decision>);
static_assert(std::is_move_constructible_v<apf::Decision>);
static_assert(!std::is_copy_constructible_v<apf::Result<apf::Dispatcher>>);

namespace {

/// Holds every seat of narrow.
std::vector<apf::RequestGuard> fill(apf::Dispatcher &d) {
  std::vector<apf::RequestGuard> held;
  for (uint32_t i = 0; i < narrow_limit; i++) {
    auto decision = d.start(alice());
    EXPECT_TRUE(decision.executing());
    held.push_back(decision.take_guard());
  }
  return held;
}

} // namespace

TEST(RequestGuard, FinishesWhenDestroyed) {
  auto d = narrow_dispatcher();
  {
    auto guard = d.start(alice()).take_guard();
    ASSERT_TRUE(guard);
    EXPECT_EQ(gauges(d, "narrow").seats_in_use, 1u);
  }
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}

TEST(RequestGuard, FinishesDuringExceptionUnwinding) {
  auto d = narrow_dispatcher();
  bool caught = false;
  try {
    auto held = fill(d);
    ASSERT_EQ(gauges(d, "narrow").seats_in_use, narrow_limit);
    ASSERT_TRUE(d.start(alice()).queued()) << "the level is full";
    throw std::runtime_error("handler failed");
  } catch (const std::runtime_error &) {
    caught = true;
  }
  ASSERT_TRUE(caught);
  auto g = gauges(d, "narrow");
  EXPECT_EQ(g.seats_in_use, 0u) << "every seat came back";
  EXPECT_EQ(g.executing, 0u);
  EXPECT_EQ(g.waiting, 0u) << "the dropped queued decision was cancelled";
  auto again = fill(d);
  EXPECT_EQ(again.size(), narrow_limit);
}

TEST(RequestGuard, FinishesWhenAnApfErrorUnwinds) {
  auto d = narrow_dispatcher();
  try {
    auto guard = d.start(alice()).take_guard();
    d.reconfigure("kind: [unterminated");
    FAIL() << "reconfigure must throw";
  } catch (const apf::Error &e) {
    EXPECT_NE(e.status(), APF_OK);
  }
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}

TEST(RequestGuard, ExplicitFinishEmptiesIt) {
  auto d = narrow_dispatcher();
  auto guard = d.start(alice()).take_guard();
  uint64_t handle = guard.handle();
  guard.finish();
  EXPECT_FALSE(guard);
  EXPECT_EQ(guard.handle(), 0u);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
  // The handle is stale now: finishing it again is an error, not UB.
  apf::RequestGuard stale = d.adopt_guard(handle);
  auto r = stale.try_finish();
  ASSERT_FALSE(r.ok());
  EXPECT_FALSE(r.error().message().empty());
  apf::RequestGuard stale_again = d.adopt_guard(handle);
  EXPECT_THROW(stale_again.finish(), apf::Error);
  EXPECT_FALSE(stale_again) << "emptied even on error";
}

TEST(RequestGuard, TryFinishAt) {
  auto d = narrow_dispatcher();
  auto guard = d.start(alice()).take_guard();
  d.advance_clock(5ms);
  auto r = guard.try_finish_at(d.now());
  EXPECT_TRUE(r.ok());
  EXPECT_FALSE(guard);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}

TEST(RequestGuard, ReleaseHandsTheHandleOver) {
  auto d = narrow_dispatcher();
  uint64_t handle = 0;
  {
    auto guard = d.start(alice()).take_guard();
    handle = guard.release();
    EXPECT_FALSE(guard);
  }
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 1u) << "released: not finished";
  EXPECT_EQ(apf_finish(d.capi(), handle, 0), APF_OK);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}

TEST(RequestGuard, MoveTransfersOwnership) {
  auto d = narrow_dispatcher();
  auto a = d.start(alice()).take_guard();
  uint64_t handle = a.handle();
  apf::RequestGuard b(std::move(a));
  EXPECT_FALSE(a); // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(b.handle(), handle);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 1u);

  // Move-assigning finishes the request the target held.
  auto c = d.start(alice()).take_guard();
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 2u);
  c = std::move(b);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 1u);
  EXPECT_EQ(c.handle(), handle);
  c = std::move(c);
  EXPECT_EQ(c.handle(), handle) << "self-move keeps the request";
  apf::RequestGuard empty;
  EXPECT_FALSE(empty);
  c = std::move(empty);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}

TEST(Decision, TakeOnlyWhatTheOutcomeHolds) {
  auto d = narrow_dispatcher();
  auto decision = d.start(alice());
  ASSERT_TRUE(decision.executing());
  EXPECT_FALSE(decision.take_ticket());
  auto guard = decision.take_guard();
  EXPECT_TRUE(guard);
  EXPECT_FALSE(decision.take_guard()) << "taken once";
}

TEST(Decision, DestroyingFinishesOrCancelsWhatItHolds) {
  auto d = narrow_dispatcher();
  {
    auto executing = d.start(alice());
    auto other = d.start(alice());
    auto queued = d.start(alice());
    ASSERT_TRUE(queued.queued());
    auto g = gauges(d, "narrow");
    EXPECT_EQ(g.seats_in_use, narrow_limit);
    EXPECT_EQ(g.waiting, 1u);
  }
  auto g = gauges(d, "narrow");
  EXPECT_EQ(g.seats_in_use, 0u);
  EXPECT_EQ(g.waiting, 0u);
}

TEST(Decision, MovesWithItsHandles) {
  auto d = narrow_dispatcher();
  auto a = d.start(alice());
  apf::Decision b(std::move(a));
  EXPECT_EQ(b.priority_level_name(), "narrow");
  EXPECT_TRUE(b.take_guard());
  EXPECT_FALSE(a.take_guard()); // NOLINT(bugprone-use-after-move)
}

TEST(RequestGuard, ReleasingSeatsDispatchesAWaiterAndTheFinishGivesBackTheRest) {
  auto d = narrow_dispatcher();
  auto held = fill(d);
  auto ticket = d.start(alice()).take_ticket();
  ASSERT_TRUE(ticket);
  ASSERT_TRUE(held.back().try_release_seats().ok());
  auto decided = ticket.poll();
  ASSERT_TRUE(decided.executing()) << "dispatched by the release";
  auto again = held.back().try_release_seats();
  ASSERT_FALSE(again.ok()) << "a second release of every seat";
  EXPECT_EQ(again.error().status(), APF_ERR_INVALID_PARAMETER);
  held.back().finish();
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, narrow_limit)
      << "the finish gave back nothing more";
  held.clear();
  decided.take_guard().finish();
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}

TEST(RequestGuard, FinishWithCostRefusesABadCostAndKeepsTheRequest) {
  auto d = narrow_dispatcher();
  auto guard = d.start(alice()).take_guard();
  auto bad = guard.try_finish_with_cost(-1.0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().status(), APF_ERR_INVALID_PARAMETER);
  EXPECT_TRUE(guard) << "still holds the request";
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 1u);
  guard.finish_with_cost(2.5);
  EXPECT_FALSE(guard);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}

TEST(Ticket, QueuedRequestIsDispatchedByAFinish) {
  auto d = narrow_dispatcher();
  auto held = fill(d);
  auto decision = d.start(alice());
  ASSERT_EQ(decision.outcome(), apf::Outcome::Queued);
  EXPECT_EQ(decision.priority_level_name(), "narrow");
  auto ticket = decision.take_ticket();
  ASSERT_TRUE(ticket);
  uint64_t handle = ticket.handle();

  auto pending = ticket.poll();
  EXPECT_TRUE(pending.queued());
  EXPECT_FALSE(pending.take_ticket()) << "the ticket stays with its owner";
  EXPECT_TRUE(ticket) << "still waiting";
  EXPECT_EQ(gauges(d, "narrow").waiting, 1u);

  held.pop_back();
  auto decided = ticket.poll();
  ASSERT_TRUE(decided.executing());
  EXPECT_EQ(decided.priority_level_uid(), "narrow-level-uid");
  EXPECT_EQ(decided.flow_schema_name(), "everyone");
  EXPECT_FALSE(ticket);
  auto guard = decided.take_guard();
  EXPECT_EQ(guard.handle(), handle);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, narrow_limit);
  guard.finish();
  held.clear();
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}

TEST(Ticket, WaitReturnsOnceDispatched) {
  auto d = narrow_dispatcher();
  auto held = fill(d);
  auto ticket = d.start(alice()).take_ticket();
  held.pop_back();
  auto decided = ticket.wait();
  ASSERT_TRUE(decided.executing());
  EXPECT_TRUE(decided.take_guard());
}

TEST(Ticket, WaitForTimesOutStillQueued) {
  auto d = narrow_dispatcher();
  auto held = fill(d);
  auto ticket = d.start(alice()).take_ticket();
  auto r = ticket.try_wait_for(20ms);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_TRUE(r.value().queued());
  EXPECT_TRUE(ticket) << "a timed-out wait keeps the request queued";
  EXPECT_TRUE(ticket.wait_for(1ms).queued());
  EXPECT_TRUE(ticket.cancel());
  EXPECT_FALSE(ticket);
  EXPECT_EQ(gauges(d, "narrow").waiting, 0u);
}

TEST(Ticket, CancelAfterDispatchFinishesTheRequest) {
  auto d = narrow_dispatcher();
  auto held = fill(d);
  auto ticket = d.start(alice()).take_ticket();
  held.pop_back();
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, narrow_limit) << "dispatched";
  auto r = ticket.try_cancel();
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r.value()) << "too late to cancel";
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, narrow_limit - 1) << "finished at once";
}

TEST(Ticket, DestructorCancels) {
  auto d = narrow_dispatcher();
  auto held = fill(d);
  {
    auto ticket = d.start(alice()).take_ticket();
    EXPECT_EQ(gauges(d, "narrow").waiting, 1u);
  }
  EXPECT_EQ(gauges(d, "narrow").waiting, 0u);
  held.clear();
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 0u);
}

TEST(Ticket, EmptyTicketCallsAreErrors) {
  apf::Ticket empty;
  auto d = narrow_dispatcher();
  apf::Ticket dangling = d.adopt_ticket(0);
  EXPECT_FALSE(dangling.try_poll().ok());
  EXPECT_THROW(dangling.poll(), apf::Error);
  EXPECT_THROW(dangling.wait_for(1ms), apf::Error);
  EXPECT_FALSE(dangling.try_cancel().ok());
  EXPECT_FALSE(empty.try_wait().ok()) << "no dispatcher: an error, not a crash";
}

TEST(Ticket, StaleHandleIsAnError) {
  auto d = narrow_dispatcher();
  auto held = fill(d);
  auto ticket = d.start(alice()).take_ticket();
  uint64_t handle = ticket.handle();
  ASSERT_TRUE(ticket.cancel());
  apf::Ticket stale = d.adopt_ticket(handle);
  auto r = stale.try_poll();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().status(), APF_OK);
}

TEST(Ticket, MoveTransfersOwnership) {
  auto d = narrow_dispatcher();
  auto held = fill(d);
  auto a = d.start(alice()).take_ticket();
  uint64_t handle = a.handle();
  apf::Ticket b(std::move(a));
  EXPECT_FALSE(a); // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.handle(), handle);
  auto c = d.start(alice()).take_ticket();
  EXPECT_EQ(gauges(d, "narrow").waiting, 2u);
  c = std::move(b);
  EXPECT_EQ(gauges(d, "narrow").waiting, 1u) << "the overwritten ticket was cancelled";
  EXPECT_EQ(c.handle(), handle);
  EXPECT_EQ(c.release(), handle);
  EXPECT_FALSE(c);
  bool cancelled = false;
  EXPECT_EQ(apf_request_cancel(d.capi(), handle, &cancelled), APF_OK);
  EXPECT_TRUE(cancelled);
}

TEST(Ticket, RejectedWhenTheQueueIsFull) {
  auto d = narrow_dispatcher();
  auto held = fill(d);
  std::vector<apf::Ticket> queued;
  apf::Decision last = d.start(alice());
  while (last.queued()) {
    queued.push_back(last.take_ticket());
    last = d.start(alice());
  }
  EXPECT_EQ(queued.size(), 64u);
  EXPECT_TRUE(last.rejected());
  EXPECT_EQ(last.reject_reason(), apf::RejectReason::QueueFull);
  EXPECT_FALSE(last.take_guard());
  EXPECT_FALSE(last.take_ticket());
  EXPECT_EQ(last.priority_level_name(), "narrow");
}

TEST(Dispatcher, MoveTransfersOwnership) {
  auto a = narrow_dispatcher();
  auto guard = a.start(alice()).take_guard();
  apf::Dispatcher b(std::move(a));
  EXPECT_EQ(a.capi(), nullptr); // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(gauges(b, "narrow").seats_in_use, 1u);
  guard.finish();
  EXPECT_EQ(gauges(b, "narrow").seats_in_use, 0u);

  // A moved-from dispatcher answers with errors, never a crash.
  EXPECT_THROW(a.start(alice()), apf::Error);
  EXPECT_FALSE(a.try_reconfigure(narrow_config).ok());
  EXPECT_FALSE(a.try_now().ok());
  EXPECT_FALSE(a.try_stats_text().ok());
  EXPECT_FALSE(a.try_set_completion_callback([](uint64_t) {}).ok());
  EXPECT_FALSE(a.try_completion_fd().ok());
  EXPECT_FALSE(a.try_take_completion().ok());
  EXPECT_FALSE(a.try_advance_clock(1s).ok());

  auto c = apf::Dispatcher::builtin(manual_options(600));
  c = std::move(b);
  EXPECT_TRUE(gauges(c, "narrow").found) << "the builtin one was freed";
}

TEST(Dispatcher, CapiReleaseAndAdopt) {
  auto a = narrow_dispatcher();
  apf_dispatcher *raw = a.capi_release();
  EXPECT_EQ(a.capi(), nullptr);
  apf::Dispatcher b(raw);
  EXPECT_EQ(b.capi(), raw);
  const apf::Dispatcher &cb = b;
  EXPECT_EQ(cb.capi(), raw);
  EXPECT_TRUE(b.start(alice()).executing());
}

// Guards and tickets share ownership of the C dispatcher: destroying the
// Dispatcher first leaves them working (before, they held a raw pointer and
// this was a use-after-free, which the sanitized run reports).
TEST(Dispatcher, GuardsAndTicketsMayOutliveIt) {
  std::vector<apf::RequestGuard> held;
  apf::Ticket ticket;
  {
    auto d = narrow_dispatcher();
    held = fill(d);
    auto decision = d.start(alice());
    ASSERT_TRUE(decision.queued());
    ticket = decision.take_ticket();
  }
  held.pop_back(); // finishes one request: the queued one is dispatched
  auto decided = ticket.poll();
  ASSERT_TRUE(decided.executing());
  EXPECT_EQ(decided.priority_level_name(), "narrow") << "the names live on too";
  auto guard = decided.take_guard();
  EXPECT_TRUE(guard.try_finish().ok());
  held.clear(); // the last owners: the C dispatcher is freed here
}

TEST(Dispatcher, CapiReleaseLeavesHandlesStillOutSafe) {
  // A guard still out names no dispatcher once its Dispatcher gave the C
  // one away: it finishes its request by handle alone while the C
  // dispatcher lives...
  auto d = narrow_dispatcher();
  auto guard = d.start(alice()).take_guard();
  ASSERT_TRUE(guard);
  apf_dispatcher *raw = d.capi_release();
  EXPECT_TRUE(guard.try_finish().ok());
  apf_dispatcher_free(raw);
  // ...and gets a stale handle, not a freed dispatcher, once it is freed.
  auto d2 = narrow_dispatcher();
  auto kept = d2.start(alice()).take_guard();
  ASSERT_TRUE(kept);
  apf_dispatcher_free(d2.capi_release());
  auto r = kept.try_finish();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status(), APF_ERR_INVALID_HANDLE);
}
