#include "server/cluster_view.h"

#include <utility>

#include "cluster/node.h"

namespace sluice::server {

PartitionStates::PartitionStates(std::uint32_t partitions)
    : size_(partitions), states_(std::make_unique<std::atomic<std::uint64_t>[]>(partitions)) {
  for (std::uint32_t p = 0; p < partitions; ++p) states_[p].store(0, std::memory_order_relaxed);
}

namespace {

protocol::WireNodeState wire_state(cluster::NodeState state) {
  switch (state) {
    case cluster::NodeState::kJoining:
      return protocol::WireNodeState::kJoining;
    case cluster::NodeState::kActive:
      return protocol::WireNodeState::kActive;
    case cluster::NodeState::kDraining:
      return protocol::WireNodeState::kDraining;
    case cluster::NodeState::kDown:
      return protocol::WireNodeState::kDown;
  }
  return protocol::WireNodeState::kDown;
}

}  // namespace

std::shared_ptr<const ClusterView> make_cluster_view(const cluster::ClusterMap& map,
                                                     std::string_view self_id,
                                                     std::shared_ptr<PartitionStates> states,
                                                     std::vector<cluster::LostMember> lost) {
  auto view = std::make_shared<ClusterView>();
  view->lost = std::move(lost);
  view->map = map;
  view->self = map.ring().find(self_id).value_or(cluster::kNoNode);
  view->states = std::move(states);
  view->joined = cluster::with_joining_active(map);
  protocol::ClusterMapMessage& m = view->message;
  m.epoch = map.epoch();
  m.ring_version = static_cast<std::uint8_t>(map.ring_params().hash_version);
  m.partition_bits = static_cast<std::uint8_t>(map.ring_params().partition_bits);
  m.vnodes = static_cast<std::uint16_t>(map.ring_params().vnodes_per_node);
  for (std::size_t i = 0; i < map.nodes().size(); ++i) {
    const cluster::ClusterNode& node = map.nodes()[i];
    const auto address = cluster::parse_node_address(node.address);
    protocol::WireNode wire;
    wire.state = wire_state(node.state);
    wire.id = node.id;
    if (address) {
      wire.host = address->host;
      wire.port = address->port;
    }
    if (node.id == self_id) m.self = static_cast<std::uint16_t>(i);
    m.nodes.push_back(std::move(wire));
  }
  return view;
}

}  // namespace sluice::server
