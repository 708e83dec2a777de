// Static cluster mode, in process: several nodes load one cluster file; each answers CLUSTER
// with the map, counts only the keys it is the primary of, redirects the others to their
// primary, and adopts a reloaded file only under the epoch rules.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "cluster/cluster_map.h"
#include "core/key_hash.h"
#include "tests/integration/raw_client.h"
#include "tests/integration/test_cluster.h"
#include "tests/integration/test_server.h"

namespace sluice::test {
namespace {

using protocol::ItemStatus;

// The index (0..N-1) of the node that is the primary of `key`.
int primary_of(const cluster::ClusterMap& map, const std::string& key) {
  const cluster::ClusterNode* node = map.primary_of(hash_key(key));
  REQUIRE(node != nullptr);
  return std::stoi(node->id.substr(5));
}

TEST_CASE("every node of a static cluster answers CLUSTER with the map and its own index",
          "[cluster]") {
  TestCluster cluster(3);
  for (int i = 0; i < 3; ++i) {
    RawClient client(cluster.node(i).port());
    client.set_framing(protocol::Framing::with_epoch(0));
    const protocol::ClusterMapMessage map = client.cluster();
    CHECK(client.last_epoch() == 1);  // in the reply header (framing version 2)
    CHECK(map.epoch == 1);
    CHECK(map.self == i);
    CHECK(map.partition_bits == 16);
    CHECK(map.vnodes == 4096);
    REQUIRE(map.nodes.size() == 3);
    for (int n = 0; n < 3; ++n) {
      CHECK(map.nodes[n].id == "node-" + std::to_string(n));
      CHECK(map.nodes[n].host == "127.0.0.1");
      CHECK(map.nodes[n].port == cluster.node(n).port());
      CHECK(map.nodes[n].state == protocol::WireNodeState::kActive);
    }
    CHECK(cluster.node(i).server().cluster_epoch() == 1);
  }
}

TEST_CASE("a node counts only the keys it is primary of and redirects the others to their primary",
          "[cluster]") {
  TestCluster cluster(3);
  const cluster::ClusterMap map = cluster.map(1, 3);
  const Rule rule{Algorithm::kFixedWindow, 3, 60'000, 0};
  for (int k = 0; k < 30; ++k) {
    const std::string key = "cluster:key:" + std::to_string(k);
    const int owner = primary_of(map, key);
    for (int i = 0; i < 3; ++i) {
      if (i == owner) continue;
      RawClient other(cluster.node(i).port());
      for (int attempt = 0; attempt < 5; ++attempt) {
        const protocol::AcquireResult result = other.acquire(key, rule);
        CHECK(result.status == ItemStatus::kRedirect);
        CHECK(result.limit == static_cast<std::uint32_t>(owner));
        CHECK(result.remaining == 0);
      }
    }
    // The redirected attempts counted nothing: the owner still admits exactly the limit.
    RawClient owner_client(cluster.node(owner).shard_port(0));
    int allowed = 0;
    for (int attempt = 0; attempt < 6; ++attempt) {
      allowed += owner_client.acquire(key, rule).status == ItemStatus::kAllowed ? 1 : 0;
    }
    CHECK(allowed == 3);
  }
  std::uint64_t redirected = 0;
  for (int i = 0; i < 3; ++i) {
    RawClient client(cluster.node(i).port());
    redirected += client.stats().at("total.redirected");
  }
  CHECK(redirected == 30 * 2 * 5);
}

TEST_CASE("RESET on a node that is not the key's primary is redirected and resets nothing",
          "[cluster]") {
  TestCluster cluster(2);
  const cluster::ClusterMap map = cluster.map(1, 2);
  const std::string key = "reset:me";
  const int owner = primary_of(map, key);
  RawClient at_owner(cluster.node(owner).port());
  RawClient elsewhere(cluster.node(1 - owner).port());
  const Rule rule{Algorithm::kGcra, 1, 60'000, 0};
  CHECK(at_owner.acquire(key, rule).status == ItemStatus::kAllowed);
  const std::string_view keys[] = {key};
  CHECK(elsewhere.reset(keys).at(0) == protocol::ResetStatus::kRedirect);
  CHECK(at_owner.acquire(key, rule).status == ItemStatus::kDenied);  // still counted
  CHECK(at_owner.reset(keys).at(0) == protocol::ResetStatus::kRemoved);
}

TEST_CASE("a reload adopts a new member set only with a higher epoch", "[cluster]") {
  TestCluster cluster(3);
  // The same file again: nothing changes.
  for (int i = 0; i < 3; ++i) CHECK(cluster.node(i).server().reload_cluster().empty());
  // Two members under the same epoch: refused, the map stays.
  cluster.write(1, 2);
  CHECK_THAT(cluster.node(0).server().reload_cluster(),
             Catch::Contains("the members changed but the epoch is still 1"));
  CHECK(cluster.node(0).server().cluster_epoch() == 1);
  // Epoch 2 with two members: node-2 leaves the ring.
  cluster.write(2, 2);
  for (int i = 0; i < 2; ++i) CHECK(cluster.node(i).server().reload_cluster().empty());
  // node-2 is no longer listed: it adopts the map all the same and serves no key.
  CHECK(cluster.node(2).server().reload_cluster().empty());
  CHECK_FALSE(cluster.node(2).server().cluster_member());
  CHECK(cluster.node(0).server().cluster_member());
  {
    RawClient removed(cluster.node(2).port());
    for (int k = 0; k < 10; ++k) {
      CHECK(
          removed.acquire("any:" + std::to_string(k), Rule{Algorithm::kGcra, 5, 1000, 0}).status ==
          ItemStatus::kRedirect);
    }
  }
  RawClient client(cluster.node(0).port());
  const protocol::ClusterMapMessage map = client.cluster();
  CHECK(map.epoch == 2);
  CHECK(map.nodes.size() == 2);
  // Keys now route by the two-node ring.
  const cluster::ClusterMap two = cluster.map(2, 2);
  for (int k = 0; k < 20; ++k) {
    const std::string key = "after:" + std::to_string(k);
    const int owner = primary_of(two, key);
    RawClient at(cluster.node(owner).port());
    CHECK(at.acquire(key, Rule{Algorithm::kTokenBucket, 5, 1000, 0}).status ==
          ItemStatus::kAllowed);
  }
  cluster.write(1, 3);
  CHECK_THAT(cluster.node(0).server().reload_cluster(),
             Catch::Contains("epoch 1 is below the epoch in force, 2"));
}

TEST_CASE("RELOAD over the wire rereads the file and answers the epoch or the refusal",
          "[cluster]") {
  TestCluster cluster(2);
  RawClient client(cluster.node(0).port());
  RawClient::ReloadAnswer reply = client.reload();  // the same file: nothing changes
  CHECK(reply.epoch == 1);
  CHECK(reply.message.empty());
  cluster.write(1, 1);  // fewer members under the same epoch
  reply = client.reload();
  CHECK(reply.epoch == 1);
  CHECK_THAT(reply.message, Catch::Contains("the members changed but the epoch is still 1"));
  cluster.write(2, 2);  // the same two members, a higher epoch
  reply = client.reload();
  CHECK(reply.epoch == 2);
  CHECK(reply.message.empty());
  CHECK(cluster.node(0).server().cluster_epoch() == 2);
  CHECK(client.cluster().epoch == 2);
  // A node outside any cluster says so, and keeps serving the connection.
  TestServer alone;
  RawClient single(alone.port());
  reply = single.reload();
  CHECK(reply.epoch == 0);
  CHECK_THAT(reply.message, Catch::Contains("not in static cluster mode"));
  CHECK(single.acquire("k", Rule{Algorithm::kGcra, 5, 1000, 0}).status == ItemStatus::kAllowed);
}

TEST_CASE("a cluster file with errors is refused with every reason, file and line", "[cluster]") {
  TestCluster cluster(1);
  {
    std::ofstream file(cluster.path());
    file << "epoch 3\nnode-0 127.0.0.1:" << cluster.node(0).port() << "\nnode-0 127.0.0.1:9\n"
         << "bad id! 127.0.0.1:1\n";
  }
  const std::string refused = cluster.node(0).server().reload_cluster();
  CHECK_THAT(refused,
             Catch::Contains(cluster.path() + ":3: node id \"node-0\" is already on line 2"));
  CHECK_THAT(refused, Catch::Contains(cluster.path() + ":4:"));
  CHECK(cluster.node(0).server().cluster_epoch() == 1);
}

}  // namespace
}  // namespace sluice::test

namespace sluice::test {
namespace {

// A node whose map skips the epoch under which another node fenced some of its partitions (an
// etcd watch that missed a revision does this), and that is primary of them again in the map
// it adopts next: by its two maps nothing moved, yet the partitions are fenced. Before the fix
// they stayed UNAVAILABLE for good (a failover run saw a node's keys refused for 15 s); now the
// node gathers them again, fenced, from the other members, and serves them with their counts.
TEST_CASE("a node fenced under a map it never adopted gathers and serves its partitions again",
          "[cluster]") {
  TestCluster cluster(2);
  const auto map = [&](std::uint64_t epoch, cluster::NodeState second) {
    return cluster::ClusterMap::make(
               epoch, {{"node-0", "127.0.0.1:" + std::to_string(cluster.port(0)),
                        cluster::NodeState::kActive},
                       {"node-1", "127.0.0.1:" + std::to_string(cluster.port(1)), second}})
        .value();
  };
  // Epoch 2: node-1 joining, node-0 primary of every partition (it pulls node-1's back).
  for (int i = 0; i < 2; ++i) {
    REQUIRE(cluster.node(i).server().TEST_adopt_map(map(2, cluster::NodeState::kJoining)).empty());
  }
  REQUIRE(cluster.settled());
  // Epoch 4, on node-1 only: active, it takes half the partitions, fencing them on node-0.
  const cluster::ClusterMap four = map(4, cluster::NodeState::kActive);
  REQUIRE(cluster.node(1).server().TEST_adopt_map(four).empty());
  REQUIRE(cluster.settled());
  std::vector<std::string> moved;
  for (int k = 0; moved.size() < 20; ++k) {
    const std::string key = "fenced:" + std::to_string(k);
    if (primary_of(four, key) == 1) moved.push_back(key);
  }
  const Rule rule{Algorithm::kFixedWindow, 3, 3'600'000, 0};
  {
    RawClient node1(cluster.node(1).port());
    for (const std::string& key : moved) {
      for (int n = 0; n < 3; ++n) REQUIRE(node1.acquire(key, rule).status == ItemStatus::kAllowed);
    }
    // node-0 still routes by epoch 2: it is these keys' primary there, but they are fenced.
    RawClient node0(cluster.node(0).port());
    CHECK(node0.acquire(moved.front(), rule).status == ItemStatus::kUnavailable);
  }
  // node-0, lagging, adopts epoch 3 (node-1 still joining there): a map older than the fence's,
  // so the fence stands while node-1 serves the keys under epoch 4. Nothing is gathered.
  REQUIRE(cluster.node(0).server().TEST_adopt_map(map(3, cluster::NodeState::kJoining)).empty());
  REQUIRE(cluster.settled());
  {
    RawClient node0(cluster.node(0).port());
    for (const std::string& key : moved) {
      INFO(key);
      CHECK(node0.acquire(key, rule).status == ItemStatus::kUnavailable);
    }
  }
  // node-0 skips epoch 4 and adopts epoch 5, where node-1 is joining again: by epochs 3 and 5
  // nothing moved for node-0, yet the fence is older than epoch 5.
  REQUIRE(cluster.node(0).server().TEST_adopt_map(map(5, cluster::NodeState::kJoining)).empty());
  REQUIRE(cluster.settled());
  RawClient node0(cluster.node(0).port());
  for (const std::string& key : moved) {
    INFO(key);
    // Served again, with the counts node-1 took meanwhile: exhausted.
    CHECK(node0.acquire(key, rule).status == ItemStatus::kDenied);
  }
}

}  // namespace
}  // namespace sluice::test
