// Which of two copies of one key's state is the later. A primary streams the records it changes
// to a replica and nodes pull records from each other (docs/ARCHITECTURE.md, "Replication"), so a
// copy may arrive twice or after a newer one: the receiver keeps the later of the two. Records do
// not store their rule, so the order is read from the state alone. Pure functions, no I/O.
#pragma once

#include <cstdint>
#include <span>

#include "core/algorithms.h"
#include "core/rule.h"

namespace sluice {

// Of two states of one key under `algorithm`, the one that is later in any single writer's
// history (`a` when they are equal). Every store an algorithm makes moves its state strictly
// forward in one fixed order, whatever the rule, the cost and the time of the request, so no
// rule is needed (merge.cpp proves it per algorithm); the zeroed (fresh) state is the earliest.
//  - fixed window, sliding window: (a, b) lexicographically;
//  - token bucket: (last_ns, frac, used);
//  - GCRA: the theoretical arrival time (hi32(b), a, lo32(b)).
// For kSlidingLog, whose CounterState is a table's ring handle, use newer_log(); any value other
// than the four state algorithms is ordered as (a, b).
CounterState newer_state(Algorithm algorithm, const CounterState& a, const CounterState& b);

// Whether sliding log `a` is strictly later than `b` in a single writer's history (false when
// they are equal). Each is the log's live timestamps, oldest first. The later log has the later
// newest timestamp; with the same newest timestamp, more entries at that timestamp (a request
// admitted then), and then fewer entries before it (older entries dropped as they expired, which
// a denied request or an export does). The empty log is the earliest: it is a fresh key's, and a
// log only becomes empty again once all its entries have expired, when it answers as a fresh
// one anyway.
bool newer_log(std::span<const std::uint64_t> a, std::span<const std::uint64_t> b);
// The same, with `b` read where it lies in its ring (`count` entries from `head`, wrapping).
bool newer_log(std::span<const std::uint64_t> a, const SlidingLog& b);

}  // namespace sluice
