// plan_pulls() after every lease expired and when a node comes back (docs/ARCHITECTURE.md,
// "Moving partitions"): pure maps in, plans out.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "cluster/cluster_map.h"
#include "server/coordinator.h"

namespace sluice::server {
namespace {

using cluster::ClusterMap;
using cluster::ClusterNode;
using cluster::NodeState;

ClusterMap map_of(std::uint64_t epoch, std::vector<ClusterNode> nodes) {
  auto map = ClusterMap::make(epoch, std::move(nodes));
  REQUIRE(map);
  return *map;
}

ClusterNode node(const std::string& id, NodeState state) {
  const std::string port = id == "a" ? "7001" : id == "b" ? "7002" : "7003";
  return {id, "127.0.0.1:" + port, state};
}

std::set<std::uint32_t> partitions_of(const std::vector<PullPlan>& plans) {
  std::set<std::uint32_t> out;
  for (const PullPlan& plan : plans) out.insert(plan.partitions.begin(), plan.partitions.end());
  return out;
}

TEST_CASE(
    "the first node active after every lease expired gathers each partition from the others") {
  // Every member re-registered as joining (no ring), then `a` turned active.
  const ClusterMap none_active =
      map_of(10, {node("a", NodeState::kJoining), node("b", NodeState::kJoining),
                  node("c", NodeState::kJoining)});
  const ClusterMap a_active =
      map_of(11, {node("a", NodeState::kActive), node("b", NodeState::kJoining),
                  node("c", NodeState::kJoining)});
  const std::vector<PullPlan> plans = plan_pulls(&none_active, a_active, "a");
  REQUIRE_FALSE(plans.empty());
  for (const PullPlan& plan : plans) {
    CHECK(plan.primary);
    CHECK(plan.gather);
    CHECK_FALSE(plan.serving);
    REQUIRE(plan.sources.size() == 2);
    CHECK(plan.sources[0].node == "b");
    CHECK(plan.sources[1].node == "c");
    CHECK(plan.sources[0].fence);
    CHECK(plan.sources[1].fence);
    CHECK(plan.partitions.size() <= 65'535);  // what one PULL can name
  }
  // `a` is the only active node: primary of every partition, none served before the pull.
  CHECK(partitions_of(plans).size() == a_active.ring().partition_count());
}

TEST_CASE("after every lease expired a node also asks the nodes it knew that are not back yet") {
  const ClusterMap none_active = map_of(10, {node("a", NodeState::kJoining)});
  const ClusterMap a_active = map_of(11, {node("a", NodeState::kActive)});
  const std::vector<PullPlan::Source> absent = {{"a", "127.0.0.1:7001", true},
                                                {"b", "127.0.0.1:7002", true}};
  const std::vector<PullPlan> plans = plan_pulls(&none_active, a_active, "a", absent);
  REQUIRE_FALSE(plans.empty());
  for (const PullPlan& plan : plans) {
    CHECK(plan.gather);
    REQUIRE(plan.sources.size() == 1);  // itself left out
    CHECK(plan.sources[0].node == "b");
    CHECK(plan.sources[0].fence);
  }
  // Once a node is active, the absent ones play no part.
  const ClusterMap b_joins =
      map_of(12, {node("a", NodeState::kActive), node("c", NodeState::kJoining)});
  for (const PullPlan& plan : plan_pulls(&a_active, b_joins, "a", absent)) {
    REQUIRE(plan.sources.size() == 1);
    CHECK(plan.sources[0].node == "c");
  }
}

TEST_CASE("alone after every lease expired, a node has nobody to ask and serves what is here") {
  const ClusterMap none_active = map_of(10, {node("a", NodeState::kJoining)});
  const ClusterMap a_active = map_of(11, {node("a", NodeState::kActive)});
  const std::vector<PullPlan> plans = plan_pulls(&none_active, a_active, "a");
  for (const PullPlan& plan : plans) {
    CHECK(plan.sources.empty());
    CHECK_FALSE(plan.gather);
  }
  CHECK(partitions_of(plans).size() == a_active.ring().partition_count());
}

TEST_CASE("a primary merges the copies of a node that comes back, while it serves") {
  const ClusterMap alone = map_of(11, {node("a", NodeState::kActive)});
  const ClusterMap b_back =
      map_of(12, {node("a", NodeState::kActive), node("b", NodeState::kJoining)});
  const std::vector<PullPlan> plans = plan_pulls(&alone, b_back, "a");
  REQUIRE_FALSE(plans.empty());
  for (const PullPlan& plan : plans) {
    CHECK(plan.primary);
    CHECK(plan.gather);
    CHECK(plan.serving);
    REQUIRE(plan.sources.size() == 1);
    CHECK(plan.sources[0].node == "b");
    CHECK_FALSE(plan.sources[0].fence);  // joining: it decides nothing
  }
  CHECK(partitions_of(plans).size() == b_back.ring().partition_count());
  // The same member set under a later epoch brings nobody back: nothing to pull.
  const ClusterMap again =
      map_of(13, {node("a", NodeState::kActive), node("b", NodeState::kJoining)});
  CHECK(plan_pulls(&b_back, again, "a").empty());
}

TEST_CASE("a hand-over between active nodes is planned as before") {
  const ClusterMap two = map_of(5, {node("a", NodeState::kActive), node("b", NodeState::kActive)});
  const ClusterMap three = map_of(6, {node("a", NodeState::kActive), node("b", NodeState::kActive),
                                      node("c", NodeState::kActive)});
  const std::vector<PullPlan> plans = plan_pulls(&two, three, "c");
  REQUIRE_FALSE(plans.empty());
  for (const PullPlan& plan : plans) {
    CHECK_FALSE(plan.gather);
    CHECK_FALSE(plan.serving);
    REQUIRE_FALSE(plan.sources.empty());
    if (plan.primary) CHECK(plan.sources.front().fence);
  }
  // `c` is primary or replica of some partitions, each planned once.
  std::size_t planned = 0;
  for (const PullPlan& plan : plans) planned += plan.partitions.size();
  CHECK(planned == partitions_of(plans).size());
}

}  // namespace
}  // namespace sluice::server
