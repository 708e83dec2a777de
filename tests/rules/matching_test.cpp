// RuleSet::match: which limits a request gets, under which keys, from which policies: matches
// in file order, conditions, key parts, tiers, overrides, absent attributes, the key format
// and its length bound.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "rules/rule_set.h"

namespace sluice::rules {
namespace {

constexpr std::string_view kRules = R"(version: 1
attributes:
  user: X-Customer
policies:
  second:
    algorithm: token_bucket
    limit: 10
    period: 1s
  hour:
    algorithm: sliding_window
    limit: 1000
    period: 1h
  gold:
    algorithm: gcra
    limit: 100
    period: 1s
    burst: 20
  acme:
    algorithm: fixed_window
    limit: 500
    period: 1m
    on_failure: closed
  ip:
    algorithm: token_bucket
    limit: 50
    period: 1s
    on_failure: open
    cost: 2
  login:
    algorithm: sliding_log
    limit: 5
    period: 15m
  trial:
    algorithm: fixed_window
    limit: 3
    period: 1m
    shadow: true
matches:
  - name: per_key
    key: api_key
    policies: [second, hour]
    tiers:
      gold: [gold, hour]
    overrides:
      acme: [acme]
  - name: per_ip
    key: ip
    policies: ip
  - name: login
    when:
      method: post
      path: /login
    key: [ip, header:X-Login-Name]
    policies: [login]
  - name: uploads
    when:
      path_prefix: [/v1/upload/, /v2/upload/]
      headers:
        X-Env: [prod, staging]
    key: user
    policies: [second]
  - name: all
    key: everyone
    policies: [trial]
)";

RuleSet rules() {
  auto parsed = RuleSet::parse(kRules, "rules.yaml");
  if (!parsed) {
    for (const Diagnostic& d : parsed.error()) UNSCOPED_INFO(d.to_string());
  }
  REQUIRE(parsed);
  return std::move(parsed).value();
}

std::vector<std::string> keys(const std::vector<Limit>& limits) {
  std::vector<std::string> out;
  for (const Limit& l : limits) out.push_back(l.key);
  return out;
}

TEST_CASE("a request gets one limit per policy of every match that applies in file order",
          "[matching]") {
  const RuleSet set = rules();
  const RequestAttributes request{"GET", "/v1/items?page=2", "10.0.0.7", {{"x-api-key", "k1"}}};
  const std::vector<Limit> limits = set.match(request);
  CHECK(keys(limits) == std::vector<std::string>{"per_key:second:k1", "per_key:hour:k1",
                                                 "per_ip:ip:10.0.0.7", "all:trial:*"});
  REQUIRE(limits.size() == 4);
  CHECK(limits[0].policy == set.policy("second"));
  CHECK(limits[0].match_name == "per_key");
  CHECK(limits[0].via == Via::kPolicies);
  CHECK(limits[2].policy->cost == 2);
  CHECK(limits[2].policy->on_failure == OnFailure::kOpen);
  CHECK(limits[3].policy->shadow);
  CHECK(limits[3].match_name == "all");
}

TEST_CASE("a match whose key attribute is absent or empty does not apply", "[matching]") {
  const RuleSet set = rules();
  CHECK(keys(set.match(RequestAttributes{"GET", "/", "10.0.0.7", {}})) ==
        std::vector<std::string>{"per_ip:ip:10.0.0.7", "all:trial:*"});
  CHECK(keys(set.match(RequestAttributes{"GET", "/", "", {{"X-API-Key", ""}}})) ==
        std::vector<std::string>{"all:trial:*"});
}

TEST_CASE("the tier header picks the tier's policies and an override wins over the tier",
          "[matching]") {
  const RuleSet set = rules();
  const auto gold =
      set.match(RequestAttributes{"GET", "/", "", {{"X-API-Key", "k1"}, {"X-TIER", "gold"}}});
  REQUIRE(gold.size() == 3);
  CHECK(gold[0].key == "per_key:gold:k1");
  CHECK(gold[0].via == Via::kTier);
  CHECK(gold[0].tier == "gold");
  CHECK(gold[1].key == "per_key:hour:k1");

  const auto silver =
      set.match(RequestAttributes{"GET", "/", "", {{"X-API-Key", "k1"}, {"X-Tier", "silver"}}});
  CHECK(keys(silver) ==
        std::vector<std::string>{"per_key:second:k1", "per_key:hour:k1", "all:trial:*"});

  const auto acme =
      set.match(RequestAttributes{"GET", "/", "", {{"X-API-Key", "acme"}, {"X-Tier", "gold"}}});
  REQUIRE(acme.size() == 2);
  CHECK(acme[0].key == "per_key:acme:acme");
  CHECK(acme[0].via == Via::kOverride);
  CHECK(acme[0].policy->on_failure == OnFailure::kClosed);
}

TEST_CASE("conditions on method path prefix and header values must all hold", "[matching]") {
  const RuleSet set = rules();
  const auto login = set.match(
      RequestAttributes{"POST", "/login", "10.0.0.7", {{"X-Login-Name", "alice|bob#1%"}}});
  CHECK(keys(login) == std::vector<std::string>{"per_ip:ip:10.0.0.7",
                                                "login:login:10.0.0.7|alice%7Cbob%231%25",
                                                "all:trial:*"});
  CHECK(set.match(RequestAttributes{"GET", "/login", "10.0.0.7", {{"X-Login-Name", "a"}}}).size() ==
        2);
  CHECK(
      set.match(RequestAttributes{"POST", "/login/", "10.0.0.7", {{"X-Login-Name", "a"}}}).size() ==
      2);

  const auto upload = [&](std::string_view path, std::string_view env) {
    return keys(
        set.match(RequestAttributes{"PUT", path, "", {{"X-Customer", "c1"}, {"X-Env", env}}}));
  };
  CHECK(upload("/v2/upload/x", "staging") ==
        std::vector<std::string>{"uploads:second:c1", "all:trial:*"});
  CHECK(upload("/v1/upload", "prod") == std::vector<std::string>{"all:trial:*"});
  CHECK(upload("/v1/upload/x", "dev") == std::vector<std::string>{"all:trial:*"});
}

TEST_CASE("match reuses the output vector and replaces what it held", "[matching]") {
  const RuleSet set = rules();
  std::vector<Limit> out;
  set.match(RequestAttributes{"GET", "/", "10.0.0.7", {{"X-API-Key", "k1"}}}, out);
  CHECK(out.size() == 4);
  set.match(RequestAttributes{"GET", "/", "", {}}, out);
  CHECK(keys(out) == std::vector<std::string>{"all:trial:*"});
}

TEST_CASE("a long key value is cut and hashed so that the key fits the daemon's max key",
          "[matching]") {
  const RuleSet set = rules();
  const std::string long_a(1000, 'a');
  std::string long_b = long_a;
  long_b.back() = 'b';
  const auto a = set.match(RequestAttributes{"GET", "/", "", {{"X-API-Key", long_a}}});
  const auto b = set.match(RequestAttributes{"GET", "/", "", {{"X-API-Key", long_b}}});
  REQUIRE(a.size() == 3);
  CHECK(a[0].key.size() == kDefaultMaxKeyBytes);
  CHECK(a[1].key.size() == kDefaultMaxKeyBytes);
  CHECK(a[0].key.starts_with("per_key:second:aaaa"));
  CHECK(a[0].key.substr(a[0].key.size() - 33) == "#" + hash_hex(long_a));
  CHECK(a[0].key != b[0].key);

  // A value that just fits is kept whole.
  const std::string fits(kDefaultMaxKeyBytes - std::string("per_key:second:").size(), 'x');
  CHECK(RuleSet::counted_key("per_key", "second", fits, kDefaultMaxKeyBytes) ==
        "per_key:second:" + fits);
  CHECK(RuleSet::counted_key("per_key", "second", fits + "x", kDefaultMaxKeyBytes).size() ==
        kDefaultMaxKeyBytes);
  // A smaller max key, and one below the least that works.
  CHECK(RuleSet::counted_key("m", "p", long_a, 200).size() == 200);
  CHECK(RuleSet::counted_key("m", "p", long_a, 10).size() == kMinMaxKeyBytes);
  const std::string name(kMaxNameBytes, 'n');
  const std::string worst = RuleSet::counted_key(name, name, long_a, 10);
  CHECK(worst.size() == kMinMaxKeyBytes);
  CHECK(worst.substr(2 * kMaxNameBytes + 2, 2) == "a#");
}

TEST_CASE("header names are looked up without regard to case and the first one counts",
          "[matching]") {
  const RequestAttributes request{"GET", "/", "", {{"X-Api-Key", "first"}, {"x-api-key", "2"}}};
  CHECK(request.header("X-API-KEY") == std::optional<std::string_view>("first"));
  CHECK_FALSE(request.header("X-API-Ke").has_value());
  CHECK(RequestAttributes{"GET", "/a?b?c", "", {}}.path_only() == "/a");
}

TEST_CASE("policies are found by name and the set knows its hash and source", "[matching]") {
  const RuleSet set = rules();
  CHECK(set.policies().size() == 7);
  CHECK(set.matches().size() == 5);
  const Policy* gold = set.policy("gold");
  REQUIRE(gold != nullptr);
  CHECK(gold->rule == Rule{Algorithm::kGcra, 100, 1000, 20});
  CHECK(gold->cost == 1);
  CHECK(gold->on_failure == OnFailure::kDefault);
  CHECK_FALSE(gold->shadow);
  CHECK(set.policy("nope") == nullptr);
  CHECK(set.hash() == hash_hex(kRules));
  CHECK(set.hash().size() == 32);
  CHECK(set.source() == "rules.yaml");
  CHECK(set.tier_header() == "X-Tier");
  CHECK(set.matches()[3].key[0].header == "X-Customer");
}

}  // namespace
}  // namespace sluice::rules
