// What a sluice-load run reports, and its two summaries: the text one and the --json object
// (docs/LOAD.md, "The report"). Formatting only: nothing here runs a load.
//
// load_driver.h includes this header, so its users see the report and its formatting through
// it; LoadOptions is only declared here (the summaries name the options they ran with): include
// load_driver.h to call report_json() or report_text().
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tools/load/accuracy_audit.h"
#include "tools/load/histogram.h"

namespace sluice::load {

struct LoadOptions;

struct TimelineEntry {
  std::uint64_t sent = 0;  // requests issued in this 100 ms, in decisions
  std::uint64_t allowed = 0;
  std::uint64_t denied = 0;
  std::uint64_t errors = 0;
};

struct LoadReport {
  unsigned connections = 0;  // TCP connections actually opened
  unsigned shards = 0;       // Sluice: the seed node's shard count
  unsigned nodes = 0;        // Sluice: the nodes the client routes to (1 outside a cluster)
  std::uint64_t sent = 0;    // decisions; sent == allowed + denied + errors
  std::uint64_t allowed = 0;
  std::uint64_t denied = 0;
  std::uint64_t errors = 0;  // error replies, failed connections, no reply within the drain
  // Sluice: allowed + denied by where they were decided, by client::DecisionSource value.
  std::array<std::uint64_t, 4> by_source{};
  // Open loop (in decisions): what the schedule meant to send before the run stopped, what of
  // it was never sent (intended - sent: the server or the tool could not keep up), and the
  // largest backlog of due but unsent decisions (per thread, summed over threads). A closed
  // loop reports intended == sent, behind == backlog_max == 0.
  std::uint64_t intended = 0;
  std::uint64_t behind = 0;
  std::uint64_t backlog_max = 0;
  // The most requests in flight at once (per thread, summed): at most connections x depth.
  std::size_t in_flight_max = 0;
  double duration_s = 0;        // from the first send to the last reply (or the drain's end)
  double throughput_per_s = 0;  // (allowed + denied) / duration_s
  LatencyHistogram latency;     // per request, microseconds (decision requests only)
  // --control-every: the PING requests sent in place of decision requests, and their latency
  // (per request, microseconds, timed as the decisions are). Not in sent/allowed/denied/errors.
  struct Control {
    std::uint64_t sent = 0;
    std::uint64_t answered = 0;
    std::uint64_t errors = 0;  // error replies, and no reply within the drain
    LatencyHistogram latency;
  } control;
  std::optional<AuditReport> audit;
  std::vector<TimelineEntry> timeline;  // one entry per 100 ms from the start
  std::string first_error;              // empty when errors == 0
};

inline constexpr std::chrono::milliseconds kTimelineStep{100};

// The span of the run in which errors happened, in whole timeline steps: from the start of the
// first step with an error to the end of the last (a failover's gap, as the load saw it);
// nullopt without errors.
struct ErrorWindow {
  std::uint64_t first_ms = 0;
  std::uint64_t end_ms = 0;
};
std::optional<ErrorWindow> error_window(const LoadReport& report);

// The --json summary: one object (docs/LOAD.md lists the fields).
std::string report_json(const LoadOptions& options, const LoadReport& report);
// The text summary.
std::string report_text(const LoadOptions& options, const LoadReport& report);

}  // namespace sluice::load
