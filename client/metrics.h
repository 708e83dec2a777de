// Internal: the client's metrics (Client::metrics(), docs/CLIENT.md section 10): decisions by
// rule, source and outcome; errors by code; a latency histogram of the calls the cluster
// answered. Counting is a relaxed atomic add in one of several stripes, chosen per thread, so
// threads that decide at once rarely write one cache line; a snapshot sums the stripes.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "client/client.h"

namespace sluice::client::detail {

// Latency buckets, log-linear in microseconds: 0..15 one each, then four per power of two up to
// 2^28 us (about 4.5 minutes); the last one takes everything above.
inline constexpr std::size_t kLatencyBuckets = 16 + 4 * 24;
std::size_t latency_bucket(std::uint64_t us);
// The bucket's upper bound, exclusive, in microseconds (UINT64_MAX for the last one).
std::uint64_t latency_bucket_upper_us(std::size_t bucket);

class Metrics {
 public:
  static constexpr std::size_t kStripes = 8;
  static constexpr std::size_t kRuleSlots = kMaxMetricRules;  // per stripe
  static constexpr std::size_t kErrorCodes = 16;

  Metrics();

  void count_decision(const Rule& rule, const Decision& decision);
  void count_error(ErrorCode code);
  void record_latency_ns(std::uint64_t ns);

  // node_down / node_up are the client's own counters, filled in by the caller.
  ClientMetrics snapshot() const;

 private:
  struct RuleSlot {
    std::atomic<std::uint64_t> key{0};  // the rule's fingerprint; 0: free. Set after `rule`.
    Rule rule;
    std::array<std::atomic<std::uint64_t>, 8> counts{};  // [source * 2 + allowed]
  };
  struct alignas(64) Stripe {
    std::mutex claim_mu;  // taken only to claim a free slot for a new rule
    std::array<RuleSlot, kRuleSlots> rules;
    std::atomic<std::uint64_t> other_rules{0};
    std::array<std::atomic<std::uint64_t>, kErrorCodes> errors{};
    std::array<std::atomic<std::uint64_t>, kLatencyBuckets> latency{};
    std::atomic<std::uint64_t> latency_sum_us{0};
  };

  Stripe& stripe();

  std::unique_ptr<Stripe[]> stripes_;
};

}  // namespace sluice::client::detail
