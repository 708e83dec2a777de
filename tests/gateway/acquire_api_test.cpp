#include "tools/gateway/acquire_api.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>

#include "core/verdict.h"

namespace sluice::gateway {
namespace {

std::string error_of(std::string_view body) {
  const auto call = parse_acquire_call(body);
  REQUIRE_FALSE(call.has_value());
  return call.error();
}

TEST_CASE("acquire: a policy and a key with cost and peek") {
  const auto call =
      parse_acquire_call(R"({"policy":"key_minute","key":"k1","cost":3,"peek":true})");
  REQUIRE(call.has_value());
  CHECK(call->by_policy());
  CHECK(call->policy == "key_minute");
  CHECK(call->key == "k1");
  CHECK(call->cost == 3u);
  CHECK(call->peek);
}

TEST_CASE("acquire: attributes become the request the rules match") {
  const auto call = parse_acquire_call(
      R"({"attributes":{"method":"POST","path":"/login?x=1","client_ip":"10.0.0.9",)"
      R"("headers":{"X-API-Key":"k2","X-Tier":"gold"}}})");
  REQUIRE(call.has_value());
  CHECK_FALSE(call->by_policy());
  CHECK_FALSE(call->cost.has_value());
  const rules::RequestAttributes a = call->attributes();
  CHECK(a.method == "POST");
  CHECK(a.path_only() == "/login");
  CHECK(a.client_ip == "10.0.0.9");
  CHECK(a.header("x-api-key") == std::optional<std::string_view>("k2"));
  CHECK(a.header("X-TIER") == std::optional<std::string_view>("gold"));
}

TEST_CASE("acquire: every malformed body is refused with a message naming the field") {
  CHECK(error_of("") == "the body is not JSON");
  CHECK(error_of("{\"policy\":") == "the body is not JSON");
  CHECK(error_of("[1,2]") == "the body must be a JSON object");
  CHECK(error_of("{}") == "give policy and key, or attributes");
  CHECK(error_of(R"({"policy":"p"})") == "key: missing (policy needs a key)");
  CHECK(error_of(R"({"key":"k"})") == "policy: missing (key needs a policy)");
  CHECK(error_of(R"({"policy":"","key":"k"})") == "policy: must not be empty");
  CHECK(error_of(R"({"policy":"p","key":7})") == "key: expected a string");
  CHECK(error_of(R"({"policy":"p","key":"k","cost":0})") ==
        "cost: expected an integer 1..4294967295");
  CHECK(error_of(R"({"policy":"p","key":"k","cost":4294967296})") ==
        "cost: expected an integer 1..4294967295");
  CHECK(error_of(R"({"policy":"p","key":"k","cost":-1})") ==
        "cost: expected an integer 1..4294967295");
  CHECK(error_of(R"({"policy":"p","key":"k","cost":1.5})") ==
        "cost: expected an integer 1..4294967295");
  CHECK(error_of(R"({"policy":"p","key":"k","peek":1})") == "peek: expected true or false");
  CHECK(error_of(R"({"policy":"p","key":"k","limit":5})") ==
        "limit: unknown field (policy, key, attributes, cost, peek)");
  CHECK(error_of(R"({"policy":"p","key":"k","attributes":{}})") ==
        "give either policy and key, or attributes, not both");
  CHECK(error_of(R"({"attributes":[]})") == "attributes: expected an object");
  CHECK(error_of(R"({"attributes":{"ip":"1.2.3.4"}})") ==
        "attributes.ip: unknown field (method, path, client_ip, headers)");
  CHECK(error_of(R"({"attributes":{"path":5}})") == "attributes.path: expected a string");
  CHECK(error_of(R"({"attributes":{"headers":{"X-A":1}}})") ==
        "attributes.headers.X-A: expected a string");
  CHECK(error_of(R"({"attributes":{"headers":"x"}})") ==
        "attributes.headers: expected an object of strings");
}

TEST_CASE(
    "acquire: the answer carries every limit and header and survives bytes that are not UTF-8") {
  client::Decision allowed;
  allowed.allowed = true;
  allowed.limit = 5;
  allowed.remaining = 4;
  allowed.reset_after_ms = 12'000;
  client::Decision never;
  never.allowed = false;
  never.retry_after_ms = kNever;
  never.reset_after_ms = kNever;
  never.source = client::DecisionSource::kBlockedCache;
  const std::string bad_key = "k\xff\xfe";
  const LimitReport limits[] = {
      {.policy = "key_minute", .key = "per_key:key_minute:k1", .decision = allowed},
      {.policy = "trial", .key = bad_key, .shadow = true, .decision = never},
      {.policy = "ip", .key = "per_ip:ip:1", .error = "timeout: no answer"},
  };
  Answer answer;
  answer.allowed = true;
  answer.status = 200;
  answer.headers = {{"RateLimit-Limit", "5"}, {"X-Sluice-Decision", "allowed"}};
  const auto json = nlohmann::json::parse(acquire_answer_json(answer, limits));
  CHECK(json["allowed"] == true);
  CHECK(json["status"] == 200);
  REQUIRE(json["limits"].size() == 3);
  CHECK(json["limits"][0]["policy"] == "key_minute");
  CHECK(json["limits"][0]["key"] == "per_key:key_minute:k1");
  CHECK(json["limits"][0]["remaining"] == 4);
  CHECK(json["limits"][0]["reset_after_ms"] == 12000);
  CHECK(json["limits"][0]["retry_after_ms"] == 0);
  CHECK(json["limits"][0]["source"] == "cluster");
  CHECK(json["limits"][1]["shadow"] == true);
  CHECK(json["limits"][1]["retry_after_ms"].is_null());
  CHECK(json["limits"][1]["source"] == "blocked_cache");
  CHECK(json["limits"][1]["key"] == "k\xef\xbf\xbd\xef\xbf\xbd");  // U+FFFD twice
  CHECK(json["limits"][2]["error"] == "timeout: no answer");
  CHECK_FALSE(json["limits"][2].contains("allowed"));
  CHECK(json["headers"]["RateLimit-Limit"] == "5");
  CHECK(json["headers"]["X-Sluice-Decision"] == "allowed");
  CHECK(nlohmann::json::parse(error_json("x \"y\"")) == nlohmann::json{{"error", "x \"y\""}});
}

}  // namespace
}  // namespace sluice::gateway
