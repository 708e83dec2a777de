#include "client/blocked_cache.h"

#include <bit>

namespace sluice::client::detail {
namespace {

// A 64-bit finalizer (the multiply-xorshift rounds of splitmix64): every input bit moves about
// half of the output bits, so shard and bucket bits are well spread.
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

}  // namespace

std::uint64_t blocked_fingerprint(const KeyHash& key, const Rule& rule) {
  std::uint64_t h = mix(key.lo ^ std::rotl(key.hi, 29));
  h = mix(h ^ (static_cast<std::uint64_t>(rule.algorithm) << 56) ^ rule.limit);
  h = mix(h ^ rule.period_ms);
  h = mix(h ^ rule.burst);
  return h == 0 ? 1 : h;
}

BlockedCache::BlockedCache(std::size_t capacity) : shards_(new Shard[kShards]) {
  if (capacity == 0) return;
  const std::size_t per_shard = (capacity + kShards - 1) / kShards;
  const std::size_t buckets = std::bit_ceil((per_shard + kWays - 1) / kWays);
  bucket_mask_ = buckets - 1;
  capacity_ = buckets * kWays * kShards;
  for (std::size_t s = 0; s < kShards; ++s) shards_[s].buckets.resize(buckets);
}

void BlockedCache::block(std::uint64_t fingerprint, std::uint64_t until_ns, std::uint64_t now_ns,
                         std::uint64_t key_tag, std::uint32_t cost) {
  if (capacity_ == 0 || until_ns <= now_ns) return;
  Shard& shard = shard_of(fingerprint);
  std::lock_guard lock(shard.mu);
  Bucket& bucket = bucket_of(shard, fingerprint);
  Entry* free = nullptr;
  Entry* oldest = &bucket[0];
  for (Entry& e : bucket) {
    if (e.fingerprint == fingerprint) {
      e.until_ns = until_ns;
      e.since_ns = now_ns;
      e.key_tag = key_tag;
      e.cost = cost;
      return;
    }
    if (e.fingerprint == 0 || e.until_ns <= now_ns) {
      if (free == nullptr) free = &e;
    } else if (e.since_ns < oldest->since_ns) {
      oldest = &e;
    }
  }
  Entry* slot = free;
  if (slot == nullptr) {
    slot = oldest;
    evicted_.fetch_add(1, std::memory_order_relaxed);
  } else if (slot->fingerprint == 0) {
    size_.fetch_add(1, std::memory_order_relaxed);
  }
  *slot = Entry{fingerprint, until_ns, now_ns, key_tag, cost};
}

std::uint64_t BlockedCache::blocked_for(std::uint64_t fingerprint, std::uint64_t now_ns,
                                        std::uint32_t cost) {
  if (capacity_ == 0) return 0;
  Shard& shard = shard_of(fingerprint);
  std::lock_guard lock(shard.mu);
  for (Entry& e : bucket_of(shard, fingerprint)) {
    if (e.fingerprint != fingerprint) continue;
    if (e.until_ns > now_ns) return cost >= e.cost ? e.until_ns - now_ns : 0;
    e = Entry{};
    size_.fetch_sub(1, std::memory_order_relaxed);
    return 0;
  }
  return 0;
}

void BlockedCache::unblock(std::uint64_t fingerprint) {
  if (capacity_ == 0) return;
  Shard& shard = shard_of(fingerprint);
  std::lock_guard lock(shard.mu);
  for (Entry& e : bucket_of(shard, fingerprint)) {
    if (e.fingerprint != fingerprint) continue;
    e = Entry{};
    size_.fetch_sub(1, std::memory_order_relaxed);
    return;
  }
}

void BlockedCache::unblock_key(std::uint64_t key_tag) {
  if (capacity_ == 0 || key_tag == 0) return;
  for (std::size_t s = 0; s < kShards; ++s) {
    std::lock_guard lock(shards_[s].mu);
    for (Bucket& bucket : shards_[s].buckets) {
      for (Entry& e : bucket) {
        if (e.fingerprint == 0 || e.key_tag != key_tag) continue;
        e = Entry{};
        size_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
  }
}

}  // namespace sluice::client::detail
