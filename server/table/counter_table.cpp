// Each segment keeps the invariants of one sorted Robin-Hood array (checked by
// TEST_check_invariants):
//  1. Records are sorted by the high 32 bits of fp_lo (the bits slot_for() scales), so homes
//     never decrease along the array: a lookup stops at the first record that sorts after it.
//  2. A record sits within kMaxDisplacement slots after its home.
//  3. No empty slot lies between a record's home and its slot (linear probing).
// Insertions shift a run of records by one slot towards a "sink" (an empty slot, an expired
// record or an evicted one), as long as no shifted record passes the displacement bound; deletions
// shift the run after the hole back (backward-shift deletion), so there are no tombstones.
// A segment grows in place (chunks are appended, then records move right, last first) and
// splits by one more selector bit; neither ever holds two copies of the segment.
#include "server/table/counter_table.h"

#include <algorithm>
#include <cmath>
#include <new>

#include "core/merge.h"

namespace sluice::server {
namespace {

constexpr std::uint64_t kTagMask = 0x7;
constexpr int kClassShift = 3;
constexpr std::uint64_t kClassMask = 0xf;
constexpr std::uint64_t kTopClass = kClassMask;  // the whole capacity remains
constexpr int kStampShift = 7;
constexpr std::uint64_t kStampMask = 0xfff;
constexpr int kStampTimeShift = 28;  // stamp unit: 2^28 ns, ~268 ms; wraps after ~18 min
constexpr int kExpiryShift = 19;     // expiry unit: 2^19 ns, ~0.5 ms
constexpr std::uint64_t kExpiryMask = ~((std::uint64_t{1} << kExpiryShift) - 1);
static_assert(kStampShift + 12 == kExpiryShift, "the stamp's 12 bits end below the expiry");

constexpr std::size_t kNoSlot = ~std::size_t{0};

constexpr std::uint8_t kSlidingLogTag = static_cast<std::uint8_t>(Algorithm::kSlidingLog);

// A sliding-log record's state: a = ring address; b = (ring class + 1) << 56 | head << 28 |
// count. Ring capacities stay below 2^27 (LogArena::kMaxRingEntries), so head and count fit.
constexpr int kLogClassShift = 56;
constexpr int kLogHeadShift = 28;
constexpr std::uint64_t kLogFieldMask = (std::uint64_t{1} << 28) - 1;

std::uint8_t tag_of(std::uint64_t meta) { return static_cast<std::uint8_t>(meta & kTagMask); }
std::uint64_t stamp_of(std::uint64_t now_ns) { return (now_ns >> kStampTimeShift) & kStampMask; }
// The remaining-capacity class of a decision: 15 * remaining / limit, rounded down (0 for a
// limit of 0). Without new requests a key's remaining capacity only grows, under every
// algorithm, so the class stored at a key's last request is a lower bound of its class now.
std::uint64_t capacity_class(const Verdict& decision) {
  if (decision.limit == 0) return 0;
  const std::uint64_t remaining = std::min(decision.remaining, decision.limit);
  return kTopClass * remaining / decision.limit;
}
std::uint64_t class_of(std::uint64_t meta) { return (meta >> kClassShift) & kClassMask; }
// Rounds up so a record never expires before idle_at_ns; keeping it a little longer is
// harmless because from idle_at_ns on its state answers like a fresh one.
std::uint64_t expiry_bits(std::uint64_t idle_at_ns) {
  if (idle_at_ns > kExpiryMask) return kExpiryMask;
  return (idle_at_ns + ~kExpiryMask) & kExpiryMask;
}
// The earliest idle_at_ns that expiry_bits() rounds up to `expiry` (a multiple of 2^19).
std::uint64_t idle_floor(std::uint64_t expiry) { return expiry == 0 ? 0 : expiry - ~kExpiryMask; }
// The meta word after a request that was not a peek and left `decision` behind.
std::uint64_t make_meta(std::uint8_t tag, std::uint64_t now_ns, std::uint64_t idle_at_ns,
                        const Verdict& decision) {
  return expiry_bits(idle_at_ns) | (stamp_of(now_ns) << kStampShift) |
         (capacity_class(decision) << kClassShift) | tag;
}
std::uint64_t with_stamp(std::uint64_t meta, std::uint64_t now_ns) {
  return (meta & ~(kStampMask << kStampShift)) | (stamp_of(now_ns) << kStampShift);
}
bool is_expired(std::uint64_t meta, std::uint64_t now_ns) { return (meta & kExpiryMask) <= now_ns; }
// Whether a stored record counts for `algorithm` now: not expired, and stored under it.
bool live_for(std::uint64_t meta, Algorithm algorithm, std::uint64_t now_ns) {
  return !is_expired(meta, now_ns) && tag_of(meta) == static_cast<std::uint8_t>(algorithm);
}
// How long ago (in stamp units, modulo the stamp range) the record was last used.
std::uint64_t age_of(std::uint64_t meta, std::uint64_t now_ns) {
  return (stamp_of(now_ns) - ((meta >> kStampShift) & kStampMask)) & kStampMask;
}

// Eviction order, by what forgetting the record gives away (the key then starts with its whole
// capacity), as one number per record, the best victim highest: an expired record above every
// live one, since its state already answers as an absent key's would (the expiry is the moment
// the state equals a fresh one: a full bucket, a window over, an empty log); among live ones
// the highest remaining-capacity class, which gives away the smallest share of its limit; the
// least recently used only among equals. Computed once per candidate, compared as integers.
constexpr std::uint64_t kExpiredRank = std::uint64_t{1} << 16;  // above kTopClass << 12 | age
std::uint64_t victim_rank(std::uint64_t meta, std::uint64_t now_ns) {
  const std::uint64_t age = age_of(meta, now_ns);
  return is_expired(meta, now_ns) ? kExpiredRank | age : class_of(meta) << 12 | age;
}
static_assert((kTopClass << 12 | kStampMask) < kExpiredRank);

// Eviction candidates start this many slots before the insertion point: the records there
// share the key's neighbourhood and a victim among them is cheap to shift into.
constexpr std::size_t kLookBehind = 8;

struct LogHandle {
  std::uint64_t* ring;
  std::uint32_t ring_class;
  SlidingLog log;
};

LogHandle decode_log(const CounterState& state) {
  const auto ring_class = static_cast<std::uint32_t>(state.b >> kLogClassShift) - 1;
  auto* ring = reinterpret_cast<std::uint64_t*>(static_cast<std::uintptr_t>(state.a));
  return {ring, ring_class,
          SlidingLog{std::span<std::uint64_t>(ring, LogArena::ring_entries(ring_class)),
                     static_cast<std::uint32_t>((state.b >> kLogHeadShift) & kLogFieldMask),
                     static_cast<std::uint32_t>(state.b & kLogFieldMask)}};
}

CounterState encode_log(const std::uint64_t* ring, std::uint32_t ring_class,
                        const SlidingLog& log) {
  return {reinterpret_cast<std::uintptr_t>(ring),
          (std::uint64_t{ring_class} + 1) << kLogClassShift |
              std::uint64_t{log.head} << kLogHeadShift | log.count};
}

// A ring of `ring_class` holding `entries`, oldest first from its start.
CounterState write_log(std::uint64_t* ring, std::uint32_t ring_class,
                       std::span<const std::uint64_t> entries) {
  std::copy(entries.begin(), entries.end(), ring);
  const auto count = static_cast<std::uint32_t>(entries.size());
  return encode_log(
      ring, ring_class,
      SlidingLog{std::span<std::uint64_t>(ring, LogArena::ring_entries(ring_class)), 0, count});
}

// The first selector value of a segment's keys, and one past the last (2^32 for the last one).
std::uint64_t selector_begin(std::uint32_t prefix, std::uint32_t depth) {
  return std::uint64_t{prefix} << (32 - depth);
}
std::uint64_t selector_end(std::uint32_t prefix, std::uint32_t depth) {
  return selector_begin(prefix, depth) + (std::uint64_t{1} << (32 - depth));
}

// A power of two between 4 KiB and 1 MiB, about 1/16 of the cap.
std::size_t arena_chunk_bytes(std::size_t max_bytes) {
  std::size_t chunk = std::size_t{4} << 10;
  while (chunk < (std::size_t{1} << 20) && chunk * 2 <= max_bytes / 16) chunk *= 2;
  return chunk;
}

// A segment grows when its records reach this share of its home slots; it then moves to the
// next capacity of its ladder, kGrowth times larger. Each segment's ladder is offset by its own
// phase, so segments filled at the same rate grow at different times and the table's memory
// follows the key count smoothly (docs/ARCHITECTURE.md, "Growth").
constexpr double kMaxLoad = 0.92;
constexpr double kGrowth = 1.1;
// A full segment with fewer live records than this share of its maximum is compacted (its
// expired records dropped) instead of grown: short-lived keys must not grow the table.
constexpr double kCompactBelow = 0.5;
constexpr double kRecountShare = 1.0 / 16;
constexpr double kLadderBase = 16;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A fixed pseudo-random number in [0, 1) per segment position (depth, prefix).
double phase_of(std::uint32_t depth, std::uint32_t prefix) {
  return static_cast<double>(splitmix64(std::uint64_t{depth} << 32 | prefix) >> 11) * 0x1p-53;
}

}  // namespace

std::size_t CounterTable::home_of(std::uint32_t homes, std::uint64_t fp_lo) {
  return static_cast<std::size_t>(slot_for(KeyHash{fp_lo, 0}, homes));
}

namespace {

// The slots of a segment with at least `homes` home slots, on the ladder of `phase`: the
// smallest kLadderBase * kGrowth^(j + phase), j an integer, plus `extra_slots`. Callers round
// up to whole chunks.
std::size_t ladder_slots(std::size_t homes, double phase, std::size_t extra_slots) {
  const double steps =
      std::ceil(std::log(static_cast<double>(homes) / kLadderBase) / std::log(kGrowth) - phase);
  const double rung = std::ceil(kLadderBase * std::pow(kGrowth, steps + phase));
  return std::max(homes, static_cast<std::size_t>(rung)) + extra_slots;
}

}  // namespace

CounterTable::CounterTable(const TableConfig& config)
    : max_bytes_(std::max(config.max_bytes, kMinMaxBytes)),
      sliding_log_cap_(std::min(config.sliding_log_cap, LogArena::kMaxRingEntries)),
      arena_(arena_chunk_bytes(max_bytes_)),
      pool_(config.huge_pages && max_bytes_ >= kHugePagesMinBytes) {
  // Enough selector bits for the segments the cap can hold, and a directory of at most
  // 1/128 of the cap (16-byte entries).
  while (max_depth_ < 32 && (std::size_t{8} << max_depth_) <= max_bytes_ / 256) ++max_depth_;
  const std::size_t want = std::max<std::size_t>(config.initial_slots, 16);
  std::uint32_t depth = 0;
  while (depth < max_depth_ && (want >> depth) > kSplitHomes) ++depth;
  std::size_t count = std::size_t{1} << depth;
  std::size_t chunks = 0;
  for (;; --depth, count /= 2) {
    const std::size_t meta = count * (sizeof(DirectoryEntry) + sizeof(Segment));
    const std::size_t homes = (want + count - 1) / count;
    chunks = chunks_for(homes + kMaxDisplacement + 1);
    // Each chunk also takes a pointer in its segment's chunk list.
    const std::size_t per_chunk = ChunkPool::kChunkBytes + sizeof(Record*);
    const std::size_t budget = room() > meta ? room() - meta : 0;
    chunks = std::min(chunks, std::min(pool_.affordable(budget), budget / per_chunk) / count);
    if (chunks * kChunkRecords >= kMaxDisplacement + 1 + 16 || depth == 0) break;
  }
  chunks = std::max(chunks, chunks_for(kMaxDisplacement + 1 + 16));
  depth_ = depth;
  directory_.resize(count);
  segments_.reserve(count);
  for (std::uint32_t i = 0; i < count; ++i) {
    Segment seg;
    if (!add_chunks(seg, chunks)) throw std::bad_alloc();
    seg.homes = static_cast<std::uint32_t>(chunks * kChunkRecords - kMaxDisplacement - 1);
    seg.max_size = static_cast<std::uint32_t>(seg.homes * kMaxLoad);
    seg.prefix = i;
    seg.depth = depth;
    total_slots_ += seg.total_slots();
    segments_.push_back(std::move(seg));
    refresh_directory(i);
  }
  rehash_scratch_.resize(segments_[0].total_slots());
  peak_bytes_ = memory_bytes();
}

CounterTable::~CounterTable() = default;  // the pool unmaps the chunks, the arena the rings

bool CounterTable::add_chunks(Segment& seg, std::size_t n) {
  const std::size_t capacity = seg.chunks.capacity();
  try {
    seg.chunks.reserve(seg.chunks.size() + n);
  } catch (const std::bad_alloc&) {
    return false;
  }
  chunk_index_bytes_ += (seg.chunks.capacity() - capacity) * sizeof(Record*);
  for (std::size_t i = 0; i < n; ++i) {
    auto* chunk = static_cast<Record*>(pool_.take());
    if (chunk == nullptr) {
      drop_chunks(seg, seg.chunks.size() - i);
      return false;
    }
    seg.chunks.push_back(chunk);
  }
  return true;
}

void CounterTable::drop_chunks(Segment& seg, std::size_t keep) {
  while (seg.chunks.size() > keep) {
    pool_.give(seg.chunks.back());
    seg.chunks.pop_back();
  }
}

inline const CounterTable::DirectoryEntry& CounterTable::entry_at(std::uint32_t selector) const {
  return directory_[depth_ == 0 ? 0 : selector >> (32 - depth_)];
}

inline const CounterTable::DirectoryEntry& CounterTable::entry_of(const KeyHash& key) const {
  // The selector is the low 32 bits of `hi`: shard_for() and slot_for() use `lo`, and the
  // cluster ring is to place keys by the high bits of `hi`.
  return entry_at(static_cast<std::uint32_t>(key.hi));
}

std::uint32_t CounterTable::segment_index(const KeyHash& key) const {
  return entry_of(key).segment;
}

void CounterTable::refresh_directory(std::uint32_t index) {
  const Segment& seg = segments_[index];
  const std::size_t span = std::size_t{1} << (depth_ - seg.depth);
  const std::size_t first = std::size_t{seg.prefix} * span;
  for (std::size_t i = first; i < first + span; ++i) {
    directory_[i] = DirectoryEntry{seg.chunks.data(), seg.homes, index};
  }
}

// Inline: it is most of acquire()'s work on a stored key.
inline CounterTable::Probe CounterTable::find(const KeyHash& key) const {
  const DirectoryEntry& entry = entry_of(key);
  const std::uint32_t index = entry.segment;
  const std::uint64_t order = key.lo >> 32;
  const std::size_t home = home_of(entry.homes, key.lo);
  std::size_t chunk = home / kChunkRecords;
  std::size_t offset = home % kChunkRecords;
  const Record* records = entry.chunks[chunk];
  // Terminates within kMaxDisplacement + 1 slots: a record past that window has a later home,
  // hence a larger `order` (invariants 1 and 2).
  for (;;) {
    const Record& r = records[offset];
    if (tag_of(r.meta) == 0 || (r.fp_lo >> 32) > order) {
      return {index, chunk * kChunkRecords + offset, false, nullptr};
    }
    if (r.fp_lo == key.lo && r.fp_hi == key.hi) {
      return {index, chunk * kChunkRecords + offset, true, const_cast<Record*>(&r)};
    }
    if (++offset == kChunkRecords) {
      offset = 0;
      records = entry.chunks[++chunk];
    }
  }
}

void CounterTable::prefetch(const KeyHash& key) const {
  const DirectoryEntry& entry = entry_of(key);
  // Both cache lines a record may straddle.
  const std::size_t home = home_of(entry.homes, key.lo);
  const auto* record =
      reinterpret_cast<const char*>(&entry.chunks[home / kChunkRecords][home % kChunkRecords]);
  __builtin_prefetch(record);
  __builtin_prefetch(record + sizeof(Record) - 1);
}

std::size_t CounterTable::metadata_bytes() const {
  return directory_.capacity() * sizeof(DirectoryEntry) + segments_.capacity() * sizeof(Segment) +
         rehash_scratch_.capacity() + chunk_index_bytes_;
}

std::size_t CounterTable::room() const {
  const std::size_t used = memory_bytes() + arena_.chunk_bytes();
  return max_bytes_ > used ? max_bytes_ - used : 0;
}

bool CounterTable::grow(std::uint32_t index, std::uint64_t now_ns) {
  Segment& seg = segments_[index];
  // Mostly expired records (short-lived keys the sweep has not reached yet): dropping them
  // makes the room, and takes no memory. Only when it drops something, so the caller's retry
  // ends. The count scans the segment, so it waits for kRecountShare of max_size insertions
  // since the last one: at the cap, where every insertion may come here, it is not repeated
  // for each. (The sweep cursor stays: records only move left, and those are live.)
  if (seg.uncounted >= seg.max_size * kRecountShare) {
    seg.uncounted = 0;
    if (live_records(seg, now_ns) < seg.max_size * kCompactBelow && compact(seg, now_ns) > 0) {
      return true;
    }
  }
  if (seg.homes >= kSplitHomes && seg.depth < max_depth_ && split(index, now_ns)) return true;
  return grow_in_place(index, now_ns);
}

std::size_t CounterTable::live_records(const Segment& seg, std::uint64_t now_ns) {
  std::size_t live = 0;
  for (std::size_t i = 0; i < seg.total_slots(); ++i) {
    const std::uint64_t meta = at(seg, i).meta;
    live += tag_of(meta) != 0 && !is_expired(meta, now_ns);
  }
  return live;
}

std::size_t CounterTable::compact(Segment& seg, std::uint64_t now_ns) {
  // Homes do not change, so each kept record moves left (past dropped ones) or stays: one pass
  // in slot order, each record to the first free slot at or after its home.
  std::size_t next = 0;
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < seg.total_slots(); ++i) {
    Record& r = at(seg, i);
    if (tag_of(r.meta) == 0) continue;
    if (is_expired(r.meta, now_ns)) {
      drop_in_rehash(r, true);
      ++dropped;
      continue;
    }
    const std::size_t pos = std::max(home_of(seg, r.fp_lo), next);
    if (pos != i) {
      at(seg, pos) = r;
      r = Record{};
    }
    next = pos + 1;
  }
  seg.size -= static_cast<std::uint32_t>(dropped);
  return dropped;
}

void CounterTable::count_drop(std::uint64_t meta, bool expired) {
  if (expired) {
    ++expired_;
    return;
  }
  ++evicted_;
  if (class_of(meta) == 0) ++evicted_exhausted_;
}

void CounterTable::drop_in_rehash(Record& record, bool expired) {
  release_ring(record);
  count_drop(record.meta, expired);
  record = Record{};
  --size_;
}

bool CounterTable::grow_in_place(std::uint32_t index, std::uint64_t now_ns) {
  Segment& seg = segments_[index];
  // The next rung of the ladder at least half a step up (chunk rounding can leave a rung close).
  const std::size_t want =
      chunks_for(ladder_slots(static_cast<std::size_t>(seg.homes * (1 + (kGrowth - 1) / 2)) + 1,
                              phase_of(seg.depth, seg.prefix), kMaxDisplacement + 1));
  const std::size_t old_slots = seg.total_slots();
  const std::size_t scratch =
      rehash_scratch_.capacity() < old_slots ? old_slots - rehash_scratch_.capacity() : 0;
  if (scratch > room()) return false;
  // Near the cap, the largest step that still fits. Each new chunk also takes a pointer in the
  // segment's chunk list.
  const std::size_t budget = room() - scratch;
  std::size_t add = want > seg.chunks.size() ? want - seg.chunks.size() : 0;
  const std::size_t list_bytes = add * sizeof(Record*);
  add = std::min(add, pool_.affordable(budget > list_bytes ? budget - list_bytes : 0));
  if (add == 0) return false;
  const std::size_t homes = (seg.chunks.size() + add) * kChunkRecords - kMaxDisplacement - 1;
  if (homes > (std::size_t{1} << 32) - 1) return false;  // slot_for() scales 32 bits
  if (rehash_scratch_.size() < old_slots) rehash_scratch_.resize(old_slots);
  if (!add_chunks(seg, add)) {
    refresh_directory(index);  // the chunk list may have moved
    return false;
  }
  peak_bytes_ = std::max(peak_bytes_, memory_bytes());
  const auto grown_homes = static_cast<std::uint32_t>(homes);
  const auto record = [&seg](std::size_t i) -> Record& { return at(seg, i); };
  const std::uint32_t old_size = seg.size;
  // The first pass computes each kept record's new displacement, dropping expired records
  // (and any record the bound would not allow). New homes are never before old ones, so a
  // record moves left only past dropped ones. Left moves are made first to last, then right
  // moves last to first: either way a move never lands on a record still to be moved.
  std::size_t next = 0;
  std::uint32_t kept = 0;
  for (std::size_t i = 0; i < old_slots; ++i) {
    Record& r = record(i);
    if (tag_of(r.meta) == 0) continue;
    if (is_expired(r.meta, now_ns)) {
      drop_in_rehash(r, true);
      continue;
    }
    const std::size_t home = home_of(grown_homes, r.fp_lo);
    const std::size_t pos = std::max(home, next);
    if (pos - home > kMaxDisplacement) {
      drop_in_rehash(r, false);  // not expected at these loads; handled anyway
      continue;
    }
    rehash_scratch_[i] = static_cast<std::uint8_t>(pos - home);
    next = pos + 1;
    ++kept;
  }
  for (std::size_t i = 0; i < old_slots && kept < old_size; ++i) {
    if (tag_of(record(i).meta) == 0) continue;
    const std::size_t pos = home_of(grown_homes, record(i).fp_lo) + rehash_scratch_[i];
    if (pos >= i) continue;
    record(pos) = record(i);
    record(i) = Record{};
    rehash_scratch_[pos] = rehash_scratch_[i];  // the slot's record changed
  }
  for (std::size_t i = old_slots; i-- > 0;) {
    if (tag_of(record(i).meta) == 0) continue;
    const std::size_t pos = home_of(grown_homes, record(i).fp_lo) + rehash_scratch_[i];
    if (pos <= i) continue;
    record(pos) = record(i);
    record(i) = Record{};
  }
  total_slots_ += homes - seg.homes;
  seg.homes = static_cast<std::uint32_t>(homes);
  seg.max_size = static_cast<std::uint32_t>(homes * kMaxLoad);
  seg.size = kept;
  refresh_directory(index);
  if (sweep_segment_ == index) sweep_cursor_ = 0;
  return true;
}

bool CounterTable::split(std::uint32_t index, std::uint64_t now_ns) {
  const std::uint32_t depth = segments_[index].depth;
  const std::uint32_t bit = 31 - depth;  // the selector bit that tells the halves apart
  std::size_t keys[2] = {0, 0};
  {
    const Segment& seg = segments_[index];
    for (std::size_t i = 0; i < seg.total_slots(); ++i) {
      const Record& r = at(seg, i);
      if (tag_of(r.meta) != 0 && !is_expired(r.meta, now_ns)) ++keys[(r.fp_hi >> bit) & 1];
    }
  }
  std::size_t chunks[2];
  std::uint32_t homes[2];
  for (std::uint32_t half = 0; half < 2; ++half) {
    // Capacity for the half's keys at no more than the maximum load.
    chunks[half] = chunks_for(ladder_slots(
        static_cast<std::size_t>((keys[half] + 1) / kMaxLoad) + 1,
        phase_of(depth + 1, segments_[index].prefix << 1 | half), kMaxDisplacement + 1));
    homes[half] = static_cast<std::uint32_t>(chunks[half] * kChunkRecords - kMaxDisplacement - 1);
  }
  // Half 0 is compacted in place, so it must not need more slots (keys crafted to share
  // selector bits); the segment then grows in place instead.
  if (chunks[0] > segments_[index].chunks.size()) return false;
  const bool deeper = depth == depth_;
  std::size_t extra = pool_.cost(chunks[1]) + chunks[1] * sizeof(Record*);
  if (deeper) extra += directory_.size() * 2 * sizeof(DirectoryEntry);
  if (segments_.size() == segments_.capacity()) extra += segments_.size() * sizeof(Segment);
  if (extra > room()) return false;

  std::vector<DirectoryEntry> directory;
  try {
    if (deeper) directory.resize(directory_.size() * 2);
    if (segments_.size() == segments_.capacity()) segments_.reserve(2 * segments_.size());
  } catch (const std::bad_alloc&) {
    return false;
  }
  Segment upper;
  if (!add_chunks(upper, chunks[1])) {
    chunk_index_bytes_ -= upper.chunks.capacity() * sizeof(Record*);
    return false;
  }
  // Until the old segment gives back its spare chunks, both it and the upper half are held.
  peak_bytes_ =
      std::max(peak_bytes_, memory_bytes() + directory.capacity() * sizeof(DirectoryEntry));

  Segment& seg = segments_[index];
  upper.homes = homes[1];
  upper.max_size = static_cast<std::uint32_t>(homes[1] * kMaxLoad);
  upper.prefix = seg.prefix << 1 | 1;
  upper.depth = depth + 1;
  std::uint32_t sizes[2] = {0, 0};
  // One pass in slot order: each half receives its records in order, so each is laid out as a
  // merge. Half 0's new slots are never after the old ones, so it is compacted in place.
  std::size_t next[2] = {0, 0};
  const std::size_t old_slots = seg.total_slots();
  for (std::size_t i = 0; i < old_slots; ++i) {
    Record& from = at(seg, i);
    if (tag_of(from.meta) == 0) continue;
    Record r = from;
    from = Record{};
    if (is_expired(r.meta, now_ns)) {
      drop_in_rehash(r, true);
      continue;
    }
    const std::uint32_t half = (r.fp_hi >> bit) & 1;
    const std::size_t home = home_of(homes[half], r.fp_lo);
    const std::size_t pos = std::max(home, next[half]);
    if (pos - home > kMaxDisplacement) {
      drop_in_rehash(r, false);  // not expected at these loads; handled anyway
      continue;
    }
    slot(half == 0 ? seg.chunks : upper.chunks, pos) = r;
    next[half] = pos + 1;
    ++sizes[half];
  }
  // Half 0 needs only its first chunks[0] chunks; the rest go back to the pool.
  drop_chunks(seg, chunks[0]);
  total_slots_ += std::size_t{homes[0]} + homes[1] + kMaxDisplacement + 1 - seg.homes;
  seg.homes = homes[0];
  seg.size = sizes[0];
  seg.max_size = static_cast<std::uint32_t>(homes[0] * kMaxLoad);
  seg.prefix <<= 1;
  seg.depth = depth + 1;
  upper.size = sizes[1];
  const auto upper_index = static_cast<std::uint32_t>(segments_.size());
  segments_.push_back(std::move(upper));  // capacity reserved above: no reallocation
  if (deeper) {
    for (std::size_t i = 0; i < directory_.size(); ++i) {
      directory[2 * i] = directory[2 * i + 1] = directory_[i];
    }
    directory_.swap(directory);
    ++depth_;
  }
  // The old segment's entries: the upper half of them now name the new segment.
  refresh_directory(index);
  refresh_directory(upper_index);
  if (sweep_segment_ == index) sweep_cursor_ = 0;
  return true;
}

void CounterTable::release_ring(Record& record) {
  if (tag_of(record.meta) != kSlidingLogTag || record.state == CounterState{}) return;
  const LogHandle handle = decode_log(record.state);
  arena_.release(handle.ring, handle.ring_class);
  record.state = {};
}

std::uint64_t* CounterTable::allocate_ring(std::uint32_t ring_class) {
  const std::size_t used = memory_bytes();
  std::uint64_t* ring = arena_.allocate(ring_class, max_bytes_ > used ? max_bytes_ - used : 0);
  ring_shortage_ = ring_shortage_ || ring == nullptr;
  return ring;
}

bool CounterTable::reclaim_ring(std::uint32_t ring_class, std::uint64_t now_ns) {
  // Candidates: sliding-log records holding a ring the arena can hand out for the class (the
  // same class, or a larger one it splits). Slots are in hash order, so the window is an
  // unbiased sample of the keys, as for the eviction in insert(). The key being served is never
  // among them: its failed try erased its record, or the record holds a smaller ring.
  // The best: expired before live (a live log's count is lost with it). Among expired logs the
  // smallest ring (rings never merge, so a larger ring split for a small key is gone for good);
  // among live ones, as in victim_rank(), the highest remaining-capacity class, then the
  // least recently used, then the smallest ring. The scan stops at kEvictionCandidates
  // candidates, as insert()'s eviction does, or at an expired ring of the exact class, which is
  // as good as it gets.
  struct Candidate {
    std::uint32_t segment = 0;
    std::size_t pos = kNoSlot;
    std::uint64_t meta = 0;
    std::uint32_t ring_class = 0;
    std::uint64_t rank = 0;
  };
  // That order as one number per candidate, the best highest: expired, 1 << 24 | the smaller
  // ring << 12 | age; live, class << 20 | age << 8 | the smaller ring.
  static_assert(LogArena::kClasses <= 0xff && (kTopClass << 20 | kStampMask << 8 | 0xff) < 1 << 24);
  const auto rank_of = [now_ns](std::uint64_t meta, std::uint32_t ring) -> std::uint64_t {
    const std::uint64_t age = age_of(meta, now_ns);
    const std::uint64_t smaller = 0xff - ring;
    return is_expired(meta, now_ns) ? std::uint64_t{1} << 24 | smaller << 12 | age
                                    : class_of(meta) << 20 | age << 8 | smaller;
  };
  Candidate best;
  std::size_t seen = 0;
  const std::size_t budget = std::min(kReclaimSlots, total_slots_);
  for (std::size_t n = 0; n < budget; ++n, ++reclaim_cursor_) {
    if (reclaim_segment_ >= segments_.size()) reclaim_segment_ = 0;
    if (reclaim_cursor_ >= segments_[reclaim_segment_].total_slots()) {
      reclaim_cursor_ = 0;
      reclaim_segment_ = reclaim_segment_ + 1 < segments_.size() ? reclaim_segment_ + 1 : 0;
    }
    const Record& r = at(segments_[reclaim_segment_], reclaim_cursor_);
    if (tag_of(r.meta) != kSlidingLogTag || r.state == CounterState{}) continue;
    const std::uint32_t ring = decode_log(r.state).ring_class;
    if (ring < ring_class) continue;
    const Candidate c{reclaim_segment_, reclaim_cursor_, r.meta, ring, rank_of(r.meta, ring)};
    if (best.pos == kNoSlot || c.rank > best.rank) best = c;
    if (++seen == kEvictionCandidates ||
        (c.ring_class == ring_class && is_expired(c.meta, now_ns))) {
      ++reclaim_cursor_;
      break;
    }
  }
  if (best.pos == kNoSlot) return false;
  count_drop(best.meta, is_expired(best.meta, now_ns));
  erase(segments_[best.segment], best.pos);
  return true;
}

void CounterTable::place(Segment& seg, const Record& record, std::size_t pos, std::size_t sink) {
  ++seg.uncounted;
  if (sink >= pos) {
    for (std::size_t i = sink; i > pos; --i) at(seg, i) = at(seg, i - 1);
    at(seg, pos) = record;
  } else {
    for (std::size_t i = sink; i + 1 < pos; ++i) at(seg, i) = at(seg, i + 1);
    at(seg, pos - 1) = record;
  }
}

void CounterTable::erase(Segment& seg, std::size_t pos) {
  release_ring(at(seg, pos));
  std::size_t end = pos + 1;
  while (end < seg.total_slots() && tag_of(at(seg, end).meta) != 0 &&
         home_of(seg, at(seg, end).fp_lo) < end) {
    ++end;
  }
  for (std::size_t i = pos; i + 1 < end; ++i) at(seg, i) = at(seg, i + 1);
  at(seg, end - 1) = Record{};
  --seg.size;
  --size_;
}

bool CounterTable::insert(const Record& record, Probe probe, std::uint64_t now_ns) {
  const KeyHash key{record.fp_lo, record.fp_hi};
  for (;;) {
    Segment& seg = segments_[probe.segment];
    const std::size_t pos = probe.pos;
    const std::size_t home = home_of(seg, record.fp_lo);
    const std::size_t total = seg.total_slots();
    const auto s = [&seg](std::size_t i) -> Record& { return at(seg, i); };
    // The run [pos, sink) can shift right only if no record in it is at the displacement bound.
    const bool right_ok = pos - home <= kMaxDisplacement;
    // Records from pos on sort after the key, so their homes are not before its home: none can
    // be at the bound before home + kMaxDisplacement (this skips most home computations).
    const auto at_bound = [&](std::size_t i) {
      return i >= home + kMaxDisplacement && i - home_of(seg, s(i).fp_lo) >= kMaxDisplacement;
    };
    if (seg.size < seg.max_size) {
      // Nearest sink after pos: the first empty or expired slot. The scan ends at an empty
      // slot at the latest (the last slot of a segment is always empty).
      std::size_t sink = kNoSlot;
      for (std::size_t i = pos; right_ok; ++i) {
        if (tag_of(s(i).meta) == 0 || is_expired(s(i).meta, now_ns)) {
          sink = i;
          break;
        }
        if (at_bound(i)) break;
      }
      // Else an expired record in [home, pos), whose records all sort before this one.
      for (std::size_t i = pos; sink == kNoSlot && i > home; --i) {
        if (is_expired(s(i - 1).meta, now_ns)) sink = i - 1;
      }
      if (sink != kNoSlot) {
        if (tag_of(s(sink).meta) != 0) {
          release_ring(s(sink));
          ++expired_;
        } else {
          ++seg.size;
          ++size_;
        }
        place(seg, record, pos, sink);
        return true;
      }
    }
    // Grow when full; on a crowded run only past half load, so keys crafted to share a home
    // slot cannot grow the segment up to the cap (they evict each other instead).
    if (seg.size >= seg.max_size / 2 && grow(probe.segment, now_ns)) {
      probe = find(key);
      continue;
    }
    if (seg.size >= seg.max_size) {
      // Full at the cap: drop the best victim (see victim_rank) among kEvictionCandidates
      // records from just before the insertion point on. A victim the run can shift into
      // takes the key directly; any other is erased first.
      std::size_t victim = kNoSlot;
      std::uint64_t best_rank = 0;
      bool victim_reachable = false;
      bool run_open = right_ok;  // whether slots from pos up to i can take a right shift
      std::size_t seen = 0;
      const std::size_t first = std::max(home, pos >= kLookBehind ? pos - kLookBehind : 0);
      // Wraps to the front of the segment: the victim need not be near the key.
      for (std::size_t n = 0, i = first; n < total && seen < kEvictionCandidates; ++n) {
        const bool occupied = tag_of(s(i).meta) != 0;
        if (occupied) {
          ++seen;
          const std::uint64_t rank = victim_rank(s(i).meta, now_ns);
          if (victim == kNoSlot || rank > best_rank) {
            victim = i;
            best_rank = rank;
            victim_reachable = i >= home && (i < pos || run_open);
          }
        }
        if (i >= pos && (!occupied || at_bound(i))) run_open = false;
        i = i + 1 == total ? 0 : i + 1;
      }
      if (victim == kNoSlot) return false;  // an empty segment cannot be full
      count_drop(s(victim).meta, is_expired(s(victim).meta, now_ns));
      if (victim_reachable) {
        release_ring(s(victim));
        place(seg, record, pos, victim);
        return true;
      }
      erase(seg, victim);
      probe = find(key);
      continue;
    }
    // No sink within reach of the displacement bound: the victim must be a record the run can
    // shift into, in [home, pos) or after pos up to the first record at the bound.
    std::size_t victim = kNoSlot;
    std::uint64_t best_rank = 0;
    const std::size_t first = std::max(home, pos >= kLookBehind ? pos - kLookBehind : 0);
    for (std::size_t i = first; i < first + kEvictionCandidates; ++i) {
      if (i >= pos && !right_ok) break;
      if (tag_of(s(i).meta) == 0) break;  // not reached: the sink scan would have taken it
      const std::uint64_t rank = victim_rank(s(i).meta, now_ns);
      if (victim == kNoSlot || rank > best_rank) {
        victim = i;
        best_rank = rank;
      }
      if (i >= pos && at_bound(i)) break;
    }
    if (victim == kNoSlot) return false;
    count_drop(s(victim).meta, is_expired(s(victim).meta, now_ns));
    release_ring(s(victim));
    place(seg, record, pos, victim);
    return true;
  }
}

TableAnswer CounterTable::answer_fresh(const Rule& rule, const Request& request) {
  if (rule.algorithm != Algorithm::kSlidingLog) {
    CounterState state;
    return {TableOutcome::kOk, decide(rule, state, request)};
  }
  return {TableOutcome::kOk, sliding_log_answer(rule, SlidingLog{}, request)};  // no ring needed
}

// The decision is made in the answer, and the answer in the caller's (one named result, all
// the way up from the algorithm): a Verdict copied right after its fields were stored one by one
// is read back before those stores reach the cache, which costs a stall per copy
// (docs/BENCHMARKS.md, "W3 against its ping floor").
inline TableAnswer CounterTable::update_counter(const Probe& probe, const Rule& rule,
                                                const Request& request) {
  Record& r = *probe.record;
  const std::uint64_t now = request.now_ns;
  TableAnswer answer{TableOutcome::kOk, decide(rule, r.state, request)};
  if (request.peek) {
    r.meta = with_stamp(r.meta, now);
    return answer;
  }
  const std::uint64_t idle_at = idle_at_after(rule, r.state, answer.decision, now);
  if (r.state == CounterState{} || idle_at <= now) {
    erase(segments_[probe.segment], probe.pos);
    return answer;
  }
  r.meta = make_meta(tag_of(r.meta), now, idle_at, answer.decision);
  return answer;
}

TableAnswer CounterTable::update_existing(const Probe& probe, const Rule& rule,
                                          const Request& request) {
  if (rule.algorithm != Algorithm::kSlidingLog) return update_counter(probe, rule, request);
  Segment& seg = segments_[probe.segment];
  Record& r = *probe.record;
  const std::uint64_t now = request.now_ns;

  const std::uint32_t need = LogArena::class_for(rule.limit);
  LogHandle handle{};
  if (r.state == CounterState{}) {
    std::uint64_t* ring = allocate_ring(need);
    if (ring == nullptr) {
      erase(seg, probe.pos);
      return {TableOutcome::kNoMemory, {}};
    }
    handle = {ring, need,
              SlidingLog{std::span<std::uint64_t>(ring, LogArena::ring_entries(need)), 0, 0}};
  } else {
    handle = decode_log(r.state);
    if (handle.ring_class < need) {
      if (request.peek) {
        // A peek writes nothing, so it needs no bigger ring to answer for the larger limit.
        r.meta = with_stamp(r.meta, now);
        return {TableOutcome::kOk, sliding_log_answer(rule, handle.log, request)};
      }
      // The limit grew past the ring: move the live entries, oldest first, to a bigger one.
      std::uint64_t* ring = allocate_ring(need);
      if (ring == nullptr) return {TableOutcome::kNoMemory, {}};
      const std::span<std::uint64_t> old = handle.log.ring;
      for (std::uint32_t i = 0; i < handle.log.count; ++i) {
        ring[i] = old[(handle.log.head + i) % old.size()];
      }
      arena_.release(handle.ring, handle.ring_class);
      handle = {ring, need,
                SlidingLog{std::span<std::uint64_t>(ring, LogArena::ring_entries(need)), 0,
                           handle.log.count}};
    }
  }
  r.state = encode_log(handle.ring, handle.ring_class, handle.log);
  const Verdict decision = sliding_log(rule, handle.log, request);
  if (request.peek && handle.log.count != 0) {
    r.meta = with_stamp(r.meta, now);
    return {TableOutcome::kOk, decision};
  }
  const std::uint64_t idle_at = sliding_log_idle_at_ns(rule, handle.log);
  if (handle.log.count == 0 || idle_at <= now) {
    erase(seg, probe.pos);
    return {TableOutcome::kOk, decision};
  }
  r.state = encode_log(handle.ring, handle.ring_class, handle.log);
  r.meta = make_meta(kSlidingLogTag, now, idle_at, decision);
  return {TableOutcome::kOk, decision};
}

TableAnswer CounterTable::insert_new(const KeyHash& key, const Probe& probe, const Rule& rule,
                                     const Request& request) {
  if (rule.algorithm == Algorithm::kSlidingLog) return insert_log(key, probe, rule, request);
  return insert_counter(key, probe, rule, request);
}

TableAnswer CounterTable::insert_counter(const KeyHash& key, const Probe& probe, const Rule& rule,
                                         const Request& request) {
  const std::uint64_t now = request.now_ns;
  Record record{key.lo, key.hi, CounterState{}, 0};
  // Not a peek (acquire_once). The decision is made in the answer: see update_counter.
  TableAnswer answer{TableOutcome::kOk, decide(rule, record.state, request)};
  const std::uint64_t idle_at = idle_at_after(rule, record.state, answer.decision, now);
  if (record.state == CounterState{} || idle_at <= now) return answer;
  record.meta = make_meta(static_cast<std::uint8_t>(rule.algorithm), now, idle_at, answer.decision);
  if (!insert(record, probe, now)) answer = {TableOutcome::kNoMemory, {}};
  return answer;
}

TableAnswer CounterTable::insert_log(const KeyHash& key, const Probe& probe, const Rule& rule,
                                     const Request& request) {
  const std::uint64_t now = request.now_ns;
  const std::uint32_t ring_class = LogArena::class_for(rule.limit);
  std::uint64_t* ring = allocate_ring(ring_class);
  if (ring == nullptr) return {TableOutcome::kNoMemory, {}};
  SlidingLog log{std::span<std::uint64_t>(ring, LogArena::ring_entries(ring_class)), 0, 0};
  const Verdict decision = sliding_log(rule, log, request);
  const std::uint64_t idle_at = sliding_log_idle_at_ns(rule, log);
  if (log.count == 0 || idle_at <= now) {
    arena_.release(ring, ring_class);
    return {TableOutcome::kOk, decision};
  }
  Record record{key.lo, key.hi, encode_log(ring, ring_class, log),
                make_meta(kSlidingLogTag, now, idle_at, decision)};
  if (!insert(record, probe, now)) {
    release_ring(record);
    return {TableOutcome::kNoMemory, {}};
  }
  return {TableOutcome::kOk, decision};
}

TableAnswer CounterTable::acquire(const KeyHash& key, const Rule& rule, const Request& request) {
  if (rule.algorithm == Algorithm::kSlidingLog && rule.limit > sliding_log_cap_) {
    ++failed_inserts_;  // validate() rejects this first; refuse rather than size a ring for it
    return {TableOutcome::kNoMemory, {}};
  }
  const Probe probe = find(key);
  if (probe.found && rule.algorithm != Algorithm::kSlidingLog &&
      live_for(probe.record->meta, rule.algorithm, request.now_ns)) {
    return update_counter(probe, rule, request);  // live, of the rule's algorithm
  }
  return acquire_slow(key, probe, rule, request);
}

TableAnswer CounterTable::acquire_slow(const KeyHash& key, const Probe& probe, const Rule& rule,
                                       const Request& request) {
  ring_shortage_ = false;
  TableAnswer answer = acquire_once(key, probe, rule, request);
  // No ring under the cap: free one from another sliding-log key (reclaim_ring) and try again.
  // A failed try leaves nothing half done: the key is looked up afresh. (A peek never asks for
  // a ring, so it never takes one from another key.)
  if (answer.outcome == TableOutcome::kNoMemory && ring_shortage_ &&
      reclaim_ring(LogArena::class_for(rule.limit), request.now_ns)) {
    answer = acquire_once(key, find(key), rule, request);
  }
  if (answer.outcome == TableOutcome::kNoMemory) ++failed_inserts_;
  return answer;
}

TableAnswer CounterTable::acquire_once(const KeyHash& key, const Probe& probe, const Rule& rule,
                                       const Request& request) {
  if (!probe.found) {
    return request.peek ? answer_fresh(rule, request) : insert_new(key, probe, rule, request);
  }
  Segment& seg = segments_[probe.segment];
  Record& r = at(seg, probe.pos);
  const auto tag = static_cast<std::uint8_t>(rule.algorithm);
  const bool expired = is_expired(r.meta, request.now_ns);
  if (expired || tag_of(r.meta) != tag) {
    // Expired, or stored under another algorithm: the key starts fresh in its slot. A peek
    // leaves a record of another algorithm alone.
    if (request.peek) {
      if (expired) {
        erase(seg, probe.pos);
        ++expired_;
      }
      return answer_fresh(rule, request);
    }
    if (expired) ++expired_;
    release_ring(r);
    r.state = {};
    r.meta = tag;
  }
  return update_existing(probe, rule, request);
}

std::uint32_t CounterTable::give_back(const KeyHash& key, const Rule& rule, std::uint32_t units,
                                      std::uint32_t stamp, std::uint64_t now_ns) {
  if (rule.algorithm == Algorithm::kSlidingLog) return 0;  // never taken back (algorithms.h)
  const Probe probe = find(key);
  if (!probe.found) return 0;
  Segment& seg = segments_[probe.segment];
  Record& r = at(seg, probe.pos);
  if (!live_for(r.meta, rule.algorithm, now_ns)) return 0;
  const std::uint32_t credited = sluice::give_back(rule, r.state, units, stamp, now_ns);
  if (credited == 0) return 0;
  const std::uint64_t idle_at = idle_at_ns(rule, r.state);
  if (r.state == CounterState{} || idle_at <= now_ns) {
    erase(seg, probe.pos);  // as fresh as an absent key
    return credited;
  }
  CounterState copy = r.state;
  const Verdict now = decide(rule, copy, Request{now_ns, 1, /*peek=*/true});
  r.meta = make_meta(tag_of(r.meta), now_ns, idle_at, now);
  return credited;
}

bool CounterTable::reset(const KeyHash& key, std::uint64_t now_ns) {
  const Probe probe = find(key);
  if (!probe.found) return false;
  Segment& seg = segments_[probe.segment];
  const bool live = !is_expired(at(seg, probe.pos).meta, now_ns);
  if (!live) ++expired_;
  erase(seg, probe.pos);
  return live;
}

bool CounterTable::contains(const KeyHash& key, std::uint64_t now_ns) const {
  const Probe probe = find(key);
  return probe.found && !is_expired(at(segments_[probe.segment], probe.pos).meta, now_ns);
}

RecordImage CounterTable::image_of(const Record& record) {
  RecordImage image;
  image.key = KeyHash{record.fp_lo, record.fp_hi};
  image.algorithm = tag_of(record.meta);
  image.capacity_class = static_cast<std::uint8_t>(class_of(record.meta));
  if (image.algorithm != kSlidingLogTag) image.state = record.state;
  image.idle_at_ns = record.meta & kExpiryMask;
  return image;
}

bool CounterTable::export_record(const KeyHash& key, std::uint64_t now_ns, RecordImage& out,
                                 std::vector<std::uint64_t>& log) const {
  log.clear();
  const Probe probe = find(key);
  if (!probe.found) return false;
  const Record& r = at(segments_[probe.segment], probe.pos);
  if (is_expired(r.meta, now_ns)) return false;
  out = image_of(r);
  if (tag_of(r.meta) == kSlidingLogTag) {
    const SlidingLog entries = decode_log(r.state).log;
    const std::size_t size = entries.ring.size();
    const std::size_t first = std::min<std::size_t>(entries.count, size - entries.head);
    log.insert(log.end(), entries.ring.begin() + entries.head,
               entries.ring.begin() + entries.head + first);
    log.insert(log.end(), entries.ring.begin(), entries.ring.begin() + (entries.count - first));
  }
  return true;
}

ApplyOutcome CounterTable::apply_record(const RecordImage& image,
                                        std::span<const std::uint64_t> log, std::uint64_t now_ns) {
  if (image.algorithm == 0) {
    reset(image.key, now_ns);
    return ApplyOutcome::kErased;
  }
  if (!is_known_algorithm(image.algorithm)) return ApplyOutcome::kRefused;
  const bool is_log = image.algorithm == kSlidingLogTag;
  if (is_log && log.size() > sliding_log_cap_) {
    ++failed_inserts_;
    return ApplyOutcome::kNoMemory;
  }
  ring_shortage_ = false;
  ApplyOutcome outcome = apply_once(image, log, now_ns);
  // As in acquire(): no ring under the cap, so free one from another log and try once more.
  if (outcome == ApplyOutcome::kNoMemory && ring_shortage_ &&
      reclaim_ring(LogArena::class_for(static_cast<std::uint32_t>(log.size())), now_ns)) {
    outcome = apply_once(image, log, now_ns);
  }
  if (outcome == ApplyOutcome::kNoMemory) ++failed_inserts_;
  return outcome;
}

ApplyOutcome CounterTable::apply_once(const RecordImage& image, std::span<const std::uint64_t> log,
                                      std::uint64_t now_ns) {
  const bool is_log = image.algorithm == kSlidingLogTag;
  const std::uint64_t expiry = expiry_bits(image.idle_at_ns);
  // A fresh state, or one that has expired, answers as an absent key does: it is not stored.
  const bool image_absent =
      (is_log ? log.empty() : image.state == CounterState{}) || expiry <= now_ns;
  const std::uint64_t meta =
      expiry | stamp_of(now_ns) << kStampShift |
      std::min<std::uint64_t>(image.capacity_class, kTopClass) << kClassShift | image.algorithm;
  const std::uint32_t ring_class =
      is_log ? LogArena::class_for(static_cast<std::uint32_t>(log.size())) : 0;

  const Probe probe = find(image.key);
  if (!probe.found) {
    if (image_absent) return ApplyOutcome::kKept;
    Record record{image.key.lo, image.key.hi, image.state, meta};
    if (is_log) {
      std::uint64_t* ring = allocate_ring(ring_class);
      if (ring == nullptr) return ApplyOutcome::kNoMemory;
      record.state = write_log(ring, ring_class, log);
    }
    if (!insert(record, probe, now_ns)) {
      release_ring(record);
      return ApplyOutcome::kNoMemory;
    }
    return ApplyOutcome::kApplied;
  }

  Segment& seg = segments_[probe.segment];
  Record& r = at(seg, probe.pos);
  const bool live = !is_expired(r.meta, now_ns);
  if (live && tag_of(r.meta) == image.algorithm) {
    // Of two copies, the more consumed one at a common time (core/merge.h). Both expiries are
    // rounded up alike; a log's period is read from its expiry less that rounding.
    const std::uint64_t ours_expiry = r.meta & kExpiryMask;
    const bool image_later =
        is_log ? prefer_log(LogCopy{log, idle_floor(expiry)}, decode_log(r.state).log,
                            idle_floor(ours_expiry), now_ns)
               : prefer_state(static_cast<Algorithm>(image.algorithm),
                              StateCopy{image.state, expiry}, StateCopy{r.state, ours_expiry});
    if (!image_later) return ApplyOutcome::kKept;
  }
  // The image wins: it is later than ours, of another algorithm, or ours has expired.
  if (image_absent) {
    if (!live) ++expired_;
    erase(seg, probe.pos);
    return live ? ApplyOutcome::kApplied : ApplyOutcome::kKept;
  }
  CounterState state = image.state;
  if (is_log) {
    // Our ring if it is a log's and large enough (a smaller limit keeps its ring, as in
    // acquire()), else a new one; on failure ours stays as it was.
    const bool has_ring = tag_of(r.meta) == kSlidingLogTag && !(r.state == CounterState{});
    const LogHandle ours = has_ring ? decode_log(r.state) : LogHandle{};
    if (has_ring && ours.ring_class >= ring_class) {
      state = write_log(ours.ring, ours.ring_class, log);
    } else {
      std::uint64_t* ring = allocate_ring(ring_class);
      if (ring == nullptr) return ApplyOutcome::kNoMemory;
      release_ring(r);
      state = write_log(ring, ring_class, log);
    }
  } else {
    release_ring(r);
  }
  if (!live) ++expired_;
  r.state = state;
  r.meta = meta;
  return ApplyOutcome::kApplied;
}

// The scan's order: segments by their selector range, and in a segment by the high 32 bits of
// fp_lo (its "position", the order of invariant 1). A cursor (S, P) says: "S is the first
// selector value of the segment the page ended in, P the position of the first record it did
// not visit there". Why a record live throughout is never skipped, whatever happens between
// calls:
//  - Segments only ever split, never merge: split() turns [S, E) into [S, M), which keeps the
//    segment's index and compacts in place, and [M, E), a new one; nothing lowers a depth. A
//    split range's pieces are aligned to their size, so the segment holding S later still
//    starts at S, and is a piece of the one the cursor was issued in.
//  - Within a segment, every change keeps the records sorted by position: insert() and
//    erase() shift runs; compact() keeps the homes and moves records left; grow_in_place()
//    re-lays them in order with new homes; split() lays out each half as a merge. So "the
//    records at or after P" is the same set of keys, less those erased, plus those inserted.
//  - Hence, by induction over the pages: after a page ending at (S, P), every record live
//    throughout with a selector below S, or in the segment starting at S with a position
//    below P, has been visited. The next page scans the segment now starting at S (a part of
//    the old one, [S, M)) from P, then every later segment from position 0, which includes
//    [M, E) again in full: records of it before P come twice, none is missed.
//  - A page ends only between two different positions, so P never cuts a group of records of
//    one position in two (the cursor could not tell them apart).
// Only what the table holds at the call is visited, so a record evicted or expired meanwhile
// (or dropped by a growth step past the displacement bound) was not live throughout.
ScanResult CounterTable::scan_records(std::uint64_t cursor, std::size_t max_records,
                                      std::uint64_t now_ns, std::uint64_t changed_since_ns,
                                      const ScanCallbacks& callbacks) const {
  // The cursor: the first selector value of the segment being scanned (high 32 bits), and the
  // position in it to go on from, the high 32 bits of fp_lo (low 32 bits).
  const std::size_t most = std::max<std::size_t>(max_records, 1);
  std::uint64_t begin = cursor >> 32;
  auto from = static_cast<std::uint32_t>(cursor);
  std::size_t visited = 0;
  // Records changed at or after changed_since_ns have a stamp at most `max_age` units old;
  // older ones may alias into that range once the stamp wraps, which only visits them too. A
  // since older than the stamp's range filters nothing.
  const std::uint64_t since_units = changed_since_ns >> kStampTimeShift;
  const std::uint64_t now_units = now_ns >> kStampTimeShift;
  const bool filter =
      changed_since_ns != 0 && since_units <= now_units && now_units - since_units < kStampMask;
  const std::uint64_t max_age = filter ? now_units - since_units : kStampMask;
  std::size_t examined = 0;
  for (;;) {
    const auto selector = static_cast<std::uint32_t>(begin);
    const Segment& seg = segments_[entry_at(selector).segment];
    if (selector_begin(seg.prefix, seg.depth) != begin) {
      // Not a cursor of this table (segments never merge, so ours always name the start of
      // one): scan the whole segment, which is safe.
      begin = selector_begin(seg.prefix, seg.depth);
      from = 0;
    }
    // Records at or after `from` have homes at or after its home (invariant 1), and so slots.
    std::uint64_t last_order = 0;
    bool any = false;  // a record of this segment was examined; last_order is its order
    for (std::size_t i = home_of(seg, std::uint64_t{from} << 32); i < seg.total_slots(); ++i) {
      ++examined;
      Record& r = at(seg, i);
      if (tag_of(r.meta) == 0) continue;
      const std::uint64_t order = r.fp_lo >> 32;
      if (order < from) continue;  // displaced past `from`'s home
      // A page ends between two records of different orders, so that the next one, starting at
      // `order`, misses nothing and always gets past the records it repeats.
      if ((visited >= most || examined >= kScanSlotBudget) && any && order != last_order) {
        return {begin << 32 | order, false, visited};
      }
      last_order = order;
      any = true;
      if (is_expired(r.meta, now_ns)) continue;
      if (filter && age_of(r.meta, now_ns) > max_age) continue;
      const KeyHash key{r.fp_lo, r.fp_hi};
      if (!callbacks.is_wanted(callbacks.wanted, key)) continue;
      std::span<const std::uint64_t> entries;
      if (tag_of(r.meta) == kSlidingLogTag) {
        LogHandle handle = decode_log(r.state);
        SlidingLog& l = handle.log;
        if (l.head + l.count > l.ring.size()) {
          // Wrapped: rotate the ring so that the entries start at 0 (the log is the same).
          std::rotate(l.ring.begin(), l.ring.begin() + l.head, l.ring.end());
          l.head = 0;
          r.state = encode_log(handle.ring, handle.ring_class, l);
        }
        entries = std::span<const std::uint64_t>(l.ring.data() + l.head, l.count);
      }
      callbacks.call_visit(callbacks.visit, image_of(r), entries);
      ++visited;
    }
    const std::uint64_t end = selector_end(seg.prefix, seg.depth);
    if (end == std::uint64_t{1} << 32) return {0, true, visited};
    begin = end;
    from = 0;
    if (visited >= most || examined >= kScanSlotBudget) return {begin << 32, false, visited};
  }
}

std::size_t CounterTable::sweep_step(std::uint64_t now_ns) {
  return sweep(now_ns, std::clamp<std::size_t>(total_slots_ / 100, kMinSweepSlots, kMaxSweepSlots));
}

std::size_t CounterTable::sweep(std::uint64_t now_ns, std::size_t max_slots) {
  std::size_t dropped = 0;
  for (; max_slots > 0; --max_slots) {
    if (sweep_segment_ >= segments_.size()) sweep_segment_ = 0;
    Segment& seg = segments_[sweep_segment_];
    if (sweep_cursor_ >= seg.total_slots()) {
      // The next segment, or the first again.
      sweep_cursor_ = 0;
      ++sweep_segment_;
      ++max_slots;
      continue;
    }
    const std::uint64_t meta = at(seg, sweep_cursor_).meta;
    if (tag_of(meta) != 0 && is_expired(meta, now_ns)) {
      // The next record may shift into this slot: look at it again.
      erase(seg, sweep_cursor_);
      ++expired_;
      ++dropped;
    } else {
      ++sweep_cursor_;
    }
  }
  return dropped;
}

TableStats CounterTable::stats() const {
  TableStats s;
  s.keys = size_;
  s.memory_bytes = memory_bytes();
  s.slots = total_slots_;
  s.segments = segments_.size();
  s.huge_pages = pool_.huge_pages();
  s.expired = expired_;
  s.evicted = evicted_;
  s.evicted_exhausted = evicted_exhausted_;
  s.failed_inserts = failed_inserts_;
  return s;
}

std::size_t CounterTable::size() const { return size_; }

std::size_t CounterTable::memory_bytes() const {
  return pool_.bytes() + metadata_bytes() + arena_.bytes();
}

bool CounterTable::TEST_holds(const KeyHash& key) const { return find(key).found; }

bool CounterTable::TEST_check_invariants() const {
  std::size_t count = 0;
  std::size_t ring_bytes = 0;
  std::size_t chunks = 0;
  std::size_t list_bytes = 0;
  std::size_t slots = 0;
  for (std::uint32_t index = 0; index < segments_.size(); ++index) {
    const Segment& seg = segments_[index];
    if (seg.depth > depth_ || seg.total_slots() > seg.chunks.size() * kChunkRecords) return false;
    // The segment owns exactly the directory entries of its prefix.
    const std::size_t span = std::size_t{1} << (depth_ - seg.depth);
    for (std::size_t i = 0; i < directory_.size(); ++i) {
      const DirectoryEntry& entry = directory_[i];
      if ((entry.segment == index) != (i / span == seg.prefix)) return false;
      if (entry.segment == index &&
          (entry.chunks != seg.chunks.data() || entry.homes != seg.homes)) {
        return false;
      }
    }
    chunks += seg.chunks.size();
    list_bytes += seg.chunks.capacity() * sizeof(Record*);
    slots += seg.total_slots();
    std::size_t in_segment = 0;
    std::uint64_t prev_order = 0;
    std::size_t run_start = 0;  // first slot of the current run of occupied slots
    for (std::size_t i = 0; i < seg.total_slots(); ++i) {
      const Record& r = at(seg, i);
      if (tag_of(r.meta) == 0) {
        if (r.fp_lo != 0 || r.fp_hi != 0 || !(r.state == CounterState{})) return false;
        run_start = i + 1;
        continue;
      }
      ++in_segment;
      const std::size_t home = home_of(seg, r.fp_lo);
      if ((r.fp_lo >> 32) < prev_order) return false;             // 1. sorted
      if (home > i || i - home > kMaxDisplacement) return false;  // 2. bounded displacement
      if (home < run_start) return false;                         // 3. no gap since home
      if (segment_index(KeyHash{r.fp_lo, r.fp_hi}) != index) return false;
      prev_order = r.fp_lo >> 32;
      if (tag_of(r.meta) == kSlidingLogTag) {
        if (r.state == CounterState{}) return false;  // a stored log always has a ring
        ring_bytes += LogArena::ring_bytes(decode_log(r.state).ring_class);
      }
    }
    if (in_segment != seg.size || seg.max_size > seg.homes) return false;
    count += in_segment;
  }
  if (directory_.size() != std::size_t{1} << depth_ || depth_ > max_depth_) return false;
  // Every ring handed out belongs to exactly one record: none leaked.
  return count == size_ && chunks == pool_.chunks_in_use() && list_bytes == chunk_index_bytes_ &&
         slots == total_slots_ && ring_bytes == arena_.used_bytes() && memory_bytes() <= max_bytes_;
}

}  // namespace sluice::server
