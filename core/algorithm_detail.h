// Helpers shared by the algorithm implementations. Private to core/.
#pragma once

#include <cstdint>

#include "core/algorithms.h"
#include "core/rule.h"
#include "core/verdict.h"

namespace sluice::detail {

// Wide enough for every product the algorithms form: a count (< 2^32) times a period in ns
// (< 2^55), or a time in ns (< 2^64) times a limit (< 2^32).
using u128 = unsigned __int128;

// x / d and x % d for a 64-bit divisor. The dividends here almost always fit 64 bits, yet a
// 128-bit division is a library call (__udivmodti4) even then: this takes the 64-bit
// instruction when it can.
constexpr u128 div64(u128 x, std::uint64_t d) {
  return (x >> 64) == 0 ? u128{static_cast<std::uint64_t>(x) / d} : x / d;
}
constexpr std::uint64_t mod64(u128 x, std::uint64_t d) {
  return (x >> 64) == 0 ? static_cast<std::uint64_t>(x) % d : static_cast<std::uint64_t>(x % d);
}

constexpr u128 ceil_div(u128 x, std::uint64_t d) {
  const u128 q = div64(x, d);
  return q * d == x ? q : q + 1;
}

// A duration or an absolute time that does not fit 64 bits is reported as kMaxWaitNs.
constexpr std::uint64_t saturate_ns(u128 x) {
  return x > kMaxWaitNs ? kMaxWaitNs : static_cast<std::uint64_t>(x);
}

// `until - now`, 0 if `until` is not in the future.
constexpr std::uint64_t wait_ns(u128 until, std::uint64_t now) {
  return until > now ? saturate_ns(until - now) : 0;
}

constexpr std::uint32_t saturating_sub(std::uint64_t a, std::uint64_t b) {
  return a > b ? static_cast<std::uint32_t>(a - b) : 0;
}

constexpr std::uint32_t lo32(std::uint64_t x) { return static_cast<std::uint32_t>(x); }
constexpr std::uint32_t hi32(std::uint64_t x) { return static_cast<std::uint32_t>(x >> 32); }
constexpr std::uint64_t pack32(std::uint32_t lo, std::uint32_t hi) {
  return (std::uint64_t{hi} << 32) | lo;
}

// A rule no request can ever pass: limit 0, or a period validate() rejects (which would
// otherwise divide by zero or overflow).
constexpr bool admits_nothing(const Rule& rule) {
  return rule.limit == 0 || rule.period_ms == 0 || rule.period_ms > kMaxPeriodMs;
}

constexpr Verdict never_decision(const Rule& rule) {
  return Verdict{.allowed = false,
                 .limit = rule.capacity(),
                 .remaining = 0,
                 .reset_after_ns = 0,
                 .retry_after_ns = kNever};
}

// Per algorithm, the time from which `state` is equivalent to fresh (see idle_at_ns()); each
// lives beside the algorithm that owns the state layout. The rule admits something.
std::uint64_t fixed_window_idle_at_ns(const Rule& rule, const CounterState& state);
std::uint64_t sliding_window_idle_at_ns(const Rule& rule, const CounterState& state);
std::uint64_t token_bucket_idle_at_ns(const Rule& rule, const CounterState& state);
std::uint64_t gcra_idle_at_ns(const Rule& rule, const CounterState& state);

// Per algorithm, describe_state() (see algorithms.h); each beside the algorithm that owns the
// state layout.
std::vector<StateField> fixed_window_fields(const CounterState& state);
std::vector<StateField> sliding_window_fields(const CounterState& state);
std::vector<StateField> token_bucket_fields(const CounterState& state);
std::vector<StateField> gcra_fields(const CounterState& state);

// Per algorithm, give_back() of `units` (see algorithms.h); each beside the algorithm whose state
// it changes. The rule admits something. Returns the units credited.
std::uint32_t fixed_window_credit(const Rule& rule, CounterState& state, std::uint32_t units,
                                  std::uint32_t stamp);
std::uint32_t sliding_window_credit(const Rule& rule, CounterState& state, std::uint32_t units,
                                    std::uint32_t stamp);
// The buckets' credits: `since_ns` is an upper bound of the time since the grant.
std::uint32_t token_bucket_credit(const Rule& rule, CounterState& state, std::uint32_t units,
                                  std::uint64_t since_ns, std::uint64_t now_ns);
std::uint32_t gcra_credit(const Rule& rule, CounterState& state, std::uint32_t units,
                          std::uint64_t since_ns, std::uint64_t now_ns);

}  // namespace sluice::detail
