// GCRA (generic cell rate algorithm). Times are kept in units of 1/limit ns, where the
// emission interval period/limit is exactly `period` units, so there is no rounding at all.
// State: the theoretical arrival time TAT = tat_ns + frac / limit ns, stored as
// a = tat_ns (low 64 bits), b = frac (low 32 bits) | tat_ns bits 64..95 (high 32 bits).
// TAT can lie up to burst * period / limit ns ahead of now (2^87 ns with a burst of 2^32-1 and
// a year-long period), hence the extra 32 bits; they are zero for any TAT below 2^64 ns.
#include "core/algorithm_detail.h"
#include "core/algorithms.h"

namespace sluice {
namespace {

using detail::u128;

u128 load_tat(const CounterState& state, std::uint64_t limit) {
  const u128 tat_ns = (u128{detail::hi32(state.b)} << 64) | state.a;
  return tat_ns * limit + detail::lo32(state.b);
}

void store_tat(CounterState& state, u128 tat, std::uint64_t limit) {
  // tat is about now * limit, beyond 64 bits: one 128-bit division gives both parts.
  const u128 tat_ns = tat / limit;
  state.a = static_cast<std::uint64_t>(tat_ns);
  state.b = detail::pack32(static_cast<std::uint32_t>(tat % limit),
                           static_cast<std::uint32_t>(tat_ns >> 64));
}

}  // namespace

Verdict gcra(const Rule& rule, CounterState& state, const Request& request) {
  if (detail::admits_nothing(rule)) return detail::never_decision(rule);
  const std::uint64_t period = rule.period_ns();  // the emission interval, in 1/limit ns
  const std::uint64_t limit = rule.limit;
  const std::uint64_t capacity = rule.capacity();
  const std::uint64_t cost = request.cost;
  const u128 now = u128{request.now_ns} * limit;
  const u128 tolerance = u128{capacity} * period;  // lets `capacity` units through at once

  const u128 tat = load_tat(state, limit);
  const u128 base = tat > now ? tat : now;  // a TAT in the past means a full bucket
  const u128 new_tat = base + u128{cost} * period;
  const bool allowed = new_tat - now <= tolerance;
  if (allowed && !request.peek) store_tat(state, new_tat, limit);

  const u128 tat_after = allowed ? new_tat : tat;
  const u128 horizon = now + tolerance;
  Verdict d;
  d.allowed = allowed;
  d.limit = rule.capacity();
  const u128 used_until = allowed ? new_tat : base;
  d.remaining = horizon > used_until
                    ? static_cast<std::uint32_t>(detail::div64(horizon - used_until, period))
                    : 0;
  d.reset_after_ns = detail::wait_ns(detail::ceil_div(tat_after, limit), request.now_ns);
  if (allowed) {
    d.retry_after_ns = 0;
  } else if (cost > capacity) {
    d.retry_after_ns = kNever;
  } else {
    // Allowed from the first t with TAT + cost*period - t*limit <= tolerance; denied now
    // means TAT > now, so TAT is the base at that t as well.
    const u128 earliest = tat - u128{capacity - cost} * period;
    d.retry_after_ns = detail::wait_ns(detail::ceil_div(earliest, limit), request.now_ns);
  }
  return d;
}

std::vector<StateField> detail::gcra_fields(const CounterState& state) {
  // TAT's bits 64..95 are b's high half: a TAT past 2^64 ns (year 2554) shows as 2^64 - 1.
  const std::uint64_t tat_ns = detail::hi32(state.b) != 0 ? ~std::uint64_t{0} : state.a;
  return {{"tat", tat_ns, /*is_time=*/true}};
}

std::uint64_t detail::gcra_idle_at_ns(const Rule& rule, const CounterState& state) {
  // Full again once now reaches TAT.
  return detail::saturate_ns(detail::ceil_div(load_tat(state, rule.limit), rule.limit));
}

std::uint32_t detail::gcra_credit(const Rule& rule, CounterState& state, std::uint32_t units,
                                  std::uint64_t since_ns, std::uint64_t now_ns) {
  const std::uint64_t period = rule.period_ns();
  const std::uint64_t limit = rule.limit;
  const u128 now = u128{now_ns} * limit;
  const u128 tat = load_tat(state, limit);
  if (tat <= now) return 0;  // full already
  // Each unit moved TAT one emission interval (`period` in these units) ahead. The time since
  // the grant may have paid some of that back already (had the units never been taken, TAT
  // could have fallen behind now and restarted from now): only what is left of it moves TAT
  // back, and never behind now (a TAT in the past is a full bucket).
  const u128 elapsed = u128{since_ns} * limit;
  const u128 taken = u128{units} * period;
  if (elapsed >= taken) return 0;
  const u128 owed = taken - elapsed;
  const u128 ahead = tat - now;
  const u128 back = owed < ahead ? owed : ahead;
  if (back == ahead) {
    state = CounterState{};
  } else {
    store_tat(state, tat - back, limit);
  }
  return static_cast<std::uint32_t>(detail::div64(back, period));  // whole units
}

}  // namespace sluice
