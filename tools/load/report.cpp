#include "tools/load/report.h"

#include <fmt/core.h>

#include "cli/json_writer.h"
#include "client/client.h"
#include "tools/load/load_driver.h"

namespace sluice::load {

using cli::JsonWriter;

namespace {

void latency_json(JsonWriter& j, const LatencyHistogram& h) {
  j.key("latency_us").begin_object();
  j.field("p50", h.value_at_percentile(50));
  j.field("p90", h.value_at_percentile(90));
  j.field("p99", h.value_at_percentile(99));
  j.field("p999", h.value_at_percentile(99.9));
  j.field("max", h.max());
  j.field("mean", h.mean());
  j.field("count", h.count());
  j.end_object();
}

std::string latency_text(const LatencyHistogram& h) {
  return fmt::format("p50 {}  p90 {}  p99 {}  p99.9 {}  max {}", h.value_at_percentile(50),
                     h.value_at_percentile(90), h.value_at_percentile(99),
                     h.value_at_percentile(99.9), h.max());
}

}  // namespace

std::string report_json(const LoadOptions& o, const LoadReport& r) {
  JsonWriter j;
  j.begin_object();
  j.field("backend", backend_name(o.backend));
  j.field("op", operation_name(o.op));
  if (o.backend == BackendKind::kRedis && o.op == Operation::kAcquire) {
    j.field("redis_design", redis_design_name(o.redis_design));
    if (o.redis_design == RedisDesign::kIncrWindow) j.field("descriptors", o.descriptors);
  }
  if (o.backend == BackendKind::kRls) {
    j.field("rls_domain", o.rls_domain);
    j.field("descriptors", o.descriptors);
  }
  if (o.backend == BackendKind::kHttp) {
    j.field("path", o.http_path);
    j.field("key_header", o.key_header);
    if (o.deny_status != 0) j.field("deny_status", static_cast<std::uint64_t>(o.deny_status));
  }
  j.field("mode", o.rate > 0 ? "open" : "closed");
  if (o.rate > 0) j.field("rate", o.rate);
  j.field("server", o.servers.front());
  j.field("connections", r.connections);
  if (o.backend == BackendKind::kSluice) {
    j.field("shards", r.shards);
    j.field("nodes", r.nodes);
    if (!o.only_node.empty()) j.field("only_node", o.only_node);
  }
  j.field("depth", o.depth);
  j.field("batch", o.batch);
  j.field("threads", o.threads);
  j.field("keys", o.keys);
  j.field("dist", describe(o.dist));
  j.field("seed", o.seed);
  j.key("rule").begin_object();
  j.field("algorithm", algorithm_name(o.rule.algorithm));
  j.field("limit", o.rule.limit);
  j.field("period_ms", o.rule.period_ms);
  j.field("burst", o.rule.burst);
  j.field("cost", o.cost);
  j.end_object();
  j.field("sent", r.sent);
  j.field("allowed", r.allowed);
  j.field("denied", r.denied);
  j.field("errors", r.errors);
  if (o.backend == BackendKind::kSluice) {
    j.field("failure_policy", client::failure_policy_name(o.failure_policy));
    j.field("gateways", o.gateways);
    j.field("lease_duration_ms", static_cast<std::uint64_t>(o.lease_duration.count()));
    j.key("by_source").begin_object();
    for (std::size_t s = 0; s < r.by_source.size(); ++s) {
      j.field(client::source_name(static_cast<client::DecisionSource>(s)), r.by_source[s]);
    }
    j.end_object();
  }
  if (o.rate > 0) {
    j.field("intended", r.intended);
    j.field("behind", r.behind);
    j.field("backlog_max", r.backlog_max);
  }
  j.field("in_flight_max", static_cast<std::uint64_t>(r.in_flight_max));
  j.field("duration_s", r.duration_s);
  j.field("throughput_per_s", r.throughput_per_s);
  latency_json(j, r.latency);
  if (o.control_every != 0) {
    j.key("control").begin_object();
    j.field("op", "ping");
    j.field("every", o.control_every);
    j.field("sent", r.control.sent);
    j.field("answered", r.control.answered);
    j.field("errors", r.control.errors);
    latency_json(j, r.control.latency);
    j.end_object();
  }
  if (r.audit) {
    j.key("audit").begin_object();
    j.field("keys_checked", r.audit->keys_checked);
    j.field("max_overshoot_ratio", r.audit->max_overshoot_ratio);
    j.field("admitted_events", r.audit->admitted_events);
    j.field("ambiguous_events", r.audit->ambiguous_events);
    j.field("ignored_events", r.audit->ignored_events);
    j.end_object();
  }
  if (!r.first_error.empty()) j.field("first_error", r.first_error);
  j.field("timeline_step_ms", kTimelineStep.count());
  j.key("timeline").begin_array();
  for (std::size_t i = 0; i < r.timeline.size(); ++i) {
    const TimelineEntry& e = r.timeline[i];
    j.begin_object();
    j.field("t_ms", static_cast<std::uint64_t>(i) * kTimelineStep.count());
    j.field("sent", e.sent);
    j.field("allowed", e.allowed);
    j.field("denied", e.denied);
    j.field("errors", e.errors);
    j.end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

std::string report_text(const LoadOptions& o, const LoadReport& r) {
  std::string what(backend_name(o.backend));
  if (o.op != Operation::kAcquire) {
    what += fmt::format(" {}", operation_name(o.op));
  } else if (o.backend == BackendKind::kRedis) {
    what += fmt::format(" {}", redis_design_name(o.redis_design));
    if (o.redis_design == RedisDesign::kIncrWindow && o.descriptors > 1) {
      what += fmt::format(" x{} descriptors", o.descriptors);
    }
  } else if (o.backend == BackendKind::kRls) {
    what +=
        fmt::format(" ShouldRateLimit domain {}, {} descriptor{} (audit rule {})", o.rls_domain,
                    o.descriptors, o.descriptors == 1 ? "" : "s", algorithm_name(o.rule.algorithm));
  } else if (o.backend == BackendKind::kHttp) {
    what += fmt::format(" GET {} ({}, audit rule {})", o.http_path, o.key_header,
                        algorithm_name(o.rule.algorithm));
  } else {
    what += fmt::format(" {}", algorithm_name(o.rule.algorithm));
  }
  // The server as given: an IPv6 address is already in brackets (parse_host_port needs them).
  std::string out = fmt::format(
      "{} at {}{}, {} loop{}, {} connections, depth {}, batch {}, {} threads, {} keys {}{}\n", what,
      o.servers.front(), r.nodes > 1 ? fmt::format(" ({} nodes)", r.nodes) : "",
      o.rate > 0 ? "open" : "closed", o.rate > 0 ? fmt::format(" at {:.0f}/s", o.rate) : "",
      r.connections, o.depth, o.batch, o.threads, o.keys, describe(o.dist),
      o.only_node.empty() ? "" : " (primary " + o.only_node + " only)");
  out += fmt::format("sent {}  allowed {}  denied {}  errors {}\n", r.sent, r.allowed, r.denied,
                     r.errors);
  if (o.backend == BackendKind::kSluice && r.by_source[0] != r.allowed + r.denied) {
    out += "decided by:";
    for (std::size_t s = 0; s < r.by_source.size(); ++s) {
      out += fmt::format(" {} {}", client::source_name(static_cast<client::DecisionSource>(s)),
                         r.by_source[s]);
    }
    out += fmt::format(" (failure policy {}, gateways {}{})\n",
                       client::failure_policy_name(o.failure_policy), o.gateways,
                       o.lease_duration.count() == 0
                           ? ""
                           : fmt::format(", leases of {} ms", o.lease_duration.count()));
  }
  if (o.rate > 0) {
    out += fmt::format("open loop: intended {}  sent {}  behind {}  backlog max {}{}\n", r.intended,
                       r.sent, r.behind, r.backlog_max,
                       r.behind > 0 ? "  (the rate was not reached)" : "");
  }
  out += fmt::format("duration {:.3f} s  throughput {:.0f}/s  in flight max {}\n", r.duration_s,
                     r.throughput_per_s, r.in_flight_max);
  out += "latency us: " + latency_text(r.latency) + "\n";
  if (o.control_every != 0) {
    out += fmt::format("control (a PING in every {} requests): sent {}  answered {}  errors {}\n",
                       o.control_every, r.control.sent, r.control.answered, r.control.errors);
    out += "control latency us: " + latency_text(r.control.latency) + "\n";
  }
  if (r.audit) {
    out += fmt::format("audit: {} keys checked, max overshoot ratio {}\n", r.audit->keys_checked,
                       r.audit->max_overshoot_ratio);
  }
  if (!r.first_error.empty()) out += "first error: " + r.first_error + "\n";
  if (const auto window = error_window(r)) {
    out += fmt::format("errors from {:.1f} s to {:.1f} s into the run ({} ms of {} ms steps)\n",
                       static_cast<double>(window->first_ms) / 1000,
                       static_cast<double>(window->end_ms) / 1000,
                       window->end_ms - window->first_ms, kTimelineStep.count());
  }
  return out;
}

std::optional<ErrorWindow> error_window(const LoadReport& r) {
  std::optional<ErrorWindow> window;
  for (std::size_t i = 0; i < r.timeline.size(); ++i) {
    if (r.timeline[i].errors == 0) continue;
    const auto at = static_cast<std::uint64_t>(i) * kTimelineStep.count();
    if (!window) window = ErrorWindow{at, at};
    window->end_ms = at + kTimelineStep.count();
  }
  return window;
}

}  // namespace sluice::load
