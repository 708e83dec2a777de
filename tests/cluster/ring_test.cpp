#include <fmt/format.h>
#include <xxhash.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "cluster/ring.h"
#include "core/key_hash.h"

namespace sluice::cluster {
namespace {

std::vector<std::string> numbered_ids(std::size_t n, std::string_view prefix = "node-") {
  std::vector<std::string> ids;
  for (std::size_t i = 1; i <= n; ++i) ids.push_back(fmt::format("{}{}", prefix, i));
  return ids;
}

Ring build(std::vector<std::string> ids, const RingParams& params = {}) {
  Expected<Ring> ring = Ring::build(std::move(ids), params);
  INFO((ring ? std::string("built") : ring.error()));
  REQUIRE(ring);
  return std::move(ring).value();
}

const std::string& id_or_none(const Ring& ring, NodeIndex index) {
  static const std::string none = "(none)";
  return index == kNoNode ? none : ring.nodes()[index];
}

// The measured figures' key set: 1M keys "key:0".."key:999999", hashed once for all tests.
const std::vector<KeyHash>& million_keys() {
  static const std::vector<KeyHash> keys = [] {
    std::vector<KeyHash> out;
    out.reserve(1'000'000);
    for (int i = 0; i < 1'000'000; ++i) out.push_back(hash_key("key:" + std::to_string(i)));
    return out;
  }();
  return keys;
}

// How many of million_keys() fall in each partition (of 2^16).
const std::vector<std::uint32_t>& keys_per_partition() {
  static const std::vector<std::uint32_t> counts = [] {
    const Ring ring;
    std::vector<std::uint32_t> out(ring.partition_count());
    for (const KeyHash& key : million_keys()) ++out[ring.partition_of(key)];
    return out;
  }();
  return counts;
}

TEST_CASE("vnode positions are XXH3-64 of the id bytes and the vnode index, little-endian",
          "[ring]") {
  const char bytes[] = {'n', 'o', 'd', 'e', '-', '1', 0x01, 0x02, 0x00, 0x00};
  CHECK(vnode_position("node-1", 0x0201) == XXH3_64bits(bytes, sizeof bytes));
  // Golden values: they change only with the recipe, which would need a new hash version.
  CHECK(vnode_position("node-1", 0) == 0x3b76c8825005e97bull);
  CHECK(vnode_position("node-1", 1) == 0xb0960a0b9403f568ull);
  CHECK(vnode_position("a", 4095) == 0x2df164116b1d82d2ull);
}

TEST_CASE("a fixed member set gives fixed owners (golden values of the recipe)", "[ring]") {
  // Also computed by a separate implementation of docs/PROTOCOL.md 10.1 (Python, python3-xxhash).
  const Ring ring = build({"node-e", "node-c", "node-a", "node-d", "node-b"});
  REQUIRE(ring.params() ==
          RingParams{.hash_version = 1, .vnodes_per_node = 4096, .partition_bits = 16});
  const auto owners = [&](std::string_view key) {
    const PartitionOwners& o = ring.owners_of(hash_key(key));
    return id_or_none(ring, o.primary) + " " + id_or_none(ring, o.replica);
  };
  CHECK(hash_key("user:42").hi == 0x8763cfe7e8dd227bull);
  CHECK(ring.partition_of(hash_key("user:42")) == 0x8763);
  CHECK(owners("user:42") == "node-e node-c");
  CHECK(owners("") == "node-d node-e");
  CHECK(owners("tenant:acme/endpoint:/v1/search") == "node-e node-c");
  // The whole table, as little-endian (primary, replica) u16 pairs, hashed: any change anywhere.
  std::vector<std::uint8_t> bytes;
  for (const PartitionOwners& o : ring.partitions()) {
    for (const NodeIndex n : {o.primary, o.replica}) {
      bytes.push_back(static_cast<std::uint8_t>(n & 0xff));
      bytes.push_back(static_cast<std::uint8_t>(n >> 8));
    }
  }
  CHECK(XXH3_64bits(bytes.data(), bytes.size()) == 0x1ef6609fd7d21d1full);
}

TEST_CASE("a ring is the same whatever order its node ids come in", "[ring]") {
  std::vector<std::string> ids = {"node-a", "b", "node-c", "z.9", "A_1", "node-ab"};
  const Ring first = build(ids);
  CHECK(first.nodes() ==
        std::vector<std::string>{"A_1", "b", "node-a", "node-ab", "node-c", "z.9"});
  std::mt19937 rng(7);
  for (int i = 0; i < 5; ++i) {
    std::shuffle(ids.begin(), ids.end(), rng);
    const Ring again = build(ids);
    CHECK(again == first);
    CHECK(std::equal(again.partitions().begin(), again.partitions().end(),
                     first.partitions().begin(), first.partitions().end()));
  }
}

TEST_CASE("each partition's owners are those of the first vnode point at or after its start",
          "[ring]") {
  // A reference computed the slow way, straight from the documented recipe, on a small ring.
  const RingParams params{.vnodes_per_node = 8, .partition_bits = 10};
  const std::vector<std::string> ids = {"n1", "n2", "n3", "n4"};
  const Ring ring = build(ids, params);
  struct Point {
    std::uint64_t position;
    std::string id;
  };
  std::vector<Point> points;
  for (const std::string& id : ids) {
    for (std::uint32_t v = 0; v < params.vnodes_per_node; ++v) {
      points.push_back(Point{vnode_position(id, v), id});
    }
  }
  std::sort(points.begin(), points.end(),
            [](const Point& a, const Point& b) { return a.position < b.position; });
  for (std::uint32_t p = 0; p < ring.partition_count(); ++p) {
    const std::uint64_t start = ring.partition_range(p).first;
    std::size_t at = 0;
    while (at < points.size() && points[at].position < start) ++at;
    if (at == points.size()) at = 0;
    std::size_t next = (at + 1) % points.size();
    while (points[next].id == points[at].id) next = (next + 1) % points.size();
    INFO("partition " << p);
    CHECK(id_or_none(ring, ring.owners(p).primary) == points[at].id);
    CHECK(id_or_none(ring, ring.owners(p).replica) == points[next].id);
  }
}

TEST_CASE("partitions are the top bits of hi and tile the whole hash space", "[ring]") {
  const Ring ring = build(numbered_ids(3));
  REQUIRE(ring.partition_count() == 65536);
  CHECK(ring.partition_range(0) == HashRange{0, 0x0000'ffff'ffff'ffffull});
  CHECK(ring.partition_range(0x1234) ==
        HashRange{0x1234'0000'0000'0000ull, 0x1234'ffff'ffff'ffffull});
  CHECK(ring.partition_range(65535).last == ~0ull);
  for (std::uint32_t p = 1; p < ring.partition_count(); ++p) {
    REQUIRE(ring.partition_range(p).first == ring.partition_range(p - 1).last + 1);
  }
  CHECK(ring.partition_of(KeyHash{.lo = ~0ull, .hi = 0x1234'5678'0000'0000ull}) == 0x1234);
  CHECK(ring.partition_of(KeyHash{.lo = 0, .hi = ~0ull}) == 65535);
  // The key's `lo` (shard and slot) plays no part.
  CHECK(ring.owners_of(KeyHash{.lo = 1, .hi = 42}) == ring.owners_of(KeyHash{.lo = 2, .hi = 42}));

  const Ring small = build(numbered_ids(3), RingParams{.partition_bits = 1});
  CHECK(small.partition_count() == 2);
  CHECK(small.partition_range(1) == HashRange{0x8000'0000'0000'0000ull, ~0ull});
}

TEST_CASE("a ring without nodes owns nothing", "[ring]") {
  const Ring none = build({});
  CHECK(none.empty());
  CHECK(none == Ring());
  CHECK(none.owners_of(hash_key("k")) == PartitionOwners{kNoNode, kNoNode});
  CHECK(none.primary_partitions(0).empty());
  CHECK(Ring().owners(65535) == PartitionOwners{kNoNode, kNoNode});
}

TEST_CASE("a single node is the primary of every key and has no replica", "[ring]") {
  const Ring one = build({"solo"});
  CHECK(std::all_of(one.partitions().begin(), one.partitions().end(), [](const PartitionOwners& o) {
    return o == PartitionOwners{0, kNoNode};
  }));
  CHECK(one.primary_partitions(0).size() == one.partition_count());
  CHECK(one.replica_partitions(0).empty());
}

TEST_CASE("the replica is always a node other than the primary", "[ring]") {
  for (std::size_t n = 2; n <= 10; ++n) {
    const Ring ring = build(numbered_ids(n));
    const auto bad = std::count_if(
        ring.partitions().begin(), ring.partitions().end(), [&](const PartitionOwners& o) {
          return o.primary >= n || o.replica >= n || o.primary == o.replica;
        });
    INFO(n << " nodes");
    CHECK(bad == 0);
  }
}

TEST_CASE("a node's primary and replica partitions are exactly those the table gives it",
          "[ring]") {
  const Ring ring = build(numbered_ids(4));
  std::vector<int> seen(ring.partition_count(), 0);
  for (NodeIndex n = 0; n < 4; ++n) {
    for (const std::uint32_t p : ring.primary_partitions(n)) {
      REQUIRE(ring.owners(p).primary == n);
      ++seen[p];
    }
    for (const std::uint32_t p : ring.replica_partitions(n)) REQUIRE(ring.owners(p).replica == n);
    const std::vector<std::uint32_t> mine = ring.primary_partitions(n);
    CHECK(std::is_sorted(mine.begin(), mine.end()));
  }
  CHECK(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
  CHECK(ring.primary_partitions(4).empty());
  CHECK(ring.primary_partitions(kNoNode).empty());
  CHECK(ring.find("node-3") == NodeIndex{2});
  CHECK_FALSE(ring.find("node-5"));
}

TEST_CASE("primaries and replicas are within 10 percent of the mean over 1M keys, 3 to 10 nodes",
          "[ring][measured]") {
  const std::vector<KeyHash>& keys = million_keys();
  for (const std::string_view scheme : {"node-", "sluice-eu-west-1.n"}) {
    for (std::size_t n = 3; n <= 10; ++n) {
      const Ring ring = build(numbered_ids(n, scheme));
      std::vector<std::uint32_t> primaries(n);
      std::vector<std::uint32_t> replicas(n);
      for (const KeyHash& key : keys) {
        const PartitionOwners& o = ring.owners_of(key);
        ++primaries[o.primary];
        ++replicas[o.replica];
      }
      const double mean = static_cast<double>(keys.size()) / static_cast<double>(n);
      const double primary = *std::max_element(primaries.begin(), primaries.end()) / mean;
      const double replica = *std::max_element(replicas.begin(), replicas.end()) / mean;
      const double lowest = *std::min_element(primaries.begin(), primaries.end()) / mean;
      fmt::print(
          "ring balance, {} nodes \"{}N\": primaries max/mean {:.4f} (min/mean {:.4f}), "
          "replicas max/mean {:.4f}\n",
          n, scheme, primary, lowest, replica);
      CHECK(primary <= 1.10);
      CHECK(replica <= 1.10);
    }
  }
}

TEST_CASE("adding or removing one of N nodes moves at most 1/N + 2 percent of the primaries",
          "[ring][measured]") {
  // Counted per key: a key moves with its partition, so the keys in the partitions whose
  // primary changed are the keys that moved.
  const std::vector<std::uint32_t>& per_partition = keys_per_partition();
  const double total = 1'000'000.0;
  for (std::size_t n = 3; n <= 10; ++n) {
    const Ring ring = build(numbered_ids(n));
    double worst_primary = 0;
    double worst_replica = 0;
    for (std::size_t gone = 0; gone < n; ++gone) {
      std::vector<std::string> ids = ring.nodes();
      ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(gone));
      const Ring smaller = build(ids);
      for (const bool adding : {false, true}) {
        const Ring& from = adding ? smaller : ring;
        const Ring& to = adding ? ring : smaller;
        const std::vector<PartitionChange> changes = ring_changes(from, to).value();
        double primary_moved = 0;
        double replica_moved = 0;
        // Hand-over needs no third node: a removed node's keys go to their replica, and an
        // added node takes keys whose old primary becomes their replica.
        int third_node = 0;
        for (const PartitionChange& c : changes) {
          if (c.primary_changed) primary_moved += per_partition[c.partition];
          if (c.replica_changed) replica_moved += per_partition[c.partition];
          if (!c.primary_changed) continue;
          const std::string& gone_id = ring.nodes()[gone];
          const bool handed_over =
              adding ? id_or_none(to, c.to.primary) == gone_id &&
                           id_or_none(to, c.to.replica) == id_or_none(from, c.from.primary)
                     : id_or_none(from, c.from.primary) == gone_id &&
                           id_or_none(to, c.to.primary) == id_or_none(from, c.from.replica);
          if (!handed_over) ++third_node;
        }
        worst_primary = std::max(worst_primary, primary_moved / total);
        worst_replica = std::max(worst_replica, replica_moved / total);
        INFO(n << " nodes, " << (adding ? "adding " : "removing ") << ring.nodes()[gone]);
        CHECK(primary_moved / total <= 1.0 / static_cast<double>(n) + 0.02);
        CHECK(third_node == 0);
      }
    }
    fmt::print(
        "ring movement, {} nodes, one added or removed: primaries moved at most {:.4f} "
        "(1/N = {:.4f}), replicas changed at most {:.4f}\n",
        n, worst_primary, 1.0 / static_cast<double>(n), worst_replica);
  }
}

TEST_CASE("ring_changes lists exactly the partitions whose primary or replica changed", "[ring]") {
  const Ring before = build({"a", "b", "c"}, RingParams{.partition_bits = 12});
  const Ring after = build({"b", "c", "d", "e"}, RingParams{.partition_bits = 12});
  const std::vector<PartitionChange> changes = ring_changes(before, after).value();
  std::size_t next = 0;
  for (std::uint32_t p = 0; p < before.partition_count(); ++p) {
    const std::string& p0 = id_or_none(before, before.owners(p).primary);
    const std::string& r0 = id_or_none(before, before.owners(p).replica);
    const std::string& p1 = id_or_none(after, after.owners(p).primary);
    const std::string& r1 = id_or_none(after, after.owners(p).replica);
    if (p0 == p1 && r0 == r1) continue;
    INFO("partition " << p);
    REQUIRE(next < changes.size());
    const PartitionChange& c = changes[next++];
    CHECK(c.partition == p);
    CHECK(c.from == before.owners(p));
    CHECK(c.to == after.owners(p));
    CHECK(c.primary_changed == (p0 != p1));
    CHECK(c.replica_changed == (r0 != r1));
  }
  CHECK(next == changes.size());
  CHECK(ring_changes(after, after).value().empty());

  // Node indices differ between rings ("b" is 1 in one and 0 in the other): ids are compared.
  const Ring two = build({"b", "c"}, RingParams{.partition_bits = 12});
  const Ring three = build({"a", "b", "c"}, RingParams{.partition_bits = 12});
  for (const PartitionChange& c : ring_changes(two, three).value()) {
    CHECK((c.primary_changed || c.replica_changed));
    if (c.primary_changed) CHECK(id_or_none(three, c.to.primary) == "a");
  }
  // From nothing to one node, and back: every partition's primary changes.
  const Ring none = build({}, RingParams{.partition_bits = 12});
  const Ring one = build({"a"}, RingParams{.partition_bits = 12});
  CHECK(ring_changes(none, one).value().size() == 4096);
  CHECK(ring_changes(one, none).value().size() == 4096);
  CHECK_FALSE(ring_changes(one, one).value().size());

  const Expected<std::vector<PartitionChange>> mismatch = ring_changes(one, build({"a"}));
  REQUIRE_FALSE(mismatch);
  CHECK(mismatch.error() == "rings of 4096 and 65536 partitions cannot be compared");
}

TEST_CASE("a ring refuses bad params, bad or repeated ids and too many nodes", "[ring]") {
  const auto refusal = [](std::vector<std::string> ids, const RingParams& params = {}) {
    const Expected<Ring> ring = Ring::build(std::move(ids), params);
    return ring ? std::string("built") : ring.error();
  };
  CHECK(refusal({"a"}, RingParams{.hash_version = 2}) ==
        "unknown ring hash version 2 (this build knows 1)");
  CHECK(refusal({"a"}, RingParams{.vnodes_per_node = 0}) == "vnodes_per_node 0: must be 1..16384");
  CHECK(refusal({"a"}, RingParams{.vnodes_per_node = 16385}) ==
        "vnodes_per_node 16385: must be 1..16384");
  CHECK(refusal({"a"}, RingParams{.partition_bits = 0}) == "partition_bits 0: must be 1..20");
  CHECK(refusal({"a"}, RingParams{.partition_bits = 21}) == "partition_bits 21: must be 1..20");
  CHECK(refusal({"a", ""}) == "empty node id");
  CHECK(refusal({"a b"}) ==
        "node id \"a b\" has a byte that is not a letter, digit, '.', '_' or '-'");
  CHECK(refusal({"b", "a", "b"}) == "node id \"b\" given twice");
  CHECK(refusal(numbered_ids(1025), RingParams{.vnodes_per_node = 1}) ==
        "1025 nodes, more than a ring takes (1024)");
  CHECK(refusal(numbered_ids(257), RingParams{.vnodes_per_node = 16384}) ==
        "257 nodes of 16384 vnodes, more than 4194304 points in all");
  CHECK(refusal(numbered_ids(1024), RingParams{.vnodes_per_node = 1, .partition_bits = 4}) ==
        "built");
}

}  // namespace
}  // namespace sluice::cluster
