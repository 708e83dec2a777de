// The five rate-limit algorithms as pure functions over a fixed-size state and a `now`.
// No I/O, no clock, no allocation. docs/ALGORITHMS.md describes each one with an example.
//
// Shared semantics:
//  - A request costs `cost` >= 1 units. One that costs more than what remains is refused and
//    consumes nothing. One that uses up exactly what remains is allowed.
//  - `peek` answers as if the request were made, and changes nothing.
//  - `remaining` rounds down. `retry_after_ns` is 0 when allowed, else the wait after which the
//    same request would be allowed, or kNever when its cost exceeds the capacity (or limit is 0).
//  - A zeroed state is a fresh key (full capacity), whatever `now` is. Reset = zero the state.
//  - Windows are aligned to the clock: window = floor(now / period).
//  - Integer arithmetic only, 128-bit intermediates: no overflow for limits up to 2^32-1,
//    periods up to kMaxPeriodMs and any now_ns.
// Callers validate the rule first (validate() in rule.h); behaviour on an invalid rule is
// unspecified but memory-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/rule.h"
#include "core/verdict.h"

namespace sluice {

struct Request {
  std::uint64_t now_ns = 0;
  std::uint32_t cost = 1;
  bool peek = false;
};

// 16 bytes of algorithm state. Layout per algorithm is private to its .cpp and documented in
// docs/ALGORITHMS.md. All zero means "fresh".
struct CounterState {
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  friend constexpr bool operator==(const CounterState&, const CounterState&) = default;
};
static_assert(sizeof(CounterState) == 16);

Verdict fixed_window(const Rule& rule, CounterState& state, const Request& request);
Verdict sliding_window(const Rule& rule, CounterState& state, const Request& request);
Verdict token_bucket(const Rule& rule, CounterState& state, const Request& request);
Verdict gcra(const Rule& rule, CounterState& state, const Request& request);

// Dispatch on rule.algorithm for the four algorithms above. Must not be called with
// Algorithm::kSlidingLog (that one needs a SlidingLog).
Verdict decide(const Rule& rule, CounterState& state, const Request& request);

// The time from which `state` is equivalent to a fresh state and may be dropped. 0 when the
// state is already fresh.
std::uint64_t idle_at_ns(const Rule& rule, const CounterState& state);

// idle_at_ns(rule, state) for the state a request that was not a peek has just left at
// `now_ns`, taken from its verdict: such a state is fresh from exactly now_ns +
// reset_after_ns (the shared contract, checked in tests/core/properties_test.cpp), so a caller
// that stores the state after every decision saves the division idle_at_ns() would repeat.
// Falls back to idle_at_ns() when reset_after_ns is 0 or the sum would saturate.
// Inline: it is on every stored decision's path, and a call costs more than its work.
inline std::uint64_t idle_at_after(const Rule& rule, const CounterState& state,
                                   const Verdict& verdict, std::uint64_t now_ns) {
  const std::uint64_t reset = verdict.reset_after_ns;
  if (reset != 0 && now_ns < kMaxWaitNs && reset < kMaxWaitNs - now_ns) return now_ns + reset;
  return idle_at_ns(rule, state);
}

// One field of a state as docs/ALGORITHMS.md lays it out, for tools that show what a node
// stores without the rule (sluicectl inspect). A time is absolute, in ns of the deciding
// node's clock.
struct StateField {
  std::string_view name;
  std::uint64_t value = 0;
  bool is_time = false;
};
// The fields of `state` under `algorithm`: window and count (fixed window); window, current and
// previous (sliding window counter); used and the refill position (token bucket); the
// theoretical arrival time (GCRA, saturated at 2^64 - 1 ns). None for the sliding log, whose
// state is its log. A fresh state's fields are all 0.
std::vector<StateField> describe_state(Algorithm algorithm, const CounterState& state);

// Sliding log: the timestamps (ns) of admitted units, one entry per unit of cost, in a ring.
// `ring.size()` must be >= rule.limit; entries older than one period are dropped lazily.
struct SlidingLog {
  std::span<std::uint64_t> ring;
  std::uint32_t head = 0;   // index of the oldest entry
  std::uint32_t count = 0;  // number of live entries
};

Verdict sliding_log(const Rule& rule, SlidingLog& log, const Request& request);
// What sliding_log() answers for `log` moved to a ring of at least rule.limit entries, writing
// nothing: for a peek, whatever the log's ring (an empty SlidingLog for a key with no log).
Verdict sliding_log_answer(const Rule& rule, const SlidingLog& log, const Request& request);
std::uint64_t sliding_log_idle_at_ns(const Rule& rule, const SlidingLog& log);

// Leases (issue 15; docs/ALGORITHMS.md, "Leases"): a client takes several units at once, spends
// them locally, and gives back the ones it did not spend.
struct LeaseGrant {
  // For granted >= 1: the decision of an acquire of `granted` units (allowed). For none: the
  // decision of a one-unit acquire (denied), with its retry_after.
  Verdict decision;
  std::uint32_t granted = 0;
  // What give_back() needs to tell how much of the units still counts: lease_stamp().
  std::uint32_t stamp = 0;
};

// A lease's stamp, granted at `now_ns`: for a fixed window and a sliding window counter the
// number of its window plus one, low 32 bits; for a token bucket and GCRA the grant time in
// whole milliseconds, low 32 bits (about 49.7 days before it wraps); 0 for a sliding log.
std::uint32_t lease_stamp(const Rule& rule, std::uint64_t now_ns);

// A lease's grant over any way of deciding a key (a bare state here, a stored record in the
// daemon's table): a one-unit peek says what is left (its `remaining` plus one), then
// min(request.cost, that) units are taken, or one unit when the algorithm's rounding said
// more than fits at once. `decide_now(Request)` decides the key at the request's time.
template <typename Decide>
LeaseGrant grant_lease(const Request& request, Decide decide_now) {
  LeaseGrant out;
  out.decision = decide_now(Request{request.now_ns, 1, /*peek=*/true});
  if (!out.decision.allowed) return out;
  const std::uint64_t available = std::uint64_t{out.decision.remaining} + 1;
  auto granted = static_cast<std::uint32_t>(request.cost < available ? request.cost : available);
  out.decision = decide_now(Request{request.now_ns, granted, false});
  if (!out.decision.allowed && granted > 1) {
    granted = 1;
    out.decision = decide_now(Request{request.now_ns, 1, false});
  }
  if (out.decision.allowed) out.granted = granted;
  return out;
}

// Takes up to `request.cost` units, as many as are available at `request.now_ns` (0 when none
// is); `request.peek` is ignored (a lease always takes). Not for Algorithm::kSlidingLog.
LeaseGrant lease(const Rule& rule, CounterState& state, const Request& request);
LeaseGrant sliding_log_lease(const Rule& rule, SlidingLog& log, const Request& request);

// Gives back `units` unspent units of a lease stamped `stamp`, at `now_ns`, crediting only what
// still counts against the key, so that the state afterwards admits no more than if the units
// had never been taken: a fixed window credits them while its stored window is the stamp's; a
// sliding window counter also from the previous window's count once the window has moved on; a
// token bucket and GCRA credit them less every unit refilled since the grant (the refill may
// have paid them back already: had they never been taken, the bucket could have been full and
// earned nothing), never beyond a full bucket, and nothing for a stamp in the future or more
// than 2^31 ms old. Returns how many it credited. A sliding log cannot tell leased entries from
// spent ones, so its leased units are never given back: they count until they expire.
std::uint32_t give_back(const Rule& rule, CounterState& state, std::uint32_t units,
                        std::uint32_t stamp, std::uint64_t now_ns);

}  // namespace sluice
