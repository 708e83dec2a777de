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
  // The rule in two words: limit and burst, then the period (below 2^35 ms) and the algorithm.
  const std::uint64_t counts = (static_cast<std::uint64_t>(rule.limit) << 32) | rule.burst;
  const std::uint64_t shape = rule.period_ms ^ (static_cast<std::uint64_t>(rule.algorithm) << 56);
  std::uint64_t h = mix(key.lo ^ counts);
  h = mix(h ^ std::rotl(key.hi, 29) ^ shape);
  return h == 0 ? 1 : h;
}

// Makes a bucket's version odd for the length of a change, even again after it: a reader that
// saw the same even version before and after its reads saw no change. Without fences (which
// ThreadSanitizer does not model): the writer stores the entry's fields with release, so a
// reader whose acquire load sees any of them sees the odd version too when it reads the
// version again after them.
struct BlockedCache::Writing {
  explicit Writing(Bucket& b) : bucket(b) {
    bucket.version.store(bucket.version.load(std::memory_order_relaxed) + 1,
                         std::memory_order_relaxed);
  }
  ~Writing() {
    bucket.version.store(bucket.version.load(std::memory_order_relaxed) + 1,
                         std::memory_order_release);
  }
  Bucket& bucket;
};

BlockedCache::BlockedCache(std::size_t capacity)
    : geometry_(bucket_geometry(capacity, kShards, kWays)),
      shards_(make_shards<Shard, Bucket>(kShards, geometry_)) {}

void BlockedCache::clear(Entry& e) {
  e.fingerprint.store(0, std::memory_order_release);
  e.key_tag.store(0, std::memory_order_release);
  size_.fetch_sub(1, std::memory_order_relaxed);
}

void BlockedCache::block(std::uint64_t fingerprint, std::uint64_t until_ns, std::uint64_t now_ns,
                         std::uint64_t key_tag, std::uint32_t cost) {
  if (geometry_.capacity == 0 || until_ns <= now_ns) return;
  Shard& shard = shard_of(fingerprint);
  std::lock_guard lock(shard.mu);
  Bucket& bucket = bucket_of(shard, fingerprint);
  Entry* slot = nullptr;
  Entry* free = nullptr;
  Entry* oldest = &bucket.entries[0];
  for (Entry& e : bucket.entries) {
    const std::uint64_t f = e.fingerprint.load(std::memory_order_relaxed);
    if (f == fingerprint) {
      slot = &e;
      break;
    }
    if (f == 0 || e.until_ns.load(std::memory_order_relaxed) <= now_ns) {
      if (free == nullptr) free = &e;
    } else if (e.since_ns.load(std::memory_order_relaxed) <
               oldest->since_ns.load(std::memory_order_relaxed)) {
      oldest = &e;
    }
  }
  if (slot == nullptr) {
    slot = free;
    if (slot == nullptr) {
      slot = oldest;
      evicted_.fetch_add(1, std::memory_order_relaxed);
    } else if (slot->fingerprint.load(std::memory_order_relaxed) == 0) {
      size_.fetch_add(1, std::memory_order_relaxed);
    }
  }
  const Writing writing(bucket);
  slot->fingerprint.store(fingerprint, std::memory_order_release);
  slot->until_ns.store(until_ns, std::memory_order_release);
  slot->since_ns.store(now_ns, std::memory_order_release);
  slot->key_tag.store(key_tag, std::memory_order_release);
  slot->cost.store(cost, std::memory_order_release);
}

std::uint64_t BlockedCache::blocked_for(std::uint64_t fingerprint, std::uint64_t now_ns,
                                        std::uint32_t cost) const {
  if (geometry_.capacity == 0) return 0;
  const Bucket& bucket = bucket_of(shard_of(fingerprint), fingerprint);
  // A writer is inside for a few stores: a reader that meets one tries again, a bounded number
  // of times, and then takes the key as not blocked (it is sent, as without a cache).
  for (int attempt = 0; attempt < 64; ++attempt) {
    const std::uint32_t before = bucket.version.load(std::memory_order_acquire);
    if ((before & 1) != 0) continue;
    std::uint64_t until = 0;
    std::uint32_t blocked_cost = 0;
    bool found = false;
    for (const Entry& e : bucket.entries) {
      if (e.fingerprint.load(std::memory_order_acquire) != fingerprint) continue;
      until = e.until_ns.load(std::memory_order_acquire);
      blocked_cost = e.cost.load(std::memory_order_acquire);
      found = true;
      break;
    }
    // Acquire loads above keep this one after them.
    if (bucket.version.load(std::memory_order_relaxed) != before) continue;
    if (!found || until <= now_ns || cost < blocked_cost) return 0;
    return until - now_ns;
  }
  return 0;
}

void BlockedCache::unblock(std::uint64_t fingerprint) {
  if (geometry_.capacity == 0) return;
  Shard& shard = shard_of(fingerprint);
  std::lock_guard lock(shard.mu);
  Bucket& bucket = bucket_of(shard, fingerprint);
  for (Entry& e : bucket.entries) {
    if (e.fingerprint.load(std::memory_order_relaxed) != fingerprint) continue;
    const Writing writing(bucket);
    clear(e);
    return;
  }
}

void BlockedCache::unblock_key(std::uint64_t key_tag) {
  if (geometry_.capacity == 0 || key_tag == 0) return;
  for (std::size_t s = 0; s < kShards; ++s) {
    Shard& shard = shards_[s];
    std::lock_guard lock(shard.mu);
    for (std::size_t b = 0; b < geometry_.buckets_per_shard; ++b) {
      Bucket& bucket = shard.buckets[b];
      for (Entry& e : bucket.entries) {
        if (e.fingerprint.load(std::memory_order_relaxed) == 0 ||
            e.key_tag.load(std::memory_order_relaxed) != key_tag) {
          continue;
        }
        const Writing writing(bucket);
        clear(e);
      }
    }
  }
}

}  // namespace sluice::client::detail
