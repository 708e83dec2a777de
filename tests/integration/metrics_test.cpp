// sluiced's HTTP side (--http-listen) against an in-process node: /metrics through promtool
// with counters that move by exactly what was decided, /healthz, and /readyz as the node's
// place in the cluster changes (docs/OPERATIONS.md, "Metrics").
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "cluster/cluster_map.h"
#include "core/rule.h"
#include "core/version.h"
#include "tests/integration/raw_client.h"
#include "tests/integration/test_server.h"
#include "tests/support/prometheus_scrape.h"

namespace sluice::test {
namespace {

using protocol::ItemStatus;

server::ServerConfig http_config(unsigned shards = 2) {
  server::ServerConfig config = test_config(shards);
  config.http_listen = "127.0.0.1:0";
  return config;
}

std::string scrape(const TestServer& server) {
  const auto response = http_get(const_cast<TestServer&>(server).server().http_port(), "/metrics");
  REQUIRE(response.result() == boost::beast::http::status::ok);
  CHECK(response[boost::beast::http::field::content_type] ==
        "text/plain; version=0.0.4; charset=utf-8");
  return response.body();
}

std::string decisions(std::string_view algorithm, std::string_view outcome) {
  return "sluice_decisions_total{algorithm=\"" + std::string(algorithm) + "\",outcome=\"" +
         std::string(outcome) + "\"}";
}

TEST_CASE("/metrics passes promtool and its decisions move by exactly what was decided",
          "[metrics]") {
  TestServer server(http_config(2));
  REQUIRE(server.server().http_port() != 0);
  const auto before = parse_samples(scrape(server));
  CHECK(before.at(decisions("gcra", "allowed")) == 0);
  CHECK(before.at("sluice_decision_duration_seconds_count") == 0);

  RawClient client(server.port());  // the public port: some keys are handed over
  int frames = 0;
  auto acquire = [&](const std::string& key, const Rule& rule) {
    ++frames;
    return client.acquire(key, rule).status;
  };
  const Rule gcra{Algorithm::kGcra, 3, 60'000, 0};
  for (int i = 0; i < 5; ++i) {
    CHECK(acquire("g", gcra) == (i < 3 ? ItemStatus::kAllowed : ItemStatus::kDenied));
  }
  const Rule bucket{Algorithm::kTokenBucket, 2, 60'000, 0};
  for (int i = 0; i < 4; ++i) {
    CHECK(acquire("t", bucket) == (i < 2 ? ItemStatus::kAllowed : ItemStatus::kDenied));
  }
  // One key on each shard, one allowed and one denied each.
  const Rule window{Algorithm::kFixedWindow, 1, 60'000, 0};
  for (unsigned shard = 0; shard < 2; ++shard) {
    const std::string key = key_on_shard(shard, 2, "w-");
    CHECK(acquire(key, window) == ItemStatus::kAllowed);
    CHECK(acquire(key, window) == ItemStatus::kDenied);
  }
  // A peek is answered, not counted.
  const protocol::AcquireItem peek{.key = "g", .rule = gcra, .peek = true};
  ++frames;
  CHECK(client.acquire(std::span(&peek, 1)).at(0).status == ItemStatus::kDenied);

  const std::string text = scrape(server);
  const Run promtool = promtool_check_metrics(text);
  INFO(promtool.output);
  CHECK(promtool.status == 0);
  CHECK(promtool.output.empty());  // no lint warning either

  const auto after = parse_samples(text);
  CHECK(after.at(decisions("gcra", "allowed")) == 3);
  CHECK(after.at(decisions("gcra", "denied")) == 2);
  CHECK(after.at(decisions("token_bucket", "allowed")) == 2);
  CHECK(after.at(decisions("token_bucket", "denied")) == 2);
  CHECK(after.at(decisions("fixed_window", "allowed")) == 2);
  CHECK(after.at(decisions("fixed_window", "denied")) == 2);
  CHECK(after.at(decisions("sliding_window", "allowed")) == 0);
  CHECK(after.at(decisions("sliding_log", "denied")) == 0);
  // One observation per ACQUIRE frame, each in a bucket up to +Inf.
  CHECK(after.at("sluice_decision_duration_seconds_count") == frames);
  CHECK(after.at("sluice_decision_duration_seconds_bucket{le=\"+Inf\"}") == frames);
  CHECK(after.at("sluice_decision_duration_seconds_sum") > 0);
  CHECK(after.at("sluice_keys") == 4);
  CHECK(after.at("sluice_connections_open") == 1);
  CHECK(after.at("sluice_memory_limit_bytes") == 16u << 20);
  CHECK(after.at("sluice_shards") == 2);
  CHECK(after.at("sluice_build_info{version=\"" + std::string(kVersion) + "\"}") == 1);
  CHECK(after.at("sluice_node_ready") == 1);
  CHECK(after.at("sluice_node_fenced") == 0);
  CHECK(after.at("sluice_cluster_epoch") == 0);
  // The scrapes themselves: the one before, this one.
  CHECK(after.at("sluice_http_requests_total") == 2);
}

TEST_CASE("/healthz and /readyz answer 200 on a node outside any cluster, other paths 404",
          "[metrics]") {
  TestServer server(http_config(1));
  const std::uint16_t port = server.server().http_port();
  const auto health = http_get(port, "/healthz");
  CHECK(health.result() == boost::beast::http::status::ok);
  CHECK(health.body() == "ok\n");
  const auto ready = http_get(port, "/readyz");
  CHECK(ready.result() == boost::beast::http::status::ok);
  CHECK(ready.body() == "ready\n");
  CHECK(http_get(port, "/nothing").result() == boost::beast::http::status::not_found);

  http_support::HttpClient client(port);
  REQUIRE(client.send("POST /metrics HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n"));
  const auto post = client.read_response();
  REQUIRE(post);
  CHECK(post->result() == boost::beast::http::status::method_not_allowed);
  CHECK((*post)[boost::beast::http::field::allow] == "GET");
}

TEST_CASE("/readyz follows the node through joining, active, draining and out of the map",
          "[metrics]") {
  server::ServerConfig config = http_config(1);
  config.node_id = "node-a";
  TestServer server(config);
  const std::uint16_t port = server.server().http_port();
  const std::string address = "127.0.0.1:" + std::to_string(server.port());
  auto adopt = [&](std::uint64_t epoch, std::vector<cluster::ClusterNode> nodes) {
    const auto map = cluster::ClusterMap::make(epoch, std::move(nodes));
    REQUIRE(map);
    REQUIRE(server.server().TEST_adopt_map(*map).empty());
  };
  auto readyz = [&] { return http_get(port, "/readyz"); };

  adopt(1, {{"node-a", address, cluster::NodeState::kJoining}});
  auto joining = readyz();
  CHECK(joining.result() == boost::beast::http::status::service_unavailable);
  CHECK(joining.body() == "joining: fetching the partitions it will own, not serving yet\n");
  auto samples = parse_samples(scrape(server));
  CHECK(samples.at("sluice_cluster_epoch") == 1);
  CHECK(samples.at("sluice_cluster_members{state=\"joining\"}") == 1);
  CHECK(samples.at("sluice_node_ready") == 0);

  adopt(2, {{"node-a", address, cluster::NodeState::kActive}});
  CHECK(readyz().result() == boost::beast::http::status::ok);
  samples = parse_samples(scrape(server));
  CHECK(samples.at("sluice_cluster_members{state=\"active\"}") == 1);
  CHECK(samples.at("sluice_cluster_members{state=\"joining\"}") == 0);
  CHECK(samples.at("sluice_node_ready") == 1);

  adopt(3, {{"node-a", address, cluster::NodeState::kDraining}});
  const auto draining = readyz();
  CHECK(draining.result() == boost::beast::http::status::service_unavailable);
  CHECK(draining.body() == "draining: handing its partitions over, serving nothing as primary\n");

  adopt(4, {{"node-b", "127.0.0.1:1", cluster::NodeState::kActive}});
  const auto absent = readyz();
  CHECK(absent.result() == boost::beast::http::status::service_unavailable);
  CHECK(absent.body() == "not in the cluster map: serving no key\n");
}

TEST_CASE("/readyz says fenced (no lease) while an etcd-mode node has no etcd to talk to",
          "[metrics]") {
  server::ServerConfig config = http_config(1);
  config.node_id = "node-a";
  config.cluster_name = "metrics-test";
  config.etcd = "http://127.0.0.1:1";  // nothing listens there: no lease is ever granted
  TestServer server(config);
  const auto ready = http_get(server.server().http_port(), "/readyz");
  CHECK(ready.result() == boost::beast::http::status::service_unavailable);
  CHECK(ready.body() == "fenced: serving nothing as primary (no lease)\n");
  const std::string text = scrape(server);
  const auto samples = parse_samples(text);
  CHECK(samples.at("sluice_node_fenced") == 1);
  CHECK(samples.at("sluice_node_fence_reason{reason=\"no_lease\"}") == 1);
  CHECK(samples.at("sluice_node_fence_reason{reason=\"none\"}") == 0);
  CHECK(samples.at("sluice_node_ready") == 0);
  CHECK(promtool_check_metrics(text).status == 0);
}

}  // namespace
}  // namespace sluice::test
