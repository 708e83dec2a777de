// The sluice-gateway binary reloads its rules file: on a rewrite (the watcher), on SIGHUP, and
// a bad file is refused, logged once and counted while the rules before stay in force
// (docs/GATEWAY.md, "Reload").
#include <catch2/catch.hpp>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
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

std::string rules_with_limit(const std::string& limit) {
  return "version: 1\npolicies:\n  key_minute:\n    algorithm: fixed_window\n    limit: " + limit +
         "\n    period: 1m\nmatches:\n  - name: per_key\n    key: api_key\n    policies: "
         "[key_minute]\n";
}

void write_file(const fs::path& path, const std::string& text) {
  const fs::path temporary = path.string() + ".tmp";
  std::ofstream(temporary) << text;
  fs::rename(temporary, path);  // as an editor or a deploy does: whole, at once
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

class Gateway {
 public:
  Gateway(const fs::path& rules, const std::string& node, const fs::path& log)
      : port_(test::free_port_pair()),
        child_(GATEWAY_PATH,
               {"--listen", "127.0.0.1:" + std::to_string(port_), "--servers", node, "--rules",
                rules.string()},
               log.string()) {}

  test::Child& child() { return child_; }

  // The response to `raw`, or nullopt while the gateway does not answer.
  std::optional<hs::ParsedResponse> ask(const std::string& raw) {
    try {
      hs::HttpClient c(port_);
      if (!c.send(raw)) return std::nullopt;
      return c.read_response(2s);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  // The limit of key_minute in force, peeked through /v1/acquire (nothing consumed).
  std::optional<std::uint32_t> limit() {
    const std::string body = R"({"policy":"key_minute","key":"probe","peek":true})";
    auto r = ask("POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\n\r\n" + body);
    if (!r || r->result_int() != 200) return std::nullopt;
    return nlohmann::json::parse(r->body())["limits"][0]["limit"].get<std::uint32_t>();
  }
  // Waits until `condition` holds, at most 10 s.
  template <typename Condition>
  bool eventually(Condition condition) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < until) {
      if (condition()) return true;
      std::this_thread::sleep_for(20ms);
    }
    return condition();
  }
  std::string metrics() {
    auto r = ask(hs::get("/metrics"));
    return r ? r->body() : "";
  }

 private:
  std::uint16_t port_;
  test::Child child_;
};

TEST_CASE("gateway binary: rules reloaded on a rewrite and on SIGHUP, a bad file refused") {
  test::require_binary(GATEWAY_PATH);
  client::testing::TestServer node;
  const fs::path dir = fs::temp_directory_path() / ("sluice-reload-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path rules = dir / "rules.yaml";
  const fs::path log = dir / "gateway.log";
  write_file(rules, rules_with_limit("5"));
  Gateway gateway(rules, node.address(), log);
  INFO("gateway log: " << read_file(log));
  REQUIRE(gateway.eventually([&] { return gateway.limit() == 5u; }));

  // A rewrite is seen by the watcher.
  write_file(rules, rules_with_limit("7"));
  CHECK(gateway.eventually([&] { return gateway.limit() == 7u; }));
  CHECK(gateway.eventually([&] {
    return gateway.metrics().find("sluice_gateway_rule_reloads_total{result=\"ok\"} 1\n") !=
           std::string::npos;
  }));

  // A bad file: refused, logged once (the watcher sees the same bytes again and again), counted;
  // the rules before stay.
  write_file(rules, rules_with_limit("0"));
  CHECK(gateway.eventually([&] {
    return gateway.metrics().find("sluice_gateway_rule_reloads_total{result=\"failed\"} 1\n") !=
           std::string::npos;
  }));
  std::this_thread::sleep_for(1500ms);  // more than the watcher's periodic check (1 s)
  CHECK(gateway.limit() == 7u);
  CHECK(count(read_file(log), "rules: refused") == 1);
  CHECK_THAT(read_file(log), Catch::Contains("policies.key_minute.limit"));

  // SIGHUP reads the file at once: the bad one is refused again (asked for, so logged again).
  gateway.child().send_signal(SIGHUP);
  CHECK(gateway.eventually([&] {
    return gateway.metrics().find("sluice_gateway_rule_reloads_total{result=\"failed\"} 2\n") !=
           std::string::npos;
  }));
  CHECK(gateway.limit() == 7u);

  // Fixed, with the watcher's events out of the way: SIGHUP takes it.
  std::ofstream(rules) << rules_with_limit("9");
  gateway.child().send_signal(SIGHUP);
  CHECK(gateway.eventually([&] { return gateway.limit() == 9u; }));
  CHECK_THAT(read_file(log), Catch::Contains("rules: reloaded " + rules.string()));

  gateway.child().send_signal(SIGTERM);
  CHECK(gateway.child().wait_exit(10s) == 0);
  CHECK_THAT(read_file(log), Catch::Contains("stopped"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice::gateway::testing
