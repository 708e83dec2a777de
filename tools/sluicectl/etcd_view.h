// sluicectl cluster --etcd: etcd's view of a cluster (docs/OPERATIONS.md, "Watching"), which is
// there even when no node answers. Fetching (every member record under the cluster's prefix at
// one revision, each with its lease's TTL left) is apart from formatting, so the formats are
// tested without an etcd.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/expected.h"

namespace sluice::ctl {

// One key under the cluster's members prefix.
struct EtcdMember {
  std::string key;
  // The record's fields; when it does not decode, `problem` says why and they are empty.
  std::string id, state, address;
  std::string shards;  // the shard ports, "P0,P1,...", or ""
  std::string problem;
  std::int64_t lease = 0;   // 0: the key has none
  std::int64_t ttl_s = -1;  // left: -1 when the lease has expired or etcd did not say
  std::int64_t granted_s = 0;
};

struct EtcdView {
  std::int64_t revision = 0;  // the store's revision when the members were read
  std::vector<EtcdMember> members;
};

// Reads the members of cluster `cluster_name` from etcd at `etcd` (http://HOST:PORT[,...]),
// each call within `timeout`. The error is the line to print after "sluicectl: " ("--etcd:
// ..." for bad endpoints, "etcd at ...: ..." when etcd could not be read).
Expected<EtcdView> fetch_etcd_view(const std::string& etcd, const std::string& cluster_name,
                                   std::chrono::milliseconds timeout);

// The view as a table (a line for the revision and the count, then a row per member) or as
// one JSON object.
std::string format_etcd_view(std::string_view etcd, std::string_view cluster_name,
                             const EtcdView& view, bool json);

}  // namespace sluice::ctl
