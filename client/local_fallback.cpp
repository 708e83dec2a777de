#include "client/local_fallback.h"

#include <algorithm>

#include "client/bucket_geometry.h"

namespace sluice::client::detail {

Rule local_rule(const Rule& rule, std::uint32_t gateways) {
  Rule local = rule;
  const std::uint32_t n = std::max<std::uint32_t>(1, gateways);
  if (local.algorithm == Algorithm::kSlidingLog) local.algorithm = Algorithm::kSlidingWindow;
  if (local.limit != 0) local.limit = std::max<std::uint32_t>(1, local.limit / n);
  if (local.burst != 0) local.burst = std::max<std::uint32_t>(1, local.burst / n);
  return local;
}

FallbackLimiter::FallbackLimiter(std::size_t capacity, std::uint32_t gateways)
    : gateways_(std::max<std::uint32_t>(1, gateways)), shards_(new Shard[kShards]) {
  const BucketGeometry shape = bucket_geometry(std::max<std::size_t>(1, capacity), kShards, kWays);
  bucket_mask_ = shape.bucket_mask;
  capacity_ = shape.capacity;
  for (std::size_t s = 0; s < kShards; ++s) shards_[s].buckets.resize(shape.buckets_per_shard);
}

sluice::Verdict FallbackLimiter::decide(std::uint64_t fingerprint, const Rule& rule,
                                        std::uint32_t cost, bool peek, std::uint64_t now_ns) {
  const Rule local = local_rule(rule, gateways_);
  const Request request{now_ns, cost, peek};
  Shard& shard = shards_[fingerprint >> 58];
  std::lock_guard lock(shard.mu);
  Bucket& bucket = shard.buckets[fingerprint & bucket_mask_];
  Entry* found = nullptr;
  Entry* free = nullptr;
  Entry* oldest = &bucket[0];
  for (Entry& e : bucket) {
    if (e.fingerprint == fingerprint) {
      found = &e;
      break;
    }
    if (e.fingerprint == 0) {
      if (free == nullptr) free = &e;
    } else if (e.used_ns < oldest->used_ns) {
      oldest = &e;
    }
  }
  if (found == nullptr) {
    CounterState fresh;
    if (peek) return sluice::decide(local, fresh, request);  // a peek keeps nothing
    found = free;
    if (found == nullptr) {
      found = oldest;
      evicted_.fetch_add(1, std::memory_order_relaxed);
    } else {
      size_.fetch_add(1, std::memory_order_relaxed);
    }
    *found = Entry{fingerprint, now_ns, CounterState{}};
  }
  found->used_ns = now_ns;
  return sluice::decide(local, found->state, request);
}

}  // namespace sluice::client::detail
