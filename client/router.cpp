#include "client/router.h"

#include <fmt/format.h>

#include "net/host_port.h"

namespace sluice::client::detail {

Status check_key(std::string_view key, const NodeLimits& limits) {
  if (key.empty()) return Status(ErrorCode::kInvalidKey, "key is empty");
  if (key.size() > limits.max_key) {
    return Status(ErrorCode::kInvalidKey, "key is " + std::to_string(key.size()) +
                                              " bytes, the server's max key is " +
                                              std::to_string(limits.max_key));
  }
  return Status();
}

Status no_active_node(std::uint64_t epoch) {
  return Status(ErrorCode::kUnavailable,
                "no active node in the cluster map of epoch " + std::to_string(epoch));
}

std::uint32_t Router::add_owners(const NodeLink& link, bool shard_aware) {
  if (!link.unreachable.ok() || link.publics.empty()) {
    OwnerGroup& group = owners_.emplace_back();
    group.limits = link.limits;
    group.node = link.address;
    group.unreachable = link.unreachable.ok() ? Status(ErrorCode::kConnectionFailed,
                                                       link.address + " has no connection")
                                              : link.unreachable;
    group.health = link.health.get();
    return 1;
  }
  if (shard_aware && !link.shards.empty()) {
    for (const std::vector<NodeConnection*>& shard : link.shards) {
      owners_.push_back(OwnerGroup{shard, link.limits, link.address, Status(), link.health.get()});
    }
    return static_cast<std::uint32_t>(link.shards.size());
  }
  owners_.push_back(
      OwnerGroup{link.publics, link.limits, link.address, Status(), link.health.get()});
  return 1;
}

std::shared_ptr<const Router> Router::for_node(NodeConnection* control, const NodeLink& link,
                                               bool shard_aware) {
  std::shared_ptr<Router> router(new Router(control));
  router->add_owners(link, shard_aware);
  return router;
}

std::shared_ptr<const Router> Router::for_cluster(NodeConnection* control, cluster::ClusterMap map,
                                                  std::span<const NodeLink* const> ring_links,
                                                  bool shard_aware) {
  std::shared_ptr<Router> router(new Router(control));
  router->nodes_.reserve(ring_links.size());
  for (const NodeLink* link : ring_links) {
    NodeRoute route;
    route.first_owner = static_cast<std::uint32_t>(router->owners_.size());
    route.shards = router->add_owners(*link, shard_aware);
    if (link->unreachable.ok() && !link->publics.empty()) route.control = link->publics.front();
    router->nodes_.push_back(route);
  }
  router->map_.emplace(std::move(map));
  return router;
}

Result<NodeConnection*> Router::node_control(std::string_view id) const {
  if (!map_) {
    if (control_ != nullptr) return control_;
    return owners_.front().unreachable;  // the stand-in's: no seed has answered yet
  }
  const std::optional<cluster::NodeIndex> index = map_->ring().find(id);
  if (!index) {
    // Said as it is: a second DRAIN of a draining node is the common case.
    const cluster::ClusterNode* node = map_->find(id);
    const std::string epoch = std::to_string(map_->epoch());
    if (node == nullptr) {
      return Status(
          ErrorCode::kConnectionFailed,
          "node " + std::string(id) + " is not in the client's map (epoch " + epoch + ")");
    }
    return Status(ErrorCode::kConnectionFailed,
                  "node " + std::string(id) + " is " +
                      std::string(cluster::node_state_name(node->state)) +
                      ", not active, in the client's map (epoch " + epoch + ")");
  }
  const NodeRoute& node = nodes_[*index];
  if (node.control != nullptr) return node.control;
  const Status& why = owners_[node.first_owner].unreachable;
  if (!why.ok()) return why;
  return Status(ErrorCode::kConnectionFailed, "the client routes to no node " + std::string(id));
}

NodeConnection* Router::connection(std::size_t index) const {
  const std::vector<NodeConnection*>& group = owners_[index].connections;
  if (group.empty()) return nullptr;
  if (group.size() == 1) return group[0];
  const std::size_t n = group.size();
  const std::size_t start = rotation_.fetch_add(1, std::memory_order_relaxed) % n;
  std::size_t best = start;
  std::size_t best_load = group[start]->load();
  // The scan wraps by hand: a division per connection looked at was a tenth of sluice-load's
  // time at 50 busy connections (docs/BENCHMARKS.md, "W2 and the load generator").
  std::size_t c = start;
  for (std::size_t i = 1; i < n && best_load > 0; ++i) {
    if (++c == n) c = 0;
    const std::size_t load = group[c]->load();
    if (load < best_load) {
      best = c;
      best_load = load;
    }
  }
  return group[best];
}

namespace {

cluster::NodeState node_state(protocol::WireNodeState state) {
  switch (state) {
    case protocol::WireNodeState::kJoining:
      return cluster::NodeState::kJoining;
    case protocol::WireNodeState::kActive:
      return cluster::NodeState::kActive;
    case protocol::WireNodeState::kDraining:
      return cluster::NodeState::kDraining;
    case protocol::WireNodeState::kDown:
      return cluster::NodeState::kDown;
  }
  return cluster::NodeState::kDown;
}

}  // namespace

Expected<cluster::ClusterMap> map_from_message(const protocol::ClusterMapMessage& message) {
  std::vector<cluster::ClusterNode> nodes;
  nodes.reserve(message.nodes.size());
  for (const protocol::WireNode& node : message.nodes) {
    // The wire carries an IPv6 host without brackets; an address has them.
    nodes.push_back({node.id, net::format_host_port(node.host, node.port), node_state(node.state)});
  }
  cluster::RingParams params;
  params.hash_version = message.ring_version;
  params.partition_bits = message.partition_bits;
  params.vnodes_per_node = message.vnodes;
  auto map = cluster::ClusterMap::make(message.epoch, std::move(nodes), params);
  if (!map) return Unexpected{fmt::format("epoch {}: {}", message.epoch, map.error())};
  return map;
}

}  // namespace sluice::client::detail
