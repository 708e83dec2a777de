#include "core/clock.h"

#include <chrono>

namespace sluice {

std::uint64_t SystemClock::now_ns() const {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch).count());
}

const SystemClock& SystemClock::instance() {
  static const SystemClock clock;
  return clock;
}

std::uint64_t MonotonicClock::now_ns() const { return monotonic_now_ns(); }

const MonotonicClock& MonotonicClock::instance() {
  static const MonotonicClock clock;
  return clock;
}

}  // namespace sluice
