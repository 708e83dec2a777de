#include "client/decision.h"

#include <chrono>

namespace sluice::client {
namespace {

// A structured-field String: printable ASCII with `"` and `\` escaped; other bytes are dropped
// because sf-strings cannot carry them.
void append_sf_string(std::string& out, std::string_view text) {
  out.push_back('"');
  for (const char c : text) {
    if (c < 0x20 || c > 0x7e) continue;
    if (c == '"' || c == '\\') out.push_back('\\');
    out.push_back(c);
  }
  out.push_back('"');
}

std::uint64_t system_unix_ms() {
  const auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(since_epoch).count());
}

}  // namespace

std::string_view source_name(DecisionSource source) {
  switch (source) {
    case DecisionSource::kCluster:
      return "cluster";
    case DecisionSource::kLocalFallback:
      return "local_fallback";
    case DecisionSource::kBlockedCache:
      return "blocked_cache";
    case DecisionSource::kLease:
      return "lease";
  }
  return "unknown";
}

std::uint64_t Decision::reset_seconds() const { return ms_to_seconds_ceil(reset_after_ms); }

std::optional<std::uint64_t> Decision::retry_after_seconds() const {
  if (allowed || retry_never()) return std::nullopt;
  return ms_to_seconds_ceil(retry_after_ms);
}

std::uint64_t Decision::reset_epoch_seconds(std::uint64_t now_unix_ms) const {
  // Saturate rather than wrap: a reset past the end of time stays there.
  const std::uint64_t at_ms =
      reset_after_ms > kNever - 1 - now_unix_ms ? kNever - 1 : now_unix_ms + reset_after_ms;
  return ms_to_seconds_ceil(at_ms);
}

std::string Decision::policy_field(std::string_view name) const {
  std::string out;
  append_sf_string(out, name);
  out += ";q=";
  out += std::to_string(policy_quota);
  out += ";w=";
  out += std::to_string(ms_to_seconds_ceil(policy_window_ms));
  return out;
}

std::string Decision::ratelimit_field(std::string_view name) const {
  std::string out;
  append_sf_string(out, name);
  out += ";r=";
  out += std::to_string(remaining);
  out += ";t=";
  out += std::to_string(reset_seconds());
  return out;
}

std::vector<HeaderField> Decision::headers(std::uint64_t now_unix_ms,
                                           std::string_view policy_name) const {
  std::vector<HeaderField> out;
  out.reserve(9);
  out.push_back({"RateLimit-Limit", std::to_string(limit)});
  out.push_back({"RateLimit-Remaining", std::to_string(remaining)});
  out.push_back({"RateLimit-Reset", std::to_string(reset_seconds())});
  out.push_back({"RateLimit-Policy", policy_field(policy_name)});
  out.push_back({"RateLimit", ratelimit_field(policy_name)});
  out.push_back({"X-RateLimit-Limit", std::to_string(limit)});
  out.push_back({"X-RateLimit-Remaining", std::to_string(remaining)});
  out.push_back({"X-RateLimit-Reset", std::to_string(reset_epoch_seconds(now_unix_ms))});
  if (const auto retry = retry_after_seconds()) {
    out.push_back({"Retry-After", std::to_string(*retry)});
  }
  return out;
}

std::vector<HeaderField> Decision::headers() const { return headers(system_unix_ms()); }

}  // namespace sluice::client
