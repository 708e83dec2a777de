// sluiced's Prometheus metrics (docs/OPERATIONS.md, "Metrics"): a prometheus::Collectable whose
// Collect() builds every family at scrape time from what the node already keeps: the shards'
// single-writer counters (server/shard_counters.h, the source STATS reads too), the cluster
// status and the HTTP server's own counters. Nothing is recorded for it on the decision path
// beyond those counters, so a scrape costs the scraper's thread only.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <vector>

namespace sluice::http {
class Server;
}

namespace sluice::server {

class Server;

class NodeMetrics : public prometheus::Collectable {
 public:
  // `http` (may be null): the server /metrics is served by, whose counters are exported too.
  // Both must outlive this.
  NodeMetrics(const Server& server, const http::Server* http) : server_(server), http_(http) {}

  // Any thread.
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const Server& server_;
  const http::Server* http_;
};

}  // namespace sluice::server
