// Envoy's Rate Limit Service asked by a gRPC client that is not ours: Debian's python3-grpcio
// runs tests/rls/rls_check.py against the sluice-gateway binary (--grpc-listen) in front of
// a cluster of three sluiced processes, all started here on 127.0.0.1 and stopped at the end.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/rls/rls_config.h"
#include "tests/support/child_process.h"
#include "tests/support/ports.h"
#include "tests/support/prometheus_scrape.h"

namespace sluice::gateway::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr const char* kPython = "/usr/bin/python3";
constexpr int kShards = 2;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct TempDir {
  TempDir() : path(fs::temp_directory_path() / ("sluice-rls-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

TEST_CASE("rls: Python's grpcio asks the gateway binary in front of a 3-node cluster") {
  // Under CI the environment must be complete: a missing module fails, never skips.
  const test::Run probe = test::run_command(
      std::string(kPython) + " -c 'import grpc, google.protobuf' && command -v protoc");
  INFO("needs Debian's python3-grpcio, python3-protobuf and protobuf-compiler (tools/deps.sh): "
       << probe.output);
  REQUIRE(probe.status == 0);

  TempDir dir;
  std::vector<std::uint16_t> ports;
  for (int i = 0; i < 3; ++i) ports.push_back(test::free_port_block(kShards + 1));
  {
    std::ofstream cluster(dir.path / "cluster.conf");
    cluster << "epoch 1\n";
    for (int i = 0; i < 3; ++i) cluster << "node-" << i << " 127.0.0.1:" << ports[i] << "\n";
  }
  std::vector<std::unique_ptr<test::Child>> nodes;
  for (int i = 0; i < 3; ++i) {
    const fs::path log = dir.path / ("node-" + std::to_string(i) + ".log");
    nodes.push_back(std::make_unique<test::Child>(
        SLUICED_PATH,
        std::vector<std::string>{"--bind", "127.0.0.1", "--port", std::to_string(ports[i]),
                                 "--shards", std::to_string(kShards), "--max-memory", "64MiB",
                                 "--cluster", (dir.path / "cluster.conf").string(), "--node-id",
                                 "node-" + std::to_string(i)},
        log.string()));
    const std::string line = nodes.back()->first_line(10s);
    INFO("node-" << i << ": " << line << "; its log: " << read_file(log));
    REQUIRE(test::listen_port(line) == ports[i]);
  }

  std::ofstream(dir.path / "envoy.yaml") << kRlsConfig;
  const std::uint16_t base = test::free_port_block(2);
  const std::string grpc_address = "127.0.0.1:" + std::to_string(base);
  const std::string http_address = "127.0.0.1:" + std::to_string(base + 1);
  const fs::path gateway_log = dir.path / "gateway.log";
  test::Child gateway(
      GATEWAY_PATH,
      {"--listen", http_address, "--grpc-listen", grpc_address, "--servers",
       "127.0.0.1:" + std::to_string(ports[0]), "--rules", (dir.path / "envoy.yaml").string(),
       "--rls-headers", "both", "--rls-max-message-bytes", "4096"},
      gateway_log.string());
  // Serving once it says so (the gRPC server starts before the HTTP line).
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (read_file(gateway_log).find("listening on") == std::string::npos) {
    INFO("gateway log: " << read_file(gateway_log));
    REQUIRE(std::chrono::steady_clock::now() < until);
    std::this_thread::sleep_for(20ms);
  }

  const test::Run run =
      test::run_command(std::string(kPython) + " " + SOURCE_DIR + "/tests/rls/rls_check.py " +
                        grpc_address + " " + http_address);
  INFO("rls_check.py: " << run.output << "\ngateway log: " << read_file(gateway_log));
  CHECK(run.status == 0);
  CHECK(run.output.find("11 cases passed") != std::string::npos);

  // The gRPC port's own counters: every call the server passed on was answered and counted by
  // domain and code, and the two it refused itself (an unknown method, a message over the limit)
  // are apart; promtool takes the whole exposition.
  const auto scraped = test::http_get(static_cast<std::uint16_t>(base + 1), "/metrics");
  const std::string& text = scraped.body();
  const test::Run promtool = test::promtool_check_metrics(text);
  INFO(text << "\npromtool: " << promtool.output);
  CHECK(promtool.status == 0);
  CHECK(promtool.output.empty());
  const std::map<std::string, double> samples = test::parse_samples(text);
  double answered = 0;
  for (const auto& [name, value] : samples) {
    if (name.rfind("sluice_gateway_rls_requests_total{", 0) == 0) answered += value;
  }
  CHECK(answered > 20);
  CHECK(samples.at("sluice_gateway_grpc_calls_total") == answered);
  CHECK(samples.at("sluice_gateway_grpc_refused_calls_total") == 2);
  CHECK(samples.at("sluice_gateway_grpc_protocol_errors_total") == 0);
  CHECK(samples.at("sluice_gateway_grpc_connections_refused_total") == 0);
  CHECK(samples.at("sluice_gateway_grpc_connections_total") >= 1);  // the counter is wired
}

}  // namespace
}  // namespace sluice::gateway::testing
