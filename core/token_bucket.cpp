// Token bucket. State: a = last_ns, b = used (low 32 bits) | frac (high 32 bits).
// `used` is how many tokens the bucket lacks (0 = full, so a zeroed state is a full bucket).
// While used > 0 the refill position is last_ns + frac / limit ns, exactly: one token is
// credited every period / limit ns after it, with no rounding, so the rate never drifts.
#include <algorithm>

#include "core/algorithm_detail.h"
#include "core/algorithms.h"

namespace sluice {
namespace {

using detail::u128;

struct Bucket {
  std::uint64_t last = 0;
  std::uint64_t frac = 0;  // in units of 1/limit ns
  std::uint64_t used = 0;
};

Bucket load(const CounterState& state) {
  return Bucket{.last = state.a, .frac = detail::hi32(state.b), .used = detail::lo32(state.b)};
}

// Credits the whole tokens earned between the refill position and `now`; when the bucket is
// full again the position no longer matters (it restarts at the next consumption).
Bucket refill(const CounterState& state, std::uint64_t now, std::uint64_t limit,
              std::uint64_t period) {
  Bucket b = load(state);
  if (b.used == 0 || now <= b.last) return b;
  const u128 elapsed = u128{now - b.last} * limit;  // in units of 1/limit ns
  if (elapsed <= b.frac) return b;
  const u128 gained = detail::div64(elapsed - b.frac, period);
  if (gained >= b.used) return Bucket{};
  b.used -= static_cast<std::uint64_t>(gained);
  // gained * period <= elapsed - frac, so the new position is at most `now`.
  const u128 position = b.frac + gained * period;
  b.last += static_cast<std::uint64_t>(detail::div64(position, limit));
  b.frac = detail::mod64(position, limit);
  return b;
}

// The absolute time (ns) at which `tokens` more whole tokens have been credited.
u128 credited_at(const Bucket& b, std::uint64_t tokens, std::uint64_t limit, std::uint64_t period) {
  return b.last + detail::ceil_div(u128{tokens} * period + b.frac, limit);
}

// When the bucket is full again. 0 when it already is.
u128 full_at(const Bucket& b, std::uint64_t limit, std::uint64_t period) {
  return b.used == 0 ? 0 : credited_at(b, b.used, limit, period);
}

}  // namespace

Verdict token_bucket(const Rule& rule, CounterState& state, const Request& request) {
  if (detail::admits_nothing(rule)) return detail::never_decision(rule);
  const std::uint64_t period = rule.period_ns();
  const std::uint64_t now = request.now_ns;
  const std::uint64_t limit = rule.limit;
  const std::uint64_t capacity = rule.capacity();
  const std::uint64_t cost = request.cost;

  // A full bucket (every fresh key) has nothing to refill: no call.
  Bucket b = detail::lo32(state.b) == 0 ? load(state) : refill(state, now, limit, period);
  const std::uint64_t available = capacity > b.used ? capacity - b.used : 0;
  const bool fits = cost <= capacity;
  const bool allowed = cost <= available;
  Verdict d;
  d.allowed = allowed;
  d.limit = rule.capacity();
  if (allowed) {
    if (b.used == 0) b = Bucket{.last = now};  // a full bucket starts refilling from now
    b.used += cost;
    if (!request.peek) {
      state.a = b.last;
      state.b =
          detail::pack32(static_cast<std::uint32_t>(b.used), static_cast<std::uint32_t>(b.frac));
    }
    d.retry_after_ns = 0;
  } else {
    // Short by used - (capacity - cost) tokens (> 0 here, since the bucket is not full).
    d.retry_after_ns =
        fits ? detail::wait_ns(credited_at(b, b.used - (capacity - cost), limit, period), now)
             : kNever;
  }
  d.remaining = detail::saturating_sub(capacity, b.used);
  d.reset_after_ns = detail::wait_ns(full_at(b, limit, period), now);
  return d;
}

std::vector<StateField> detail::token_bucket_fields(const CounterState& state) {
  // The position's fraction (in 1/L ns, below one ns) is left out: it needs the rule to read.
  return {{"used", detail::lo32(state.b)}, {"refill_position", state.a, /*is_time=*/true}};
}

std::uint64_t detail::token_bucket_idle_at_ns(const Rule& rule, const CounterState& state) {
  return detail::saturate_ns(full_at(load(state), rule.limit, rule.period_ns()));
}

std::uint32_t detail::token_bucket_credit(const Rule& rule, CounterState& state,
                                          std::uint32_t units, std::uint64_t since_ns,
                                          std::uint64_t now_ns) {
  const std::uint64_t limit = rule.limit;
  const std::uint64_t period = rule.period_ns();
  Bucket b = refill(state, now_ns, limit, period);
  if (b.used == 0) return 0;
  // Every token the refill credited since the grant may have been credited only because the
  // units were missing (a bucket that would have been full earns nothing): those units are
  // paid back already, and only the rest is credited. While the bucket is not full, tokens come
  // on a grid, one every period / limit ns ending at the refill position: count its points
  // after the grant (in units of 1/limit ns, as the position is).
  const u128 position = u128{b.last} * limit + b.frac;
  const u128 granted_at = u128{now_ns - std::min(now_ns, since_ns)} * limit;
  const u128 earned = position > granted_at ? detail::ceil_div(position - granted_at, period) : 0;
  if (earned >= units) return 0;
  const std::uint64_t owed = units - static_cast<std::uint64_t>(earned);
  const std::uint64_t credited = std::min<std::uint64_t>(owed, b.used);
  if (credited == 0) return 0;
  b.used -= credited;
  if (b.used == 0) {
    state = CounterState{};  // full: where the refill stood no longer matters
  } else {
    state.a = b.last;
    state.b =
        detail::pack32(static_cast<std::uint32_t>(b.used), static_cast<std::uint32_t>(b.frac));
  }
  return static_cast<std::uint32_t>(credited);
}

}  // namespace sluice
