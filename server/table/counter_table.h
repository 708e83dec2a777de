// A shard's counters: open addressing over fixed-size records keyed by a 128-bit fingerprint.
// Owned by exactly one shard thread: no locks, no atomics. No heap allocation per request or
// per key (the slot array grows by whole tables; sliding-log rings come from a pooled arena).
// Expiry is lazy on access plus an incremental sweep(); a memory cap evicts expired records
// first, then the least recently used among the candidates of the probe neighbourhood.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/algorithms.h"
#include "core/key_hash.h"
#include "core/rule.h"

namespace sluice::server {

struct TableConfig {
  std::size_t max_bytes = 64u << 20;  // cap on slot array + sliding-log storage
  std::uint32_t sliding_log_cap = kDefaultSlidingLogCap;
  std::size_t initial_slots = 1024;
};

struct TableStats {
  std::uint64_t keys = 0;          // live records
  std::uint64_t memory_bytes = 0;  // slot array + sliding-log storage, as allocated
  std::uint64_t slots = 0;
  std::uint64_t expired = 0;        // records dropped because they had expired (lazily or by sweep)
  std::uint64_t evicted_lru = 0;    // live records evicted to make room under the cap
  std::uint64_t failed_inserts = 0; // requests answered kNoMemory
};

enum class TableOutcome : std::uint8_t { kOk, kNoMemory };

struct TableAnswer {
  TableOutcome outcome = TableOutcome::kOk;
  Decision decision;
};

class CounterTable {
 public:
  explicit CounterTable(const TableConfig& config);
  CounterTable(const CounterTable&) = delete;
  CounterTable& operator=(const CounterTable&) = delete;

  // One atomic check-and-update for the key. REQUIRES: validate(rule, request.cost) == kOk.
  // A key stored under another algorithm starts fresh under the new one. A peek on an absent
  // key answers for a fresh key and stores nothing.
  TableAnswer acquire(const KeyHash& key, const Rule& rule, const Request& request);

  // Forgets the key. Returns whether it was stored (and not yet expired).
  bool reset(const KeyHash& key, std::uint64_t now_ns);

  // Whether the key is stored and not expired at now_ns (for tests and tools).
  bool contains(const KeyHash& key, std::uint64_t now_ns) const;

  // Examines up to `max_slots` slots from where the last call stopped and drops expired
  // records. Returns how many it dropped. Call it often with a small budget: no pauses.
  std::size_t sweep(std::uint64_t now_ns, std::size_t max_slots);

  TableStats stats() const;
  std::size_t size() const;
  std::size_t memory_bytes() const;

 private:
  // (record layout, slot array, sliding-log arena: see counter_table.cpp)
};

}  // namespace sluice::server
