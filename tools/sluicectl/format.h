// What sluicectl prints for each answer, as text or as one line of JSON (--json): formatting
// only, to a string the caller writes out. docs/CLIENT.md, section 8, shows every format; the
// bytes here are the ones it shows.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"

namespace sluice::ctl {

// `text` as a JSON string literal, quotes included.
std::string json_string(std::string_view text);

// ping: the seed's endpoint, node id and shard count, and the round trip.
std::string format_ping(const client::ServerInfo& info, std::chrono::nanoseconds rtt, bool json);

// acquire, peek: the decision for `key`, with `headers` (Decision::headers() at the time it
// came back).
std::string format_decision(std::string_view key, const client::Decision& d,
                            const std::vector<client::HeaderField>& headers, bool json);

// reset: whether the key existed.
std::string format_reset(std::string_view key, bool existed, bool json);

// stats of the node `node` describes (the one asked): a first line naming it, then
// "shard.<i>.<name>" and "total.<name>" as a row per name (in the order first seen) with a
// column per shard and one for the total ("-" where a counter is missing); any other counter is
// listed after the table. JSON: {"server":..,"node_id":..,"total":{..},"shards":[{..},..],
// "other":{..}}.
std::string format_stats(const client::ServerInfo& node, const std::vector<client::Stat>& stats,
                         bool json);

// cluster: the map of the node at `endpoint` (the seed), each node's share of the ring, in etcd
// mode whether it serves as primary (or is fenced, and why) and its etcd member, and its
// replication per peer (lag, link idle, up or down, stalled); a node outside any cluster says so.
// What `cluster --etcd` read from etcd.
struct EtcdSide {
  // The node ids etcd holds a record of: a node of the map without one has lost its lease while
  // its keys have not moved yet.
  std::vector<std::string> ids;
  // sluicectl's --etcd, in its order ("http://HOST:PORT"): a node reports the index of the member
  // it uses in its own --etcd, shown with the URL at that index here (the same member when the
  // operator gives the nodes' list, as the docs ask).
  std::vector<std::string> urls;
};
std::string format_cluster(const client::ClusterInfo& info, std::string_view endpoint, bool json,
                           const EtcdSide* etcd = nullptr);

// cluster reload: a line per node (reloaded, refused, or the error), or one JSON object with
// the counts of refusals and failures.
std::string format_reload(const std::vector<client::ReloadOutcome>& outcomes, bool json);
// 2 (kExitError) when a node could not be asked, else 1 (kExitDenied) when one refused the
// file, else 0.
int reload_exit_status(const std::vector<client::ReloadOutcome>& outcomes);

// drain: the node's answer to DRAIN (asked at which epoch, or why it refused).
std::string format_drain(const client::ReloadOutcome& outcome, bool json);

// inspect: the key's partition, primary and replica in the client's map, then a line per copy
// asked: the node's role as it sees it, the shard, and what it stores (algorithm, the state's
// fields by name with times relative to the node's clock, capacity class, when it turns fresh)
// or that it stores nothing, or why it could not be asked. JSON: one object with the same,
// times as the node's clock in ns plus "expires_in_ms".
std::string format_inspect(std::string_view key, const client::KeyInspection& inspection,
                           bool json);
// 0 when the primary (the seed outside a cluster) stores the key, 1 when it stores nothing,
// 2 (kExitError) when it could not be asked or no node owns the key.
int inspect_exit_status(const client::KeyInspection& inspection);

}  // namespace sluice::ctl
