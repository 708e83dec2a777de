// envoyproxy/ratelimit's config files: read unchanged, looked up as that service looks them up,
// and refused with its messages (with file, line and column).
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "rules/rule_set.h"

namespace sluice::rules {
namespace {

#ifndef SLUICE_SOURCE_DIR
#error "SLUICE_SOURCE_DIR must be defined by the build (tests/CMakeLists.txt)"
#endif

RuleSet parse_ok(std::string_view yaml, const RuleSetOptions& options = {}) {
  auto parsed = RuleSet::parse(yaml, "envoy.yaml", options);
  if (!parsed) {
    for (const Diagnostic& d : parsed.error()) UNSCOPED_INFO(d.to_string());
  }
  REQUIRE(parsed);
  return std::move(parsed).value();
}

std::vector<std::string> errors_of(std::string_view yaml) {
  auto parsed = RuleSet::parse(yaml, "envoy.yaml");
  REQUIRE_FALSE(parsed);
  std::vector<std::string> out;
  for (const Diagnostic& d : parsed.error()) out.push_back(d.to_string());
  return out;
}

EnvoyMatch find(const RuleSet& set, std::string_view domain,
                std::vector<std::pair<std::string, std::string>> entries) {
  std::vector<EnvoyEntry> view;
  for (const auto& [k, v] : entries) view.push_back({k, v});
  return set.envoy().match(domain, view);
}

RuleSet example(std::string_view name) {
  auto parsed =
      RuleSet::load(std::string(SLUICE_SOURCE_DIR) + "/examples/envoy/" + std::string(name));
  if (!parsed) {
    for (const Diagnostic& d : parsed.error()) UNSCOPED_INFO(d.to_string());
  }
  REQUIRE(parsed);
  return std::move(parsed).value();
}

TEST_CASE("a file with a top-level domain is read as an envoyproxy ratelimit config", "[envoy]") {
  const RuleSet set = parse_ok(R"(
domain: mongo_cps
descriptors:
  - key: database
    value: users
    rate_limit:
      unit: second
      requests_per_unit: 500
)");
  CHECK(set.policies().empty());
  CHECK(set.matches().empty());
  CHECK(set.envoy().has_domain("mongo_cps"));
  CHECK(set.envoy().domain_count() == 1);
  CHECK(set.envoy().limit_count() == 1);
  const EnvoyMatch m = find(set, "mongo_cps", {{"database", "users"}});
  REQUIRE(m.limit != nullptr);
  CHECK(m.limit->requests_per_unit == 500);
  CHECK(m.limit->unit == EnvoyUnit::kSecond);
  CHECK(m.limit->stats_key == "mongo_cps.database_users");
  // The peer's counting: a fixed window of the unit, on the UTC clock.
  CHECK(m.limit->rule.algorithm == Algorithm::kFixedWindow);
  CHECK(m.limit->rule.limit == 500);
  CHECK(m.limit->rule.period_ms == 1000);
  CHECK_FALSE(m.limit->extended);
  CHECK(m.counted_key == "@rls:envoy:mongo_cps:database=users");
}

TEST_CASE("the examples in examples/envoy load unchanged and match as their comments say",
          "[envoy]") {
  const RuleSet api = example("api.yaml");
  CHECK(api.envoy().limit_count() == 7);
  // Per client address: one counter per value.
  const EnvoyMatch a = find(api, "api", {{"remote_address", "10.0.0.1"}});
  const EnvoyMatch b = find(api, "api", {{"remote_address", "10.0.0.2"}});
  REQUIRE(a.limit != nullptr);
  CHECK(a.limit == b.limit);
  CHECK(a.counted_key != b.counted_key);
  CHECK(a.limit->requests_per_unit == 100);
  CHECK(a.limit->unit == EnvoyUnit::kMinute);
  // Nested: the value match wins over the key-only default; both only at the last entry.
  const EnvoyMatch login = find(api, "api", {{"authenticated", "false"}, {"path", "/login"}});
  REQUIRE(login.limit != nullptr);
  CHECK(login.limit->name == "login");
  CHECK(login.limit->requests_per_unit == 3);
  const EnvoyMatch other = find(api, "api", {{"authenticated", "false"}, {"path", "/x"}});
  REQUIRE(other.limit != nullptr);
  CHECK(other.limit->requests_per_unit == 10);
  CHECK(other.limit->stats_key == "api.authenticated_false.path");
  CHECK(find(api, "api", {{"authenticated", "false"}}).limit == nullptr);
  const EnvoyMatch health = find(api, "api", {{"authenticated", "false"}, {"path", "/healthz"}});
  REQUIRE(health.limit != nullptr);
  CHECK(health.limit->unlimited);
  // A limit at the first level and another below it.
  const EnvoyMatch client = find(api, "api", {{"client_id", "c1"}});
  REQUIRE(client.limit != nullptr);
  CHECK(client.limit->name == "per_client");
  const EnvoyMatch bulk = find(api, "api", {{"client_id", "c1"}, {"plan", "bulk"}});
  REQUIRE(bulk.limit != nullptr);
  CHECK(bulk.limit->shadow);
  CHECK(find(api, "api", {{"client_id", "c1"}, {"plan", "free"}}).limit == nullptr);
  // The wildcard.
  const EnvoyMatch css = find(api, "api", {{"path", "/static/site.css"}});
  REQUIRE(css.limit != nullptr);
  CHECK(css.limit->requests_per_unit == 200);
  CHECK(find(api, "api", {{"path", "/dynamic/x"}}).limit == nullptr);

  const RuleSet ext = example("sluice_extensions.yaml");
  const EnvoyMatch merchant = find(ext, "payments", {{"merchant", "m1"}});
  REQUIRE(merchant.limit != nullptr);
  CHECK(merchant.limit->extended);
  CHECK(merchant.limit->rule.algorithm == Algorithm::kTokenBucket);
  CHECK(merchant.limit->rule.burst == 40);
  CHECK(merchant.limit->on_failure == OnFailure::kClosed);
  const EnvoyMatch bin = find(ext, "payments", {{"card_bin", "4111"}});
  REQUIRE(bin.limit != nullptr);
  CHECK(bin.limit->rule.algorithm == Algorithm::kSlidingWindow);
  CHECK(bin.limit->rule.period_ms == 300'000);
  CHECK(bin.limit->unit == EnvoyUnit::kMinute);
  const EnvoyMatch premium = find(ext, "payments", {{"premium_merchant", "m1"}});
  REQUIRE(premium.limit != nullptr);
  CHECK(premium.limit->replaces == std::vector<std::string>{"per_merchant"});
}

TEST_CASE("a descriptor longer or shorter than the config finds no limit", "[envoy]") {
  const RuleSet set = parse_ok(R"(
domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
        value: x
        rate_limit: {unit: minute, requests_per_unit: 5}
)");
  CHECK(find(set, "d", {{"a", "1"}, {"b", "x"}}).limit != nullptr);
  CHECK(find(set, "d", {{"a", "1"}}).limit == nullptr);
  CHECK(find(set, "d", {{"a", "1"}, {"b", "y"}}).limit == nullptr);
  CHECK(find(set, "d", {{"a", "1"}, {"b", "x"}, {"c", "z"}}).limit == nullptr);
  CHECK(find(set, "d", {{"b", "x"}}).limit == nullptr);
  CHECK(find(set, "other", {{"a", "1"}, {"b", "x"}}).limit == nullptr);
  CHECK(find(set, "d", {}).limit == nullptr);
}

TEST_CASE("wildcards match in file order and a share_threshold wildcard counts as one key",
          "[envoy]") {
  const RuleSet set = parse_ok(R"(
domain: d
descriptors:
  - key: path
    value: /api/*/items*
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: path
    value: /api/*
    share_threshold: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: path
    value: /exact
    rate_limit: {unit: second, requests_per_unit: 3}
)");
  CHECK(find(set, "d", {{"path", "/api/v1/items/7"}}).limit->requests_per_unit == 1);
  const EnvoyMatch a = find(set, "d", {{"path", "/api/v1/users"}});
  const EnvoyMatch b = find(set, "d", {{"path", "/api/v2/orders"}});
  REQUIRE(a.limit != nullptr);
  CHECK(a.limit->requests_per_unit == 2);
  CHECK(a.counted_key == b.counted_key);
  CHECK(a.counted_key == "@rls:envoy:d:path=/api/*");
  CHECK(find(set, "d", {{"path", "/exact"}}).limit->requests_per_unit == 3);
  CHECK(find(set, "d", {{"path", "/ap"}}).limit == nullptr);
  CHECK(find(set, "d", {{"other", "/api/x"}}).limit == nullptr);
}

TEST_CASE("counted keys escape their separators and are cut to the longest key", "[envoy]") {
  const RuleSet set = parse_ok(R"(
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
)");
  // "k=a|b" and ("k", "a|b") must not be the same counter as another split of the bytes.
  const EnvoyMatch m = find(set, "d", {{"k", "a=b|c:d%#"}});
  CHECK(m.counted_key == "@rls:envoy:d:k=a%3Db%7Cc%3Ad%25%23");
  const EnvoyMatch long_value = find(set, "d", {{"k", std::string(1000, 'v')}});
  CHECK(long_value.counted_key.size() <= kDefaultMaxKeyBytes);
  CHECK(long_value.counted_key != find(set, "d", {{"k", std::string(999, 'v')}}).counted_key);
}

TEST_CASE("detailed_metric names the limit by the request's values", "[envoy]") {
  const RuleSet set = parse_ok(R"(
domain: d
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 1}
)");
  const EnvoyMatch m = find(set, "d", {{"user", "alice"}});
  REQUIRE(m.limit != nullptr);
  CHECK(m.stats_key == "d.user_alice");
  CHECK(m.limit->stats_key == "d.user");
}

TEST_CASE("units read in any case and map to the peer's periods", "[envoy]") {
  for (const auto& [text, seconds] :
       std::vector<std::pair<std::string, std::uint64_t>>{{"second", 1},
                                                          {"MINUTE", 60},
                                                          {"Hour", 3600},
                                                          {"day", 86'400},
                                                          {"week", 604'800},
                                                          {"month", 2'592'000},
                                                          {"year", 31'536'000}}) {
    INFO(text);
    const auto unit = parse_envoy_unit(text);
    REQUIRE(unit);
    CHECK(envoy_unit_seconds(*unit) == seconds);
  }
  CHECK_FALSE(parse_envoy_unit("unknown"));
  CHECK_FALSE(parse_envoy_unit("fortnight"));
}

TEST_CASE("errors are the peer's messages with file line and column", "[envoy]") {
  CHECK(errors_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: "
                  "fortnight\n      requests_per_unit: 1\n") ==
        std::vector<std::string>{"envoy.yaml:5:13: invalid rate limit unit 'fortnight'"});
  CHECK(errors_of("domain: d\ndescriptors:\n  - key: a\n  - key: a\n") ==
        std::vector<std::string>{"envoy.yaml:4:5: duplicate descriptor composite key 'd.a'"});
  CHECK(
      errors_of("domain: d\ndescriptors:\n  - key: a\n    value: v\n  - key: a\n    value: v\n") ==
      std::vector<std::string>{"envoy.yaml:5:5: duplicate descriptor composite key 'd.a_v'"});
  CHECK(errors_of("domain: \"\"\ndescriptors: []\n") ==
        std::vector<std::string>{"envoy.yaml:1:9: config file cannot have empty domain"});
  CHECK(errors_of("descriptors:\n  - key: a\n") ==
        std::vector<std::string>{"envoy.yaml:1:1: config file cannot have empty domain"});
  CHECK(errors_of("domain: d\ndescriptors:\n  - value: v\n") ==
        std::vector<std::string>{"envoy.yaml:3:5: descriptor has empty key"});
  CHECK(errors_of("domain: d\ndescriptors:\n  - key: a\n    rate_limits: {}\n") ==
        std::vector<std::string>{"envoy.yaml:4:5: config error, unknown key 'rate_limits'"});
  CHECK(errors_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n"
                  "      unit: second\n") ==
        std::vector<std::string>{
            "envoy.yaml:6:13: should not specify rate limit unit when unlimited"});
  CHECK(errors_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
                  "      name: me\n      replaces:\n        - name: me\n") ==
        std::vector<std::string>{
            "envoy.yaml:8:11: replaces should not contain name of same descriptor"});
  CHECK(errors_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n"
                  "      replaces:\n        - name: \"\"\n") ==
        std::vector<std::string>{"envoy.yaml:7:11: should not have an empty replaces entry"});
  CHECK(
      errors_of("domain: d\ndescriptors:\n  - key: a\n    value: v\n    share_threshold: true\n") ==
      std::vector<std::string>{"envoy.yaml:5:22: share_threshold can only be used with "
                               "wildcard values (containing '*'), but found key 'a_v'"});
  CHECK(errors_of("domain: d\ndescriptors:\n  - a\n") ==
        std::vector<std::string>{
            "envoy.yaml:3:5: config error, yaml file contains list of type other than map"});
  CHECK(errors_of("domain: d\ndescriptors:\n  - key: a\n    quota_mode: true\n") ==
        std::vector<std::string>{"envoy.yaml:4:17: quota_mode is not supported by Sluice"});
  // Every mistake of the file, not the first alone.
  CHECK(errors_of("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: x}\n  - key: b\n"
                  "    rate_limit: {unit: y}\n")
            .size() == 2);
  // A syntax error is the peer's "error loading config file".
  const auto syntax = errors_of("domain: d\ndescriptors: [\n");
  REQUIRE(syntax.size() == 1);
  CHECK(syntax[0].find("error loading config file: ") != std::string::npos);
}

TEST_CASE("the extensions are checked", "[envoy]") {
  const auto first = [](std::string_view rate_limit) {
    const auto errors = errors_of(
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: " + std::string(rate_limit) + "\n");
    return errors.empty() ? std::string() : errors.front();
  };
  CHECK(first("{unit: second, requests_per_unit: 1, algorithm: leaky}") ==
        "envoy.yaml:4:65: algorithm: expected fixed_window, sliding_window, sliding_log, "
        "token_bucket or gcra");
  CHECK(first("{unit: second, requests_per_unit: 1, unit_multiplier: 0}") ==
        "envoy.yaml:4:71: unit_multiplier: must be at least 1");
  CHECK(first("{unit: second, requests_per_unit: 1, unit_multiplier: 2, period: 5s}") ==
        "envoy.yaml:4:82: period: give either unit_multiplier or period, not both");
  CHECK(first("{unit: day, requests_per_unit: 1, unit_multiplier: 400}") ==
        "envoy.yaml:4:17: rate_limit: the period is longer than 366 days");
  CHECK(first("{unit: second, requests_per_unit: 1, failure_policy: maybe}") ==
        "envoy.yaml:4:70: failure_policy: expected open or closed");
  CHECK(first("{unlimited: true, algorithm: gcra}") ==
        "envoy.yaml:4:17: rate_limit: an unlimited limit has no algorithm or period");
  const RuleSet period = parse_ok(
      "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 9, "
      "period: 90s}\n");
  CHECK(find(period, "d", {{"a", "x"}}).limit->rule.period_ms == 90'000);
}

TEST_CASE("a second file of one domain is refused unless domains merge", "[envoy]") {
  const std::vector<SourceText> files = {
      {"one.yaml",
       "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, "
       "requests_per_unit: 1}\n"},
      {"two.yaml",
       "domain: d\ndescriptors:\n  - key: b\n    rate_limit: {unit: second, "
       "requests_per_unit: 2}\n"},
      {"three.yaml",
       "domain: e\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, "
       "requests_per_unit: 3}\n"}};
  auto refused = RuleSet::parse_files(files, "dir");
  REQUIRE_FALSE(refused);
  REQUIRE(refused.error().size() == 1);
  CHECK(refused.error()[0].to_string() == "two.yaml:1:9: duplicate domain 'd' in config file");

  RuleSetOptions merge;
  merge.merge_envoy_domains = true;
  auto merged = RuleSet::parse_files(files, "dir", merge);
  REQUIRE(merged);
  CHECK(merged->envoy().domain_count() == 2);
  CHECK(find(*merged, "d", {{"a", "x"}}).limit->requests_per_unit == 1);
  CHECK(find(*merged, "d", {{"b", "x"}}).limit->requests_per_unit == 2);
  CHECK(find(*merged, "e", {{"a", "x"}}).limit->requests_per_unit == 3);
  // Merging does not allow the same entry twice.
  const std::vector<SourceText> twice = {files[0], {"again.yaml", files[0].bytes}};
  auto duplicate = RuleSet::parse_files(twice, "dir", merge);
  REQUIRE_FALSE(duplicate);
  CHECK(duplicate.error()[0].to_string() ==
        "again.yaml:3:5: duplicate descriptor composite key 'd.a'");
}

TEST_CASE("a directory holds envoy configs beside at most one Sluice rules file", "[envoy]") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("sluice-envoy-dir-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
  };
  write("a.yaml",
        "domain: a\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
        "requests_per_unit: 1}\n");
  write("b.yml",
        "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, "
        "requests_per_unit: 2}\n");
  write(".hidden.yaml", "not: read");
  write("notes.txt", "not read either");
  write("sluice.yaml",
        "version: 1\npolicies:\n  p: {algorithm: fixed_window, limit: 1, period: 1s}\n"
        "matches:\n  - name: m\n    key: ip\n    policies: [p]\n");
  auto set = RuleSet::load(dir);
  if (!set) {
    for (const Diagnostic& d : set.error()) UNSCOPED_INFO(d.to_string());
  }
  REQUIRE(set);
  CHECK(set->envoy().domain_count() == 2);
  CHECK(set->policies().size() == 1);
  CHECK(set->source() == dir.string());

  write("sluice2.yaml",
        "version: 1\npolicies:\n  q: {algorithm: fixed_window, limit: 1, period: 1s}\n"
        "matches:\n  - name: n\n    key: ip\n    policies: [q]\n");
  auto two = RuleSet::load(dir);
  REQUIRE_FALSE(two);
  CHECK(two.error()[0].message.find("a second Sluice rules file") != std::string::npos);

  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto empty = RuleSet::load(dir);
  REQUIRE_FALSE(empty);
  CHECK(empty.error()[0].message == "cannot read the file: no .yaml or .yml file in the directory");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace sluice::rules
