// sluice-gateway's Envoy Rate Limit Service front (docs/GATEWAY.md, "Envoy's Rate Limit
// Service"): envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit over gRPC. Each
// descriptor of a request is looked up in the envoyproxy/ratelimit domains of the rules in force
// (rules::EnvoyConfig) and every limit found is decided in one batched call through the client;
// the answer is built as envoyproxy/ratelimit builds it. A request is answered within its
// deadline: past it, the failure policy of each limit answers and the late decisions are
// dropped.
#pragma once

#include <boost/asio/steady_timer.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "client/client.h"
#include "envoy/service/ratelimit/v3/rls.pb.h"
#include "http/grpc_server.h"
#include "net/asio.h"
#include "tools/gateway/gateway.h"
#include "tools/gateway/gateway_metrics.h"

namespace sluice::gateway {

namespace rls = ::envoy::service::ratelimit::v3;

struct RlsOptions {
  // For limits without a failure_policy of their own (the gateway's --failure-policy).
  client::FailurePolicy failure_policy = client::FailurePolicy::kOpen;
  // The longest a request waits for the cluster; less when the caller's own deadline is
  // sooner (Envoy's filter timeout is 20 ms by default).
  std::chrono::milliseconds deadline{15};
  // How long before the caller's deadline the answer is sent, for its way back.
  std::chrono::milliseconds caller_margin{2};
  // One timer serves every call waiting for the cluster: it is set this long after the
  // earliest deadline of a call not yet answered, and answers every call whose deadline has
  // passed by then. So a deadline is met within one tick, and while the cluster answers in time
  // the timer hardly ever fires (a timer per call, or one ticking while calls wait, cost thread
  // wake-ups: docs/BENCHMARKS.md).
  std::chrono::microseconds deadline_tick{1000};
  // response_headers_to_add: RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-
  // headers), Retry-After when over; and with `legacy_headers` the RateLimit-Limit,
  // RateLimit-Remaining and RateLimit-Reset trio envoyproxy/ratelimit adds when
  // LIMIT_RESPONSE_HEADERS_ENABLED is set.
  bool headers = true;
  bool legacy_headers = false;
  std::size_t max_descriptors = 64;  // per request; more: INVALID_ARGUMENT
  std::size_t max_entries = 32;      // per descriptor; more: INVALID_ARGUMENT
  std::size_t max_message_bytes = 64 * 1024;
};

// How a call ends: OK (the response is filled in), or a gRPC status and its message.
struct RlsStatus {
  http::GrpcCode code = http::GrpcCode::kOk;
  std::string message;
  bool ok() const { return code == http::GrpcCode::kOk; }
};

// The decision logic, free of the gRPC server: tests call decide() directly.
class RlsFront {
 public:
  using Done = std::function<void(RlsStatus)>;

  // `client`, `metrics`, `timers` and what `rules` refers to must outlive the front; `timers`
  // runs the deadlines (the gateway's io_context).
  RlsFront(client::Client& client, RulesView rules, GatewayMetrics& metrics,
           boost::asio::io_context& timers, RlsOptions options);

  // Decides `request` into `response`, then calls `done` once, from the client's I/O thread,
  // the timers' thread or this one. `request` and `response` must live until then.
  // `caller_deadline` is the caller's own (time_point::max() when it has none).
  void decide(const rls::RateLimitRequest& request, rls::RateLimitResponse& response, Done done,
              std::chrono::steady_clock::time_point caller_deadline =
                  std::chrono::steady_clock::time_point::max());

  // Answers INVALID_ARGUMENT with `message` through `done`, now, for a call that is refused
  // before it can be decided (bytes that are not a RateLimitRequest, or a request decide()
  // refuses), counted under domain "" like decide()'s own refusals.
  void refuse(const Done& done, std::string message);

  const RlsOptions& options() const { return options_; }

 private:
  struct Pending;
  void finish(Pending& pending, std::span<const client::Result<client::Decision>> results);
  bool fails_closed(const rules::EnvoyLimit& limit) const;
  // Deadlines: watch() and unwatch() from any thread; arm() and tick() on the timers' thread.
  void watch(std::shared_ptr<Pending> pending, std::chrono::steady_clock::time_point deadline);
  void unwatch(Pending& pending);
  void arm();
  void tick();

  client::Client& client_;
  RulesView rules_;
  GatewayMetrics& metrics_;
  boost::asio::io_context& timers_;
  RlsOptions options_;

  using Waiting = std::multimap<std::chrono::steady_clock::time_point, std::shared_ptr<Pending>>;
  std::mutex waiting_mutex_;
  // The calls not yet answered, by deadline: a call leaves when answered, either way.
  Waiting waiting_;  // waiting_mutex_
  // The deadline the timer is set for (less the tick); max(): not set. It may be earlier than
  // every call's now (the call it was set for was answered): it then fires, answers nothing,
  // and is set for the earliest.
  std::chrono::steady_clock::time_point armed_for_ =
      std::chrono::steady_clock::time_point::max();  // waiting_mutex_
  boost::asio::steady_timer tick_timer_;             // the timers' thread only
};

// The gRPC server: RlsFront behind RateLimitService/ShouldRateLimit on http::GrpcServer, on the
// io_context the caller runs (the gateway's, where its client runs too, so a call is read,
// decided and answered on one thread).
class RlsServer {
 public:
  static constexpr std::string_view kMethod =
      "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

  // `limits.max_message_bytes` is the front's max_message_bytes.
  RlsServer(RlsFront& front, boost::asio::io_context& io, http::GrpcLimits limits = {});
  RlsServer(const RlsServer&) = delete;
  RlsServer& operator=(const RlsServer&) = delete;

  // Listens on host:port (0: any free port); throws std::runtime_error when it cannot.
  void start(const std::string& host, std::uint16_t port);
  std::uint16_t port() const { return server_.port(); }
  // Stops taking calls (GOAWAY); the calls in flight are answered (by their deadline), and
  // `stopped` runs on the io_context once every connection has closed, at most `grace` later.
  // Any thread.
  void stop(std::chrono::milliseconds grace, std::function<void()> stopped = {});
  // stop(), then waits for `stopped`. REQUIRES: another thread runs the io_context.
  void shutdown(std::chrono::milliseconds grace);
  http::GrpcCounters counters() const { return server_.counters(); }

 private:
  struct Call;
  void serve(http::GrpcCall call);

  RlsFront& front_;
  http::GrpcServer server_;
};

}  // namespace sluice::gateway
