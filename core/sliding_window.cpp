// Sliding window counter. State: a = window id + 1 (0 = fresh), b = units admitted in that
// window (low 32 bits) | units admitted in the window before it (high 32 bits).
#include <algorithm>

#include "core/algorithm_detail.h"
#include "core/algorithms.h"

namespace sluice {
namespace {

using detail::u128;

// The key's counts seen from window `window`, `elapsed` ns into it.
struct WindowView {
  std::uint64_t window = 0;
  std::uint64_t elapsed = 0;
  std::uint64_t current = 0;
  std::uint64_t previous = 0;
};

WindowView view_at(const CounterState& state, std::uint64_t now, std::uint64_t period) {
  WindowView v{.window = now / period, .elapsed = now % period};
  if (state.a > v.window + 1) {
    // The key's clock went back: read the state from the start of its own (later) window.
    v.window = state.a - 1;
    v.elapsed = 0;
  }
  if (state.a == v.window + 1) {
    v.current = detail::lo32(state.b);
    v.previous = detail::hi32(state.b);
  } else if (state.a != 0 && state.a == v.window) {
    v.previous = detail::lo32(state.b);  // the stored window has just become the previous one
  }
  return v;
}

// Units counted at `elapsed` ns into a window: all of the current window plus the previous
// window weighted by how much of it still overlaps the trailing period, rounded up.
std::uint64_t weighted_used(std::uint64_t current, std::uint64_t previous, std::uint64_t elapsed,
                            std::uint64_t period) {
  const u128 weighted = detail::ceil_div(u128{previous} * (period - elapsed), period);
  return current + static_cast<std::uint64_t>(weighted);
}

// When neither count weighs any more: the window's own count weighs until the end of the next
// window, the previous count until the end of this one. 0 when both are empty.
u128 fresh_at(const CounterState& state, std::uint64_t period) {
  if (detail::lo32(state.b) != 0) return (u128{state.a} + 1) * period;
  if (detail::hi32(state.b) != 0) return u128{state.a} * period;
  return 0;
}

// The first absolute time (ns) at which `cost` units fit, given that they do not fit now and
// that cost <= limit. Used count only decreases over time, so the first time that fits is
// found by looking at this window, then the next, and the one after (which is always empty).
u128 first_fit_time(const WindowView& v, std::uint64_t limit, std::uint64_t cost,
                    std::uint64_t period) {
  const u128 start = u128{v.window} * period;
  if (v.current + cost <= limit && v.previous != 0) {
    // In this window: need ceil(previous * (period - e) / period) <= room, that is
    // e >= period - floor(room * period / previous).
    const u128 room = limit - cost - v.current;
    const u128 e = period - detail::div64(room * period, v.previous);
    if (e < period) return start + e;
  }
  // In the next window `current` becomes the previous count and decays the same way.
  const u128 room = limit - cost;
  if (v.current <= room) return start + period;
  const u128 e = period - detail::div64(room * period, v.current);
  if (e < period) return start + period + e;
  return start + 2 * u128{period};
}

}  // namespace

Verdict sliding_window(const Rule& rule, CounterState& state, const Request& request) {
  if (detail::admits_nothing(rule)) return detail::never_decision(rule);
  const std::uint64_t period = rule.period_ns();
  const std::uint64_t now = request.now_ns;
  const std::uint64_t limit = rule.limit;
  const std::uint64_t cost = request.cost;

  const WindowView v = view_at(state, now, period);
  const std::uint64_t used = weighted_used(v.current, v.previous, v.elapsed, period);
  const bool fits = cost <= limit;
  const bool allowed = fits && used <= limit - cost;
  const std::uint64_t current_after = allowed ? v.current + cost : v.current;
  const CounterState after{.a = v.window + 1,
                           .b = detail::pack32(static_cast<std::uint32_t>(current_after),
                                               static_cast<std::uint32_t>(v.previous))};
  if (allowed && !request.peek) state = after;

  Verdict d;
  d.allowed = allowed;
  d.limit = rule.capacity();
  d.remaining = detail::saturating_sub(limit, allowed ? used + cost : used);
  d.reset_after_ns = detail::wait_ns(fresh_at(after, period), now);
  d.retry_after_ns = allowed ? 0
                     : fits  ? detail::wait_ns(first_fit_time(v, limit, cost, period), now)
                             : kNever;
  return d;
}

std::vector<StateField> detail::sliding_window_fields(const CounterState& state) {
  return {{"window", state.a == 0 ? 0 : state.a - 1},
          {"current", detail::lo32(state.b)},
          {"previous", detail::hi32(state.b)}};
}

std::uint64_t detail::sliding_window_idle_at_ns(const Rule& rule, const CounterState& state) {
  return detail::saturate_ns(fresh_at(state, rule.period_ns()));
}

std::uint32_t detail::sliding_window_credit(const Rule&, CounterState& state, std::uint32_t units,
                                            std::uint32_t stamp) {
  if (state.a == 0) return 0;
  std::uint64_t current = detail::lo32(state.b);
  std::uint64_t previous = detail::hi32(state.b);
  std::uint64_t credited = 0;
  if (detail::lo32(state.a) == stamp) {
    // Still the stored window (now, or as the previous one of a window not stored yet).
    credited = std::min<std::uint64_t>(units, current);
    current -= credited;
  } else if (detail::lo32(state.a) == stamp + 1) {
    // A later request rolled the window on: the units are in the previous count now.
    credited = std::min<std::uint64_t>(units, previous);
    previous -= credited;
  }
  state.b =
      detail::pack32(static_cast<std::uint32_t>(current), static_cast<std::uint32_t>(previous));
  return static_cast<std::uint32_t>(credited);
}

}  // namespace sluice
