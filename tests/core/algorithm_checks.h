// Shared checks for the algorithm tests: step tables, peek equivalence and exact retry_after.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <ostream>
#include <vector>

#include "core/algorithms.h"

namespace sluice {

inline std::ostream& operator<<(std::ostream& os, const Verdict& d) {
  return os << "{allowed=" << d.allowed << " limit=" << d.limit << " remaining=" << d.remaining
            << " reset_after_ns=" << d.reset_after_ns << " retry_after_ns=" << d.retry_after_ns
            << "}";
}

namespace test {

inline constexpr std::uint64_t kMs = 1'000'000;
inline constexpr std::uint64_t kSec = 1'000'000'000;

using StateAlgorithm = Verdict (*)(const Rule&, CounterState&, const Request&);

// A sliding log that owns its ring, so tests can copy it.
struct OwnedLog {
  explicit OwnedLog(std::size_t size) : ring(size) {}
  std::vector<std::uint64_t> ring;
  std::uint32_t head = 0;
  std::uint32_t count = 0;

  Verdict step(const Rule& rule, const Request& request) {
    SlidingLog log{.ring = ring, .head = head, .count = count};
    const Verdict d = sliding_log(rule, log, request);
    head = log.head;
    count = log.count;
    return d;
  }
  std::uint64_t idle_at(const Rule& rule) const {
    std::vector<std::uint64_t> copy = ring;
    return sliding_log_idle_at_ns(rule, SlidingLog{.ring = copy, .head = head, .count = count});
  }
  bool operator==(const OwnedLog&) const = default;
};

// One algorithm behind one interface, so the same checks run over all five.
struct Subject {
  StateAlgorithm algorithm = nullptr;  // null means the sliding log
  CounterState state;
  OwnedLog log{0};

  static Subject of(StateAlgorithm algorithm) {
    Subject s;
    s.algorithm = algorithm;
    return s;
  }
  static Subject sliding(std::size_t ring_size) {
    Subject s;
    s.log = OwnedLog(ring_size);
    return s;
  }

  Verdict step(const Rule& rule, const Request& request) {
    return algorithm != nullptr ? algorithm(rule, state, request) : log.step(rule, request);
  }
  // The answer at `now` for `cost`, on a copy: the subject is untouched.
  Verdict peek(const Rule& rule, std::uint64_t now, std::uint32_t cost) const {
    Subject copy = *this;
    return copy.step(rule, Request{.now_ns = now, .cost = cost, .peek = true});
  }
  std::uint64_t idle_at(const Rule& rule) const {
    return algorithm != nullptr ? idle_at_ns(rule, state) : log.idle_at(rule);
  }
  Subject fresh() const { return algorithm != nullptr ? of(algorithm) : sliding(log.ring.size()); }
  bool operator==(const Subject&) const = default;
};

// A denied request's retry_after is exact: allowed at now + retry, still denied 1 ns earlier.
inline void check_retry_is_exact(const Subject& s, const Rule& rule, std::uint64_t now,
                                 std::uint32_t cost, const Verdict& denied) {
  if (denied.allowed || denied.retry_after_ns == kNever) return;
  REQUIRE(denied.retry_after_ns > 0);
  INFO("now=" << now << " cost=" << cost << " retry=" << denied.retry_after_ns);
  CHECK(s.peek(rule, now + denied.retry_after_ns, cost).allowed);
  CHECK_FALSE(s.peek(rule, now + denied.retry_after_ns - 1, cost).allowed);
}

// Makes the request, after checking that a peek first answers the same and changes nothing,
// and that a denial's retry_after is exact.
inline Verdict checked_step(Subject& s, const Rule& rule, std::uint64_t now, std::uint32_t cost) {
  const Subject before = s;
  const Verdict peeked = s.step(rule, Request{.now_ns = now, .cost = cost, .peek = true});
  REQUIRE(s == before);
  check_retry_is_exact(s, rule, now, cost, peeked);
  const Verdict d = s.step(rule, Request{.now_ns = now, .cost = cost});
  CHECK(d == peeked);
  if (!d.allowed) CHECK(s.peek(rule, now, cost) == before.peek(rule, now, cost));
  return d;
}

struct Step {
  std::uint64_t now_ns;
  std::uint32_t cost;
  bool allowed;
  std::uint32_t remaining;
  std::uint64_t reset_after_ns;
  std::uint64_t retry_after_ns;
};

// Runs the steps in order on a fresh subject and compares every decision field.
inline void run_table(Subject s, const Rule& rule, const std::vector<Step>& steps) {
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const Step& step = steps[i];
    INFO("step " << i << ": now_ns=" << step.now_ns << " cost=" << step.cost);
    const Verdict expected{.allowed = step.allowed,
                           .limit = rule.capacity(),
                           .remaining = step.remaining,
                           .reset_after_ns = step.reset_after_ns,
                           .retry_after_ns = step.retry_after_ns};
    CHECK(checked_step(s, rule, step.now_ns, step.cost) == expected);
  }
}

// From `idle_at_ns` the subject answers exactly like a fresh key for every cost, and at
// idle_at - 1 it does not yet (idle_at is the earliest such time).
inline void check_idle_at_is_tight(const Subject& s, const Rule& rule) {
  const std::uint64_t idle = s.idle_at(rule);
  REQUIRE(idle > 0);
  const Subject fresh = s.fresh();
  bool differs_before = false;
  for (std::uint32_t cost = 1; cost <= rule.capacity() + 1; ++cost) {
    INFO("idle_at=" << idle << " cost=" << cost);
    CHECK(s.peek(rule, idle, cost) == fresh.peek(rule, idle, cost));
    CHECK(s.peek(rule, idle + 12345, cost) == fresh.peek(rule, idle + 12345, cost));
    differs_before |= s.peek(rule, idle - 1, cost) != fresh.peek(rule, idle - 1, cost);
  }
  CHECK(differs_before);
}

}  // namespace test
}  // namespace sluice
