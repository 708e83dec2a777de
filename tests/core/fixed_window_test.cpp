#include <catch2/catch.hpp>

#include "tests/core/algorithm_checks.h"

namespace sluice {
namespace {

using test::kMs;
using test::kSec;
using test::run_table;
using test::Step;
using test::Subject;

const Rule kThreePerSecond{.algorithm = Algorithm::kFixedWindow, .limit = 3, .period_ms = 1000};

TEST_CASE("fixed window counts per clock-aligned window and refuses what does not fit",
          "[fixed_window]") {
  // Window 10 is [10 s, 11 s).
  run_table(Subject::of(fixed_window), kThreePerSecond,
            {
                {10'000 * kMs, 1, true, 2, 1000 * kMs, 0},
                {10'200 * kMs, 1, true, 1, 800 * kMs, 0},
                {10'400 * kMs, 2, false, 1, 600 * kMs, 600 * kMs},  // one left, two asked
                {10'400 * kMs, 1, true, 0, 600 * kMs, 0},           // exactly the remainder
                {11 * kSec - 1, 1, false, 0, 1, 1},
                {11'000 * kMs, 3, true, 0, 1000 * kMs, 0},       // new window, full again
                {11'500 * kMs, 4, false, 0, 500 * kMs, kNever},  // more than the limit
            });
}

TEST_CASE("fixed window lets 2N through around a boundary", "[fixed_window]") {
  const Rule rule{.algorithm = Algorithm::kFixedWindow, .limit = 5, .period_ms = 1000};
  CounterState state;
  int admitted = 0;
  for (int i = 0; i < 10; ++i) {
    admitted += fixed_window(rule, state, Request{.now_ns = 999 * kMs}).allowed;
  }
  for (int i = 0; i < 10; ++i) {
    admitted += fixed_window(rule, state, Request{.now_ns = 1001 * kMs}).allowed;
  }
  CHECK(admitted == 10);  // all within 2 ms
}

TEST_CASE("fixed window peek answers without counting", "[fixed_window]") {
  CounterState state;
  fixed_window(kThreePerSecond, state, Request{.now_ns = 5 * kSec, .cost = 2});
  const CounterState before = state;
  for (int i = 0; i < 5; ++i) {
    const Verdict d =
        fixed_window(kThreePerSecond, state, Request{.now_ns = 5 * kSec, .cost = 1, .peek = true});
    CHECK(d.allowed);
    CHECK(d.remaining == 0);
  }
  CHECK(state == before);
}

TEST_CASE("fixed window: a zeroed state is a fresh key", "[fixed_window]") {
  CounterState state;
  fixed_window(kThreePerSecond, state, Request{.now_ns = 5 * kSec, .cost = 3});
  CHECK_FALSE(fixed_window(kThreePerSecond, state, Request{.now_ns = 5 * kSec}).allowed);
  state = CounterState{};
  const Verdict d = fixed_window(kThreePerSecond, state, Request{.now_ns = 5 * kSec});
  CHECK(d.allowed);
  CHECK(d.remaining == 2);
}

TEST_CASE("fixed window state is idle from the end of its window", "[fixed_window]") {
  Subject s = Subject::of(fixed_window);
  CHECK(s.idle_at(kThreePerSecond) == 0);
  s.step(kThreePerSecond, Request{.now_ns = 7'300 * kMs, .cost = 2});
  CHECK(s.idle_at(kThreePerSecond) == 8 * kSec);
  test::check_idle_at_is_tight(s, kThreePerSecond);
}

TEST_CASE("fixed window keeps its later window when the clock steps back", "[fixed_window]") {
  CounterState state;
  fixed_window(kThreePerSecond, state, Request{.now_ns = 2 * kSec, .cost = 3});
  const Verdict d = fixed_window(kThreePerSecond, state, Request{.now_ns = 2 * kSec - 1});
  CHECK_FALSE(d.allowed);
  CHECK(d.retry_after_ns == kSec + 1);  // until the end of the key's own window
}

}  // namespace
}  // namespace sluice
