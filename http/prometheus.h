// An http::Server's and an http::GrpcServer's counters as Prometheus metric families, named
// `<prefix>_...` (sluiced uses "sluice_http", the gateway its own prefixes), for a
// prometheus::Collectable or a scrape to return.
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <string_view>
#include <vector>

#include "http/grpc_server.h"
#include "http/server.h"

namespace sluice::http {

// A family with no samples yet, for a Collectable's Collect() to fill.
prometheus::MetricFamily metric_family(std::string_view name, prometheus::MetricType type,
                                       std::string_view help);
// One sample of a counter or a gauge (by `type`), with its labels.
prometheus::ClientMetric metric_sample(prometheus::MetricType type, double value,
                                       std::vector<prometheus::ClientMetric::Label> labels = {});
// Appends the family `name` with its one unlabelled sample.
void append_one(std::vector<prometheus::MetricFamily>& out, std::string_view name,
                prometheus::MetricType type, std::string_view help, double value);

// Appends <prefix>_requests_total, _bad_requests_total, _connections_total,
// _connections_open, _connections_refused_total and _timeouts_total{kind="idle|read"}.
void append_metric_families(const ServerCounters& counters, std::string_view prefix,
                            std::vector<prometheus::MetricFamily>& out);

// A GrpcServer's: <prefix>_calls_total, _refused_calls_total, _connections_total,
// _connections_open, _connections_refused_total, _protocol_errors_total and
// _idle_timeouts_total.
void append_grpc_metric_families(const GrpcCounters& counters, std::string_view prefix,
                                 std::vector<prometheus::MetricFamily>& out);

}  // namespace sluice::http
