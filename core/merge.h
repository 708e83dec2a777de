// Which of two copies of one key's state a node keeps. A primary streams the records it changes
// to a replica and nodes pull records from each other (docs/ARCHITECTURE.md, "Replication"), so
// a copy may arrive twice or after a newer one; and after a split, or a lease loss of every node,
// two nodes may each have decided the same key, so two copies may have diverged. The receiver
// keeps the copy that has used more of the key's limit at a common time: of two states of one
// writer's history that is always the later one (merge.cpp proves it per algorithm), so
// replication never stalls; of two diverged copies it is the more consumed one, which errs
// towards denying. Records do not store their rule, so the order reads the state and what a
// record has beside it (its expiry). Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <span>

#include "core/algorithms.h"
#include "core/rule.h"

namespace sluice {

// A copy of one key's state as a table holds it: the state, and when it answers as a fresh key
// (idle_at_ns() under the rule that stored it, or any non-decreasing function of it such as the
// table's expiry, rounded up).
struct StateCopy {
  CounterState state;
  std::uint64_t idle_at_ns = 0;
};

// Whether copy `x` is to be kept over copy `y` of one key under `algorithm` (false when neither
// is preferred: keep the one held). "More consumed at a common time":
//  - fixed window: the later window, then the higher count (a, b);
//  - sliding window: the later window, then in the same window the higher count at its start
//    (current + previous), then the higher current count, then the previous one;
//  - token bucket: the later time it is full again (idle_at_ns: both refill at the rule's rate,
//    so the later one holds fewer tokens at every instant before it), then (last_ns, frac, used);
//  - GCRA: the later theoretical arrival time (hi32(b), a, lo32(b)), full again at the TAT.
// The zeroed (fresh) state is never preferred over another. For kSlidingLog use prefer_log();
// any value other than the four state algorithms is ordered as (a, b).
bool prefer_state(Algorithm algorithm, const StateCopy& x, const StateCopy& y);
// The copy to keep of `a` and `b`: `b` if prefer_state(algorithm, b, a), else `a`.
const StateCopy& kept_state(Algorithm algorithm, const StateCopy& a, const StateCopy& b);

// A sliding log's copy: its live timestamps, oldest first, and a lower bound of the instant it
// answers as a fresh key (its newest entry plus the period; the table's expiry, rounded up, less
// the rounding), from which the period is read.
struct LogCopy {
  std::span<const std::uint64_t> entries;
  std::uint64_t idle_floor_ns = 0;
};

// Whether sliding log `x` is to be kept over `y` at `now_ns` (false when neither is preferred).
// The one with more entries still live at t = max(now_ns, both newest entries), by the shorter
// of the two periods read from the copies, is kept; with as many, the later in a single writer's
// history: the later newest timestamp, then more entries at that timestamp, then fewer entries
// before it. The empty log is never preferred.
bool prefer_log(const LogCopy& x, const LogCopy& y, std::uint64_t now_ns);
// The same, with `y` read where it lies in its ring (`count` entries from `head`, wrapping).
bool prefer_log(const LogCopy& x, const SlidingLog& y, std::uint64_t y_idle_floor_ns,
                std::uint64_t now_ns);

}  // namespace sluice
