// A rate-limit decision as the client returns it, and the HTTP header fields a gateway sends
// with it. Pure code: no I/O, and time comes in as an argument (or from the system clock).
// docs/CLIENT.md documents every field and the rounding rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/verdict.h"

namespace sluice::client {

// One HTTP header field. `name` points to a static string.
struct HeaderField {
  std::string_view name;
  std::string value;
  friend bool operator==(const HeaderField&, const HeaderField&) = default;
};

// Where a decision was made (docs/CLIENT.md section 10).
enum class DecisionSource : std::uint8_t {
  kCluster = 0,        // the key's owner decided it
  kLocalFallback = 1,  // the owner could not answer: the rule's failure policy decided here
  kBlockedCache = 2,   // the key was denied until later: denied again here, with no round trip
  kLease = 3,          // paid from units leased from the owner
};

// "cluster", "local_fallback", "blocked_cache", "lease".
std::string_view source_name(DecisionSource source);

struct Decision {
  bool allowed = false;
  std::uint32_t limit = 0;           // the rule's capacity (burst for the bucket algorithms)
  std::uint32_t remaining = 0;       // whole units left after this request
  std::uint64_t reset_after_ms = 0;  // until the key is back to full capacity
  std::uint64_t retry_after_ms = 0;  // 0 when allowed; kNever when no wait admits the request
  // The rule the decision was made under, for RateLimit-Policy: rule.limit per rule.period_ms.
  std::uint32_t policy_quota = 0;
  std::uint64_t policy_window_ms = 0;
  DecisionSource source = DecisionSource::kCluster;

  bool retry_never() const { return retry_after_ms == kNever; }

  // RateLimit-Reset: whole seconds until the reset, rounded up.
  std::uint64_t reset_seconds() const;
  // Retry-After in whole seconds, rounded up: only when denied and a wait can admit the request.
  std::optional<std::uint64_t> retry_after_seconds() const;
  // X-RateLimit-Reset: Unix time of the reset in whole seconds, rounded up, given the current
  // Unix time in milliseconds.
  std::uint64_t reset_epoch_seconds(std::uint64_t now_unix_ms) const;
  // RateLimit-Policy (draft-ietf-httpapi-ratelimit-headers-09): `"NAME";q=QUOTA;w=WINDOW_S`,
  // the window in whole seconds rounded up. `name` is escaped as a structured-field string.
  std::string policy_field(std::string_view name = "default") const;
  // RateLimit (same draft): `"NAME";r=REMAINING;t=RESET_S`.
  std::string ratelimit_field(std::string_view name = "default") const;

  // Every header field, in this order: RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset,
  // RateLimit-Policy, RateLimit, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset,
  // and Retry-After last when retry_after_seconds() has a value.
  std::vector<HeaderField> headers(std::uint64_t now_unix_ms,
                                   std::string_view policy_name = "default") const;
  // The same, with the system clock's Unix time.
  std::vector<HeaderField> headers() const;

  friend bool operator==(const Decision&, const Decision&) = default;
};

// Milliseconds to whole seconds, rounded up; kNever stays kNever.
constexpr std::uint64_t ms_to_seconds_ceil(std::uint64_t ms) {
  if (ms == kNever) return kNever;
  return ms / 1000 + (ms % 1000 != 0 ? 1 : 0);
}

}  // namespace sluice::client
