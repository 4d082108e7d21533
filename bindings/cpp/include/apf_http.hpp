// What every libapf HTTP middleware shares, for a C++ server: the 429 answer
// of a request that was not served, the /metrics and debug-dump answers,
// and the request-to-digest path helper. Each is one call into libapf, so a
// C++ server answers exactly as the Rust, Go and Python middlewares do
// (docs/middleware.md).
#ifndef APF_HTTP_HPP
#define APF_HTTP_HPP

#include <apf.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace apf {

/// An HTTP answer libapf made: status, headers (Content-Type first) and
/// body.
struct HttpAnswer {
  int status = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

/// The response headers Kubernetes sets on every classified request.
inline constexpr std::string_view flow_schema_uid_header = "X-Kubernetes-PF-FlowSchema-UID";
inline constexpr std::string_view priority_level_uid_header = "X-Kubernetes-PF-PriorityLevel-UID";

/// Count a request classified to `priority_level` / `flow_schema` (with
/// their UIDs) that was not served for `reason`, and give its answer: 429,
/// Content-Type application/json, Retry-After adapted to the level's recent
/// rejections (as Kubernetes does), the two UID headers, and a Kubernetes
/// Status object as the body. Call it once per such request.
inline Result<HttpAnswer> try_reject(const Dispatcher &dispatcher, std::string_view priority_level,
                                     std::string_view priority_level_uid,
                                     std::string_view flow_schema,
                                     std::string_view flow_schema_uid, RejectReason reason) {
  uint64_t retry_after = 0;
  auto body = detail::read_text([&](apf_text *out) {
    return apf_dispatcher_reject(dispatcher.capi(), priority_level.data(), priority_level.size(),
                                 flow_schema.data(), flow_schema.size(),
                                 static_cast<uint32_t>(reason), &retry_after, out);
  });
  if (!body) {
    return body.error();
  }
  HttpAnswer answer;
  answer.status = 429;
  answer.headers = {
      {"Content-Type", "application/json"},
      {"Retry-After", std::to_string(retry_after)},
      {std::string(flow_schema_uid_header), std::string(flow_schema_uid)},
      {std::string(priority_level_uid_header), std::string(priority_level_uid)},
  };
  answer.body = std::move(body).unwrap();
  return answer;
}

/// The answer to `/metrics` or Kubernetes' /debug/api_priority_and_fairness/
/// dump_priority_levels, dump_queues, dump_requests (`query` is the raw
/// query string without '?': includeRequestDetails=1 adds each request's
/// details), or no value for any other path. Serve it before admission, and
/// only where operators reach (the dumps name users and paths).
inline Result<std::optional<HttpAnswer>> try_observe(const Dispatcher &dispatcher,
                                                     std::string_view path,
                                                     std::string_view query = {}) {
  uint16_t status = 0;
  apf_text content_type{};
  apf_text body{};
  apf_status st = apf_dispatcher_observe(dispatcher.capi(), path.data(), path.size(), query.data(),
                                         query.size(), &status, &content_type, &body);
  if (st != APF_OK) {
    return Error::of(st);
  }
  std::optional<HttpAnswer> answer;
  if (status != 0) {
    answer.emplace();
    answer->status = status;
    answer->headers = {{"Content-Type", std::string(content_type.ptr, content_type.len)}};
    answer->body.assign(body.ptr, body.len);
  }
  apf_text_free(&content_type);
  apf_text_free(&body);
  return answer;
}
inline std::optional<HttpAnswer> observe(const Dispatcher &dispatcher, std::string_view path,
                                         std::string_view query = {}) {
  return try_observe(dispatcher, path, query).unwrap();
}

/// The request attributes Kubernetes' API server derives from a method, a
/// URL path and its query string (libapf's parser, the same in
/// every binding): fill in the user and groups from your authentication and
/// classify with `digest()`.
struct RequestInfo {
  std::string verb;
  bool is_resource_request = false;
  std::string api_group;
  std::string resource;
  std::string subresource;
  std::string namespace_;
  std::string name;
  std::string path;

  /// The digest of this request for `user` in `groups` (views into this
  /// RequestInfo and `groups`: keep both alive while it is used).
  RequestDigest digest(std::string_view user, std::vector<std::string_view> groups) const {
    RequestDigest d;
    d.user = user;
    d.groups = std::move(groups);
    d.verb = verb;
    d.is_resource_request = is_resource_request;
    d.api_group = api_group;
    d.resource = resource;
    d.subresource = subresource;
    d.namespace_ = namespace_;
    d.name = name;
    d.path = path;
    return d;
  }
};

/// `query` is the raw query string without `?`: for a GET of a collection
/// it decides, as in Kubernetes, between list and watch (a first `watch`
/// value other than `0` or `false`, an empty one included, is a watch) and
/// gives the name a `fieldSelector=metadata.name=NAME` requires.
inline Result<RequestInfo> try_parse_path(std::string_view method, std::string_view path,
                                          std::string_view query = {}) {
  apf_request_info raw{};
  apf_text raw_name{};
  apf_status st = apf_request_info_parse_query(method.data(), method.size(), path.data(),
                                               path.size(), query.data(), query.size(), &raw,
                                               &raw_name);
  if (st != APF_OK) {
    return Error::of(st);
  }
  auto s = [](apf_str v) { return std::string(v.ptr, v.len); };
  RequestInfo info;
  info.verb.assign(raw.verb.ptr, raw.verb.len);
  apf_text_free(&raw.verb);
  info.is_resource_request = raw.is_resource_request;
  info.api_group = s(raw.api_group);
  info.resource = s(raw.resource);
  info.subresource = s(raw.subresource);
  info.namespace_ = s(raw.namespace_);
  info.name = s(raw.name);
  apf_text_free(&raw_name); // what a name from the query pointed into
  info.path = s(raw.path);
  return info;
}
inline RequestInfo parse_path(std::string_view method, std::string_view path,
                              std::string_view query = {}) {
  return try_parse_path(method, path, query).unwrap();
}

} // namespace apf

#endif
