// sluice-load against a three-node cluster of in-process nodes (tests/integration/test_cluster.h,
// a manual clock that never moves, so each key admits exactly its limit): given any node it
// reaches every key through its primary, the audit holds, and --only-node keeps one primary's
// keys. Every run is bounded by a request count.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "tests/integration/test_cluster.h"
#include "tools/load/key_generator.h"
#include "tools/load/load_driver.h"

namespace sluice::load {
namespace {

using test::owner_of;
using test::RawClient;
using test::TestCluster;

constexpr std::uint64_t kKeys = 200;
constexpr std::uint32_t kLimit = 5;

LoadOptions cluster_run(TestCluster& cluster, int seed_node) {
  LoadOptions o;
  o.servers = {"127.0.0.1:" + std::to_string(cluster.port(seed_node))};
  o.connections = 4;
  o.depth = 4;
  o.batch = 5;
  o.keys = kKeys;
  o.requests = 6000;
  o.duration = std::chrono::seconds(20);  // the request bound ends it long before
  o.rule = Rule{Algorithm::kTokenBucket, kLimit, 1000, 0};
  o.connect_timeout = std::chrono::seconds(5);
  return o;
}

// Decisions (allowed and denied) each node made, from its STATS.
std::vector<std::uint64_t> decided_per_node(TestCluster& cluster) {
  std::vector<std::uint64_t> out;
  for (int i = 0; i < cluster.size(); ++i) {
    RawClient raw(cluster.port(i));
    auto stats = raw.stats();
    out.push_back(stats["total.allowed"] + stats["total.denied"]);
  }
  return out;
}

// How many of the run's keys [0, kKeys) have `node` as their primary.
int keys_of(const TestCluster& cluster, int node, const std::string& prefix = "k:") {
  const cluster::ClusterMap map = cluster.map(1, 3);
  const KeyFormatter formatter(prefix, kKeys);
  std::vector<char> buffer(formatter.max_length());
  int count = 0;
  for (std::uint64_t k = 0; k < kKeys; ++k) {
    count += owner_of(map, std::string(formatter.format(k, buffer))) == node;
  }
  return count;
}

TEST_CASE(
    "a run against a three-node cluster given one node admits exactly the limit per key, "
    "and its audit holds",
    "[driver]") {
  TestCluster cluster(3);
  LoadOptions o = cluster_run(cluster, 2);
  o.audit = true;
  const auto result = run_load(o);
  REQUIRE(result.ok());
  const LoadReport& r = *result;
  CHECK(r.sent == 6000);
  CHECK(r.errors == 0);
  CHECK(r.nodes == 3);
  CHECK(r.shards == 2);
  CHECK(r.connections == 3 * 2 * 2);   // 2 per shard (4 over 2 shards), on each of 3 nodes
  CHECK(r.allowed == kKeys * kLimit);  // the clock never moves: nothing refills
  REQUIRE(r.audit.has_value());
  CHECK(r.audit->keys_checked == kKeys);
  CHECK(r.audit->max_overshoot_ratio == 0);
  std::uint64_t total = 0;
  for (const std::uint64_t n : decided_per_node(cluster)) {
    CHECK(n > 0);
    total += n;
  }
  CHECK(total == r.sent);
  const std::string json = report_json(o, r);
  CHECK(json.find("\"nodes\":3") != std::string::npos);
  CHECK(report_text(o, r).find("(3 nodes)") != std::string::npos);
}

TEST_CASE("only-node sends only the keys whose primary is that node", "[driver]") {
  TestCluster cluster(3);
  LoadOptions o = cluster_run(cluster, 0);
  o.only_node = "node-1";
  o.audit = true;
  const auto result = run_load(o);
  REQUIRE(result.ok());
  const LoadReport& r = *result;
  CHECK(r.errors == 0);
  CHECK(r.sent == 6000);
  const int owned = keys_of(cluster, 1);
  REQUIRE(owned > 0);
  CHECK(r.allowed == static_cast<std::uint64_t>(owned) * kLimit);  // every one of them drawn
  CHECK(r.audit->keys_checked == static_cast<std::uint64_t>(owned));
  CHECK(decided_per_node(cluster) == std::vector<std::uint64_t>{0, 6000, 0});
  CHECK(report_json(o, r).find("\"only_node\":\"node-1\"") != std::string::npos);
}

TEST_CASE("only-node draws the same keys for the same seed", "[driver]") {
  TestCluster cluster(3);
  LoadOptions o = cluster_run(cluster, 1);
  o.only_node = "node-2";
  o.requests = 40;  // fewer than the node's keys: which ones were drawn depends on the seed
  o.batch = 1;
  o.connections = 1;
  o.depth = 1;
  o.rule = Rule{Algorithm::kTokenBucket, 1, 1000, 0};
  const auto first = run_load(o);
  REQUIRE(first.ok());
  CHECK(first->errors == 0);
  // The same keys again: each was admitted once already, so the repeat admits nothing.
  const auto again = run_load(o);
  REQUIRE(again.ok());
  CHECK(again->errors == 0);
  CHECK(first->allowed > 0);
  CHECK(again->allowed == 0);
  CHECK(decided_per_node(cluster) == std::vector<std::uint64_t>{0, 0, 80});
}

TEST_CASE("only-node is refused for an unknown node, outside a cluster and for Redis", "[driver]") {
  TestCluster cluster(3);
  LoadOptions o = cluster_run(cluster, 0);
  o.only_node = "node-9";
  const auto unknown = run_load(o);
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message().find("--only-node node-9") != std::string::npos);

  test::TestServer single;
  o.servers = {"127.0.0.1:" + std::to_string(single.port())};
  o.only_node = "node-0";
  const auto alone = run_load(o);
  REQUIRE_FALSE(alone.ok());
  CHECK(alone.status().message().find("is not in a cluster") != std::string::npos);

  // Its key list is built up front, so the key space is bounded, at the edge exactly.
  o.keys = kMaxOnlyNodeKeys;
  CHECK(validate(o).empty());
  o.keys = kMaxOnlyNodeKeys + 1;
  CHECK(validate(o).find("--only-node takes at most 16777216 keys") != std::string::npos);

  o.keys = 1000;
  o.backend = BackendKind::kRedis;
  CHECK(validate(o).find("--only-node") != std::string::npos);
}

}  // namespace
}  // namespace sluice::load
