// Metrics and debug dumps through the wrapper: the exposition follows the
// requests, each dump has Kubernetes' columns, texts larger than the first
// guess of the read loop, errors on a moved-from dispatcher, and scrapes
// while other threads run requests.
#include "common.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using namespace apf_test;

namespace {

const std::string pair_labels = "{priority_level=\"narrow\",flow_schema=\"everyone\"}";

/// The value of the sample `name` + `labels` in an exposition (-1 if none).
double sample(const std::string &text, const std::string &name,
              const std::string &labels = pair_labels) {
  std::istringstream lines(text);
  std::string line;
  const std::string key = name + labels + " ";
  while (std::getline(lines, line)) {
    if (line.compare(0, key.size(), key) == 0) {
      return std::stod(line.substr(key.size()));
    }
  }
  return -1;
}

std::string first_line(const std::string &text) {
  return text.substr(0, text.find('\n'));
}

/// Lines after the header.
size_t rows(const std::string &table) {
  size_t n = 0;
  for (char c : table) {
    n += c == '\n';
  }
  return n == 0 ? 0 : n - 1;
}

const char *const P = "apiserver_flowcontrol_";

std::string m(const char *name) { return std::string(P) + name; }

} // namespace

TEST(Metrics, ExpositionFollowsTheRequests) {
  auto d = narrow_dispatcher();
  std::string before = d.metrics_text();
  EXPECT_EQ(sample(before, m("dispatched_requests_total")), 0);
  EXPECT_EQ(before.substr(before.size() - 6), "# EOF\n");

  std::vector<apf::RequestGuard> held;
  for (uint32_t i = 0; i < narrow_limit; i++) {
    held.push_back(d.start(alice()).take_guard());
  }
  auto ticket = d.start(alice()).take_ticket();
  ASSERT_TRUE(ticket);
  std::string busy = d.metrics_text();
  EXPECT_EQ(sample(busy, m("dispatched_requests_total")), 2);
  EXPECT_EQ(sample(busy, m("current_executing_requests")), 2);
  EXPECT_EQ(sample(busy, m("current_inqueue_requests")), 1);

  d.advance_clock(4ms);
  held.pop_back(); // finishes, so the queued one is dispatched
  auto decided = ticket.poll();
  ASSERT_TRUE(decided.executing());
  decided.take_guard().finish();
  held.clear();
  std::string after = d.metrics_text();
  EXPECT_EQ(sample(after, m("dispatched_requests_total")), 3);
  EXPECT_EQ(sample(after, m("current_executing_requests")), 0);
  EXPECT_EQ(sample(after, m("current_inqueue_requests")), 0);
  EXPECT_EQ(sample(after, m("request_wait_duration_seconds_sum"),
                   "{priority_level=\"narrow\",flow_schema=\"everyone\",execute=\"true\"}"),
            0.004);
  auto r = d.try_metrics_text();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), after);
}

TEST(Metrics, TextsLargerThanTheFirstGuessAreReadWhole) {
  // The built-in configuration's exposition is larger than the wrapper's
  // first 16 KiB buffer: the loop must grow it.
  auto d = apf::Dispatcher::builtin(manual_options(600));
  std::string text = d.metrics_text();
  EXPECT_GT(text.size(), 16384u);
  EXPECT_EQ(text.substr(text.size() - 6), "# EOF\n");
  EXPECT_EQ(text.find('\0'), std::string::npos);
  EXPECT_EQ(sample(text, m("nominal_limit_seats"), "{priority_level=\"workload-low\"}"), 245);
}

TEST(Metrics, ContentTypeIsOpenMetrics) {
  std::string_view type = apf::metrics_content_type();
  EXPECT_EQ(type.substr(0, 28), "application/openmetrics-text");
  auto r = apf::try_metrics_content_type();
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), type);
}

TEST(Dumps, HaveKubernetesColumns) {
  auto d = narrow_dispatcher();
  std::vector<apf::RequestGuard> held;
  for (uint32_t i = 0; i < narrow_limit; i++) {
    held.push_back(d.start(alice()).take_guard());
  }
  auto ticket = d.start(alice()).take_ticket();

  std::string levels = d.dump_priority_levels();
  EXPECT_EQ(first_line(levels).substr(0, 32), "PriorityLevelName, ActiveQueues,");
  EXPECT_NE(first_line(levels).find("CancelledRequests"), std::string::npos);
  EXPECT_EQ(rows(levels), 3u) << levels; // catch-all, exempt, narrow
  EXPECT_NE(levels.find("\nnarrow,"), std::string::npos);

  std::string queues = d.dump_queues();
  EXPECT_EQ(first_line(queues).substr(0, 25), "PriorityLevelName, Index,");
  EXPECT_NE(first_line(queues).find("TotalWorkSum"), std::string::npos);
  EXPECT_NE(queues.find("\nnarrow,"), std::string::npos);

  std::string plain = d.dump_requests();
  EXPECT_EQ(first_line(plain).substr(0, 34), "PriorityLevelName, FlowSchemaName,");
  EXPECT_EQ(first_line(plain).find("UserName"), std::string::npos);
  EXPECT_EQ(rows(plain), 1u) << plain;
  std::string detailed = d.dump_requests(true);
  EXPECT_NE(first_line(detailed).find("StartTime, UserName"), std::string::npos);
  EXPECT_NE(detailed.find("/api/v1/namespaces/default/configmaps"), std::string::npos);

  ticket.cancel();
  EXPECT_EQ(rows(d.dump_requests()), 0u);
}

TEST(Dumps, AMovedFromDispatcherGivesErrors) {
  auto d = narrow_dispatcher();
  auto other = std::move(d);
  auto r = d.try_dump_queues(); // NOLINT(bugprone-use-after-move): on purpose
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status(), APF_ERR_NULL_POINTER);
  EXPECT_FALSE(d.try_metrics_text().ok());
  EXPECT_FALSE(d.try_dump_priority_levels().ok());
  EXPECT_FALSE(d.try_dump_requests(true).ok());
  EXPECT_THROW(d.metrics_text(), apf::Error);
  EXPECT_NO_THROW(other.metrics_text());
}

TEST(Metrics, ScrapesRaceRequests) {
  auto d = narrow_dispatcher();
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < 2; t++) {
    workers.emplace_back([&] {
      while (!stop.load()) {
        auto decision = d.start(alice());
        started.fetch_add(1);
        // A guard finishes, a ticket cancels, when destroyed.
      }
    });
  }
  // At least 30 scrapes, and on until the workers have really run (on a
  // loaded machine they may not have started by the 30th).
  for (int i = 0; i < 30 || started.load() < 100; i++) {
    if (i >= 30) {
      std::this_thread::yield();
    }
    std::string text = d.metrics_text();
    ASSERT_EQ(text.substr(text.size() - 6), "# EOF\n");
    EXPECT_LE(sample(text, m("current_executing_requests")), narrow_limit);
    EXPECT_EQ(rows(d.dump_priority_levels()), 3u);
    (void)d.dump_requests(true);
  }
  stop = true;
  for (auto &w : workers) {
    w.join();
  }
  std::string text = d.metrics_text();
  EXPECT_EQ(sample(text, m("current_executing_requests")), 0);
  EXPECT_EQ(sample(text, m("current_inqueue_requests")), 0);
  EXPECT_GT(sample(text, m("dispatched_requests_total")), 0);
}

TEST(Metrics, PrefixAndConstantLabels) {
  auto d = narrow_dispatcher();
  apf::MetricsOptions options;
  EXPECT_EQ(d.metrics_text(options), d.metrics_text());
  options.prefix = "shop";
  options.const_labels = {{"dispatcher", "public"}};
  std::string text = d.metrics_text(options);
  EXPECT_EQ(sample(text, "shop_" + m("dispatched_requests_total"),
                   "{dispatcher=\"public\",priority_level=\"narrow\",flow_schema=\"everyone\"}"),
            0);
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    bool named = line.rfind("shop_", 0) == 0 || line.rfind("# HELP shop_", 0) == 0 ||
                 line.rfind("# TYPE shop_", 0) == 0 || line == "# EOF";
    EXPECT_TRUE(named) << line;
  }

  options.const_labels = {{"flow_schema", "x"}};
  auto r = d.try_metrics_text(options);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().status(), APF_ERR_INVALID_PARAMETER);
  EXPECT_NE(r.error().message().find("flow_schema"), std::string::npos)
      << r.error().message();
  options.const_labels.clear();
  options.prefix = "1st";
  r = d.try_metrics_text(options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("prefix"), std::string::npos) << r.error().message();
}
