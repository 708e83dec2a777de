// The accuracy audit: from the admitted requests alone, did a backend admit more than its rule
// allows? Reports the largest overshoot as a ratio, (admitted - allowed_max) / allowed_max, over
// all audited keys and checked intervals; 0 when never exceeded (allowed_max is taken as at
// least one unit, so a rule with limit 0 that admits one request reports 1).
//
// Time model. The audit does not know when a backend decided, only bounds: each admitted
// request is recorded with [earliest_ns, latest_ns] (e.g. send and receive time, or the server's
// own time twice when the reply carries it), on the clock the backend aligns windows to
// (Unix-epoch ns). Every check is sound under that uncertainty: it flags only what must have
// happened however the true times fall inside their bounds. A key's latest_ns should not
// decrease from one record to the next (record replies as they arrive); if it does, it is raised
// to the previous one, which only widens the bound (counted in reordered_events).
//
// What is checked, per rule.algorithm:
//  - fixed window and sliding window counter: units admitted in each aligned window
//    [w * period, (w+1) * period) <= limit. For the sliding window counter this is the
//    aligned-window bound, which it keeps exactly (its estimate adds the previous window's
//    weight to the current count); no margin is allowed. A request whose bounds straddle a
//    window edge cannot be placed and is not counted (ambiguous_events).
//  - sliding log: units admitted within any span shorter than one period <= limit.
//  - token bucket and GCRA: units admitted within any interval of length L
//    <= capacity + limit * L / period, tracked exactly in integers (a virtual bucket that may go
//    negative: Lindley's recursion). The ratio reported is that of the interval with the
//    largest excess in units.
//
// Memory is allocated once, for keys [0, audited_keys): 32 bytes per key for the window
// algorithms, 48 for the bucket ones, and 40 + 16 * (limit + 1) for the sliding log
// (bytes_per_key()). Requests for other keys are ignored, so a caller bounds the audit's memory
// by auditing a prefix of the key space (with Zipf and hot keys, the hottest keys).
// Not thread-safe: serialise record() calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/rule.h"

namespace sluice::load {

struct AuditReport {
  std::uint64_t keys_checked = 0;      // audited keys with at least one admitted request
  std::uint64_t admitted_events = 0;   // recorded requests for audited keys
  std::uint64_t ambiguous_events = 0;  // window algorithms: straddled a window edge, not counted
  std::uint64_t reordered_events = 0;  // latest_ns below the key's previous one
  std::uint64_t ignored_events = 0;    // key outside [0, audited_keys)
  double max_overshoot_ratio = 0;
  // The interval behind max_overshoot_ratio (meaningful when it is > 0).
  std::uint64_t worst_key = 0;
  double worst_admitted_units = 0;
  double worst_allowed_units = 0;
};

class AccuracyAudit {
 public:
  // REQUIRES: rule valid (validate() in core/rule.h).
  AccuracyAudit(const Rule& rule, std::uint64_t audited_keys);

  static std::size_t bytes_per_key(const Rule& rule);

  // One admitted request of `cost` units for `key`, decided at some time in
  // [earliest_ns, latest_ns] (swapped if given the other way round). O(1) amortised,
  // allocation-free, noexcept.
  void record(std::uint64_t key, std::uint64_t earliest_ns, std::uint64_t latest_ns,
              std::uint32_t cost = 1) noexcept;
  // An exactly known decision time.
  void record_exact(std::uint64_t key, std::uint64_t time_ns, std::uint32_t cost = 1) noexcept {
    record(key, time_ns, time_ns, cost);
  }

  const AuditReport& report() const noexcept { return report_; }
  std::uint64_t audited_keys() const noexcept { return audited_keys_; }

 private:
  struct WindowState {
    std::uint64_t latest_ns = 0;
    std::uint64_t window = 0;
    std::uint64_t units = 0;  // admitted in `window`
    bool seen = false;
  };
  // Lindley's recursion in units scaled by period_ns: backlog = max over interval starts of
  // (units admitted since then * period_ns - limit * elapsed_ns).
  struct BucketState {
    unsigned __int128 backlog = 0;
    std::uint64_t latest_ns = 0;
    std::uint64_t start_ns = 0;        // start of the interval that maximises the backlog
    std::uint64_t uncertainty_ns = 0;  // largest latest - earliest seen so far for this key
    bool seen = false;
  };
  struct LogEntry {
    std::uint64_t latest_ns = 0;
    std::uint32_t cost = 0;
  };
  // A ring of the admitted requests that may still share a span shorter than a period with a
  // later one. At most limit + 1 entries are needed: more already exceed the limit.
  struct LogState {
    std::uint64_t latest_ns = 0;
    std::uint64_t uncertainty_ns = 0;
    std::uint64_t units = 0;  // sum of the ring's costs
    std::uint32_t head = 0;
    std::uint32_t count = 0;
    bool seen = false;
  };

  // Updates the report with an interval that admitted `admitted` units where `allowed` were.
  void check(std::uint64_t key, double admitted, double allowed) noexcept;
  void record_window(std::uint64_t key, std::uint64_t earliest, std::uint64_t latest,
                     std::uint32_t cost) noexcept;
  void record_bucket(std::uint64_t key, std::uint64_t earliest, std::uint64_t latest,
                     std::uint32_t cost) noexcept;
  void record_log(std::uint64_t key, std::uint64_t earliest, std::uint64_t latest,
                  std::uint32_t cost) noexcept;
  // Raises `latest` to `previous` (counting it) and marks a first sighting.
  template <typename State>
  void order(State& state, std::uint64_t& latest) noexcept;

  Rule rule_;
  std::uint64_t audited_keys_;
  std::uint64_t period_ns_;
  std::vector<WindowState> windows_;
  std::vector<BucketState> buckets_;
  std::vector<LogState> logs_;
  std::vector<LogEntry> log_entries_;  // (limit + 1) per key
  std::uint32_t log_capacity_ = 0;
  AuditReport report_;
};

}  // namespace sluice::load
