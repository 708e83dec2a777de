#include <catch2/catch.hpp>

#include "tests/core/algorithm_checks.h"

namespace sluice {
namespace {

using test::kMs;
using test::kSec;
using test::run_table;
using test::Step;
using test::Subject;

const Rule kTenPerSecond{.algorithm = Algorithm::kSlidingWindow, .limit = 10, .period_ms = 1000};

TEST_CASE("sliding window weighs the previous window by its remaining overlap",
          "[sliding_window]") {
  run_table(
      Subject::of(sliding_window), kTenPerSecond,
      {
          // Window 0. The current count weighs until the end of window 1.
          {500 * kMs, 4, true, 6, 1500 * kMs, 0},
          {900 * kMs, 6, true, 0, 1100 * kMs, 0},
          // Full; in window 1 the 10 weigh ceil(10 * (1 s - e) / 1 s), <= 9 from e = 100 ms.
          {950 * kMs, 1, false, 0, 1050 * kMs, 150 * kMs},
          // Window 1 opens with used = 10: no second burst at the boundary.
          {1000 * kMs, 1, false, 0, 1000 * kMs, 100 * kMs},
          {1100 * kMs, 1, true, 0, 1900 * kMs, 0},
          // used = 1 + ceil(10 * 0.75) = 9; 2 more fit once ceil(10 * (1 - e)) <= 7: e = 300 ms.
          {1250 * kMs, 2, false, 1, 1750 * kMs, 50 * kMs},
          {1250 * kMs, 1, true, 0, 1750 * kMs, 0},
          // Window 2: previous = 2 weighs ceil(2 * 0.5) = 1; 10 fit only once it is gone.
          {2500 * kMs, 10, false, 9, 500 * kMs, 500 * kMs},
          {2500 * kMs, 11, false, 9, 500 * kMs, kNever},
          // Window 4: everything has lapsed.
          {4000 * kMs, 10, true, 0, 2000 * kMs, 0},
      });
}

TEST_CASE("sliding window does not let 2N through around a boundary", "[sliding_window]") {
  const Rule rule{.algorithm = Algorithm::kSlidingWindow, .limit = 100, .period_ms = 1000};
  CounterState state;
  int before = 0;
  for (int i = 0; i < 200; ++i) {
    before += sliding_window(rule, state, Request{.now_ns = 999 * kMs}).allowed;
  }
  CHECK(before == 100);
  // Just after the boundary the previous 100 still weigh ceil(100 * 0.998) = 100.
  int after = 0;
  for (int i = 0; i < 200; ++i) {
    after += sliding_window(rule, state, Request{.now_ns = 1002 * kMs}).allowed;
  }
  CHECK(after == 0);
  // A tenth into the window, ceil(100 * 0.9) = 90 weigh: 10 more.
  for (int i = 0; i < 200; ++i) {
    after += sliding_window(rule, state, Request{.now_ns = 1100 * kMs}).allowed;
  }
  CHECK(after == 10);
}

TEST_CASE("sliding window retry after crosses into the next window", "[sliding_window]") {
  Subject s = Subject::of(sliding_window);
  // 10 at 0.7 s fill window 0; a request of 3 at 0.8 s fits once ceil(10 * (1 - e)) <= 7,
  // that is 0.3 s into window 1.
  s.step(kTenPerSecond, Request{.now_ns = 700 * kMs, .cost = 10});
  const Verdict d = test::checked_step(s, kTenPerSecond, 800 * kMs, 3);
  CHECK_FALSE(d.allowed);
  CHECK(d.retry_after_ns == 500 * kMs);
  // A request of the full limit waits for the whole of window 1 to pass.
  CHECK(s.peek(kTenPerSecond, 800 * kMs, 10).retry_after_ns == 1200 * kMs);
}

TEST_CASE("sliding window retry after rounds up to the exact nanosecond", "[sliding_window]") {
  // Period 3 ms: the previous count decays in steps that are not whole nanoseconds.
  const Rule rule{.algorithm = Algorithm::kSlidingWindow, .limit = 7, .period_ms = 3};
  Subject s = Subject::of(sliding_window);
  s.step(rule, Request{.now_ns = 2 * kMs, .cost = 7});
  for (std::uint64_t now : {3 * kMs, 3 * kMs + 1, 4 * kMs + 333'333, 5 * kMs + 999'999}) {
    for (std::uint32_t cost = 1; cost <= 7; ++cost) {
      const Verdict d = s.peek(rule, now, cost);
      test::check_retry_is_exact(s, rule, now, cost, d);
    }
  }
}

TEST_CASE("sliding window peek answers without counting", "[sliding_window]") {
  CounterState state;
  sliding_window(kTenPerSecond, state, Request{.now_ns = 500 * kMs, .cost = 9});
  const CounterState before = state;
  const Verdict d =
      sliding_window(kTenPerSecond, state, Request{.now_ns = 1500 * kMs, .cost = 5, .peek = true});
  CHECK(d.allowed);
  CHECK(d.remaining == 0);  // 10 - ceil(9 * 0.5) - 5
  CHECK(state == before);
}

TEST_CASE("sliding window: a zeroed state is a fresh key", "[sliding_window]") {
  CounterState state;
  sliding_window(kTenPerSecond, state, Request{.now_ns = 500 * kMs, .cost = 10});
  state = CounterState{};
  CHECK(sliding_window(kTenPerSecond, state, Request{.now_ns = 500 * kMs, .cost = 10}).allowed);
}

TEST_CASE("sliding window state is idle once neither window weighs", "[sliding_window]") {
  Subject s = Subject::of(sliding_window);
  s.step(kTenPerSecond, Request{.now_ns = 1500 * kMs, .cost = 3});
  CHECK(s.idle_at(kTenPerSecond) == 3 * kSec);  // weighs through window 2
  test::check_idle_at_is_tight(s, kTenPerSecond);

  // A state whose own window is empty but whose previous window is not.
  CounterState only_previous;
  sliding_window(kTenPerSecond, only_previous, Request{.now_ns = 500 * kMs, .cost = 4});
  sliding_window(kTenPerSecond, only_previous, Request{.now_ns = 1500 * kMs, .cost = 1});
  only_previous.b &= ~0xffffffffull;  // keep window 1 with its previous count of 4 only
  Subject p = Subject::of(sliding_window);
  p.state = only_previous;
  CHECK(p.idle_at(kTenPerSecond) == 2 * kSec);
  test::check_idle_at_is_tight(p, kTenPerSecond);
}

}  // namespace
}  // namespace sluice
