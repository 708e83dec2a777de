// sluice-gateway's request handling (docs/GATEWAY.md): GET /check for forward-auth proxies,
// POST /v1/acquire, /healthz, /readyz and /metrics, on an http::Server. Every limit of a request
// is decided in one batched call through the client, under one snapshot of the rules.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "client/client.h"
#include "http/grpc_server.h"
#include "http/server.h"
#include "rules/rule_set.h"
#include "tools/gateway/attributes.h"
#include "tools/gateway/gateway_metrics.h"

namespace sluice::gateway {

// Where the rules in force come from, and how their reloads went (rules::RuleSource in the
// gateway; a fixed set in tests).
struct RulesView {
  struct Reloads {
    std::uint64_t ok = 0;      // rules files swapped in since start
    std::uint64_t failed = 0;  // refused
  };
  std::function<std::shared_ptr<const rules::RuleSet>()> current;
  std::function<Reloads()> reloads;
};

// What /readyz answers (200 when ready, else 503) and the line that says why.
struct Readiness {
  bool ready = false;
  std::string why;
};

struct GatewayOptions {
  // For policies without a failure policy of their own (the client's default too).
  client::FailurePolicy failure_policy = client::FailurePolicy::kOpen;
  // The longest key the cluster takes (its --max-key), for the keys of /v1/acquire.
  std::size_t max_key_bytes = rules::kDefaultMaxKeyBytes;
  // Which proxy's headers carry the original request to /check.
  ForwardedBy forwarded_by = ForwardedBy::kNginx;
};

class Gateway {
 public:
  // `client`, `metrics` and what `rules` refers to must outlive the gateway. A decision answers
  // from the client's I/O thread: the client must be destroyed (which joins that thread and
  // fails the calls in flight) before the gateway, its metrics and the HTTP server's
  // io_context.
  Gateway(client::Client& client, RulesView rules, GatewayMetrics& metrics, GatewayOptions options);

  // The http::Handler: routes the request; answers from the client's I/O thread for decisions.
  void handle(const http::Request& request, http::Responder responder);

  // The HTTP server whose counters /metrics shows (set once, before serving).
  void set_server(const http::Server* server) { server_ = server; }
  // The gRPC port's counters, shown in /metrics beside the HTTP port's (set once, before
  // serving; none: no gRPC port).
  void set_grpc_counters(std::function<http::GrpcCounters()> counters) {
    grpc_counters_ = std::move(counters);
  }

  // What /readyz answers now.
  Readiness readiness() const;

 private:
  struct Pending;
  void check(const http::Request& request, http::Responder responder);
  void acquire(const http::Request& request, http::Responder responder);
  void decide(std::shared_ptr<Pending> pending);
  void finish(Pending& pending, std::span<const client::Result<client::Decision>> results);
  bool fails_closed(const rules::Policy& policy) const;

  client::Client& client_;
  RulesView rules_;
  GatewayMetrics& metrics_;
  GatewayOptions options_;
  const http::Server* server_ = nullptr;
  std::function<http::GrpcCounters()> grpc_counters_;
};

}  // namespace sluice::gateway
