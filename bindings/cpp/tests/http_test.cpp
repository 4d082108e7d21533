// The shared HTTP pieces (apf_http.hpp): the 429 answer and its adaptive
// Retry-After, the observability answers, and the path helper.
#include "common.hpp"

#include <apf_http.hpp>

#include <gtest/gtest.h>

#include <string>

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

TEST(Http, ParsePathReadsKubernetesStylePaths) {
  auto info = apf::parse_path("GET", "/apis/apps/v1/namespaces/ns/deployments/web/scale");
  EXPECT_EQ(info.verb, "get");
  EXPECT_TRUE(info.is_resource_request);
  EXPECT_EQ(info.api_group, "apps");
  EXPECT_EQ(info.namespace_, "ns");
  EXPECT_EQ(info.resource, "deployments");
  EXPECT_EQ(info.name, "web");
  EXPECT_EQ(info.subresource, "scale");
  EXPECT_EQ(apf::parse_path("GET", "/api/v1/pods", "true").verb, "watch");
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
