#include <catch2/catch.hpp>

#include "tests/core/algorithm_checks.h"

namespace sluice {
namespace {

using test::kMs;
using test::kSec;
using test::run_table;
using test::Step;
using test::Subject;

// Emission interval T = 500 ms, tolerance 4 T = 2 s: four at once on a fresh key.
const Rule kTwoPerSecondBurstFour{
    .algorithm = Algorithm::kGcra, .limit = 2, .period_ms = 1000, .burst = 4};

TEST_CASE("gcra admits while the theoretical arrival time stays within the tolerance", "[gcra]") {
  run_table(Subject::of(gcra), kTwoPerSecondBurstFour,
            {
                {10'000 * kMs, 3, true, 1, 1500 * kMs, 0},  // TAT 11.5 s
                // TAT would be 12.5 s, 2.4 s ahead > 2 s; fine from 10.5 s.
                {10'100 * kMs, 2, false, 1, 1400 * kMs, 400 * kMs},
                {10'100 * kMs, 1, true, 0, 1900 * kMs, 0},           // TAT 12 s
                {10'750 * kMs, 1, true, 0, 1750 * kMs, 0},           // TAT 12.5 s
                {11'200 * kMs, 2, false, 1, 1300 * kMs, 300 * kMs},  // fine from 11.5 s
                {20'000 * kMs, 4, true, 0, 2000 * kMs, 0},
                {20'000 * kMs, 5, false, 0, 2000 * kMs, kNever},
            });
}

TEST_CASE("gcra burst defaults to the limit", "[gcra]") {
  const Rule rule{.algorithm = Algorithm::kGcra, .limit = 5, .period_ms = 1000};
  run_table(Subject::of(gcra), rule,
            {
                {0, 5, true, 0, 1000 * kMs, 0},
                {0, 1, false, 0, 1000 * kMs, 200 * kMs},
                {200 * kMs, 1, true, 0, 1000 * kMs, 0},
            });
}

TEST_CASE("gcra keeps the emission interval as an exact fraction", "[gcra]") {
  // T = 333,333,333 1/3 ns: waits round up to whole nanoseconds, and nothing drifts.
  const Rule rule{.algorithm = Algorithm::kGcra, .limit = 3, .period_ms = 1000, .burst = 1};
  run_table(Subject::of(gcra), rule,
            {
                {0, 1, true, 0, 333'333'334, 0},
                {1, 1, false, 0, 333'333'333, 333'333'333},
                {333'333'334, 1, true, 0, 333'333'334, 0},
            });
}

TEST_CASE("gcra does not drift over a long run", "[gcra]") {
  const Rule rule{.algorithm = Algorithm::kGcra, .limit = 3, .period_ms = 1000};
  constexpr std::uint64_t kStep = 123'456'789;
  CounterState state;
  std::uint64_t admitted = 0;
  std::uint64_t last = 0;
  for (std::uint64_t t = 0; t <= 3000 * kSec; t += kStep) {
    admitted += gcra(rule, state, Request{.now_ns = t}).allowed;
    last = t;
  }
  CHECK(admitted == 3 + 3 * last / kSec);
}

TEST_CASE("gcra peek answers without moving the arrival time", "[gcra]") {
  CounterState state;
  gcra(kTwoPerSecondBurstFour, state, Request{.now_ns = 0, .cost = 4});
  const CounterState before = state;
  const Verdict d =
      gcra(kTwoPerSecondBurstFour, state, Request{.now_ns = 1200 * kMs, .cost = 2, .peek = true});
  CHECK(d.allowed);
  CHECK(d.remaining == 0);
  CHECK(state == before);
}

TEST_CASE("gcra: a zeroed state is a fresh key whatever now is", "[gcra]") {
  for (std::uint64_t now :
       {std::uint64_t{0}, std::uint64_t{3 * kSec}, std::uint64_t{(1ull << 63) + 5}}) {
    CounterState state;
    CHECK(gcra(kTwoPerSecondBurstFour, state, Request{.now_ns = now, .cost = 4}).allowed);
    CHECK_FALSE(gcra(kTwoPerSecondBurstFour, state, Request{.now_ns = now, .cost = 1}).allowed);
    state = CounterState{};
    CHECK(gcra(kTwoPerSecondBurstFour, state, Request{.now_ns = now, .cost = 4}).allowed);
  }
}

TEST_CASE("gcra state is idle once the arrival time has passed", "[gcra]") {
  Subject s = Subject::of(gcra);
  s.step(kTwoPerSecondBurstFour, Request{.now_ns = 7 * kSec, .cost = 3});
  CHECK(s.idle_at(kTwoPerSecondBurstFour) == 8'500 * kMs);
  test::check_idle_at_is_tight(s, kTwoPerSecondBurstFour);

  const Rule thirds{.algorithm = Algorithm::kGcra, .limit = 3, .period_ms = 1000, .burst = 2};
  Subject f = Subject::of(gcra);
  f.step(thirds, Request{.now_ns = 0, .cost = 1});
  CHECK(f.idle_at(thirds) == 333'333'334);
  test::check_idle_at_is_tight(f, thirds);
}

}  // namespace
}  // namespace sluice
