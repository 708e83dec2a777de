// A shard's counters: open addressing over fixed-size records keyed by a 128-bit fingerprint,
// split into segments that grow one at a time (docs/ARCHITECTURE.md, "Counter table").
// Owned by exactly one shard thread: no locks, no atomics. No heap allocation per request or
// per key (a segment grows or splits as a whole; sliding-log rings come from a pooled arena).
// Expiry is lazy on access plus an incremental sweep(). A memory cap evicts, among the
// candidates of the probe neighbourhood (for a sliding-log ring, among sampled sliding-log
// records, with smaller rings preferred among the expired: reclaim_ring()), by what forgetting a
// record gives away: an expired record first (its state already equals an absent key's), then
// the one with the most remaining capacity at its last request, and the least recently used
// only among equals. So a flood of fresh keys evicts fresh keys, not the keys it is denied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/algorithms.h"
#include "core/key_hash.h"
#include "core/rule.h"
#include "server/table/chunk_pool.h"
#include "server/table/log_arena.h"

namespace sluice::server {

struct TableConfig {
  std::size_t max_bytes = 64u << 20;  // cap on segments + directory + sliding-log storage
  std::uint32_t sliding_log_cap = kDefaultSlidingLogCap;
  std::size_t initial_slots = 1024;
  // Records in 2 MiB transparent huge pages, when max_bytes is at least
  // CounterTable::kHugePagesMinBytes (below that, a 2 MiB block would be a large share of the cap).
  bool huge_pages = false;
};

struct TableStats {
  std::uint64_t keys = 0;          // records stored, as size()
  std::uint64_t memory_bytes = 0;  // segments + directory + sliding-log storage, as allocated
  std::uint64_t slots = 0;         // slots of all segments, including their overflow slots
  std::uint64_t segments = 0;
  bool huge_pages = false;    // records are in 2 MiB blocks advised for huge pages
  std::uint64_t expired = 0;  // records dropped because they had expired (lazily or by sweep)
  std::uint64_t evicted = 0;  // live records evicted to make room under the cap
  // Of those, records whose key had no capacity left at its last request (capacity class 0:
  // a key being denied, or that took its last unit).
  std::uint64_t evicted_exhausted = 0;
  std::uint64_t failed_inserts = 0;  // requests answered kNoMemory
};

enum class TableOutcome : std::uint8_t { kOk, kNoMemory };

// A record as it travels between nodes (docs/PROTOCOL.md, 10.4): what export_record() and scan()
// read and apply_record() merges.
struct RecordImage {
  KeyHash key;
  std::uint8_t algorithm = 0;       // core Algorithm value; 0 = the key is absent (a reset)
  std::uint8_t capacity_class = 0;  // 0..15, as the meta word stores it
  CounterState state;               // not used for sliding logs
  std::uint64_t idle_at_ns = 0;     // the record's expiry, as stored (rounded up to 2^19 ns)
};

enum class ApplyOutcome : std::uint8_t {
  kApplied,   // the table now holds the image's state (or nothing: an expired image beat ours)
  kKept,      // ours was newer or equal (an absent key counts as the oldest state)
  kErased,    // a reset image: the key is gone
  kNoMemory,  // no room under the cap (or a log longer than sliding_log_cap); nothing changed
  kRefused,   // an unknown algorithm; nothing changed
};

struct ScanResult {
  std::uint64_t next_cursor = 0;  // where the next call goes on (0 once done)
  bool done = false;              // no record left after this page
  std::size_t visited = 0;
};

struct TableAnswer {
  TableOutcome outcome = TableOutcome::kOk;
  Verdict decision;
};

class CounterTable {
 public:
  explicit CounterTable(const TableConfig& config);
  CounterTable(const CounterTable&) = delete;
  CounterTable& operator=(const CounterTable&) = delete;

  // One atomic check-and-update for the key. REQUIRES: validate(rule, request.cost) == kOk.
  // A key stored under another algorithm starts fresh under the new one. A peek on an absent
  // key answers for a fresh key and stores nothing. kNoMemory when the key cannot be stored
  // under the cap (counted in failed_inserts), and for a sliding-log limit above
  // TableConfig::sliding_log_cap.
  TableAnswer acquire(const KeyHash& key, const Rule& rule, const Request& request);

  // Gives back `units` unspent units of a lease stamped `stamp` (sluice::give_back): credited
  // to the key's record while they still count, the record's expiry moved to match; nothing
  // for an absent or expired key, one stored under another algorithm, or a sliding log.
  // Returns the units credited.
  std::uint32_t give_back(const KeyHash& key, const Rule& rule, std::uint32_t units,
                          std::uint32_t stamp, std::uint64_t now_ns);

  // Forgets the key. Returns whether it was stored (and not yet expired).
  bool reset(const KeyHash& key, std::uint64_t now_ns);

  // Whether the key is stored and not expired at now_ns (for tests and tools).
  bool contains(const KeyHash& key, std::uint64_t now_ns) const;

  // Records between nodes (docs/ARCHITECTURE.md, "Export, apply and scan").
  //
  // The key's record at now_ns, for another node; a sliding log's timestamps go to `log`
  // (oldest first: the entries the log holds, which may include some the algorithm has yet to
  // drop as expired), which is cleared first and keeps its capacity. False when the key is
  // absent or expired. Changes nothing, not even the last-used stamp.
  bool export_record(const KeyHash& key, std::uint64_t now_ns, RecordImage& out,
                     std::vector<std::uint64_t>& log) const;
  // Merges a record from another node. Absent here (or expired): stored as given, which may
  // evict at the cap as an insert does, and a failure counts in failed_inserts. Present: keeps
  // the copy more consumed at now_ns by prefer_state() (prefer_log() for sliding logs), which of
  // one writer's states is the later; under a different algorithm the image wins. Algorithm 0
  // erases the key. An image expired at now_ns (or holding a fresh state) is not stored, but still
  // erases an older record of ours. An applied record takes the image's expiry and capacity class
  // and the stamp of now_ns; a sliding log gets a ring of the smallest class that holds it (the
  // next request that needs more moves it). REQUIRES: a log's timestamps are sorted, oldest first.
  ApplyOutcome apply_record(const RecordImage& image, std::span<const std::uint64_t> log,
                            std::uint64_t now_ns);
  // A scan for PULL. Visits, in the table's order from `cursor` (0 = the beginning), the records
  // live at now_ns whose key satisfies wanted(const KeyHash&), calling
  // visit(const RecordImage&, std::span<const std::uint64_t> log) for each (an empty log except
  // for sliding logs; the span lasts until the table changes). Stops once `max_records` (at
  // least 1) were visited, though never between two records of a segment sharing the high 32
  // bits of fp_lo, so a page may hold more. Between calls the table may change in any way: a
  // record live from the first call to the last is visited at least once (some may be visited
  // twice). wanted and visit must not change the table. The scan may lay a wrapped sliding-log
  // ring out from its start (the same log), so that visit gets it as one span.
  // `changed_since_ns` (0 = every record) leaves out the records whose last change (an acquire,
  // a peek, a give-back, an applied record) came before it, to the last-used stamp's unit
  // (2^28 ns): it may visit records older by up to one unit, never leave a later one out.
  // A page also ends after kScanSlotBudget slots without a new record (between two records),
  // so that a scan that finds few records does not hold the shard for the whole table.
  template <typename Wanted, typename Visit>
  ScanResult scan(std::uint64_t cursor, std::size_t max_records, std::uint64_t now_ns,
                  Wanted wanted, Visit visit, std::uint64_t changed_since_ns = 0) const {
    const ScanCallbacks callbacks{
        &wanted, &visit,
        [](void* w, const KeyHash& key) -> bool { return (*static_cast<Wanted*>(w))(key); },
        [](void* v, const RecordImage& image, std::span<const std::uint64_t> log) {
          (*static_cast<Visit*>(v))(image, log);
        }};
    return scan_records(cursor, max_records, now_ns, changed_since_ns, callbacks);
  }
  static constexpr std::size_t kScanSlotBudget = 1u << 16;

  // Examines up to `max_slots` slots from where the last call stopped and drops expired
  // records. Returns how many it dropped. Call it often with a small budget: no pauses.
  std::size_t sweep(std::uint64_t now_ns, std::size_t max_slots);
  // The sweep as a shard runs it, once every kSweepIntervalNs: slots / 100 slots (at least
  // kMinSweepSlots, at most kMaxSweepSlots), so a full pass takes about 100 steps (5 s) and no
  // step takes a millisecond. Returns how many records it dropped.
  std::size_t sweep_step(std::uint64_t now_ns);

  // Calls decide(k) for each k in [0, n), with the home slot of hash_at(k + kPrefetchAhead)
  // prefetched meanwhile: the cache and TLB misses of a batch overlap with the work on earlier
  // items instead of coming one after another (prefetching the whole batch first stalled on its
  // own page walks; docs/BENCHMARKS.md). hash_at(k) returns item k's KeyHash.
  template <typename HashAt, typename Decide>
  void for_each_prefetched(std::size_t n, HashAt hash_at, Decide decide) {
    for (std::size_t k = 0; k < n && k < kPrefetchAhead; ++k) prefetch(hash_at(k));
    for (std::size_t k = 0; k < n; ++k) {
      if (k + kPrefetchAhead < n) prefetch(hash_at(k + kPrefetchAhead));
      decide(k);
    }
  }

  TableStats stats() const;
  // Records stored, including expired ones not yet dropped.
  std::size_t size() const;
  std::size_t memory_bytes() const;

  ~CounterTable();

  // Hint: start loading the key's home slot into cache (call it a few requests ahead).
  void prefetch(const KeyHash& key) const;

  // Test seam: checks every segment's ordering, displacement bound and gap invariants, the
  // directory, the record count, that every ring in use belongs to a record, and the cap.
  // O(slots).
  bool TEST_check_invariants() const;
  // Test seam: whether a record for the key is stored, expired or not.
  bool TEST_holds(const KeyHash& key) const;
  // Test seam: the most memory the table has held at once, growth steps included.
  std::size_t TEST_peak_memory_bytes() const { return peak_bytes_; }

  // A key lives within kMaxDisplacement slots after its home slot; each segment has that many
  // slots (plus one) past its last home, so probes never wrap.
  static constexpr std::size_t kMaxDisplacement = 63;
  // Records examined to pick a victim when a segment is full (see docs/ARCHITECTURE.md,
  // "Counter table").
  static constexpr std::size_t kEvictionCandidates = 16;
  // A segment with this many home slots splits in two instead of growing: a growth or a split
  // moves at most ~4,500 records (~180 KiB), whatever the table's size.
  static constexpr std::size_t kSplitHomes = 4096;
  // Smaller caps are raised to this: one chunk of records, one arena chunk and the directory.
  static constexpr std::size_t kMinMaxBytes = 12 << 10;
  // The smallest cap for which TableConfig::huge_pages takes effect: 32 blocks of 2 MiB.
  static constexpr std::size_t kHugePagesMinBytes = std::size_t{64} << 20;
  // sweep_step()'s schedule and budget.
  static constexpr std::uint64_t kSweepIntervalNs = 50'000'000;
  static constexpr std::size_t kMinSweepSlots = 4096;
  static constexpr std::size_t kMaxSweepSlots = 65536;
  // The most slots reclaim_ring() examines for sliding-log records to give up a ring.
  static constexpr std::size_t kReclaimSlots = 1024;
  // How far ahead for_each_prefetched() prefetches: 8 beat the whole batch first, 16 ahead and
  // two-stage prefetching (docs/BENCHMARKS.md).
  static constexpr std::size_t kPrefetchAhead = 8;

 private:
  // One slot, 40 bytes. `meta` packs, low to high: the algorithm (3 bits, 0 = empty slot), the
  // remaining-capacity class of the last request that was not a peek (4 bits: 15 * remaining /
  // limit, rounded down; a lower bound of the class now, as capacity only comes back with
  // time), a last-used stamp (12 bits of now_ns >> 28, ~268 ms, for approximate LRU among
  // equals) and the expiry (the top 45 bits: idle_at_ns rounded up to a multiple of 2^19 ns,
  // ~0.5 ms).
  struct Record {
    std::uint64_t fp_lo = 0;
    std::uint64_t fp_hi = 0;
    CounterState state;
    std::uint64_t meta = 0;
  };
  static_assert(sizeof(Record) == 40);
  // Slot i of a segment is record i % kChunkRecords of chunk i / kChunkRecords.
  static constexpr std::size_t kChunkRecords = ChunkPool::kChunkBytes / sizeof(Record);
  static constexpr std::size_t chunks_for(std::size_t slots) {
    return (slots + kChunkRecords - 1) / kChunkRecords;
  }
  // A small sorted Robin-Hood array of its own: homes are [0, homes), the array has
  // homes + kMaxDisplacement + 1 slots, stored in `chunks`.
  struct Segment {
    std::vector<Record*> chunks;
    std::uint32_t homes = 0;
    std::uint32_t size = 0;      // records stored, expired ones included
    std::uint32_t max_size = 0;  // records allowed before the segment grows
    std::uint32_t prefix = 0;    // the `depth` top selector bits all its keys share
    std::uint32_t depth = 0;
    std::uint32_t uncounted = 0;  // insertions since grow() last counted the live records
    std::size_t total_slots() const { return homes + kMaxDisplacement + 1; }
  };
  struct Probe {
    std::uint32_t segment;  // index in segments_
    std::size_t pos;        // the record's slot, or where it would be inserted
    bool found;
    Record* record;  // the record at `pos` when found
  };

  // Directory entry i: the segment of the keys whose selector's top `depth_` bits are i, with
  // the two of its fields a lookup needs, so that a lookup reads the entry, a chunk pointer and
  // records, and neither segments_ nor the segment's chunk list (refresh_directory() keeps
  // them current).
  struct DirectoryEntry {
    Record* const* chunks;  // the segment's chunks.data()
    std::uint32_t homes;
    std::uint32_t segment;  // index in segments_
  };
  static_assert(sizeof(DirectoryEntry) == 16);
  // The entry of a selector (a key's: the low 32 bits of its hash's `hi`).
  const DirectoryEntry& entry_at(std::uint32_t selector) const;
  const DirectoryEntry& entry_of(const KeyHash& key) const;
  // Rewrites the directory entries of segment `index` from it, after its chunk list or homes
  // changed or it split.
  void refresh_directory(std::uint32_t index);

  static std::size_t home_of(std::uint32_t homes, std::uint64_t fp_lo);
  static std::size_t home_of(const Segment& seg, std::uint64_t fp_lo) {
    return home_of(seg.homes, fp_lo);
  }
  static Record& slot(const std::vector<Record*>& chunks, std::size_t i) {
    return chunks[i / kChunkRecords][i % kChunkRecords];
  }
  static Record& at(const Segment& seg, std::size_t i) { return slot(seg.chunks, i); }
  std::uint32_t segment_index(const KeyHash& key) const;
  Probe find(const KeyHash& key) const;
  std::size_t metadata_bytes() const;
  // Appends `n` zeroed chunks to the segment; on failure it holds the chunks it had.
  bool add_chunks(Segment& seg, std::size_t n);
  // Gives the segment's chunks from index `keep` on back to the pool.
  void drop_chunks(Segment& seg, std::size_t keep);
  // Bytes a growth may still take, keeping one arena chunk of room next to the arena.
  std::size_t room() const;
  // Makes room in segment `index` by compacting it (mostly expired records), growing it in
  // place or splitting it.
  bool grow(std::uint32_t index, std::uint64_t now_ns);
  bool grow_in_place(std::uint32_t index, std::uint64_t now_ns);
  // The segment's records that are not expired at now_ns.
  static std::size_t live_records(const Segment& seg, std::uint64_t now_ns);
  // Drops the segment's expired records and closes the gaps. Returns how many it dropped.
  std::size_t compact(Segment& seg, std::uint64_t now_ns);
  // Whether the segment could split; false leaves the table untouched.
  bool split(std::uint32_t index, std::uint64_t now_ns);
  void drop_in_rehash(Record& record, bool expired);
  // Counts a record dropped as expired, or evicted (and whether it was exhausted).
  void count_drop(std::uint64_t meta, bool expired);
  // Stores `record` (known absent, insertion point `probe`), making room if needed.
  bool insert(const Record& record, Probe probe, std::uint64_t now_ns);
  // Puts `record` (insertion point `pos`) using slot `sink`, which is empty or
  // holds a record already released, by shifting the records between them by one. Counts an
  // insertion in seg.uncounted.
  static void place(Segment& seg, const Record& record, std::size_t pos, std::size_t sink);
  // Removes the record at `pos` (releasing its ring) and closes the gap.
  void erase(Segment& seg, std::size_t pos);
  void release_ring(Record& record);
  // The answer for a key with no state; stores nothing.
  static TableAnswer answer_fresh(const Rule& rule, const Request& request);
  TableAnswer update_existing(const Probe& probe, const Rule& rule, const Request& request);
  // update_existing() for a live record of the rule's algorithm, not a sliding log: the common
  // case, kept free of calls but to the algorithm.
  TableAnswer update_counter(const Probe& probe, const Rule& rule, const Request& request);
  // A fresh record for an absent key (not a peek): insert_counter() or insert_log().
  TableAnswer insert_new(const KeyHash& key, const Probe& probe, const Rule& rule,
                         const Request& request);
  TableAnswer insert_counter(const KeyHash& key, const Probe& probe, const Rule& rule,
                             const Request& request);
  TableAnswer insert_log(const KeyHash& key, const Probe& probe, const Rule& rule,
                         const Request& request);
  // A ring from the arena within the cap, or nullptr (and ring_shortage_ set).
  std::uint64_t* allocate_ring(std::uint32_t ring_class);
  // Frees a ring the arena can hand out for `ring_class` by erasing the best victim among the
  // next kEvictionCandidates sliding-log records with a large enough ring, within the next
  // kReclaimSlots slots: an expired one (the smallest ring first), else the one with the most
  // remaining capacity, then the least recently used.
  // Returns whether it erased one.
  bool reclaim_ring(std::uint32_t ring_class, std::uint64_t now_ns);
  // acquire() for a key not stored live under the rule's algorithm, or a sliding log's, from
  // its probe: acquire_once(), and once more after a reclaim_ring().
  TableAnswer acquire_slow(const KeyHash& key, const Probe& probe, const Rule& rule,
                           const Request& request);
  // acquire() without the retry after a reclaim and without counting failures, from the key's
  // probe.
  TableAnswer acquire_once(const KeyHash& key, const Probe& probe, const Rule& rule,
                           const Request& request);
  // apply_record() for a known algorithm other than 0, likewise.
  ApplyOutcome apply_once(const RecordImage& image, std::span<const std::uint64_t> log,
                          std::uint64_t now_ns);
  // The image of a stored record, but for a sliding log's timestamps.
  static RecordImage image_of(const Record& record);
  // scan() without its template: the callbacks with their objects, so nothing is allocated.
  struct ScanCallbacks {
    void* wanted;
    void* visit;
    bool (*is_wanted)(void* wanted, const KeyHash& key);
    void (*call_visit)(void* visit, const RecordImage& image, std::span<const std::uint64_t> log);
  };
  ScanResult scan_records(std::uint64_t cursor, std::size_t max_records, std::uint64_t now_ns,
                          std::uint64_t changed_since_ns, const ScanCallbacks& callbacks) const;

  std::size_t max_bytes_;
  std::uint32_t sliding_log_cap_;
  LogArena arena_;
  ChunkPool pool_;
  std::vector<Segment> segments_;
  std::vector<DirectoryEntry> directory_;
  std::uint32_t depth_ = 0;
  std::uint32_t max_depth_ = 0;
  std::vector<std::uint8_t> rehash_scratch_;  // each record's new displacement, in a growth
  std::size_t chunk_index_bytes_ = 0;         // the segments' chunk lists, as allocated
  std::size_t peak_bytes_ = 0;
  std::size_t total_slots_ = 0;
  std::size_t size_ = 0;
  std::uint32_t sweep_segment_ = 0;
  std::size_t sweep_cursor_ = 0;
  std::uint32_t reclaim_segment_ = 0;  // where reclaim_ring() looks next
  std::size_t reclaim_cursor_ = 0;
  bool ring_shortage_ = false;  // allocate_ring() failed during this acquire()
  std::uint64_t expired_ = 0;
  std::uint64_t evicted_ = 0;
  std::uint64_t evicted_exhausted_ = 0;
  std::uint64_t failed_inserts_ = 0;
};

}  // namespace sluice::server
