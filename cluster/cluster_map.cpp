#include "cluster/cluster_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "cluster/node.h"

namespace sluice::cluster {

std::string_view node_state_name(NodeState state) {
  switch (state) {
    case NodeState::kJoining:
      return "joining";
    case NodeState::kActive:
      return "active";
    case NodeState::kDraining:
      return "draining";
    case NodeState::kDown:
      return "down";
  }
  return "unknown";
}

std::optional<NodeState> parse_node_state(std::string_view name) {
  for (const NodeState state :
       {NodeState::kJoining, NodeState::kActive, NodeState::kDraining, NodeState::kDown}) {
    if (name == node_state_name(state)) return state;
  }
  return std::nullopt;
}

ClusterMap::ClusterMap() : ring_(std::make_shared<const Ring>()) {}

ClusterMap::ClusterMap(std::uint64_t epoch, std::vector<ClusterNode> nodes,
                       std::shared_ptr<const Ring> ring)
    : epoch_(epoch), nodes_(std::move(nodes)), ring_(std::move(ring)) {
  // Both lists are sorted by id, so one merge pairs every ring node with its ClusterNode.
  ring_node_.reserve(ring_->nodes().size());
  std::size_t n = 0;
  for (const std::string& id : ring_->nodes()) {
    while (nodes_[n].id != id) ++n;
    ring_node_.push_back(n);
  }
}

Expected<ClusterMap> ClusterMap::make(std::uint64_t epoch, std::vector<ClusterNode> nodes,
                                      const RingParams& params) {
  if (nodes.size() > kMaxRingNodes) {
    return Unexpected{fmt::format("{} nodes, more than {}", nodes.size(), kMaxRingNodes)};
  }
  std::sort(nodes.begin(), nodes.end(),
            [](const ClusterNode& a, const ClusterNode& b) { return a.id < b.id; });
  if (const auto twice = std::adjacent_find(
          nodes.begin(), nodes.end(),
          [](const ClusterNode& a, const ClusterNode& b) { return a.id == b.id; });
      twice != nodes.end()) {
    return Unexpected{fmt::format("node id {} given twice", quote_for_message(twice->id))};
  }
  std::unordered_map<std::string, std::string_view> id_of_address;  // identity -> id
  std::vector<std::string> active;
  for (const ClusterNode& node : nodes) {
    if (std::string why = check_node_id(node.id); !why.empty()) return Unexpected{why};
    const Expected<NodeAddress> address = parse_node_address(node.address);
    if (!address) return Unexpected{fmt::format("node \"{}\": {}", node.id, address.error())};
    if (!parse_node_state(node_state_name(node.state))) {
      return Unexpected{
          fmt::format("node \"{}\": unknown state {}", node.id, static_cast<unsigned>(node.state))};
    }
    if (const auto [it, fresh] = id_of_address.emplace(address->identity(), node.id); !fresh) {
      return Unexpected{fmt::format("nodes \"{}\" and \"{}\" have one address, {}", it->second,
                                    node.id, node.address)};
    }
    if (in_ring(node.state)) active.push_back(node.id);
  }
  Expected<Ring> ring = Ring::build(std::move(active), params);
  if (!ring) return Unexpected{ring.error()};
  return ClusterMap(epoch, std::move(nodes), std::make_shared<const Ring>(std::move(ring).value()));
}

const ClusterNode* ClusterMap::find(std::string_view id) const {
  const auto it =
      std::lower_bound(nodes_.begin(), nodes_.end(), id,
                       [](const ClusterNode& n, std::string_view v) { return n.id < v; });
  return it != nodes_.end() && it->id == id ? &*it : nullptr;
}

const ClusterNode* ClusterMap::node_at(NodeIndex index) const {
  return index == kNoNode ? nullptr : &nodes_[ring_node_[index]];
}

const ClusterNode* ClusterMap::primary_of(const KeyHash& hash) const {
  return node_at(ring_->owners_of(hash).primary);
}

const ClusterNode* ClusterMap::replica_of(const KeyHash& hash) const {
  return node_at(ring_->owners_of(hash).replica);
}

bool ClusterMap::owns(std::string_view id, const KeyHash& hash) const {
  const std::optional<NodeIndex> index = ring_->find(id);
  return index && ring_->primary_of(hash) == *index;
}

std::optional<ClusterMap> with_joining_active(const ClusterMap& map) {
  std::vector<ClusterNode> nodes = map.nodes();
  bool joining = false;
  for (ClusterNode& node : nodes) {
    if (node.state != NodeState::kJoining) continue;
    node.state = NodeState::kActive;
    joining = true;
  }
  if (!joining) return std::nullopt;
  // The same ids and addresses as a map that was made already: only the ring is new.
  Expected<ClusterMap> next = ClusterMap::make(map.epoch(), std::move(nodes), map.ring_params());
  if (!next) return std::nullopt;
  return std::move(next).value();
}

}  // namespace sluice::cluster
