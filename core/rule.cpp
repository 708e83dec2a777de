#include "core/rule.h"

namespace sluice {

std::string_view algorithm_name(Algorithm algorithm) {
  switch (algorithm) {
    case Algorithm::kFixedWindow:
      return "fixed_window";
    case Algorithm::kSlidingWindow:
      return "sliding_window";
    case Algorithm::kSlidingLog:
      return "sliding_log";
    case Algorithm::kTokenBucket:
      return "token_bucket";
    case Algorithm::kGcra:
      return "gcra";
  }
  return "unknown";
}

std::optional<Algorithm> parse_algorithm(std::string_view name) {
  for (std::uint8_t v = kMinAlgorithm; v <= kMaxAlgorithm; ++v) {
    const auto algorithm = static_cast<Algorithm>(v);
    if (algorithm_name(algorithm) == name) return algorithm;
  }
  return std::nullopt;
}

std::string_view describe(RuleError error) {
  switch (error) {
    case RuleError::kOk:
      return "ok";
    case RuleError::kUnknownAlgorithm:
      return "unknown algorithm";
    case RuleError::kBadPeriod:
      return "period must be between 1 ms and 366 days";
    case RuleError::kZeroCost:
      return "cost must be at least 1";
    case RuleError::kSlidingLogTooLarge:
      return "sliding log limit or burst above the configured cap";
  }
  return "unknown rule error";
}

RuleError validate(const Rule& rule, std::uint32_t cost, std::uint32_t sliding_log_cap) {
  if (!is_known_algorithm(static_cast<std::uint8_t>(rule.algorithm))) {
    return RuleError::kUnknownAlgorithm;
  }
  if (rule.period_ms == 0 || rule.period_ms > kMaxPeriodMs) return RuleError::kBadPeriod;
  if (cost == 0) return RuleError::kZeroCost;
  if (rule.algorithm == Algorithm::kSlidingLog &&
      (rule.limit > sliding_log_cap || rule.burst > sliding_log_cap)) {
    return RuleError::kSlidingLogTooLarge;
  }
  return RuleError::kOk;
}

}  // namespace sluice
