// The client against a cluster of in-process nodes (tests/integration/test_cluster.h): routing by
// the map fetched from one seed, exact counts over nodes, batches split per node and put back in
// order, following a REDIRECT after the map changes, and a dead node failing only its keys.
#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "client/client.h"
#include "client/node_connection.h"
#include "tests/client/test_support.h"
#include "tests/integration/test_cluster.h"

namespace sluice::client {
namespace {

using namespace std::chrono_literals;
using test::owner_of;
using test::RawClient;
using test::TestCluster;
using testing::CallbackLatch;
using testing::connect_or_fail;
using testing::kHang;
using testing::options_for;
using testing::per_minute;

std::string key_name(int i) { return "cluster-client:" + std::to_string(i); }

std::string seed_of(TestCluster& cluster, int node) {
  return "127.0.0.1:" + std::to_string(cluster.port(node));
}

// Grows a three-node cluster to four: a fourth node, the file of epoch 2 on every node, a
// reload of all, and every hand-over pull finished.
void add_fourth_node(TestCluster& cluster) {
  const int added = cluster.add_node();
  cluster.write(2, 4);
  cluster.load(added);
  cluster.reload_all();
  REQUIRE(cluster.settled());
}

// total.allowed of every node, asked over its public port.
std::vector<std::uint64_t> allowed_per_node(TestCluster& cluster) {
  std::vector<std::uint64_t> out;
  for (int i = 0; i < cluster.size(); ++i) {
    if (!cluster.running(i)) {
      out.push_back(0);
      continue;
    }
    RawClient raw(cluster.port(i));
    out.push_back(raw.stats()["total.allowed"]);
  }
  return out;
}

TEST_CASE("one seed gives the client the map, and every key is decided by its primary") {
  TestCluster cluster(3);
  auto client = connect_or_fail(options_for(seed_of(cluster, 1)));
  CHECK(client->cluster_epoch() == 1);
  CHECK(client->node_count() == 3);

  const cluster::ClusterMap map = cluster.map(1, 3);
  constexpr int kKeys = 300;
  std::vector<std::uint64_t> expected(3, 0);
  for (int k = 0; k < kKeys; ++k) {
    const Result<Decision> d = client->acquire(key_name(k), per_minute(5));
    REQUIRE(d.ok());
    CHECK(d->allowed);
    ++expected.at(static_cast<std::size_t>(owner_of(map, key_name(k))));
  }
  // Each node admitted exactly the keys it is the primary of: no key went through a redirect.
  CHECK(allowed_per_node(cluster) == expected);
  CHECK(expected[0] > 0);
  CHECK(expected[1] > 0);
  CHECK(expected[2] > 0);
  const ClientCounters counters = client->counters();
  CHECK(counters.redirects_followed == 0);
  CHECK(counters.map_refreshes == 0);
}

TEST_CASE("the client's shard-unaware mode routes each key to its primary node too") {
  TestCluster cluster(3);
  auto client = connect_or_fail(options_for(seed_of(cluster, 2), /*shard_aware=*/false));
  const cluster::ClusterMap map = cluster.map(1, 3);
  std::vector<std::uint64_t> expected(3, 0);
  for (int k = 0; k < 150; ++k) {
    REQUIRE(client->acquire(key_name(k), per_minute(5)).ok());
    ++expected.at(static_cast<std::size_t>(owner_of(map, key_name(k))));
  }
  CHECK(allowed_per_node(cluster) == expected);
  CHECK(client->counters().redirects_followed == 0);
}

TEST_CASE("10,000 acquires over 1,000 keys across three nodes admit exactly the limit per key") {
  TestCluster cluster(3);
  auto client = connect_or_fail(options_for(seed_of(cluster, 0)));
  constexpr int kKeys = 1000;
  constexpr int kRounds = 10;
  constexpr std::uint32_t kLimit = 7;
  std::vector<std::string> keys;
  for (int k = 0; k < kKeys; ++k) keys.push_back(key_name(k));
  std::vector<AcquireRequest> batch;
  for (const std::string& key : keys) batch.push_back(AcquireRequest{key, per_minute(kLimit)});

  std::vector<int> allowed(kKeys, 0);
  int failed = 0;
  std::vector<Result<Decision>> results;
  for (int round = 0; round < kRounds; ++round) {
    // Half the rounds as one batch over every node, half as single calls.
    if (round % 2 == 0) {
      client->acquire_batch(batch, results);
      REQUIRE(results.size() == keys.size());
      for (int k = 0; k < kKeys; ++k) {
        failed += !results[static_cast<std::size_t>(k)].ok();
        allowed[static_cast<std::size_t>(k)] += results[static_cast<std::size_t>(k)].ok() &&
                                                results[static_cast<std::size_t>(k)]->allowed;
      }
    } else {
      for (int k = 0; k < kKeys; ++k) {
        const Result<Decision> d =
            client->acquire(keys[static_cast<std::size_t>(k)], per_minute(kLimit));
        failed += !d.ok();
        allowed[static_cast<std::size_t>(k)] += d.ok() && d->allowed;
      }
    }
  }
  CHECK(failed == 0);
  int wrong = 0;
  for (int a : allowed) wrong += a != static_cast<int>(kLimit);
  CHECK(wrong == 0);
  std::uint64_t total = 0;
  for (std::uint64_t n : allowed_per_node(cluster)) total += n;
  CHECK(total == std::uint64_t{kKeys} * kLimit);
}

TEST_CASE("a batch spanning every node comes back in the caller's order") {
  TestCluster cluster(3);
  auto client = connect_or_fail(options_for(seed_of(cluster, 0)));
  const cluster::ClusterMap map = cluster.map(1, 3);
  constexpr int kItems = 240;
  std::vector<std::string> keys;
  for (int i = 0; i < kItems; ++i) keys.push_back(key_name(i));
  std::vector<AcquireRequest> items;
  std::map<int, int> per_node;
  for (int i = 0; i < kItems; ++i) {
    // A limit and a cost of its own per item, so that each answer names its item.
    const std::uint32_t limit = 1000 + static_cast<std::uint32_t>(i);
    items.push_back(AcquireRequest{keys[static_cast<std::size_t>(i)], per_minute(limit),
                                   1 + static_cast<std::uint32_t>(i % 5)});
    ++per_node[owner_of(map, keys[static_cast<std::size_t>(i)])];
  }
  REQUIRE(per_node.size() == 3);

  CallbackLatch latch;
  std::vector<Result<Decision>> got;
  client->acquire_batch_async(items, [&](std::span<const Result<Decision>> results) {
    got.assign(results.begin(), results.end());
    latch.count_down();
  });
  REQUIRE(latch.wait_for(1, kHang));
  REQUIRE(got.size() == items.size());
  int misplaced = 0;
  for (int i = 0; i < kItems; ++i) {
    const Result<Decision>& d = got[static_cast<std::size_t>(i)];
    REQUIRE(d.ok());
    misplaced += d->limit != items[static_cast<std::size_t>(i)].rule.limit ||
                 d->remaining != d->limit - items[static_cast<std::size_t>(i)].cost;
  }
  CHECK(misplaced == 0);
}

TEST_CASE(
    "after a reload adds a node, redirected keys reach their new primary and the epoch "
    "advances") {
  TestCluster cluster(3);
  auto client = connect_or_fail(options_for(seed_of(cluster, 0)));
  constexpr int kKeys = 400;
  constexpr std::uint32_t kLimit = 4;
  const Rule rule = per_minute(kLimit);
  for (int k = 0; k < kKeys; ++k) REQUIRE(client->acquire(key_name(k), rule).ok());
  REQUIRE(client->cluster_epoch() == 1);

  add_fourth_node(cluster);
  const cluster::ClusterMap three = cluster.map(1, 3);
  const cluster::ClusterMap four = cluster.map(2, 4);
  int moved = 0;
  for (int k = 0; k < kKeys; ++k)
    moved += owner_of(three, key_name(k)) != owner_of(four, key_name(k));
  REQUIRE(moved > 0);

  // The client still routes by epoch 1: moved keys are answered REDIRECT by their old primary
  // (under epoch 2), which makes the client fetch the new map and send them to node-3. The
  // counts moved with the keys.
  int wrong = 0;
  for (int k = 0; k < kKeys; ++k) {
    const Result<Decision> d = client->acquire(key_name(k), rule);
    REQUIRE(d.ok());
    wrong += !d->allowed || d->remaining != kLimit - 2;
  }
  CHECK(wrong == 0);
  CHECK(client->cluster_epoch() == 2);
  CHECK(client->node_count() == 4);
  const ClientCounters counters = client->counters();
  CHECK(counters.map_refreshes == 1);  // one CLUSTER request for the one newer epoch
  CHECK(counters.redirects_followed >= 1);
  CHECK(counters.redirects_followed <= static_cast<std::uint64_t>(moved));

  // Batches route by the new map at once.
  std::vector<AcquireRequest> batch;
  for (int k = 0; k < kKeys; ++k) batch.push_back(AcquireRequest{"", rule});
  std::vector<std::string> keys;
  for (int k = 0; k < kKeys; ++k) keys.push_back(key_name(k));
  for (int k = 0; k < kKeys; ++k)
    batch[static_cast<std::size_t>(k)].key = keys[static_cast<std::size_t>(k)];
  const std::uint64_t before = client->counters().redirects_followed;
  const std::vector<Result<Decision>> results = client->acquire_batch(batch);
  int off = 0;
  for (const Result<Decision>& d : results) off += !d.ok() || d->remaining != kLimit - 3;
  CHECK(off == 0);
  CHECK(client->counters().redirects_followed == before);
}

TEST_CASE(
    "after a reload, keys too long for the connection's copy and one-item async batches follow "
    "their redirects too") {
  TestCluster cluster(3);
  // `batcher` sends one-item batches of short keys (each kept by the connection that sent it);
  // `client` acquires keys over ResendCopy::kKeyBytes (each kept by a one-item batch).
  auto client = connect_or_fail(options_for(seed_of(cluster, 0)));
  auto batcher = connect_or_fail(options_for(seed_of(cluster, 1)));
  constexpr int kKeys = 200;
  const Rule rule = per_minute(10);
  std::vector<std::string> long_keys;
  std::vector<std::string> short_keys;
  for (int k = 0; k < kKeys; ++k) {
    long_keys.push_back(key_name(k) + ":" + std::string(80, 'x'));
    short_keys.push_back(key_name(k));
  }
  REQUIRE(long_keys[0].size() > detail::ResendCopy::kKeyBytes);
  REQUIRE(short_keys[0].size() <= detail::ResendCopy::kKeyBytes);
  for (const std::string& key : long_keys) REQUIRE(client->acquire(key, rule).ok());
  for (const std::string& key : short_keys) REQUIRE(batcher->acquire(key, rule).ok());

  add_fourth_node(cluster);
  const cluster::ClusterMap three = cluster.map(1, 3);
  const cluster::ClusterMap four = cluster.map(2, 4);
  int moved_long = 0;
  int moved_short = 0;
  for (int k = 0; k < kKeys; ++k) {
    const auto i = static_cast<std::size_t>(k);
    moved_long += owner_of(three, long_keys[i]) != owner_of(four, long_keys[i]);
    moved_short += owner_of(three, short_keys[i]) != owner_of(four, short_keys[i]);
  }
  REQUIRE(moved_long > 0);
  REQUIRE(moved_short > 0);

  // Both clients still route by epoch 1: their moved keys are answered REDIRECT and reach their
  // new primary with the count they had. The moved long keys go first: any reply under epoch 2
  // makes the client refresh its map, after which nothing is redirected.
  std::stable_partition(long_keys.begin(), long_keys.end(), [&](const std::string& key) {
    return owner_of(three, key) != owner_of(four, key);
  });
  int wrong = 0;
  for (const std::string& key : long_keys) {
    const Result<Decision> d = client->acquire(key, rule);
    wrong += !d.ok() || d->remaining != 8;
  }
  CHECK(wrong == 0);
  CHECK(client->cluster_epoch() == 2);
  CHECK(client->counters().redirects_followed >= 1);

  CallbackLatch latch;
  std::vector<Result<Decision>> answers(kKeys, Result<Decision>(ErrorCode::kClosed, "unanswered"));
  std::vector<AcquireRequest> items;
  for (const std::string& key : short_keys) items.push_back(AcquireRequest{key, rule});
  for (std::size_t i = 0; i < items.size(); ++i) {
    batcher->acquire_batch_async(std::span<const AcquireRequest>(&items[i], 1),
                                 [&answers, &latch, i](std::span<const Result<Decision>> r) {
                                   if (r.size() == 1) answers[i] = r[0];
                                   latch.count_down();
                                 });
  }
  REQUIRE(latch.wait_for(items.size(), kHang));
  wrong = 0;
  for (const Result<Decision>& d : answers) wrong += !d.ok() || d->remaining != 8;
  CHECK(wrong == 0);
  CHECK(batcher->cluster_epoch() == 2);
  CHECK(batcher->counters().redirects_followed >= 1);
  CHECK(batcher->counters().redirects_followed <= static_cast<std::uint64_t>(moved_short));
}

TEST_CASE("a batch with moved keys follows the redirects within one call") {
  TestCluster cluster(3);
  auto client = connect_or_fail(options_for(seed_of(cluster, 1)));
  constexpr int kKeys = 300;
  const Rule rule = per_minute(10);
  std::vector<std::string> keys;
  for (int k = 0; k < kKeys; ++k) keys.push_back(key_name(k));
  std::vector<AcquireRequest> batch;
  for (const std::string& key : keys) batch.push_back(AcquireRequest{key, rule});
  std::vector<Result<Decision>> results;
  client->acquire_batch(batch, results);
  for (const Result<Decision>& d : results) REQUIRE(d.ok());
  // A second client, still on epoch 1 after the reload: its RESET of a moved key is redirected.
  auto resetter = connect_or_fail(options_for(seed_of(cluster, 2)));

  add_fourth_node(cluster);

  client->acquire_batch(batch, results);
  int wrong = 0;
  for (const Result<Decision>& d : results) wrong += !d.ok() || d->remaining != 8;
  CHECK(wrong == 0);
  CHECK(client->cluster_epoch() == 2);
  CHECK(client->counters().redirects_followed >= 1);

  const cluster::ClusterMap three = cluster.map(1, 3);
  const cluster::ClusterMap four = cluster.map(2, 4);
  int moved = 0;
  while (moved < kKeys && owner_of(three, keys[static_cast<std::size_t>(moved)]) ==
                              owner_of(four, keys[static_cast<std::size_t>(moved)])) {
    ++moved;
  }
  REQUIRE(moved < kKeys);
  REQUIRE(resetter->cluster_epoch() == 1);
  const Result<bool> existed = resetter->reset(keys[static_cast<std::size_t>(moved)]);
  REQUIRE(existed.ok());
  CHECK(*existed);  // it moved with its counts, and the reset found it at its new primary
  CHECK(resetter->cluster_epoch() == 2);
  CHECK(resetter->counters().redirects_followed == 1);
}

TEST_CASE("a node that is down fails only its own keys, at connect and after") {
  TestCluster cluster(3);
  const cluster::ClusterMap map = cluster.map(1, 3);
  cluster.stop(2);
  ClientOptions options = options_for(seed_of(cluster, 0));
  options.timeout = 500ms;
  options.connect_timeout = 500ms;
  auto client = connect_or_fail(options);  // node-2 does not answer: connect() still succeeds
  CHECK(client->node_count() == 3);

  constexpr int kKeys = 300;
  int down_keys = 0;
  int wrong = 0;
  for (int k = 0; k < kKeys; ++k) {
    const Result<Decision> d = client->acquire(key_name(k), per_minute(5));
    if (owner_of(map, key_name(k)) == 2) {
      ++down_keys;
      wrong += d.code() != ErrorCode::kConnectionFailed;
    } else {
      wrong += !d.ok() || !d->allowed;
    }
  }
  CHECK(down_keys > 0);
  CHECK(wrong == 0);

  // A batch over all nodes: the live nodes' items are decided, the dead node's fail.
  std::vector<std::string> keys;
  for (int k = 0; k < kKeys; ++k) keys.push_back(key_name(k));
  std::vector<AcquireRequest> batch;
  for (const std::string& key : keys) batch.push_back(AcquireRequest{key, per_minute(5)});
  const std::vector<Result<Decision>> results = client->acquire_batch(batch);
  wrong = 0;
  for (int k = 0; k < kKeys; ++k) {
    const Result<Decision>& d = results[static_cast<std::size_t>(k)];
    if (owner_of(map, key_name(k)) == 2) {
      wrong += d.code() != ErrorCode::kConnectionFailed;
    } else {
      wrong += !d.ok() || d->remaining != 3;
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("a node killed while the client runs fails only its keys") {
  TestCluster cluster(3);
  const cluster::ClusterMap map = cluster.map(1, 3);
  ClientOptions options = options_for(seed_of(cluster, 1));
  options.timeout = 500ms;
  auto client = connect_or_fail(options);
  constexpr int kKeys = 200;
  for (int k = 0; k < kKeys; ++k) REQUIRE(client->acquire(key_name(k), per_minute(5)).ok());

  cluster.stop(0);
  int wrong = 0;
  for (int k = 0; k < kKeys; ++k) {
    const Result<Decision> d = client->acquire(key_name(k), per_minute(5));
    if (owner_of(map, key_name(k)) == 0) {
      wrong += d.code() != ErrorCode::kConnectionFailed;
    } else {
      wrong += !d.ok() || d->remaining != 3;
    }
  }
  CHECK(wrong == 0);
}

TEST_CASE("reset reaches the key's primary in a cluster") {
  TestCluster cluster(3);
  auto client = connect_or_fail(options_for(seed_of(cluster, 2)));
  for (int k = 0; k < 30; ++k) REQUIRE(client->acquire(key_name(k), per_minute(1)).ok());
  int wrong = 0;
  for (int k = 0; k < 30; ++k) {
    const Result<bool> existed = client->reset(key_name(k));
    wrong += !existed.ok() || !*existed;
    const Result<Decision> again = client->acquire(key_name(k), per_minute(1));
    wrong += !again.ok() || !again->allowed;
  }
  CHECK(wrong == 0);
}

TEST_CASE("cluster() reports every node's share of the ring and reload() rereads the file") {
  TestCluster cluster(3);
  auto client = connect_or_fail(options_for(seed_of(cluster, 0)));
  const Result<ClusterInfo> info = client->cluster();
  REQUIRE(info.ok());
  CHECK(info->epoch == 1);
  REQUIRE(info->nodes.size() == 3);
  REQUIRE(info->self.has_value());
  CHECK(*info->self == 0);
  std::uint32_t primaries = 0;
  std::uint32_t replicas = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(info->nodes[i].id == "node-" + std::to_string(i));
    CHECK(info->nodes[i].address == seed_of(cluster, static_cast<int>(i)));
    CHECK(info->nodes[i].state == "active");
    CHECK(info->nodes[i].primary_partitions > 0);
    primaries += info->nodes[i].primary_partitions;
    replicas += info->nodes[i].replica_partitions;
  }
  CHECK(primaries == info->partitions);
  CHECK(replicas == info->partitions);

  cluster.write(5, 3);
  const Result<std::vector<ReloadOutcome>> reloaded = client->reload_all();
  REQUIRE(reloaded.ok());
  REQUIRE(reloaded->size() == 3);
  for (const ReloadOutcome& r : *reloaded) {
    CHECK(r.status.ok());
    CHECK(r.epoch == 5);
    CHECK(r.refusal.empty());
  }
  cluster.write(4, 2);  // fewer members under a lower epoch: refused by every node
  const Result<std::vector<ReloadOutcome>> refused = client->reload_all();
  REQUIRE(refused.ok());
  for (const ReloadOutcome& r : *refused) {
    CHECK(r.status.ok());
    CHECK(r.epoch == 5);
    CHECK_FALSE(r.refusal.empty());
  }
}

TEST_CASE("a node outside any cluster answers cluster() with epoch 0 and no nodes") {
  testing::TestServer server;
  auto client = connect_or_fail(options_for(server.address()));
  CHECK(client->cluster_epoch() == 0);
  CHECK(client->node_count() == 1);
  const Result<ClusterInfo> info = client->cluster();
  REQUIRE(info.ok());
  CHECK(info->epoch == 0);
  CHECK(info->nodes.empty());
  CHECK_FALSE(info->self.has_value());
}

TEST_CASE("an item answered UNAVAILABLE is sent again after a pause and then decided") {
  testing::FakeServer node(testing::FakeServer::Mode::kAnswer);
  node.join_cluster();
  auto client = connect_or_fail(options_for(node.address(), /*shard_aware=*/false));
  REQUIRE(client->cluster_epoch() == 1);
  node.answer_unavailable(3);
  const Result<Decision> d = client->acquire("pulling:key", per_minute(5));
  REQUIRE(d.ok());
  CHECK(d->allowed);
  CHECK(client->counters().unavailable_retries == 3);
  CHECK(node.acquires() == 4);

  // In a batch, only the items answered UNAVAILABLE go again; all come back in order.
  node.answer_unavailable(2);
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) keys.push_back("pulling:" + std::to_string(i));
  std::vector<AcquireRequest> batch;
  for (int i = 0; i < 20; ++i) {
    batch.push_back(AcquireRequest{keys[static_cast<std::size_t>(i)],
                                   per_minute(100 + static_cast<std::uint32_t>(i))});
  }
  const std::vector<Result<Decision>> results = client->acquire_batch(batch);
  REQUIRE(results.size() == 20);
  int wrong = 0;
  for (int i = 0; i < 20; ++i) {
    const Result<Decision>& r = results[static_cast<std::size_t>(i)];
    wrong += !r.ok() || r->limit != 100 + static_cast<std::uint32_t>(i);
  }
  CHECK(wrong == 0);
  CHECK(client->counters().unavailable_retries == 3 + 2 * 20);
}

TEST_CASE("an item still UNAVAILABLE at its deadline fails with kUnavailable, in time") {
  testing::FakeServer node(testing::FakeServer::Mode::kAnswer);
  node.join_cluster();
  ClientOptions options = options_for(node.address(), /*shard_aware=*/false);
  options.timeout = 100ms;
  auto client = connect_or_fail(options);
  node.answer_unavailable(1'000'000);
  const auto start = std::chrono::steady_clock::now();
  const Result<Decision> d = client->acquire("pulling:forever", per_minute(5));
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(d.code() == ErrorCode::kUnavailable);
  CHECK(took < 100ms + 50ms * test::kTimingSlack);
  // Retried, but a bounded number of times: one pause of at least 2 ms between tries.
  const std::uint64_t retries = client->counters().unavailable_retries;
  CHECK(retries >= 1);
  CHECK(retries <= 50);
}

}  // namespace
}  // namespace sluice::client
