// The client's local fallback limiter (issue 15; docs/CLIENT.md section 10): while a key's owner
// cannot answer, a fail_open rule is decided here, by the rule's own algorithm at its limit (and
// burst) divided by the number of gateways that share it. Each key and rule has its own counters
// in a table of fixed capacity; when a key's bucket is full, the entry used longest ago goes (a
// key that comes back starts fresh, as it does the first time). Any thread; a mutex per shard
// of buckets.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/algorithms.h"
#include "core/rule.h"

namespace sluice::client::detail {

// The rule a gateway enforces alone for `rule` shared by `gateways` (>= 1): its limit and burst
// divided, never below 1. A sliding log becomes a sliding window counter of the same limit
// (its log would cost 8 bytes per unit of the limit per key; the counter is its close
// approximation, docs/ALGORITHMS.md).
Rule local_rule(const Rule& rule, std::uint32_t gateways);

class FallbackLimiter {
 public:
  static constexpr std::size_t kWays = 4;
  static constexpr std::size_t kShards = 64;

  // Room for at least `capacity` keys (rounded up to whole buckets in every shard), >= 1.
  FallbackLimiter(std::size_t capacity, std::uint32_t gateways);

  // Decides `cost` units (a peek changes nothing) for the key and rule named by `fingerprint`
  // (blocked_fingerprint()) under local_rule(rule, gateways) at `now_ns` (wall-clock ns).
  sluice::Verdict decide(std::uint64_t fingerprint, const Rule& rule, std::uint32_t cost, bool peek,
                         std::uint64_t now_ns);

  std::uint32_t gateways() const { return gateways_; }
  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return size_.load(std::memory_order_relaxed); }
  std::uint64_t evicted() const { return evicted_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    std::uint64_t fingerprint = 0;  // 0: free
    std::uint64_t used_ns = 0;
    CounterState state;
  };
  using Bucket = std::array<Entry, kWays>;
  struct alignas(64) Shard {
    std::mutex mu;
    std::vector<Bucket> buckets;
  };

  std::uint32_t gateways_ = 1;
  std::size_t capacity_ = 0;
  std::uint64_t bucket_mask_ = 0;
  std::unique_ptr<Shard[]> shards_;
  std::atomic<std::size_t> size_{0};
  std::atomic<std::uint64_t> evicted_{0};
};

}  // namespace sluice::client::detail
