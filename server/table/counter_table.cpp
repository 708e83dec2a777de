// Slot array invariants (checked by TEST_check_invariants):
//  1. Records are sorted by the high 32 bits of fp_lo (the bits slot_for() scales), so homes
//     never decrease along the array: a lookup stops at the first record that sorts after it.
//  2. A record sits within kMaxDisplacement slots after its home.
//  3. No empty slot lies between a record's home and its slot (linear probing).
// Insertions shift a run of records by one slot towards a "sink" (an empty slot, an expired
// record or an evicted one), as long as no shifted record passes the displacement bound; deletions
// shift the run after the hole back (backward-shift deletion), so there are no tombstones. Growth
// is a linear merge into a bigger array.
#include "server/table/counter_table.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

#ifdef __linux__
#include <sys/mman.h>
#endif

namespace sluice::server {
namespace {

constexpr std::uint64_t kTagMask = 0x7;
constexpr int kStampShift = 3;
constexpr std::uint64_t kStampMask = 0xffff;
constexpr int kStampTimeShift = 26;  // stamp unit: 2^26 ns, ~67 ms; wraps after ~73 min
constexpr int kExpiryShift = 19;     // expiry unit: 2^19 ns, ~0.5 ms
constexpr std::uint64_t kExpiryMask = ~((std::uint64_t{1} << kExpiryShift) - 1);

constexpr std::size_t kNoSlot = ~std::size_t{0};

constexpr std::uint8_t kSlidingLogTag = static_cast<std::uint8_t>(Algorithm::kSlidingLog);

// A sliding-log record's state: a = ring address; b = (ring class + 1) << 56 | head << 28 |
// count. Ring capacities stay below 2^27 (LogArena::kMaxRingEntries), so head and count fit.
constexpr int kLogClassShift = 56;
constexpr int kLogHeadShift = 28;
constexpr std::uint64_t kLogFieldMask = (std::uint64_t{1} << 28) - 1;

std::uint8_t tag_of(std::uint64_t meta) { return static_cast<std::uint8_t>(meta & kTagMask); }
std::uint64_t stamp_of(std::uint64_t now_ns) { return (now_ns >> kStampTimeShift) & kStampMask; }
// Rounds up so a record never expires before idle_at_ns; keeping it a little longer is
// harmless because from idle_at_ns on its state answers like a fresh one.
std::uint64_t expiry_bits(std::uint64_t idle_at_ns) {
  if (idle_at_ns > kExpiryMask) return kExpiryMask;
  return (idle_at_ns + ~kExpiryMask) & kExpiryMask;
}
std::uint64_t make_meta(std::uint8_t tag, std::uint64_t now_ns, std::uint64_t idle_at_ns) {
  return expiry_bits(idle_at_ns) | (stamp_of(now_ns) << kStampShift) | tag;
}
std::uint64_t with_stamp(std::uint64_t meta, std::uint64_t now_ns) {
  return (meta & ~(kStampMask << kStampShift)) | (stamp_of(now_ns) << kStampShift);
}
bool is_expired(std::uint64_t meta, std::uint64_t now_ns) { return (meta & kExpiryMask) <= now_ns; }
// How long ago (in stamp units, modulo the stamp range) the record was last used.
std::uint64_t age_of(std::uint64_t meta, std::uint64_t now_ns) {
  return (stamp_of(now_ns) - ((meta >> kStampShift) & kStampMask)) & kStampMask;
}

// Eviction order: an expired record before any live one, then the least recently used.
bool better_victim(std::uint64_t candidate, std::uint64_t best, std::uint64_t now_ns) {
  const bool candidate_expired = is_expired(candidate, now_ns);
  if (candidate_expired != is_expired(best, now_ns)) return candidate_expired;
  return age_of(candidate, now_ns) > age_of(best, now_ns);
}

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

// Zeroed memory (zeroed slots are empty; the system hands out zero pages lazily), or nullptr.
// A large array asks for transparent huge pages: lookups hit random slots, and with 4 KiB
// pages nearly every one would also miss the TLB.
void* allocate_zeroed(std::size_t count, std::size_t size) {
  void* p = std::calloc(count, size);
#ifdef __linux__
  constexpr std::uintptr_t kHuge = std::uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(p) + count * size) & ~(kHuge - 1);
  if (p != nullptr && end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // a hint: may fail
  }
#endif
  return p;
}

// A power of two between 4 KiB and 1 MiB, about 1/16 of the cap.
std::size_t arena_chunk_bytes(std::size_t max_bytes) {
  std::size_t chunk = std::size_t{4} << 10;
  while (chunk < (std::size_t{1} << 20) && chunk * 2 <= max_bytes / 16) chunk *= 2;
  return chunk;
}

}  // namespace

void CounterTable::FreeRecords::operator()(Record* records) const { std::free(records); }

CounterTable::CounterTable(const TableConfig& config)
    : max_bytes_(std::max(config.max_bytes, kMinMaxBytes)),
      sliding_log_cap_(std::min(config.sliding_log_cap, LogArena::kMaxRingEntries)),
      arena_(arena_chunk_bytes(max_bytes_)) {
  const std::size_t home_slots = std::clamp<std::size_t>(
      config.initial_slots, 16, std::max<std::size_t>(max_home_slots(), 16));
  slots_.reset(
      static_cast<Record*>(allocate_zeroed(home_slots + kMaxDisplacement + 1, sizeof(Record))));
  if (!slots_) throw std::bad_alloc();
  home_slots_ = home_slots;
  max_size_ = home_slots_ * 9 / 10;
}

CounterTable::~CounterTable() = default;

std::size_t CounterTable::home_of(std::uint64_t fp_lo) const {
  return static_cast<std::size_t>(slot_for(KeyHash{fp_lo, 0}, home_slots_));
}

CounterTable::Probe CounterTable::find(const KeyHash& key) const {
  const std::uint64_t order = key.lo >> 32;
  // Terminates within kMaxDisplacement + 1 slots: a record past that window has a later home,
  // hence a larger `order` (invariants 1 and 2).
  for (std::size_t i = home_of(key.lo);; ++i) {
    const Record& r = slots_[i];
    if (tag_of(r.meta) == 0 || (r.fp_lo >> 32) > order) return {i, false};
    if (r.fp_lo == key.lo && r.fp_hi == key.hi) return {i, true};
  }
}

void CounterTable::prefetch(const KeyHash& key) const {
  __builtin_prefetch(&slots_[home_of(key.lo)]);
}

std::size_t CounterTable::max_home_slots() const {
  const std::size_t reserved = arena_.bytes() + arena_.chunk_bytes();
  if (max_bytes_ <= reserved) return 0;
  const std::size_t slots = (max_bytes_ - reserved) / sizeof(Record);
  // slot_for() scales 32 bits of the hash: more homes than 2^32 would never be used.
  return std::min<std::size_t>(slots > kMaxDisplacement + 1 ? slots - kMaxDisplacement - 1 : 0,
                               std::size_t{1} << 32);
}

bool CounterTable::grow(std::uint64_t now_ns) {
  const std::size_t target = std::min(home_slots_ * 2, max_home_slots());
  // A step of less than 1/8 is not worth a rehash: evict instead.
  if (target < home_slots_ + home_slots_ / 8) return false;
  std::unique_ptr<Record[], FreeRecords> fresh(
      static_cast<Record*>(allocate_zeroed(target + kMaxDisplacement + 1, sizeof(Record))));
  if (!fresh) return false;
  // The old array is sorted by the bits slot_for() scales, so new homes come in order too:
  // each record goes to its new home or just after the previous one.
  std::size_t next = 0;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < total_slots(); ++i) {
    Record& r = slots_[i];
    if (tag_of(r.meta) == 0) continue;
    if (is_expired(r.meta, now_ns)) {
      release_ring(r);
      ++expired_;
      continue;
    }
    const std::size_t home = static_cast<std::size_t>(slot_for(KeyHash{r.fp_lo, 0}, target));
    const std::size_t pos = std::max(home, next);
    if (pos - home > kMaxDisplacement) {
      // Not expected below load 0.9 (displacements stay far below the bound); handled anyway.
      release_ring(r);
      ++evicted_lru_;
      continue;
    }
    fresh[pos] = r;
    next = pos + 1;
    ++kept;
  }
  slots_ = std::move(fresh);
  home_slots_ = target;
  max_size_ = home_slots_ * 9 / 10;
  size_ = kept;
  sweep_cursor_ = 0;
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
  return arena_.allocate(ring_class, max_bytes_ > used ? max_bytes_ - used : 0);
}

void CounterTable::place(const Record& record, std::size_t pos, std::size_t sink) {
  Record* s = slots_.get();
  if (sink >= pos) {
    std::memmove(s + pos + 1, s + pos, (sink - pos) * sizeof(Record));
    s[pos] = record;
  } else {
    std::memmove(s + sink, s + sink + 1, (pos - sink - 1) * sizeof(Record));
    s[pos - 1] = record;
  }
}

void CounterTable::erase(std::size_t pos) {
  release_ring(slots_[pos]);
  Record* s = slots_.get();
  std::size_t end = pos + 1;
  while (end < total_slots() && tag_of(s[end].meta) != 0 && home_of(s[end].fp_lo) < end) ++end;
  std::memmove(s + pos, s + pos + 1, (end - pos - 1) * sizeof(Record));
  s[end - 1] = Record{};
  --size_;
}

bool CounterTable::insert(const Record& record, std::size_t pos, std::uint64_t now_ns) {
  const KeyHash key{record.fp_lo, record.fp_hi};
  for (;;) {
    const std::size_t home = home_of(record.fp_lo);
    Record* s = slots_.get();
    // The run [pos, sink) can shift right only if no record in it is at the displacement bound.
    const bool right_ok = pos - home <= kMaxDisplacement;
    const auto at_bound = [&](std::size_t i) {
      return i - home_of(s[i].fp_lo) >= kMaxDisplacement;
    };
    if (size_ < max_size_) {
      // Nearest sink after pos: the first empty or expired slot. The scan ends at an empty
      // slot at the latest (the last slot of the array is always empty).
      std::size_t sink = kNoSlot;
      for (std::size_t i = pos; right_ok; ++i) {
        if (tag_of(s[i].meta) == 0 || is_expired(s[i].meta, now_ns)) {
          sink = i;
          break;
        }
        if (at_bound(i)) break;
      }
      // Else an expired record in [home, pos), whose records all sort before this one.
      for (std::size_t i = pos; sink == kNoSlot && i > home; --i) {
        if (is_expired(s[i - 1].meta, now_ns)) sink = i - 1;
      }
      if (sink != kNoSlot) {
        if (tag_of(s[sink].meta) != 0) {
          release_ring(s[sink]);
          ++expired_;
        } else {
          ++size_;
        }
        place(record, pos, sink);
        return true;
      }
    }
    // Grow when full; on a crowded run only past half load, so keys crafted to share a home
    // slot cannot double the table up to the cap (they evict each other instead).
    if (size_ >= max_size_ / 2 && grow(now_ns)) {
      pos = find(key).pos;
      continue;
    }
    if (size_ >= max_size_) {
      // Full at the cap: drop the best victim (see better_victim) among kEvictionCandidates
      // records from just before the insertion point on. A victim the run can shift into
      // takes the key directly; any other is erased first.
      std::size_t victim = kNoSlot;
      bool victim_reachable = false;
      bool run_open = right_ok;  // whether slots from pos up to i can take a right shift
      std::size_t seen = 0;
      const std::size_t first = std::max(home, pos >= kLookBehind ? pos - kLookBehind : 0);
      // Wraps to the front of the array: the victim need not be near the key.
      for (std::size_t n = 0, i = first; n < total_slots() && seen < kEvictionCandidates; ++n) {
        const bool occupied = tag_of(s[i].meta) != 0;
        if (occupied) {
          ++seen;
          if (victim == kNoSlot || better_victim(s[i].meta, s[victim].meta, now_ns)) {
            victim = i;
            victim_reachable = i >= home && (i < pos || run_open);
          }
        }
        if (i >= pos && (!occupied || at_bound(i))) run_open = false;
        i = i + 1 == total_slots() ? 0 : i + 1;
      }
      if (victim == kNoSlot) return false;  // an empty table cannot be full
      ++(is_expired(s[victim].meta, now_ns) ? expired_ : evicted_lru_);
      if (victim_reachable) {
        release_ring(s[victim]);
        place(record, pos, victim);
        return true;
      }
      erase(victim);
      pos = find(key).pos;
      continue;
    }
    // No sink within reach of the displacement bound: the victim must be a record the run can
    // shift into, in [home, pos) or after pos up to the first record at the bound.
    std::size_t victim = kNoSlot;
    const std::size_t first = std::max(home, pos >= kLookBehind ? pos - kLookBehind : 0);
    for (std::size_t i = first; i < first + kEvictionCandidates; ++i) {
      if (i >= pos && !right_ok) break;
      if (tag_of(s[i].meta) == 0) break;  // not reached: the sink scan would have taken it
      if (victim == kNoSlot || better_victim(s[i].meta, s[victim].meta, now_ns)) victim = i;
      if (i >= pos && at_bound(i)) break;
    }
    if (victim == kNoSlot) return false;
    ++(is_expired(s[victim].meta, now_ns) ? expired_ : evicted_lru_);
    release_ring(s[victim]);
    place(record, pos, victim);
    return true;
  }
}

TableAnswer CounterTable::answer_fresh(const Rule& rule, const Request& request) {
  if (rule.algorithm != Algorithm::kSlidingLog) {
    CounterState state;
    return {TableOutcome::kOk, decide(rule, state, request)};
  }
  // The algorithm needs a ring of the rule's size even to answer for an empty log.
  const std::uint32_t ring_class = LogArena::class_for(rule.limit);
  std::uint64_t* ring = allocate_ring(ring_class);
  if (ring == nullptr) {
    ++failed_inserts_;
    return {TableOutcome::kNoMemory, {}};
  }
  SlidingLog log{std::span<std::uint64_t>(ring, LogArena::ring_entries(ring_class)), 0, 0};
  const Decision decision = sliding_log(rule, log, request);
  arena_.release(ring, ring_class);
  return {TableOutcome::kOk, decision};
}

TableAnswer CounterTable::update_existing(std::size_t pos, const Rule& rule,
                                          const Request& request) {
  Record& r = slots_[pos];
  const std::uint64_t now = request.now_ns;
  if (rule.algorithm != Algorithm::kSlidingLog) {
    const Decision decision = decide(rule, r.state, request);
    if (!request.peek) {
      const std::uint64_t idle_at = idle_at_ns(rule, r.state);
      if (r.state == CounterState{} || idle_at <= now) {
        erase(pos);
        return {TableOutcome::kOk, decision};
      }
      r.meta = make_meta(tag_of(r.meta), now, idle_at);
    } else {
      r.meta = with_stamp(r.meta, now);
    }
    return {TableOutcome::kOk, decision};
  }

  const std::uint32_t need = LogArena::class_for(rule.limit);
  LogHandle handle{};
  if (r.state == CounterState{}) {
    std::uint64_t* ring = allocate_ring(need);
    if (ring == nullptr) {
      erase(pos);
      ++failed_inserts_;
      return {TableOutcome::kNoMemory, {}};
    }
    handle = {ring, need,
              SlidingLog{std::span<std::uint64_t>(ring, LogArena::ring_entries(need)), 0, 0}};
  } else {
    handle = decode_log(r.state);
    if (handle.ring_class < need) {
      // The limit grew past the ring: move the live entries, oldest first, to a bigger one.
      std::uint64_t* ring = allocate_ring(need);
      if (ring == nullptr) {
        ++failed_inserts_;
        return {TableOutcome::kNoMemory, {}};
      }
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
  const Decision decision = sliding_log(rule, handle.log, request);
  if (request.peek && handle.log.count != 0) {
    r.meta = with_stamp(r.meta, now);
    return {TableOutcome::kOk, decision};
  }
  const std::uint64_t idle_at = sliding_log_idle_at_ns(rule, handle.log);
  if (handle.log.count == 0 || idle_at <= now) {
    erase(pos);
    return {TableOutcome::kOk, decision};
  }
  r.state = encode_log(handle.ring, handle.ring_class, handle.log);
  r.meta = make_meta(kSlidingLogTag, now, idle_at);
  return {TableOutcome::kOk, decision};
}

TableAnswer CounterTable::insert_new(const KeyHash& key, std::size_t pos, const Rule& rule,
                                     const Request& request) {
  const std::uint64_t now = request.now_ns;
  Record record{key.lo, key.hi, CounterState{}, 0};
  Decision decision;
  if (rule.algorithm != Algorithm::kSlidingLog) {
    decision = decide(rule, record.state, request);
    const std::uint64_t idle_at = idle_at_ns(rule, record.state);
    if (record.state == CounterState{} || idle_at <= now) return {TableOutcome::kOk, decision};
    record.meta = make_meta(static_cast<std::uint8_t>(rule.algorithm), now, idle_at);
  } else {
    const std::uint32_t ring_class = LogArena::class_for(rule.limit);
    std::uint64_t* ring = allocate_ring(ring_class);
    if (ring == nullptr) {
      ++failed_inserts_;
      return {TableOutcome::kNoMemory, {}};
    }
    SlidingLog log{std::span<std::uint64_t>(ring, LogArena::ring_entries(ring_class)), 0, 0};
    decision = sliding_log(rule, log, request);
    const std::uint64_t idle_at = sliding_log_idle_at_ns(rule, log);
    if (log.count == 0 || idle_at <= now) {
      arena_.release(ring, ring_class);
      return {TableOutcome::kOk, decision};
    }
    record.state = encode_log(ring, ring_class, log);
    record.meta = make_meta(kSlidingLogTag, now, idle_at);
  }
  if (!insert(record, pos, now)) {
    release_ring(record);
    ++failed_inserts_;
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
  if (!probe.found) {
    return request.peek ? answer_fresh(rule, request) : insert_new(key, probe.pos, rule, request);
  }
  Record& r = slots_[probe.pos];
  const auto tag = static_cast<std::uint8_t>(rule.algorithm);
  const bool expired = is_expired(r.meta, request.now_ns);
  if (expired || tag_of(r.meta) != tag) {
    // Expired, or stored under another algorithm: the key starts fresh in its slot. A peek
    // leaves a record of another algorithm alone.
    if (request.peek) {
      if (expired) {
        erase(probe.pos);
        ++expired_;
      }
      return answer_fresh(rule, request);
    }
    if (expired) ++expired_;
    release_ring(r);
    r.state = {};
    r.meta = tag;
  }
  return update_existing(probe.pos, rule, request);
}

bool CounterTable::reset(const KeyHash& key, std::uint64_t now_ns) {
  const Probe probe = find(key);
  if (!probe.found) return false;
  const bool live = !is_expired(slots_[probe.pos].meta, now_ns);
  if (!live) ++expired_;
  erase(probe.pos);
  return live;
}

bool CounterTable::contains(const KeyHash& key, std::uint64_t now_ns) const {
  const Probe probe = find(key);
  return probe.found && !is_expired(slots_[probe.pos].meta, now_ns);
}

std::size_t CounterTable::sweep(std::uint64_t now_ns, std::size_t max_slots) {
  std::size_t dropped = 0;
  for (; max_slots > 0; --max_slots) {
    if (sweep_cursor_ >= total_slots()) sweep_cursor_ = 0;
    const std::uint64_t meta = slots_[sweep_cursor_].meta;
    if (tag_of(meta) != 0 && is_expired(meta, now_ns)) {
      // The next record may shift into this slot: look at it again.
      erase(sweep_cursor_);
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
  s.slots = total_slots();
  s.expired = expired_;
  s.evicted_lru = evicted_lru_;
  s.failed_inserts = failed_inserts_;
  return s;
}

std::size_t CounterTable::size() const { return size_; }

std::size_t CounterTable::memory_bytes() const {
  return total_slots() * sizeof(Record) + arena_.bytes();
}

bool CounterTable::TEST_check_invariants() const {
  std::size_t count = 0;
  std::size_t ring_bytes = 0;
  std::uint64_t prev_order = 0;
  std::size_t run_start = 0;  // first slot of the current run of occupied slots
  for (std::size_t i = 0; i < total_slots(); ++i) {
    const Record& r = slots_[i];
    if (tag_of(r.meta) == 0) {
      if (r.fp_lo != 0 || r.fp_hi != 0 || !(r.state == CounterState{})) return false;
      run_start = i + 1;
      continue;
    }
    ++count;
    const std::size_t home = home_of(r.fp_lo);
    if ((r.fp_lo >> 32) < prev_order) return false;             // 1. sorted
    if (home > i || i - home > kMaxDisplacement) return false;  // 2. bounded displacement
    if (home < run_start) return false;                         // 3. no gap since home
    prev_order = r.fp_lo >> 32;
    if (tag_of(r.meta) == kSlidingLogTag) {
      if (r.state == CounterState{}) return false;  // a stored log always has a ring
      ring_bytes += LogArena::ring_bytes(decode_log(r.state).ring_class);
    }
  }
  // Every ring handed out belongs to exactly one record: none leaked.
  return count == size_ && ring_bytes == arena_.used_bytes() && memory_bytes() <= max_bytes_;
}

}  // namespace sluice::server
