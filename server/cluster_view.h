// What a shard knows of the cluster on the data path (docs/ARCHITECTURE.md, "Serving a key"):
// the map of the current epoch, this node's place in it, and the serving state of each
// partition. A view is immutable once built and published to every shard by a post; the
// partition states are shared by all the views of a node (they outlive epochs) and are the only
// part written afterwards, by the coordinator and by fencing PULLs, read by every shard.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/cluster_map.h"
#include "cluster/lost_members.h"
#include "core/key_hash.h"
#include "protocol/cluster_messages.h"

namespace sluice::server {

enum class PartitionServing : std::uint8_t {
  kServing = 0,  // this node serves it when it is the partition's primary
  kPulling = 1,  // primary, but its records are still being fetched: items are UNAVAILABLE
  kFenced = 2,   // a newer primary has fenced it (PULL with fence): items are UNAVAILABLE
};

class PartitionStates {
 public:
  explicit PartitionStates(std::uint32_t partitions);
  std::uint32_t size() const { return size_; }
  // Acquire: a state change takes effect for the items decided after a shard sees it; what
  // must be ordered with it (a pull's records) is ordered by the posts that carry them.
  PartitionServing get(std::uint32_t partition) const {
    return static_cast<PartitionServing>(states_[partition].load(std::memory_order_acquire) & 0xff);
  }
  // The epoch of the map (or the fencing PULL) that set the partition's state.
  std::uint64_t epoch(std::uint32_t partition) const {
    return states_[partition].load(std::memory_order_acquire) >> 8;
  }
  // Sets the state, and the epoch of the map (or the fencing PULL) that decided it.
  void set(std::uint32_t partition, PartitionServing state, std::uint64_t epoch) {
    states_[partition].store(pack(state, epoch), std::memory_order_release);
  }
  // A pull planned at `epoch` has brought the partition's records: it is served, but only if
  // it is still `pulling` for that epoch. A pull of an older epoch that ends late never reopens
  // a partition a newer map is pulling again or that a newer primary has fenced meanwhile.
  // Returns whether it changed the state.
  bool serve_pulled(std::uint32_t partition, std::uint64_t epoch) {
    std::uint64_t expected = pack(PartitionServing::kPulling, epoch);
    return states_[partition].compare_exchange_strong(
        expected, pack(PartitionServing::kServing, epoch), std::memory_order_acq_rel);
  }

 private:
  // The state in the low byte, the epoch above it (56 bits: etcd revisions and file epochs
  // stay far below).
  static std::uint64_t pack(PartitionServing state, std::uint64_t epoch) {
    return epoch << 8 | static_cast<std::uint8_t>(state);
  }

  std::uint32_t size_;
  std::unique_ptr<std::atomic<std::uint64_t>[]> states_;
};

// How a shard answers an item under a view.
enum class Route : std::uint8_t { kDecide, kRedirect, kUnavailable };

struct RouteDecision {
  Route route = Route::kUnavailable;
  std::uint32_t owner = 0;  // with kRedirect: the primary's index in the map's nodes()
};

struct ClusterView {
  cluster::ClusterMap map;
  cluster::NodeIndex self = cluster::kNoNode;  // this node in map.ring(); kNoNode outside it
  std::shared_ptr<PartitionStates> states;     // never null
  protocol::ClusterMapMessage message;         // the CLUSTER reply, `self` filled in
  // While nodes are joining: the map once they are active (cluster::with_joining_active). A
  // primary also streams the records it changes to the joining nodes that will own them
  // there, so that they turn active with the counts (docs/ARCHITECTURE.md, "Joining").
  std::optional<cluster::ClusterMap> joined;
  // etcd mode: the members this node saw leave without draining since its start, most recent
  // first (cluster::LostMembers), as of this map; reported in STATS as "lost.<id>.epoch".
  std::vector<cluster::LostMember> lost;

  std::uint64_t epoch() const { return map.epoch(); }

  // Decide when this node is the key's serving primary; REDIRECT (with the owner, the
  // primary's index in map.nodes()) when another node is; else UNAVAILABLE (no primary at all,
  // or this node is primary but not serving the partition).
  RouteDecision route(const KeyHash& hash) const {
    const std::uint32_t partition = map.ring().partition_of(hash);
    const cluster::NodeIndex primary = map.ring().owners(partition).primary;
    // No map yet (a node that has not loaded its cluster file), or nobody active: no owner.
    if (primary == cluster::kNoNode) return {Route::kUnavailable, 0};
    if (primary != self) {
      return {Route::kRedirect, static_cast<std::uint32_t>(map.node_index(primary))};
    }
    return {
        states->get(partition) == PartitionServing::kServing ? Route::kDecide : Route::kUnavailable,
        0};
  }
};

// The view of node `self_id` under `map`, sharing `states` (whose size must be the map's
// partition count), with the members lost so far.
std::shared_ptr<const ClusterView> make_cluster_view(const cluster::ClusterMap& map,
                                                     std::string_view self_id,
                                                     std::shared_ptr<PartitionStates> states,
                                                     std::vector<cluster::LostMember> lost = {});

}  // namespace sluice::server
