#include "client/metrics.h"

#include <bit>
#include <map>

namespace sluice::client::detail {
namespace {

std::uint64_t rule_key(const Rule& rule) {
  std::uint64_t x = (static_cast<std::uint64_t>(rule.limit) << 32 | rule.burst) ^
                    (rule.period_ms * 0x9e3779b97f4a7c15ull) ^
                    (static_cast<std::uint64_t>(rule.algorithm) << 59);
  x ^= x >> 31;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 29;
  return x == 0 ? 1 : x;
}

// Threads take stripes in turn, once each (a constant initializer: no guard on each access).
std::atomic<std::size_t> next_stripe{0};
thread_local std::size_t t_stripe = SIZE_MAX;

}  // namespace

std::size_t latency_bucket(std::uint64_t us) {
  if (us < 16) return static_cast<std::size_t>(us);
  const auto e = static_cast<std::size_t>(std::bit_width(us) - 1);  // 4 and up
  const std::size_t sub = static_cast<std::size_t>(us >> (e - 2)) & 3;
  const std::size_t bucket = 16 + (e - 4) * 4 + sub;
  return bucket < kLatencyBuckets ? bucket : kLatencyBuckets - 1;
}

std::uint64_t latency_bucket_upper_us(std::size_t bucket) {
  if (bucket >= kLatencyBuckets - 1) return UINT64_MAX;
  if (bucket < 16) return bucket + 1;
  const std::size_t e = 4 + (bucket - 16) / 4;
  const std::size_t sub = (bucket - 16) % 4;
  return static_cast<std::uint64_t>(5 + sub) << (e - 2);
}

Metrics::Metrics() : stripes_(new Stripe[kStripes]) {}

Metrics::Stripe& Metrics::stripe() {
  if (t_stripe == SIZE_MAX) t_stripe = next_stripe.fetch_add(1, std::memory_order_relaxed);
  return stripes_[t_stripe % kStripes];
}

void Metrics::count_decision(const Rule& rule, const Decision& decision) {
  Stripe& s = stripe();
  const std::uint64_t key = rule_key(rule);
  const std::size_t counter =
      static_cast<std::size_t>(decision.source) % 4 * 2 + (decision.allowed ? 1 : 0);
  const std::size_t home = key % kRuleSlots;
  for (std::size_t probe = 0; probe < kRuleSlots; ++probe) {
    RuleSlot& slot = s.rules[(home + probe) % kRuleSlots];
    std::uint64_t seen = slot.key.load(std::memory_order_acquire);
    if (seen == 0) {
      // A new rule: claimed under the stripe's mutex, its fields written before its key.
      std::lock_guard lock(s.claim_mu);
      seen = slot.key.load(std::memory_order_relaxed);
      if (seen == 0) {
        slot.rule = rule;
        slot.key.store(key, std::memory_order_release);
        seen = key;
      }
    }
    if (seen == key) {
      slot.counts[counter].fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
  s.other_rules.fetch_add(1, std::memory_order_relaxed);
}

void Metrics::count_error(ErrorCode code) {
  const auto index = static_cast<std::size_t>(code);
  stripe().errors[index < kErrorCodes ? index : kErrorCodes - 1].fetch_add(
      1, std::memory_order_relaxed);
}

void Metrics::record_latency_ns(std::uint64_t ns) {
  Stripe& s = stripe();
  const std::uint64_t us = ns / 1000;
  s.latency[latency_bucket(us)].fetch_add(1, std::memory_order_relaxed);
  s.latency_sum_us.fetch_add(us, std::memory_order_relaxed);
}

ClientMetrics Metrics::snapshot() const {
  ClientMetrics out;
  std::map<std::uint64_t, std::size_t> index;  // rule key -> out.rules
  std::array<std::uint64_t, kErrorCodes> errors{};
  std::array<std::uint64_t, kLatencyBuckets> latency{};
  for (std::size_t i = 0; i < kStripes; ++i) {
    const Stripe& s = stripes_[i];
    for (const RuleSlot& slot : s.rules) {
      const std::uint64_t key = slot.key.load(std::memory_order_acquire);
      if (key == 0) continue;
      auto [at, fresh] = index.try_emplace(key, out.rules.size());
      if (fresh) out.rules.push_back(RuleDecisions{slot.rule, {}});
      RuleDecisions& r = out.rules[at->second];
      for (std::size_t c = 0; c < slot.counts.size(); ++c) {
        r.decisions[c / 2][c % 2] += slot.counts[c].load(std::memory_order_relaxed);
      }
    }
    out.other_rules += s.other_rules.load(std::memory_order_relaxed);
    for (std::size_t c = 0; c < kErrorCodes; ++c) {
      errors[c] += s.errors[c].load(std::memory_order_relaxed);
    }
    for (std::size_t b = 0; b < kLatencyBuckets; ++b) {
      latency[b] += s.latency[b].load(std::memory_order_relaxed);
    }
    out.cluster_latency_sum_us += s.latency_sum_us.load(std::memory_order_relaxed);
  }
  for (std::size_t c = 0; c < kErrorCodes; ++c) {
    if (errors[c] != 0) out.errors.push_back({static_cast<ErrorCode>(c), errors[c]});
  }
  for (std::size_t b = 0; b < kLatencyBuckets; ++b) {
    if (latency[b] == 0) continue;
    out.cluster_latency.push_back(LatencyBucket{latency_bucket_upper_us(b), latency[b]});
    out.cluster_calls += latency[b];
  }
  return out;
}

}  // namespace sluice::client::detail
