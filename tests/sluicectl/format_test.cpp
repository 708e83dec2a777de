// What sluicectl prints for each answer, byte for byte, from answers built in the test: a
// decision (text, JSON, escaping), the stats table, the cluster map, reload and drain outcomes,
// ping and reset. docs/CLIENT.md, section 8, shows the same formats.
#include "tools/sluicectl/format.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "core/rule.h"
#include "tools/sluicectl/options.h"

namespace sluice::ctl {
namespace {

using client::ClusterInfo;
using client::ClusterNodeInfo;
using client::Decision;
using client::DecisionSource;
using client::ErrorCode;
using client::ReloadOutcome;
using client::Stat;
using client::Status;

constexpr std::uint64_t kNowUnixMs = 1'700'000'000'000;

// The fourth acquire in a row under 3 per 60 s (docs/CLIENT.md's example).
Decision denied_decision() {
  Decision d;
  d.allowed = false;
  d.limit = 3;
  d.remaining = 0;
  d.reset_after_ms = 59857;
  d.retry_after_ms = 19857;
  d.policy_quota = 3;
  d.policy_window_ms = 60'000;
  return d;
}

TEST_CASE("a decision prints its fields, its source and its headers in order", "[format]") {
  const Decision d = denied_decision();
  CHECK(format_decision("user:42", d, d.headers(kNowUnixMs), false) ==
        "DENIED  user:42\n"
        "  limit        3\n"
        "  remaining    0\n"
        "  reset after  59857 ms\n"
        "  retry after  19857 ms\n"
        "  source       cluster\n"
        "headers\n"
        "  RateLimit-Limit: 3\n"
        "  RateLimit-Remaining: 0\n"
        "  RateLimit-Reset: 60\n"
        "  RateLimit-Policy: \"default\";q=3;w=60\n"
        "  RateLimit: \"default\";r=0;t=60\n"
        "  X-RateLimit-Limit: 3\n"
        "  X-RateLimit-Remaining: 0\n"
        "  X-RateLimit-Reset: 1700000060\n"
        "  Retry-After: 20\n");

  Decision never = d;
  never.allowed = true;
  never.retry_after_ms = kNever;
  never.reset_after_ms = kNever;
  never.source = DecisionSource::kLease;
  const std::string text = format_decision("k", never, {}, false);
  CHECK_THAT(text, Catch::StartsWith("ALLOWED  k\n"));
  CHECK_THAT(text, Catch::Contains("  reset after  never\n  retry after  never\n"));
  CHECK_THAT(text, Catch::EndsWith("  source       lease\nheaders\n"));
}

TEST_CASE("a decision in JSON is one line, retry_after_ms null when no wait admits", "[format]") {
  const Decision d = denied_decision();
  CHECK(format_decision("user:42", d, d.headers(kNowUnixMs), true) ==
        R"({"key":"user:42","allowed":false,"limit":3,"remaining":0,"reset_after_ms":59857,)"
        R"("retry_after_ms":19857,"source":"cluster","headers":{"RateLimit-Limit":"3",)"
        R"("RateLimit-Remaining":"0","RateLimit-Reset":"60",)"
        R"("RateLimit-Policy":"\"default\";q=3;w=60","RateLimit":"\"default\";r=0;t=60",)"
        R"("X-RateLimit-Limit":"3","X-RateLimit-Remaining":"0","X-RateLimit-Reset":"1700000060",)"
        R"("Retry-After":"20"}})"
        "\n");
  Decision never = d;
  never.retry_after_ms = kNever;
  never.source = DecisionSource::kLocalFallback;
  CHECK(format_decision("k", never, {}, true) ==
        R"({"key":"k","allowed":false,"limit":3,"remaining":0,"reset_after_ms":59857,)"
        R"("retry_after_ms":null,"source":"local_fallback","headers":{}})"
        "\n");
}

TEST_CASE("JSON strings escape quotes, backslashes and control bytes, text keys stay raw",
          "[format]") {
  CHECK(json_string("plain") == R"("plain")");
  CHECK(json_string(std::string_view("q\"b\\n\nt\t\x01", 9)) == R"("q\"b\\n\nt\t\u0001")");
  const std::string key = "a\"b\\c\nd";
  const std::string json = format_decision(key, denied_decision(), {}, true);
  CHECK_THAT(json, Catch::StartsWith(R"({"key":"a\"b\\c\nd","allowed":false,)"));
  CHECK(std::count(json.begin(), json.end(), '\n') == 1);
  CHECK(format_reset(key, true, true) == R"({"key":"a\"b\\c\nd","existed":true})"
                                         "\n");
  CHECK(format_decision(key, denied_decision(), {}, false).starts_with("DENIED  " + key + "\n"));
}

TEST_CASE("ping and reset print one line each", "[format]") {
  client::ServerInfo info;
  info.endpoint = "[::1]:7420";
  info.node_id = "n1";
  info.shard_ports = {7421, 7422};
  CHECK(format_ping(info, std::chrono::microseconds(87), false) ==
        "pong from [::1]:7420 (node n1, 2 shards): 0.087 ms\n");
  CHECK(format_ping(info, std::chrono::microseconds(87), true) ==
        R"({"server":"[::1]:7420","node_id":"n1","shards":2,"rtt_ms":0.087})"
        "\n");
  CHECK(format_reset("user:42", true, false) == "user:42: reset (the key existed)\n");
  CHECK(format_reset("user:43", false, false) == "user:43: not found (nothing to reset)\n");
  CHECK(format_reset("user:43", false, true) == R"({"key":"user:43","existed":false})"
                                                "\n");
}

std::vector<Stat> some_stats() {
  return {{"shard.0.keys", 1},    {"shard.1.keys", 2},         {"total.keys", 3},
          {"shard.0.allowed", 5}, {"total.allowed", 5},        {"total.only_total", 9},
          {"shard.x.bad", 7},     {"replication.node-1.up", 1}};
}

client::ServerInfo stats_node() {
  client::ServerInfo info;
  info.endpoint = "127.0.0.1:7420";
  info.node_id = "n1";
  return info;
}

TEST_CASE("stats: the node asked, a row per counter, a column per shard and the total, the rest",
          "[format]") {
  CHECK(format_stats(stats_node(), some_stats(), false) ==
        "stats of node n1 (127.0.0.1:7420)\n"
        "counter           shard 0        shard 1          total\n"
        "keys                    1              2              3\n"
        "allowed                 5              -              5\n"
        "only_total              -              -              9\n"
        "shard.x.bad 7\n"
        "replication.node-1.up 1\n");
  CHECK(format_stats(stats_node(), {}, false) ==
        "stats of node n1 (127.0.0.1:7420)\ncounter          total\n");
}

TEST_CASE("stats in JSON: the node asked, totals, one object per shard, and the other counters",
          "[format]") {
  CHECK(format_stats(stats_node(), some_stats(), true) ==
        R"({"server":"127.0.0.1:7420","node_id":"n1",)"
        R"("total":{"keys":3,"allowed":5,"only_total":9},"shards":[{"keys":1,"allowed":5},)"
        R"({"keys":2}],"other":{"shard.x.bad":7,"replication.node-1.up":1}})"
        "\n");
  CHECK(format_stats(stats_node(), {}, true) ==
        R"({"server":"127.0.0.1:7420","node_id":"n1","total":{},"shards":[],"other":{}})"
        "\n");
}

ClusterInfo three_nodes() {
  ClusterInfo info;
  info.epoch = 4;
  info.partition_bits = 16;
  info.partitions = 65536;
  info.vnodes_per_node = 4096;
  ClusterNodeInfo n1{"n1", "127.0.0.1:17420", "active", 21888, 22020, {}, Status()};
  n1.replication = {{"n2", 0, 0, true}, {"node-three", 12, 340, false}};
  ClusterNodeInfo n2{"n2",
                     "127.0.0.1:17430",
                     "draining",
                     21824,
                     21824,
                     {},
                     Status(ErrorCode::kTimeout, "no STATS reply")};
  ClusterNodeInfo n3{"node-three", "127.0.0.1:17440", "active", 21824, 21700, {}, Status()};
  info.nodes = {n1, n2, n3};
  info.self = 1;
  return info;
}

TEST_CASE("cluster: the epoch, a row per node with its shares, then each node's lag per peer",
          "[format]") {
  CHECK(format_cluster(three_nodes(), "127.0.0.1:17430", false) ==
        "cluster epoch 4: 3 nodes, 65536 partitions, 4096 points per node (asked "
        "127.0.0.1:17430)\n"
        "expected 3 members: 2 answering, 1 missing (n2)\n"
        "node        address          state      primary   replica\n"
        "n1          127.0.0.1:17420  active       33.4%     33.6%\n"
        "n2          127.0.0.1:17430  draining     33.3%     33.3%\n"
        "node-three  127.0.0.1:17440  active       33.3%     33.1%\n"
        "missing\n"
        "  n2          not answering: timeout: no STATS reply\n"
        "replication (from each node's STATS: records not yet acknowledged, oldest age)\n"
        "  n1         -> n2          0 records  0 ms  up\n"
        "  n1         -> node-three  12 records  340 ms  not connected\n"
        "  n2          unknown: timeout: no STATS reply\n"
        "  node-three  streams to no peer\n");
}

// three_nodes() in etcd mode: n1 serves, its link to n2 up and to node-three idle; n2 has no
// STATS; node-three is fenced, its link to n1 down and stalled.
ClusterInfo three_etcd_nodes() {
  ClusterInfo info = three_nodes();
  info.nodes[0].fence_reason = 0;
  info.nodes[0].etcd_endpoint = 0;
  info.nodes[0].replication = {{"n2", 0, 0, true, 1, false}, {"node-three", 0, 0, false, 0, false}};
  info.nodes[2].fence_reason = 1;
  info.nodes[2].etcd_endpoint = 2;
  info.nodes[2].replication = {{"n1", 40, 1500, false, 2, true}};
  return info;
}

TEST_CASE("cluster in etcd mode: who serves or is fenced and why and each link idle up or down",
          "[format]") {
  const std::string table =
      "cluster epoch 4: 3 nodes, 65536 partitions, 4096 points per node (asked "
      "127.0.0.1:17430)\n"
      "expected 3 members: 2 answering, 1 missing (n2)\n"
      "node        address          state      primary   replica\n"
      "n1          127.0.0.1:17420  active       33.4%     33.6%\n"
      "n2          127.0.0.1:17430  draining     33.3%     33.3%\n"
      "node-three  127.0.0.1:17440  active       33.3%     33.1%\n"
      "missing\n"
      "  n2          not answering: timeout: no STATS reply\n";
  const std::string replication =
      "replication (from each node's STATS: records not yet acknowledged, oldest age)\n"
      "  n1         -> n2          0 records  0 ms  up\n"
      "  n1         -> node-three  0 records  0 ms  idle\n"
      "  n2          unknown: timeout: no STATS reply\n"
      "  node-three -> n1          40 records  1500 ms  down, stalled\n";
  CHECK(format_cluster(three_etcd_nodes(), "127.0.0.1:17430", false) ==
        table + "serving (from each node's STATS; etcd member: its index in that node's --etcd)\n" +
            "  n1          serving as primary; etcd member 0\n"
            "  n2          unknown: timeout: no STATS reply\n"
            "  node-three  fenced: serving nothing as primary (lease may have lapsed); etcd "
            "member 2\n" +
            replication);
  // etcd holds no record of node-three: its lease is gone, the map not yet changed. sluicectl's
  // --etcd names members 0 and 1: node-three's member 2 has no URL to show.
  const EtcdSide etcd = {{"n1", "n2"}, {"http://10.0.0.1:2379", "http://10.0.0.2:2379"}};
  CHECK(format_cluster(three_etcd_nodes(), "127.0.0.1:17430", false, &etcd) ==
        table +
            "serving (from each node's STATS; etcd member: its index in that node's --etcd, with "
            "the URL at that index of sluicectl's --etcd)\n"
            "  n1          serving as primary; etcd member 0 (http://10.0.0.1:2379)\n"
            "  n2          unknown: timeout: no STATS reply\n"
            "  node-three  lease gone, keys not yet moved (no record in etcd); fenced: serving "
            "nothing as primary (lease may have lapsed); etcd member 2\n" +
            replication);
}

TEST_CASE("cluster in JSON in etcd mode: the fence the etcd member and the links", "[format]") {
  const EtcdSide etcd = {{"n1", "n2"}, {"http://10.0.0.1:2379"}};
  const std::string out = format_cluster(three_etcd_nodes(), "127.0.0.1:17430", true, &etcd);
  CHECK_THAT(
      out,
      Catch::Contains(
          R"("fenced":false,"fence_reason":0,"etcd_endpoint":0,)"
          R"("etcd_url":"http://10.0.0.1:2379","in_etcd":true,"replication":[{"peer":"n2","records":0,)"
          R"("lag_ms":0,"up":true,"link":"up","stalled":false},)"
          R"({"peer":"node-three","records":0,"lag_ms":0,"up":false,)"
          R"("link":"idle","stalled":false}])"));
  CHECK_THAT(out, Catch::Contains(
                      R"("fenced":true,"fence_reason":1,"etcd_endpoint":2,)"
                      R"("etcd_url":null,"in_etcd":false,"replication":[{"peer":"n1","records":40,)"
                      R"("lag_ms":1500,"up":false,"link":"down","stalled":true}])"));
}

TEST_CASE("cluster in JSON: the map, each node's shares in percent, its lag and STATS error",
          "[format]") {
  CHECK(
      format_cluster(three_nodes(), "127.0.0.1:17430", true) ==
      R"({"epoch":4,"clustered":true,"partitions":65536,"vnodes_per_node":4096,"self":"n2",)"
      R"("nodes":[{"id":"n1","address":"127.0.0.1:17420","state":"active",)"
      R"("primary_partitions":21888,"replica_partitions":22020,"primary_share":33.40,)"
      R"("replica_share":33.60,"fenced":null,"fence_reason":null,"etcd_endpoint":null,)"
      R"("etcd_url":null,"in_etcd":null,"replication":[{"peer":"n2","records":0,"lag_ms":0,"up":true,)"
      R"("link":null,"stalled":false},{"peer":"node-three","records":12,"lag_ms":340,)"
      R"("up":false,"link":null,"stalled":false}],"stats_error":null},)"
      R"({"id":"n2","address":"127.0.0.1:17430","state":"draining","primary_partitions":21824,)"
      R"("replica_partitions":21824,"primary_share":33.30,"replica_share":33.30,)"
      R"("fenced":null,"fence_reason":null,"etcd_endpoint":null,"etcd_url":null,)"
      R"("in_etcd":null,)"
      R"("replication":[],"stats_error":"timeout: no STATS reply"},)"
      R"({"id":"node-three","address":"127.0.0.1:17440","state":"active",)"
      R"("primary_partitions":21824,"replica_partitions":21700,"primary_share":33.30,)"
      R"("replica_share":33.11,"fenced":null,"fence_reason":null,"etcd_endpoint":null,)"
      R"("etcd_url":null,"in_etcd":null,"replication":[],"stats_error":null}],)"
      R"("expected":3,"answering":2,"missing":["n2"],"lost":[]})"
      "\n");
}

// three_etcd_nodes() after two members left without draining: n5 at epoch 3, n4 at epoch 2.
ClusterInfo etcd_nodes_with_lost() {
  ClusterInfo info = three_etcd_nodes();
  info.lost = {{"n5", 3}, {"n4", 2}};
  return info;
}

TEST_CASE("cluster counts the members expected and names the missing: lost ones and silent ones",
          "[format]") {
  const std::string text = format_cluster(etcd_nodes_with_lost(), "127.0.0.1:17430", false);
  CHECK_THAT(text, Catch::StartsWith(
                       "cluster epoch 4: 3 nodes, 65536 partitions, 4096 points per node (asked "
                       "127.0.0.1:17430)\n"
                       "expected 5 members (the map's 3 + 2 lost since epoch 2): 2 answering, 3 "
                       "missing (n2, n5, n4)\n"
                       "node        address          state      primary   replica\n"));
  CHECK_THAT(text, Catch::Contains("node-three  127.0.0.1:17440  active       33.3%     33.1%\n"
                                   "missing\n"
                                   "  n2          not answering: timeout: no STATS reply\n"
                                   "  n5          lost at epoch 3: left the map without draining "
                                   "(lease expired or record deleted)\n"
                                   "  n4          lost at epoch 2: left the map without draining "
                                   "(lease expired or record deleted)\n"
                                   "serving (from each node's STATS"));
  CHECK_THAT(format_cluster(etcd_nodes_with_lost(), "127.0.0.1:17430", true),
             Catch::EndsWith(R"("expected":5,"answering":2,"missing":["n2","n5","n4"],)"
                             R"("lost":[{"id":"n5","epoch":3},{"id":"n4","epoch":2}]})"
                             "\n"));
  // Every node answers and none was lost: nothing is missing.
  ClusterInfo all = three_nodes();
  all.nodes[1].stats_status = Status();
  const std::string full = format_cluster(all, "127.0.0.1:17430", false);
  CHECK_THAT(full, Catch::Contains("\nexpected 3 members: 3 answering, 0 missing\nnode "));
  CHECK_THAT(full, !Catch::Contains("\nmissing\n"));
}

TEST_CASE("a node outside any cluster says so, in text and in JSON", "[format]") {
  ClusterInfo single;
  CHECK(format_cluster(single, "127.0.0.1:7420", false) ==
        "127.0.0.1:7420 is not in a cluster (epoch 0): a single node\n");
  CHECK(format_cluster(single, "127.0.0.1:7420", true) ==
        R"({"epoch":0,"clustered":false,"partitions":0,"vnodes_per_node":0,"self":null,)"
        R"("nodes":[],"expected":0,"answering":0,"missing":[],"lost":[]})"
        "\n");
}

std::vector<ReloadOutcome> reload_outcomes() {
  return {{"n1", "127.0.0.1:17420", Status(), 2, ""},
          {"n2", "127.0.0.1:17430", Status(), 2, "c.txt: epoch 1 is below the epoch in force, 2"},
          {"n3", "127.0.0.1:17440", Status(ErrorCode::kConnectionFailed, "not connected"), 0, ""},
          {"", "127.0.0.1:7420", Status(), 0, ""}};
}

TEST_CASE("cluster reload prints a line per node: reloaded, refused or the error", "[format]") {
  CHECK(format_reload(reload_outcomes(), false) ==
        "n1 127.0.0.1:17420: reloaded, epoch 2\n"
        "n2 127.0.0.1:17430: refused (epoch 2 stays): c.txt: epoch 1 is below the epoch in "
        "force, 2\n"
        "n3 127.0.0.1:17440: error: connection_failed: not connected\n"
        "127.0.0.1:7420: reloaded, epoch 0\n");
  CHECK(format_reload(reload_outcomes(), true) ==
        R"({"nodes":[{"id":"n1","address":"127.0.0.1:17420","epoch":2,"refused":null,)"
        R"("error":null},{"id":"n2","address":"127.0.0.1:17430","epoch":2,)"
        R"("refused":"c.txt: epoch 1 is below the epoch in force, 2","error":null},)"
        R"({"id":"n3","address":"127.0.0.1:17440","epoch":null,"refused":null,)"
        R"("error":"connection_failed: not connected"},{"id":"","address":"127.0.0.1:7420",)"
        R"("epoch":0,"refused":null,"error":null}],"refused":1,"failed":1})"
        "\n");
}

TEST_CASE("cluster reload exits 2 when a node could not be asked, else 1 when one refused",
          "[format]") {
  std::vector<ReloadOutcome> outcomes = reload_outcomes();
  CHECK(reload_exit_status(outcomes) == kExitError);
  outcomes.erase(outcomes.begin() + 2);  // the one that could not be asked
  CHECK(reload_exit_status(outcomes) == kExitDenied);
  outcomes.erase(outcomes.begin() + 1);  // the one that refused
  CHECK(reload_exit_status(outcomes) == kExitOk);
  CHECK(reload_exit_status({}) == kExitOk);
}

TEST_CASE("drain prints what the node answered: draining at an epoch, or why not", "[format]") {
  const ReloadOutcome taken{"n2", "127.0.0.1:17430", Status(), 7, ""};
  const ReloadOutcome refused{"n2", "127.0.0.1:17430", Status(), 7, "the last active node"};
  CHECK(format_drain(taken, false) ==
        "n2 127.0.0.1:17430: draining (asked at epoch 7); its ranges move under the next "
        "epoch\n");
  CHECK(format_drain(refused, false) ==
        "n2 127.0.0.1:17430: drain refused: the last active node\n");
  CHECK(format_drain(taken, true) == R"({"id":"n2","address":"127.0.0.1:17430","epoch":7,)"
                                     R"("refused":null})"
                                     "\n");
  CHECK(format_drain(refused, true) == R"({"id":"n2","address":"127.0.0.1:17430","epoch":7,)"
                                       R"("refused":"the last active node"})"
                                       "\n");
}

}  // namespace
}  // namespace sluice::ctl
