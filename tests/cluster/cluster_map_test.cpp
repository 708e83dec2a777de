#include <fmt/format.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "cluster/cluster_map.h"
#include "core/key_hash.h"

namespace sluice::cluster {
namespace {

ClusterMap make_map(std::uint64_t epoch, std::vector<ClusterNode> nodes,
                    const RingParams& params = {}) {
  Expected<ClusterMap> map = ClusterMap::make(epoch, std::move(nodes), params);
  INFO((map ? std::string("made") : map.error()));
  REQUIRE(map);
  return std::move(map).value();
}

std::string refusal(std::vector<ClusterNode> nodes, const RingParams& params = {}) {
  const Expected<ClusterMap> map = ClusterMap::make(1, std::move(nodes), params);
  return map ? "made" : map.error();
}

const std::vector<ClusterNode> kNodes = {
    {"c", "10.0.0.3:7420", NodeState::kActive},
    {"a", "10.0.0.1:7420", NodeState::kActive},
    {"d", "[::1]:7420", NodeState::kJoining},
    {"b", "sluice-b.internal:7420", NodeState::kActive},
    {"e", "10.0.0.5:7420", NodeState::kDraining},
    {"f", "10.0.0.6:7420", NodeState::kDown},
};

TEST_CASE("node states have names that parse back", "[cluster_map]") {
  for (const NodeState s :
       {NodeState::kJoining, NodeState::kActive, NodeState::kDraining, NodeState::kDown}) {
    CHECK(parse_node_state(node_state_name(s)) == s);
  }
  CHECK(node_state_name(NodeState::kDraining) == "draining");
  CHECK_FALSE(parse_node_state("Active"));
  CHECK_FALSE(parse_node_state(""));
}

TEST_CASE("a map keeps its nodes sorted by id and builds its ring from the active ones",
          "[cluster_map]") {
  const ClusterMap map = make_map(42, kNodes);
  CHECK(map.epoch() == 42);
  CHECK(map.ring_params() == RingParams{});
  std::vector<std::string> ids;
  for (const ClusterNode& n : map.nodes()) ids.push_back(n.id);
  CHECK(ids == std::vector<std::string>{"a", "b", "c", "d", "e", "f"});
  CHECK(map.ring().nodes() == std::vector<std::string>{"a", "b", "c"});
  CHECK(map.ring() == Ring::build({"a", "b", "c"}).value());
  REQUIRE(map.find("d") != nullptr);
  CHECK(map.find("d")->state == NodeState::kJoining);
  CHECK(map.find("d")->address == "[::1]:7420");
  CHECK(map.find("x") == nullptr);
}

TEST_CASE("the owner of a key is its ring primary, and only active nodes own keys",
          "[cluster_map]") {
  const ClusterMap map = make_map(1, kNodes);
  int owned_by[3] = {0, 0, 0};
  for (int i = 0; i < 3000; ++i) {
    const KeyHash hash = hash_key("key:" + std::to_string(i));
    const ClusterNode* primary = map.primary_of(hash);
    const ClusterNode* replica = map.replica_of(hash);
    REQUIRE(primary != nullptr);
    REQUIRE(replica != nullptr);
    CHECK(primary->id == map.ring().nodes()[map.ring().primary_of(hash)]);
    CHECK(replica->id == map.ring().nodes()[map.ring().owners_of(hash).replica]);
    CHECK(primary->id != replica->id);
    CHECK(map.owns(primary->id, hash));
    CHECK_FALSE(map.owns(replica->id, hash));
    for (const char* idle : {"d", "e", "f", "nobody"}) CHECK_FALSE(map.owns(idle, hash));
    ++owned_by[primary->id[0] - 'a'];
  }
  CHECK(std::all_of(std::begin(owned_by), std::end(owned_by), [](int n) { return n > 800; }));
}

TEST_CASE("with no active node nobody owns a key, and with one there is no replica",
          "[cluster_map]") {
  const KeyHash hash = hash_key("k");
  const ClusterMap none = make_map(3, {{"a", "h:1", NodeState::kJoining}});
  CHECK(none.primary_of(hash) == nullptr);
  CHECK(none.replica_of(hash) == nullptr);
  CHECK_FALSE(none.owns("a", hash));

  const ClusterMap one =
      make_map(4, {{"a", "h:1", NodeState::kActive}, {"b", "h:2", NodeState::kDown}});
  REQUIRE(one.primary_of(hash) != nullptr);
  CHECK(one.primary_of(hash)->id == "a");
  CHECK(one.replica_of(hash) == nullptr);
  CHECK(one.owns("a", hash));

  const ClusterMap empty;
  CHECK(empty.epoch() == 0);
  CHECK(empty.nodes().empty());
  CHECK(empty.primary_of(hash) == nullptr);
  CHECK(empty == make_map(0, {}));
}

TEST_CASE("with_joining_active puts the joining nodes in the ring and changes nothing else",
          "[cluster_map]") {
  const ClusterMap map = make_map(7, kNodes, RingParams{.vnodes_per_node = 64});
  const std::optional<ClusterMap> next = with_joining_active(map);
  REQUIRE(next.has_value());
  CHECK(next->epoch() == 7);
  CHECK(next->ring_params() == map.ring_params());
  REQUIRE(next->nodes().size() == map.nodes().size());
  for (std::size_t i = 0; i < map.nodes().size(); ++i) {
    const ClusterNode& before = map.nodes()[i];
    const ClusterNode& after = next->nodes()[i];
    CHECK(after.id == before.id);
    CHECK(after.address == before.address);
    CHECK(after.state == (before.state == NodeState::kJoining ? NodeState::kActive : before.state));
  }
  CHECK(next->ring().nodes() == std::vector<std::string>{"a", "b", "c", "d"});
  // The ring is the one a map with "d" active would have: nodes route alike.
  std::vector<ClusterNode> active = kNodes;
  for (ClusterNode& node : active) {
    if (node.id == "d") node.state = NodeState::kActive;
  }
  const ClusterMap made = make_map(7, active, RingParams{.vnodes_per_node = 64});
  CHECK(*next == made);
  for (int i = 0; i < 500; ++i) {
    const KeyHash hash = hash_key("key:" + std::to_string(i));
    CHECK(next->ring().owners_of(hash).primary == made.ring().owners_of(hash).primary);
  }
  // Nothing joining: no other map.
  CHECK_FALSE(with_joining_active(made).has_value());
  CHECK_FALSE(with_joining_active(ClusterMap()).has_value());
}

TEST_CASE("maps are equal when epoch, params and node set are, in any order", "[cluster_map]") {
  std::vector<ClusterNode> reversed(kNodes.rbegin(), kNodes.rend());
  const ClusterMap map = make_map(7, kNodes);
  CHECK(map == make_map(7, reversed));
  CHECK_FALSE(map == make_map(8, kNodes));
  CHECK_FALSE(map == make_map(7, kNodes, RingParams{.vnodes_per_node = 100}));
  std::vector<ClusterNode> changed = kNodes;
  changed[2].state = NodeState::kActive;
  CHECK_FALSE(map == make_map(7, changed));
  changed = kNodes;
  changed[0].address = "10.0.0.3:7421";
  CHECK_FALSE(map == make_map(7, changed));

  const ClusterMap copy = map;  // a copy shares the ring: copies are cheap
  CHECK(copy == map);
  CHECK(&copy.ring() == &map.ring());
}

TEST_CASE("a map refuses bad or repeated ids and addresses, and bad ring params", "[cluster_map]") {
  CHECK(refusal({{"a", "h:1", NodeState::kActive}, {"a", "h:2", NodeState::kJoining}}) ==
        "node id \"a\" given twice");
  CHECK(refusal({{"a", "[::1]:1", NodeState::kActive}, {"b", "[0::1]:1", NodeState::kDown}}) ==
        "nodes \"a\" and \"b\" have one address, [0::1]:1");
  CHECK(refusal({{"a b", "h:1", NodeState::kActive}}) ==
        "node id \"a b\" has a byte that is not a letter, digit, '.', '_' or '-'");
  CHECK(refusal({{"a", "h", NodeState::kActive}}) ==
        "node \"a\": address \"h\": expected HOST:PORT");
  CHECK(refusal({{"a", "h:1", static_cast<NodeState>(9)}}) == "node \"a\": unknown state 9");
  CHECK(refusal({{"a", "h:1", NodeState::kActive}}, RingParams{.partition_bits = 0}) ==
        "partition_bits 0: must be 1..20");
  std::vector<ClusterNode> many;
  for (int i = 0; i < 1025; ++i) {
    many.push_back({fmt::format("n{}", i), fmt::format("h:{}", i + 1), NodeState::kJoining});
  }
  CHECK(refusal(many) == "1025 nodes, more than 1024");
}

}  // namespace
}  // namespace sluice::cluster
