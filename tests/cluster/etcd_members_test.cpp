// The etcd mode's membership records (cluster/etcd_members.h): keys, values, and the map a
// read of them gives.
#include "cluster/etcd_members.h"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

namespace sluice::cluster {
namespace {

TEST_CASE(
    "member keys live under /sluice/NAME/members/, and a cluster name is checked like a "
    "node id",
    "[etcd-members]") {
  CHECK(members_prefix("eu-1") == "/sluice/eu-1/members/");
  CHECK(member_key("eu-1", "node-a") == "/sluice/eu-1/members/node-a");
  CHECK(check_cluster_name("eu-1").empty());
  CHECK(check_cluster_name(std::string(64, 'c')).empty());
  CHECK(check_cluster_name("") == "empty cluster name");
  CHECK(check_cluster_name(std::string(65, 'c')).find("cluster name is 65 bytes") == 0);
  CHECK(check_cluster_name("eu/1").find("cluster name") == 0);
}

TEST_CASE("a member's value round-trips for every state a node writes", "[etcd-members]") {
  for (const NodeState state : {NodeState::kJoining, NodeState::kActive, NodeState::kDraining}) {
    const ClusterNode node{"node-a", "10.0.0.1:7420", state};
    const std::string value = encode_member_value(node);
    INFO(value);
    CHECK(value.starts_with("sluice-member 1 state="));
    const auto decoded = decode_member("eu-1", member_key("eu-1", "node-a"), value);
    REQUIRE(decoded.has_value());
    CHECK(*decoded == node);
  }
  CHECK(encode_member_value({"node-a", "[::1]:7420", NodeState::kActive}) ==
        "sluice-member 1 state=active address=[::1]:7420");
}

TEST_CASE("a record lists its shards' ports after the address, and reads back with them",
          "[etcd-members]") {
  const ClusterNode node{"node-a", "10.0.0.1:7420", NodeState::kActive};
  const std::string value = encode_member_value(node, {7421, 7422, 65535});
  CHECK(value == "sluice-member 1 state=active address=10.0.0.1:7420 shards=7421,7422,65535");
  const auto record = decode_member_record("eu-1", member_key("eu-1", "node-a"), value);
  REQUIRE(record.has_value());
  CHECK(record->node == node);
  CHECK(record->shard_ports == std::vector<std::uint16_t>{7421, 7422, 65535});
  // A record without them (a node before them) reads with none.
  const auto older =
      decode_member_record("eu-1", member_key("eu-1", "node-a"), encode_member_value(node));
  REQUIRE(older.has_value());
  CHECK(older->shard_ports.empty());
  // The most a record may list, and one more.
  std::vector<std::uint16_t> most(kMaxRecordShards, 9000);
  CHECK(decode_member_record("eu-1", member_key("eu-1", "node-a"), encode_member_value(node, most))
            .has_value());
  most.push_back(9000);
  const auto too_many =
      decode_member_record("eu-1", member_key("eu-1", "node-a"), encode_member_value(node, most));
  REQUIRE_FALSE(too_many.has_value());
  CHECK(too_many.error().find("more than 1024 shard ports") != std::string::npos);
}

TEST_CASE("a later version's fields are ignored, in any order", "[etcd-members]") {
  const auto decoded =
      decode_member("eu-1", "/sluice/eu-1/members/node-b",
                    "sluice-member 1 zone=eu-west-1a address=sluice-2.internal:7420 state=active");
  REQUIRE(decoded.has_value());
  CHECK(*decoded == ClusterNode{"node-b", "sluice-2.internal:7420", NodeState::kActive});
}

TEST_CASE("a bad key or value is refused with a message that says what is wrong",
          "[etcd-members]") {
  const std::string key = member_key("eu-1", "node-a");
  const struct {
    const char* key;
    const char* value;
    const char* message;
  } cases[] = {
      {"/sluice/eu-2/members/node-a", "sluice-member 1 state=active address=h:1",
       "is not under /sluice/eu-1/members/"},
      {"/sluice/eu-1/members/", "sluice-member 1 state=active address=h:1", "empty node id"},
      {"/sluice/eu-1/members/a b", "sluice-member 1 state=active address=h:1", "node id"},
      {nullptr, "", "not a sluice-member record"},
      {nullptr, "sluice-node 1 state=active address=h:1", "not a sluice-member record"},
      {nullptr, "sluice-member 2 state=active address=h:1", "version \"2\" (this node reads 1)"},
      {nullptr, "sluice-member 1 address=h:1", "no state"},
      {nullptr, "sluice-member 1 state=active", "no address"},
      {nullptr, "sluice-member 1 state=down address=h:1", "state \"down\""},
      {nullptr, "sluice-member 1 state=gone address=h:1", "state \"gone\""},
      {nullptr, "sluice-member 1 state=active address=h", "expected HOST:PORT"},
      {nullptr, "sluice-member 1 state=active address=h:0", "address"},
      {nullptr, "sluice-member 1 state=active state=joining address=h:1", "state given twice"},
      {nullptr, "sluice-member 1 state=active address=h:1 address=h:2", "address given twice"},
      {nullptr, "sluice-member 1 state=active  address=h:1", "field \"\" is not name=value"},
      {nullptr, "sluice-member 1 state=active address=h:1 junk", "field \"junk\""},
      {nullptr, "sluice-member 1 =x state=active address=h:1", "field \"=x\""},
      {nullptr, "sluice-member 1 state=active address=h:1 shards=", "shard port \"\""},
      {nullptr, "sluice-member 1 state=active address=h:1 shards=7421,", "shard port \"\""},
      {nullptr, "sluice-member 1 state=active address=h:1 shards=0", "shard port \"0\""},
      {nullptr, "sluice-member 1 state=active address=h:1 shards=65536", "shard port \"65536\""},
      {nullptr, "sluice-member 1 state=active address=h:1 shards=7a", "shard port \"7a\""},
      {nullptr, "sluice-member 1 state=active address=h:1 shards=1 shards=2", "shards given twice"},
  };
  for (const auto& c : cases) {
    const std::string k = c.key != nullptr ? c.key : key;
    INFO(k << " = " << c.value);
    const auto decoded = decode_member("eu-1", k, c.value);
    REQUIRE_FALSE(decoded.has_value());
    CHECK(decoded.error().find(c.message) != std::string::npos);
  }
}

TEST_CASE(
    "a read of the members gives the map at its revision, without the records that do "
    "not decode",
    "[etcd-members]") {
  const std::vector<MemberEntry> entries = {
      {member_key("eu-1", "node-a"), "sluice-member 1 state=active address=10.0.0.1:7420"},
      {member_key("eu-1", "node-b"), "sluice-member 1 state=joining address=10.0.0.2:7420"},
      {member_key("eu-1", "node-c"), "sluice-member 1 state=active address=10.0.0.3:7420"},
      {member_key("eu-1", "node-d"), "garbage"},
  };
  const MembersView view = members_view("eu-1", entries, 42);
  REQUIRE(view.map.has_value());
  CHECK(view.map->epoch() == 42);
  CHECK(view.map->nodes().size() == 3);
  REQUIRE(view.rejected.size() == 1);
  CHECK(view.rejected[0].find("member node-d: not a sluice-member record") == 0);
  // Only active members are in the ring: the joining one owns nothing yet.
  CHECK(view.map->ring().nodes() == std::vector<std::string>{"node-a", "node-c"});
}

TEST_CASE(
    "of two member records at one address the one registered later is left out, never "
    "the whole set",
    "[etcd-members]") {
  // node-b registered first (create revision 5); node-a came later with node-b's address.
  const std::vector<MemberEntry> twice = {
      {member_key("eu-1", "node-a"), "sluice-member 1 state=active address=10.0.0.1:7420", 9},
      {member_key("eu-1", "node-b"), "sluice-member 1 state=active address=10.0.0.1:7420", 5},
      {member_key("eu-1", "node-c"), "sluice-member 1 state=active address=10.0.0.3:7420", 7},
  };
  const MembersView clash = members_view("eu-1", twice, 43);
  REQUIRE(clash.map.has_value());
  CHECK(clash.map->ring().nodes() == std::vector<std::string>{"node-b", "node-c"});
  REQUIRE(clash.rejected.size() == 1);
  CHECK(clash.rejected[0] ==
        "member node-a: address 10.0.0.1:7420 is node node-b's, registered earlier");

  // Without create revisions (all 0) the key order decides, alike on every node.
  std::vector<MemberEntry> unknown = twice;
  for (MemberEntry& entry : unknown) entry.create_revision = 0;
  const MembersView by_key = members_view("eu-1", unknown, 44);
  REQUIRE(by_key.map.has_value());
  CHECK(by_key.map->ring().nodes() == std::vector<std::string>{"node-a", "node-c"});
  REQUIRE(by_key.rejected.size() == 1);
  CHECK(by_key.rejected[0].find("member node-b:") == 0);
}

}  // namespace
}  // namespace sluice::cluster
