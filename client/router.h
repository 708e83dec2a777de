// Internal: which connection a key goes to. A Router is an immutable snapshot of the client's
// routing: one node (its shards), or a cluster map with the connections of each active node.
// The I/O thread builds a new one when the map changes or a node's shards become known, and
// publishes it (client/map_tracker.h); a call routes by the one it took, and a router stays
// alive while anyone holds it. Connections outlive every router (they live until the client
// dies), so a stale router still points at valid connections.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "client/node_connection.h"
#include "client/status.h"
#include "cluster/cluster_map.h"
#include "core/expected.h"
#include "core/key_hash.h"
#include "protocol/cluster_messages.h"

namespace sluice::client::detail {

// What a node announced in its HELLO.
struct NodeLimits {
  std::uint32_t max_frame = protocol::kDefaultMaxFrame;
  std::uint16_t max_key = protocol::kDefaultMaxKey;
  std::uint16_t max_batch = protocol::kDefaultMaxBatch;
  std::uint8_t version = 0;  // the protocol its HELLO settled on (0: not known yet)
};

// A node's breaker (docs/CLIENT.md section 10): consecutive failed calls for its keys, and
// whether it is taken as down, in which case its keys go to the failure policy without being
// sent until a probe (a PING on its public port) answers. Any thread reads and counts; the I/O
// thread alone probes.
struct NodeHealth {
  std::atomic<std::uint32_t> failures{0};
  std::atomic<bool> down{false};
  // I/O thread: the probe.
  std::uint64_t backoff_ns = 0;
  bool probing = false;
};

// One node's connections. Links live as long as the client; only the I/O thread changes them
// once the client is connected (before that, connect() alone does).
struct NodeLink {
  std::string id;       // the node's id in the cluster map; empty for a node outside any cluster
  std::string address;  // "HOST:PORT", IPv6 in brackets
  Status unreachable;   // failed: the address does not resolve, and the node has no connections
  std::vector<NodeConnection*> publics;              // [0]: the public port's first connection
  std::vector<std::vector<NodeConnection*>> shards;  // by shard; empty until its HELLO is known
  NodeLimits limits;                                 // the seed's until its own HELLO is known
  bool hello_known = false;  // limits (and shards, when shard-aware) come from its HELLO
  bool retired = false;      // not in the map's ring: its connections close once idle
  // Null for the stand-in of a client that no seed has answered yet (MapTracker::set_no_seed):
  // it has no connections, and no node whose breaker could open.
  std::unique_ptr<NodeHealth> health = std::make_unique<NodeHealth>();
};

// Connections that own the same keys: one shard of a node, or a node's public port.
struct OwnerGroup {
  std::vector<NodeConnection*> connections;  // empty only when the node is unreachable
  NodeLimits limits;
  std::string node;              // the node's address, for messages
  Status unreachable;            // why `connections` is empty
  NodeHealth* health = nullptr;  // its node's (the link's); null only before a seed answered
};

class Router {
 public:
  static constexpr std::size_t kNoOwner = std::numeric_limits<std::size_t>::max();

  // One node: shard i's connections are owner i when shard-aware and its shards are known, else
  // its public connections are the one owner.
  // `control` is null while no seed has answered: `link` is then the stand-in, which has no
  // connections.
  static std::shared_ptr<const Router> for_node(NodeConnection* control, const NodeLink& link,
                                                bool shard_aware);
  // A cluster: `ring_links[i]` holds the connections of map.ring().nodes()[i]; each is routed
  // to as for_node() would.
  static std::shared_ptr<const Router> for_cluster(NodeConnection* control, cluster::ClusterMap map,
                                                   std::span<const NodeLink* const> ring_links,
                                                   bool shard_aware);

  bool clustered() const { return map_.has_value(); }
  // The epoch of the map routed by; 0 for a node outside any cluster.
  std::uint64_t epoch() const { return map_ ? map_->epoch() : 0; }
  const cluster::ClusterMap* map() const { return map_ ? &*map_ : nullptr; }

  // Owners are numbered [0, size()).
  std::size_t size() const { return owners_.size(); }
  // The owner of the key with this hash: its primary's shard. kNoOwner when the map has no
  // active node.
  std::size_t route(const KeyHash& hash) const {
    if (!map_) {
      if (owners_.size() == 1) return 0;
      return shard_for(hash, static_cast<std::uint32_t>(owners_.size()));
    }
    const cluster::NodeIndex primary = map_->ring().primary_of(hash);
    if (primary == cluster::kNoNode) return kNoOwner;
    const NodeRoute& node = nodes_[primary];
    return node.shards > 1 ? node.first_owner + shard_for(hash, node.shards) : node.first_owner;
  }
  const OwnerGroup& owner(std::size_t index) const { return owners_[index]; }
  // Among the owner's connections, the one with the fewest calls in flight (ties rotate);
  // nullptr when the owner's node is unreachable (owner(index).unreachable says why).
  NodeConnection* connection(std::size_t index) const;
  // The number of nodes routed to.
  std::size_t node_count() const { return map_ ? nodes_.size() : 1; }
  // The public connection of the ring's node `id` (the seed's outside a cluster), for
  // node-level calls (STATS, RELOAD); kConnectionFailed when the client has none to it (or no
  // seed has answered yet).
  Result<NodeConnection*> node_control(std::string_view id) const;

 private:
  struct NodeRoute {
    std::uint32_t first_owner = 0;
    std::uint32_t shards = 1;
    NodeConnection* control = nullptr;  // its first public connection
  };

  explicit Router(NodeConnection* control) : control_(control) {}
  // Appends the link's owner groups; returns how many.
  std::uint32_t add_owners(const NodeLink& link, bool shard_aware);

  NodeConnection* control_;  // the seed's public connection; null before a seed answered
  std::optional<cluster::ClusterMap> map_;
  std::vector<NodeRoute> nodes_;  // by ring NodeIndex
  std::vector<OwnerGroup> owners_;
  mutable std::atomic<std::size_t> rotation_{0};
};

// kInvalidKey unless `key` is 1..limits.max_key bytes.
Status check_key(std::string_view key, const NodeLimits& limits);
// kUnavailable: the map of `epoch` has no active node, so no key has an owner.
Status no_active_node(std::uint64_t epoch);

// The map a CLUSTER reply describes (node addresses as "HOST:PORT", IPv6 hosts in brackets);
// or why it is not a valid map.
Expected<cluster::ClusterMap> map_from_message(const protocol::ClusterMapMessage& message);

}  // namespace sluice::client::detail
