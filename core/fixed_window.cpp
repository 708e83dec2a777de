// Fixed window. State: a = window id + 1 (0 = fresh), b = units admitted in that window.
#include <algorithm>

#include "core/algorithm_detail.h"
#include "core/algorithms.h"

namespace sluice {
namespace {

using detail::u128;

// When the count lapses: at the end of its window. 0 for an empty count.
u128 fresh_at(const CounterState& state, std::uint64_t period) {
  return state.b == 0 ? 0 : u128{state.a} * period;
}

}  // namespace

Verdict fixed_window(const Rule& rule, CounterState& state, const Request& request) {
  if (detail::admits_nothing(rule)) return detail::never_decision(rule);
  const std::uint64_t period = rule.period_ns();
  const std::uint64_t now = request.now_ns;
  const std::uint64_t limit = rule.limit;
  const std::uint64_t cost = request.cost;

  std::uint64_t window = now / period;
  std::uint64_t used = 0;
  if (state.a == window + 1) {
    used = state.b;
  } else if (state.a > window + 1) {
    // The key's clock went back (failover to a node slightly behind): keep counting in the
    // later window rather than opening an earlier one that the key has already left.
    window = state.a - 1;
    used = state.b;
  }

  const bool fits = cost <= limit;
  const bool allowed = fits && used <= limit - cost;
  const std::uint64_t used_after = allowed ? used + cost : used;
  const CounterState after{.a = window + 1, .b = used_after};
  if (allowed && !request.peek) state = after;

  Verdict d;
  d.allowed = allowed;
  d.limit = rule.capacity();
  d.remaining = detail::saturating_sub(limit, used_after);
  d.reset_after_ns = detail::wait_ns(fresh_at(after, period), now);
  // The next window starts empty, and cost <= limit fits in it.
  d.retry_after_ns = allowed ? 0
                     : fits  ? detail::wait_ns((u128{window} + 1) * period, now)
                             : kNever;
  return d;
}

std::vector<StateField> detail::fixed_window_fields(const CounterState& state) {
  // `a` is the counted window's number plus one (0: fresh).
  return {{"window", state.a == 0 ? 0 : state.a - 1}, {"count", state.b}};
}

std::uint64_t detail::fixed_window_idle_at_ns(const Rule& rule, const CounterState& state) {
  return detail::saturate_ns(fresh_at(state, rule.period_ns()));
}

std::uint32_t detail::fixed_window_credit(const Rule&, CounterState& state, std::uint32_t units,
                                          std::uint32_t stamp) {
  // The units were counted in the window the stamp names; any other window's count never had
  // them (and a lapsed one no longer matters).
  if (state.a == 0 || detail::lo32(state.a) != stamp) return 0;
  const std::uint64_t credited = std::min<std::uint64_t>(units, state.b);
  state.b -= credited;
  return static_cast<std::uint32_t>(credited);
}

}  // namespace sluice
