// The cluster map a CLUSTER reply describes, for tests that read it off the wire.
#pragma once

#include <fmt/core.h>

#include <optional>
#include <utility>
#include <vector>

#include "cluster/cluster_map.h"
#include "protocol/cluster_messages.h"

namespace sluice::test {

// nullopt when the reply is not a valid map.
inline std::optional<cluster::ClusterMap> map_of(const protocol::ClusterMapMessage& message) {
  std::vector<cluster::ClusterNode> nodes;
  for (const protocol::WireNode& node : message.nodes) {
    // The wire numbers states from 0, cluster::NodeState from 1 (PROTOCOL.md 10.3).
    nodes.push_back({node.id, fmt::format("{}:{}", node.host, node.port),
                     static_cast<cluster::NodeState>(static_cast<int>(node.state) + 1)});
  }
  auto map = cluster::ClusterMap::make(message.epoch, std::move(nodes));
  if (!map.has_value()) return std::nullopt;
  return std::move(*map);
}

}  // namespace sluice::test
