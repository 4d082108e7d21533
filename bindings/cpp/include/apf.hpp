// apf.hpp: a header-only C++17 wrapper over libapf's C ABI (include/apf.h).
//
// Ownership is expressed with move-only RAII types:
//   apf::Dispatcher    owns an apf_dispatcher (shared with its guards and
//                      tickets);
//   apf::RequestGuard  an executing request: finishes it when destroyed,
//                      including while an exception unwinds the stack;
//   apf::Ticket        a queued request: wait / poll / cancel, and cancels
//                      it when destroyed;
//   apf::Workqueue     owns an apf_workqueue (client-go's work queues);
//   apf::WorkItem      an item being processed: apf_workqueue_done when destroyed;
//   apf::Limiter       owns a rate limiter description (apf_rate_limiter).
// A guard or ticket shares ownership of its dispatcher: it may outlive the
// Dispatcher object (the C dispatcher is freed after the last of them).
// Work items must be destroyed before their workqueue.
//
// Every fallible operation comes twice: `try_x(...)` returns a
// [[nodiscard]] apf::Result<T> and never throws an apf::Error (for code
// built without exceptions), and `x(...)` returns T or throws apf::Error,
// which carries the apf_status code and the library's message (the owned
// apf_error of the calls that hand one out, else apf_status_text). Built with -fno-exceptions, `x(...)` prints the error and
// aborts instead of throwing.
//
// Threading: one Dispatcher may be used from many threads at once (the C
// dispatcher is thread-safe); moving or destroying it must not race with its
// use. A RequestGuard, Ticket or Decision is used by one thread at a time,
// but may move between threads.
//
// Times are std::chrono::nanoseconds on the dispatcher's clock (its epoch is
// the dispatcher's creation; with `manual_clock` it moves only by
// advance_clock).

#ifndef APF_HPP
#define APF_HPP

#include <apf.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#if defined(__cpp_exceptions) || defined(__EXCEPTIONS) || defined(_CPPUNWIND)
#define APF_HPP_EXCEPTIONS 1
#else
#define APF_HPP_EXCEPTIONS 0
#endif

namespace apf {

using Nanos = std::chrono::nanoseconds;

// ---------------------------------------------------------------------------
// Errors

/// A failed library call: its status code and the library's message.
class Error : public std::exception {
public:
  Error(apf_status status, std::string message)
      : status_(status), message_(std::move(message)) {}

  /// The error of a call that returned `status`, described by its code
  /// (apf_status_text): the calls without an apf_error out-parameter,
  /// whose codes say it all.
  static Error of(apf_status status) {
    return Error(status, status_message(status));
  }

  /// The error of a call that returned `status` and filled `error` (its
  /// apf_error out-parameter, which may be NULL): takes the library's
  /// message and frees `error`.
  static Error take(apf_status status, apf_error *error) {
    std::string message;
    const char *text = nullptr;
    size_t len = 0;
    if (error != nullptr && apf_error_message(error, &text, &len) == APF_OK) {
      message.assign(text, len);
    }
    apf_error_free(error);
    if (message.empty()) {
      message = status_message(status);
    }
    return Error(status, std::move(message));
  }

  apf_status status() const noexcept { return status_; }
  const std::string &message() const noexcept { return message_; }
  const char *what() const noexcept override { return message_.c_str(); }

private:
  static std::string status_message(apf_status status) {
    const char *text = nullptr;
    size_t len = 0;
    if (apf_status_text(status, &text, &len) == APF_OK) {
      return std::string(text, len);
    }
    return "libapf status " + std::to_string(static_cast<uint32_t>(status));
  }

  apf_status status_;
  std::string message_;
};

namespace detail {

/// Reports `error`: throws it, or without exceptions prints it and aborts.
[[noreturn]] inline void raise(const Error &error) {
#if APF_HPP_EXCEPTIONS
  throw error;
#else
  std::fprintf(stderr, "apf: unhandled error %u: %s\n",
               static_cast<unsigned>(error.status()), error.what());
  std::abort();
#endif
}

/// A precondition of the wrapper itself was broken (reading the value of a
/// failed Result, the error of a successful one).
[[noreturn]] inline void misuse(const char *what) {
  std::fprintf(stderr, "apf: misuse: %s\n", what);
  std::abort();
}

/// A duration as the C ABI's unsigned nanoseconds (negative means zero).
inline uint64_t to_u64(Nanos d) noexcept {
  return d.count() < 0 ? 0 : static_cast<uint64_t>(d.count());
}

inline std::string_view view(apf_str s) noexcept {
  return s.ptr == nullptr ? std::string_view() : std::string_view(s.ptr, s.len);
}

inline apf_str str(std::string_view s) noexcept {
  apf_str out{};
  out.ptr = s.data();
  out.len = s.size();
  return out;
}

} // namespace detail

/// An expected-style result: a T or an apf::Error. Check it (`ok()` or
/// `if (result)`) before taking the value; `unwrap()` throws the error.
template <typename T> class [[nodiscard]] Result {
public:
  Result(T value) : data_(std::in_place_index<0>, std::move(value)) {}
  Result(Error error) : data_(std::in_place_index<1>, std::move(error)) {}

  bool ok() const noexcept { return data_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  /// The value; a failed result aborts (check first, or use unwrap()).
  T &value() & {
    if (!ok()) {
      detail::misuse("value() of a failed apf::Result");
    }
    return *std::get_if<0>(&data_);
  }
  const T &value() const & {
    if (!ok()) {
      detail::misuse("value() of a failed apf::Result");
    }
    return *std::get_if<0>(&data_);
  }
  T &&value() && { return std::move(value()); }

  /// The error; a successful result aborts.
  const Error &error() const & {
    if (ok()) {
      detail::misuse("error() of a successful apf::Result");
    }
    return *std::get_if<1>(&data_);
  }

  /// The value, or the error thrown (printed and aborted without exceptions).
  T unwrap() && {
    if (!ok()) {
      detail::raise(*std::get_if<1>(&data_));
    }
    return std::move(*std::get_if<0>(&data_));
  }

  /// The value, or `fallback` on error.
  T value_or(T fallback) && {
    return ok() ? std::move(*std::get_if<0>(&data_)) : std::move(fallback);
  }

private:
  std::variant<T, Error> data_;
};

/// A result without a value: success or an apf::Error.
template <> class [[nodiscard]] Result<void> {
public:
  Result() = default;
  Result(Error error) : error_(std::move(error)) {}

  bool ok() const noexcept { return !error_.has_value(); }
  explicit operator bool() const noexcept { return ok(); }

  const Error &error() const & {
    if (ok()) {
      detail::misuse("error() of a successful apf::Result");
    }
    return *error_;
  }

  /// Throws the error, if any (prints and aborts without exceptions).
  void unwrap() const {
    if (!ok()) {
      detail::raise(*error_);
    }
  }

private:
  std::optional<Error> error_;
};

namespace detail {

inline Result<void> check(apf_status status) {
  if (status == APF_OK) {
    return Result<void>();
  }
  return Error::of(status);
}

/// Runs `fill(&text)` (one of the C text functions, which hand over an
/// owned apf_text) and copies the text into a std::string.
template <typename Fill> Result<std::string> read_text(Fill fill) {
  apf_text text{};
  apf_status status = fill(&text);
  if (status != APF_OK) {
    return Error::of(status);
  }
  std::string copy(text.ptr, text.len);
  apf_text_free(&text);
  return copy;
}

/// The C dispatcher, shared by its Dispatcher and every RequestGuard and
/// Ticket it hands out: it is freed after the last of them, so destroying
/// the Dispatcher first is safe (the guards finish and the tickets cancel
/// on a live dispatcher). Also holds the completion callback, destroyed
/// only after the C dispatcher that calls it.
class SharedDispatcher {
public:
  using CompletionCallback = std::function<void(uint64_t request)>;

  explicit SharedDispatcher(apf_dispatcher *raw) noexcept : raw_(raw) {}
  ~SharedDispatcher() { apf_dispatcher_free(raw_); }
  SharedDispatcher(const SharedDispatcher &) = delete;
  SharedDispatcher &operator=(const SharedDispatcher &) = delete;

  apf_dispatcher *get() const noexcept { return raw_; }
  /// Stops owning the C dispatcher (Dispatcher::capi_release): handles still
  /// out then name no dispatcher (NULL) and reach their requests by handle
  /// alone (libapf keeps every request in one slab), which is safe whether
  /// or not the new owner has freed the C dispatcher: a freed one's handles
  /// are stale (APF_ERR_INVALID_HANDLE).
  apf_dispatcher *release() noexcept { return std::exchange(raw_, nullptr); }

  std::mutex mutex;
  std::unique_ptr<CompletionCallback> callback;

private:
  apf_dispatcher *raw_;
};

using DispatcherRef = std::shared_ptr<SharedDispatcher>;

inline apf_dispatcher *raw(const DispatcherRef &d) noexcept {
  return d ? d->get() : nullptr;
}

} // namespace detail

// ---------------------------------------------------------------------------
// Plain values

/// A library version, MAJOR.MINOR.PATCH.
struct Version {
  uint32_t major;
  uint32_t minor;
  uint32_t patch;

  static constexpr Version unpack(uint32_t packed) noexcept {
    return Version{packed >> 16, (packed >> 8) & 0xff, packed & 0xff};
  }
  constexpr uint32_t packed() const noexcept {
    return (major << 16) | (minor << 8) | patch;
  }
  friend constexpr bool operator==(Version a, Version b) noexcept {
    return a.major == b.major && a.minor == b.minor && a.patch == b.patch;
  }
  friend constexpr bool operator!=(Version a, Version b) noexcept {
    return !(a == b);
  }
};

/// The version this header was written against.
inline constexpr Version header_version{APF_VERSION_MAJOR, APF_VERSION_MINOR,
                                        APF_VERSION_PATCH};

/// The version of the library actually loaded.
inline Version library_version() noexcept {
  return Version::unpack(apf_abi_version());
}

/// The adaptive server concurrency limit's tuning (docs/adaptive-limit.md).
/// A default-constructed AdaptiveOptions holds the library's defaults
/// (apf_adaptive_options_default). Set Options::adaptive to turn the limit
/// on; out-of-range values make the dispatcher's creation fail with
/// APF_ERR_INVALID_PARAMETER naming the field.
struct AdaptiveOptions {
  /// The least total the gradient may set, and where the slow start begins.
  uint32_t min_limit = 8;
  /// The greatest total the gradient may set.
  uint32_t max_limit = 10000;
  /// How often a window of latencies is taken and the total updated.
  Nanos update_interval = std::chrono::milliseconds(250);
  /// The latency over the minimum the total settles at, in percent.
  uint32_t tolerance_percent = 10;
  /// How much of each window's target the total takes, in percent.
  uint32_t smoothing_percent = 20;
  /// The exponent on the latency ratio (1 to 8).
  uint32_t gain = 3;
  /// Windows with fewer completions are merged with the next.
  uint32_t min_window_samples = 16;
  /// Time between minimum-latency probes.
  Nanos probe_interval = std::chrono::seconds(60);
  /// The total a probe asks for.
  uint32_t probe_limit = 3;
  /// Completions a probe averages.
  uint32_t probe_samples = 50;
  /// The longest a probe drains or measures.
  Nanos probe_timeout = std::chrono::seconds(2);

  AdaptiveOptions() {
    apf_adaptive_options raw{};
    // The in-class values mirror the library's and stay if this fails,
    // which a valid out-pointer rules out.
    if (apf_adaptive_options_default(&raw) == APF_OK) {
      *this = from_c(raw);
    }
  }

  static AdaptiveOptions from_c(const apf_adaptive_options &raw) {
    AdaptiveOptions o(Uninitialised{});
    o.min_limit = raw.min_limit;
    o.max_limit = raw.max_limit;
    o.update_interval = Nanos(static_cast<Nanos::rep>(raw.update_interval_ns));
    o.tolerance_percent = raw.tolerance_percent;
    o.smoothing_percent = raw.smoothing_percent;
    o.gain = raw.gain;
    o.min_window_samples = raw.min_window_samples;
    o.probe_interval = Nanos(static_cast<Nanos::rep>(raw.probe_interval_ns));
    o.probe_limit = raw.probe_limit;
    o.probe_samples = raw.probe_samples;
    o.probe_timeout = Nanos(static_cast<Nanos::rep>(raw.probe_timeout_ns));
    return o;
  }

  /// A negative duration becomes 0, which the library refuses by name.
  apf_adaptive_options to_c() const noexcept {
    apf_adaptive_options raw{};
    (void)apf_adaptive_options_default(&raw); // sets struct_size
    raw.min_limit = min_limit;
    raw.max_limit = max_limit;
    raw.update_interval_ns = detail::to_u64(update_interval);
    raw.tolerance_percent = tolerance_percent;
    raw.smoothing_percent = smoothing_percent;
    raw.gain = gain;
    raw.min_window_samples = min_window_samples;
    raw.probe_interval_ns = detail::to_u64(probe_interval);
    raw.probe_limit = probe_limit;
    raw.probe_samples = probe_samples;
    raw.probe_timeout_ns = detail::to_u64(probe_timeout);
    return raw;
  }

private:
  struct Uninitialised {};
  explicit AdaptiveOptions(Uninitialised) {}
};

/// The adaptive limit's state at one moment (Dispatcher::adaptive_state;
/// the same figures as the apiserver_flowcontrol_adaptive_* metrics).
/// Under a fixed limit `enabled` is false and every other field zero.
struct AdaptiveState {
  bool enabled = false;
  /// A minimum-latency probe is under way.
  bool probing = false;
  /// The total seats the priority levels share now.
  uint32_t limit = 0;
  /// The smoothed total the gradient follows.
  double estimate = 0;
  /// What the last probe measured; zero until one has.
  Nanos min_latency{0};
  /// The last window's mean execution time; zero before the first window.
  Nanos latency{0};
  /// The last gradient applied, in [0.5, 2].
  double gradient = 0;
  /// Probes started and windows taken so far.
  uint64_t probes = 0;
  uint64_t updates = 0;

  static AdaptiveState from_c(const apf_adaptive_state &raw) noexcept {
    AdaptiveState s;
    s.enabled = raw.enabled;
    s.probing = raw.probing;
    s.limit = raw.limit;
    s.estimate = raw.estimate;
    s.min_latency = Nanos(static_cast<Nanos::rep>(raw.min_latency_ns));
    s.latency = Nanos(static_cast<Nanos::rep>(raw.latency_ns));
    s.gradient = raw.gradient;
    s.probes = raw.probes;
    s.updates = raw.updates;
    return s;
  }
};

/// Server-wide settings. A default-constructed Options holds the library's
/// defaults (apf_dispatcher_options_default).
struct Options {
  /// Seats shared by all priority levels.
  uint32_t server_concurrency_limit = 600;
  /// G, fair queuing's initial service-time guess.
  Nanos service_time_guess = std::chrono::milliseconds(3);
  /// The longest a request waits in a queue.
  Nanos wait_limit = std::chrono::seconds(15);
  /// How often borrowing recomputes the levels' concurrency limits.
  Nanos borrowing_period = std::chrono::seconds(10);
  /// A clock that moves only by Dispatcher::advance_clock.
  bool manual_clock = false;
  /// The adaptive limit's tuning, or none for the fixed
  /// server_concurrency_limit (the default).
  std::optional<AdaptiveOptions> adaptive;

  Options() {
    apf_dispatcher_options raw{};
    // The in-class values mirror the library's and stay if this fails,
    // which a valid out-pointer rules out.
    if (apf_dispatcher_options_default(&raw) == APF_OK) {
      *this = from_c(raw);
    }
  }

  static Options from_c(const apf_dispatcher_options &raw) {
    Options o(Uninitialised{});
    o.server_concurrency_limit = raw.server_concurrency_limit;
    o.service_time_guess = Nanos(static_cast<Nanos::rep>(raw.service_time_guess_ns));
    o.wait_limit = Nanos(static_cast<Nanos::rep>(raw.wait_limit_ns));
    o.borrowing_period = Nanos(static_cast<Nanos::rep>(raw.borrowing_period_ns));
    o.manual_clock = raw.manual_clock;
    if (raw.adaptive != nullptr) {
      o.adaptive = AdaptiveOptions::from_c(*raw.adaptive);
    }
    return o;
  }

  apf_dispatcher_options to_c() const noexcept {
    apf_dispatcher_options raw{};
    (void)apf_dispatcher_options_default(&raw); // sets struct_size
    raw.server_concurrency_limit = server_concurrency_limit;
    raw.service_time_guess_ns = detail::to_u64(service_time_guess);
    raw.wait_limit_ns = detail::to_u64(wait_limit);
    raw.borrowing_period_ns = detail::to_u64(borrowing_period);
    raw.manual_clock = manual_clock;
    return raw;
  }

  /// to_c with the adaptive tuning too: `storage` holds it and must outlive
  /// the returned struct's use (to_c() alone leaves `adaptive` NULL).
  apf_dispatcher_options to_c(apf_adaptive_options &storage) const noexcept {
    apf_dispatcher_options raw = to_c();
    if (adaptive) {
      storage = adaptive->to_c();
      raw.adaptive = &storage;
    }
    return raw;
  }

private:
  struct Uninitialised {};
  explicit Options(Uninitialised) {}
};

/// How Dispatcher::metrics_text(const MetricsOptions &) names and labels
/// the series, for a service that is not an API server or runs several
/// dispatchers: `prefix` (with `_`) before every metric name, empty for
/// none; `const_labels` on every series (at most 64; names as Prometheus
/// allows them and none the metrics use themselves). The library checks
/// them and its error names the one at fault.
struct MetricsOptions {
  std::string prefix;
  std::vector<std::pair<std::string, std::string>> const_labels;
};

/// What classification looks at. The views must stay valid for the call.
struct RequestDigest {
  std::string_view user;
  std::vector<std::string_view> groups;
  std::string_view verb;
  bool is_resource_request = false;
  std::string_view api_group;
  std::string_view resource;
  std::string_view subresource;
  std::string_view namespace_;
  std::string_view name;
  std::string_view path;
};

/// Seats a request occupies while executing (initial) and afterwards for
/// `additional_latency` (final), as Kubernetes' work estimator gives them.
struct WorkEstimate {
  uint32_t initial_seats = 1;
  uint32_t final_seats = 0;
  Nanos additional_latency = Nanos(0);

  apf_work_estimate to_c() const noexcept {
    apf_work_estimate raw{};
    raw.initial_seats = initial_seats;
    raw.final_seats = final_seats;
    raw.additional_latency_nanos = detail::to_u64(additional_latency);
    return raw;
  }
};

enum class Outcome : uint32_t {
  Execute = APF_OUTCOME_EXECUTE,
  Queued = APF_OUTCOME_QUEUED,
  Rejected = APF_OUTCOME_REJECTED,
};

/// Why a request was rejected (None unless the outcome is Rejected).
enum class RejectReason : uint32_t {
  None = APF_REJECT_NONE,
  QueueFull = APF_REJECT_QUEUE_FULL,
  TimeOut = APF_REJECT_TIME_OUT,
  Cancelled = APF_REJECT_CANCELLED,
  ConcurrencyLimit = APF_REJECT_CONCURRENCY_LIMIT,
  // A panic inside the level's critical section failed the level (a bug);
  // the dispatcher's next reconfiguration replaces it.
  LevelFailed = APF_REJECT_LEVEL_FAILED,
};

inline std::string_view to_string(Outcome o) noexcept {
  switch (o) {
  case Outcome::Execute:
    return "execute";
  case Outcome::Queued:
    return "queued";
  case Outcome::Rejected:
    return "rejected";
  }
  return "unknown";
}

/// Kubernetes' label value for the reason.
inline std::string_view to_string(RejectReason r) noexcept {
  switch (r) {
  case RejectReason::None:
    return "none";
  case RejectReason::QueueFull:
    return "queue-full";
  case RejectReason::TimeOut:
    return "time-out";
  case RejectReason::Cancelled:
    return "cancelled";
  case RejectReason::ConcurrencyLimit:
    return "concurrency-limit";
  case RejectReason::LevelFailed:
    return "level-failed";
  }
  return "unknown";
}

// ---------------------------------------------------------------------------
// Request handles

class Decision;

/// An executing request; destroying it finishes the request at the current
/// time (also during stack unwinding). Move-only; an empty guard (default
/// constructed, moved from, finished or released) does nothing. It shares
/// ownership of the dispatcher, so it may outlive the Dispatcher object.
class RequestGuard {
public:
  RequestGuard() noexcept = default;
  /// Takes ownership of an executing request's handle.
  RequestGuard(detail::DispatcherRef dispatcher, uint64_t request) noexcept
      : dispatcher_(std::move(dispatcher)), request_(request) {}

  RequestGuard(RequestGuard &&other) noexcept
      : dispatcher_(std::move(other.dispatcher_)),
        request_(std::exchange(other.request_, 0)) {}
  RequestGuard &operator=(RequestGuard &&other) noexcept {
    if (this != &other) {
      reset();
      dispatcher_ = std::move(other.dispatcher_);
      request_ = std::exchange(other.request_, 0);
    }
    return *this;
  }
  RequestGuard(const RequestGuard &) = delete;
  RequestGuard &operator=(const RequestGuard &) = delete;
  ~RequestGuard() { reset(); }

  /// Whether the guard still holds a request.
  explicit operator bool() const noexcept { return request_ != 0; }
  /// The request's handle (0 when empty).
  uint64_t handle() const noexcept { return request_; }

  /// Finishes now. The guard is empty afterwards, even on error.
  Result<void> try_finish() { return try_finish_at(Nanos(0)); }
  /// Finishes with `end` (on the dispatcher's clock; 0 = now) as the actual
  /// end of execution, so the work estimate's extra latency counts from it.
  Result<void> try_finish_at(Nanos end) {
    uint64_t request = std::exchange(request_, 0);
    Result<void> result = detail::check(
        apf_finish(detail::raw(dispatcher_), request, detail::to_u64(end)));
    dispatcher_.reset();
    return result;
  }
  void finish() { try_finish().unwrap(); }
  void finish_at(Nanos end) { try_finish_at(end).unwrap(); }

  /// Finishes now, reporting what the request really cost in seats (for a
  /// flow schema with `apf.libapf.io/cost: learned`, later requests of the
  /// same schema, verb and resource get seats from these reports). A cost
  /// that is not a finite number of 0 or more is an error and the guard
  /// still holds the request.
  Result<void> try_finish_with_cost(double cost) {
    Result<void> result = detail::check(
        apf_finish_with_cost(detail::raw(dispatcher_), request_, 0, cost));
    if (result.ok()) {
      request_ = 0;
      dispatcher_.reset();
    }
    return result;
  }
  void finish_with_cost(double cost) { try_finish_with_cost(cost).unwrap(); }

  /// Gives back `seats` of the request's seats now while it keeps executing
  /// (a watch after its initial burst); 0 gives back all it still holds. Its
  /// finish later gives back only the rest. A second release of all seats,
  /// or more seats than held, is an error that changes nothing.
  Result<void> try_release_seats(uint32_t seats = 0) {
    return detail::check(
        apf_request_release_seats(detail::raw(dispatcher_), request_, seats));
  }
  void release_seats(uint32_t seats = 0) { try_release_seats(seats).unwrap(); }

  /// Gives up ownership without finishing; the caller finishes the handle.
  uint64_t release() noexcept { return std::exchange(request_, 0); }

private:
  void reset() noexcept {
    if (request_ != 0) {
      // A destructor cannot report failure; a stale handle is the only way
      // to fail here and leaves nothing to clean up.
      (void)apf_finish(detail::raw(dispatcher_), std::exchange(request_, 0), 0);
    }
    dispatcher_.reset();
  }

  detail::DispatcherRef dispatcher_;
  uint64_t request_ = 0;
};

/// Where a request was classified. The views point into the dispatcher and
/// stay valid until it is destroyed.
struct Classification {
  std::string_view flow_schema_name;
  std::string_view flow_schema_uid;
  std::string_view priority_level_name;
  std::string_view priority_level_uid;
};

/// A queued request. wait() / poll() return a Decision: Execute (take its
/// guard) or Rejected, after which the ticket is empty, or Queued when no
/// decision has been made yet (the ticket still holds the request).
/// Destroying a non-empty ticket cancels the request. Move-only. Like a
/// RequestGuard it shares ownership of the dispatcher.
class Ticket {
public:
  Ticket() noexcept = default;
  /// Takes ownership of a queued request's handle.
  Ticket(detail::DispatcherRef dispatcher, uint64_t request,
         Classification where) noexcept
      : dispatcher_(std::move(dispatcher)), request_(request), where_(where) {}

  Ticket(Ticket &&other) noexcept
      : dispatcher_(std::move(other.dispatcher_)),
        request_(std::exchange(other.request_, 0)), where_(other.where_) {}
  Ticket &operator=(Ticket &&other) noexcept {
    if (this != &other) {
      reset();
      dispatcher_ = std::move(other.dispatcher_);
      request_ = std::exchange(other.request_, 0);
      where_ = other.where_;
    }
    return *this;
  }
  Ticket(const Ticket &) = delete;
  Ticket &operator=(const Ticket &) = delete;
  ~Ticket() { reset(); }

  explicit operator bool() const noexcept { return request_ != 0; }
  uint64_t handle() const noexcept { return request_; }

  /// Blocks until the request is decided, or at most `timeout` of real time.
  inline Result<Decision> try_wait_for(Nanos timeout);
  /// Blocks until the request is decided.
  inline Result<Decision> try_wait();
  /// The decision if there is one, without blocking.
  inline Result<Decision> try_poll();
  inline Decision wait_for(Nanos timeout);
  inline Decision wait();
  inline Decision poll();

  /// Gives up waiting: true if the request was still queued. false if it had
  /// already been decided (a dispatched request is finished at once). The
  /// ticket is empty afterwards, even on error.
  Result<bool> try_cancel() {
    bool cancelled = false;
    apf_status status = apf_request_cancel(
        detail::raw(dispatcher_), std::exchange(request_, 0), &cancelled);
    dispatcher_.reset();
    if (status != APF_OK) {
      return Error::of(status);
    }
    return cancelled;
  }
  bool cancel() { return try_cancel().unwrap(); }

  /// Gives up ownership without cancelling.
  uint64_t release() noexcept { return std::exchange(request_, 0); }

private:
  inline Result<Decision> wait_raw(uint64_t timeout_nanos);
  inline Result<Decision> decided(uint32_t outcome, uint32_t reason);

  void reset() noexcept {
    if (request_ != 0) {
      bool cancelled = false;
      (void)apf_request_cancel(detail::raw(dispatcher_),
                               std::exchange(request_, 0), &cancelled);
    }
    dispatcher_.reset();
  }

  detail::DispatcherRef dispatcher_;
  uint64_t request_ = 0;
  Classification where_;
};

/// The dispatcher's answer to a request: execute now (take_guard()), queued
/// (take_ticket()), or rejected (reject_reason()), with the flow schema and
/// priority level it was classified into. Holds the guard or ticket until
/// taken: destroying a Decision finishes or cancels what it still holds.
class Decision {
public:
  Outcome outcome() const noexcept { return outcome_; }
  bool executing() const noexcept { return outcome_ == Outcome::Execute; }
  bool queued() const noexcept { return outcome_ == Outcome::Queued; }
  bool rejected() const noexcept { return outcome_ == Outcome::Rejected; }
  /// Why it was rejected; RejectReason::None unless rejected().
  RejectReason reject_reason() const noexcept { return reason_; }

  std::string_view flow_schema_name() const noexcept {
    return where_.flow_schema_name;
  }
  std::string_view flow_schema_uid() const noexcept {
    return where_.flow_schema_uid;
  }
  std::string_view priority_level_name() const noexcept {
    return where_.priority_level_name;
  }
  std::string_view priority_level_uid() const noexcept {
    return where_.priority_level_uid;
  }
  const Classification &classification() const noexcept { return where_; }

  /// The executing request's guard; empty unless executing() (and on a
  /// second call).
  RequestGuard take_guard() noexcept { return std::move(guard_); }
  /// The queued request's ticket; empty unless queued() came from
  /// Dispatcher::start (and on a second call).
  Ticket take_ticket() noexcept { return std::move(ticket_); }

  /// Builds a decision from the C struct, adopting its request handle.
  static Decision from_c(const detail::DispatcherRef &dispatcher,
                         const apf_decision &raw) {
    Classification where{
        detail::view(raw.flow_schema_name),
        detail::view(raw.flow_schema_uid),
        detail::view(raw.priority_level_name),
        detail::view(raw.priority_level_uid),
    };
    Decision d(static_cast<Outcome>(raw.outcome),
               static_cast<RejectReason>(raw.reject_reason), where);
    if (d.executing()) {
      d.guard_ = RequestGuard(dispatcher, raw.request);
    } else if (d.queued()) {
      d.ticket_ = Ticket(dispatcher, raw.request, where);
    }
    return d;
  }

private:
  friend class Ticket;
  Decision(Outcome outcome, RejectReason reason, Classification where) noexcept
      : outcome_(outcome), reason_(reason), where_(where) {}

  Outcome outcome_;
  RejectReason reason_;
  Classification where_;
  RequestGuard guard_;
  Ticket ticket_;
};

inline Result<Decision> Ticket::decided(uint32_t outcome, uint32_t reason) {
  Decision d(static_cast<Outcome>(outcome), static_cast<RejectReason>(reason),
             where_);
  if (d.executing()) {
    d.guard_ = RequestGuard(std::move(dispatcher_), std::exchange(request_, 0));
  } else if (d.rejected()) {
    request_ = 0;
    dispatcher_.reset();
  }
  return d;
}

inline Result<Decision> Ticket::wait_raw(uint64_t timeout_nanos) {
  uint32_t outcome = 0;
  uint32_t reason = 0;
  apf_status status =
      apf_request_wait(detail::raw(dispatcher_), request_, timeout_nanos,
                       &outcome, &reason);
  if (status != APF_OK) {
    return Error::of(status);
  }
  return decided(outcome, reason);
}

inline Result<Decision> Ticket::try_wait_for(Nanos timeout) {
  return wait_raw(detail::to_u64(timeout));
}

inline Result<Decision> Ticket::try_wait() {
  return wait_raw(std::numeric_limits<uint64_t>::max());
}

inline Result<Decision> Ticket::try_poll() {
  uint32_t outcome = 0;
  uint32_t reason = 0;
  apf_status status =
      apf_request_poll(detail::raw(dispatcher_), request_, &outcome, &reason);
  if (status != APF_OK) {
    return Error::of(status);
  }
  return decided(outcome, reason);
}

inline Decision Ticket::wait_for(Nanos timeout) {
  return try_wait_for(timeout).unwrap();
}
inline Decision Ticket::wait() { return try_wait().unwrap(); }
inline Decision Ticket::poll() { return try_poll().unwrap(); }

// ---------------------------------------------------------------------------
// The dispatcher

/// The APF controller: classifies requests and decides, per priority level,
/// whether they execute, queue, or are rejected. Move-only owner of an
/// apf_dispatcher.
class Dispatcher {
public:
  using Raw = apf_dispatcher;
  /// Called with a queued request's handle once it is decided, on the thread
  /// that decided it; it must be quick and must not throw (an escaping
  /// exception terminates the program). It may use the dispatcher, except
  /// to replace the callback or to destroy the dispatcher.
  using CompletionCallback = std::function<void(uint64_t request)>;

  /// Takes ownership of `raw` (freed even if this constructor throws).
  explicit Dispatcher(Raw *raw) : shared_(adopt(raw)) {}

  Dispatcher(Dispatcher &&) noexcept = default;
  Dispatcher &operator=(Dispatcher &&) noexcept = default;
  Dispatcher(const Dispatcher &) = delete;
  Dispatcher &operator=(const Dispatcher &) = delete;
  ~Dispatcher() = default;

  /// A dispatcher with Kubernetes' built-in configuration.
  static Result<Dispatcher> try_builtin(const Options &options = Options()) {
    apf_adaptive_options adaptive{};
    apf_dispatcher_options raw = options.to_c(adaptive);
    Raw *out = nullptr;
    apf_error *error = nullptr;
    apf_status status = apf_dispatcher_new_builtin(&raw, &out, &error);
    if (status != APF_OK) {
      return Error::take(status, error);
    }
    return Dispatcher(out);
  }
  static Dispatcher builtin(const Options &options = Options()) {
    return try_builtin(options).unwrap();
  }

  /// A dispatcher with the FlowSchemas and PriorityLevelConfigurations of
  /// `text` (YAML or JSON; mandatory objects are added when missing).
  static Result<Dispatcher> try_from_config(std::string_view text,
                                            const Options &options = Options()) {
    apf_adaptive_options adaptive{};
    apf_dispatcher_options raw = options.to_c(adaptive);
    Raw *out = nullptr;
    apf_error *error = nullptr;
    apf_status status = apf_dispatcher_new_from_config(text.data(), text.size(),
                                                       &raw, &out, &error);
    if (status != APF_OK) {
      return Error::take(status, error);
    }
    return Dispatcher(out);
  }
  static Dispatcher from_config(std::string_view text,
                                const Options &options = Options()) {
    return try_from_config(text, options).unwrap();
  }

  /// Classifies a request and decides on it. `deadline` (on the dispatcher's
  /// clock) bounds its wait in a queue, on top of the wait limit; the C ABI
  /// reads a deadline of 0 as none.
  Result<Decision> try_start(const RequestDigest &digest,
                             const WorkEstimate &estimate = WorkEstimate(),
                             std::optional<Nanos> deadline = std::nullopt) {
    constexpr size_t inline_groups = 8;
    apf_str small[inline_groups];
    std::vector<apf_str> large;
    apf_str *groups = small;
    if (digest.groups.size() > inline_groups) {
      large.resize(digest.groups.size());
      groups = large.data();
    }
    for (size_t i = 0; i < digest.groups.size(); i++) {
      groups[i] = detail::str(digest.groups[i]);
    }
    apf_request_digest raw{};
    raw.user = digest.user.data();
    raw.user_len = digest.user.size();
    raw.verb = digest.verb.data();
    raw.verb_len = digest.verb.size();
    raw.api_group = digest.api_group.data();
    raw.api_group_len = digest.api_group.size();
    raw.resource = digest.resource.data();
    raw.resource_len = digest.resource.size();
    raw.subresource = digest.subresource.data();
    raw.subresource_len = digest.subresource.size();
    raw.namespace_ = digest.namespace_.data();
    raw.namespace_len = digest.namespace_.size();
    raw.name = digest.name.data();
    raw.name_len = digest.name.size();
    raw.path = digest.path.data();
    raw.path_len = digest.path.size();
    raw.groups = digest.groups.empty() ? nullptr : groups;
    raw.n_groups = digest.groups.size();
    raw.is_resource_request = digest.is_resource_request;
    apf_work_estimate work = estimate.to_c();
    apf_decision out{};
    apf_status status = apf_start_request(
        detail::raw(shared_), &raw, &work, deadline ? detail::to_u64(*deadline) : 0, &out);
    if (status != APF_OK) {
      return Error::of(status);
    }
    return Decision::from_c(shared_, out);
  }
  Decision start(const RequestDigest &digest,
                 const WorkEstimate &estimate = WorkEstimate(),
                 std::optional<Nanos> deadline = std::nullopt) {
    return try_start(digest, estimate, deadline).unwrap();
  }

  /// Switches to the configuration in `text`; on error the old one stays.
  Result<void> try_reconfigure(std::string_view text) {
    apf_error *error = nullptr;
    apf_status status =
        apf_dispatcher_reconfigure(raw(), text.data(), text.size(), &error);
    if (status != APF_OK) {
      return Error::take(status, error);
    }
    return Result<void>();
  }
  void reconfigure(std::string_view text) { try_reconfigure(text).unwrap(); }

  /// Moves a manual clock forward (an error with the real clock).
  Result<void> try_advance_clock(Nanos by) {
    return detail::check(
        apf_dispatcher_advance_clock(raw(), detail::to_u64(by)));
  }
  void advance_clock(Nanos by) { try_advance_clock(by).unwrap(); }

  /// The dispatcher's current time.
  Result<Nanos> try_now() const {
    uint64_t nanos = 0;
    apf_status status = apf_dispatcher_now(raw(), &nanos);
    if (status != APF_OK) {
      return Error::of(status);
    }
    return Nanos(static_cast<Nanos::rep>(nanos));
  }
  Nanos now() const { return try_now().unwrap(); }

  /// Per-level statistics as text.
  Result<std::string> try_stats_text() {
    return detail::read_text([this](apf_text *out) { return apf_dispatcher_stats_text(raw(), out); });
  }
  std::string stats_text() { return try_stats_text().unwrap(); }

  /// The adaptive limit's state now (`enabled` false under a fixed limit).
  Result<AdaptiveState> try_adaptive_state() const {
    apf_adaptive_state raw{};
    apf_status status = apf_dispatcher_read_adaptive(this->raw(), &raw);
    if (status != APF_OK) {
      return Error::of(status);
    }
    return AdaptiveState::from_c(raw);
  }
  AdaptiveState adaptive_state() const { return try_adaptive_state().unwrap(); }

  /// Kubernetes' API Priority and Fairness metrics of this dispatcher in
  /// the OpenMetrics text format (serve it at /metrics with the
  /// Content-Type apf::metrics_content_type() gives).
  Result<std::string> try_metrics_text() const {
    return detail::read_text([this](apf_text *out) { return apf_dispatcher_metrics_text(raw(), out); });
  }
  std::string metrics_text() const { return try_metrics_text().unwrap(); }

  /// The metrics with a name prefix and constant labels.
  Result<std::string> try_metrics_text(const MetricsOptions &options) const {
    std::vector<apf_metrics_label> labels;
    labels.reserve(options.const_labels.size());
    for (const auto &[name, value] : options.const_labels) {
      labels.push_back({{name.data(), name.size()}, {value.data(), value.size()}});
    }
    apf_metrics_options c{};
    (void)apf_metrics_options_default(&c); // sets struct_size
    c.prefix = {options.prefix.data(), options.prefix.size()};
    c.const_labels = labels.empty() ? nullptr : labels.data();
    c.const_labels_len = labels.size();
    apf_text text{};
    apf_error *error = nullptr;
    apf_status status = apf_dispatcher_metrics_text_with(raw(), &c, &text, &error);
    if (status != APF_OK) {
      return Error::take(status, error);
    }
    std::string copy(text.ptr, text.len);
    apf_text_free(&text);
    return copy;
  }
  std::string metrics_text(const MetricsOptions &options) const {
    return try_metrics_text(options).unwrap();
  }

  /// The table of Kubernetes' /debug/api_priority_and_fairness/
  /// dump_priority_levels: one line per priority level.
  Result<std::string> try_dump_priority_levels() const {
    return detail::read_text([this](apf_text *out) { return apf_dispatcher_dump_priority_levels(raw(), out); });
  }
  std::string dump_priority_levels() const {
    return try_dump_priority_levels().unwrap();
  }

  /// The table of Kubernetes' /debug/api_priority_and_fairness/dump_queues:
  /// one line per queue of every level that queues.
  Result<std::string> try_dump_queues() const {
    return detail::read_text([this](apf_text *out) { return apf_dispatcher_dump_queues(raw(), out); });
  }
  std::string dump_queues() const { return try_dump_queues().unwrap(); }

  /// The table of Kubernetes' /debug/api_priority_and_fairness/
  /// dump_requests: one line per waiting request; `include_details` adds
  /// the request's user, verb, path and object columns (Kubernetes'
  /// ?includeRequestDetails=1).
  Result<std::string> try_dump_requests(bool include_details = false) const {
    return detail::read_text([this, include_details](apf_text *out) {
      return apf_dispatcher_dump_requests(raw(), include_details, out);
    });
  }
  std::string dump_requests(bool include_details = false) const {
    return try_dump_requests(include_details).unwrap();
  }

  /// Installs `callback` for queued requests' decisions (an empty function
  /// removes it). Returns once no call of the previous callback is running,
  /// so it fails with APF_ERR_IN_CALLBACK inside a completion callback.
  Result<void> try_set_completion_callback(CompletionCallback callback) {
    if (!shared_) {
      return detail::check(
          apf_dispatcher_set_completion_callback(nullptr, nullptr, nullptr));
    }
    if (callback_depth() > 0) {
      // Taking the mutex here could deadlock with a thread that holds it
      // while the library waits for this very callback to return.
      return Error(APF_ERR_IN_CALLBACK,
                   "a completion callback cannot replace the callback");
    }
    std::lock_guard<std::mutex> lock(shared_->mutex);
    std::unique_ptr<CompletionCallback> owned;
    apf_status status = APF_OK;
    if (callback) {
      owned = std::make_unique<CompletionCallback>(std::move(callback));
      status = apf_dispatcher_set_completion_callback(
          raw(), &Dispatcher::trampoline, owned.get());
    } else {
      status = apf_dispatcher_set_completion_callback(raw(), nullptr, nullptr);
    }
    if (status != APF_OK) {
      return Error::of(status);
    }
    // The library returns only once no call of the old callback is running.
    shared_->callback = std::move(owned);
    return Result<void>();
  }
  void set_completion_callback(CompletionCallback callback) {
    try_set_completion_callback(std::move(callback)).unwrap();
  }

  /// A file descriptor that becomes readable when a queued request is
  /// decided (for poll/epoll loops); owned by the dispatcher.
  Result<int> try_completion_fd() {
    int fd = -1;
    apf_status status = apf_dispatcher_completion_fd(raw(), &fd);
    if (status != APF_OK) {
      return Error::of(status);
    }
    return fd;
  }
  int completion_fd() { return try_completion_fd().unwrap(); }

  /// The next decided queued request, if any (drains the completion fd).
  Result<std::optional<uint64_t>> try_take_completion() {
    uint64_t request = 0;
    bool some = false;
    apf_status status =
        apf_dispatcher_take_completion(raw(), &request, &some);
    if (status != APF_OK) {
      return Error::of(status);
    }
    return some ? std::optional<uint64_t>(request) : std::nullopt;
  }
  std::optional<uint64_t> take_completion() {
    return try_take_completion().unwrap();
  }

  /// Adopts an executing request's handle obtained through the C API.
  RequestGuard adopt_guard(uint64_t request) const noexcept {
    return RequestGuard(shared_, request);
  }
  /// Adopts a queued request's handle obtained through the C API.
  Ticket adopt_ticket(uint64_t request,
                      Classification where = Classification{}) const noexcept {
    return Ticket(shared_, request, where);
  }

  Raw *capi() noexcept { return raw(); }
  const Raw *capi() const noexcept { return raw(); }
  /// Gives up ownership (the caller frees it with apf_dispatcher_free).
  /// Guards and tickets still out then finish or cancel their requests by
  /// handle alone (NULL as the dispatcher) while the C dispatcher lives, and
  /// fail with APF_ERR_INVALID_HANDLE once the caller freed it; they never
  /// touch the dispatcher itself.
  Raw *capi_release() noexcept {
    Raw *raw = shared_ ? shared_->release() : nullptr;
    shared_.reset();
    return raw;
  }

private:
  struct Deleter {
    void operator()(Raw *raw) const noexcept { apf_dispatcher_free(raw); }
  };

  /// The shared state owning `raw`; frees `raw` if allocating it fails.
  static detail::DispatcherRef adopt(Raw *raw) {
    std::unique_ptr<Raw, Deleter> owned(raw);
    auto shared = std::make_shared<detail::SharedDispatcher>(owned.get());
    (void)owned.release();
    return shared;
  }

  Raw *raw() const noexcept { return detail::raw(shared_); }

  /// How many completion callbacks this thread is running.
  static int &callback_depth() noexcept {
    static thread_local int depth = 0;
    return depth;
  }

  static void trampoline(void *user, uint64_t request) noexcept {
    struct Depth {
      Depth() noexcept { callback_depth()++; }
      ~Depth() { callback_depth()--; }
    } in_callback;
    (*static_cast<CompletionCallback *>(user))(request);
  }

  // Shared with the guards and tickets handed out (see SharedDispatcher).
  detail::DispatcherRef shared_;
};

/// The HTTP Content-Type of Dispatcher::metrics_text() (OpenMetrics text),
/// a static string.
inline Result<std::string_view> try_metrics_content_type() {
  const char *text = nullptr;
  size_t len = 0;
  apf_status status = apf_metrics_content_type(&text, &len);
  if (status != APF_OK) {
    return Error::of(status);
  }
  return std::string_view(text, len);
}
inline std::string_view metrics_content_type() {
  return try_metrics_content_type().unwrap();
}

// ---------------------------------------------------------------------------
// Workqueues

/// The kind of a Workqueue.
enum class QueueKind : uint32_t {
  /// First in, first out (client-go's default).
  Fifo = APF_WORKQUEUE_FIFO,
  /// A fast and a slow lane; slow items only while the fast lane is empty.
  TwoLane = APF_WORKQUEUE_TWO_LANE,
  /// Integer priorities, highest first, FIFO within one priority.
  Priority = APF_WORKQUEUE_PRIORITY,
};

/// A lane of a two-lane queue.
enum class Lane : uint32_t {
  Fast = APF_WORKQUEUE_LANE_FAST,
  Slow = APF_WORKQUEUE_LANE_SLOW,
};

/// What Workqueue::next found.
enum class GetStatus : uint32_t {
  Item = APF_WORKQUEUE_ITEM,
  /// Nothing ready and the call was not to wait (timeout 0, poll).
  Empty = APF_WORKQUEUE_EMPTY,
  /// The queue is shutting down and nothing is ready: stop working.
  ShutDown = APF_WORKQUEUE_SHUT_DOWN,
  /// The timeout passed with nothing ready.
  TimedOut = APF_WORKQUEUE_TIMED_OUT,
};

inline std::string_view to_string(GetStatus s) noexcept {
  switch (s) {
  case GetStatus::Item:
    return "item";
  case GetStatus::Empty:
    return "empty";
  case GetStatus::ShutDown:
    return "shut-down";
  case GetStatus::TimedOut:
    return "timed-out";
  }
  return "unknown";
}

namespace detail {

inline const uint8_t *bytes(std::string_view key) noexcept {
  return reinterpret_cast<const uint8_t *>(key.data());
}

} // namespace detail

/// A rate limiter's description (owns an apf_rate_limiter). Each queue made
/// with it copies it and keeps its own state, so a Limiter may be destroyed
/// (or reused for other queues) as soon as the queue exists. Move-only.
class Limiter {
public:
  using Raw = apf_rate_limiter;

  /// Takes ownership of `raw`.
  explicit Limiter(Raw *raw) noexcept : ptr_(raw) {}

  /// client-go's default controller limiter: the larger of a per-item
  /// exponential backoff (5 ms doubling up to 1000 s) and a shared token
  /// bucket of 10 qps, burst 100. What a queue uses without a limiter.
  static Result<Limiter> try_default_controller() {
    return make([](Raw **out, apf_error **) { return apf_rate_limiter_new_default(out); });
  }
  /// One token bucket for all items: `qps` tokens a second (+infinity: no
  /// limit), at most `burst` stored.
  static Result<Limiter> try_token_bucket(double qps, uint32_t burst) {
    return make([&](Raw **out, apf_error **error) {
      return apf_rate_limiter_new_token_bucket(qps, burst, out, error);
    });
  }
  /// A token bucket per item.
  static Result<Limiter> try_item_token_bucket(double qps, uint32_t burst) {
    return make([&](Raw **out, apf_error **error) {
      return apf_rate_limiter_new_item_token_bucket(qps, burst, out, error);
    });
  }
  /// Per-item exponential backoff: the n-th rate-limited add since the last
  /// forget waits base * 2^(n-1), at most `max`.
  static Result<Limiter> try_exponential(Nanos base, Nanos max) {
    return make([&](Raw **out, apf_error **error) {
      return apf_rate_limiter_new_exponential(detail::to_u64(base),
                                              detail::to_u64(max), out, error);
    });
  }
  /// Per item: the first `max_fast_attempts` rate-limited adds wait `fast`,
  /// later ones `slow`.
  static Result<Limiter> try_fast_slow(Nanos fast, Nanos slow,
                                       uint32_t max_fast_attempts) {
    return make([&](Raw **out, apf_error **error) {
      return apf_rate_limiter_new_fast_slow(detail::to_u64(fast),
                                            detail::to_u64(slow),
                                            max_fast_attempts, out, error);
    });
  }
  /// The longest delay of `limiters` (copied; at least one).
  static Result<Limiter>
  try_max_of(std::initializer_list<std::reference_wrapper<const Limiter>> limiters) {
    std::vector<const Raw *> raw;
    raw.reserve(limiters.size());
    for (const Limiter &l : limiters) {
      raw.push_back(l.capi());
    }
    return make([&](Raw **out, apf_error **error) {
      return apf_rate_limiter_new_max_of(raw.data(), raw.size(), out, error);
    });
  }

  static Limiter default_controller() {
    return try_default_controller().unwrap();
  }
  static Limiter token_bucket(double qps, uint32_t burst) {
    return try_token_bucket(qps, burst).unwrap();
  }
  static Limiter item_token_bucket(double qps, uint32_t burst) {
    return try_item_token_bucket(qps, burst).unwrap();
  }
  static Limiter exponential(Nanos base, Nanos max) {
    return try_exponential(base, max).unwrap();
  }
  static Limiter fast_slow(Nanos fast, Nanos slow, uint32_t max_fast_attempts) {
    return try_fast_slow(fast, slow, max_fast_attempts).unwrap();
  }
  static Limiter
  max_of(std::initializer_list<std::reference_wrapper<const Limiter>> limiters) {
    return try_max_of(limiters).unwrap();
  }

  const Raw *capi() const noexcept { return ptr_.get(); }
  /// Gives up ownership (the caller frees it with apf_rate_limiter_free).
  Raw *capi_release() noexcept { return ptr_.release(); }

private:
  struct Deleter {
    void operator()(Raw *raw) const noexcept { apf_rate_limiter_free(raw); }
  };

  template <typename F> static Result<Limiter> make(F &&create) {
    Raw *out = nullptr;
    apf_error *error = nullptr;
    apf_status status = create(&out, &error);
    if (status != APF_OK) {
      return Error::take(status, error);
    }
    return Limiter(out);
  }

  std::unique_ptr<Raw, Deleter> ptr_;
};

/// How Workqueue::create builds a queue. The defaults are
/// apf_workqueue_options_default's: a FIFO queue, real clock, unnamed, client-go's
/// default controller limiter.
struct WorkqueueOptions {
  QueueKind kind = QueueKind::Fifo;
  /// A clock that moves only by Workqueue::advance_clock (delays, rate
  /// limits, timed metrics). get's timeout is real time either way.
  bool manual_clock = false;
  /// The `name` label of the queue's metrics; unnamed queues export none.
  std::string name;
  /// Borrowed, read only by Workqueue::create (which copies it); nullptr for
  /// client-go's default controller limiter.
  const Limiter *limiter = nullptr;
  /// Items one generation of a per-item limiter's state holds (0: default).
  uint64_t limiter_state_capacity = 0;
  /// Per-item limiter state idle this long is forgotten (0: default).
  Nanos limiter_idle_expiry = Nanos(0);
  /// Items the queue's index holds before it first grows (0: as needed).
  uint64_t capacity = 0;

  WorkqueueOptions() = default;
  explicit WorkqueueOptions(QueueKind k) : kind(k) {}

  apf_workqueue_options to_c() const noexcept {
    apf_workqueue_options raw{};
    (void)apf_workqueue_options_default(&raw);
    raw.kind = static_cast<uint32_t>(kind);
    raw.manual_clock = manual_clock;
    raw.name = name.data();
    raw.name_len = name.size();
    raw.limiter = limiter == nullptr ? nullptr : limiter->capi();
    raw.limiter_state_capacity = limiter_state_capacity;
    raw.limiter_idle_expiry_nanos = detail::to_u64(limiter_idle_expiry);
    raw.capacity = capacity;
    return raw;
  }
};

/// Options of Workqueue::add_with. A default AddOptions is a plain add.
struct AddOptions {
  /// Add once this much time has passed on the queue's clock.
  Nanos after = Nanos(0);
  /// Also ask the rate limiter (the shorter of its delay and a non-zero
  /// `after` wins).
  bool rate_limited = false;
  /// Two-lane queues; other kinds accept only Lane::Fast.
  Lane lane = Lane::Fast;
  /// Priority queues only (others fail with APF_ERR_WORKQUEUE_WRONG_KIND).
  std::optional<int32_t> priority;

  apf_workqueue_add_options to_c() const noexcept {
    apf_workqueue_add_options raw{};
    (void)apf_workqueue_add_options_default(&raw);
    raw.after_nanos = detail::to_u64(after);
    raw.rate_limited = rate_limited;
    raw.lane = static_cast<uint32_t>(lane);
    raw.has_priority = priority.has_value();
    raw.priority = priority.value_or(0);
    return raw;
  }
};

/// An item being processed: its key is not handed to any other worker until
/// the item is done. Destroying it calls apf_workqueue_done (also while an
/// exception unwinds), so a key added again meanwhile is queued again.
/// Move-only; an empty item (default constructed, moved from, done or
/// released) does nothing. Refers to its queue without owning it: destroy
/// items before their Workqueue.
class WorkItem {
public:
  WorkItem() noexcept = default;
  /// Adopts the item of a successful apf_workqueue_get (result APF_WORKQUEUE_ITEM).
  WorkItem(apf_workqueue *queue, const apf_workqueue_item &raw) noexcept
      : queue_(queue), handle_(raw.item),
        key_(reinterpret_cast<const char *>(raw.key), raw.key_len),
        lane_(static_cast<Lane>(raw.lane)), priority_(raw.priority) {}

  WorkItem(WorkItem &&other) noexcept
      : queue_(other.queue_), handle_(std::exchange(other.handle_, 0)),
        key_(std::exchange(other.key_, std::string_view())),
        lane_(other.lane_), priority_(other.priority_) {}
  WorkItem &operator=(WorkItem &&other) noexcept {
    if (this != &other) {
      reset();
      queue_ = other.queue_;
      handle_ = std::exchange(other.handle_, 0);
      key_ = std::exchange(other.key_, std::string_view());
      lane_ = other.lane_;
      priority_ = other.priority_;
    }
    return *this;
  }
  WorkItem(const WorkItem &) = delete;
  WorkItem &operator=(const WorkItem &) = delete;
  ~WorkItem() { reset(); }

  /// Whether the item is still being processed through this object.
  explicit operator bool() const noexcept { return handle_ != 0; }
  /// The item's handle (0 when empty).
  uint64_t handle() const noexcept { return handle_; }
  /// The key (owned by the queue): valid while this object holds the item,
  /// i.e. until done(), release(), a move from it, or its destruction.
  std::string_view key() const noexcept { return key_; }
  /// Two-lane queues: the lane it came from; Lane::Fast otherwise.
  Lane lane() const noexcept { return lane_; }
  /// Priority queues: its priority; 0 otherwise.
  int32_t priority() const noexcept { return priority_; }

  /// Finishes processing now. Empty afterwards, even on error (an empty
  /// item gives APF_ERR_INVALID_HANDLE).
  Result<void> try_done() {
    key_ = std::string_view();
    return detail::check(apf_workqueue_done(queue_, std::exchange(handle_, 0)));
  }
  void done() { try_done().unwrap(); }

  /// Gives up ownership without finishing: the caller calls apf_workqueue_done.
  uint64_t release() noexcept {
    key_ = std::string_view();
    return std::exchange(handle_, 0);
  }

private:
  void reset() noexcept {
    if (handle_ != 0) {
      key_ = std::string_view();
      // A destructor cannot report failure; a stale handle is the only way
      // to fail here and leaves nothing to clean up.
      (void)apf_workqueue_done(queue_, std::exchange(handle_, 0));
    }
  }

  apf_workqueue *queue_ = nullptr;
  uint64_t handle_ = 0;
  std::string_view key_;
  Lane lane_ = Lane::Fast;
  int32_t priority_ = 0;
};

/// What Workqueue::next found: an item (status Item), or why there is none.
struct GetResult {
  GetStatus status = GetStatus::Empty;
  /// Holds the item when status is Item; empty otherwise.
  WorkItem item;

  bool has_item() const noexcept { return status == GetStatus::Item; }
  explicit operator bool() const noexcept { return has_item(); }
  bool shut_down() const noexcept { return status == GetStatus::ShutDown; }
  bool timed_out() const noexcept { return status == GetStatus::TimedOut; }
  bool empty() const noexcept { return status == GetStatus::Empty; }
};

/// A work queue of byte-string keys with client-go's rules (a key added
/// while queued is queued once; added while processing, it is queued again
/// when done, so no key is processed by two workers at once; after shutdown
/// adds are ignored and workers get what is ready, then nothing). Move-only
/// owner of an apf_workqueue.
///
/// Threading: every member may be called from many threads at once (get
/// from any number of workers); moving or destroying the queue must not race
/// with its use. Shut it down, join the workers, then destroy it — and
/// destroy its WorkItems first (destruction invalidates their handles).
///
/// Getting: get() blocks until an item arrives (std::nullopt: shut down);
/// get(timeout) also gives std::nullopt on time-out; next(timeout) tells
/// the cases apart (GetResult); poll() never blocks. Following the header's
/// convention, try_get / try_next / try_poll are their Result forms.
class Workqueue {
public:
  using Raw = apf_workqueue;

  /// Takes ownership of `raw`.
  explicit Workqueue(Raw *raw) noexcept : ptr_(raw) {}

  static Result<Workqueue>
  try_create(const WorkqueueOptions &options = WorkqueueOptions()) {
    apf_workqueue_options raw = options.to_c();
    Raw *out = nullptr;
    apf_error *error = nullptr;
    apf_status status = apf_workqueue_new(&raw, &out, &error);
    if (status != APF_OK) {
      return Error::take(status, error);
    }
    return Workqueue(out);
  }
  static Workqueue create(const WorkqueueOptions &options = WorkqueueOptions()) {
    return try_create(options).unwrap();
  }

  // Adding. Keys are arbitrary bytes, copied.

  Result<void> try_add(std::string_view key) {
    return detail::check(apf_workqueue_add(raw(), detail::bytes(key), key.size()));
  }
  /// Adds once `delay` has passed on the queue's clock (client-go AddAfter).
  Result<void> try_add_after(std::string_view key, Nanos delay) {
    return detail::check(apf_workqueue_add_after(raw(), detail::bytes(key), key.size(),
                                          detail::to_u64(delay)));
  }
  /// Adds after the limiter's delay for the key, counting a failure of it.
  Result<void> try_add_rate_limited(std::string_view key) {
    return detail::check(
        apf_workqueue_add_rate_limited(raw(), detail::bytes(key), key.size()));
  }
  /// Adds with a delay, rate limiting, a lane or a priority.
  Result<void> try_add_with(std::string_view key, const AddOptions &options) {
    apf_workqueue_add_options raw_opts = options.to_c();
    return detail::check(
        apf_workqueue_add_with_options(raw(), detail::bytes(key), key.size(), &raw_opts));
  }
  void add(std::string_view key) { try_add(key).unwrap(); }
  void add_after(std::string_view key, Nanos delay) {
    try_add_after(key, delay).unwrap();
  }
  void add_rate_limited(std::string_view key) {
    try_add_rate_limited(key).unwrap();
  }
  void add_with(std::string_view key, const AddOptions &options) {
    try_add_with(key, options).unwrap();
  }

  // Getting.

  /// The next item, waiting up to `timeout` of real time (std::nullopt:
  /// forever; zero or negative: not at all, status Empty).
  Result<GetResult> try_next(std::optional<Nanos> timeout = std::nullopt) {
    apf_workqueue_item out{};
    apf_status status = apf_workqueue_get(
        raw(),
        timeout ? detail::to_u64(*timeout) : std::numeric_limits<uint64_t>::max(),
        &out);
    return adopt(status, out);
  }
  /// The next item without waiting (status Item, Empty or ShutDown).
  Result<GetResult> try_next_now() {
    apf_workqueue_item out{};
    apf_status status = apf_workqueue_try_get(raw(), &out);
    return adopt(status, out);
  }
  Result<std::optional<WorkItem>> try_get() { return item_of(try_next()); }
  Result<std::optional<WorkItem>> try_get(Nanos timeout) {
    return item_of(try_next(timeout));
  }
  Result<std::optional<WorkItem>> try_poll() { return item_of(try_next_now()); }

  GetResult next(std::optional<Nanos> timeout = std::nullopt) {
    return try_next(timeout).unwrap();
  }
  GetResult next_now() { return try_next_now().unwrap(); }
  /// Blocks until an item is ready; std::nullopt once shut down and drained.
  std::optional<WorkItem> get() { return try_get().unwrap(); }
  /// As get(), also std::nullopt when `timeout` passes.
  std::optional<WorkItem> get(Nanos timeout) {
    return try_get(timeout).unwrap();
  }
  /// An item if one is ready now.
  std::optional<WorkItem> poll() { return try_poll().unwrap(); }

  // Rate limiter state.

  /// Stops tracking the key's failures (its next rate-limited add waits the
  /// first delay again). The item must still be done.
  Result<void> try_forget(std::string_view key) {
    return detail::check(apf_workqueue_forget(raw(), detail::bytes(key), key.size()));
  }
  void forget(std::string_view key) { try_forget(key).unwrap(); }
  /// Rate-limited adds of the key counted since it was last forgotten.
  Result<uint32_t> try_num_requeues(std::string_view key) {
    uint32_t n = 0;
    apf_status status =
        apf_workqueue_num_requeues(raw(), detail::bytes(key), key.size(), &n);
    if (status != APF_OK) {
      return Error::of(status);
    }
    return n;
  }
  uint32_t num_requeues(std::string_view key) {
    return try_num_requeues(key).unwrap();
  }

  // Sizes (for information: they may change before you look).

  /// Items ready to be handed out (client-go Len).
  Result<size_t> try_len() { return size_of(apf_workqueue_len); }
  /// Items waiting for a delay.
  Result<size_t> try_waiting_len() { return size_of(apf_workqueue_waiting_len); }
  /// Items being processed (live WorkItems).
  Result<size_t> try_processing() { return size_of(apf_workqueue_processing); }
  /// Ready items of one lane (two-lane queues only).
  Result<size_t> try_lane_len(Lane lane) {
    size_t n = 0;
    apf_status status = apf_workqueue_lane_len(raw(), static_cast<uint32_t>(lane), &n);
    if (status != APF_OK) {
      return Error::of(status);
    }
    return n;
  }
  size_t len() { return try_len().unwrap(); }
  size_t waiting_len() { return try_waiting_len().unwrap(); }
  size_t processing() { return try_processing().unwrap(); }
  size_t lane_len(Lane lane) { return try_lane_len(lane).unwrap(); }

  // Shutting down.

  /// Adds are ignored from now on, delayed items are dropped, workers get
  /// what is ready and then nothing; blocked workers wake. Idempotent.
  Result<void> try_shut_down() { return detail::check(apf_workqueue_shut_down(raw())); }
  /// shut_down, then wait until every item handed out is done (by other
  /// threads).
  Result<void> try_shut_down_with_drain() {
    return detail::check(apf_workqueue_shut_down_with_drain(raw()));
  }
  Result<bool> try_shutting_down() {
    bool out = false;
    apf_status status = apf_workqueue_shutting_down(raw(), &out);
    if (status != APF_OK) {
      return Error::of(status);
    }
    return out;
  }
  void shut_down() { try_shut_down().unwrap(); }
  void shut_down_with_drain() { try_shut_down_with_drain().unwrap(); }
  bool shutting_down() { return try_shutting_down().unwrap(); }

  /// Moves a manual clock forward; delayed items whose time comes are added
  /// before it returns (an error with the real clock).
  Result<void> try_advance_clock(Nanos by) {
    return detail::check(apf_workqueue_advance_clock(raw(), detail::to_u64(by)));
  }
  void advance_clock(Nanos by) { try_advance_clock(by).unwrap(); }

  /// client-go's workqueue metrics, OpenMetrics text ending with "# EOF".
  Result<std::string> try_metrics_text() {
    return detail::read_text([this](apf_text *out) { return apf_workqueue_metrics_text(raw(), out); });
  }
  std::string metrics_text() { return try_metrics_text().unwrap(); }

  Raw *capi() noexcept { return ptr_.get(); }
  const Raw *capi() const noexcept { return ptr_.get(); }
  /// Gives up ownership (the caller frees it with apf_workqueue_free).
  Raw *capi_release() noexcept { return ptr_.release(); }

private:
  struct Deleter {
    void operator()(Raw *raw) const noexcept { apf_workqueue_free(raw); }
  };

  Raw *raw() const noexcept { return ptr_.get(); }

  Result<GetResult> adopt(apf_status status, const apf_workqueue_item &out) {
    if (status != APF_OK) {
      return Error::of(status);
    }
    GetResult got;
    got.status = static_cast<GetStatus>(out.result);
    if (got.has_item()) {
      got.item = WorkItem(raw(), out);
    }
    return got;
  }

  static Result<std::optional<WorkItem>> item_of(Result<GetResult> got) {
    if (!got) {
      return got.error();
    }
    GetResult &g = got.value();
    if (!g.has_item()) {
      return std::optional<WorkItem>();
    }
    return std::optional<WorkItem>(std::move(g.item));
  }

  Result<size_t> size_of(apf_status (*read)(Raw *, size_t *)) {
    size_t n = 0;
    apf_status status = read(raw(), &n);
    if (status != APF_OK) {
      return Error::of(status);
    }
    return n;
  }

  std::unique_ptr<Raw, Deleter> ptr_;
};

} // namespace apf

#endif // APF_HPP
