// The gateway in-process for its tests: a real node (tests/client/test_support.h's TestServer,
// on a manual clock), a client connected to it, a rules file, the Gateway on an http::Server
// on 127.0.0.1, and helpers to ask it over real HTTP.
#pragma once

#include "net/asio.h"  // before any other Asio header

#include <catch2/catch.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "client/client.h"
#include "rules/rule_set.h"
#include "tests/client/test_support.h"
#include "tests/http/http_test_support.h"
#include "tools/gateway/gateway.h"
#include "tools/gateway/gateway_metrics.h"

namespace sluice::gateway::testing {

inline std::shared_ptr<const rules::RuleSet> parse_rules(std::string_view yaml) {
  auto parsed = rules::RuleSet::parse(yaml, "test.yaml");
  if (!parsed) {
    for (const auto& d : parsed.error()) UNSCOPED_INFO(d.to_string());
  }
  REQUIRE(parsed.has_value());
  return std::make_shared<const rules::RuleSet>(std::move(*parsed));
}

// Rules a test can swap.
struct RulesBox {
  std::mutex mutex;
  std::shared_ptr<const rules::RuleSet> rules;
  std::uint64_t ok = 0;
  std::uint64_t failed = 0;

  RulesView view() {
    RulesView out;
    out.current = [this] {
      std::lock_guard lock(mutex);
      return rules;
    };
    out.reloads = [this] {
      std::lock_guard lock(mutex);
      return RulesView::Reloads{ok, failed};
    };
    return out;
  }
};

// The gateway's client of the tests: every decision by the node (no lease), `policy` on failure.
inline std::unique_ptr<client::Client> connect_client(std::vector<std::string> servers,
                                                      client::FailurePolicy policy) {
  client::ClientOptions options;
  options.servers = std::move(servers);
  options.failure_policy = policy;
  options.timeout = std::chrono::milliseconds(2000);
  options.connect_timeout = std::chrono::milliseconds(300);
  options.lease_duration = std::chrono::milliseconds(0);
  auto connected = client::Client::connect(options);
  REQUIRE(connected.ok());
  return std::move(*connected);
}

struct GatewayHarness {
  // `servers`: the client's seeds (default: the in-process node).
  explicit GatewayHarness(std::string_view yaml,
                          client::FailurePolicy policy = client::FailurePolicy::kOpen,
                          std::vector<std::string> servers = {})
      : client(connect_client(servers.empty() ? std::vector<std::string>{node.address()} : servers,
                              policy)),
        gateway(*client, box(yaml), metrics,
                GatewayOptions{.failure_policy = policy, .forwarded_by = ForwardedBy::kNginx}),
        http({}, [this](const http::Request& request, http::Responder responder) {
          gateway.handle(request, std::move(responder));
        }) {
    gateway.set_server(&http.server());
  }
  // The HTTP server first (no new request), then the client (its destructor fails what is in
  // flight and joins the thread that answers decisions), while the gateway still exists.
  ~GatewayHarness() {
    http.stop();
    client.reset();
  }

  // One request on a new connection; its response (REQUIREd).
  test::http_support::ParsedResponse ask(const std::string& raw) {
    test::http_support::HttpClient c(http.port());
    REQUIRE(c.send(raw));
    auto response = c.read_response();
    REQUIRE(response.has_value());
    return std::move(*response);
  }
  test::http_support::ParsedResponse check(std::string_view headers,
                                           std::string_view target = "/check") {
    return ask(test::http_support::get(target, headers));
  }
  test::http_support::ParsedResponse post(std::string_view target, std::string_view body) {
    return ask("POST " + std::string(target) +
               " HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n" +
               "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + std::string(body));
  }

  client::testing::TestServer node;
  RulesBox rules;
  GatewayMetrics metrics;
  std::unique_ptr<client::Client> client;
  Gateway gateway;
  test::http_support::HttpFixture http;

 private:
  RulesView box(std::string_view yaml) {
    rules.rules = parse_rules(yaml);
    return rules.view();
  }
};

// A header field of a response, or "<absent>".
inline std::string field(const test::http_support::ParsedResponse& r, std::string_view name) {
  const auto it = r.find(boost::beast::string_view(name.data(), name.size()));
  return it == r.end() ? std::string("<absent>") : std::string(it->value());
}

}  // namespace sluice::gateway::testing
