// The client's blocked-key cache (issue 15; docs/CLIENT.md section 10): once the cluster denies
// a key under a rule with a finite retry_after, further requests for that key and rule are denied
// locally until then, at no round trip. Bounded: a fixed number of entries, set at construction;
// when a key's bucket is full, the entry blocked longest ago goes. Any thread. Writers take a
// mutex per shard of buckets; readers take none: each bucket is a seqlock (a version that is odd
// while a writer changes it), so a lookup is a few loads.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>

#include "client/bucket_geometry.h"
#include "core/key_hash.h"
#include "core/rule.h"

namespace sluice::client::detail {

// A key and rule as one 64-bit value: the cache's entry name. Never 0 (0 marks a free entry).
std::uint64_t blocked_fingerprint(const KeyHash& key, const Rule& rule);
// The key alone as a 64-bit value, never 0.
inline std::uint64_t blocked_key_tag(const KeyHash& key) { return key.lo | 1; }

class BlockedCache {
 public:
  static constexpr std::size_t kWays = 4;     // entries per bucket
  static constexpr std::size_t kShards = 64;  // mutexes

  // Room for at least `capacity` entries (rounded up to whole buckets in every shard); 0 turns
  // the cache off (nothing is kept, nothing is found).
  explicit BlockedCache(std::size_t capacity);

  // The key and rule are denied until `until_ns` (the client's clock) for requests of `cost`
  // units or more. A later call for the same fingerprint replaces it. `key_tag`
  // (blocked_key_tag()) names the key alone, for unblock_key.
  void block(std::uint64_t fingerprint, std::uint64_t until_ns, std::uint64_t now_ns,
             std::uint64_t key_tag = 0, std::uint32_t cost = 1);
  // How long a request of `cost` units stays denied after `now_ns`: 0 when it is not blocked
  // (or blocked for a higher cost only). Takes no lock and writes nothing.
  std::uint64_t blocked_for(std::uint64_t fingerprint, std::uint64_t now_ns,
                            std::uint32_t cost = 1) const;
  // Forgets the fingerprint.
  void unblock(std::uint64_t fingerprint);
  // Forgets every rule of the key `key_tag` names (a RESET of the key): a walk over the whole
  // cache, so for rare events only.
  void unblock_key(std::uint64_t key_tag);

  std::size_t capacity() const { return geometry_.capacity; }
  // Entries held now, expired ones included until they are replaced or unblocked.
  std::size_t size() const { return size_.load(std::memory_order_relaxed); }
  // Entries dropped to make room for newer ones since construction.
  std::uint64_t evicted() const { return evicted_.load(std::memory_order_relaxed); }

 private:
  // Every field is an atomic read without the lock; written only under the shard's mutex,
  // between the two steps of the bucket's version.
  struct Entry {
    std::atomic<std::uint64_t> fingerprint{0};  // 0: free
    std::atomic<std::uint64_t> until_ns{0};
    std::atomic<std::uint64_t> since_ns{
        0};  // when it was blocked: the oldest in a full bucket goes
    std::atomic<std::uint64_t> key_tag{0};
    std::atomic<std::uint32_t> cost{1};  // the denied request's: cheaper ones are not answered
  };
  struct Bucket {
    std::atomic<std::uint32_t> version{0};  // odd while a writer is inside
    std::array<Entry, kWays> entries;
  };
  struct alignas(64) Shard {
    std::mutex mu;
    std::unique_ptr<Bucket[]> buckets;
  };
  struct Writing;  // the version steps around a change

  Shard& shard_of(std::uint64_t fingerprint) const { return shards_[fingerprint >> 58]; }
  Bucket& bucket_of(Shard& shard, std::uint64_t fingerprint) const {
    return shard.buckets[fingerprint & geometry_.bucket_mask];
  }
  void clear(Entry& e);

  const BucketGeometry geometry_;
  std::unique_ptr<Shard[]> shards_;
  std::atomic<std::size_t> size_{0};
  std::atomic<std::uint64_t> evicted_{0};
};

}  // namespace sluice::client::detail
