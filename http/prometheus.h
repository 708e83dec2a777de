// An http::Server's counters as Prometheus metric families, named `<prefix>_...` (sluiced uses
// "sluice_http", the gateway its own prefix), for a prometheus::Collectable to return at scrape.
#pragma once

#include <prometheus/metric_family.h>

#include <string_view>
#include <vector>

#include "http/server.h"

namespace sluice::http {

// Appends <prefix>_requests_total, _bad_requests_total, _connections_total,
// _connections_open, _connections_refused_total and _timeouts_total{kind="idle|read"}.
void append_metric_families(const ServerCounters& counters, std::string_view prefix,
                            std::vector<prometheus::MetricFamily>& out);

}  // namespace sluice::http
