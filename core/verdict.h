// What every algorithm answers (a Verdict), in nanoseconds; the protocol carries milliseconds, and
// the client library turns it into a client::Decision (milliseconds, header fields).
#pragma once

#include <cstdint>
#include <limits>

namespace sluice {

// retry_after_ns value meaning "no amount of waiting admits this request"
// (cost above the capacity, or a limit of 0).
inline constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();
// The longest finite wait reported (about 584 years). A reset or retry that is finite but
// longer (a huge burst with a year-long period) is reported as this value.
inline constexpr std::uint64_t kMaxWaitNs = kNever - 1;

struct Verdict {
  bool allowed = false;
  std::uint32_t limit = 0;           // the rule's capacity (Rule::capacity())
  std::uint32_t remaining = 0;       // whole units still available after this request, rounded down
  std::uint64_t reset_after_ns = 0;  // until the key is back to its full capacity
  std::uint64_t retry_after_ns = 0;  // 0 when allowed; else until the same request would be allowed

  friend constexpr bool operator==(const Verdict&, const Verdict&) = default;
};

// Nanoseconds to whole milliseconds, rounded up so that waiting the reported time always
// suffices; kNever stays kNever.
constexpr std::uint64_t ns_to_ms_ceil(std::uint64_t ns) {
  if (ns == kNever) return kNever;
  return ns / 1'000'000 + (ns % 1'000'000 != 0 ? 1 : 0);
}

}  // namespace sluice
