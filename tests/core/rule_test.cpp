#include <catch2/catch.hpp>

#include "core/rule.h"

namespace sluice {
namespace {

TEST_CASE("algorithm names round-trip", "[rule]") {
  for (std::uint8_t v = kMinAlgorithm; v <= kMaxAlgorithm; ++v) {
    const auto algorithm = static_cast<Algorithm>(v);
    CHECK(parse_algorithm(algorithm_name(algorithm)) == algorithm);
  }
  CHECK(algorithm_name(Algorithm::kSlidingWindow) == "sliding_window");
  CHECK(parse_algorithm("gcra") == Algorithm::kGcra);
  CHECK(parse_algorithm("token_bucket") == Algorithm::kTokenBucket);
  CHECK_FALSE(parse_algorithm("GCRA").has_value());
  CHECK_FALSE(parse_algorithm("").has_value());
  CHECK_FALSE(parse_algorithm("leaky_bucket").has_value());
}

TEST_CASE("capacity is the burst for bucket algorithms only", "[rule]") {
  CHECK(Rule{.algorithm = Algorithm::kTokenBucket, .limit = 10, .burst = 50}.capacity() == 50);
  CHECK(Rule{.algorithm = Algorithm::kGcra, .limit = 10, .burst = 0}.capacity() == 10);
  CHECK(Rule{.algorithm = Algorithm::kFixedWindow, .limit = 10, .burst = 50}.capacity() == 10);
  CHECK(Rule{.algorithm = Algorithm::kSlidingLog, .limit = 10, .burst = 50}.capacity() == 10);
}

TEST_CASE("validate accepts good rules and names what is wrong with bad ones", "[rule]") {
  const Rule good{.algorithm = Algorithm::kFixedWindow, .limit = 100, .period_ms = 1000};
  CHECK(validate(good, 1) == RuleError::kOk);
  CHECK(validate(Rule{.algorithm = Algorithm::kGcra, .limit = 0, .period_ms = kMaxPeriodMs}, 7) ==
        RuleError::kOk);

  Rule unknown = good;
  unknown.algorithm = static_cast<Algorithm>(0);
  CHECK(validate(unknown, 1) == RuleError::kUnknownAlgorithm);
  unknown.algorithm = static_cast<Algorithm>(6);
  CHECK(validate(unknown, 1) == RuleError::kUnknownAlgorithm);

  Rule period = good;
  period.period_ms = 0;
  CHECK(validate(period, 1) == RuleError::kBadPeriod);
  period.period_ms = kMaxPeriodMs + 1;
  CHECK(validate(period, 1) == RuleError::kBadPeriod);

  CHECK(validate(good, 0) == RuleError::kZeroCost);
}

TEST_CASE("validate caps the sliding log limit and burst", "[rule]") {
  Rule log{.algorithm = Algorithm::kSlidingLog, .limit = kDefaultSlidingLogCap, .period_ms = 1};
  CHECK(validate(log, 1) == RuleError::kOk);
  log.limit = kDefaultSlidingLogCap + 1;
  CHECK(validate(log, 1) == RuleError::kSlidingLogTooLarge);
  CHECK(validate(log, 1, kDefaultSlidingLogCap + 1) == RuleError::kOk);
  log.limit = 10;
  log.burst = kDefaultSlidingLogCap + 1;
  CHECK(validate(log, 1) == RuleError::kSlidingLogTooLarge);
  // Other algorithms have no cap.
  CHECK(validate(Rule{.algorithm = Algorithm::kFixedWindow, .limit = 1u << 31, .period_ms = 1},
                 1) == RuleError::kOk);
}

TEST_CASE("every rule error has a description", "[rule]") {
  for (RuleError e : {RuleError::kOk, RuleError::kUnknownAlgorithm, RuleError::kBadPeriod,
                      RuleError::kZeroCost, RuleError::kSlidingLogTooLarge}) {
    CHECK_FALSE(describe(e).empty());
  }
  CHECK(describe(RuleError::kZeroCost) != describe(RuleError::kBadPeriod));
}

}  // namespace
}  // namespace sluice
