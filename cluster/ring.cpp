// Building the partition table from the vnode ring. The points are sorted by (position, node
// index), and node indices follow the ids' byte order, so the table depends on the set of ids
// only, even in the (2^-64-unlikely) event of two points at one position.
#include "cluster/ring.h"

#include <fmt/format.h>
#include <xxhash.h>

#include <algorithm>
#include <array>

#include "cluster/node.h"

namespace sluice::cluster {
namespace {

struct Point {
  std::uint64_t position;
  NodeIndex node;
  friend bool operator<(const Point& a, const Point& b) {
    return a.position != b.position ? a.position < b.position : a.node < b.node;
  }
};

std::vector<PartitionOwners> empty_table(std::uint32_t partitions) {
  return std::vector<PartitionOwners>(partitions);
}

std::vector<std::uint32_t> partitions_where(std::span<const PartitionOwners> table, NodeIndex node,
                                            NodeIndex PartitionOwners::*role) {
  std::vector<std::uint32_t> out;
  if (node == kNoNode) return out;
  for (std::size_t p = 0; p < table.size(); ++p) {
    if (table[p].*role == node) out.push_back(static_cast<std::uint32_t>(p));
  }
  return out;
}

}  // namespace

std::string check_ring_params(const RingParams& params) {
  if (params.hash_version != kRingHashVersion) {
    return fmt::format("unknown ring hash version {} (this build knows {})", params.hash_version,
                       kRingHashVersion);
  }
  if (params.vnodes_per_node < 1 || params.vnodes_per_node > kMaxVnodesPerNode) {
    return fmt::format("vnodes_per_node {}: must be 1..{}", params.vnodes_per_node,
                       kMaxVnodesPerNode);
  }
  if (params.partition_bits < kMinPartitionBits || params.partition_bits > kMaxPartitionBits) {
    return fmt::format("partition_bits {}: must be {}..{}", params.partition_bits,
                       kMinPartitionBits, kMaxPartitionBits);
  }
  return {};
}

std::uint64_t vnode_position(std::string_view node_id, std::uint32_t vnode) {
  std::array<char, 4> index;
  for (std::size_t i = 0; i < 4; ++i) index[i] = static_cast<char>((vnode >> (8 * i)) & 0xff);
  if (node_id.size() > kMaxNodeIdLength) {  // not a valid id, but the recipe still holds
    std::string bytes(node_id);
    bytes.append(index.data(), index.size());
    return XXH3_64bits(bytes.data(), bytes.size());
  }
  std::array<char, kMaxNodeIdLength + 4> bytes;
  std::copy(node_id.begin(), node_id.end(), bytes.begin());
  std::copy(index.begin(), index.end(),
            bytes.begin() + static_cast<std::ptrdiff_t>(node_id.size()));
  return XXH3_64bits(bytes.data(), node_id.size() + index.size());
}

Ring::Ring() : Ring(RingParams{}, {}) {}

Ring::Ring(RingParams params, std::vector<std::string> nodes)
    : params_(params),
      shift_(64 - params.partition_bits),
      nodes_(std::move(nodes)),
      table_(empty_table(params.partition_count())) {}

Expected<Ring> Ring::build(std::vector<std::string> node_ids, const RingParams& params) {
  if (std::string why = check_ring_params(params); !why.empty()) return Unexpected{why};
  if (node_ids.size() > kMaxRingNodes) {
    return Unexpected{
        fmt::format("{} nodes, more than a ring takes ({})", node_ids.size(), kMaxRingNodes)};
  }
  if (node_ids.size() * params.vnodes_per_node > kMaxRingPoints) {
    return Unexpected{fmt::format("{} nodes of {} vnodes, more than {} points in all",
                                  node_ids.size(), params.vnodes_per_node, kMaxRingPoints)};
  }
  for (const std::string& id : node_ids) {
    if (std::string why = check_node_id(id); !why.empty()) return Unexpected{why};
  }
  std::sort(node_ids.begin(), node_ids.end());
  if (const auto twice = std::adjacent_find(node_ids.begin(), node_ids.end());
      twice != node_ids.end()) {
    return Unexpected{fmt::format("node id {} given twice", quote_for_message(*twice))};
  }

  Ring ring(params, std::move(node_ids));
  if (ring.nodes_.empty()) return ring;

  // The points sorted by (position, node): a counting sort on the partition bits, then a sort
  // within each partition, which holds a handful of points at most. O(points + partitions).
  const std::uint32_t vnodes = params.vnodes_per_node;
  const std::uint32_t partitions = params.partition_count();
  std::vector<Point> unsorted;
  unsorted.reserve(ring.nodes_.size() * vnodes);
  for (std::size_t n = 0; n < ring.nodes_.size(); ++n) {
    for (std::uint32_t v = 0; v < vnodes; ++v) {
      unsorted.push_back(Point{vnode_position(ring.nodes_[n], v), static_cast<NodeIndex>(n)});
    }
  }
  const std::size_t count = unsorted.size();
  // first[p]: the index in `points` of the first point at or after partition p's start.
  std::vector<std::uint32_t> first(partitions + 1, 0);
  for (const Point& point : unsorted) ++first[(point.position >> ring.shift_) + 1];
  for (std::uint32_t p = 0; p < partitions; ++p) first[p + 1] += first[p];
  std::vector<Point> points(count);
  {
    std::vector<std::uint32_t> next = first;
    for (const Point& point : unsorted) points[next[point.position >> ring.shift_]++] = point;
  }
  for (std::uint32_t p = 0; p < partitions; ++p) {
    if (first[p + 1] - first[p] > 1) {
      std::sort(points.begin() + first[p], points.begin() + first[p + 1]);
    }
  }

  // next_other[i]: the owner of the first point after i, going round, that is not point i's
  // owner (kNoNode with a single node). Two sweeps backwards cover the wrap-around.
  std::vector<NodeIndex> next_other(count, kNoNode);
  NodeIndex carried = kNoNode;  // next_other of the point after i
  for (int sweep = 0; sweep < 2; ++sweep) {
    for (std::size_t i = count; i-- > 0;) {
      const NodeIndex after = points[i + 1 < count ? i + 1 : 0].node;
      next_other[i] = after != points[i].node ? after : carried;
      carried = next_other[i];
    }
  }

  // Partition p's owner point is the first at or after its start, or past the last point, the
  // first point of all (the ring wraps round).
  for (std::uint32_t p = 0; p < partitions; ++p) {
    const std::size_t owner = first[p] < count ? first[p] : 0;
    ring.table_[p] = PartitionOwners{points[owner].node, next_other[owner]};
  }
  return ring;
}

std::optional<NodeIndex> Ring::find(std::string_view node_id) const {
  const auto it = std::lower_bound(nodes_.begin(), nodes_.end(), node_id);
  if (it == nodes_.end() || *it != node_id) return std::nullopt;
  return static_cast<NodeIndex>(it - nodes_.begin());
}

HashRange Ring::partition_range(std::uint32_t partition) const {
  const std::uint64_t first = static_cast<std::uint64_t>(partition) << shift_;
  return HashRange{first, first | (~0ull >> params_.partition_bits)};
}

std::vector<std::uint32_t> Ring::primary_partitions(NodeIndex node) const {
  return partitions_where(table_, node, &PartitionOwners::primary);
}

std::vector<std::uint32_t> Ring::replica_partitions(NodeIndex node) const {
  return partitions_where(table_, node, &PartitionOwners::replica);
}

Expected<std::vector<PartitionChange>> ring_changes(const Ring& from, const Ring& to) {
  if (from.partition_count() != to.partition_count()) {
    return Unexpected{fmt::format("rings of {} and {} partitions cannot be compared",
                                  from.partition_count(), to.partition_count())};
  }
  // The NodeIndex of each `from` node in `to` (kNoNode when it left): one id lookup per node.
  std::vector<NodeIndex> in_to(from.nodes().size(), kNoNode);
  for (std::size_t n = 0; n < from.nodes().size(); ++n) {
    in_to[n] = to.find(from.nodes()[n]).value_or(kNoNode);
  }
  const auto translate = [&](NodeIndex n) { return n == kNoNode ? kNoNode : in_to[n]; };
  // An owner that left is a change even where `to` has no owner (kNoNode) either.
  const auto same = [&](NodeIndex a, NodeIndex b) {
    return a == kNoNode ? b == kNoNode : translate(a) != kNoNode && translate(a) == b;
  };
  std::vector<PartitionChange> changes;
  for (std::uint32_t p = 0; p < from.partition_count(); ++p) {
    const PartitionOwners& a = from.owners(p);
    const PartitionOwners& b = to.owners(p);
    const bool primary_changed = !same(a.primary, b.primary);
    const bool replica_changed = !same(a.replica, b.replica);
    if (primary_changed || replica_changed) {
      changes.push_back(PartitionChange{p, a, b, primary_changed, replica_changed});
    }
  }
  return changes;
}

}  // namespace sluice::cluster
