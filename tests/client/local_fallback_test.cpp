// The local fallback limiter on its own (client/local_fallback.h): a rule shared by N gateways is
// enforced here at its limit / N by the rule's own algorithm, per key and rule, within a fixed
// capacity where the key used longest ago goes.
#include "client/local_fallback.h"

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>

#include "client/blocked_cache.h"
#include "core/key_hash.h"

namespace sluice::client::detail {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kT0 = 1'700'000'000'000 * kMs;  // a whole second: a window starts here

Rule rule_of(Algorithm algorithm, std::uint32_t limit, std::uint64_t period_ms,
             std::uint32_t burst = 0) {
  return Rule{algorithm, limit, period_ms, burst};
}

std::uint64_t fp(const std::string& key, const Rule& rule) {
  return blocked_fingerprint(hash_key(key), rule);
}

// Admitted out of `tries` requests of cost 1 at `now`.
int admitted(FallbackLimiter& limiter, const std::string& key, const Rule& rule, int tries,
             std::uint64_t now) {
  int n = 0;
  for (int i = 0; i < tries; ++i) n += limiter.decide(fp(key, rule), rule, 1, false, now).allowed;
  return n;
}

TEST_CASE("local_rule divides the limit and the burst by the gateways, never below 1",
          "[local-fallback]") {
  const Rule bucket = rule_of(Algorithm::kTokenBucket, 100, 1000, 40);
  CHECK(local_rule(bucket, 1) == bucket);
  CHECK(local_rule(bucket, 4) == rule_of(Algorithm::kTokenBucket, 25, 1000, 10));
  CHECK(local_rule(bucket, 0) == bucket);  // 0 gateways is taken as 1
  CHECK(local_rule(bucket, 1000) == rule_of(Algorithm::kTokenBucket, 1, 1000, 1));
  // A limit of 0 denies everything, locally too; a burst of 0 stays "the limit".
  CHECK(local_rule(rule_of(Algorithm::kGcra, 0, 1000), 4).limit == 0);
  CHECK(local_rule(rule_of(Algorithm::kGcra, 8, 1000), 4).burst == 0);
  // A sliding log is enforced by the sliding window counter of the same limit.
  CHECK(local_rule(rule_of(Algorithm::kSlidingLog, 10, 1000), 2) ==
        rule_of(Algorithm::kSlidingWindow, 5, 1000));
}

TEST_CASE("each algorithm admits limit / gateways per window, and again in the next one",
          "[local-fallback]") {
  for (const Algorithm algorithm :
       {Algorithm::kFixedWindow, Algorithm::kSlidingWindow, Algorithm::kSlidingLog,
        Algorithm::kTokenBucket, Algorithm::kGcra}) {
    INFO("algorithm " << algorithm_name(algorithm));
    FallbackLimiter limiter(1024, 4);
    const Rule rule = rule_of(algorithm, 40, 1000);
    CHECK(admitted(limiter, "k", rule, 25, kT0) == 10);
    // Two periods later every algorithm is back to full: 10 again, not 40.
    CHECK(admitted(limiter, "k", rule, 25, kT0 + 2000 * kMs) == 10);
  }
}

TEST_CASE("local counters are per key and rule, a peek consumes nothing, cost counts whole",
          "[local-fallback]") {
  FallbackLimiter limiter(1024, 2);
  const Rule ten = rule_of(Algorithm::kFixedWindow, 10, 1000);
  const Rule twenty = rule_of(Algorithm::kFixedWindow, 20, 1000);
  CHECK(admitted(limiter, "a", ten, 9, kT0) == 5);
  CHECK(admitted(limiter, "b", ten, 9, kT0) == 5);
  CHECK(admitted(limiter, "a", twenty, 15, kT0) == 10);
  // A peek of a fresh key answers allowed with the local limit, and keeps nothing.
  const sluice::Verdict peeked = limiter.decide(fp("c", ten), ten, 1, true, kT0);
  CHECK(peeked.allowed);
  CHECK(peeked.limit == 5);
  CHECK(peeked.remaining == 4);
  CHECK(limiter.size() == 3);
  const sluice::Verdict three = limiter.decide(fp("c", ten), ten, 3, false, kT0);
  CHECK(three.allowed);
  CHECK(three.remaining == 2);
  const sluice::Verdict denied = limiter.decide(fp("c", ten), ten, 3, false, kT0);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.retry_after_ns == 1000 * kMs);  // the window's end
}

TEST_CASE("a full table forgets the key used longest ago, which then starts fresh",
          "[local-fallback]") {
  // The smallest table: one bucket of kWays entries per shard. Keys are drawn until kWays + 1
  // of them land in one bucket.
  FallbackLimiter limiter(1, 1);
  REQUIRE(limiter.capacity() == FallbackLimiter::kWays * FallbackLimiter::kShards);
  const Rule rule = rule_of(Algorithm::kFixedWindow, 1, 1000);
  std::vector<std::string> same;
  const std::uint64_t shard = fp("seed", rule) >> 58;
  for (int i = 0; same.size() < FallbackLimiter::kWays + 1 && i < 100'000; ++i) {
    const std::string key = "key:" + std::to_string(i);
    if ((fp(key, rule) >> 58) == shard) same.push_back(key);
  }
  REQUIRE(same.size() == FallbackLimiter::kWays + 1);
  for (std::size_t i = 0; i < FallbackLimiter::kWays; ++i) {
    CHECK(admitted(limiter, same[i], rule, 1, kT0 + i) == 1);  // each uses up its one unit
  }
  CHECK(admitted(limiter, same[1], rule, 1, kT0 + 10) == 0);  // same[1] is used again: denied
  CHECK(limiter.evicted() == 0);
  CHECK(admitted(limiter, same[4], rule, 1, kT0 + 11) == 1);  // takes same[0]'s entry
  CHECK(limiter.evicted() == 1);
  CHECK(admitted(limiter, same[1], rule, 1, kT0 + 12) == 0);  // kept
  CHECK(admitted(limiter, same[0], rule, 1, kT0 + 13) == 1);  // forgotten: fresh again
}

}  // namespace
}  // namespace sluice::client::detail
