// How the gateway turns the decisions of every limit of one request into one answer: allowed or
// denied, the HTTP status, and the header fields of the most restrictive limit
// (docs/GATEWAY.md, "How a request is decided" and "Header fields"). Pure code: no I/O, and
// the time comes in as an argument.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/decision.h"

namespace sluice::gateway {

// One limit of a request and what was decided for it.
struct LimitOutcome {
  std::string_view policy;  // the policy's name, for RateLimit-Policy and RateLimit
  bool shadow = false;      // counted and reported, never denies, gives no header fields
  // The decision; nullopt when the call failed with an error no failure policy covers.
  std::optional<client::Decision> decision{};
  // For a failed call: whether the policy fails closed (the limit then denies, its Retry-After
  // the policy's period) or open (the limit is left out); and the policy's limit and period.
  bool fails_closed = false;
  std::uint32_t limit = 0;
  std::uint64_t period_ms = 0;
};

struct Answer {
  bool allowed = true;
  unsigned status = 200;  // 200, or 429 when denied
  // The index in the outcomes of the limit that gave the header fields; nullopt when no enforced
  // limit had a decision (no field is sent then).
  std::optional<std::size_t> deciding;
  std::uint32_t shadow_denials = 0;  // shadow limits that would have denied
  std::vector<client::HeaderField> headers;
};

// Denied when any enforced (not shadow) limit denies, or failed closed. The deciding limit:
// among the denials the longest wait (never admitted counts as the longest; ties: the first in
// rules order), else the fewest remaining units (ties: the sooner reset, then the first).
// `now_unix_ms` gives X-RateLimit-Reset. The fields: those of client::Decision::headers() for
// the deciding limit, with RateLimit-Policy listing every enforced limit that has a decision,
// in order, and X-Sluice-Decision last.
Answer combine(std::span<const LimitOutcome> outcomes, std::uint64_t now_unix_ms);

}  // namespace sluice::gateway
