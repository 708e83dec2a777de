// The gateway's metrics (docs/OPERATIONS.md, "Metrics"), kept in a prometheus-cpp registry and
// written in Prometheus text format at scrape. Every method may be called from any thread.
// Labels are bounded: policy names come from the rules files (and, for an RLS limit with
// detailed_metric, from the request's values), domains from the requests; past kMaxPolicyLabels
// distinct names of each (reloads may bring new ones), and for any name over kMaxLabelBytes,
// counts go to policy="other" or domain="other".
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client/client.h"
#include "http/grpc_server.h"
#include "http/server.h"

namespace sluice::gateway {

inline constexpr std::size_t kMaxPolicyLabels = 256;
inline constexpr std::size_t kMaxLabelBytes = 256;

// What the gateway reads elsewhere at each scrape.
struct ScrapeState {
  bool ready = false;
  client::ClientCounters client;              // the client's own counts since connect
  std::vector<client::NodeBreaker> breakers;  // each node's breaker now
  http::ServerCounters http;
  std::optional<http::GrpcCounters> grpc;  // the gRPC port's, when --grpc-listen serves one
  std::uint64_t reloads_ok = 0;
  std::uint64_t reloads_failed = 0;
  std::string rules_hash;    // of the rules in force
  std::string rules_source;  // their path
  std::size_t policies = 0;
};

class GatewayMetrics {
 public:
  GatewayMetrics();

  // One limit of a request decided: outcome "allowed", "denied" or "error"; source a
  // client::source_name() ("" for an error).
  void decided(std::string_view policy, std::string_view outcome, std::string_view source);
  // A shadow limit that would have denied.
  void shadow_denied(std::string_view policy);
  // One request answered: endpoint "check" or "acquire", and its time from arrival to answer.
  void answered(std::string_view endpoint, bool allowed, std::chrono::nanoseconds took);

  // One ShouldRateLimit call answered: its domain ("unknown" for one the rules lack, "" for a
  // refused call), its code (OK, OVER_LIMIT, or the gRPC status of a refusal), and its time
  // from arrival to answer (also under endpoint="rls" in the requests and duration families).
  void rls_answered(std::string_view domain, std::string_view code, std::chrono::nanoseconds took);

  // The exposition (text format 0.0.4): the registry's families and those of `state`.
  std::string scrape(const ScrapeState& state);

 private:
  // A family's metrics by their label values, found after the first time without building
  // prometheus-cpp's label map (a std::map of strings, hashed again at each Add), which was most
  // of what counting cost (bench/gateway_bench.cpp). Used under mutex_; the metrics it returns
  // live as long as the registry.
  template <typename Metric>
  class Labelled {
   public:
    Labelled(prometheus::Family<Metric>& family, std::vector<std::string> names)
        : family_(family), names_(std::move(names)) {}
    // The metric of `values` (one per label name, in order); `extra` goes to Family::Add the
    // first time (a histogram's buckets).
    template <typename... Extra>
    Metric& at(std::initializer_list<std::string_view> values, const Extra&... extra);

   private:
    prometheus::Family<Metric>& family_;
    const std::vector<std::string> names_;
    std::string key_;  // reused: each value's length (4 bytes) and bytes
    std::unordered_map<std::string, Metric*> cache_;
  };

  // Under mutex_: the label of a policy or a domain, bounded (see above).
  static std::string_view bounded_label(std::set<std::string, std::less<>>& seen,
                                        std::string_view name);

  prometheus::Registry registry_;
  std::mutex mutex_;  // everything below
  Labelled<prometheus::Counter> decisions_;
  Labelled<prometheus::Counter> shadow_denials_;
  Labelled<prometheus::Counter> requests_;
  Labelled<prometheus::Histogram> duration_;
  Labelled<prometheus::Counter> rls_requests_;
  std::set<std::string, std::less<>> policies_;
  std::set<std::string, std::less<>> domains_;
};

}  // namespace sluice::gateway
