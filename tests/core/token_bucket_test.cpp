#include <catch2/catch.hpp>

#include "tests/core/algorithm_checks.h"

namespace sluice {
namespace {

using test::kMs;
using test::kSec;
using test::run_table;
using test::Step;
using test::Subject;

// Two tokens a second (one every 500 ms), up to four at once.
const Rule kTwoPerSecondBurstFour{
    .algorithm = Algorithm::kTokenBucket, .limit = 2, .period_ms = 1000, .burst = 4};

TEST_CASE("token bucket spends a burst and refills one token per interval", "[token_bucket]") {
  run_table(Subject::of(token_bucket), kTwoPerSecondBurstFour,
            {
                {10'000 * kMs, 3, true, 1, 1500 * kMs, 0},           // 3 short: full at 11.5 s
                {10'100 * kMs, 2, false, 1, 1400 * kMs, 400 * kMs},  // next token at 10.5 s
                {10'100 * kMs, 1, true, 0, 1900 * kMs, 0},
                {10'750 * kMs, 1, true, 0, 1750 * kMs, 0},           // the token of 10.5 s
                {11'200 * kMs, 2, false, 1, 1300 * kMs, 300 * kMs},  // 11.0 s's; next 11.5 s
                {20'000 * kMs, 4, true, 0, 2000 * kMs, 0},           // full again: a whole burst
                {20'000 * kMs, 5, false, 0, 2000 * kMs, kNever},     // more than the capacity
            });
}

TEST_CASE("token bucket capacity defaults to the limit", "[token_bucket]") {
  const Rule rule{.algorithm = Algorithm::kTokenBucket, .limit = 5, .period_ms = 1000};
  CHECK(rule.capacity() == 5);
  run_table(Subject::of(token_bucket), rule,
            {
                {0, 5, true, 0, 1000 * kMs, 0},
                {0, 1, false, 0, 1000 * kMs, 200 * kMs},
                {200 * kMs, 1, true, 0, 1000 * kMs, 0},
            });
}

TEST_CASE("token bucket rounds waits up to whole nanoseconds", "[token_bucket]") {
  // Three a second: a token every 333,333,333 1/3 ns.
  const Rule rule{.algorithm = Algorithm::kTokenBucket, .limit = 3, .period_ms = 1000, .burst = 1};
  run_table(Subject::of(token_bucket), rule,
            {
                {0, 1, true, 0, 333'333'334, 0},
                {1, 1, false, 0, 333'333'333, 333'333'333},
                {333'333'334, 1, true, 0, 333'333'334, 0},
            });
}

TEST_CASE("token bucket refill does not drift over a long run", "[token_bucket]") {
  // Three tokens a second, three at once, asked far more often than it refills. The bucket is
  // never full again after the first burst, so token k arrives at exactly k/3 s and is taken
  // by the first request at or after it: 3 + floor(3 * t_last / 1 s) admitted in all.
  const Rule rule{.algorithm = Algorithm::kTokenBucket, .limit = 3, .period_ms = 1000};
  constexpr std::uint64_t kStep = 123'456'789;
  CounterState state;
  std::uint64_t admitted = 0;
  std::uint64_t last = 0;
  for (std::uint64_t t = 0; t <= 3000 * kSec; t += kStep) {
    admitted += token_bucket(rule, state, Request{.now_ns = t}).allowed;
    last = t;
  }
  CHECK(admitted == 3 + 3 * last / kSec);
  CHECK(admitted == 9002);
}

TEST_CASE("token bucket peek answers without taking tokens", "[token_bucket]") {
  CounterState state;
  token_bucket(kTwoPerSecondBurstFour, state, Request{.now_ns = 0, .cost = 4});
  const CounterState before = state;
  const Verdict d = token_bucket(kTwoPerSecondBurstFour, state,
                                 Request{.now_ns = 1200 * kMs, .cost = 2, .peek = true});
  CHECK(d.allowed);
  CHECK(d.remaining == 0);
  CHECK(state == before);
}

TEST_CASE("token bucket: a zeroed state is a full bucket", "[token_bucket]") {
  CounterState state;
  token_bucket(kTwoPerSecondBurstFour, state, Request{.now_ns = 3 * kSec, .cost = 4});
  state = CounterState{};
  CHECK(
      token_bucket(kTwoPerSecondBurstFour, state, Request{.now_ns = 3 * kSec, .cost = 4}).allowed);
  // Fresh whatever now is, including 0.
  CounterState at_zero;
  CHECK(token_bucket(kTwoPerSecondBurstFour, at_zero, Request{.now_ns = 0, .cost = 4}).allowed);
}

TEST_CASE("token bucket state is idle once the bucket is full", "[token_bucket]") {
  Subject s = Subject::of(token_bucket);
  s.step(kTwoPerSecondBurstFour, Request{.now_ns = 7 * kSec, .cost = 3});
  CHECK(s.idle_at(kTwoPerSecondBurstFour) == 8'500 * kMs);
  test::check_idle_at_is_tight(s, kTwoPerSecondBurstFour);
}

TEST_CASE("token bucket credits nothing while the clock is behind its last refill",
          "[token_bucket]") {
  CounterState state;
  token_bucket(kTwoPerSecondBurstFour, state, Request{.now_ns = 5 * kSec, .cost = 4});
  const Verdict d = token_bucket(kTwoPerSecondBurstFour, state, Request{.now_ns = 4 * kSec});
  CHECK_FALSE(d.allowed);
  CHECK(d.retry_after_ns == 1500 * kMs);  // the token of 5.5 s
}

}  // namespace
}  // namespace sluice
