// sluicectl's commands run in this process (run_command) against in-process nodes: an
// in-process sluiced with a manual clock, a 3-node static cluster, and fake servers that say
// nothing or are not Sluice. Output and errors are captured apart; the binary itself is run
// end to end in tests/client/sluicectl_test.cpp.
#include "net/asio.h"  // before any other Asio header

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "tests/client/test_support.h"
#include "tests/integration/raw_client.h"
#include "tests/integration/test_cluster.h"
#include "tests/sluicectl/command_line.h"
#include "tests/support/ports.h"

namespace sluice::ctl {
namespace {

using client::testing::FakeServer;
using client::testing::TestServer;
using testing::Ran;
using testing::run;

std::size_t lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

TEST_CASE("acquire, peek, reset and stats against a node: what they print and their status",
          "[commands]") {
  TestServer server;
  const std::string s = "--servers " + server.address() + " ";

  for (int i = 0; i < 2; ++i) {
    const Ran allowed = run(s + "acquire cli:key --limit 2 --period 60s");
    CHECK(allowed.status == kExitOk);
    CHECK_THAT(allowed.out, Catch::StartsWith("ALLOWED  cli:key\n"));
    CHECK(allowed.err.empty());
  }
  const Ran denied = run(s + "acquire cli:key --limit 2 --period 60s --json");
  CHECK(denied.status == kExitDenied);
  CHECK_THAT(denied.out, Catch::StartsWith("{\"key\":\"cli:key\",\"allowed\":false,\"limit\":2,"
                                           "\"remaining\":0,"));
  CHECK_THAT(denied.out, Catch::Contains("\"Retry-After\":\"30\""));
  CHECK_THAT(denied.out, Catch::Contains("\"source\":\"cluster\""));
  CHECK(lines(denied.out) == 1);

  const Ran never =
      run(s + "peek cli:big --algorithm gcra --limit 10 --period 1m --cost 11 --json");
  CHECK(never.status == kExitDenied);
  CHECK_THAT(never.out, Catch::Contains("\"retry_after_ms\":null"));

  const Ran reset = run(s + "reset cli:key");
  CHECK(reset.status == kExitOk);
  CHECK(reset.out == "cli:key: reset (the key existed)\n");
  const Ran again = run(s + "reset cli:key --json");
  CHECK(again.out == "{\"key\":\"cli:key\",\"existed\":false}\n");

  const Ran stats = run(s + "stats --json");
  CHECK(stats.status == kExitOk);
  // The node asked is named: its address and its id (by default bind:port).
  CHECK_THAT(stats.out,
             Catch::StartsWith("{\"server\":\"" + server.address() + "\",\"node_id\":\"" +
                               server.address() + "\",\"total\":{"));
  CHECK_THAT(stats.out, Catch::Contains("\"allowed\":2"));
  const Ran table = run(s + "stats");
  CHECK_THAT(table.out, Catch::StartsWith("stats of node " + server.address() + " (" +
                                          server.address() + ")\ncounter "));
  CHECK_THAT(table.out, Catch::Contains("shard 0        shard 1          total\n"));

  const Ran ping = run(s + "ping");
  CHECK(ping.status == kExitOk);
  CHECK_THAT(ping.out, Catch::StartsWith("pong from " + server.address() + " (node "));
}

TEST_CASE("a key longer than the node takes is refused with the reason, status 2", "[commands]") {
  TestServer server;
  const Ran invalid = run("--servers " + server.address() + " acquire " + std::string(2000, 'k') +
                          " --limit 2 --period 1s");
  CHECK(invalid.status == kExitError);
  CHECK(invalid.out.empty());
  CHECK(invalid.err == "sluicectl: invalid_key: key is 2000 bytes, the server's max key is 256\n");
}

TEST_CASE("a server that does not answer is a timeout, with the reason, status 2", "[commands]") {
  FakeServer silent(FakeServer::Mode::kSilent);
  const Ran timeout = run("--servers " + silent.address() + " --timeout 100ms ping");
  CHECK(timeout.status == kExitError);
  CHECK(timeout.out.empty());
  CHECK(timeout.err == "sluicectl: timeout: no seed answered: no Sluice HELLO from " +
                           silent.address() + " within 100 ms\n");
}

TEST_CASE(
    "with no node answering, acquire follows --failure-policy: open admits from the local "
    "limiter, closed denies, report exits 2 naming every seed",
    "[commands]") {
  const std::string first = "127.0.0.1:" + std::to_string(test::free_port_block(1));
  const std::string second = "127.0.0.1:" + std::to_string(test::free_port_block(1));
  const std::string s = "--servers " + first + "," + second + " --timeout 200ms ";

  const Ran open = run(s +
                       "--failure-policy open --gateways 2 acquire cli:key --limit 4 "
                       "--period 60s");
  CHECK(open.status == kExitOk);
  CHECK_THAT(open.out, Catch::StartsWith("ALLOWED  cli:key\n"));
  CHECK_THAT(open.out, Catch::Contains("  limit        2\n"));  // 4 / 2 gateways
  CHECK_THAT(open.out, Catch::Contains("  source       local_fallback\n"));
  CHECK(open.err.empty());

  const Ran closed = run(s +
                         "--failure-policy closed acquire cli:key --limit 4 --period 60s "
                         "--json");
  CHECK(closed.status == kExitDenied);
  CHECK_THAT(closed.out, Catch::StartsWith("{\"key\":\"cli:key\",\"allowed\":false,"));
  CHECK_THAT(closed.out, Catch::Contains("\"source\":\"local_fallback\""));

  const Ran report = run(s + "acquire cli:key --limit 4 --period 60s");
  CHECK(report.status == kExitError);
  CHECK(report.out.empty());
  CHECK_THAT(report.err, Catch::StartsWith("sluicectl: connection_failed: no seed answered: "
                                           "connect to " +
                                           first + " failed: "));
  CHECK_THAT(report.err, Catch::Contains("; connect to " + second + " failed: "));

  // A command with no failure policy to answer it fails the same way, whatever the policy.
  const Ran ping = run(s + "--failure-policy open ping");
  CHECK(ping.status == kExitError);
  CHECK_THAT(ping.err, Catch::Contains(first) && Catch::Contains(second));
}

TEST_CASE("a server that is not Sluice is named as such, status 2", "[commands]") {
  FakeServer redis(FakeServer::Mode::kNotSluice);
  const Ran not_sluice = run("--servers " + redis.address() + " --timeout 1s ping");
  CHECK(not_sluice.status == kExitError);
  CHECK(not_sluice.err == "sluicectl: protocol_error: " + redis.address() +
                              " answered something that is not Sluice (bad magic)\n");
}

TEST_CASE("cluster prints the nodes, their states and shares, the epoch and the lag",
          "[commands]") {
  test::TestCluster cluster(3);
  // A node's STATS lists its peers from a snapshot its shards publish every 100 ms or so: wait
  // (at most 5 s) until node-0's lists node-1, so the lag rows below are there to print.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (test::RawClient(cluster.port(0)).stats().count("replication.node-1.up") == 0 &&
         std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const std::string s = "--servers 127.0.0.1:" + std::to_string(cluster.port(1)) + " ";
  const Ran text = run(s + "cluster");
  INFO(text.out << text.err);
  CHECK(text.status == kExitOk);
  CHECK_THAT(text.out, Catch::StartsWith("cluster epoch 1: 3 nodes, 65536 partitions"));
  for (int i = 0; i < 3; ++i) {
    const std::string row = "node-" + std::to_string(i) +
                            "  127.0.0.1:" + std::to_string(cluster.port(i)) + "  active  ";
    CHECK_THAT(text.out, Catch::Contains(row));
  }
  CHECK(std::count(text.out.begin(), text.out.end(), '%') == 6);
  CHECK_THAT(text.out, Catch::Contains("replication (from each node's STATS"));
  CHECK_THAT(text.out, Catch::Contains("node-0 -> node-1"));

  const Ran json = run(s + "cluster --json");
  INFO(json.out);
  CHECK(json.status == kExitOk);
  CHECK_THAT(json.out, Catch::StartsWith("{\"epoch\":1,\"clustered\":true,\"partitions\":65536,"
                                         "\"vnodes_per_node\":4096,\"self\":\"node-1\","));
  CHECK_THAT(json.out, Catch::Contains("{\"id\":\"node-2\",\"address\":\"127.0.0.1:" +
                                       std::to_string(cluster.port(2)) +
                                       "\",\"state\":\"active\",\"primary_partitions\":"));
  CHECK_THAT(json.out, Catch::Contains("\"replication\":[{\"peer\":"));
  CHECK_THAT(json.out, Catch::Contains("\"stats_error\":null"));
  CHECK(lines(json.out) == 1);
}

TEST_CASE("cluster of a static file with one node stopped: expected 3 and that node missing",
          "[commands]") {
  test::TestCluster cluster(3);
  cluster.stop(2);  // its listeners and connections close, as a killed process's would
  const std::string s =
      "--servers 127.0.0.1:" + std::to_string(cluster.port(0)) + " --timeout 500ms ";
  const Ran text = run(s + "cluster");
  INFO(text.out << text.err);
  CHECK(text.status == kExitOk);
  CHECK_THAT(text.out, Catch::Contains("\nexpected 3 members: 2 answering, 1 missing (node-2)\n"));
  CHECK_THAT(text.out, Catch::Contains("\nmissing\n  node-2  not answering: "));

  const Ran json = run(s + "cluster --json");
  INFO(json.out);
  CHECK(json.status == kExitOk);
  CHECK_THAT(json.out,
             Catch::EndsWith(R"("expected":3,"answering":2,"missing":["node-2"],"lost":[]})"
                             "\n"));
}

TEST_CASE("cluster on a node outside any cluster says so", "[commands]") {
  TestServer server;
  const Ran text = run("--servers " + server.address() + " cluster");
  CHECK(text.status == kExitOk);
  CHECK(text.out == server.address() + " is not in a cluster (epoch 0): a single node\n");
  const Ran json = run("--servers " + server.address() + " cluster --json");
  CHECK(json.status == kExitOk);
  CHECK_THAT(json.out, Catch::StartsWith("{\"epoch\":0,\"clustered\":false,"));
}

TEST_CASE("cluster reload reports every node's epoch and exits 1 when a node refuses",
          "[commands]") {
  test::TestCluster cluster(3);
  const std::string s = "--servers 127.0.0.1:" + std::to_string(cluster.port(0)) + " ";
  cluster.write(2, 3);
  const Ran taken = run(s + "cluster reload");
  INFO(taken.out << taken.err);
  CHECK(taken.status == kExitOk);
  for (int i = 0; i < 3; ++i) {
    CHECK_THAT(taken.out, Catch::Contains("node-" + std::to_string(i) +
                                          " 127.0.0.1:" + std::to_string(cluster.port(i)) +
                                          ": reloaded, epoch 2\n"));
  }
  for (int i = 0; i < 3; ++i) CHECK(cluster.node(i).server().cluster_epoch() == 2);

  cluster.write(1, 3);  // a lower epoch: refused, and epoch 2 stays
  const Ran refused = run(s + "cluster reload --json");
  INFO(refused.out);
  CHECK(refused.status == kExitDenied);
  CHECK_THAT(refused.out,
             Catch::StartsWith("{\"nodes\":[{\"id\":\"node-0\",\"address\":\"127.0.0.1:"));
  CHECK_THAT(refused.out, Catch::Contains("\"epoch\":2,\"refused\":\""));
  CHECK_THAT(refused.out, Catch::EndsWith("\"refused\":3,\"failed\":0}\n"));

  const Ran one = run(s + "cluster reload --seed-only");
  CHECK(one.status == kExitDenied);
  CHECK(lines(one.out) == 1);
  CHECK_THAT(one.out, Catch::StartsWith("node-0 127.0.0.1:"));

  cluster.write(3, 3);
  cluster.stop(2);
  const Ran partial = run(s + "--timeout 500ms cluster reload");
  INFO(partial.out);
  CHECK(partial.status == kExitError);  // node-2 could not be asked
  CHECK_THAT(partial.out, Catch::Contains("node-0 127.0.0.1:" + std::to_string(cluster.port(0)) +
                                          ": reloaded, epoch 3"));
  CHECK_THAT(partial.out, Catch::Contains("node-2 127.0.0.1:" + std::to_string(cluster.port(2)) +
                                          ": error: connection_failed"));
}

TEST_CASE("with an etcd that does not answer, its error comes first and the nodes still print",
          "[commands]") {
  TestServer server;
  const Ran ran = run("--servers " + server.address() +
                      " --etcd http://127.0.0.1:1 --cluster-name prod --timeout 500ms cluster");
  CHECK(ran.status == kExitError);
  CHECK_THAT(ran.err, Catch::StartsWith("sluicectl: etcd at http://127.0.0.1:1: "));
  CHECK(ran.out == "\n" + server.address() + " is not in a cluster (epoch 0): a single node\n");
}

}  // namespace
}  // namespace sluice::ctl
