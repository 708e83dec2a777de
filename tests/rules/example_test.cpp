// examples/rules.yaml parses and matches as its comments say: 5 per minute per API key on
// every path, the gold tier and Acme's override, a per-IP limit beside the per-key one.
#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "rules/rule_set.h"

namespace sluice::rules {
namespace {

#ifndef SLUICE_SOURCE_DIR
#error "SLUICE_SOURCE_DIR must be defined by the build (tests/CMakeLists.txt)"
#endif

RuleSet example() {
  auto parsed = RuleSet::load(std::string(SLUICE_SOURCE_DIR) + "/examples/rules.yaml");
  if (!parsed) {
    for (const Diagnostic& d : parsed.error()) UNSCOPED_INFO(d.to_string());
  }
  REQUIRE(parsed);
  return std::move(parsed).value();
}

TEST_CASE("the example limits every API key to 5 requests per minute on every path", "[example]") {
  const RuleSet set = example();
  for (const std::string_view path : {"/", "/v1/items", "/login", "/admin/x?y=1"}) {
    INFO(path);
    const auto limits = set.match(RequestAttributes{"GET", path, "", {{"X-API-Key", "k1"}}});
    REQUIRE(limits.size() == 2);
    CHECK(limits[0].key == "per_key:key_minute:k1");
    CHECK(limits[0].policy->rule.limit == 5);
    CHECK(limits[0].policy->rule.period_ms == 60'000);
    CHECK_FALSE(limits[0].policy->shadow);
    CHECK(limits[1].key == "everyone:everyone_second_trial:*");
    CHECK(limits[1].policy->shadow);
  }
  // The file says it in those words.
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/examples/rules.yaml");
  std::stringstream text;
  text << in.rdbuf();
  CHECK_THAT(text.str(), Catch::Contains("  key_minute:\n    algorithm: sliding_window\n"
                                         "    limit: 5\n    period: 1m\n"));
}

TEST_CASE("the example gives the gold tier its policy and acme its override", "[example]") {
  const RuleSet set = example();
  const auto gold =
      set.match(RequestAttributes{"GET", "/", "", {{"X-API-Key", "k2"}, {"X-Tier", "gold"}}});
  REQUIRE(gold.size() == 2);
  CHECK(gold[0].key == "per_key:gold_minute:k2");
  CHECK(gold[0].policy->rule.limit == 100);
  CHECK(gold[0].via == Via::kTier);

  const auto acme =
      set.match(RequestAttributes{"GET", "/", "", {{"X-API-Key", "acme"}, {"X-Tier", "gold"}}});
  REQUIRE(acme.size() == 2);
  CHECK(acme[0].key == "per_key:acme_minute:acme");
  CHECK(acme[0].via == Via::kOverride);
  CHECK(acme[0].policy->rule == Rule{Algorithm::kGcra, 1000, 60'000, 50});
}

TEST_CASE("the example puts a per-key and a per-IP limit on one request", "[example]") {
  const RuleSet set = example();
  const auto limits =
      set.match(RequestAttributes{"POST", "/login", "203.0.113.9", {{"X-API-Key", "k1"}}});
  REQUIRE(limits.size() == 4);
  CHECK(limits[0].key == "per_key:key_minute:k1");
  CHECK(limits[1].key == "per_ip:ip_second:203.0.113.9");
  CHECK(limits[1].policy->on_failure == OnFailure::kOpen);
  CHECK(limits[2].key == "login:login_attempts:203.0.113.9");
  CHECK(limits[2].policy->on_failure == OnFailure::kClosed);
  CHECK(limits[3].key == "everyone:everyone_second_trial:*");
  CHECK(set.policies().size() == 6);
  CHECK(set.matches().size() == 4);
}

// The first yaml block of docs/RULES.md, which the text after it describes.
std::string doc_example() {
  std::ifstream in(std::string(SLUICE_SOURCE_DIR) + "/docs/RULES.md");
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  const std::size_t start = doc.find("```yaml\n", doc.find("## A complete example"));
  REQUIRE(start != std::string::npos);
  const std::size_t end = doc.find("```\n", start + 8);
  REQUIRE(end != std::string::npos);
  return doc.substr(start + 8, end - start - 8);
}

TEST_CASE("the complete example of docs/RULES.md gives the limits its text says", "[example]") {
  const auto parsed = RuleSet::parse(doc_example(), "RULES.md");
  if (!parsed) {
    for (const Diagnostic& d : parsed.error()) UNSCOPED_INFO(d.to_string());
  }
  REQUIRE(parsed);
  std::vector<std::string> keys;
  for (const Limit& l :
       parsed->match(RequestAttributes{"GET", "/v1/items", "10.0.0.7", {{"X-API-Key", "k1"}}})) {
    keys.push_back(l.key);
  }
  CHECK(keys == std::vector<std::string>{"per_key:key_minute:k1", "per_key:key_hour:k1",
                                         "per_ip:ip_second:10.0.0.7",
                                         "everyone:new_limit_trial:*"});
  const auto gold = parsed->match(
      RequestAttributes{"GET", "/v1/items", "10.0.0.7", {{"X-API-Key", "k1"}, {"X-Tier", "gold"}}});
  CHECK(gold[0].key == "per_key:gold_minute:k1");
  const auto acme =
      parsed->match(RequestAttributes{"GET", "/v1/items", "10.0.0.7", {{"X-API-Key", "acme"}}});
  CHECK(acme[0].key == "per_key:acme_minute:acme");
  CHECK(acme[1].key == "per_ip:ip_second:10.0.0.7");
}

}  // namespace
}  // namespace sluice::rules
