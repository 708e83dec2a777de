#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "cluster/cluster_map.h"
#include "cluster/lost_members.h"

namespace sluice::cluster {
namespace {

// A map of `epoch` whose nodes are ids with states; addresses follow from the position.
ClusterMap map_of(std::uint64_t epoch,
                  const std::vector<std::pair<std::string, NodeState>>& members) {
  std::vector<ClusterNode> nodes;
  for (std::size_t i = 0; i < members.size(); ++i) {
    nodes.push_back(
        {members[i].first, "10.0.0." + std::to_string(i + 1) + ":7420", members[i].second});
  }
  Expected<ClusterMap> map = ClusterMap::make(epoch, std::move(nodes));
  REQUIRE(map);
  return std::move(map).value();
}

constexpr NodeState kActive = NodeState::kActive;
constexpr NodeState kDraining = NodeState::kDraining;

TEST_CASE("a member that leaves the map without draining is lost at the epoch of the new map",
          "[lost_members]") {
  LostMembers lost;
  const ClusterMap three = map_of(10, {{"a", kActive}, {"b", kActive}, {"c", kActive}});
  lost.note(ClusterMap(), three);
  CHECK(lost.lost().empty());  // the first map: nobody left
  const ClusterMap two = map_of(14, {{"a", kActive}, {"c", kActive}});
  CHECK(lost.note(three, two) == std::vector<std::string>{"b"});
  CHECK(lost.lost() == std::vector<LostMember>{{"b", 14}});
  const ClusterMap one = map_of(20, {{"a", kActive}});
  lost.note(two, one);
  CHECK(lost.lost() == std::vector<LostMember>{{"c", 20}, {"b", 14}});  // most recent first
}

TEST_CASE("a member seen draining before it leaves is not lost even across maps in between",
          "[lost_members]") {
  LostMembers lost;
  const ClusterMap three = map_of(10, {{"a", kActive}, {"b", kActive}, {"c", kActive}});
  lost.note(ClusterMap(), three);
  const ClusterMap draining = map_of(11, {{"a", kActive}, {"b", kDraining}, {"c", kActive}});
  lost.note(three, draining);
  // Another change before b leaves: b is still draining in it.
  const ClusterMap joined =
      map_of(12, {{"a", kActive}, {"b", kDraining}, {"c", kActive}, {"d", NodeState::kJoining}});
  lost.note(draining, joined);
  const ClusterMap gone = map_of(13, {{"a", kActive}, {"c", kActive}, {"d", kActive}});
  CHECK(lost.note(joined, gone).empty());
  CHECK(lost.lost().empty());
  // Back and active again, then killed: this time it is lost.
  const ClusterMap back = map_of(20, {{"a", kActive}, {"b", kActive}, {"c", kActive}});
  lost.note(gone, back);
  const ClusterMap killed = map_of(21, {{"a", kActive}, {"c", kActive}});
  lost.note(back, killed);
  CHECK(lost.lost() == std::vector<LostMember>{{"b", 21}, {"d", 20}});
}

TEST_CASE("a lost member back in the map is forgotten and lost again at the later epoch",
          "[lost_members]") {
  LostMembers lost;
  const ClusterMap two = map_of(5, {{"a", kActive}, {"b", kActive}});
  lost.note(ClusterMap(), two);
  const ClusterMap one = map_of(6, {{"a", kActive}});
  lost.note(two, one);
  CHECK(lost.lost() == std::vector<LostMember>{{"b", 6}});
  const ClusterMap joining = map_of(9, {{"a", kActive}, {"b", NodeState::kJoining}});
  lost.note(one, joining);
  CHECK(lost.lost().empty());
  const ClusterMap again = map_of(12, {{"a", kActive}});
  lost.note(joining, again);
  CHECK(lost.lost() == std::vector<LostMember>{{"b", 12}});
}

TEST_CASE("at most the 64 most recent lost members are kept", "[lost_members]") {
  LostMembers lost;
  ClusterMap previous;
  for (std::uint64_t i = 0; i < LostMembers::kMaxLost + 6; ++i) {
    // Each map holds one new member; the one before it is gone.
    const ClusterMap next = map_of(i + 1, {{"n" + std::to_string(i), kActive}});
    lost.note(previous, next);
    previous = next;
  }
  REQUIRE(lost.lost().size() == LostMembers::kMaxLost);
  // n0 .. n68 were lost at epochs 2 .. 70: the newest 64 are n68 (epoch 70) down to n5.
  CHECK(lost.lost().front() == LostMember{"n68", 70});
  CHECK(lost.lost().back() == LostMember{"n5", 7});
}

}  // namespace
}  // namespace sluice::cluster
