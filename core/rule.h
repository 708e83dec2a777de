// A rate-limit rule: which algorithm, how many units per period, and the bucket capacity.
// Rules travel with every request; the daemon stores counters, never configuration.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

enum class Algorithm : std::uint8_t {
  kFixedWindow = 1,
  kSlidingWindow = 2,  // sliding window counter
  kSlidingLog = 3,
  kTokenBucket = 4,
  kGcra = 5,
};

inline constexpr std::uint8_t kMinAlgorithm = 1;
inline constexpr std::uint8_t kMaxAlgorithm = 5;

// "fixed_window", "sliding_window", "sliding_log", "token_bucket", "gcra".
std::string_view algorithm_name(Algorithm algorithm);
std::optional<Algorithm> parse_algorithm(std::string_view name);
constexpr bool is_known_algorithm(std::uint8_t value) {
  return value >= kMinAlgorithm && value <= kMaxAlgorithm;
}

// The longest period a rule may have: 366 days, so a calendar year always fits.
inline constexpr std::uint64_t kMaxPeriodMs = 366ull * 24 * 3600 * 1000;
// Sliding log keeps one timestamp per admitted unit, so its limit is capped (configurable).
inline constexpr std::uint32_t kDefaultSlidingLogCap = 10'000;

struct Rule {
  Algorithm algorithm = Algorithm::kTokenBucket;
  std::uint32_t limit = 0;      // units admitted per period; 0 denies everything
  std::uint64_t period_ms = 0;  // 1 .. kMaxPeriodMs
  std::uint32_t burst = 0;      // bucket capacity (token bucket, GCRA); 0 means `limit`

  // The most units the key can hold at once: burst for the bucket algorithms, else limit.
  constexpr std::uint32_t capacity() const {
    const bool bucket = algorithm == Algorithm::kTokenBucket || algorithm == Algorithm::kGcra;
    return bucket && burst != 0 ? burst : limit;
  }
  constexpr std::uint64_t period_ns() const { return period_ms * 1'000'000ull; }

  friend constexpr bool operator==(const Rule&, const Rule&) = default;
};

enum class RuleError : std::uint8_t {
  kOk = 0,
  kUnknownAlgorithm,
  kBadPeriod,           // 0 or longer than kMaxPeriodMs
  kZeroCost,            // a request must cost at least one unit
  kSlidingLogTooLarge,  // sliding log limit or burst above the configured cap
};

std::string_view describe(RuleError error);

// Checks a rule and a request cost before any state is touched.
RuleError validate(const Rule& rule, std::uint32_t cost,
                   std::uint32_t sliding_log_cap = kDefaultSlidingLogCap);

}  // namespace sluice
