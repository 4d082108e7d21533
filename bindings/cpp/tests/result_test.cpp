// apf::Error and the expected-style apf::Result, on both success and failure.
#include "common.hpp"

#include <gtest/gtest.h>

#include <string>
#include <type_traits>

using namespace apf_test;

TEST(Error, CarriesStatusAndMessage) {
  apf::Error e(APF_ERR_PANIC, "something broke");
  EXPECT_EQ(e.status(), APF_ERR_PANIC);
  EXPECT_EQ(e.message(), "something broke");
  EXPECT_STREQ(e.what(), "something broke");
  const std::exception &base = e;
  EXPECT_STREQ(base.what(), "something broke");
}

TEST(Error, TakeReadsTheLibraryMessage) {
  apf_dispatcher *out = nullptr;
  apf_error *error = nullptr;
  apf_dispatcher_options options = manual_options().to_c();
  const std::string_view text = "kind: [unterminated";
  apf_status status = apf_dispatcher_new_from_config(text.data(), text.size(),
                                                     &options, &out, &error);
  ASSERT_NE(status, APF_OK);
  EXPECT_EQ(out, nullptr) << "outputs are written only on success";
  ASSERT_NE(error, nullptr) << "the error is written on failure";
  EXPECT_EQ(apf_error_status(error), status);
  apf::Error e = apf::Error::take(status, error); // frees it
  EXPECT_EQ(e.status(), status);
  EXPECT_FALSE(e.message().empty());
  EXPECT_NE(e.message(), apf::Error::of(status).message())
      << "the error says more than the code";
}

TEST(Error, LongMessagesAreReadWhole) {
  // A config with many broken objects gives a message longer than the
  // wrapper's first buffer.
  std::string text;
  for (int i = 0; i < 40; i++) {
    text += "---\napiVersion: flowcontrol.apiserver.k8s.io/v1\n"
            "kind: PriorityLevelConfiguration\nmetadata: {name: broken-level-number-" +
            std::to_string(i) +
            "}\nspec:\n  type: Limited\n  limited:\n    nominalConcurrencyShares: 1\n"
            "    limitResponse:\n      type: Queue\n"
            "      queuing: {queues: 4, handSize: 9, queueLengthLimit: 10}\n";
  }
  auto r = apf::Dispatcher::try_from_config(text, manual_options());
  ASSERT_FALSE(r.ok());
  const std::string &message = r.error().message();
  EXPECT_GT(message.size(), 256u);
  EXPECT_NE(message.find("broken-level-number-0"), std::string::npos);
  EXPECT_NE(message.find("broken-level-number-39"), std::string::npos) << message;
}

TEST(Result, ValueSide) {
  apf::Result<int> r(5);
  EXPECT_TRUE(r.ok());
  EXPECT_TRUE(static_cast<bool>(r));
  EXPECT_EQ(r.value(), 5);
  r.value() = 6;
  const apf::Result<int> &cr = r;
  EXPECT_EQ(cr.value(), 6);
  EXPECT_EQ(std::move(r).unwrap(), 6);
  EXPECT_EQ(apf::Result<int>(7).value_or(0), 7);
  EXPECT_EQ(apf::Result<std::string>(std::string("x")).value(), "x");
}

TEST(Result, ErrorSide) {
  apf::Result<int> r(apf::Error(APF_ERR_NULL_POINTER, "nope"));
  EXPECT_FALSE(r.ok());
  EXPECT_FALSE(static_cast<bool>(r));
  EXPECT_EQ(r.error().status(), APF_ERR_NULL_POINTER);
  EXPECT_EQ(r.error().message(), "nope");
  EXPECT_EQ(apf::Result<int>(apf::Error(APF_ERR_NULL_POINTER, "nope")).value_or(9), 9);
  try {
    (void)std::move(r).unwrap();
    FAIL() << "unwrap of an error throws";
  } catch (const apf::Error &e) {
    EXPECT_EQ(e.status(), APF_ERR_NULL_POINTER);
    EXPECT_EQ(e.message(), "nope");
  }
}

TEST(Result, VoidSide) {
  apf::Result<void> ok;
  EXPECT_TRUE(ok.ok());
  EXPECT_NO_THROW(ok.unwrap());
  apf::Result<void> bad(apf::Error(APF_ERR_INVALID_UTF8, "void failure"));
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.error().status(), APF_ERR_INVALID_UTF8);
  EXPECT_THROW(bad.unwrap(), apf::Error);
}

TEST(Result, MoveOnlyValues) {
  auto r = apf::Dispatcher::try_from_config(narrow_config, manual_options());
  ASSERT_TRUE(r.ok()) << r.error().message();
  apf::Dispatcher d = std::move(r).unwrap();
  auto decision = d.try_start(alice());
  ASSERT_TRUE(decision.ok());
  apf::RequestGuard g = std::move(decision).value().take_guard();
  EXPECT_TRUE(g);
  EXPECT_EQ(gauges(d, "narrow").seats_in_use, 1u);
}

TEST(Result, MisuseAborts) {
  EXPECT_DEATH((void)apf::Result<int>(apf::Error(APF_ERR_NULL_POINTER, "x")).value(), "misuse");
  EXPECT_DEATH((void)apf::Result<int>(1).error(), "misuse");
  EXPECT_DEATH((void)apf::Result<void>().error(), "misuse");
}

// Every throwing call and its Result twin on one failure: same status.
TEST(Result, ThrowingAndResultFormsAgree) {
  auto d = narrow_dispatcher();
  apf_status thrown = APF_OK;
  try {
    d.reconfigure("kind: [unterminated");
  } catch (const apf::Error &e) {
    thrown = e.status();
  }
  auto r = d.try_reconfigure("kind: [unterminated");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(thrown, APF_OK);
  EXPECT_EQ(r.error().status(), thrown);
}

static_assert(std::is_same_v<decltype(std::declval<apf::Dispatcher &>().try_now()),
                             apf::Result<apf::Nanos>>);
static_assert(std::is_same_v<decltype(std::declval<apf::Ticket &>().try_cancel()),
                             apf::Result<bool>>);

TEST(Strings, OutcomesAndReasons) {
  EXPECT_EQ(apf::to_string(apf::Outcome::Execute), "execute");
  EXPECT_EQ(apf::to_string(apf::Outcome::Queued), "queued");
  EXPECT_EQ(apf::to_string(apf::Outcome::Rejected), "rejected");
  EXPECT_EQ(apf::to_string(apf::RejectReason::QueueFull), "queue-full");
  EXPECT_EQ(apf::to_string(apf::RejectReason::TimeOut), "time-out");
  EXPECT_EQ(apf::to_string(apf::RejectReason::Cancelled), "cancelled");
  EXPECT_EQ(apf::to_string(apf::RejectReason::ConcurrencyLimit), "concurrency-limit");
}
