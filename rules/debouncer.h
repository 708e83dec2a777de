// When to act on a burst of file events: once none has come for `quiet`, or at the latest
// `max_wait` after the first (a directory that never stops changing must not hold a reload
// back forever). Pure: the caller passes the time, so tests use a manual clock.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

namespace sluice::rules {

class Debouncer {
 public:
  static constexpr std::uint64_t kNever = std::numeric_limits<std::uint64_t>::max();

  Debouncer(std::uint64_t quiet_ns, std::uint64_t max_wait_ns)
      : quiet_ns_(quiet_ns), max_wait_ns_(std::max(max_wait_ns, quiet_ns)) {}

  void note_event(std::uint64_t now_ns) {
    if (!pending_) first_ns_ = now_ns;
    pending_ = true;
    last_ns_ = now_ns;
  }
  bool pending() const { return pending_; }
  // The time at which the pending burst is due; kNever when none is pending.
  std::uint64_t due_ns() const {
    if (!pending_) return kNever;
    return std::min(last_ns_ + quiet_ns_, first_ns_ + max_wait_ns_);
  }
  bool due(std::uint64_t now_ns) const { return pending_ && now_ns >= due_ns(); }
  void clear() { pending_ = false; }

 private:
  std::uint64_t quiet_ns_;
  std::uint64_t max_wait_ns_;
  bool pending_ = false;
  std::uint64_t first_ns_ = 0;
  std::uint64_t last_ns_ = 0;
};

}  // namespace sluice::rules
