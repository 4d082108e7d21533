// The shared HTTP pieces (apf_http.hpp): the 429 answer and its adaptive
// Retry-After, the observability answers, and the path helper.
#include "common.hpp"

#include <apf_http.hpp>

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

using namespace apf_test;

namespace {

std::string header(const apf::HttpAnswer &a, std::string_view name) {
  for (const auto &[k, v] : a.headers) {
    if (k == name) {
      return v;
    }
  }
  return "<none>";
}

TEST(Http, RejectAnswersTheStatusBodyWithAnAdaptiveRetryAfter) {
  auto d = narrow_dispatcher();
  for (int i = 0; i < 3; i++) {
    auto a = apf::try_reject(d, "narrow", "pl-uid", "everyone", "fs-uid",
                             apf::RejectReason::QueueFull)
                 .unwrap();
    EXPECT_EQ(a.status, 429);
    EXPECT_EQ(header(a, "Retry-After"), "1");
  }
  d.advance_clock(std::chrono::seconds(1));
  auto a = apf::try_reject(d, "narrow", "pl-uid", "everyone", "fs-uid",
                           apf::RejectReason::QueueFull)
               .unwrap();
  EXPECT_EQ(header(a, "Retry-After"), "2");
  EXPECT_EQ(header(a, "Content-Type"), "application/json");
  EXPECT_EQ(header(a, "X-Kubernetes-PF-FlowSchema-UID"), "fs-uid");
  EXPECT_EQ(header(a, "X-Kubernetes-PF-PriorityLevel-UID"), "pl-uid");
  EXPECT_EQ(a.body,
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
            "\"message\":\"Too many requests, please try again later. (priority level "
            "\\\"narrow\\\", flow schema \\\"everyone\\\")\",\"reason\":\"TooManyRequests\","
            "\"details\":{\"causes\":[{\"reason\":\"queue-full\",\"message\":\"its queue was "
            "full\"}],\"retryAfterSeconds\":2},\"code\":429}");
  auto none = apf::try_reject(d, "narrow", "", "everyone", "", apf::RejectReason::None);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.error().status(), APF_ERR_INVALID_PARAMETER);
}

TEST(Http, ObserveAnswersMetricsAndDumpsAndNothingElse) {
  auto d = narrow_dispatcher();
  auto metrics = apf::observe(d, "/metrics");
  ASSERT_TRUE(metrics.has_value());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_EQ(header(*metrics, "Content-Type"), apf::metrics_content_type());
  EXPECT_EQ(metrics->body, d.metrics_text());
  auto levels = apf::observe(d, "/debug/api_priority_and_fairness/dump_priority_levels");
  ASSERT_TRUE(levels.has_value());
  EXPECT_EQ(header(*levels, "Content-Type"), "text/plain; charset=utf-8");
  EXPECT_EQ(levels->body, d.dump_priority_levels());
  auto requests = apf::observe(d, "/debug/api_priority_and_fairness/dump_requests",
                               "includeRequestDetails=1");
  ASSERT_TRUE(requests.has_value());
  EXPECT_EQ(requests->body, d.dump_requests(true));
  EXPECT_FALSE(apf::observe(d, "/api/v1/pods").has_value());
}

// The cases every binding's path helper is checked on
// (tests/data/request-info-cases.json: what Kubernetes' own parser answers),
// through apf::parse_path.
TEST(Http, ParsePathMeetsTheSharedCases) {
  std::ifstream in(APF_REQUEST_INFO_CASES);
  ASSERT_TRUE(in) << APF_REQUEST_INFO_CASES;
  std::string line;
  int count = 0;
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::string::size_type start = 0;
    for (;;) {
      auto tab = line.find('\t', start);
      f.push_back(line.substr(start, tab == std::string::npos ? std::string::npos : tab - start));
      if (tab == std::string::npos) break;
      start = tab + 1;
    }
    ASSERT_EQ(f.size(), 11u) << line;
    auto info = apf::parse_path(f[0], f[1], f[2]);
    std::string what = f[0] + " " + f[1] + " query=" + f[2];
    EXPECT_EQ(info.verb, f[3]) << what;
    EXPECT_EQ(info.is_resource_request, f[4] == "1") << what;
    EXPECT_EQ(info.api_group, f[5]) << what;
    EXPECT_EQ(info.resource, f[6]) << what;
    EXPECT_EQ(info.subresource, f[7]) << what;
    EXPECT_EQ(info.namespace_, f[8]) << what;
    EXPECT_EQ(info.name, f[9]) << what;
    EXPECT_EQ(info.path, f[10]) << what;
    ++count;
  }
  EXPECT_GE(count, 70);
}

TEST(Http, ParsePathReadsKubernetesStylePaths) {
  auto info = apf::parse_path("GET", "/apis/apps/v1/namespaces/ns/deployments/web/scale");
  EXPECT_EQ(info.verb, "get");
  EXPECT_TRUE(info.is_resource_request);
  EXPECT_EQ(info.api_group, "apps");
  EXPECT_EQ(info.namespace_, "ns");
  EXPECT_EQ(info.resource, "deployments");
  EXPECT_EQ(info.name, "web");
  EXPECT_EQ(info.subresource, "scale");
  EXPECT_EQ(apf::parse_path("GET", "/api/v1/pods", "watch=true").verb, "watch");
  // A name from the field selector outlives the call (it is copied).
  auto named = apf::parse_path("GET", "/api/v1/pods", "fieldSelector=metadata.name%3Dp+q");
  EXPECT_EQ(named.verb, "list");
  EXPECT_EQ(named.name, "p q");
  EXPECT_EQ(apf::parse_path("DELETE", "/api/v1/namespaces/ns/pods").verb, "deletecollection");
  auto plain = apf::parse_path("POST", "/healthz");
  EXPECT_FALSE(plain.is_resource_request);
  EXPECT_EQ(plain.verb, "post");
  EXPECT_EQ(plain.path, "/healthz");
  EXPECT_FALSE(apf::try_parse_path("GET", std::string_view("\xff", 1)).ok());
  // A parsed resource request classifies: everyone's schema (resource
  // rules only) takes it; the non-resource one goes to catch-all.
  auto d = narrow_dispatcher();
  auto pods = apf::parse_path("GET", "/api/v1/namespaces/default/pods");
  EXPECT_EQ(d.start(pods.digest("alice", {"system:authenticated"})).flow_schema_name(),
            "everyone");
  EXPECT_EQ(d.start(plain.digest("alice", {"system:authenticated"})).flow_schema_name(),
            "catch-all");
}

} // namespace
