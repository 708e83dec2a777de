// Randomised runs (fixed seeds, so every run is the same) that check the shared contract at
// every step: peek answers like the real request and changes nothing, retry_after is exact,
// remaining never exceeds the capacity, and reset_after and idle_at_ns name the exact time
// from which the state is fresh.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>

#include "tests/core/algorithm_checks.h"

namespace sluice {
namespace {

using test::kMs;
using test::Subject;

struct Named {
  std::string name;
  Algorithm algorithm;
  Subject subject;
};

Rule random_rule(std::mt19937_64& rng, Algorithm algorithm) {
  Rule rule{.algorithm = algorithm};
  rule.limit = static_cast<std::uint32_t>(rng() % 12 + 1);
  rule.period_ms = rng() % 3 == 0 ? rng() % 5 + 1 : rng() % 2000 + 1;
  rule.burst = rng() % 2 == 0 ? 0 : static_cast<std::uint32_t>(rng() % 20);
  return rule;
}

// Gaps that hit the interesting places: nothing, a nanosecond, a fraction of an interval,
// window boundaries, and the exact retry_after of the previous denial.
std::uint64_t next_gap(std::mt19937_64& rng, const Rule& rule, const Verdict& last) {
  const std::uint64_t period = rule.period_ns();
  switch (rng() % 7) {
    case 0:
      return 0;
    case 1:
      return 1;
    case 2:
      return rng() % (period / rule.limit + 1);
    case 3:
      return period - rng() % 3;
    case 4:
      return rng() % (3 * period);
    case 5:
      return last.allowed || last.retry_after_ns == kNever ? 0 : last.retry_after_ns;
    default:
      return rng() % (period / 10 + 1);
  }
}

void run_random(Named n, std::uint64_t seed, int rules, int steps) {
  std::mt19937_64 rng(seed);
  for (int r = 0; r < rules; ++r) {
    const Rule rule = random_rule(rng, n.algorithm);
    Subject s = n.subject.fresh();
    std::uint64_t now = rng() % 2 == 0 ? rng() % (10'000 * kMs) : (1ull << 62) + rng() % 999;
    Verdict last;
    for (int i = 0; i < steps; ++i) {
      now += next_gap(rng, rule, last);
      const auto cost = static_cast<std::uint32_t>(rng() % (rule.capacity() + 1) + 1);
      INFO(n.name << " limit=" << rule.limit << " period_ms=" << rule.period_ms << " burst="
                  << rule.burst << " step " << i << " now=" << now << " cost=" << cost);
      last = test::checked_step(s, rule, now, cost);
      CHECK(last.limit == rule.capacity());
      CHECK(last.remaining <= rule.capacity());
      CHECK((last.allowed ? last.retry_after_ns == 0 : last.retry_after_ns > 0));
      CHECK((cost > rule.capacity()) == (last.retry_after_ns == kNever));
      // The state after the request is fresh from exactly now + reset_after.
      CHECK(std::max(s.idle_at(rule), now) == now + last.reset_after_ns);
      // What a table stores after the request, taken from the verdict, is the same.
      if (n.subject.algorithm != nullptr) {
        CHECK(idle_at_after(rule, s.state, last, now) == s.idle_at(rule));
      }
      if (i % 8 == 0 && s.idle_at(rule) != 0) test::check_idle_at_is_tight(s, rule);
    }
  }
}

TEST_CASE("every algorithm keeps its contract over random traffic", "[properties]") {
  const std::vector<Named> subjects = {
      {"fixed_window", Algorithm::kFixedWindow, Subject::of(fixed_window)},
      {"sliding_window", Algorithm::kSlidingWindow, Subject::of(sliding_window)},
      {"token_bucket", Algorithm::kTokenBucket, Subject::of(token_bucket)},
      {"gcra", Algorithm::kGcra, Subject::of(gcra)},
      {"sliding_log", Algorithm::kSlidingLog, Subject::sliding(12)},
  };
  for (std::size_t i = 0; i < subjects.size(); ++i) {
    run_random(subjects[i], 0x5eed + i, 40, 120);
  }
}

TEST_CASE("token bucket and gcra give the same answers to the same traffic", "[properties]") {
  // GCRA's TAT is the token bucket's refill position plus used * interval, so the two must
  // agree on every field, not just on allowed.
  std::mt19937_64 rng(42);
  for (int r = 0; r < 50; ++r) {
    const Rule bucket = random_rule(rng, Algorithm::kTokenBucket);
    Rule cell = bucket;
    cell.algorithm = Algorithm::kGcra;
    CounterState bucket_state;
    CounterState cell_state;
    std::uint64_t now = rng() % (5000 * kMs);
    Verdict last;
    for (int i = 0; i < 200; ++i) {
      now += next_gap(rng, bucket, last);
      const auto cost = static_cast<std::uint32_t>(rng() % (bucket.capacity() + 1) + 1);
      INFO("limit=" << bucket.limit << " period_ms=" << bucket.period_ms
                    << " burst=" << bucket.burst << " step " << i);
      last = token_bucket(bucket, bucket_state, Request{.now_ns = now, .cost = cost});
      CHECK(last == gcra(cell, cell_state, Request{.now_ns = now, .cost = cost}));
      CHECK(idle_at_ns(bucket, bucket_state) == idle_at_ns(cell, cell_state));
    }
  }
}

}  // namespace
}  // namespace sluice
