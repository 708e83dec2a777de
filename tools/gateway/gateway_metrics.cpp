#include "tools/gateway/gateway_metrics.h"

#include <prometheus/metric_family.h>
#include <prometheus/text_serializer.h>

#include <cassert>

#include "core/version.h"
#include "http/prometheus.h"

namespace sluice::gateway {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// The latency of an answer, in seconds: from 100 us to 2.5 s.
const prometheus::Histogram::BucketBoundaries& duration_buckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5};
  return buckets;
}

void add_value(MetricFamily& f, double value, std::vector<ClientMetric::Label> labels = {}) {
  f.metric.push_back(http::metric_sample(f.type, value, std::move(labels)));
}

}  // namespace

template <typename Metric>
template <typename... Extra>
Metric& GatewayMetrics::Labelled<Metric>::at(std::initializer_list<std::string_view> values,
                                             const Extra&... extra) {
  assert(values.size() == names_.size());
  key_.clear();
  for (const std::string_view v : values) {
    const auto n = static_cast<std::uint32_t>(v.size());
    key_.append(reinterpret_cast<const char*>(&n), sizeof n);
    key_.append(v);
  }
  if (auto it = cache_.find(key_); it != cache_.end()) return *it->second;
  prometheus::Labels labels;
  auto name = names_.begin();
  for (const std::string_view v : values) labels.emplace(*name++, std::string(v));
  Metric& metric = family_.Add(labels, extra...);
  cache_.emplace(key_, &metric);
  return metric;
}

GatewayMetrics::GatewayMetrics()
    : decisions_(prometheus::BuildCounter()
                     .Name("sluice_gateway_decisions_total")
                     .Help("Limits decided, by policy, outcome (allowed, denied, error) and "
                           "source (cluster, local_fallback, blocked_cache, lease, deadline)")
                     .Register(registry_),
                 {"policy", "outcome", "source"}),
      shadow_denials_(prometheus::BuildCounter()
                          .Name("sluice_gateway_shadow_denials_total")
                          .Help("Shadow limits that would have denied, by policy")
                          .Register(registry_),
                      {"policy"}),
      requests_(prometheus::BuildCounter()
                    .Name("sluice_gateway_requests_total")
                    .Help("Decision requests answered, by endpoint (check, acquire, rls) and "
                          "outcome")
                    .Register(registry_),
                {"endpoint", "outcome"}),
      duration_(prometheus::BuildHistogram()
                    .Name("sluice_gateway_decision_duration_seconds")
                    .Help("From a decision request's arrival to its answer, by endpoint")
                    .Register(registry_),
                {"endpoint"}),
      rls_requests_(prometheus::BuildCounter()
                        .Name("sluice_gateway_rls_requests_total")
                        .Help("ShouldRateLimit calls answered, by domain and code")
                        .Register(registry_),
                    {"domain", "code"}) {}

std::string_view GatewayMetrics::bounded_label(std::set<std::string, std::less<>>& seen,
                                               std::string_view name) {
  if (name.size() > kMaxLabelBytes) return "other";
  if (auto it = seen.find(name); it != seen.end()) return *it;
  if (seen.size() >= kMaxPolicyLabels) return "other";
  return *seen.emplace(name).first;
}

void GatewayMetrics::decided(std::string_view policy, std::string_view outcome,
                             std::string_view source) {
  std::lock_guard lock(mutex_);
  decisions_.at({bounded_label(policies_, policy), outcome, source}).Increment();
}

void GatewayMetrics::shadow_denied(std::string_view policy) {
  std::lock_guard lock(mutex_);
  shadow_denials_.at({bounded_label(policies_, policy)}).Increment();
}

void GatewayMetrics::answered(std::string_view endpoint, bool allowed,
                              std::chrono::nanoseconds took) {
  std::lock_guard lock(mutex_);
  requests_.at({endpoint, allowed ? "allowed" : "denied"}).Increment();
  duration_.at({endpoint}, duration_buckets()).Observe(std::chrono::duration<double>(took).count());
}

void GatewayMetrics::rls_answered(std::string_view domain, std::string_view code,
                                  std::chrono::nanoseconds took) {
  {
    // Domains come from the rules (others are "unknown"); bounded like policies all the same.
    std::lock_guard lock(mutex_);
    rls_requests_.at({bounded_label(domains_, domain), code}).Increment();
  }
  if (code == "OK" || code == "OVER_LIMIT") answered("rls", code == "OK", took);
}

std::string GatewayMetrics::scrape(const ScrapeState& state) {
  std::vector<MetricFamily> families = registry_.Collect();

  auto ready =
      http::metric_family("sluice_gateway_ready", MetricType::Gauge,
                          "1 when /readyz answers 200 (rules loaded, and the cluster reachable or "
                          "the failure policy open)");
  add_value(ready, state.ready ? 1 : 0);
  families.push_back(std::move(ready));

  auto reloads =
      http::metric_family("sluice_gateway_rule_reloads_total", MetricType::Counter,
                          "Rules files read after the first, by result (ok: swapped in; failed: "
                          "refused, the rules before stay)");
  add_value(reloads, static_cast<double>(state.reloads_ok), {{"result", "ok"}});
  add_value(reloads, static_cast<double>(state.reloads_failed), {{"result", "failed"}});
  families.push_back(std::move(reloads));

  auto rules = http::metric_family("sluice_gateway_rules_info", MetricType::Gauge,
                                   "The rules in force: their file and the hash of its bytes");
  add_value(rules, 1, {{"hash", state.rules_hash}, {"source", state.rules_source}});
  families.push_back(std::move(rules));

  auto policies = http::metric_family("sluice_gateway_rules_policies", MetricType::Gauge,
                                      "Policies in the rules in force");
  add_value(policies, static_cast<double>(state.policies));
  families.push_back(std::move(policies));

  const client::ClientCounters& c = state.client;
  auto fallback =
      http::metric_family("sluice_gateway_fallback_decisions_total", MetricType::Counter,
                          "Limits decided by a failure policy (open: the local fallback; closed: "
                          "denied) because their node could not answer");
  add_value(fallback, static_cast<double>(c.fallback_decisions));
  families.push_back(std::move(fallback));

  auto down =
      http::metric_family("sluice_gateway_breaker_events_total", MetricType::Counter,
                          "Cluster nodes taken as down (breaker opened) and found answering again");
  add_value(down, static_cast<double>(c.node_down_events), {{"event", "opened"}});
  add_value(down, static_cast<double>(c.node_up_events), {{"event", "closed"}});
  families.push_back(std::move(down));

  auto open =
      http::metric_family("sluice_gateway_breakers_open", MetricType::Gauge,
                          "Cluster nodes whose breaker is open now: their keys follow the failure "
                          "policy without a call");
  add_value(open, static_cast<double>(c.nodes_down));
  families.push_back(std::move(open));

  auto per_node =
      http::metric_family("sluice_gateway_node_breaker_open", MetricType::Gauge,
                          "1 while the node's breaker is open (its keys follow the failure policy "
                          "without a call), by node address; the nodes of the cluster map");
  for (const client::NodeBreaker& node : state.breakers) {
    add_value(per_node, node.down ? 1 : 0, {{"node", node.address}});
  }
  families.push_back(std::move(per_node));

  auto timeouts = http::metric_family("sluice_gateway_cluster_timeouts_total", MetricType::Counter,
                                      "Calls to the cluster that ended at the deadline");
  add_value(timeouts, static_cast<double>(c.timed_out));
  families.push_back(std::move(timeouts));

  auto leases = http::metric_family("sluice_gateway_leases_total", MetricType::Counter,
                                    "Leases of hot keys granted by the cluster");
  add_value(leases, static_cast<double>(c.leases));
  families.push_back(std::move(leases));

  auto build = http::metric_family("sluice_build_info", MetricType::Gauge, "The running version");
  add_value(build, 1, {{"version", std::string(kVersion)}});
  families.push_back(std::move(build));

  http::append_metric_families(state.http, "sluice_gateway_http", families);
  if (state.grpc) http::append_grpc_metric_families(*state.grpc, "sluice_gateway_grpc", families);
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace sluice::gateway
