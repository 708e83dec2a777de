// Per-shard statistics. Each counter has exactly one writer, the shard's own thread, so it is a
// relaxed load plus a relaxed store (no locked read-modify-write); any thread may read it to
// answer STATS. Values read from different counters are not a consistent snapshot.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace sluice::server {

class SingleWriterCounter {
 public:
  // Owner thread only.
  void add(std::uint64_t n = 1) {
    value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void sub(std::uint64_t n = 1) {
    value_.store(value_.load(std::memory_order_relaxed) - n, std::memory_order_relaxed);
  }
  void set(std::uint64_t v) { value_.store(v, std::memory_order_relaxed); }
  // Any thread.
  std::uint64_t get() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> value_{0};
};

// A shard counter (not client::Stat, one STATS entry as a client reads it). The names are part
// of STATS ("shard.<i>.<name>", "total.<name>"), documented in
// docs/PROTOCOL.md; the order here is the order of the reply.
enum class ShardStat : std::size_t {
  kKeys,
  kMemoryBytes,
  kSlots,
  kAllowed,
  kDenied,
  kInvalidItems,
  kExpired,
  kEvicted,
  kFailedInserts,
  kHandedOver,
  kConnections,
  kConnectionsTotal,
  kProtocolErrors,
  kIdleClosed,
  kRejectedConnections,
  kAuthFailures,
  kHugePages,
  kBufferBytes,
  kOverloadClosed,
  kRedirected,
  kUnavailable,
  kReplicaApplied,
  kReplicaRefused,
  kReplicationSent,
  kReplicationAcked,
  kReplicationDropped,
  kPullPages,
  kPullRecords,
  kPulledRecords,
  kLeases,
  kLeasedUnits,
  kGiveBacks,
  kCreditedUnits,
  kStaleFences,
  kReplicationRefused,
  kEvictedExhausted,
  kCount,
};

inline constexpr std::array<std::string_view, static_cast<std::size_t>(ShardStat::kCount)>
    kShardStatNames = {
        "keys",
        "memory_bytes",
        "slots",
        "allowed",
        "denied",
        "invalid_items",
        "expired",
        "evicted",
        "failed_inserts",
        "handed_over",
        "connections",
        "connections_total",
        "protocol_errors",
        "idle_closed",
        "rejected_connections",
        "auth_failures",
        "huge_pages",
        "buffer_bytes",
        "overload_closed",
        "redirected",
        "unavailable",
        "replica_applied",
        "replica_refused",
        "replication_sent",
        "replication_acked",
        "replication_dropped",
        "pull_pages",
        "pull_records",
        "pulled_records",
        "leases",
        "leased_units",
        "give_backs",
        "credited_units",
        "stale_fences",
        "replication_refused",
        "evicted_exhausted",
};

// Decisions by algorithm (core Algorithm value 1..5 at index value - 1) and outcome, counted
// by the owner shard where ShardStat kAllowed and kDenied are (peeks are not counted): what
// /metrics exports as sluice_decisions_total{algorithm,outcome}.
struct DecisionCounters {
  static constexpr std::size_t kAlgorithms = 5;
  std::array<std::array<SingleWriterCounter, 2>, kAlgorithms> by_algorithm;  // [..][allowed]

  // Owner thread only. REQUIRES: 1 <= algorithm <= kAlgorithms (a validated rule's).
  void add(std::uint8_t algorithm, bool allowed) {
    by_algorithm[algorithm - 1u][allowed ? 1 : 0].add();
  }
  std::uint64_t get(std::uint8_t algorithm, bool allowed) const {
    return by_algorithm[algorithm - 1u][allowed ? 1 : 0].get();
  }
};

// A latency histogram with fixed bounds and one writer: observe() is a few compares and two
// single-writer adds. Buckets are not cumulative here (Prometheus' are: the reader sums).
struct LatencyHistogram {
  // Upper bounds, inclusive, in ns: 5 us to 100 ms; one more bucket holds the rest (+Inf).
  static constexpr std::array<std::uint64_t, 13> kBoundsNs = {
      5'000,     10'000,    25'000,    50'000,     100'000,    250'000,    500'000,
      1'000'000, 2'500'000, 5'000'000, 10'000'000, 25'000'000, 100'000'000};
  std::array<SingleWriterCounter, kBoundsNs.size() + 1> buckets;
  SingleWriterCounter sum_ns;

  // Owner thread only.
  void observe(std::uint64_t ns) {
    std::size_t b = 0;
    while (b < kBoundsNs.size() && ns > kBoundsNs[b]) ++b;
    buckets[b].add();
    sum_ns.add(ns);
  }
};

// Padded so that two shards' counters never share a cache line.
struct alignas(64) ShardCounters {
  std::array<SingleWriterCounter, static_cast<std::size_t>(ShardStat::kCount)> values;
  DecisionCounters decisions;
  // ACQUIRE frames, from the start of their parse to their reply appended to the connection's
  // output (hand-overs to other shards included), on the connection's shard.
  LatencyHistogram acquire_latency;

  SingleWriterCounter& operator[](ShardStat s) { return values[static_cast<std::size_t>(s)]; }
  const SingleWriterCounter& operator[](ShardStat s) const {
    return values[static_cast<std::size_t>(s)];
  }
};

}  // namespace sluice::server
