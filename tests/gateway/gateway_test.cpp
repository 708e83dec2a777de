// The gateway in-process against a real node: /check and /v1/acquire over real HTTP, every
// header field parsed; health, readiness and metrics (docs/GATEWAY.md).
#include "tools/gateway/gateway.h"

#include <catch2/catch.hpp>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "tests/gateway/gateway_support.h"
#include "tests/support/child_process.h"
#include "tests/support/ports.h"

namespace sluice::gateway::testing {
namespace {

// 5 a minute per X-API-Key (gold: 100), 40 a second per IP, and a shadow limit of 2 a minute.
constexpr std::string_view kRules = R"(version: 1
policies:
  key_minute:
    algorithm: fixed_window
    limit: 5
    period: 1m
  gold_minute:
    algorithm: gcra
    limit: 100
    period: 1m
    burst: 20
  acme_minute:
    algorithm: token_bucket
    limit: 500
    period: 1m
  ip_second:
    algorithm: token_bucket
    limit: 40
    period: 1s
  trial:
    algorithm: fixed_window
    limit: 2
    period: 1m
    shadow: true
matches:
  - name: per_key
    key: api_key
    policies: [key_minute]
    tiers:
      gold: [gold_minute]
    overrides:
      acme: [acme_minute]
  - name: per_ip
    key: ip
    policies: [ip_second]
  - name: everyone
    when:
      path_prefix: /trial/
    key: everyone
    policies: [trial]
)";

// The headers nginx's sluice.conf sends with its subrequest.
std::string forwarded(std::string_view key, std::string_view ip = "10.0.0.7",
                      std::string_view uri = "/v1/items") {
  return "X-Original-URI: " + std::string(uri) +
         "\r\nX-Original-Method: GET\r\nX-Real-IP: " + std::string(ip) +
         "\r\nX-API-Key: " + std::string(key) + "\r\n";
}

unsigned status(const test::http_support::ParsedResponse& r) {
  return static_cast<unsigned>(r.result_int());
}

TEST_CASE("check: five allowed with the RateLimit fields then 429 with Retry-After") {
  GatewayHarness g(kRules);
  for (int i = 1; i <= 5; ++i) {
    const auto r = g.check(forwarded("k1"));
    INFO("request " << i);
    CHECK(status(r) == 200);
    CHECK(field(r, "RateLimit-Limit") == "5");
    CHECK(field(r, "RateLimit-Remaining") == std::to_string(5 - i));
    CHECK(field(r, "RateLimit-Policy") == R"("key_minute";q=5;w=60, "ip_second";q=40;w=1)");
    CHECK(field(r, "RateLimit") ==
          "\"key_minute\";r=" + std::to_string(5 - i) + ";t=" + field(r, "RateLimit-Reset"));
    CHECK(field(r, "X-RateLimit-Limit") == "5");
    CHECK(field(r, "X-Sluice-Decision") == "allowed");
    CHECK(field(r, "Retry-After") == "<absent>");
    CHECK(r.body().empty());
  }
  const auto denied = g.check(forwarded("k1"));
  CHECK(status(denied) == 429);
  CHECK(field(denied, "X-Sluice-Decision") == "denied");
  CHECK(field(denied, "RateLimit-Remaining") == "0");
  const int retry = std::stoi(field(denied, "Retry-After"));
  CHECK(retry >= 1);
  CHECK(retry <= 60);
  CHECK(field(denied, "RateLimit") == "\"key_minute\";r=0;t=" + field(denied, "RateLimit-Reset"));
  // nginx's auth_request passes only 2xx, 401 and 403: asked so, a denial is 403, with the
  // fields sluice.conf turns into the 429.
  const auto as_403 = g.check(forwarded("k1"), "/check?deny=403");
  CHECK(status(as_403) == 403);
  CHECK(field(as_403, "X-Sluice-Decision") == "denied");
  CHECK(field(as_403, "Retry-After") != "<absent>");
  CHECK(field(as_403, "RateLimit-Remaining") == "0");
  // Another key and another IP are counted apart.
  CHECK(status(g.check(forwarded("k2", "10.0.0.8"))) == 200);
  // With no API key, only the per-IP limit applies.
  const auto anonymous = g.ask(test::http_support::get(
      "/check", "X-Original-URI: /v1/items\r\nX-Original-Method: GET\r\nX-Real-IP: 10.0.0.9\r\n"));
  CHECK(status(anonymous) == 200);
  CHECK(field(anonymous, "RateLimit-Policy") == R"("ip_second";q=40;w=1)");
  // With no address forwarded, the connection's peer is the client IP.
  const auto direct = g.ask(test::http_support::get("/check", "X-Original-URI: /v1/items\r\n"));
  CHECK(status(direct) == 200);
  CHECK(field(direct, "RateLimit-Policy") == R"("ip_second";q=40;w=1)");
}

TEST_CASE("check: a tier header and an override pick their own policies") {
  GatewayHarness g(kRules);
  const auto gold = g.check(forwarded("k1") + "X-Tier: gold\r\n");
  CHECK(status(gold) == 200);
  CHECK(field(gold, "RateLimit-Policy") == R"("gold_minute";q=100;w=60, "ip_second";q=40;w=1)");
  const auto acme = g.check(forwarded("acme"));
  CHECK(field(acme, "RateLimit-Policy") == R"("acme_minute";q=500;w=60, "ip_second";q=40;w=1)");
}

TEST_CASE("check: a shadow limit counts and never denies") {
  GatewayHarness g(kRules);
  for (int i = 0; i < 4; ++i) {
    const auto r =
        g.check(forwarded("k" + std::to_string(i), "10.1.0." + std::to_string(i), "/trial/x"));
    CHECK(status(r) == 200);
    CHECK(field(r, "RateLimit-Policy") == R"("key_minute";q=5;w=60, "ip_second";q=40;w=1)");
  }
  const std::string scrape = g.ask(test::http_support::get("/metrics")).body();
  CHECK_THAT(scrape, Catch::Contains(R"(sluice_gateway_shadow_denials_total{policy="trial"} 2)"));
}

TEST_CASE("check: with no address forwarded the connection's peer is counted as the client IP") {
  GatewayHarness g(kRules);
  const std::string no_ip = "X-Original-URI: /v1/items\r\n";
  for (int i = 0; i < 40; ++i)
    REQUIRE(status(g.ask(test::http_support::get("/check", no_ip))) == 200);
  CHECK(status(g.ask(test::http_support::get("/check", no_ip))) == 429);
  // The same counter as X-Real-IP 127.0.0.1 (the test's own address); another address is apart.
  CHECK(status(g.ask(test::http_support::get("/check", no_ip + "X-Real-IP: 127.0.0.1\r\n"))) ==
        429);
  CHECK(status(g.ask(test::http_support::get("/check", no_ip + "X-Real-IP: 10.9.9.9\r\n"))) == 200);
}

TEST_CASE("check: the path is normalized before matching and a repeated key header is refused") {
  GatewayHarness g(kRules);
  // "/%74rial/x" and "//trial/./x" are "/trial/x": the shadow limit (2 a minute) applies.
  for (const char* uri : {"/%74rial/x", "//trial/./x", "/v1/../trial/x"}) {
    CHECK(status(g.check(forwarded(std::string("e-") + uri, "10.2.0.1", uri))) == 200);
  }
  const std::string scrape = g.ask(test::http_support::get("/metrics")).body();
  CHECK_THAT(scrape, Catch::Contains(R"(sluice_gateway_shadow_denials_total{policy="trial"} 1)"));
  // Two X-API-Key fields: which one would the application read? Neither is counted: 400.
  const auto twice = g.check(forwarded("k1") + "X-API-Key: k2\r\n");
  CHECK(status(twice) == 400);
  CHECK(twice.body() == "header X-API-Key repeated: a key is sent once\n");
  const auto tier_twice = g.check(forwarded("k1") + "X-Tier: gold\r\nX-Tier: free\r\n");
  CHECK(status(tier_twice) == 400);
}

TEST_CASE("health paths: HEAD has no body and unknown paths are 404 for any method") {
  GatewayHarness g(kRules);
  const auto head = g.ask("HEAD /healthz HTTP/1.1\r\nHost: t\r\n\r\n");
  CHECK(status(head) == 200);
  CHECK(head.body().empty());
  // The connection stays in step: a GET after a HEAD on one connection gets its own answer.
  test::http_support::HttpClient c(g.http.port());
  REQUIRE(
      c.send("HEAD /readyz HTTP/1.1\r\nHost: t\r\n\r\nGET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"));
  const auto first = c.read_response();
  const auto second = c.read_response();
  REQUIRE(first.has_value());
  REQUIRE(second.has_value());
  CHECK(second->body() == "ok\n");
  CHECK(status(g.post("/nowhere", "{}")) == 404);
  const auto post_health = g.post("/healthz", "");
  CHECK(status(post_health) == 405);
  CHECK(field(post_health, "Allow") == "GET, HEAD");
}

TEST_CASE("acquire: a policy and a key answered in JSON with every field") {
  GatewayHarness g(kRules);
  for (int i = 1; i <= 5; ++i) {
    const auto r = g.post("/v1/acquire", R"({"policy":"key_minute","key":"customer-42"})");
    REQUIRE(status(r) == 200);
    CHECK(field(r, "Content-Type") == "application/json");
    const auto json = nlohmann::json::parse(r.body());
    CHECK(json["allowed"] == true);
    CHECK(json["status"] == 200);
    REQUIRE(json["limits"].size() == 1);
    CHECK(json["limits"][0]["policy"] == "key_minute");
    CHECK(json["limits"][0]["key"] == "@api:key_minute:customer-42");
    CHECK(json["limits"][0]["remaining"] == 5 - i);
    CHECK(json["limits"][0]["source"] == "cluster");
    CHECK(json["headers"]["RateLimit-Remaining"] == std::to_string(5 - i));
  }
  const auto json = nlohmann::json::parse(
      g.post("/v1/acquire", R"({"policy":"key_minute","key":"customer-42"})").body());
  CHECK(json["allowed"] == false);
  CHECK(json["status"] == 429);
  CHECK(json["limits"][0]["retry_after_ms"].get<std::uint64_t>() > 0);
  CHECK(json["headers"].contains("Retry-After"));
  // A peek reports without consuming; a cost takes that many units.
  const auto peek = nlohmann::json::parse(
      g.post("/v1/acquire", R"({"policy":"key_minute","key":"c-7","peek":true,"cost":5})").body());
  CHECK(peek["allowed"] == true);
  const auto five = nlohmann::json::parse(
      g.post("/v1/acquire", R"({"policy":"key_minute","key":"c-7","cost":5})").body());
  CHECK(five["limits"][0]["remaining"] == 0);
  // Keys escape '%', '|' and '#'.
  const auto odd = nlohmann::json::parse(
      g.post("/v1/acquire", R"({"policy":"key_minute","key":"a|b#c%"})").body());
  CHECK(odd["limits"][0]["key"] == "@api:key_minute:a%7Cb%23c%25");
}

TEST_CASE("acquire: attributes are matched as /check does") {
  GatewayHarness g(kRules);
  const auto r = g.post(
      "/v1/acquire", R"({"attributes":{"method":"GET","path":"/v1/items","client_ip":"10.0.0.1",)"
                     R"("headers":{"X-API-Key":"k9","X-Tier":"gold"}}})");
  const auto json = nlohmann::json::parse(r.body());
  REQUIRE(json["limits"].size() == 2);
  CHECK(json["limits"][0]["policy"] == "gold_minute");
  CHECK(json["limits"][1]["policy"] == "ip_second");
  CHECK(json["limits"][1]["key"] == "per_ip:ip_second:10.0.0.1");
}

TEST_CASE("acquire: bad requests get 400 with the reason and the connection stays usable") {
  GatewayHarness g(kRules);
  const auto unknown = g.post("/v1/acquire", R"({"policy":"nope","key":"k"})");
  CHECK(status(unknown) == 400);
  CHECK(nlohmann::json::parse(unknown.body())["error"] ==
        "policy: no policy named 'nope' in the rules in force");
  const auto bad = g.post("/v1/acquire", "not json");
  CHECK(status(bad) == 400);
  CHECK(nlohmann::json::parse(bad.body())["error"] == "the body is not JSON");
  const auto get = g.ask(test::http_support::get("/v1/acquire"));
  CHECK(status(get) == 405);
  CHECK(field(get, "Allow") == "POST");
  CHECK(status(g.ask(test::http_support::get("/nowhere"))) == 404);
  // The same connection answers a good request after a 400.
  test::http_support::HttpClient c(g.http.port());
  const std::string body = R"({"policy":"key_minute","key":"x"})";
  REQUIRE(c.send("POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nnope"));
  REQUIRE(c.send("POST /v1/acquire HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                 std::to_string(body.size()) + "\r\n\r\n" + body));
  const auto first = c.read_response();
  const auto second = c.read_response();
  REQUIRE(first.has_value());
  REQUIRE(second.has_value());
  CHECK(status(*first) == 400);
  CHECK(status(*second) == 200);
}

TEST_CASE("healthz and readyz with the cluster reachable") {
  GatewayHarness g(kRules);
  const auto health = g.ask(test::http_support::get("/healthz"));
  CHECK(status(health) == 200);
  CHECK(health.body() == "ok\n");
  const auto ready = g.ask(test::http_support::get("/readyz"));
  CHECK(status(ready) == 200);
  CHECK(ready.body() == "ready: cluster\n");
}

TEST_CASE("a gateway started with no cluster: ready when failing open and decides locally") {
  const std::uint16_t dead = test::free_port_pair();
  GatewayHarness open(kRules, client::FailurePolicy::kOpen, {"127.0.0.1:" + std::to_string(dead)});
  const auto ready = open.ask(test::http_support::get("/readyz"));
  CHECK(status(ready) == 200);
  CHECK(ready.body() == "ready: failure policy open in force (no cluster node answers)\n");
  const auto r = open.post("/v1/acquire", R"({"policy":"key_minute","key":"k"})");
  const auto json = nlohmann::json::parse(r.body());
  CHECK(json["allowed"] == true);
  CHECK(json["limits"][0]["source"] == "local_fallback");

  GatewayHarness closed(kRules, client::FailurePolicy::kClosed,
                        {"127.0.0.1:" + std::to_string(dead)});
  const auto not_ready = closed.ask(test::http_support::get("/readyz"));
  CHECK(status(not_ready) == 503);
  CHECK(not_ready.body() ==
        "not ready: no cluster node answers and the failure policy is closed\n");
  // Failing closed, a denial waits the policy's period (key_minute: a minute).
  const auto denied = closed.check(forwarded("k1"));
  CHECK(status(denied) == 429);
  CHECK(field(denied, "Retry-After") == "60");
  CHECK(field(denied, "X-Sluice-Decision") == "denied");
}

// The value of the sample `name{labels}` in a scrape; -1 when absent.
double sample(const std::string& scrape, const std::string& series) {
  const std::size_t at = scrape.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(scrape.substr(at + series.size() + 2));
}

TEST_CASE("metrics: promtool takes the exposition and the counters move with the decisions") {
  GatewayHarness g(kRules);
  // 5 allowed, then denied by the node, then by the blocked-key cache; /v1/acquire's key is
  // counted apart from the match's ("@api:key_minute:k1"), so it is allowed: 6 allowed in all.
  for (int i = 0; i < 7; ++i) g.check(forwarded("k1"));
  g.post("/v1/acquire", R"({"policy":"key_minute","key":"k1"})");
  const auto r = g.ask(test::http_support::get("/metrics"));
  REQUIRE(status(r) == 200);
  CHECK(field(r, "Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  const std::string& scrape = r.body();
  INFO(scrape);
  CHECK(
      sample(
          scrape,
          R"(sluice_gateway_decisions_total{outcome="allowed",policy="key_minute",source="cluster"})") ==
      6);
  // The 6th was denied by the node; the 7th by the blocked-key cache, without a round trip.
  CHECK(
      sample(
          scrape,
          R"(sluice_gateway_decisions_total{outcome="denied",policy="key_minute",source="cluster"})") ==
      1);
  CHECK(
      sample(
          scrape,
          R"(sluice_gateway_decisions_total{outcome="denied",policy="key_minute",source="blocked_cache"})") ==
      1);
  CHECK(
      sample(
          scrape,
          R"(sluice_gateway_decisions_total{outcome="allowed",policy="ip_second",source="cluster"})") ==
      7);
  CHECK(sample(scrape, R"(sluice_gateway_requests_total{endpoint="check",outcome="allowed"})") ==
        5);
  CHECK(sample(scrape, R"(sluice_gateway_requests_total{endpoint="check",outcome="denied"})") == 2);
  CHECK(sample(scrape, R"(sluice_gateway_requests_total{endpoint="acquire",outcome="allowed"})") ==
        1);
  CHECK(sample(scrape, R"(sluice_gateway_decision_duration_seconds_count{endpoint="check"})") == 7);
  CHECK(sample(scrape, "sluice_gateway_ready") == 1);
  CHECK(sample(scrape, "sluice_gateway_node_breaker_open{node=\"" + g.node.address() + "\"}") == 0);
  CHECK(sample(scrape, R"(sluice_gateway_rule_reloads_total{result="failed"})") == 0);
  CHECK(sample(scrape, "sluice_gateway_rules_policies") == 5);
  CHECK_THAT(scrape,
             Catch::Contains("sluice_gateway_rules_info{hash=\"" +
                             std::string(g.rules.rules->hash()) + "\",source=\"test.yaml\"} 1"));
  CHECK_THAT(scrape, Catch::Contains("sluice_build_info{version="));
  CHECK_THAT(scrape, Catch::Contains("sluice_gateway_http_requests_total"));

  const std::string path = "/tmp/sluice-gateway-metrics-" + std::to_string(::getpid()) + ".txt";
  std::ofstream(path) << scrape;
  const test::Run promtool = test::run_command("promtool check metrics < " + path);
  std::remove(path.c_str());
  INFO(promtool.output);
  CHECK(promtool.status == 0);
  CHECK(promtool.output.empty());
}

}  // namespace
}  // namespace sluice::gateway::testing
