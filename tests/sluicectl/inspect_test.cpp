// sluicectl inspect against a 3-node static cluster (in process): the owners it names are the
// ones the ring recipe computes on its own, and what the primary and the replica store is the
// state the decisions left, for every algorithm.
#include "net/asio.h"  // before any other Asio header

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "cluster/ring.h"
#include "core/key_hash.h"
#include "core/rule.h"
#include "tests/integration/test_cluster.h"
#include "tests/sluicectl/command_line.h"

namespace sluice::ctl {
namespace {

using testing::Ran;
using testing::run;

// The text of each JSON value after `name` (an object {...} or an array [...]), in order.
std::vector<std::string> json_values(const std::string& json, const std::string& name) {
  std::vector<std::string> out;
  for (std::size_t at = json.find(name); at != std::string::npos; at = json.find(name, at + 1)) {
    const std::size_t open = at + name.size();
    const char close = json.at(open) == '{' ? '}' : ']';
    out.push_back(json.substr(open, json.find(close, open) - open + 1));
  }
  return out;
}

TEST_CASE(
    "inspect names the owners the ring computes and what primary and replica store for "
    "every algorithm",
    "[commands][inspect]") {
  test::TestCluster cluster(3);
  const auto ring = cluster::Ring::build({"node-0", "node-1", "node-2"});
  REQUIRE(ring.has_value());
  const auto address = [&](cluster::NodeIndex node) {
    return "127.0.0.1:" + std::to_string(cluster.port(static_cast<int>(node)));
  };
  const std::string s = "--servers 127.0.0.1:" + std::to_string(cluster.port(0)) + " ";

  for (const char* algorithm :
       {"fixed_window", "sliding_window", "token_bucket", "gcra", "sliding_log"}) {
    const std::string key = std::string("inspect:") + algorithm;
    INFO(key);
    REQUIRE(run(s + "acquire " + key + " --algorithm " + algorithm +
                " --limit 10 --period 60s --cost 3")
                .status == kExitOk);
    const std::uint32_t partition = ring->partition_of(hash_key(key));
    const cluster::PartitionOwners owners = ring->owners(partition);
    REQUIRE(owners.replica != cluster::kNoNode);
    const std::string primary = ring->nodes()[owners.primary];
    const std::string replica = ring->nodes()[owners.replica];

    // The replica's copy arrives by replication, shortly after the decision: ask until both
    // copies hold the same state (at most 5 s).
    Ran json;
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    for (;;) {
      json = run(s + "inspect " + key + " --json");
      const auto states = json_values(json.out, "\"state\":");
      const auto logs = json_values(json.out, "\"log\":");
      if ((states.size() == 2 && states[0] == states[1] && logs[0] == logs[1]) ||
          std::chrono::steady_clock::now() > give_up) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    INFO(json.out << json.err);
    CHECK(json.status == kExitOk);
    CHECK_THAT(
        json.out,
        Catch::StartsWith("{\"key\":\"" + key + "\",\"clustered\":true,\"epoch\":1,\"partition\":" +
                          std::to_string(partition) + ",\"partitions\":65536,\"primary\":\"" +
                          primary + "\",\"replica\":\"" + replica + "\",\"copies\":["));
    CHECK_THAT(json.out, Catch::Contains("{\"node\":\"" + primary + "\",\"address\":\"" +
                                         address(owners.primary) +
                                         "\",\"error\":null,\"role\":\"primary\","
                                         "\"partition_state\":\"serving\",\"shard\":"));
    CHECK_THAT(json.out, Catch::Contains("{\"node\":\"" + replica + "\",\"address\":\"" +
                                         address(owners.replica) +
                                         "\",\"error\":null,\"role\":\"replica\","
                                         "\"partition_state\":null,\"shard\":"));
    const std::string stored = std::string("\"stored\":true,\"algorithm\":\"") + algorithm + "\"";
    const auto first = json.out.find(stored);
    REQUIRE(first != std::string::npos);
    CHECK(json.out.find(stored, first + 1) != std::string::npos);  // both copies

    // What three units left, read without the rule.
    const auto states = json_values(json.out, "\"state\":");
    const auto logs = json_values(json.out, "\"log\":");
    REQUIRE(states.size() == 2);
    REQUIRE(logs.size() == 2);
    CHECK(states[0] == states[1]);
    CHECK(logs[0] == logs[1]);
    const std::string name = algorithm;
    if (name == "fixed_window") CHECK_THAT(states[0], Catch::EndsWith(",\"count\":3}"));
    if (name == "sliding_window") CHECK_THAT(states[0], Catch::Contains(",\"current\":3,"));
    if (name == "token_bucket") CHECK_THAT(states[0], Catch::StartsWith("{\"used\":3,"));
    if (name == "gcra") CHECK_THAT(states[0], Catch::StartsWith("{\"tat\":"));
    if (name == "sliding_log") {
      CHECK(states[0] == "{}");
      CHECK(std::count(logs[0].begin(), logs[0].end(), ',') == 2);  // three timestamps
    } else {
      CHECK(logs[0] == "[]");
    }

    const Ran text = run(s + "inspect " + key);
    INFO(text.out);
    CHECK(text.status == kExitOk);
    CHECK_THAT(text.out,
               Catch::StartsWith("key \"" + key + "\": partition " + std::to_string(partition) +
                                 " of 65536, map epoch 1: primary " + primary + " (" +
                                 address(owners.primary) + "), replica " + replica + " (" +
                                 address(owners.replica) + ")\n"));
    CHECK_THAT(text.out, Catch::Contains("\n" + primary + ", primary (serving), shard "));
    CHECK_THAT(text.out, Catch::Contains("\n" + replica + ", replica, shard "));
    CHECK_THAT(text.out, Catch::Contains(std::string(": ") + algorithm + ", "));
  }

  const Ran absent = run(s + "inspect inspect:never-used");
  CHECK(absent.status == kExitDenied);
  CHECK_THAT(absent.out, Catch::Contains(", primary (serving), shard "));
  CHECK_THAT(absent.out, Catch::EndsWith(": nothing stored\n"));

  // A replica that cannot be asked is named with the reason; the primary's copy still counts.
  const std::string key = "inspect:fixed_window";
  const cluster::PartitionOwners owners = ring->owners(ring->partition_of(hash_key(key)));
  cluster.stop(static_cast<int>(owners.replica));
  // Every node as a seed: the one stopped may be the first.
  const std::string all = "--servers 127.0.0.1:" + std::to_string(cluster.port(0)) +
                          ",127.0.0.1:" + std::to_string(cluster.port(1)) +
                          ",127.0.0.1:" + std::to_string(cluster.port(2)) + " ";
  const Ran partial = run(all + "--timeout 500ms inspect " + key);
  INFO(partial.out << partial.err);
  CHECK(partial.status == kExitOk);
  CHECK_THAT(partial.out, Catch::Contains(ring->nodes()[owners.replica] + " (" +
                                          address(owners.replica) + "): cannot ask: "));
  CHECK_THAT(partial.out,
             Catch::Contains(ring->nodes()[owners.primary] + ", primary (serving), shard "));
}

}  // namespace
}  // namespace sluice::ctl
