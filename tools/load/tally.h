// One worker's counts: decisions by outcome (and, for Sluice, by who decided), the timeline of
// 100 ms steps and the first error. The worker counts what it sends; its backend counts what
// comes back, decision by decision, through these inline calls: no virtual call and no
// allocation per decision (the timeline is reserved for the run; only an error's text allocates).
// Not thread-safe: the worker's thread alone touches it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "client/client.h"
#include "tools/load/report.h"

namespace sluice::load {

class Tally {
 public:
  // The run starts at `start_ns` (monotonic): step 0 begins there.
  void start(std::uint64_t start_ns) { start_ns_ = start_ns; }
  void reserve_steps(std::size_t steps) { timeline_.reserve(steps); }

  // The timeline entry of the 100 ms step `now_ns` falls in (step 0 before the start).
  TimelineEntry& step(std::uint64_t now_ns) {
    const std::uint64_t i = now_ns > start_ns_ ? (now_ns - start_ns_) / kStepNs : 0;
    if (i >= timeline_.size()) timeline_.resize(i + 1);
    return timeline_[i];
  }

  // A request of `count` decisions was issued at `now_ns`.
  void sent(std::uint64_t count, std::uint64_t now_ns) {
    sent_ += count;
    step(now_ns).sent += count;
  }
  // One decision came back; `t` is the step it came back in.
  void allowed(TimelineEntry& t) {
    ++allowed_;
    ++t.allowed;
  }
  void denied(TimelineEntry& t) {
    ++denied_;
    ++t.denied;
  }
  // `count` decisions failed; the first failure of the run is kept as `what`.
  void errors(std::uint64_t count, TimelineEntry& t, std::string_view what) {
    errors_ += count;
    t.errors += count;
    if (first_error_.empty()) first_error_ = std::string(what);
  }
  // Sluice: who decided an answered decision (client::DecisionSource).
  void decided_by(client::DecisionSource source) {
    ++by_source_[static_cast<std::size_t>(source) & 3];
  }
  // --control-every: a control request (a PING in place of a decision request) was sent, was
  // answered, or failed. Controls are no decisions: none of the counts above holds them.
  void control_sent() { ++control_sent_; }
  void control_answered() { ++control_answered_; }
  void control_failed(std::uint64_t count, std::string_view what) {
    control_errors_ += count;
    if (first_error_.empty()) first_error_ = std::string(what);
  }
  std::uint64_t control_unanswered() const {
    return control_sent_ - control_answered_ - control_errors_;
  }

  // Why the run ended early, unless an error was kept already.
  void keep_first_error(std::string why) {
    if (first_error_.empty()) first_error_ = std::move(why);
  }

  std::uint64_t sent() const { return sent_; }
  std::uint64_t allowed() const { return allowed_; }
  std::uint64_t denied() const { return denied_; }
  std::uint64_t errors() const { return errors_; }
  // Sent, and neither answered nor failed yet.
  std::uint64_t unanswered() const { return sent_ - allowed_ - denied_ - errors_; }

  // Adds the counts, the sources and the timeline into `report`; the first error if it has
  // none yet.
  void add_to(LoadReport& report) const {
    report.sent += sent_;
    report.allowed += allowed_;
    report.denied += denied_;
    report.errors += errors_;
    for (std::size_t s = 0; s < by_source_.size(); ++s) report.by_source[s] += by_source_[s];
    report.control.sent += control_sent_;
    report.control.answered += control_answered_;
    report.control.errors += control_errors_;
    if (report.timeline.size() < timeline_.size()) report.timeline.resize(timeline_.size());
    for (std::size_t i = 0; i < timeline_.size(); ++i) {
      report.timeline[i].sent += timeline_[i].sent;
      report.timeline[i].allowed += timeline_[i].allowed;
      report.timeline[i].denied += timeline_[i].denied;
      report.timeline[i].errors += timeline_[i].errors;
    }
    if (report.first_error.empty()) report.first_error = first_error_;
  }

 private:
  static constexpr std::uint64_t kStepNs =
      static_cast<std::uint64_t>(std::chrono::nanoseconds(kTimelineStep).count());

  std::uint64_t start_ns_ = 0;
  std::uint64_t sent_ = 0;
  std::uint64_t allowed_ = 0;
  std::uint64_t denied_ = 0;
  std::uint64_t errors_ = 0;
  std::array<std::uint64_t, 4> by_source_{};
  std::uint64_t control_sent_ = 0;
  std::uint64_t control_answered_ = 0;
  std::uint64_t control_errors_ = 0;
  std::string first_error_;
  std::vector<TimelineEntry> timeline_;
};

}  // namespace sluice::load
