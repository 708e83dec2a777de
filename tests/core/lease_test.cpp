// Leases (core/algorithms.h): a lease takes as many units as are available, up to what it asks
// for; giving back the unspent ones credits exactly those while they still count, and the state
// afterwards admits no more than if they had never been taken.
#include <catch2/catch.hpp>
#include <cstdint>

#include "core/algorithms.h"
#include "tests/core/algorithm_checks.h"

namespace sluice::test {
namespace {

constexpr std::uint64_t kT0 = 1'700'000'000 * kSec;  // a whole second: a window starts here

// How many one-unit acquires `state` admits at `now` (on a copy).
int admits(const Rule& rule, CounterState state, std::uint64_t now) {
  int n = 0;
  for (; n < 100'000; ++n) {
    if (!decide(rule, state, Request{now, 1, false}).allowed) break;
  }
  return n;
}

const Algorithm kStateAlgorithms[] = {Algorithm::kFixedWindow, Algorithm::kSlidingWindow,
                                      Algorithm::kTokenBucket, Algorithm::kGcra};

TEST_CASE("a lease takes what it asks for, or what is left, or nothing", "[lease]") {
  for (const Algorithm algorithm : kStateAlgorithms) {
    INFO("algorithm " << algorithm_name(algorithm));
    const Rule rule{algorithm, 10, 1000, 0};
    CounterState state;
    const LeaseGrant first = lease(rule, state, Request{kT0, 4, false});
    CHECK(first.granted == 4);
    CHECK(first.decision.allowed);
    CHECK(first.decision.remaining == 6);
    CHECK(admits(rule, state, kT0) == 6);
    const LeaseGrant second = lease(rule, state, Request{kT0, 8, false});
    CHECK(second.granted == 6);  // what was left
    CHECK(second.decision.remaining == 0);
    const LeaseGrant none = lease(rule, state, Request{kT0, 8, false});
    CHECK(none.granted == 0);
    CHECK_FALSE(none.decision.allowed);
    CHECK(none.decision.retry_after_ns > 0);
    CHECK(admits(rule, state, kT0) == 0);
    // A peek flag changes nothing: a lease always takes.
    CounterState fresh;
    CHECK(lease(rule, fresh, Request{kT0, 3, true}).granted == 3);
    CHECK(admits(rule, fresh, kT0) == 7);
  }
}

TEST_CASE("units given back count again, never beyond the limit", "[lease]") {
  for (const Algorithm algorithm : kStateAlgorithms) {
    INFO("algorithm " << algorithm_name(algorithm));
    const Rule rule{algorithm, 10, 1000, 0};
    CounterState state;
    CHECK(decide(rule, state, Request{kT0, 2, false}).allowed);  // two spent by others
    const LeaseGrant g = lease(rule, state, Request{kT0, 5, false});
    REQUIRE(g.granted == 5);
    CHECK(admits(rule, state, kT0) == 3);
    // Two of the five were spent; three come back, at once (nothing refilled meanwhile).
    CHECK(give_back(rule, state, 3, g.stamp, kT0) == 3);
    CHECK(admits(rule, state, kT0) == 6);  // 10 - 2 - 2
    // Giving back more than the key holds credits only what it holds.
    CounterState twice = state;
    CHECK(give_back(rule, twice, 100, g.stamp, kT0) == 4);
    CHECK(admits(rule, twice, kT0) == 10);
  }
}

TEST_CASE("a window algorithm drops units given back once their window is over", "[lease]") {
  const Rule fixed{Algorithm::kFixedWindow, 10, 1000, 0};
  CounterState state;
  const LeaseGrant g = lease(fixed, state, Request{kT0 + 900 * kMs, 10, false});
  REQUIRE(g.granted == 10);
  // The next window has started and counts a request of its own: the lease's units are not
  // its, so nothing is credited into it.
  CHECK(decide(fixed, state, Request{kT0 + 1000 * kMs, 1, false}).allowed);
  CHECK(give_back(fixed, state, 10, g.stamp, kT0 + 1000 * kMs) == 0);
  CHECK(admits(fixed, state, kT0 + 1000 * kMs) == 9);

  // The sliding window counts the last window's units in its weighted total: given back in the
  // next window, they come off that previous count.
  const Rule sliding{Algorithm::kSlidingWindow, 10, 1000, 0};
  CounterState s;
  const LeaseGrant h = lease(sliding, s, Request{kT0 + 900 * kMs, 10, false});
  REQUIRE(h.granted == 10);
  CHECK(decide(sliding, s, Request{kT0 + 1000 * kMs, 1, false}).allowed == false);  // 10 weigh
  CHECK(give_back(sliding, s, 10, h.stamp, kT0 + 1000 * kMs) == 10);
  CHECK(admits(sliding, s, kT0 + 1000 * kMs) == 10);
  // Two windows on, the units weigh nothing, and a stale stamp credits nothing.
  CounterState later = s;
  CHECK(give_back(sliding, later, 5, h.stamp, kT0 + 3000 * kMs) == 0);
}

TEST_CASE("a bucket's units given back after it refilled stop at a full bucket", "[lease]") {
  for (const Algorithm algorithm : {Algorithm::kTokenBucket, Algorithm::kGcra}) {
    INFO("algorithm " << algorithm_name(algorithm));
    const Rule rule{algorithm, 10, 1000, 0};  // one unit back every 100 ms
    CounterState state;
    const LeaseGrant g = lease(rule, state, Request{kT0, 10, false});
    REQUIRE(g.granted == 10);
    // 300 ms on, three units have come back by refill; giving back all ten fills the bucket,
    // and credits only the seven still missing.
    CHECK(give_back(rule, state, 10, g.stamp, kT0 + 300 * kMs) == 7);
    CHECK(admits(rule, state, kT0 + 300 * kMs) == 10);
    // Full: nothing more to credit.
    CHECK(give_back(rule, state, 1, g.stamp, kT0 + 300 * kMs) == 0);
  }
}

TEST_CASE(
    "a bucket's give-back is less what it refilled since the grant, even with others' "
    "requests between",
    "[lease]") {
  // One unit a second. A lease of 10 at 0 s; others take 2 at 3 s; 10 given back at 3.5 s. Had
  // the lease never been taken, the bucket would have been full until 3 s, then lacked 2: 8
  // admissible at 3.5 s, and no more after the give-back.
  const Rule bucket{Algorithm::kTokenBucket, 10, 10'000, 0};
  CounterState state;
  const LeaseGrant g = lease(bucket, state, Request{kT0, 10, false});
  REQUIRE(g.granted == 10);
  CHECK(decide(bucket, state, Request{kT0 + 3 * kSec, 2, false}).allowed);
  CHECK(give_back(bucket, state, 10, g.stamp, kT0 + 3500 * kMs) == 7);
  CHECK(admits(bucket, state, kT0 + 3500 * kMs) == 8);

  // GCRA, a lease of 5 at 0 s, others take 2 at 3 s, 5 given back at 3.5 s: 8 admissible, as
  // had the lease never been taken.
  const Rule gcra_rule{Algorithm::kGcra, 10, 10'000, 0};
  CounterState tat;
  const LeaseGrant h = lease(gcra_rule, tat, Request{kT0, 5, false});
  REQUIRE(h.granted == 5);
  CHECK(decide(gcra_rule, tat, Request{kT0 + 3 * kSec, 2, false}).allowed);
  CHECK(give_back(gcra_rule, tat, 5, h.stamp, kT0 + 3500 * kMs) == 1);  // 1.5 units, whole: 1
  CHECK(admits(gcra_rule, tat, kT0 + 3500 * kMs) == 8);
  // A stamp from the future, or one too old to tell, credits nothing.
  CounterState copy = tat;
  CHECK(give_back(gcra_rule, copy, 5, h.stamp + 10'000, kT0 + 3500 * kMs) == 0);
}

// A tiny deterministic generator for the property below.
struct Lcg {
  std::uint64_t x;
  std::uint64_t next(std::uint64_t n) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return (x >> 33) % n;
  }
};

TEST_CASE(
    "over random histories a key whose lease was given back admits no more than had its "
    "unspent units never been taken",
    "[lease]") {
  // World A leases up to u units at t0, spends s of them, and gives the rest back at t1, while
  // other requests come and go. World B replays exactly what A admitted (the s units at t0, and
  // every other request A admitted), without the lease's unspent units. From the give-back on,
  // A's state must never admit more than B's.
  for (const Algorithm algorithm : kStateAlgorithms) {
    INFO("algorithm " << algorithm_name(algorithm));
    Lcg random{static_cast<std::uint64_t>(algorithm) * 7919};
    int more = 0;
    int replay_denied = 0;
    for (int history = 0; history < 400; ++history) {
      const auto limit = static_cast<std::uint32_t>(1 + random.next(20));
      const std::uint64_t period_ms = 100 + random.next(5000);
      const Rule rule{algorithm, limit, period_ms, 0};
      const std::uint64_t t0 = kT0 + random.next(3 * period_ms) * kMs + random.next(kMs);
      CounterState a;
      for (int i = 0; i < 3; ++i) {  // some history before the lease
        const std::uint64_t t = t0 - random.next(period_ms) * kMs;
        (void)decide(rule, a, Request{t, static_cast<std::uint32_t>(1 + random.next(3)), false});
      }
      CounterState b = a;
      const auto want = static_cast<std::uint32_t>(1 + random.next(limit + 2));
      const LeaseGrant g = lease(rule, a, Request{t0, want, false});
      const auto spent =
          static_cast<std::uint32_t>(g.granted == 0 ? 0 : random.next(g.granted + 1));
      if (spent != 0 && !decide(rule, b, Request{t0, spent, false}).allowed) ++replay_denied;
      const std::uint64_t t1 = t0 + random.next(2 * period_ms) * kMs + random.next(kMs);
      std::uint64_t t = t0;
      bool given = false;
      for (int step = 0; step < 12; ++step) {
        t += random.next(period_ms / 3 + 1) * kMs + random.next(kMs);
        if (!given && t >= t1) {
          give_back(rule, a, g.granted - spent, g.stamp, t1);
          given = true;
          if (admits(rule, a, t1) > admits(rule, b, t1)) ++more;
        }
        const auto cost = static_cast<std::uint32_t>(1 + random.next(3));
        if (decide(rule, a, Request{t, cost, false}).allowed &&
            !decide(rule, b, Request{t, cost, false}).allowed) {
          ++replay_denied;
        }
        if (given && admits(rule, a, t) > admits(rule, b, t)) {
          ++more;
          WARN("history " << history << ": limit " << limit << " period " << period_ms
                          << " ms, granted " << g.granted << " spent " << spent << ": at "
                          << (t - t0) / kMs << " ms after the lease A admits " << admits(rule, a, t)
                          << ", B " << admits(rule, b, t));
        }
      }
    }
    CHECK(more == 0);
    CHECK(replay_denied == 0);  // B, with less taken, admits whatever A did
  }
}

TEST_CASE("a sliding log leases what is left and never takes units back", "[lease]") {
  const Rule rule{Algorithm::kSlidingLog, 5, 1000, 0};
  OwnedLog log(5);
  for (int i = 0; i < 2; ++i) CHECK(log.step(rule, Request{kT0, 1, false}).allowed);
  SlidingLog view{.ring = log.ring, .head = log.head, .count = log.count};
  const LeaseGrant g = sliding_log_lease(rule, view, Request{kT0 + kMs, 10, false});
  log.head = view.head;
  log.count = view.count;
  CHECK(g.granted == 3);
  CHECK(g.decision.remaining == 0);
  CHECK_FALSE(log.step(rule, Request{kT0 + kMs, 1, false}).allowed);
  // A lease's units are not given back: the state API has no log, and give_back() of the
  // algorithm credits nothing.
  CounterState none;
  CHECK(give_back(rule, none, 3, g.stamp, kT0 + kMs) == 0);
}

TEST_CASE("a rule that admits nothing leases nothing", "[lease]") {
  CounterState state;
  const LeaseGrant g = lease(Rule{Algorithm::kTokenBucket, 0, 1000, 0}, state, Request{kT0, 5});
  CHECK(g.granted == 0);
  CHECK(g.decision.retry_after_ns == kNever);
  CHECK(give_back(Rule{Algorithm::kTokenBucket, 0, 1000, 0}, state, 5, 0, kT0) == 0);
}

}  // namespace
}  // namespace sluice::test
