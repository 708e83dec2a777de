#include "tools/load/accuracy_audit.h"

#include <catch2/catch.hpp>
#include <vector>

#include "core/algorithms.h"
#include "tools/load/random.h"

namespace sluice::load {
namespace {

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kSec = 1000 * kMs;
constexpr std::uint64_t kEpoch = 1'700'000'000ull * kSec;  // window-aligned (whole seconds)

Rule make_rule(Algorithm algorithm, std::uint32_t limit, std::uint64_t period_ms,
               std::uint32_t burst = 0) {
  Rule rule;
  rule.algorithm = algorithm;
  rule.limit = limit;
  rule.period_ms = period_ms;
  rule.burst = burst;
  return rule;
}

TEST_CASE("fixed window: limit + 1 in one window is an overshoot of 1/limit", "[audit]") {
  AccuracyAudit audit(make_rule(Algorithm::kFixedWindow, 10, 1000), 4);
  for (int i = 0; i < 10; ++i) audit.record_exact(2, kEpoch + i * 50 * kMs);
  CHECK(audit.report().max_overshoot_ratio == 0);
  audit.record_exact(2, kEpoch + 999 * kMs);
  const AuditReport& r = audit.report();
  CHECK(r.max_overshoot_ratio == Approx(0.1));
  CHECK(r.worst_key == 2);
  CHECK(r.worst_admitted_units == 11);
  CHECK(r.worst_allowed_units == 10);
  CHECK(r.keys_checked == 1);
  CHECK(r.admitted_events == 11);
}

TEST_CASE("fixed window: a full window on each side of an edge is allowed", "[audit]") {
  AccuracyAudit audit(make_rule(Algorithm::kFixedWindow, 10, 1000), 1);
  for (int i = 0; i < 10; ++i) audit.record_exact(0, kEpoch + kSec - 1 - i);
  for (int i = 0; i < 10; ++i) audit.record_exact(0, kEpoch + kSec + i);
  CHECK(audit.report().max_overshoot_ratio == 0);
  // Costs count as units.
  audit.record_exact(0, kEpoch + kSec + 500 * kMs, 5);
  CHECK(audit.report().max_overshoot_ratio == Approx(0.5));
}

TEST_CASE("windows: a request that straddles an edge is not counted", "[audit]") {
  AccuracyAudit audit(make_rule(Algorithm::kSlidingWindow, 1, 1000), 1);
  audit.record(0, kEpoch + 999 * kMs, kEpoch + 1001 * kMs);
  audit.record(0, kEpoch + 1002 * kMs, kEpoch + 1003 * kMs);
  CHECK(audit.report().ambiguous_events == 1);
  CHECK(audit.report().max_overshoot_ratio == 0);
  audit.record(0, kEpoch + 1004 * kMs, kEpoch + 1005 * kMs);
  CHECK(audit.report().max_overshoot_ratio == Approx(1.0));
}

TEST_CASE("token bucket: a burst above capacity is flagged", "[audit]") {
  AccuracyAudit audit(make_rule(Algorithm::kTokenBucket, 10, 1000, 20), 1);
  for (int i = 0; i < 20; ++i) audit.record_exact(0, kEpoch);
  CHECK(audit.report().max_overshoot_ratio == 0);
  audit.record_exact(0, kEpoch);
  CHECK(audit.report().max_overshoot_ratio == Approx(1.0 / 20));
  CHECK(audit.report().worst_admitted_units == Approx(21));
  CHECK(audit.report().worst_allowed_units == Approx(20));
}

TEST_CASE("token bucket: burst then exactly the rate is allowed, one more is not", "[audit]") {
  // 10 per second, capacity 10: 10 at once, then one every 100 ms for 10 s.
  AccuracyAudit audit(make_rule(Algorithm::kGcra, 10, 1000), 1);
  for (int i = 0; i < 10; ++i) audit.record_exact(0, kEpoch);
  for (int i = 1; i <= 100; ++i) audit.record_exact(0, kEpoch + i * 100 * kMs);
  CHECK(audit.report().max_overshoot_ratio == 0);
  // One more, 1 ns early: 111 units in 10 s where capacity + rate * 10 s = 110.
  audit.record_exact(0, kEpoch + 10 * kSec);
  CHECK(audit.report().max_overshoot_ratio > 0);
  CHECK(audit.report().worst_admitted_units == Approx(111));
  CHECK(audit.report().worst_allowed_units == Approx(110));
}

TEST_CASE("token bucket: timing uncertainty widens the allowance", "[audit]") {
  // Each request known only within 100 ms: 11 requests within 100 ms may be 200 ms apart,
  // when 10 + 10/s * 0.2 s = 12 would be allowed.
  AccuracyAudit audit(make_rule(Algorithm::kTokenBucket, 10, 1000), 1);
  for (int i = 0; i < 11; ++i) audit.record(0, kEpoch + i * kMs, kEpoch + i * kMs + 100 * kMs);
  CHECK(audit.report().max_overshoot_ratio == 0);
  for (int i = 0; i < 3; ++i) audit.record(0, kEpoch + 11 * kMs, kEpoch + 111 * kMs);
  CHECK(audit.report().max_overshoot_ratio > 0);
}

TEST_CASE("sliding log: limit + 1 within one period is flagged, at a period is not", "[audit]") {
  AccuracyAudit audit(make_rule(Algorithm::kSlidingLog, 5, 1000), 1);
  for (int i = 0; i < 5; ++i) audit.record_exact(0, kEpoch + 300 * kMs + i * kMs);
  audit.record_exact(0, kEpoch + 1300 * kMs);  // a full period after the first
  CHECK(audit.report().max_overshoot_ratio == 0);
  audit.record_exact(0, kEpoch + 1300 * kMs + kMs / 2);  // 6 from 301 to 1300.5 ms
  CHECK(audit.report().max_overshoot_ratio == Approx(0.2));
  CHECK(AccuracyAudit::bytes_per_key(make_rule(Algorithm::kSlidingLog, 5, 1000)) == 40 + 6 * 16);
}

TEST_CASE("sliding log: a long over-admitting run keeps reporting", "[audit]") {
  AccuracyAudit audit(make_rule(Algorithm::kSlidingLog, 3, 1000), 1);
  for (int i = 0; i < 100; ++i) audit.record_exact(0, kEpoch + i * kMs);  // 100 in 100 ms
  // The ring holds limit + 1 entries, so the ratio seen is (4 - 3) / 3, not 97 / 3.
  CHECK(audit.report().max_overshoot_ratio == Approx(1.0 / 3));
}

TEST_CASE("a limit of 0 admitting anything is an overshoot", "[audit]") {
  AccuracyAudit audit(make_rule(Algorithm::kFixedWindow, 0, 1000), 1);
  audit.record_exact(0, kEpoch);
  CHECK(audit.report().max_overshoot_ratio == Approx(1.0));
}

TEST_CASE("bookkeeping: keys outside the audited range, reordered records", "[audit]") {
  AccuracyAudit audit(make_rule(Algorithm::kFixedWindow, 10, 1000), 3);
  audit.record_exact(3, kEpoch);
  audit.record_exact(1'000'000, kEpoch);
  audit.record_exact(0, kEpoch + 5 * kMs);
  audit.record_exact(0, kEpoch + 4 * kMs);
  audit.record(2, kEpoch + 9, kEpoch + 1);  // bounds given the other way round
  const AuditReport& r = audit.report();
  CHECK(r.ignored_events == 2);
  CHECK(r.admitted_events == 3);
  CHECK(r.keys_checked == 2);
  CHECK(r.reordered_events == 1);
  CHECK(r.max_overshoot_ratio == 0);
}

// A simulated backend: `keys` keys, requests at increasing times with gaps around the rule's
// pace, decided by core's algorithm; with `cheat`, some denied requests are admitted anyway.
// Admitted requests are recorded exactly, or within [t - jitter, t + jitter] when jitter > 0.
AuditReport simulate(const Rule& rule, bool cheat, std::uint64_t jitter_ns = 0) {
  constexpr std::uint64_t kKeys = 8;
  constexpr int kRequests = 4000;
  AccuracyAudit audit(rule, kKeys);
  std::vector<CounterState> states(kKeys);
  std::vector<std::uint64_t> log_storage(kKeys * rule.limit);
  std::vector<SlidingLog> logs(kKeys);
  for (std::uint64_t k = 0; k < kKeys; ++k) {
    logs[k].ring = std::span<std::uint64_t>(log_storage.data() + k * rule.limit, rule.limit);
  }
  Xoshiro256 rng(2024);
  const std::uint64_t pace_ns = rule.period_ns() / rule.limit;
  std::uint64_t now = kEpoch + rng.next_below(rule.period_ns());
  for (int i = 0; i < kRequests; ++i) {
    // Bursts and pauses: gaps from 0 to ~3x the pace, so keys go over their limit often.
    now += rng.next_below(3 * pace_ns / kKeys + 1);
    const std::uint64_t key = rng.next_below(kKeys);
    const auto cost = static_cast<std::uint32_t>(1 + rng.next_below(2));
    const Request request{.now_ns = now, .cost = cost, .peek = false};
    const Verdict d = rule.algorithm == Algorithm::kSlidingLog
                          ? sliding_log(rule, logs[key], request)
                          : decide(rule, states[key], request);
    const bool admitted = d.allowed || (cheat && rng.next_below(20) == 0);
    if (!admitted) continue;
    if (jitter_ns == 0) {
      audit.record_exact(key, now, cost);
    } else {
      // As a client sees it: sent up to `jitter` before, answered up to `jitter` after.
      audit.record(key, now - rng.next_below(jitter_ns), now + rng.next_below(jitter_ns), cost);
    }
  }
  return audit.report();
}

TEST_CASE("core's algorithms pass the audit exactly, and a cheating copy fails it", "[audit]") {
  const Rule rules[] = {
      make_rule(Algorithm::kFixedWindow, 20, 1000),
      make_rule(Algorithm::kSlidingWindow, 20, 1000),
      make_rule(Algorithm::kSlidingLog, 20, 1000),
      make_rule(Algorithm::kTokenBucket, 20, 1000),
      make_rule(Algorithm::kTokenBucket, 7, 300, 15),
      make_rule(Algorithm::kGcra, 20, 1000),
      make_rule(Algorithm::kGcra, 3, 1000, 5),  // a pace that is not a whole number of ns
  };
  for (const Rule& rule : rules) {
    INFO(algorithm_name(rule.algorithm) << " limit " << rule.limit << " burst " << rule.burst);
    const AuditReport honest = simulate(rule, false);
    CHECK(honest.keys_checked == 8);
    CHECK(honest.admitted_events > 500);
    CHECK(honest.max_overshoot_ratio == 0);
    CHECK(simulate(rule, true).max_overshoot_ratio > 0);
    // Client-side bounds (1 ms either way) never make an honest backend look guilty.
    CHECK(simulate(rule, false, kMs).max_overshoot_ratio == 0);
  }
}

}  // namespace
}  // namespace sluice::load
