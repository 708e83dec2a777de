#include <bit>
#include <catch2/catch.hpp>

#include "tests/core/algorithm_checks.h"

namespace sluice {
namespace {

using test::kMs;
using test::kSec;
using test::OwnedLog;
using test::run_table;
using test::Step;
using test::Subject;

const Rule kThreePerSecond{.algorithm = Algorithm::kSlidingLog, .limit = 3, .period_ms = 1000};

TEST_CASE("sliding log counts exactly the units admitted in the trailing period", "[sliding_log]") {
  run_table(Subject::sliding(3), kThreePerSecond,
            {
                {0, 1, true, 2, 1000 * kMs, 0},
                {200 * kMs, 1, true, 1, 1000 * kMs, 0},
                // Two asked, one left: the entry stamped 0 must leave first, at 1 s.
                {500 * kMs, 2, false, 1, 700 * kMs, 500 * kMs},
                {500 * kMs, 1, true, 0, 1000 * kMs, 0},
                {1 * kSec - 1, 1, false, 0, 500 * kMs + 1, 1},
                // An entry stamped t has expired at exactly t + period.
                {1000 * kMs, 1, true, 0, 1000 * kMs, 0},
                {1200 * kMs, 1, true, 0, 1000 * kMs, 0},  // the ring wraps around
                {1300 * kMs, 4, false, 0, 900 * kMs, kNever},
                // Three asked: all of 0.5 s, 1.0 s and 1.2 s must leave, the last at 2.2 s.
                {1300 * kMs, 3, false, 0, 900 * kMs, 900 * kMs},
                {2200 * kMs, 3, true, 0, 1000 * kMs, 0},
            });
}

TEST_CASE("sliding log never admits more than N in any period-long span", "[sliding_log]") {
  const Rule rule{.algorithm = Algorithm::kSlidingLog, .limit = 50, .period_ms = 100};
  OwnedLog log(50);
  std::vector<std::uint64_t> admitted;
  for (std::uint64_t t = 0; t < 2 * kSec; t += 777'777) {
    if (log.step(rule, Request{.now_ns = t}).allowed) admitted.push_back(t);
  }
  REQUIRE(admitted.size() > 50);
  for (std::size_t i = 50; i < admitted.size(); ++i) {
    CHECK(admitted[i] - admitted[i - 50] >= rule.period_ns());
  }
}

TEST_CASE("sliding log finds the first live entry however many have expired", "[sliding_log]") {
  const Rule rule{.algorithm = Algorithm::kSlidingLog, .limit = 100, .period_ms = 1000};
  OwnedLog log(100);
  // Start the log mid-ring so that the entries wrap around its end.
  log.head = 37;
  for (std::uint64_t ms = 0; ms < 100; ++ms) {
    REQUIRE(log.step(rule, Request{.now_ns = ms * kMs}).allowed);
  }
  for (std::uint64_t expired = 0; expired <= 100; ++expired) {
    // At 1 s + (expired - 1) ms, the entries stamped 0 .. expired - 1 ms have expired.
    const std::uint64_t now = kSec + expired * kMs - kMs;
    INFO("expired=" << expired);
    CHECK(log.step(rule, Request{.now_ns = now, .peek = true}).remaining ==
          (expired == 0 ? 0 : expired - 1));
    CHECK(log.step(rule, Request{.now_ns = now - 1, .peek = true}).remaining ==
          (expired <= 1 ? 0 : expired - 2));
  }
}

TEST_CASE("sliding log peek answers without touching the log", "[sliding_log]") {
  OwnedLog log(3);
  log.step(kThreePerSecond, Request{.now_ns = 0, .cost = 2});
  const OwnedLog before = log;
  // At 1.5 s both entries have expired: a peek sees them gone but does not drop them.
  const Verdict d =
      log.step(kThreePerSecond, Request{.now_ns = 1500 * kMs, .cost = 3, .peek = true});
  CHECK(d.allowed);
  CHECK(log == before);
}

TEST_CASE("sliding log: an empty log is a fresh key", "[sliding_log]") {
  OwnedLog log(3);
  log.step(kThreePerSecond, Request{.now_ns = 10 * kSec, .cost = 3});
  CHECK_FALSE(log.step(kThreePerSecond, Request{.now_ns = 10 * kSec}).allowed);
  log.head = 0;
  log.count = 0;
  CHECK(log.step(kThreePerSecond, Request{.now_ns = 10 * kSec, .cost = 3}).allowed);
}

TEST_CASE("sliding log: a peek answers for any ring as for one of the rule's size",
          "[sliding_log]") {
  // sliding_log_answer() against sliding_log() on an empty ring of the rule's size and on one
  // rounded up to a power of two, for limits from 0 up, costs above the limit, peeks and
  // consuming requests.
  for (const std::uint32_t limit : {0u, 1u, 3u, 20u, 100u}) {
    for (const std::uint32_t cost : {1u, 2u, 3u, 101u}) {
      for (const bool peek : {true, false}) {
        for (const std::size_t ring : {std::size_t{limit}, std::bit_ceil(std::size_t{limit})}) {
          const Rule rule{.algorithm = Algorithm::kSlidingLog, .limit = limit, .period_ms = 1000};
          const Request request{.now_ns = 7 * kSec, .cost = cost, .peek = peek};
          OwnedLog log(ring);
          const Verdict expected = log.step(rule, request);
          const Verdict answer = sliding_log_answer(rule, SlidingLog{}, request);
          INFO("limit " << limit << " ring " << ring << " cost " << cost << " peek " << peek);
          CHECK(answer.allowed == expected.allowed);
          CHECK(answer.limit == expected.limit);
          CHECK(answer.remaining == expected.remaining);
          CHECK(answer.reset_after_ns == expected.reset_after_ns);
          CHECK(answer.retry_after_ns == expected.retry_after_ns);
        }
      }
    }
  }
  const Rule three{.algorithm = Algorithm::kSlidingLog, .limit = 3, .period_ms = 1000};
  const Verdict d = sliding_log_answer(three, SlidingLog{}, Request{.now_ns = 7 * kSec, .cost = 2});
  CHECK(d.allowed);
  CHECK(d.remaining == 1);
  CHECK(d.reset_after_ns == kSec);
  CHECK(sliding_log_answer(three, SlidingLog{}, Request{.now_ns = 0, .cost = 4}).retry_after_ns ==
        kNever);
}

TEST_CASE("sliding log: a peek with a larger limit answers as if the log had a bigger ring",
          "[sliding_log]") {
  // Three entries in a ring of 4; the limit grows to 6. A peek on the small ring answers as the
  // same entries in a ring of 6 would, and leaves the small ring as it was.
  OwnedLog small(4);
  for (int i = 0; i < 3; ++i) small.step(kThreePerSecond, Request{.now_ns = i * 100 * kMs});
  const OwnedLog before = small;
  const Rule six{.algorithm = Algorithm::kSlidingLog, .limit = 6, .period_ms = 1000};
  OwnedLog big(6);
  for (int i = 0; i < 3; ++i) big.step(six, Request{.now_ns = i * 100 * kMs});
  const SlidingLog view{.ring = small.ring, .head = small.head, .count = small.count};
  for (const std::uint32_t cost : {1u, 3u, 4u, 7u}) {
    const Request peek{.now_ns = 500 * kMs, .cost = cost, .peek = true};
    const Verdict answer = sliding_log_answer(six, view, peek);
    const Verdict expected = big.step(six, peek);
    INFO("cost " << cost);
    CHECK(answer.allowed == expected.allowed);
    CHECK(answer.remaining == expected.remaining);
    CHECK(answer.reset_after_ns == expected.reset_after_ns);
    CHECK(answer.retry_after_ns == expected.retry_after_ns);
  }
  // Three more fit under the new limit, though not in the old ring.
  CHECK(
      sliding_log_answer(six, view, Request{.now_ns = 500 * kMs, .cost = 3, .peek = true}).allowed);
  CHECK(small == before);
}

TEST_CASE("sliding log is idle once its newest entry has expired", "[sliding_log]") {
  Subject s = Subject::sliding(3);
  CHECK(s.idle_at(kThreePerSecond) == 0);
  s.step(kThreePerSecond, Request{.now_ns = 4 * kSec, .cost = 1});
  s.step(kThreePerSecond, Request{.now_ns = 4'600 * kMs, .cost = 2});
  CHECK(s.idle_at(kThreePerSecond) == 5'600 * kMs);
  test::check_idle_at_is_tight(s, kThreePerSecond);
}

TEST_CASE("sliding log stamps a request behind the newest entry at that entry's time",
          "[sliding_log]") {
  OwnedLog log(3);
  log.step(kThreePerSecond, Request{.now_ns = 5 * kSec, .cost = 2});
  // The clock steps back 1 s; the unit is stamped 5 s, so it lapses at 6 s.
  const Verdict d = log.step(kThreePerSecond, Request{.now_ns = 4 * kSec});
  CHECK(d.allowed);
  CHECK(d.reset_after_ns == 2 * kSec);
  CHECK(log.step(kThreePerSecond, Request{.now_ns = 6 * kSec, .cost = 3}).allowed);
}

TEST_CASE("sliding log with a ring smaller than its limit never writes past the ring",
          "[sliding_log]") {
  OwnedLog log(2);
  CHECK(log.step(kThreePerSecond, Request{.now_ns = 0, .cost = 2}).allowed);
  const Verdict d = log.step(kThreePerSecond, Request{.now_ns = 0, .cost = 1});
  CHECK_FALSE(d.allowed);
  CHECK(log.count == 2);
}

}  // namespace
}  // namespace sluice
