// The consistent-hash ring: which node is the primary and which the replica of a key. Nodes and
// clients compute it from the same inputs, the ids of the active members and RingParams, and it
// is a pure function of the *set* of ids (their order does not matter), so everyone who sees the
// same set routes alike. The recipe, byte by byte, is in docs/PROTOCOL.md 10.1; golden values in
// tests/cluster/ring_test.cpp catch any change to it.
//
// How it works: each node has `vnodes_per_node` points on a ring of 2^64 positions. The ring is
// cut into 2^partition_bits equal partitions by the top bits of KeyHash::hi; a partition's
// primary is the owner of the first point at or after the partition's start (clockwise, wrapping
// round), and its replica the owner of the next point after that one that belongs to another
// node. The owners are computed once per member set, so a key's owners are one table lookup, and
// the keys of a partition are one range of `hi` (what hand-over moves).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/expected.h"
#include "core/key_hash.h"

namespace sluice::cluster {

// The only recipe so far: vnode_position() below, and owners as described above.
inline constexpr std::uint32_t kRingHashVersion = 1;
// 4096 points per node: the fewest that keep, for any ids, each node's share within 10% of the
// mean and the keys moved by adding or removing one node within 1/N + 2%, from 3 to 10 nodes
// (docs/PROTOCOL.md 10.1 has the survey; 1024 and 2048 fall short at 3 nodes).
inline constexpr std::uint32_t kDefaultVnodesPerNode = 4096;
inline constexpr std::uint32_t kMaxVnodesPerNode = 16384;
// 2^16 partitions: a table of 256 KiB, each partition 1/65536 of the keys; 2^14 is less even
// (each node's share rounds to whole partitions) and looks up no faster.
inline constexpr std::uint32_t kDefaultPartitionBits = 16;
inline constexpr std::uint32_t kMinPartitionBits = 1;
inline constexpr std::uint32_t kMaxPartitionBits = 20;
inline constexpr std::size_t kMaxRingNodes = 1024;
// nodes x vnodes_per_node: what building a ring may hold in memory at once (16 bytes a point).
inline constexpr std::size_t kMaxRingPoints = std::size_t{1} << 22;

struct RingParams {
  std::uint32_t hash_version = kRingHashVersion;
  std::uint32_t vnodes_per_node = kDefaultVnodesPerNode;  // 1..kMaxVnodesPerNode
  std::uint32_t partition_bits = kDefaultPartitionBits;   // kMinPartitionBits..kMaxPartitionBits

  std::uint32_t partition_count() const { return 1u << partition_bits; }
  friend bool operator==(const RingParams&, const RingParams&) = default;
};

// Empty when a ring can be built with `params`, else why not ("unknown ring hash version 2").
std::string check_ring_params(const RingParams& params);

// Where vnode `vnode` of node `node_id` sits on the ring (hash version 1): XXH3-64 with seed 0
// of the id's bytes followed by `vnode` as 4 bytes, little-endian.
std::uint64_t vnode_position(std::string_view node_id, std::uint32_t vnode);

// A node's place in Ring::nodes(). Indices belong to one ring: compare ids across rings.
using NodeIndex = std::uint16_t;
inline constexpr NodeIndex kNoNode = 0xffff;

struct PartitionOwners {
  NodeIndex primary = kNoNode;  // kNoNode only in a ring without nodes
  NodeIndex replica = kNoNode;  // kNoNode when the ring has fewer than two nodes
  friend bool operator==(const PartitionOwners&, const PartitionOwners&) = default;
};

// The keys whose KeyHash::hi is in [first, last].
struct HashRange {
  std::uint64_t first = 0;
  std::uint64_t last = 0;
  friend bool operator==(const HashRange&, const HashRange&) = default;
};

class Ring {
 public:
  // A ring without nodes and with the default params: every owner is kNoNode.
  Ring();

  // The ring over `node_ids`, in any order. Refuses bad params, an id that check_node_id()
  // refuses, an id given twice, more than kMaxRingNodes ids or kMaxRingPoints points. No ids is
  // fine: an empty ring.
  static Expected<Ring> build(std::vector<std::string> node_ids, const RingParams& params = {});

  const RingParams& params() const { return params_; }
  // The ids in byte order; NodeIndex i is nodes()[i].
  const std::vector<std::string>& nodes() const { return nodes_; }
  bool empty() const { return nodes_.empty(); }
  std::optional<NodeIndex> find(std::string_view node_id) const;

  std::uint32_t partition_count() const { return static_cast<std::uint32_t>(table_.size()); }
  // The top partition_bits bits of `hi`.
  std::uint32_t partition_of(const KeyHash& hash) const {
    return static_cast<std::uint32_t>(hash.hi >> shift_);
  }
  // REQUIRES: partition < partition_count().
  HashRange partition_range(std::uint32_t partition) const;
  const PartitionOwners& owners(std::uint32_t partition) const { return table_[partition]; }
  const PartitionOwners& owners_of(const KeyHash& hash) const { return table_[partition_of(hash)]; }
  NodeIndex primary_of(const KeyHash& hash) const { return owners_of(hash).primary; }
  // Hint: start loading the key's entry of the table into cache, a few keys ahead of asking.
  void prefetch(const KeyHash& hash) const { __builtin_prefetch(&table_[partition_of(hash)]); }
  // Every partition's owners, indexed by partition.
  std::span<const PartitionOwners> partitions() const { return table_; }

  // The partitions `node` is the primary (replica) of, ascending; none for kNoNode or an index
  // not in the ring.
  std::vector<std::uint32_t> primary_partitions(NodeIndex node) const;
  std::vector<std::uint32_t> replica_partitions(NodeIndex node) const;

  // Same params and same ids, hence the same owners everywhere.
  friend bool operator==(const Ring& a, const Ring& b) {
    return a.params_ == b.params_ && a.nodes_ == b.nodes_;
  }

 private:
  Ring(RingParams params, std::vector<std::string> nodes);

  RingParams params_;
  std::uint32_t shift_ = 0;             // 64 - partition_bits
  std::vector<std::string> nodes_;      // sorted by byte, unique
  std::vector<PartitionOwners> table_;  // partition_count() entries
};

// A partition whose primary or replica is another node (by id) in `to` than in `from`.
struct PartitionChange {
  std::uint32_t partition = 0;
  PartitionOwners from;  // NodeIndex in the `from` ring
  PartitionOwners to;    // NodeIndex in the `to` ring
  bool primary_changed = false;
  bool replica_changed = false;
};

// The partitions whose primary or replica changes from `from` to `to`, ascending: what a
// hand-over moves (a new primary takes the partition from the old primary, or from the old
// replica when the old primary is gone). Refuses rings with different partition counts.
Expected<std::vector<PartitionChange>> ring_changes(const Ring& from, const Ring& to);

}  // namespace sluice::cluster
