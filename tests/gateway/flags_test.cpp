// The sluice-gateway binary's command line: a bad flag value exits 2 naming the flag, a rules
// file with errors exits 1 with every error as FILE:LINE:COLUMN, and the HTTP limits given as
// flags hold at their edges.
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>

#include "tests/client/test_support.h"
#include "tests/gateway/gateway_support.h"
#include "tests/support/child_process.h"
#include "tests/support/ports.h"

namespace sluice::gateway::testing {
namespace {

namespace fs = std::filesystem;
namespace hs = test::http_support;
using namespace std::chrono_literals;

struct Files {
  Files() : dir(fs::temp_directory_path() / ("sluice-gw-flags-" + std::to_string(::getpid()))) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Files() { fs::remove_all(dir); }
  fs::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return dir / name;
  }
  fs::path dir;
};

constexpr std::string_view kGood =
    "version: 1\npolicies:\n  p:\n    algorithm: gcra\n    limit: 5\n    period: 1m\n"
    "matches:\n  - name: m\n    key: api_key\n    policies: [p]\n";

test::Run gateway(const std::string& args) {
  return test::run_command("'" + std::string(GATEWAY_PATH) + "' " + args);
}

TEST_CASE("gateway flags: bad values exit 2 naming the flag") {
  test::require_binary(GATEWAY_PATH);
  Files files;
  const std::string rules = files.write("rules.yaml", std::string(kGood)).string();
  const auto refused = [&](const std::string& args, const std::string& message) {
    const test::Run run = gateway("--rules " + rules + " " + args);
    INFO(args << ": " << run.output);
    CHECK(run.status == 2);
    CHECK_THAT(run.output, Catch::Contains(message));
  };
  refused("--listen nowhere", "--listen nowhere: expected IP:PORT");
  refused("--servers 127.0.0.1", "servers");
  refused("--failure-policy report", "--failure-policy report: expected open or closed");
  refused("--gateways 0", "--gateways 0");
  refused("--timeout 0", "--timeout 0");
  refused("--max-header-bytes 100", "--max-header-bytes 100");
  refused("--threads 0", "--threads 0");
  refused("--listen localhost:8080", "--listen localhost:8080: expected IP:PORT");
  refused("--proxy traefik", "--proxy traefik: expected nginx or forwarded");
  refused("--max-key 100", "--max-key 100");
  refused("stray", "unexpected argument 'stray'");
  refused("--grpc-listen localhost:8081", "--grpc-listen localhost:8081: expected IP:PORT");
  refused("--grpc-listen 127.0.0.1", "--grpc-listen 127.0.0.1: expected IP:PORT");
  refused("--rls-headers some", "--rls-headers some: expected draft, legacy, both or none");
  refused("--rls-deadline 0", "--rls-deadline 0");
  refused("--rls-max-descriptors 0", "--rls-max-descriptors 0");
  refused("--rls-max-entries 5000", "--rls-max-entries 5000");
  refused("--rls-max-message-bytes 100", "--rls-max-message-bytes 100");
  refused("--rls-max-streams 0", "--rls-max-streams 0");
  refused("--rls-max-streams 65536", "--rls-max-streams 65536");
  const test::Run no_rules = gateway("");
  CHECK(no_rules.status == 2);
  CHECK_THAT(no_rules.output, Catch::Contains("--rules PATH is required"));
  const test::Run help = gateway("--help");
  CHECK(help.status == 0);
  CHECK_THAT(help.output, Catch::Contains("--max-body-bytes"));
  CHECK_THAT(help.output, Catch::Contains("--grpc-listen"));
}

TEST_CASE("gateway: a rules file with errors exits 1 listing each as FILE:LINE:COLUMN") {
  test::require_binary(GATEWAY_PATH);
  Files files;
  const fs::path bad = files.write(
      "bad.yaml",
      "version: 1\npolicies:\n  p:\n    algorithm: leaky\n    limit: 0\n    period: 1m\n");
  const test::Run run = gateway("--rules " + bad.string() + " --listen 127.0.0.1:1");
  INFO(run.output);
  CHECK(run.status == 1);
  CHECK_THAT(run.output, Catch::Contains(bad.string() + ":4:16: policies.p.algorithm"));
  CHECK_THAT(run.output, Catch::Contains(bad.string() + ":5:12: policies.p.limit"));
  CHECK_THAT(run.output, Catch::Contains(": refused ("));
}

TEST_CASE("gateway: an envoyproxy ratelimit config with errors exits 1 with the peer's messages") {
  test::require_binary(GATEWAY_PATH);
  Files files;
  const fs::path bad = files.write("envoy.yaml",
                                   "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n"
                                   "      unit: fortnight\n  - key: a\n");
  const test::Run run =
      gateway("--rules " + bad.string() + " --listen 127.0.0.1:1 --grpc-listen 127.0.0.1:1");
  INFO(run.output);
  CHECK(run.status == 1);
  CHECK_THAT(run.output,
             Catch::Contains(bad.string() + ":5:13: invalid rate limit unit 'fortnight'"));
  CHECK_THAT(run.output,
             Catch::Contains(bad.string() + ":6:5: duplicate descriptor composite key 'd.a'"));
  CHECK_THAT(run.output, Catch::Contains("refused (2 errors)"));
}

TEST_CASE("gateway: the header and body limits given as flags hold at their edges") {
  test::require_binary(GATEWAY_PATH);
  client::testing::TestServer node;
  Files files;
  const fs::path rules = files.write("rules.yaml", std::string(kGood));
  const std::uint16_t port = test::free_port_pair();
  test::Child child(
      GATEWAY_PATH,
      {"--listen", "127.0.0.1:" + std::to_string(port), "--servers", node.address(), "--rules",
       rules.string(), "--max-header-bytes", "1024", "--max-body-bytes", "100"},
      (files.dir / "gateway.log").string());
  const auto ask = [&](const std::string& raw) -> std::optional<hs::ParsedResponse> {
    for (int attempt = 0; attempt < 500; ++attempt) {
      try {
        hs::HttpClient c(port);
        if (!c.send(raw)) return std::nullopt;
        return c.read_response(2s);
      } catch (const std::exception&) {
        std::this_thread::sleep_for(20ms);  // not listening yet
      }
    }
    return std::nullopt;
  };
  // A request line and headers of exactly 1024 bytes pass; one more byte is 431.
  const auto sized = [](std::size_t total) {
    const std::string head = "GET /healthz HTTP/1.1\r\nHost: t\r\nX-Pad: ";
    const std::string tail = "\r\n\r\n";
    return head + std::string(total - head.size() - tail.size(), 'a') + tail;
  };
  const auto at_limit = ask(sized(1024));
  REQUIRE(at_limit.has_value());
  CHECK(at_limit->result_int() == 200);
  const auto over = ask(sized(1025));
  REQUIRE(over.has_value());
  CHECK(over->result_int() == 431);
  // A body of exactly 100 bytes is read (and refused as JSON); 101 is 413.
  const auto post = [&](std::size_t size) {
    return ask("POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: " + std::to_string(size) +
               "\r\n\r\n" + std::string(size, ' '));
  };
  const auto body_at_limit = post(100);
  REQUIRE(body_at_limit.has_value());
  CHECK(body_at_limit->result_int() == 400);
  const auto body_over = post(101);
  REQUIRE(body_over.has_value());
  CHECK(body_over->result_int() == 413);
  // A malformed request: 400, its connection closed, and the gateway carries on.
  {
    hs::HttpClient bad(port);
    REQUIRE(bad.send("NOT HTTP AT ALL\r\n\r\n"));
    const auto malformed = bad.read_response();
    REQUIRE(malformed.has_value());
    CHECK(malformed->result_int() == 400);
    CHECK(bad.wait_closed());
  }
  const auto after = ask(hs::get("/healthz"));
  REQUIRE(after.has_value());
  CHECK(after->result_int() == 200);
}

TEST_CASE("gateway: the connection and idle limits given as flags hold") {
  test::require_binary(GATEWAY_PATH);
  client::testing::TestServer node;
  Files files;
  const fs::path rules = files.write("rules.yaml", std::string(kGood));
  const std::uint16_t port = test::free_port_pair();
  test::Child child(
      GATEWAY_PATH,
      {"--listen", "127.0.0.1:" + std::to_string(port), "--servers", node.address(), "--rules",
       rules.string(), "--max-connections", "2", "--idle-timeout", "300ms"},
      (files.dir / "gateway.log").string());
  const auto open = [&]() {
    for (int attempt = 0; attempt < 500; ++attempt) {
      try {
        return std::make_unique<hs::HttpClient>(port);
      } catch (const std::exception&) {
        std::this_thread::sleep_for(20ms);  // not listening yet
      }
    }
    return std::unique_ptr<hs::HttpClient>();
  };
  // Two connections are served; a third is closed at accept, with no answer.
  auto first = open();
  REQUIRE(first);
  REQUIRE(first->send(hs::get("/healthz")));
  REQUIRE(first->read_response().has_value());
  auto second = open();
  REQUIRE(second);
  REQUIRE(second->send(hs::get("/healthz")));
  REQUIRE(second->read_response().has_value());
  auto third = open();
  REQUIRE(third);
  CHECK(third->wait_closed(5s));
  // Idle for longer than --idle-timeout: closed by the gateway.
  CHECK(first->wait_closed(5s));
  CHECK(second->wait_closed(5s));
  // Their slots are free again.
  auto fourth = open();
  REQUIRE(fourth);
  REQUIRE(fourth->send(hs::get("/healthz")));
  const auto answer = fourth->read_response();
  REQUIRE(answer.has_value());
  CHECK(answer->result_int() == 200);
}

}  // namespace
}  // namespace sluice::gateway::testing
