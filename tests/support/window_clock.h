// Windows on the UTC clock, for tests against a node that decides on the real clock (a sluiced
// or sluice-gateway child process, an in-process server without a manual clock). Fixed and
// sliding windows are aligned to the epoch (window = now / period, core/fixed_window.cpp), and
// Envoy's `unit:` limits to their unit: at each multiple of the period every key starts afresh.
// A test whose counts must hold for its whole run either uses a window that no boundary crosses
// while it runs (steady_period_ms) or, where the unit is what it tests, waits before it counts
// until the current window has room for the run (wait_for_window_room).
#pragma once

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <thread>

namespace sluice::test {

// Milliseconds since the Unix epoch on the system clock, the clock the nodes align windows to.
inline std::uint64_t unix_now_ms() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                        std::chrono::system_clock::now().time_since_epoch())
                                        .count());
}

// A whole number of hours, 3 or more, whose current window has at least two hours left when
// first asked. Once per process, so that every rule of a test is the same one.
inline std::uint64_t steady_period_ms() {
  static const std::uint64_t period = [] {
    constexpr std::uint64_t kHourMs = 3'600'000;
    const std::uint64_t now_ms = unix_now_ms();
    std::uint64_t hours = 3;
    while (hours * kHourMs - now_ms % (hours * kHourMs) < 2 * kHourMs) ++hours;
    return hours * kHourMs;
  }();
  return period;
}

// The end of the current window of `period` once it has at least `room` left: at once when it
// has, else after sleeping to the start of the next window (which has the whole period). The
// test must count only after it returns, and be done before the end it returns.
// REQUIRES: 0 < room < period.
inline std::chrono::system_clock::time_point wait_for_window_room(std::chrono::milliseconds period,
                                                                  std::chrono::milliseconds room) {
  if (room.count() <= 0 || room >= period) {
    throw std::invalid_argument("wait_for_window_room: room must be within the period");
  }
  const auto period_ms = static_cast<std::uint64_t>(period.count());
  for (;;) {
    const std::uint64_t now_ms = unix_now_ms();
    const std::uint64_t end_ms = (now_ms / period_ms + 1) * period_ms;
    if (end_ms - now_ms >= static_cast<std::uint64_t>(room.count())) {
      return std::chrono::system_clock::time_point(std::chrono::milliseconds(end_ms));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(end_ms - now_ms + 1));
  }
}

}  // namespace sluice::test
