#include "server/node_metrics.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

#include "cluster/cluster_map.h"
#include "cluster/lease_fence.h"
#include "core/rule.h"
#include "core/version.h"
#include "http/prometheus.h"
#include "server/server.h"
#include "server/shard_counters.h"

namespace sluice::server {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

// How each STATS counter (ShardStat) is exported, summed over the shards: one entry per
// ShardStat, in its order (checked below), so that a counter added to STATS without a line
// here does not compile. An empty name: exported otherwise (allowed and denied become
// sluice_decisions_total by algorithm).
struct StatMetric {
  ShardStat stat;
  std::string_view name;
  MetricType type;
  std::string_view help;
};

constexpr MetricType kCounter = MetricType::Counter;
constexpr MetricType kGauge = MetricType::Gauge;

constexpr std::array<StatMetric, static_cast<std::size_t>(ShardStat::kCount)> kStatMetrics = {{
    {ShardStat::kKeys, "sluice_keys", kGauge,
     "Records stored, including expired ones the sweep has not dropped yet"},
    {ShardStat::kMemoryBytes, "sluice_memory_bytes", kGauge,
     "Counter table and sliding-log memory, as allocated (capped by sluice_memory_limit_bytes)"},
    {ShardStat::kSlots, "sluice_table_slots", kGauge, "Slots in the counter tables"},
    {ShardStat::kAllowed, "", kCounter, ""},
    {ShardStat::kDenied, "", kCounter, ""},
    {ShardStat::kInvalidItems, "sluice_invalid_items_total", kCounter,
     "Items refused for an invalid rule or key"},
    {ShardStat::kExpired, "sluice_expired_total", kCounter, "Records dropped after they expired"},
    {ShardStat::kEvicted, "sluice_evicted_total", kCounter,
     "Live records evicted under the memory cap (their counts are forgotten)"},
    {ShardStat::kFailedInserts, "sluice_failed_inserts_total", kCounter,
     "Requests that could not be stored at all (answered no_memory)"},
    {ShardStat::kHandedOver, "sluice_handed_over_items_total", kCounter,
     "Items received on a shard that does not own their key, passed to the owner"},
    {ShardStat::kConnections, "sluice_connections_open", kGauge,
     "Client and node connections open now"},
    {ShardStat::kConnectionsTotal, "sluice_connections_total", kCounter,
     "Connections accepted since start"},
    {ShardStat::kProtocolErrors, "sluice_protocol_errors_total", kCounter,
     "Connections closed for a malformed frame or a broken limit"},
    {ShardStat::kIdleClosed, "sluice_connections_idle_closed_total", kCounter,
     "Connections closed by the idle timeout"},
    {ShardStat::kRejectedConnections, "sluice_connections_refused_total", kCounter,
     "Connections refused over --max-connections or for want of a file descriptor"},
    {ShardStat::kAuthFailures, "sluice_auth_failures_total", kCounter,
     "Connections refused with unauthenticated (wrong or missing token)"},
    {ShardStat::kHugePages, "sluice_huge_page_shards", kGauge,
     "Shards keeping their counters in 2 MiB huge pages"},
    {ShardStat::kBufferBytes, "sluice_buffer_bytes", kGauge,
     "Connection buffers held, as counted against sluice_buffer_limit_bytes"},
    {ShardStat::kOverloadClosed, "sluice_connections_overload_closed_total", kCounter,
     "Connections closed because their shard was out of buffer memory"},
    {ShardStat::kRedirected, "sluice_redirected_items_total", kCounter,
     "Items answered REDIRECT: this node is not their primary"},
    {ShardStat::kUnavailable, "sluice_unavailable_items_total", kCounter,
     "Items answered UNAVAILABLE: primary here but pulling the partition, or fenced"},
    {ShardStat::kReplicaApplied, "sluice_replica_applied_records_total", kCounter,
     "Records received by REPLICATE and merged"},
    {ShardStat::kReplicaRefused, "sluice_replica_refused_records_total", kCounter,
     "Records received by REPLICATE and refused: the sender is not their primary here"},
    {ShardStat::kReplicationSent, "sluice_replication_sent_records_total", kCounter,
     "Records sent to replicas"},
    {ShardStat::kReplicationAcked, "sluice_replication_acked_records_total", kCounter,
     "Records sent to replicas and acknowledged"},
    {ShardStat::kReplicationDropped, "sluice_replication_dropped_records_total", kCounter,
     "Records never to be sent to their replica (full queue, or the node left the map)"},
    {ShardStat::kPullPages, "sluice_pull_served_pages_total", kCounter,
     "PULL pages this node served to others"},
    {ShardStat::kPullRecords, "sluice_pull_served_records_total", kCounter,
     "Records in the PULL pages this node served"},
    {ShardStat::kPulledRecords, "sluice_pulled_records_total", kCounter,
     "Records this node pulled from others and merged"},
    {ShardStat::kLeases, "sluice_leases_total", kCounter,
     "Lease items granted (each also counted as an allowed decision)"},
    {ShardStat::kLeasedUnits, "sluice_leased_units_total", kCounter,
     "Units taken by the leases granted"},
    {ShardStat::kGiveBacks, "sluice_give_backs_total", kCounter, "Give-back items received"},
    {ShardStat::kCreditedUnits, "sluice_credited_units_total", kCounter,
     "Units credited back to their keys by give-backs"},
    {ShardStat::kStaleFences, "sluice_stale_fences_total", kCounter,
     "Partitions a fencing PULL listed that this node did not fence (the PULL's map was older)"},
    {ShardStat::kReplicationRefused, "sluice_replication_refused_records_total", kCounter,
     "Records this node sent that a replica refused (their maps differ)"},
    {ShardStat::kEvictedExhausted, "sluice_evicted_exhausted_total", kCounter,
     "Evicted records whose key had no capacity left at its last request (a key being denied)"},
}};

constexpr bool stat_metrics_in_order() {
  for (std::size_t i = 0; i < kStatMetrics.size(); ++i) {
    if (kStatMetrics[i].stat != static_cast<ShardStat>(i)) return false;
  }
  return true;
}
static_assert(stat_metrics_in_order(), "kStatMetrics needs one entry per ShardStat, in order");

using http::append_one;
using http::metric_family;
using http::metric_sample;

constexpr std::array<std::string_view, 4> kStateNames = {"joining", "active", "draining", "down"};
constexpr std::array<std::string_view, 4> kFenceReasons = {"none", "lease_lapsed",
                                                           "map_unconfirmed", "no_lease"};

}  // namespace

std::vector<MetricFamily> NodeMetrics::Collect() const {
  std::vector<MetricFamily> out;
  const unsigned shards = server_.shard_count();
  const ServerConfig& config = server_.config();

  // The STATS counters, summed over the shards.
  std::array<std::uint64_t, kStatMetrics.size()> totals{};
  for (unsigned i = 0; i < shards; ++i) {
    const ShardCounters& counters = server_.shard_counters(i);
    for (std::size_t s = 0; s < totals.size(); ++s) totals[s] += counters.values[s].get();
  }
  for (const StatMetric& m : kStatMetrics) {
    if (m.name.empty()) continue;
    append_one(out, m.name, m.type, m.help,
               static_cast<double>(totals[static_cast<std::size_t>(m.stat)]));
  }

  // Decisions by algorithm and outcome.
  MetricFamily decisions =
      metric_family("sluice_decisions_total", kCounter,
                    "Decisions made on this node as the key's owner (peeks not counted; a lease "
                    "granted counts as allowed), by algorithm and outcome");
  for (std::uint8_t a = kMinAlgorithm; a <= kMaxAlgorithm; ++a) {
    for (const bool allowed : {true, false}) {
      std::uint64_t n = 0;
      for (unsigned i = 0; i < shards; ++i)
        n += server_.shard_counters(i).decisions.get(a, allowed);
      decisions.metric.push_back(
          metric_sample(kCounter, static_cast<double>(n),
                        {{"algorithm", std::string(algorithm_name(static_cast<Algorithm>(a)))},
                         {"outcome", allowed ? "allowed" : "denied"}}));
    }
  }
  out.push_back(std::move(decisions));

  // ACQUIRE frame latency: the shards' buckets summed, then made cumulative.
  MetricFamily latency = metric_family(
      "sluice_decision_duration_seconds", MetricType::Histogram,
      "Time on the node per ACQUIRE frame, from the start of its parse to its reply "
      "appended to the connection's output (hand-overs to other shards included; socket "
      "and queueing time before the parse not included)");
  {
    constexpr std::size_t kBuckets = LatencyHistogram::kBoundsNs.size() + 1;
    std::array<std::uint64_t, kBuckets> buckets{};
    std::uint64_t sum_ns = 0;
    for (unsigned i = 0; i < shards; ++i) {
      const LatencyHistogram& h = server_.shard_counters(i).acquire_latency;
      for (std::size_t b = 0; b < kBuckets; ++b) buckets[b] += h.buckets[b].get();
      sum_ns += h.sum_ns.get();
    }
    ClientMetric m;
    std::uint64_t cumulative = 0;
    for (std::size_t b = 0; b < kBuckets; ++b) {
      cumulative += buckets[b];
      ClientMetric::Bucket bucket;
      bucket.cumulative_count = cumulative;
      bucket.upper_bound = b < LatencyHistogram::kBoundsNs.size()
                               ? static_cast<double>(LatencyHistogram::kBoundsNs[b]) / 1e9
                               : std::numeric_limits<double>::infinity();
      m.histogram.bucket.push_back(bucket);
    }
    m.histogram.sample_count = cumulative;
    m.histogram.sample_sum = static_cast<double>(sum_ns) / 1e9;
    latency.metric.push_back(std::move(m));
  }
  out.push_back(std::move(latency));

  // Limits and identity.
  append_one(out, "sluice_memory_limit_bytes", kGauge, "The cap on counter memory (--max-memory)",
             static_cast<double>(config.max_memory));
  append_one(out, "sluice_buffer_limit_bytes", kGauge,
             "The cap on connection buffers (--max-buffer-memory, after its default)",
             static_cast<double>(config.max_buffer_memory));
  append_one(out, "sluice_connections_limit", kGauge,
             "Connections the node serves at most (--max-connections, fitted to the open-file "
             "limit)",
             static_cast<double>(config.max_connections));
  append_one(out, "sluice_shards", kGauge, "Shard threads", static_cast<double>(shards));
  out.push_back(metric_family("sluice_build_info", kGauge, "The sluiced version; always 1"));
  out.back().metric.push_back(metric_sample(kGauge, 1, {{"version", std::string(kVersion)}}));

  // The cluster.
  const ClusterStatus cluster = server_.cluster_status();
  append_one(out, "sluice_cluster_epoch", kGauge,
             "Epoch of the cluster map in force (0 outside a cluster)",
             static_cast<double>(cluster.epoch));
  MetricFamily members = metric_family("sluice_cluster_members", kGauge,
                                       "Nodes of the cluster map in force, by state");
  for (std::size_t s = 0; s < kStateNames.size(); ++s) {
    members.metric.push_back(metric_sample(kGauge, static_cast<double>(cluster.members[s]),
                                           {{"state", std::string(kStateNames[s])}}));
  }
  out.push_back(std::move(members));
  append_one(out, "sluice_node_ready", kGauge,
             "1 while the node serves as primary (what /readyz answers 200 for)",
             cluster.not_ready_reason().empty() ? 1 : 0);
  append_one(out, "sluice_node_fenced", kGauge,
             "1 while the node serves nothing as primary: its fence is closed (etcd mode)",
             cluster.fenced ? 1 : 0);
  MetricFamily reason = metric_family(
      "sluice_node_fence_reason", kGauge,
      "Why the fence is closed: 1 for the current reason, 0 for the others (etcd mode)");
  for (std::size_t r = 0; r < kFenceReasons.size(); ++r) {
    reason.metric.push_back(metric_sample(kGauge, cluster.fence_reason == r ? 1 : 0,
                                          {{"reason", std::string(kFenceReasons[r])}}));
  }
  out.push_back(std::move(reason));

  // Replication per peer (a label per node of the map: bounded by the cluster's size).
  MetricFamily pending =
      metric_family("sluice_replication_pending_records", kGauge,
                    "Records queued for a replica or sent and not yet acknowledged");
  MetricFamily lag =
      metric_family("sluice_replication_lag_seconds", kGauge,
                    "Age of the oldest record not yet acknowledged by a replica (0 when "
                    "none waits)");
  MetricFamily bytes = metric_family("sluice_replication_pending_bytes", kGauge,
                                     "REPLICATE bytes sent to a replica and not yet acknowledged");
  MetricFamily dropped =
      metric_family("sluice_replication_peer_dropped_records_total", kCounter,
                    "Records dropped toward a replica since it entered this node's map");
  MetricFamily up =
      metric_family("sluice_replication_link_up", kGauge,
                    "1 when every link to a replica is up (0 down, or idle: none made)");
  MetricFamily stalled =
      metric_family("sluice_replication_stalled", kGauge,
                    "1 while a replica's lag is at least --replication-stall-after");
  for (const ClusterStatus::Peer& peer : cluster.peers) {
    const std::vector<ClientMetric::Label> labels = {{"peer", peer.node}};
    pending.metric.push_back(metric_sample(kGauge, static_cast<double>(peer.records), labels));
    lag.metric.push_back(metric_sample(kGauge, static_cast<double>(peer.lag_ms) / 1e3, labels));
    bytes.metric.push_back(metric_sample(kGauge, static_cast<double>(peer.bytes), labels));
    dropped.metric.push_back(metric_sample(kCounter, static_cast<double>(peer.dropped), labels));
    up.metric.push_back(metric_sample(kGauge, peer.up ? 1 : 0, labels));
    stalled.metric.push_back(metric_sample(kGauge, peer.stalled ? 1 : 0, labels));
  }
  for (MetricFamily* f : {&pending, &lag, &bytes, &dropped, &up, &stalled}) {
    if (!f->metric.empty()) out.push_back(std::move(*f));
  }

  if (http_ != nullptr) http::append_metric_families(http_->counters(), "sluice_http", out);
  return out;
}

}  // namespace sluice::server
