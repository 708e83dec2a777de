// Time source. Algorithms take `now_ns` as an argument; whoever calls them owns a Clock.
// Time is wall-clock nanoseconds since the Unix epoch so that every node computes the same
// window (window = floor(now / period)).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>

namespace sluice {

// CLOCK_MONOTONIC in nanoseconds, from an arbitrary start: the one reading of the monotonic
// clock for deadlines, timeouts, fences and latencies, which a step of the wall clock must not
// move. Never for windows (those are wall-clock time, the same on every node).
inline std::uint64_t monotonic_now_ns() {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::steady_clock::now().time_since_epoch())
                                        .count());
}

// CLOCK_BOOTTIME in nanoseconds: CLOCK_MONOTONIC that keeps counting while the machine is
// suspended. The fence of etcd mode reads it: etcd's lease expires by etcd's clock, which does
// not stop when this machine sleeps, so a fence deadline on a clock that stopped would let a
// resumed node decide past it.
inline std::uint64_t boottime_now_ns() {
  timespec now{};
  ::clock_gettime(CLOCK_BOOTTIME, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(now.tv_nsec);
}

class Clock {
 public:
  virtual ~Clock() = default;
  virtual std::uint64_t now_ns() const = 0;
};

class SystemClock final : public Clock {
 public:
  std::uint64_t now_ns() const override;
  static const SystemClock& instance();
};

// monotonic_now_ns() behind the Clock interface: for durations that a wall-clock step must not
// stretch (a client's leases) where a test may give a ManualClock instead.
class MonotonicClock final : public Clock {
 public:
  std::uint64_t now_ns() const override;
  static const MonotonicClock& instance();
};

// A clock that moves only when told to: tests use it to be exact and fast.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(std::uint64_t start_ns = 0) : now_(start_ns) {}
  std::uint64_t now_ns() const override { return now_.load(std::memory_order_relaxed); }
  void set_ns(std::uint64_t t) { now_.store(t, std::memory_order_relaxed); }
  void advance_ns(std::uint64_t d) { now_.fetch_add(d, std::memory_order_relaxed); }
  void advance_ms(std::uint64_t d) { advance_ns(d * 1'000'000ull); }

 private:
  std::atomic<std::uint64_t> now_;
};

}  // namespace sluice
