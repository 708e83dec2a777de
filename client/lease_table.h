// The client's leases of hot keys (issue 15; docs/CLIENT.md section 10, "Leases"): a key and rule
// asked for often enough at this client is given a lease of k units by its owner (an ACQUIRE
// item with the lease flag, so the units count against the limit at once), and requests for it
// are then paid from those units here, with no round trip, until they run out or the lease ends
// (lease_ms, and never past the fixed window the units came from). What is left at the end is
// given back (a give-back item), and the owner credits it while it still counts.
//
// Bounded: a fixed number of entries, 4-way buckets in 64 shards. An entry follows a key and
// rule from its first request to the cluster (counting requests to tell a hot key) through its
// leases. Taking units is lock-free (one compare-and-swap of a word that holds the entry's tag
// and the units left); everything else takes the shard's mutex. Installing a lease and ending
// one are the client's I/O thread's; the rest any thread's.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "client/bucket_geometry.h"
#include "core/rule.h"

namespace sluice::client::detail {

// When a key is hot and how much to lease (from ClientOptions).
struct LeasePolicy {
  std::uint64_t lease_ns = 0;    // a lease's longest life; 0: no leases
  std::uint32_t threshold = 16;  // requests to the cluster within lease_ns that make a key hot
  std::uint32_t gateways = 1;    // k = the rule's capacity / (gateways x 10)
};

// The units a lease of `rule` asks for under `policy`: capacity / (gateways x 10), at most
// protocol::kMaxLeaseUnits; 0 when that is below 2 (a lease of one unit saves nothing), or for a
// sliding window counter or a sliding log (docs/CLIENT.md says why they are not leased).
std::uint32_t lease_units(const Rule& rule, const LeasePolicy& policy);

// A lease's units taken by one request: what the decision's headers need.
struct LeaseTake {
  std::uint32_t left = 0;         // units left in the lease after this take
  std::uint64_t remaining = 0;    // the key's remaining at the owner when the lease was granted
  std::uint64_t reset_at_ns = 0;  // when the key is fresh again, by the grant (client clock)
};

// A lease that ended with units left, for the give-back.
struct EndedLease {
  std::string_view key;
  Rule rule;
  std::uint32_t units = 0;
  std::uint32_t stamp = 0;
  const void* owner = nullptr;  // the node that granted it (install's `owner`)
};

class LeaseTable {
 public:
  static constexpr std::size_t kWays = 4;
  static constexpr std::size_t kShards = 64;
  static constexpr std::size_t kMaxKey = 64;  // longer keys are not leased
  static constexpr std::uint32_t kMaxUnits = (1u << 24) - 1;

  // Room for at least `capacity` entries (whole buckets in every shard); 0: no leases.
  explicit LeaseTable(std::size_t capacity);

  std::size_t capacity() const { return geometry_.capacity; }

  // Any thread, lock-free: takes `cost` units from the lease of `fingerprint` when it has them
  // and has not ended at now_ns. False (nothing taken) otherwise.
  bool take(std::uint64_t fingerprint, std::uint32_t cost, std::uint64_t now_ns, LeaseTake& out);
  // Any thread, lock-free, a look: whether take() would find the units now.
  bool has(std::uint64_t fingerprint, std::uint32_t cost, std::uint64_t now_ns) const;

  // Any thread, for a request on its way to the cluster: counts it towards the key's heat and
  // returns how many units to ask for with it (a lease request), or 0. A key is hot when
  // `policy.threshold` requests reached the cluster within lease_ns, or when it had a lease
  // that ended less than lease_ns ago; a key gets one lease request at a time (the next may
  // go once `request_deadline_ns` of the last has passed, or once it is answered).
  std::uint32_t want(std::uint64_t fingerprint, std::string_view key, const Rule& rule,
                     std::uint64_t now_ns, std::uint64_t request_deadline_ns,
                     const LeasePolicy& policy);

  // Any thread: the lease request of `fingerprint` was answered without a grant; another may go.
  void answered(std::uint64_t fingerprint);
  // I/O thread: node `owner` (an identity, compared only) granted a lease of `units` left for
  // this client (after the request that asked paid for itself), stamped `stamp`, usable until
  // `until_ns`. A lease the entry still held is ended first (`ended` gets its units). False
  // when the entry was evicted meanwhile: the units are then given back at once through
  // `ended`.
  bool install(std::uint64_t fingerprint, std::string_view key, const Rule& rule,
               std::uint32_t units, std::uint32_t stamp, std::uint64_t until_ns,
               std::uint64_t remaining, std::uint64_t reset_at_ns, std::uint64_t now_ns,
               const void* owner, const std::function<void(const EndedLease&)>& ended);
  // Any thread: ends every lease of `key` (every rule) and drops its units: the key was reset
  // at its owner, so they would come on top of a fresh start. A walk over the whole table.
  void forget_key(std::string_view key);
  // I/O thread: ends every lease whose time is up at now_ns (or every lease, with `all`),
  // calling `ended` for each with units left. Returns the earliest end of the leases still
  // running (0: none).
  std::uint64_t end_leases(std::uint64_t now_ns, bool all,
                           const std::function<void(const EndedLease&)>& ended);

  // Leases running (installed and not yet ended by end_leases()).
  std::size_t running() const { return running_.load(std::memory_order_relaxed); }

 private:
  struct Entry {
    // Read without the lock.
    std::atomic<std::uint64_t> fingerprint{0};  // 0: free
    std::atomic<std::uint64_t> units{0};        // tag << 24 | units left
    std::atomic<std::uint64_t> until_ns{0};     // the lease's end; 0: none
    std::atomic<std::uint64_t> remaining{0};
    std::atomic<std::uint64_t> reset_at_ns{0};
    // Under the shard's mutex.
    std::uint64_t window_start_ns = 0;  // heat: requests since then
    std::uint32_t hits = 0;
    std::uint64_t asked_until_ns = 0;   // a lease request is out until then
    std::uint64_t leased_until_ns = 0;  // the last lease's end: a key stays hot after it
    bool running = false;               // a lease is installed and not ended
    std::uint32_t stamp = 0;
    const void* owner = nullptr;
    Rule rule;
    std::uint8_t key_size = 0;
    char key[kMaxKey];
  };
  struct Bucket {
    std::array<Entry, kWays> entries;
  };
  struct alignas(64) Shard {
    std::mutex mu;
    std::unique_ptr<Bucket[]> buckets;
  };

  static std::uint64_t tag_of(std::uint64_t fingerprint) { return fingerprint >> 24; }
  Shard& shard_of(std::uint64_t fingerprint) const { return shards_[fingerprint >> 58]; }
  Bucket& bucket_of(Shard& shard, std::uint64_t fingerprint) const {
    return shard.buckets[fingerprint & geometry_.bucket_mask];
  }
  const Entry* find(std::uint64_t fingerprint) const;
  static std::uint64_t heat(const Entry& e, std::uint64_t now_ns, const LeasePolicy& policy);
  // REQUIRES: the shard's mutex. Ends the entry's lease: its units go to `ended`.
  void end_locked(Entry& e, const std::function<void(const EndedLease&)>& ended);

  const BucketGeometry geometry_;
  std::unique_ptr<Shard[]> shards_;
  std::atomic<std::size_t> running_{0};
};

}  // namespace sluice::client::detail
