// sluiced's --http-listen as the binary runs it, and the alerting rules shipped for it
// (examples/prometheus/): /metrics through promtool with exact decision counts, /healthz,
// /readyz, a clean stop, a refused flag value, and promtool's checks and unit tests of the rules.
#include <catch2/catch.hpp>
#include <csignal>
#include <string>

#include "core/rule.h"
#include "tests/reliability/reliability_support.h"
#include "tests/support/ports.h"
#include "tests/support/prometheus_scrape.h"

#ifndef SLUICE_SOURCE_DIR
#error "SLUICE_SOURCE_DIR must be defined by the build (tests/CMakeLists.txt)"
#endif

namespace sluice::test {
namespace {

TEST_CASE("sluiced --http-listen serves /metrics that promtool accepts, /healthz and /readyz",
          "[metrics]") {
  const std::uint16_t http_port = free_port_block(1);
  Sluiced node({"--http-listen", "127.0.0.1:" + std::to_string(http_port)});
  RawClient client(node.port());
  const Rule rule{Algorithm::kSlidingWindow, 2, 60'000, 0};
  for (int i = 0; i < 3; ++i) client.acquire("user:7", rule);

  CHECK(http_get(http_port, "/healthz").result() == boost::beast::http::status::ok);
  const auto ready = http_get(http_port, "/readyz");
  CHECK(ready.result() == boost::beast::http::status::ok);
  CHECK(ready.body() == "ready\n");

  const auto metrics = http_get(http_port, "/metrics");
  REQUIRE(metrics.result() == boost::beast::http::status::ok);
  const Run promtool = promtool_check_metrics(metrics.body());
  INFO(promtool.output);
  CHECK(promtool.status == 0);
  CHECK(promtool.output.empty());
  const auto samples = parse_samples(metrics.body());
  CHECK(samples.at("sluice_decisions_total{algorithm=\"sliding_window\",outcome=\"allowed\"}") ==
        2);
  CHECK(samples.at("sluice_decisions_total{algorithm=\"sliding_window\",outcome=\"denied\"}") == 1);
  CHECK(samples.at("sluice_decision_duration_seconds_count") == 3);
  CHECK(samples.at("sluice_memory_limit_bytes") == 64.0 * 1024 * 1024);

  CHECK(node.child().stop() == 0);  // SIGTERM: the HTTP thread stops with the shards
}

TEST_CASE("sluiced refuses a malformed --http-listen with exit status 2", "[metrics]") {
  for (const std::string bad : {"nope", "127.0.0.1", "127.0.0.1:65536", "localhost:9420"}) {
    const Run run = run_command(std::string(SLUICED_PATH) + " --http-listen " + bad);
    INFO(run.output);
    CHECK(run.status == 2);
    CHECK(run.output.find("--http-listen " + bad + ": expected IP:PORT") != std::string::npos);
  }
}

TEST_CASE("examples/prometheus/alerts.yaml passes promtool check rules and its unit tests",
          "[metrics]") {
  require_binary(kPromtool);
  const std::string dir = std::string(SLUICE_SOURCE_DIR) + "/examples/prometheus";
  const Run check = run_command(std::string(kPromtool) + " check rules " + dir + "/alerts.yaml");
  INFO(check.output);
  CHECK(check.status == 0);
  CHECK(check.output.find("SUCCESS: 11 rules found") != std::string::npos);
  // The unit tests fire the node-down, fenced, replication, memory and gateway alerts on the
  // series that should raise them, and not on healthy ones.
  const Run unit = run_command(std::string(kPromtool) + " test rules " + dir + "/alerts_test.yaml");
  INFO(unit.output);
  CHECK(unit.status == 0);
  CHECK(unit.output.find("SUCCESS") != std::string::npos);
}

}  // namespace
}  // namespace sluice::test
