// The cluster map: what a node serves to clients (CLUSTER) and routes by. An epoch, the nodes
// with their addresses and states, and the ring parameters; the ring over the active nodes
// follows from them. A value: copies are cheap (the ring is shared, immutable), and two maps
// are equal when epoch, params and node set are, whatever order the nodes came in.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/ring.h"
#include "core/expected.h"
#include "core/key_hash.h"

namespace sluice::cluster {

enum class NodeState : std::uint8_t {
  kJoining = 1,   // pulling the ranges it will own; not in the ring yet
  kActive = 2,    // in the ring: owns and replicates ranges
  kDraining = 3,  // handing its ranges over before it leaves; out of the ring
  kDown = 4,      // known but unreachable; out of the ring
};

// "joining", "active", "draining", "down".
std::string_view node_state_name(NodeState state);
std::optional<NodeState> parse_node_state(std::string_view name);

// Whether nodes in `state` are ring members: only active ones.
constexpr bool in_ring(NodeState state) { return state == NodeState::kActive; }

struct ClusterNode {
  std::string id;       // check_node_id()
  std::string address;  // "HOST:PORT", parse_node_address()
  NodeState state = NodeState::kJoining;
  friend bool operator==(const ClusterNode&, const ClusterNode&) = default;
};

class ClusterMap {
 public:
  // Epoch 0, no nodes, default ring params: nobody owns anything.
  ClusterMap();

  // Refuses bad ring params, an invalid id, address or state, an id or an address (by
  // NodeAddress::identity()) given twice, and more than kMaxRingNodes nodes.
  static Expected<ClusterMap> make(std::uint64_t epoch, std::vector<ClusterNode> nodes,
                                   const RingParams& params = {});

  std::uint64_t epoch() const { return epoch_; }
  const RingParams& ring_params() const { return ring_->params(); }
  // Every node, in any state, sorted by id.
  const std::vector<ClusterNode>& nodes() const { return nodes_; }
  const ClusterNode* find(std::string_view id) const;
  // The ring over the active nodes.
  const Ring& ring() const { return *ring_; }

  // The active node that is the primary (replica) of `hash`; nullptr when there is none (no
  // active node, or only one for the replica).
  const ClusterNode* primary_of(const KeyHash& hash) const;
  const ClusterNode* replica_of(const KeyHash& hash) const;
  // Whether node `id` is the primary of `hash`. A node on the hot path looks its NodeIndex up
  // once (ring().find(id)) and compares it with ring().primary_of(hash) instead.
  bool owns(std::string_view id, const KeyHash& hash) const;
  // The index in nodes() of ring node `index` (REQUIRES: index < ring().nodes().size()).
  std::size_t node_index(NodeIndex index) const { return ring_node_[index]; }

  friend bool operator==(const ClusterMap& a, const ClusterMap& b) {
    return a.epoch_ == b.epoch_ && a.ring_params() == b.ring_params() && a.nodes_ == b.nodes_;
  }

 private:
  ClusterMap(std::uint64_t epoch, std::vector<ClusterNode> nodes, std::shared_ptr<const Ring> ring);
  const ClusterNode* node_at(NodeIndex index) const;

  std::uint64_t epoch_ = 0;
  std::vector<ClusterNode> nodes_;      // sorted by id
  std::shared_ptr<const Ring> ring_;    // never null
  std::vector<std::size_t> ring_node_;  // NodeIndex in ring_ -> index in nodes_
};

// The map `map` will become once its joining nodes turn active: the same epoch and nodes,
// every joining node active. A joining node pulls the partitions this map gives it, and the
// primaries stream their changes to it, before it turns active (docs/ARCHITECTURE.md,
// "Joining"). nullopt when no node is joining.
std::optional<ClusterMap> with_joining_active(const ClusterMap& map);

}  // namespace sluice::cluster
