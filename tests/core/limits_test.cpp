// Edges shared by every algorithm: limit 0, costs above the capacity, and the extremes of
// limit, burst, period and now.
#include <catch2/catch.hpp>

#include <string>

#include "tests/core/algorithm_checks.h"

namespace sluice {
namespace {

using test::kSec;
using test::Subject;

constexpr std::uint32_t kMaxU32 = 0xffff'ffff;
constexpr std::uint64_t kMaxU64 = ~std::uint64_t{0};

struct Case {
  std::string name;
  Algorithm algorithm;
  Subject subject;
};

std::vector<Case> all_algorithms(std::size_t log_size) {
  return {
      {"fixed_window", Algorithm::kFixedWindow, Subject::of(fixed_window)},
      {"sliding_window", Algorithm::kSlidingWindow, Subject::of(sliding_window)},
      {"token_bucket", Algorithm::kTokenBucket, Subject::of(token_bucket)},
      {"gcra", Algorithm::kGcra, Subject::of(gcra)},
      {"sliding_log", Algorithm::kSlidingLog, Subject::sliding(log_size)},
  };
}

TEST_CASE("a limit of 0 denies everything, forever, and changes nothing", "[limits]") {
  for (Case c : all_algorithms(4)) {
    for (std::uint32_t burst : {0u, 5u}) {
      INFO(c.name << " burst=" << burst);
      const Rule rule{.algorithm = c.algorithm, .limit = 0, .period_ms = 1000, .burst = burst};
      const Subject before = c.subject;
      const Verdict d = c.subject.step(rule, Request{.now_ns = 3 * kSec});
      CHECK_FALSE(d.allowed);
      CHECK(d.remaining == 0);
      CHECK(d.retry_after_ns == kNever);
      CHECK(d.limit == rule.capacity());
      CHECK(c.subject == before);
    }
  }
}

TEST_CASE("a cost above the capacity is never admitted and consumes nothing", "[limits]") {
  for (Case c : all_algorithms(10)) {
    INFO(c.name);
    const Rule rule{.algorithm = c.algorithm, .limit = 10, .period_ms = 1000};
    c.subject.step(rule, Request{.now_ns = kSec, .cost = 4});
    const Subject before = c.subject;
    const Verdict d = c.subject.step(rule, Request{.now_ns = kSec, .cost = 11});
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_after_ns == kNever);
    CHECK(d.remaining == 6);
    CHECK(c.subject == before);
    CHECK(c.subject.step(rule, Request{.now_ns = kSec, .cost = 6}).allowed);
  }
}

TEST_CASE("an invalid period denies instead of dividing by zero", "[limits]") {
  for (Case c : all_algorithms(4)) {
    for (std::uint64_t period_ms : {std::uint64_t{0}, kMaxPeriodMs + 1, kMaxU64}) {
      INFO(c.name << " period_ms=" << period_ms);
      const Rule rule{.algorithm = c.algorithm, .limit = 4, .period_ms = period_ms};
      const Verdict d = c.subject.step(rule, Request{.now_ns = kSec});
      CHECK_FALSE(d.allowed);
      CHECK(d.retry_after_ns == kNever);
    }
  }
}

TEST_CASE("the largest limit and period neither overflow nor lose exactness, at any now",
          "[limits]") {
  // Times close to 2^64 leave room for two periods, so that now + retry_after is a time.
  const std::uint64_t max_period_ns = kMaxPeriodMs * 1'000'000;
  const std::uint64_t nows[] = {
      0, 1, (1ull << 63) - 1, 1ull << 63, (1ull << 63) + 123'456'789, kMaxU64 - 2 * max_period_ns};
  for (Case c : all_algorithms(kDefaultSlidingLogCap)) {
    const std::uint32_t limit =
        c.algorithm == Algorithm::kSlidingLog ? kDefaultSlidingLogCap : kMaxU32;
    const Rule rule{.algorithm = c.algorithm, .limit = limit, .period_ms = kMaxPeriodMs};
    REQUIRE(validate(rule, 1) == RuleError::kOk);
    for (std::uint64_t now : nows) {
      INFO(c.name << " now=" << now);
      Subject s = c.subject;
      const Verdict all = test::checked_step(s, rule, now, limit);
      CHECK(all.allowed);
      CHECK(all.remaining == 0);
      CHECK(all.reset_after_ns > 0);
      CHECK(all.reset_after_ns <= 2 * max_period_ns);
      if (s.algorithm != nullptr) CHECK(idle_at_after(rule, s.state, all, now) == s.idle_at(rule));
      const Verdict one_more = test::checked_step(s, rule, now + 1, 1);
      CHECK_FALSE(one_more.allowed);
      CHECK(one_more.retry_after_ns > 0);
      CHECK(one_more.retry_after_ns <= 2 * max_period_ns);
      CHECK(s.idle_at(rule) > now);
    }
  }
}

TEST_CASE("a burst of 2^32-1 at one unit a year: the arrival time goes past 2^64 ns", "[limits]") {
  for (Algorithm algorithm : {Algorithm::kTokenBucket, Algorithm::kGcra}) {
    INFO(algorithm_name(algorithm));
    const Rule rule{
        .algorithm = algorithm, .limit = 1, .period_ms = kMaxPeriodMs, .burst = kMaxU32};
    const std::uint64_t period = rule.period_ns();
    const std::uint64_t now = 1ull << 63;
    CounterState state;
    const Verdict all = decide(rule, state, Request{.now_ns = now, .cost = kMaxU32});
    CHECK(all.allowed);
    CHECK(all.limit == kMaxU32);
    CHECK(all.remaining == 0);
    CHECK(all.reset_after_ns == kMaxWaitNs);  // 2^32-1 years, saturated
    CHECK(idle_at_ns(rule, state) == kMaxWaitNs);
    // The verdict's reset_after is saturated: the expiry is not taken from it.
    CHECK(idle_at_after(rule, state, all, now) == kMaxWaitNs);
    // Nor at the clock's last values, where now + reset_after would wrap.
    for (const std::uint64_t late : {kMaxWaitNs, kNever}) {
      CHECK(idle_at_after(rule, state, Verdict{.reset_after_ns = 1}, late) ==
            idle_at_ns(rule, state));
    }

    Subject s = Subject::of(algorithm == Algorithm::kGcra ? gcra : token_bucket);
    s.state = state;
    const Verdict one = test::checked_step(s, rule, now, 1);
    CHECK(one.retry_after_ns == period);
    const Verdict refilled = test::checked_step(s, rule, now + period, 1);
    CHECK(refilled.allowed);
    CHECK(refilled.remaining == 0);
    CHECK(s.peek(rule, now + period, kMaxU32).retry_after_ns == kMaxWaitNs);
  }
}

TEST_CASE("the largest limit and burst with the shortest period: sub-nanosecond intervals",
          "[limits]") {
  for (Case c : all_algorithms(1)) {
    if (c.algorithm == Algorithm::kSlidingLog) continue;
    INFO(c.name);
    const Rule rule{.algorithm = c.algorithm, .limit = kMaxU32, .period_ms = 1, .burst = kMaxU32};
    Subject s = c.subject;
    const std::uint64_t now = (1ull << 63) + 999'999;
    CHECK(test::checked_step(s, rule, now, kMaxU32).allowed);
    const Verdict d = test::checked_step(s, rule, now, 1);
    CHECK_FALSE(d.allowed);
    if (c.algorithm == Algorithm::kTokenBucket || c.algorithm == Algorithm::kGcra) {
      CHECK(d.retry_after_ns == 1);  // ceil(1 ms / (2^32-1))
    }
  }
}

TEST_CASE("a now of 2^64-1 answers without wrapping", "[limits]") {
  for (Case c : all_algorithms(10)) {
    INFO(c.name);
    const Rule rule{.algorithm = c.algorithm, .limit = 10, .period_ms = kMaxPeriodMs};
    Subject s = c.subject;
    CHECK(s.step(rule, Request{.now_ns = kMaxU64, .cost = 10}).allowed);
    const Verdict d = s.step(rule, Request{.now_ns = kMaxU64, .cost = 1});
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_after_ns > 0);
    CHECK(d.retry_after_ns <= 2 * rule.period_ns());
    CHECK(s.idle_at(rule) == kMaxWaitNs);
  }
}

TEST_CASE("decide dispatches on the rule's algorithm", "[limits]") {
  const Request request{.now_ns = 5 * kSec, .cost = 2};
  for (Case c : all_algorithms(1)) {
    if (c.algorithm == Algorithm::kSlidingLog) continue;
    INFO(c.name);
    const Rule rule{.algorithm = c.algorithm, .limit = 3, .period_ms = 1000};
    CounterState via_decide;
    const Verdict d = decide(rule, via_decide, request);
    CHECK(d == c.subject.step(rule, request));
    CHECK(via_decide == c.subject.state);
  }
  const Rule log_rule{.algorithm = Algorithm::kSlidingLog, .limit = 3, .period_ms = 1000};
  CounterState untouched;
  CHECK(decide(log_rule, untouched, request).retry_after_ns == kNever);
  CHECK(untouched == CounterState{});
  CHECK(idle_at_ns(log_rule, CounterState{.a = 1, .b = 1}) == 0);
}

}  // namespace
}  // namespace sluice
